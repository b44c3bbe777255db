#include "engine/tokenizer/tokenizer.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <queue>
#include <tuple>
#include <unordered_map>

#include "engine/gguf/gguf.h"
#include "engine/tokenizer/flat_index.h"
#include "engine/tokenizer/pretokenizer.h"
#include "engine/tokenizer/unicode.h"

namespace ember {

namespace {

constexpr const char* kKeyModel = "tokenizer.ggml.model";
constexpr const char* kKeyPre = "tokenizer.ggml.pre";
constexpr const char* kKeyTokens = "tokenizer.ggml.tokens";
constexpr const char* kKeyScores = "tokenizer.ggml.scores";
constexpr const char* kKeyTypes = "tokenizer.ggml.token_type";
constexpr const char* kKeyMerges = "tokenizer.ggml.merges";
constexpr const char* kKeyBos = "tokenizer.ggml.bos_token_id";
constexpr const char* kKeyEos = "tokenizer.ggml.eos_token_id";
constexpr const char* kKeyEot = "tokenizer.ggml.eot_token_id";
constexpr const char* kKeyEom = "tokenizer.ggml.eom_token_id";
constexpr const char* kKeyUnk = "tokenizer.ggml.unknown_token_id";
constexpr const char* kKeyPad = "tokenizer.ggml.padding_token_id";
constexpr const char* kKeySep = "tokenizer.ggml.seperator_token_id";  // sic, as in GGUF
constexpr const char* kKeyAddBos = "tokenizer.ggml.add_bos_token";
constexpr const char* kKeyAddEos = "tokenizer.ggml.add_eos_token";
constexpr const char* kKeyAddSpacePrefix = "tokenizer.ggml.add_space_prefix";

constexpr std::string_view kSpmSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's space

[[noreturn]] void field_error(std::string_view key, const std::string& problem) {
    throw TokenizerError("tokenizer field '" + std::string(key) + "': " + problem);
}

// Runs a GgufFile getter, turning its type complaints into a TokenizerError for the field.
// (The file name is added once, by the Tokenizer(const GgufFile&) constructor.)
template <class F>
auto read_field(const GgufFile& f, std::string_view key, F&& get) {
    try {
        return get();
    } catch (const GgufError& e) {
        std::string msg = e.what();
        const std::string prefix = f.path() + ": ";
        if (msg.rfind(prefix, 0) == 0) msg.erase(0, prefix.size());
        field_error(key, msg);
    }
}

TokenId read_id(const GgufFile& f, const char* key) {
    const std::optional<int64_t> v = read_field(f, key, [&] { return f.get_int(key); });
    // Converters write -1 (or its uint32 image) for "no such token".
    if (!v || *v < 0 || *v == 0xFFFFFFFFll) return kNoToken;
    if (*v > std::numeric_limits<TokenId>::max())
        field_error(key, "id " + std::to_string(*v) + " is too large");
    return static_cast<TokenId>(*v);
}

const GgufArray* read_array(const GgufFile& f, const char* key) {
    return read_field(f, key, [&] { return f.get_array(key); });
}

std::string array_type_name(const GgufArray& a) {
    return "array of " + std::string(gguf_value_type_name(a.elem_type));
}

bool is_int_type(GgufValueType t) {
    switch (t) {
        case GgufValueType::U8:
        case GgufValueType::I8:
        case GgufValueType::U16:
        case GgufValueType::I16:
        case GgufValueType::U32:
        case GgufValueType::I32:
        case GgufValueType::I64:
            return true;
        default:
            return false;
    }
}

}  // namespace

TokenizerSpec tokenizer_spec_from_gguf(const GgufFile& f) {
    TokenizerSpec s;
    std::optional<std::string> model =
        read_field(f, kKeyModel, [&] { return f.get_string(kKeyModel); });
    if (!model) throw TokenizerError("missing tokenizer field '" + std::string(kKeyModel) + "'");
    s.model = std::move(*model);
    s.pre = read_field(f, kKeyPre, [&] { return f.get_string(kKeyPre); }).value_or("");

    const GgufArray* tokens = read_array(f, kKeyTokens);
    if (!tokens) throw TokenizerError("missing tokenizer field '" + std::string(kKeyTokens) + "'");
    if (tokens->elem_type != GgufValueType::STRING) {
        field_error(kKeyTokens, "should be an array of strings, is " + array_type_name(*tokens));
    }
    s.tokens = tokens->strings;

    if (const GgufArray* scores = read_array(f, kKeyScores)) {
        if (scores->elem_type == GgufValueType::F32 || scores->elem_type == GgufValueType::F64) {
            s.scores.assign(scores->floats.begin(), scores->floats.end());
        } else if (is_int_type(scores->elem_type)) {
            s.scores.assign(scores->ints.begin(), scores->ints.end());
        } else {
            field_error(kKeyScores,
                        "should be an array of numbers, is " + array_type_name(*scores));
        }
    }
    if (const GgufArray* types = read_array(f, kKeyTypes)) {
        if (!is_int_type(types->elem_type)) {
            field_error(kKeyTypes, "should be an array of integers, is " + array_type_name(*types));
        }
        s.types.reserve(types->ints.size());
        for (size_t i = 0; i < types->ints.size(); ++i) {
            const int64_t t = types->ints[i];
            if (t < 0 || t > static_cast<int64_t>(TokenType::Byte)) {
                field_error(kKeyTypes, "token " + std::to_string(i) + " has unknown type " +
                                           std::to_string(t));
            }
            s.types.push_back(static_cast<TokenType>(t));
        }
    }
    if (const GgufArray* merges = read_array(f, kKeyMerges)) {
        if (merges->elem_type != GgufValueType::STRING) {
            field_error(kKeyMerges,
                        "should be an array of strings, is " + array_type_name(*merges));
        }
        s.merges = merges->strings;
    } else if (s.model == "gpt2") {
        throw TokenizerError("missing tokenizer field '" + std::string(kKeyMerges) +
                             "' (required by BPE tokenizers)");
    }

    s.bos_id = read_id(f, kKeyBos);
    s.eos_id = read_id(f, kKeyEos);
    s.eot_id = read_id(f, kKeyEot);
    s.eom_id = read_id(f, kKeyEom);
    s.unk_id = read_id(f, kKeyUnk);
    s.pad_id = read_id(f, kKeyPad);
    s.sep_id = read_id(f, kKeySep);
    s.add_bos = read_field(f, kKeyAddBos, [&] { return f.get_bool(kKeyAddBos); });
    s.add_eos = read_field(f, kKeyAddEos, [&] { return f.get_bool(kKeyAddEos); });
    s.add_space_prefix =
        read_field(f, kKeyAddSpacePrefix, [&] { return f.get_bool(kKeyAddSpacePrefix); });
    return s;
}

namespace {

// Texts that mark the end of a turn across model families (as llama.cpp recognises them);
// the first one present is the EOT token when the file names none, and all present end
// generation.
constexpr std::string_view kEndOfTurnTexts[] = {
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<end_of_utterance>",
    "<\xEF\xBD\x9C"
    "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",  // DeepSeek
    "<|eom_id|>",
    "<|return|>",
    "<|call|>",
    "[EOS]",
};

// Leftmost-longest matching of special-token texts (HF added-token semantics).
class SpecialMatcher {
public:
    SpecialMatcher() { root_.fill(-1); }

