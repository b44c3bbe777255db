// Regex pre-tokenizers of the byte-level BPE families, chosen by `tokenizer.ggml.pre`.
//
// Internal to engine/tokenizer. A pre-tokenizer is a sequence of regexes; each one splits every
// piece the previous one produced into its matches and the gaps between them (HF "Split" with
// behavior "Isolated"), so several regexes applied in turn can first isolate, say, digits and
// then split words. Each regex only sees the piece it splits, as in HF, so look-arounds stop
// at piece boundaries.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace ember::tok {

struct PreTokenizerSpec {
    std::vector<std::string> regexes;
    // The whole pre-token is looked up in the vocabulary before merging (HF BPE
    // `ignore_merges`, set in Llama-3 style tokenizer.json files).
    bool ignore_merges = false;
    // Whether a BOS token is added when the file does not say (llama.cpp's defaults: the
    // Llama-3 family asks for one).
    bool add_bos_default = false;
};

// The regexes for a `tokenizer.ggml.pre` value; nullptr for an unknown name. An empty name
// means the field is absent, which gets the "default" set as in llama.cpp.
const PreTokenizerSpec* find_pre_tokenizer(std::string_view pre);
// Every name find_pre_tokenizer knows.
std::vector<std::string_view> pre_tokenizer_names();

class RegexSplitter {
public:
    // Compiles the regexes (PCRE2, UTF + UCP); throws std::runtime_error with the offending
    // pattern and PCRE2's message if one does not compile.
    explicit RegexSplitter(const std::vector<std::string>& regexes);
    ~RegexSplitter();
    RegexSplitter(const RegexSplitter&) = delete;
    RegexSplitter& operator=(const RegexSplitter&) = delete;

    // Byte ranges [begin, end) of the pieces of `text`, in order, covering all of it. Safe to
    // call from several threads at once (match data is per call). `stop` (may be null) is
    // asked every few thousand matches; true ends the split with EncodeStopped.
    std::vector<std::pair<size_t, size_t>> split(std::string_view text,
                                                 const std::function<bool()>* stop = nullptr) const;

private:
    struct Compiled;
    std::vector<std::unique_ptr<Compiled>> compiled_;
};

}  // namespace ember::tok
