#include "engine/tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>
#include <stdexcept>

#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/unicode.h"

namespace ember::tok {

namespace {

// The split patterns below are those of the models' tokenizer.json files (as llama.cpp
// transcribes them), with `(?i:'s|...)` spelled as explicit character classes so that Unicode
// case folding cannot widen them (PCRE2 would let `(?i:s)` match U+017F).
constexpr const char* kContractions =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]))";

// GPT-2's ByteLevel pattern.
constexpr const char* kGpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::string llama3_like(const char* digits) {
    return std::string(kContractions) + R"(|[^\r\n\p{L}\p{N}]?\p{L}+|)" + digits +
           R"(| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
}

struct NamedPre {
    std::vector<std::string_view> names;
    PreTokenizerSpec spec;
};

std::vector<NamedPre> make_table() {
    const std::string llama3 = llama3_like(R"(\p{N}{1,3})");
    const std::string qwen2 = llama3_like(R"(\p{N})");
    const std::string qwen35 =
        std::string(kContractions) +
        R"(|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
    const std::string case_split_tail = R"(| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
    const std::string upper = R"([\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}])";
    const std::string lower = R"([\p{Ll}\p{Lm}\p{Lo}\p{M}])";
    const std::string lead = R"([^\r\n\p{L}\p{N}]?)";
    const std::string tekken = lead + upper + "*" + lower + "+|" + lead + upper + "+" + lower +
                               R"(*|\p{N})" + case_split_tail;
    const std::string contr_opt = std::string(kContractions) + "?";
    const std::string gpt4o = lead + upper + "*" + lower + "+" + contr_opt + "|" + lead + upper +
                              "+" + lower + "*" + contr_opt + R"(|\p{N}{1,3})" + case_split_tail;
    // Deepseek's letter class enumerates the cased letters (Lu, Ll, Lt), which PCRE2 names L&.
    const std::string cjk_hangul = R"([\x{4E00}-\x{9FA5}\x{0800}-\x{4E00}\x{AC00}-\x{D7FF}]+)";
    const std::string bloom =
        R"( ?[^(\s|.,!?\x{2026}\x{3002}\x{FF0C}\x{3001}\x{0964}\x{06D4}\x{060C})]+)";

    return {
        {{"default"}, {{R"([\p{P}\$\+<=>\^~\|]+)", kGpt2, R"(\p{N}+)", "[0-9][0-9][0-9]"}, false}},
        {{"gpt-2", "phi-2", "mpt", "olmo", "jais", "exaone4", "jina-es", "jina-de", "jina-v2-es",
          "jina-v2-de", "roberta-bpe", "trillion", "granite-docling"},
         {{kGpt2}, false}},
        {{"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2"},
         {{llama3}, true, true}},
        // Same pattern as Llama 3, but their tokenizer.json files do not set ignore_merges.
        {{"smaug-bpe", "dbrx", "chatglm-bpe", "glm4"}, {{llama3}, false}},
        {{"qwen2", "deepseek-r1-qwen", "megrez", "stablelm2", "hunyuan"}, {{qwen2}, false}},
        {{"qwen35"}, {{qwen35}, false}},
        {{"starcoder", "smollm", "refact", "command-r", "codeshell", "exaone", "minerva-7b"},
         {{R"(\p{N})", kGpt2}, false}},
        {{"falcon"}, {{R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2, "[0-9][0-9][0-9]"}, false}},
        {{"deepseek-llm"},
         {{R"([\r\n])", R"(\s?\p{L&}+)",
           R"(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)",
           R"(\s+$)", cjk_hangul, R"(\p{N}+)"},
          false}},
        {{"deepseek-coder"},
         {{R"([\r\n])", R"(\s?\p{L}+)", R"(\s?\p{P}+)", cjk_hangul, R"(\p{N})"}, false}},
        {{"deepseek-v3"},
         {{R"(\p{N}{1,3})", R"([\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)",
           R"re([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re"},
          false}},
        {{"tekken"}, {{tekken}, true, true}},
        {{"gpt-4o", "llama4"}, {{gpt4o}, false}},
        {{"poro-chat", "bloom", "gpt3-finnish"}, {{bloom}, false}},
        {{"viking"}, {{bloom, R"(\p{N})"}, false}},
    };
}

const std::vector<NamedPre>& table() {
    static const std::vector<NamedPre> t = make_table();
    return t;
}

}  // namespace

const PreTokenizerSpec* find_pre_tokenizer(std::string_view pre) {
    if (pre.empty()) pre = "default";
    for (const NamedPre& p : table()) {
        for (std::string_view n : p.names) {
            if (n == pre) return &p.spec;
        }
    }
    return nullptr;
}