    void add(std::string_view text, TokenId id, bool always) {
        if (text.empty()) return;
        int32_t node = -1;
        for (size_t i = 0; i < text.size(); ++i) {
            const auto c = static_cast<unsigned char>(text[i]);
            int32_t child = -1;
            if (node < 0) {
                child = root_[c];
            } else {
                for (const auto& [ch, idx] : nodes_[node].next) {
                    if (ch == c) child = idx;
                }
            }
            if (child < 0) {
                child = static_cast<int32_t>(nodes_.size());
                nodes_.emplace_back();
                if (node < 0) {
                    root_[c] = child;
                } else {
                    nodes_[node].next.emplace_back(c, child);
                }
            }
            node = child;
        }
        Node& n = nodes_[node];
        // The same text twice: the first id wins, as in the vocabulary lookup.
        if (n.id == kNoToken) {
            n.id = id;
            n.always = always;
        }
        has_always_ = has_always_ || always;
        empty_ = false;
    }

    bool empty(bool parse_special) const { return parse_special ? empty_ : !has_always_; }

    // Longest acceptable special text starting at text[pos]: {id, length} or {kNoToken, 0}.
    std::pair<TokenId, size_t> match(std::string_view text, size_t pos, bool parse_special) const {
        int32_t node = root_[static_cast<unsigned char>(text[pos])];
        std::pair<TokenId, size_t> best{kNoToken, 0};
        size_t i = pos;
        while (node >= 0) {
            const Node& n = nodes_[node];
            ++i;
            if (n.id != kNoToken && (parse_special || n.always)) best = {n.id, i - pos};
            if (i >= text.size()) break;
            const auto c = static_cast<unsigned char>(text[i]);
            int32_t child = -1;
            for (const auto& [ch, idx] : n.next) {
                if (ch == c) {
                    child = idx;
                    break;
                }
            }
            node = child;
        }
        return best;
    }

private:
    struct Node {
        std::vector<std::pair<unsigned char, int32_t>> next;
        TokenId id = kNoToken;
        bool always = false;  // user-defined: matched even without parse_special
    };
    std::array<int32_t, 256> root_{};
    std::vector<Node> nodes_;
    bool has_always_ = false;
    bool empty_ = true;
};

struct Fragment {
    TokenId token = kNoToken;  // kNoToken: raw text [begin, end)
    size_t begin = 0, end = 0;
};

}  // namespace

struct Tokenizer::Impl {
    TokenizerKind kind = TokenizerKind::Spm;
    std::string model;
    std::string pre;
    std::vector<std::string> tokens;
    std::vector<float> scores;
    std::vector<TokenType> types;
    // Indexes into `tokens`, which is never modified after they are built.
    tok::TextIndex token_to_id;

