// Tokenizers built from GGUF metadata: SentencePiece-style (tokenizer.ggml.model = "llama")
// and byte-level BPE ("gpt2") with the pre-tokenizer named by tokenizer.ggml.pre.
//
// Semantics follow the HF tokenizers that the GGUF files were converted from:
//  - SPM: spaces become U+2581; with add_space_prefix (default on) a space is put in front of
//    the text and in front of text that follows a special token; pieces merge by score;
//    characters without a piece fall back to <0xXX> byte tokens, else to the unknown token.
//  - BPE: the text is split by the family's regexes, each piece is mapped to the GPT-2 byte
//    alphabet and merged by merge rank (lowest first).
//  - Text equal to a user-defined token's text always becomes that token (as HF added tokens
//    do); control and unknown tokens' texts only with EncodeOptions::parse_special.
// A Tokenizer is immutable after construction and safe to use from several threads.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace ember {

class GgufFile;

// A missing or malformed tokenizer field (the message names the field, and the file when read
// from one), or a request the vocabulary cannot serve (an id outside it, BOS without one).
class TokenizerError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

using TokenId = int32_t;
inline constexpr TokenId kNoToken = -1;

// tokenizer.ggml.token_type values.
enum class TokenType : int32_t {
    Undefined = 0,
    Normal = 1,
    Unknown = 2,
    Control = 3,
    UserDefined = 4,
    Unused = 5,
    Byte = 6,
};

enum class TokenizerKind { Spm, Bpe };

// Everything the tokenizer reads from the file, decoupled from GGUF so tests and tools can
// build one directly. Ids are kNoToken when absent.
struct TokenizerSpec {
    std::string model;  // tokenizer.ggml.model: "llama" or "gpt2"
    std::string pre;    // tokenizer.ggml.pre; empty when absent
    std::vector<std::string> tokens;
    std::vector<float> scores;        // empty, or one per token
    std::vector<TokenType> types;     // empty (all Normal), or one per token
    std::vector<std::string> merges;  // "left right", rank = index; BPE only
    TokenId bos_id = kNoToken;
    TokenId eos_id = kNoToken;
    TokenId eot_id = kNoToken;
    TokenId eom_id = kNoToken;
    TokenId unk_id = kNoToken;
    TokenId pad_id = kNoToken;
    TokenId sep_id = kNoToken;
    std::optional<bool> add_bos;  // default: true for SPM and Llama-3 style BPE, else false
    std::optional<bool> add_eos;  // default: false
    std::optional<bool> add_space_prefix;  // SPM only; default true
};

// Reads the tokenizer.* metadata of a GGUF file without building a tokenizer (to inspect or
// adjust it). Throws TokenizerError naming the field that is missing or malformed.
TokenizerSpec tokenizer_spec_from_gguf(const GgufFile& file);

class Tokenizer;
// The tokenizer of the GGUF file at `path`, read from its metadata alone
// (GgufFile::open_metadata): the weights are neither mapped nor read, so a vocabulary-only
// file (no tensors) serves as well as a model. Throws GgufError / TokenizerError naming the
// file and field.
Tokenizer load_tokenizer(const std::string& path);

// A byte range [begin, end) of an encoder's input.
struct TextRange {
    size_t begin = 0;
    size_t end = 0;
};

struct EncodeOptions {
    bool add_bos = false;        // prepend bos_id (error if the vocabulary has none)
    bool parse_special = false;  // control-token text in the input becomes the token
    bool add_eos = false;        // append eos_id
    // With parse_special: ranges of the input that stay text even where they spell a control
    // token (a chat message's content inside its rendered template: the template's markup is
    // special, what a user typed is not). Sorted, not overlapping. A control token is taken only
    // where its text lies wholly outside them; the text around is tokenized as one piece.
    std::span<const TextRange> literal;
    // Asked every few thousand pieces of a long input (a 16 MiB attachment takes seconds);
    // true ends the encoding with EncodeStopped. Null: never asked. SPM text is asked between
    // its fragments only.
    const std::function<bool()>* stop = nullptr;
};

// encode() stopped because EncodeOptions::stop asked.
class EncodeStopped : public std::runtime_error {
public:
    EncodeStopped() : std::runtime_error("tokenizing stopped") {}
};