std::vector<std::string_view> pre_tokenizer_names() {
    std::vector<std::string_view> names;
    for (const NamedPre& p : table()) names.insert(names.end(), p.names.begin(), p.names.end());
    return names;
}

struct RegexSplitter::Compiled {
    pcre2_code* code = nullptr;
    ~Compiled() { pcre2_code_free(code); }
};

RegexSplitter::RegexSplitter(const std::vector<std::string>& regexes) {
    for (const std::string& re : regexes) {
        int err = 0;
        PCRE2_SIZE err_off = 0;
        // MATCH_INVALID_UTF: text that is not valid UTF-8 must still tokenize (byte-level BPE
        // can represent any bytes); invalid bytes simply never match and end up in gaps.
        pcre2_code* code =
            pcre2_compile(reinterpret_cast<PCRE2_SPTR>(re.data()), re.size(),
                          PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &err_off, nullptr);
        if (!code) {
            std::array<PCRE2_UCHAR, 256> msg{};
            pcre2_get_error_message(err, msg.data(), msg.size());
            throw std::runtime_error("pre-tokenizer regex '" + re +
                                     "' does not compile at offset " + std::to_string(err_off) +
                                     ": " + reinterpret_cast<const char*>(msg.data()));
        }
        auto c = std::make_unique<Compiled>();
        c->code = code;
        // JIT is an optimisation only: when unavailable the interpreter gives the same matches.
        (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
        compiled_.push_back(std::move(c));
    }
}

RegexSplitter::~RegexSplitter() = default;

namespace {

struct MatchData {
    explicit MatchData(const pcre2_code* code)
        : md(pcre2_match_data_create_from_pattern(code, nullptr)) {
        if (!md) throw std::bad_alloc();
    }
    ~MatchData() { pcre2_match_data_free(md); }
    MatchData(const MatchData&) = delete;
    MatchData& operator=(const MatchData&) = delete;
    pcre2_match_data* md;
};

// Advances past one character, or one byte where the text is not valid UTF-8.
size_t next_char(std::string_view s, size_t pos) {
    const Utf8Step st = utf8_step(s.substr(pos));
    return pos + (st.status == Utf8Status::Valid ? st.length : 1);
}

// Splits s[begin, end) by one regex, appending the resulting ranges to `out`.
// Matches between two questions to a splitter's `stop`: well under a millisecond of matching.
constexpr size_t kMatchesPerQuestion = 4096;

void split_piece(const pcre2_code* code, pcre2_match_data* md, std::string_view s, size_t begin,
                 size_t end, std::vector<std::pair<size_t, size_t>>& out,
                 const std::function<bool()>* stop, size_t& matches) {
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data() + begin);
    const size_t len = end - begin;
    const std::string_view piece = s.substr(begin, len);
    size_t last = 0;    // end of what has been emitted, relative to begin
    size_t offset = 0;  // where the next search starts
    while (offset <= len) {
        if (stop != nullptr && ++matches % kMatchesPerQuestion == 0 && (*stop)()) {
            throw EncodeStopped();
        }
        int rc = pcre2_match(code, subject, len, offset, 0, md, nullptr);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
            // Very long runs can exhaust the JIT stack; the interpreter uses the heap.
            rc = pcre2_match(code, subject, len, offset, PCRE2_NO_JIT, md, nullptr);
        }
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            std::array<PCRE2_UCHAR, 256> msg{};
            pcre2_get_error_message(rc, msg.data(), msg.size());
            throw std::runtime_error(std::string("pre-tokenizer regex match failed: ") +
                                     reinterpret_cast<const char*>(msg.data()));
        }
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
        const size_t ms = ov[0], me = ov[1];
        if (ms > last) out.emplace_back(begin + last, begin + ms);
        if (me > ms) {
            out.emplace_back(begin + ms, begin + me);
            last = me;
            offset = me;
        } else {
            // An empty match only marks a split point.
            last = ms;
            if (ms >= len) break;
            offset = next_char(piece, ms);
        }
    }
    if (last < len) out.emplace_back(begin + last, end);
}

}  // namespace

std::vector<std::pair<size_t, size_t>> RegexSplitter::split(
    std::string_view text, const std::function<bool()>* stop) const {
    std::vector<std::pair<size_t, size_t>> pieces;
    size_t matches = 0;
    if (text.empty()) return pieces;
    pieces.emplace_back(0, text.size());
    std::vector<std::pair<size_t, size_t>> next;
    for (const auto& c : compiled_) {
        MatchData md(c->code);
        next.clear();
        next.reserve(pieces.size() * 2);
        for (const auto& [b, e] : pieces) {
            split_piece(c->code, md.md, text, b, e, next, stop, matches);
        }
        pieces.swap(next);
    }
    return pieces;
}

}  // namespace ember::tok