    TokenId bos = kNoToken, eos = kNoToken, eot = kNoToken, eom = kNoToken, unk = kNoToken,
            pad = kNoToken, sep = kNoToken;
    bool add_bos = false, add_eos = false, add_space_prefix = false;
    std::vector<TokenId> eog;
    SpecialMatcher specials;

    // SPM: pieces that take part in merging (normal, user-defined, unused), <0xXX> tokens.
    tok::TextIndex spm_pieces;
    std::array<TokenId, 256> byte_tokens{};

    // BPE: token of each byte's byte-level character; merges by id pair.
    std::array<TokenId, 256> bpe_byte_ids{};
    tok::PairIndex merges;
    std::unique_ptr<tok::RegexSplitter> splitter;
    bool ignore_merges = false;

    explicit Impl(TokenizerSpec spec);

    TokenType type_of(TokenId id) const {
        return types.empty() ? TokenType::Normal : types[static_cast<size_t>(id)];
    }
    bool special(TokenId id) const {
        const TokenType t = type_of(id);
        return t == TokenType::Control || t == TokenType::Unknown || t == TokenType::Unused;
    }
    void check_id(TokenId id) const {
        if (id < 0 || static_cast<size_t>(id) >= tokens.size()) {
            throw TokenizerError("token id " + std::to_string(id) +
                                 " is outside the vocabulary of " + std::to_string(tokens.size()) +
                                 " tokens");
        }
    }