struct DecodeOptions {
    // Drop control, unknown and unused tokens; when false their text is rendered verbatim.
    bool skip_special = true;
    // SPM with add_space_prefix: drop the space that encoding put in front of the text, i.e.
    // one leading space of the output (as the HF decoder's Strip step does).
    bool strip_leading_space = true;
};

class Tokenizer {
public:
    // Reads the tokenizer.* metadata. Throws TokenizerError naming the field at fault.
    explicit Tokenizer(const GgufFile& file);
    explicit Tokenizer(TokenizerSpec spec);
    ~Tokenizer();
    Tokenizer(Tokenizer&&) noexcept;
    Tokenizer& operator=(Tokenizer&&) noexcept;
    Tokenizer(const Tokenizer&) = delete;
    Tokenizer& operator=(const Tokenizer&) = delete;

    std::vector<TokenId> encode(std::string_view text, const EncodeOptions& options = {}) const;
    // Text of the tokens. Byte sequences that are not valid UTF-8 (a character cut off by the
    // end of `ids`, say) become U+FFFD as in HF's decode, so decode(encode(s)) == s for valid
    // UTF-8 s (SPM: with the added leading space stripped). Throws TokenizerError for an id
    // outside the vocabulary.
    std::string decode(std::span<const TokenId> ids, const DecodeOptions& options = {}) const;
    // The bytes one token stands for, without any leading-space handling; special tokens give
    // their text when render_special, else nothing.
    std::string token_to_piece(TokenId id, bool render_special = false) const;

    TokenizerKind kind() const;
    const std::string& model_name() const;  // tokenizer.ggml.model
    const std::string& pre_name() const;    // tokenizer.ggml.pre ("" when absent)
    size_t vocab_size() const;
    // Vocabulary entry as stored (SPM text uses U+2581, BPE text the byte alphabet). Throws
    // TokenizerError for an id outside the vocabulary.
    const std::string& token_text(TokenId id) const;
    TokenType token_type(TokenId id) const;
    float token_score(TokenId id) const;
    // Exact lookup of a vocabulary entry's stored text.
    std::optional<TokenId> find_token(std::string_view text) const;
    // Control, unknown and unused tokens (what DecodeOptions::skip_special drops).
    bool is_special(TokenId id) const;
    // Where `text` spells a token that encoding takes as that token only with parse_special
    // (control-token text such as "<|im_end|>"; user-defined tokens, which plain text gets
    // too, are left out): the ranges in order, leftmost-longest as encode() finds them.
    std::vector<TextRange> control_token_spans(std::string_view text) const;

    TokenId bos_id() const;
    TokenId eos_id() const;
    TokenId eot_id() const;  // from metadata, else a token named like <|eot_id|>, <|im_end|>
    TokenId eom_id() const;
    TokenId unk_id() const;
    TokenId pad_id() const;
    TokenId sep_id() const;
    bool add_bos() const;  // what the model asks for (tokenizer.ggml.add_bos_token or default)
    bool add_eos() const;
    bool add_space_prefix() const;  // always false for BPE
    // Tokens that end generation: eos, eot, eom and non-normal tokens with a well-known
    // end-of-turn text (<|im_end|>, <|eot_id|>, <|endoftext|>, <end_of_turn>, ...). Sorted.
    const std::vector<TokenId>& eog_ids() const;
    bool is_eog(TokenId id) const;

private:
    friend class StreamingDetokenizer;
    struct Impl;
    std::unique_ptr<const Impl> impl_;
};

// Turns generated ids into text as they come, emitting only complete UTF-8: bytes of a
// character split across tokens (byte-fallback tokens, byte-level BPE pieces) are held back
// until the character is complete. Bytes that can never form valid UTF-8 are emitted as
// U+FFFD, so everything returned is valid UTF-8. Leading-space stripping and special-token
// handling follow DecodeOptions, as in Tokenizer::decode.
class StreamingDetokenizer {
public:
    explicit StreamingDetokenizer(const Tokenizer& tokenizer, DecodeOptions options = {});

    // Text completed by this token (often empty while a character is incomplete).
    std::string push(TokenId id);
    // Whatever is still held back, incomplete sequences as U+FFFD; then starts afresh.
    std::string flush();
    // Forgets held-back bytes and starts a new text (the next piece counts as the first).
    void reset();
    size_t pending_bytes() const { return pending_.size(); }

private:
    std::string take_valid(bool final);

    const Tokenizer* tokenizer_;
    DecodeOptions options_;
    std::string pending_;
    bool at_start_ = true;
};

}  // namespace ember