    std::vector<Fragment> partition(std::string_view text, bool parse_special,
                                    std::span<const TextRange> literal) const;
    void encode_spm(std::string_view raw, bool space_prefix, std::vector<TokenId>& out) const;
    void encode_bpe(std::string_view raw, std::vector<TokenId>& out,
                    const std::function<bool()>* stop) const;
    void bpe_word(std::string_view bytes, std::vector<TokenId>& out) const;
    void append_piece(TokenId id, bool render_special, std::string& out) const;
    // append_piece for running text: the first piece that produces anything loses the space
    // SPM encoding put in front (when the options ask for that); clears *at_start then.
    void append_text(TokenId id, const DecodeOptions& options, bool* at_start,
                     std::string& out) const {
        const size_t before = out.size();
        append_piece(id, !options.skip_special, out);
        if (*at_start && out.size() > before) {
            *at_start = false;
            if (options.strip_leading_space && kind == TokenizerKind::Spm && add_space_prefix &&
                out[before] == ' ') {
                out.erase(before, 1);
            }
        }
    }
};

Tokenizer::Impl::Impl(TokenizerSpec spec) {
    model = std::move(spec.model);
    pre = std::move(spec.pre);
    if (model == "llama") {
        kind = TokenizerKind::Spm;
    } else if (model == "gpt2") {
        kind = TokenizerKind::Bpe;
    } else {
        field_error(kKeyModel,
                    "unsupported tokenizer model '" + model + "' (supported: llama, gpt2)");
    }
    tokens = std::move(spec.tokens);
    scores = std::move(spec.scores);
    types = std::move(spec.types);
    const size_t n = tokens.size();
    if (n == 0) field_error(kKeyTokens, "the vocabulary is empty");
    if (n > static_cast<size_t>(std::numeric_limits<TokenId>::max())) {
        field_error(kKeyTokens, "too many tokens (" + std::to_string(n) + ")");
    }
    if (!scores.empty() && scores.size() != n) {
        field_error(kKeyScores, "has " + std::to_string(scores.size()) + " entries for " +
                                    std::to_string(n) + " tokens");
    }
    if (!types.empty() && types.size() != n) {
        field_error(kKeyTypes, "has " + std::to_string(types.size()) + " entries for " +
                                   std::to_string(n) + " tokens");
    }

    const std::array<std::pair<const char*, TokenId*>, 7> ids = {{{kKeyBos, &bos},
                                                                  {kKeyEos, &eos},
                                                                  {kKeyEot, &eot},
                                                                  {kKeyEom, &eom},
                                                                  {kKeyUnk, &unk},
                                                                  {kKeyPad, &pad},
                                                                  {kKeySep, &sep}}};
    const std::array<TokenId, 7> given = {spec.bos_id, spec.eos_id, spec.eot_id, spec.eom_id,
                                          spec.unk_id, spec.pad_id, spec.sep_id};
    for (size_t i = 0; i < ids.size(); ++i) {
        const TokenId id = given[i] < 0 ? kNoToken : given[i];
        if (id != kNoToken && static_cast<size_t>(id) >= n) {
            field_error(ids[i].first, "id " + std::to_string(id) +
                                          " is outside the vocabulary of " + std::to_string(n) +
                                          " tokens");
        }
        *ids[i].second = id;
    }

    // Duplicates do occur in converted vocabularies; lookups then give the first id.
    token_to_id.build(tokens, [](size_t) { return true; });

    // Without per-token types, at least the ids the file names are special.
    if (types.empty()) {
        types.assign(n, TokenType::Normal);
        for (TokenId id : {bos, eos, eot, eom}) {
            if (id != kNoToken) types[static_cast<size_t>(id)] = TokenType::Control;
        }
        if (unk != kNoToken) types[static_cast<size_t>(unk)] = TokenType::Unknown;
    }

    for (size_t i = 0; i < n; ++i) {
        const TokenType t = types[i];
        if (t == TokenType::Control || t == TokenType::Unknown) {
            specials.add(tokens[i], static_cast<TokenId>(i), false);
        } else if (t == TokenType::UserDefined) {
            specials.add(tokens[i], static_cast<TokenId>(i), true);
        }
    }

    if (kind == TokenizerKind::Spm) {
        add_space_prefix = spec.add_space_prefix.value_or(true);
        add_bos = spec.add_bos.value_or(true);
        byte_tokens.fill(kNoToken);
        for (size_t i = 0; i < n; ++i) {
            const TokenType t = types[i];
            const std::string& s = tokens[i];
            if (t == TokenType::Byte) {
                // "<0xXX>"
                unsigned v = 0;
                bool ok = s.size() == 6 && s.compare(0, 3, "<0x") == 0 && s[5] == '>';
                for (size_t k = 3; ok && k < 5; ++k) {
                    const char c = s[k];
                    v *= 16;
                    if (c >= '0' && c <= '9') {
                        v += static_cast<unsigned>(c - '0');
                    } else if (c >= 'A' && c <= 'F') {
                        v += static_cast<unsigned>(c - 'A' + 10);
                    } else if (c >= 'a' && c <= 'f') {
                        v += static_cast<unsigned>(c - 'a' + 10);
                    } else {
                        ok = false;
                    }
                }
                if (!ok)
                    field_error(kKeyTokens, "byte token " + std::to_string(i) + " is '" + s +
                                                "', expected <0xXX>");
                if (byte_tokens[v] == kNoToken) byte_tokens[v] = static_cast<TokenId>(i);
            }
        }
        spm_pieces.build(tokens, [&](size_t i) {
            const TokenType t = types[i];
            return t == TokenType::Normal || t == TokenType::UserDefined ||
                   t == TokenType::Unused || t == TokenType::Undefined;
        });
        if (scores.empty()) scores.assign(n, 0.0f);
        // A NaN score would break the merge queue's ordering; such a piece never wins.
        for (float& s : scores) {
            if (std::isnan(s)) s = -std::numeric_limits<float>::infinity();
        }
    } else {
        const tok::PreTokenizerSpec* p = tok::find_pre_tokenizer(pre);
        if (!p) field_error(kKeyPre, "unknown pre-tokenizer '" + pre + "'");
        try {
            splitter = std::make_unique<tok::RegexSplitter>(p->regexes);
        } catch (const std::runtime_error& e) {
            field_error(kKeyPre, e.what());
        }
        ignore_merges = p->ignore_merges;
        add_space_prefix = false;
        add_bos = spec.add_bos.value_or(p->add_bos_default);

        const tok::ByteLevelTables& bl = tok::byte_level_tables();
        for (size_t b = 0; b < 256; ++b) {
            std::string ch;
            append_utf8(ch, bl.byte_to_cp[b]);
            bpe_byte_ids[b] = token_to_id.find(ch);
        }

        merges.reserve(spec.merges.size());
        std::string joined;
        for (size_t r = 0; r < spec.merges.size(); ++r) {
            const std::string& m = spec.merges[r];
            // The separator is the first space after the first character: a left part may
            // itself begin with a space in vocabularies that do not use the byte alphabet.
            const size_t sp = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
            if (sp == std::string::npos || sp + 1 >= m.size()) {
                field_error(kKeyMerges, "merge " + std::to_string(r) + " is '" + m +
                                            "', expected 'left right'");
            }
            const std::string_view left(m.data(), sp);
            const std::string_view right(m.data() + sp + 1, m.size() - sp - 1);
            const TokenId l = token_to_id.find(left);
            const TokenId rt = token_to_id.find(right);
            if (l < 0 || rt < 0) continue;  // cannot apply: a side is not a token
            joined.assign(left);
            joined += right;
            const TokenId res = token_to_id.find(joined);
            if (res < 0) continue;  // its result would not be a token
            merges.insert(l, rt, {static_cast<int32_t>(r), res});
        }
    }
    add_eos = spec.add_eos.value_or(false);

    // End of turn / generation.
    if (eom == kNoToken) {
        eom = token_to_id.find("<|eom_id|>");
    }
    if (eot == kNoToken) {
        for (std::string_view t : kEndOfTurnTexts) {
            const TokenId id = token_to_id.find(t);
            if (id >= 0 && type_of(id) != TokenType::Normal) {
                eot = id;
                break;
            }
        }
    }
    for (TokenId id : {eos, eot, eom}) {
        if (id != kNoToken) eog.push_back(id);
    }
    for (std::string_view t : kEndOfTurnTexts) {
        const TokenId id = token_to_id.find(t);
        if (id >= 0 && type_of(id) != TokenType::Normal) eog.push_back(id);
    }
    std::sort(eog.begin(), eog.end());
    eog.erase(std::unique(eog.begin(), eog.end()), eog.end());
}

std::vector<Fragment> Tokenizer::Impl::partition(std::string_view text, bool parse_special,
                                                 std::span<const TextRange> literal) const {
    std::vector<Fragment> out;
    if (text.empty()) return out;
    if (specials.empty(parse_special)) {
        out.push_back({kNoToken, 0, text.size()});
        return out;
    }
    size_t raw_start = 0;
    size_t i = 0;
    size_t next_literal = 0;  // the first literal range that does not end at or before i
    while (i < text.size()) {
        while (next_literal < literal.size() && literal[next_literal].end <= i) ++next_literal;
        // Inside a literal range the text is encoded as without parse_special (user-defined
        // tokens, matched always, still are); so is a control token running into one.
        const bool in_literal = next_literal < literal.size() && literal[next_literal].begin <= i;
        auto [id, len] = specials.match(text, i, parse_special && !in_literal);
        if (id != kNoToken && !in_literal && next_literal < literal.size() &&
            i + len > literal[next_literal].begin) {
            std::tie(id, len) = specials.match(text, i, false);
        }
        if (id == kNoToken) {
            ++i;
            continue;
        }
        if (i > raw_start) out.push_back({kNoToken, raw_start, i});
        out.push_back({id, i, i + len});
        i += len;
        raw_start = i;
    }
    if (raw_start < text.size()) out.push_back({kNoToken, raw_start, text.size()});
    return out;
}

void Tokenizer::Impl::encode_spm(std::string_view raw, bool space_prefix,
                                 std::vector<TokenId>& out) const {
    std::string text;
    text.reserve(raw.size() * 3 / 2 + 3);
    if (space_prefix) text += kSpmSpace;
    for (char c : raw) {
        if (c == ' ') {
            text += kSpmSpace;
        } else {
            text += c;
        }
    }

    // Symbols start as single characters (single bytes where the text is not UTF-8).
    struct Sym {
        uint32_t start, len;
        int32_t prev, next;
    };
    std::vector<Sym> sym;
    sym.reserve(text.size());
    for (size_t i = 0; i < text.size();) {
        const Utf8Step st = utf8_step(std::string_view(text).substr(i));
        const size_t len = st.status == Utf8Status::Valid ? st.length : 1;
        const auto idx = static_cast<int32_t>(sym.size());
        sym.push_back({static_cast<uint32_t>(i), static_cast<uint32_t>(len), idx - 1, idx + 1});
        i += len;
    }
    if (sym.empty()) return;
    sym.back().next = -1;

    // Highest score first; on ties the leftmost pair (SentencePiece's order).
    struct Bigram {
        float score;
        int32_t left, right;
        uint32_t len;
    };
    auto lower = [](const Bigram& a, const Bigram& b) {
        return a.score < b.score || (a.score == b.score && a.left > b.left);
    };
    std::priority_queue<Bigram, std::vector<Bigram>, decltype(lower)> queue(lower);
    // Merged pieces whose token is unused are split again at the end (SentencePiece).
    std::unordered_map<std::string_view, uint32_t> rev_merge;

    const std::string_view tv(text);
    auto try_add = [&](int32_t l, int32_t r) {
        if (l < 0 || r < 0) return;
        const uint32_t len = sym[l].len + sym[r].len;
        const std::string_view piece = tv.substr(sym[l].start, len);
        const TokenId id = spm_pieces.find(piece);
        if (id < 0) return;
        queue.push({scores[static_cast<size_t>(id)], l, r, len});
        if (type_of(id) == TokenType::Unused) rev_merge[piece] = sym[l].len;
    };
    for (size_t i = 1; i < sym.size(); ++i)
        try_add(static_cast<int32_t>(i - 1), static_cast<int32_t>(i));

    while (!queue.empty()) {
        const Bigram b = queue.top();
        queue.pop();
        Sym& l = sym[b.left];
        Sym& r = sym[b.right];
        // Stale: one side was merged away or grew since the pair was queued.
        if (l.len == 0 || r.len == 0 || l.next != b.right || l.len + r.len != b.len) continue;
        l.len += r.len;
        r.len = 0;
        l.next = r.next;
        if (r.next >= 0) sym[r.next].prev = b.left;
        try_add(l.prev, b.left);
        try_add(b.left, l.next);
    }

    // Emits a piece: its token, or the halves it was merged from, or its bytes.
    auto emit = [&](auto&& self, std::string_view piece) -> void {
        const TokenId id = spm_pieces.find(piece);
        if (id >= 0 && type_of(id) != TokenType::Unused) {
            out.push_back(id);
            return;
        }
        if (const auto rm = rev_merge.find(piece); rm != rev_merge.end()) {
            self(self, piece.substr(0, rm->second));
            self(self, piece.substr(rm->second));
            return;
        }
        if (id >= 0) {
            out.push_back(id);
            return;
        }
        bool all_bytes = true;
        for (char c : piece)
            all_bytes = all_bytes && byte_tokens[static_cast<unsigned char>(c)] != kNoToken;
        if (all_bytes) {
            for (char c : piece) out.push_back(byte_tokens[static_cast<unsigned char>(c)]);
        } else if (unk != kNoToken) {
            out.push_back(unk);
        }
    };
    for (int32_t i = 0; i >= 0; i = sym[i].next) emit(emit, tv.substr(sym[i].start, sym[i].len));
}

void Tokenizer::Impl::bpe_word(std::string_view bytes, std::vector<TokenId>& out) const {
    if (ignore_merges) {
        const TokenId id = token_to_id.find(tok::byte_level_encode(bytes));
        if (id >= 0) {
            out.push_back(id);
            return;
        }
    }
    const size_t n = bytes.size();
    constexpr TokenId kDead = std::numeric_limits<TokenId>::min();
    std::vector<TokenId> ids(n);
    std::vector<int32_t> prev(n), next(n);
    for (size_t i = 0; i < n; ++i) {
        ids[i] = bpe_byte_ids[static_cast<unsigned char>(bytes[i])];
        prev[i] = static_cast<int32_t>(i) - 1;
        next[i] = i + 1 < n ? static_cast<int32_t>(i + 1) : -1;
    }

    // Lowest rank first; on ties the leftmost pair (HF BPE's order).
    struct Cand {
        int32_t rank;
        int32_t pos;
        TokenId left, right, result;
    };
    auto later = [](const Cand& a, const Cand& b) {
        return a.rank > b.rank || (a.rank == b.rank && a.pos > b.pos);
    };
    std::vector<Cand> heap;
    auto try_add = [&](int32_t pos) {
        if (pos < 0) return;
        const int32_t nx = next[static_cast<size_t>(pos)];
        if (nx < 0) return;
        const TokenId a = ids[static_cast<size_t>(pos)], b = ids[static_cast<size_t>(nx)];
        if (a < 0 || b < 0) return;
        const tok::PairIndex::Value* m = merges.find(a, b);
        if (!m) return;
        heap.push_back({m->rank, pos, a, b, m->result});
        std::push_heap(heap.begin(), heap.end(), later);
    };
    for (size_t i = 0; i + 1 < n; ++i) try_add(static_cast<int32_t>(i));

    while (!heap.empty()) {
        std::pop_heap(heap.begin(), heap.end(), later);
        const Cand c = heap.back();
        heap.pop_back();
        const auto p = static_cast<size_t>(c.pos);
        // Stale candidates: ids only ever grow into longer tokens, so equal ids at both
        // positions mean the pair is exactly as it was when queued.
        if (ids[p] != c.left) continue;
        const int32_t nx = next[p];
        if (nx < 0 || ids[static_cast<size_t>(nx)] != c.right) continue;
        ids[p] = c.result;
        ids[static_cast<size_t>(nx)] = kDead;
        next[p] = next[static_cast<size_t>(nx)];
        if (next[p] >= 0) prev[static_cast<size_t>(next[p])] = c.pos;
        try_add(prev[p]);
        try_add(c.pos);
    }
    for (int32_t i = n ? 0 : -1; i >= 0; i = next[static_cast<size_t>(i)]) {
        const TokenId id = ids[static_cast<size_t>(i)];
        // A byte without a token (never the case in byte-level vocabularies) becomes <unk>.
        if (id >= 0) {
            out.push_back(id);
        } else if (unk != kNoToken) {
            out.push_back(unk);
        }
    }
}

void Tokenizer::Impl::encode_bpe(std::string_view raw, std::vector<TokenId>& out,
                                 const std::function<bool()>* stop) const {
    // Pieces between two questions to `stop`: a few hundred microseconds of merging.
    constexpr size_t kPiecesPerQuestion = 4096;
    size_t pieces = 0;
    for (const auto& [b, e] : splitter->split(raw, stop)) {
        if (stop != nullptr && ++pieces % kPiecesPerQuestion == 0 && (*stop)()) {
            throw EncodeStopped();
        }
        bpe_word(raw.substr(b, e - b), out);
    }
}

void Tokenizer::Impl::append_piece(TokenId id, bool render_special, std::string& out) const {
    check_id(id);
    const std::string& text = tokens[static_cast<size_t>(id)];
    switch (type_of(id)) {
        case TokenType::Control:
        case TokenType::Unknown:
        case TokenType::Unused:
            if (render_special) out += text;
            return;
        case TokenType::UserDefined:
            out += text;
            return;
        case TokenType::Byte:
            if (kind == TokenizerKind::Spm) {
                if (text.size() == 6) {
                    out += static_cast<char>(std::stoi(text.substr(3, 2), nullptr, 16));
                }
                return;
            }
            break;
        case TokenType::Normal:
        case TokenType::Undefined:
            break;
    }
    if (kind == TokenizerKind::Spm) {
        size_t i = 0;
        while (i < text.size()) {
            const size_t j = text.find(kSpmSpace, i);
            if (j == std::string::npos) {
                out.append(text, i, std::string::npos);
                break;
            }
            out.append(text, i, j - i);
            out += ' ';
            i = j + kSpmSpace.size();
        }
    } else {
        tok::byte_level_decode_append(text, out);
    }
}

// ---------------------------------------------------------------------------------------------

Tokenizer::Tokenizer(const GgufFile& file) {
    try {
        impl_ = std::make_unique<const Impl>(tokenizer_spec_from_gguf(file));
    } catch (const TokenizerError& e) {
        throw TokenizerError(file.path() + ": " + e.what());
    }
}
Tokenizer load_tokenizer(const std::string& path) {
    return Tokenizer(*GgufFile::open_metadata(path));
}

Tokenizer::Tokenizer(TokenizerSpec spec) : impl_(std::make_unique<const Impl>(std::move(spec))) {}
Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

std::vector<TokenId> Tokenizer::encode(std::string_view text, const EncodeOptions& options) const {
    const Impl& m = *impl_;
    // Positions are kept in 32 bits.
    if (text.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max() / 4)) {
        throw TokenizerError("cannot tokenize " + std::to_string(text.size()) +
                             " bytes at once (the limit is 512 MiB)");
    }
    std::vector<TokenId> out;
    out.reserve(text.size() / 3 + 2);
    if (options.add_bos) {
        if (m.bos == kNoToken) {
            throw TokenizerError("cannot add BOS: the vocabulary has no '" + std::string(kKeyBos) +
                                 "'");
        }
        out.push_back(m.bos);
    }
    // SPM puts a space in front of the text and of text that follows a special token.
    bool after_special = true;
    for (const Fragment& f : m.partition(text, options.parse_special, options.literal)) {
        if (f.token != kNoToken) {
            out.push_back(f.token);
            after_special = true;
            continue;
        }
        const std::string_view raw = text.substr(f.begin, f.end - f.begin);
        if (m.kind == TokenizerKind::Spm) {
            if (options.stop != nullptr && (*options.stop)()) throw EncodeStopped();
            m.encode_spm(raw, m.add_space_prefix && after_special, out);
        } else {
            m.encode_bpe(raw, out, options.stop);
        }
        after_special = false;
    }
    if (options.add_eos) {
        if (m.eos == kNoToken) {
            throw TokenizerError("cannot add EOS: the vocabulary has no '" + std::string(kKeyEos) +
                                 "'");
        }
        out.push_back(m.eos);
    }
    return out;
}

std::string Tokenizer::decode(std::span<const TokenId> ids, const DecodeOptions& options) const {
    std::string raw;
    bool at_start = true;
    for (TokenId id : ids) impl_->append_text(id, options, &at_start, raw);
    std::string out;
    out.reserve(raw.size());
    tok::append_lossy_utf8(raw, out, false);
    return out;
}

std::string Tokenizer::token_to_piece(TokenId id, bool render_special) const {
    std::string out;
    impl_->append_piece(id, render_special, out);
    return out;
}

TokenizerKind Tokenizer::kind() const {
    return impl_->kind;
}
const std::string& Tokenizer::model_name() const {
    return impl_->model;
}
const std::string& Tokenizer::pre_name() const {
    return impl_->pre;
}
size_t Tokenizer::vocab_size() const {
    return impl_->tokens.size();
}

const std::string& Tokenizer::token_text(TokenId id) const {
    impl_->check_id(id);
    return impl_->tokens[static_cast<size_t>(id)];
}

TokenType Tokenizer::token_type(TokenId id) const {
    impl_->check_id(id);
    return impl_->type_of(id);
}

float Tokenizer::token_score(TokenId id) const {
    impl_->check_id(id);
    return impl_->scores.empty() ? 0.0f : impl_->scores[static_cast<size_t>(id)];
}

std::optional<TokenId> Tokenizer::find_token(std::string_view text) const {
    const TokenId id = impl_->token_to_id.find(text);
    if (id < 0) return std::nullopt;
    return id;
}

std::vector<TextRange> Tokenizer::control_token_spans(std::string_view text) const {
    std::vector<TextRange> out;
    const Impl& m = *impl_;
    if (m.specials.empty(/*parse_special=*/true)) return out;
    for (size_t pos = 0; pos < text.size();) {
        const auto [id, length] = m.specials.match(text, pos, /*parse_special=*/true);
        if (id == kNoToken) {
            ++pos;
            continue;
        }
        if (m.type_of(id) != TokenType::UserDefined) out.push_back({pos, pos + length});
        pos += length;
    }
    return out;
}

bool Tokenizer::is_special(TokenId id) const {
    impl_->check_id(id);
    return impl_->special(id);
}

TokenId Tokenizer::bos_id() const {
    return impl_->bos;
}
TokenId Tokenizer::eos_id() const {
    return impl_->eos;
}
TokenId Tokenizer::eot_id() const {
    return impl_->eot;
}
TokenId Tokenizer::eom_id() const {
    return impl_->eom;
}
TokenId Tokenizer::unk_id() const {
    return impl_->unk;
}
TokenId Tokenizer::pad_id() const {
    return impl_->pad;
}
TokenId Tokenizer::sep_id() const {
    return impl_->sep;
}
bool Tokenizer::add_bos() const {
    return impl_->add_bos;
}
bool Tokenizer::add_eos() const {
    return impl_->add_eos;
}
bool Tokenizer::add_space_prefix() const {
    return impl_->add_space_prefix;
}
const std::vector<TokenId>& Tokenizer::eog_ids() const {
    return impl_->eog;
}
bool Tokenizer::is_eog(TokenId id) const {
    return std::binary_search(impl_->eog.begin(), impl_->eog.end(), id);
}

// ---------------------------------------------------------------------------------------------

StreamingDetokenizer::StreamingDetokenizer(const Tokenizer& tokenizer, DecodeOptions options)
    : tokenizer_(&tokenizer), options_(options) {}

std::string StreamingDetokenizer::push(TokenId id) {
    tokenizer_->impl_->append_text(id, options_, &at_start_, pending_);
    return take_valid(false);
}

std::string StreamingDetokenizer::flush() {
    std::string out = take_valid(true);
    at_start_ = true;
    return out;
}

void StreamingDetokenizer::reset() {
    pending_.clear();
    at_start_ = true;
}

std::string StreamingDetokenizer::take_valid(bool final) {
    std::string out;
    const size_t used = tok::append_lossy_utf8(pending_, out, !final);
    pending_.erase(0, used);
    return out;
}

}  // namespace ember
