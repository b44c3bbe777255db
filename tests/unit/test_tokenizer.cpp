// Tokenizer behaviour on small hand-made vocabularies: merge order, byte fallback, special
// tokens, streaming detokenization and errors for malformed metadata. The real vocabularies
// are covered by test_tokenizer_fixtures.cpp.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "engine/gguf/gguf.h"
#include "engine/tokenizer/pretokenizer.h"
#include "engine/tokenizer/tokenizer.h"

namespace ember {
namespace {

const std::string kSp = "\xE2\x96\x81";  // U+2581
const std::string kReplacement = "\xEF\xBF\xBD";

std::string hex_byte(int b) {
    const char* digits = "0123456789ABCDEF";
    return std::string("<0x") + digits[b >> 4] + digits[b & 15] + ">";
}

// <unk> <s> </s>, 256 byte tokens (ids 3..258), then `pieces` with their scores.
TokenizerSpec spm_spec(const std::vector<std::pair<std::string, float>>& pieces,
                       bool byte_tokens = true) {
    TokenizerSpec s;
    s.model = "llama";
    auto add = [&](std::string text, float score, TokenType type) {
        s.tokens.push_back(std::move(text));
        s.scores.push_back(score);
        s.types.push_back(type);
    };
    add("<unk>", 0, TokenType::Unknown);
    add("<s>", 0, TokenType::Control);
    add("</s>", 0, TokenType::Control);
    if (byte_tokens) {
        for (int b = 0; b < 256; ++b) add(hex_byte(b), 0, TokenType::Byte);
    }
    for (const auto& [text, score] : pieces) add(text, score, TokenType::Normal);
    s.unk_id = 0;
    s.bos_id = 1;
    s.eos_id = 2;
    return s;
}

TokenId id_of(const Tokenizer& t, const std::string& text) {
    const std::optional<TokenId> id = t.find_token(text);
    EXPECT_TRUE(id.has_value()) << text;
    return id.value_or(kNoToken);
}

TokenId byte_id(int b) {
    return 3 + b;
}

// ---------------------------------------------------------------------------------------------
// SentencePiece-style

TEST(SpmTokenizer, MergesByScoreAndAddsSpacePrefix) {
    const Tokenizer t(spm_spec({{kSp, -1},
                                {"a", -2},
                                {"b", -3},
                                {"c", -4},
                                {"ab", -5},
                                {"bc", -1},
                                {kSp + "a", -6},
                                {"abc", -7}}));
    EXPECT_EQ(t.kind(), TokenizerKind::Spm);
    EXPECT_TRUE(t.add_space_prefix());
    EXPECT_TRUE(t.add_bos());
    // "bc" scores highest, then "▁a"; "▁abc" is no piece.
    EXPECT_EQ(t.encode("abc"), (std::vector<TokenId>{id_of(t, kSp + "a"), id_of(t, "bc")}));
    EXPECT_EQ(t.decode(t.encode("abc")), "abc");
    EXPECT_EQ(t.encode("abc", {.add_bos = true}).front(), 1);
    EXPECT_EQ(t.encode("abc", {.add_eos = true}).back(), 2);
    EXPECT_TRUE(t.encode("").empty());  // no lone space piece for empty text
}

TEST(SpmTokenizer, EqualScoresMergeLeftmostFirst) {
    const Tokenizer t(spm_spec({{kSp, -1}, {"a", -2}, {"aa", -3}}));
    const TokenId a = id_of(t, "a"), aa = id_of(t, "aa"), sp = id_of(t, kSp);
    EXPECT_EQ(t.encode("aaa"), (std::vector<TokenId>{sp, aa, a}));
    EXPECT_EQ(t.encode("aaaa"), (std::vector<TokenId>{sp, aa, aa}));
}

TEST(SpmTokenizer, ByteFallbackAndUnknown) {
    const Tokenizer t(spm_spec({{kSp, -1}, {"a", -2}}));
    // é is no piece: its UTF-8 bytes come as <0xC3> <0xA9>.
    EXPECT_EQ(t.encode("a\xC3\xA9"),
              (std::vector<TokenId>{id_of(t, kSp), id_of(t, "a"), byte_id(0xC3), byte_id(0xA9)}));
    EXPECT_EQ(t.decode(t.encode("a\xC3\xA9")), "a\xC3\xA9");
    EXPECT_EQ(t.token_to_piece(byte_id(0x41)), "A");

    const Tokenizer no_bytes(spm_spec({{kSp, -1}, {"a", -2}}, false));
    EXPECT_EQ(no_bytes.encode("a\xC3\xA9"),
              (std::vector<TokenId>{id_of(no_bytes, kSp), id_of(no_bytes, "a"), 0}));
    EXPECT_EQ(no_bytes.decode(std::vector<TokenId>{0}), "");
    EXPECT_EQ(no_bytes.decode(std::vector<TokenId>{0}, {.skip_special = false}), "<unk>");
}

TEST(SpmTokenizer, SpacePrefixCanBeTurnedOff) {
    TokenizerSpec s = spm_spec({{kSp, -1}, {"a", -2}, {"b", -3}, {kSp + "b", -1}});
    s.add_space_prefix = false;
    const Tokenizer t(std::move(s));
    EXPECT_FALSE(t.add_space_prefix());
    EXPECT_EQ(t.encode("a b"), (std::vector<TokenId>{id_of(t, "a"), id_of(t, kSp + "b")}));
    // Nothing was added, so nothing is stripped.
    EXPECT_EQ(t.decode(t.encode(" b")), " b");
}

TEST(SpmTokenizer, SpecialTokens) {
    TokenizerSpec s = spm_spec({{kSp, -1}, {"a", -2}, {"b", -3}, {"<", -4}, {">", -4}, {"t", -4}});
    s.tokens.push_back("<t>");
    s.scores.push_back(0);
    s.types.push_back(TokenType::Control);
    s.tokens.push_back("<u>");
    s.scores.push_back(0);
    s.types.push_back(TokenType::UserDefined);
    const Tokenizer t(std::move(s));
    const TokenId ctl = id_of(t, "<t>"), user = id_of(t, "<u>");
    // Control text only becomes the token when asked; llama.cpp (and HF's legacy SPM) put a
    // space in front of text that follows a special token.
    const auto parsed = t.encode("a<t>b", {.parse_special = true});
    EXPECT_EQ(parsed, (std::vector<TokenId>{id_of(t, kSp), id_of(t, "a"), ctl, id_of(t, kSp),
                                            id_of(t, "b")}));
    const auto plain = t.encode("a<t>b");
    EXPECT_EQ(std::count(plain.begin(), plain.end(), ctl), 0);
    EXPECT_EQ(t.decode(plain), "a<t>b");
    // User-defined tokens are always matched.
    EXPECT_EQ(t.encode("<u>"), (std::vector<TokenId>{user}));
    EXPECT_TRUE(t.is_special(ctl));
    EXPECT_FALSE(t.is_special(user));
    EXPECT_EQ(t.decode(parsed), "a b");
    EXPECT_EQ(t.decode(parsed, {.skip_special = false}), "a<t> b");
}

// ---------------------------------------------------------------------------------------------
// Byte-level BPE

// The 256 byte-level characters (id = byte value), the merge results in order, the merges.
TokenizerSpec bpe_spec(const std::vector<std::string>& merges, const std::string& pre = "gpt-2") {
    TokenizerSpec s;
    s.model = "gpt2";
    s.pre = pre;
    // The GPT-2 alphabet: printable Latin-1 maps to itself, other bytes to U+0100 onwards.
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
        const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        const uint32_t cp = printable ? b : next++;
        std::string ch;
        if (cp < 0x80) {
            ch += static_cast<char>(cp);
        } else {
            ch += static_cast<char>(0xC0 | (cp >> 6));
            ch += static_cast<char>(0x80 | (cp & 0x3F));
        }
        s.tokens.push_back(ch);
    }
    for (const std::string& m : merges) {
        const size_t sp = m.find(' ');
        const std::string joined = m.substr(0, sp) + m.substr(sp + 1);
        if (std::find(s.tokens.begin(), s.tokens.end(), joined) == s.tokens.end()) {
            s.tokens.push_back(joined);
        }
    }
    s.merges = merges;
    s.types.assign(s.tokens.size(), TokenType::Normal);
    return s;
}

TEST(BpeTokenizer, LowestRankMergesFirst) {
    const Tokenizer bc_first(bpe_spec({"b c", "a b"}));
    EXPECT_EQ(bc_first.encode("abc"), (std::vector<TokenId>{'a', id_of(bc_first, "bc")}));
    const Tokenizer ab_first(bpe_spec({"a b", "b c", "ab c"}));
    EXPECT_EQ(ab_first.encode("abc"), (std::vector<TokenId>{id_of(ab_first, "abc")}));
    EXPECT_EQ(ab_first.encode("abcbc"),
              (std::vector<TokenId>{id_of(ab_first, "abc"), id_of(ab_first, "bc")}));
}

TEST(BpeTokenizer, EqualRanksMergeLeftmostFirst) {
    const Tokenizer t(bpe_spec({"a a"}));
    const TokenId aa = id_of(t, "aa");
    EXPECT_EQ(t.encode("aaa"), (std::vector<TokenId>{aa, 'a'}));
    EXPECT_EQ(t.encode("aaaaa"), (std::vector<TokenId>{aa, aa, 'a'}));
}

TEST(BpeTokenizer, PreTokenizerKeepsMergesInsideWords) {
    // "Ġ" is the byte-level space.
    const Tokenizer t(bpe_spec({"\xC4\xA0 a", "a b"}));
    EXPECT_EQ(t.encode("ab ab"), (std::vector<TokenId>{id_of(t, "ab"),
                                                       id_of(t,
                                                             "\xC4\xA0"
                                                             "a"),
                                                       'b'}));
    EXPECT_EQ(t.decode(t.encode("ab ab")), "ab ab");
    EXPECT_FALSE(t.add_space_prefix());
    EXPECT_FALSE(t.add_bos());
}

TEST(BpeTokenizer, AnyBytesRoundTrip) {
    const Tokenizer t(bpe_spec({"a b"}));
    std::string all;
    for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
    const std::vector<TokenId> ids = t.encode(all);
    std::string raw;
    for (TokenId id : ids) raw += t.token_to_piece(id);
    EXPECT_EQ(raw, all);  // the pieces are the exact bytes, even where not UTF-8
    // decode() returns valid UTF-8: the lone bytes become U+FFFD.
    EXPECT_EQ(t.decode(t.encode("ok\xFF")), "ok" + kReplacement);
}

TEST(BpeTokenizer, IgnoreMergesTakesWholeWords) {
    // "abc" is a token, but no merge sequence reaches it from "a b c" except via "bc".
    TokenizerSpec s = bpe_spec({"b c"});
    s.tokens.push_back("abc");
    s.types.push_back(TokenType::Normal);
    TokenizerSpec s3 = s;
    s3.pre = "llama-bpe";
    const Tokenizer gpt2(std::move(s));
    const Tokenizer llama3(std::move(s3));
    EXPECT_EQ(gpt2.encode("abc"), (std::vector<TokenId>{'a', id_of(gpt2, "bc")}));
    EXPECT_EQ(llama3.encode("abc"), (std::vector<TokenId>{id_of(llama3, "abc")}));
}

TEST(BpeTokenizer, SpecialTokensLeftmostLongest) {
    TokenizerSpec s = bpe_spec({});
    for (const char* text : {"<|a|>", "<|a|><|b|>", "<|b|>"}) {
        s.tokens.push_back(text);
        s.types.push_back(TokenType::Control);
    }
    s.tokens.push_back("<|im_end|>");
    s.types.push_back(TokenType::Control);
    s.eos_id = static_cast<TokenId>(s.tokens.size() - 1);
    const Tokenizer t(std::move(s));
    const TokenId a = id_of(t, "<|a|>"), ab = id_of(t, "<|a|><|b|>"), b = id_of(t, "<|b|>");
    EXPECT_EQ(t.encode("<|a|><|b|><|b|>", {.parse_special = true}), (std::vector<TokenId>{ab, b}));
    EXPECT_EQ(t.encode("x<|a|>y", {.parse_special = true}), (std::vector<TokenId>{'x', a, 'y'}));
    EXPECT_EQ(t.decode(std::vector<TokenId>{'x', a, 'y'}), "xy");
    EXPECT_EQ(t.decode(std::vector<TokenId>{'x', a, 'y'}, {.skip_special = false}), "x<|a|>y");
    // <|im_end|> ends generation even though it is not the EOS... here it is both.
    EXPECT_TRUE(t.is_eog(id_of(t, "<|im_end|>")));
    EXPECT_EQ(t.eot_id(), id_of(t, "<|im_end|>"));
}

TEST(BpeTokenizer, ConcurrentEncodes) {
    const Tokenizer t(bpe_spec({"a b", "b c", "ab c", "\xC4\xA0 a"}));
    std::string text;
    for (int i = 0; i < 2000; ++i) text += "abc ab a, 123 \xC3\xA9t\xC3\xA9 ";
    const std::vector<TokenId> expected = t.encode(text);
    std::vector<std::thread> threads;
    std::vector<int> ok(4, 0);
    for (int k = 0; k < 4; ++k) {
        threads.emplace_back([&, k] {
            for (int i = 0; i < 10; ++i) ok[static_cast<size_t>(k)] += t.encode(text) == expected;
        });
    }
    for (auto& th : threads) th.join();
    for (int v : ok) EXPECT_EQ(v, 10);
}

// ---------------------------------------------------------------------------------------------
// Pre-tokenizer regexes (internal interface)

std::vector<std::string> split(const std::string& pre, const std::string& text) {
    const tok::PreTokenizerSpec* spec = tok::find_pre_tokenizer(pre);
    EXPECT_NE(spec, nullptr) << pre;
    if (!spec) return {};
    const tok::RegexSplitter splitter(spec->regexes);
    std::vector<std::string> out;
    for (const auto& [b, e] : splitter.split(text)) out.push_back(text.substr(b, e - b));
    return out;
}

using Pieces = std::vector<std::string>;

TEST(PreTokenizer, Gpt2) {
    EXPECT_EQ(split("gpt-2", "Hello world's  end\n\n x"),
              (Pieces{"Hello", " world", "'s", " ", " end", "\n\n", " x"}));
    EXPECT_EQ(split("gpt-2", "  "), (Pieces{"  "}));
    EXPECT_EQ(split("gpt-2", ""), Pieces{});
}

TEST(PreTokenizer, DigitGrouping) {
    EXPECT_EQ(split("llama-bpe", "x 1234567"), (Pieces{"x", " ", "123", "456", "7"}));
    EXPECT_EQ(split("qwen2", "x 123"), (Pieces{"x", " ", "1", "2", "3"}));
    EXPECT_EQ(split("starcoder", "a12 b"), (Pieces{"a", "1", "2", " b"}));
    // Falcon: punctuation runs, then the GPT-2 split, then groups of three digits.
    EXPECT_EQ(split("falcon", "12345!!x"), (Pieces{"123", "45", "!!", "x"}));
}

TEST(PreTokenizer, CombiningMarksStayWithLettersInQwen35) {
    const std::string text = "Vie\xCC\x82t";  // e + U+0302
    EXPECT_EQ(split("qwen2", text), (Pieces{"Vie", "\xCC\x82t"}));
    EXPECT_EQ(split("qwen35", text), (Pieces{text}));
}

TEST(PreTokenizer, SeveralRegexesInSequence) {
    // deepseek-coder: newlines, letter runs, punctuation runs, CJK runs, single digits.
    EXPECT_EQ(split("deepseek-coder", "ab, 12\n\xE4\xB8\xAD\xE6\x96\x87"),
              (Pieces{"ab", ",", " ", "1", "2", "\n", "\xE4\xB8\xAD\xE6\x96\x87"}));
}

TEST(PreTokenizer, InvalidUtf8StaysInThePieces) {
    const std::string text =
        "a\xFF\xFE"
        "b c";
    std::string joined;
    for (const std::string& p : split("llama-bpe", text)) joined += p;
    EXPECT_EQ(joined, text);
}

TEST(PreTokenizer, EveryKnownFamilyCompilesAndSplits) {
    const std::string text = "Hello, y'all! 1234 \xE4\xB8\xAD\xE6\x96\x87 \xC3\xA9t\xC3\xA9\n\n  x";
    for (std::string_view name : tok::pre_tokenizer_names()) {
        std::string joined;
        for (const std::string& p : split(std::string(name), text)) {
            EXPECT_FALSE(p.empty()) << name;
            joined += p;
        }
        EXPECT_EQ(joined, text) << name;
    }
}

TEST(PreTokenizer, UnknownName) {
    EXPECT_EQ(tok::find_pre_tokenizer("no-such-thing"), nullptr);
    EXPECT_NE(tok::find_pre_tokenizer(""), nullptr);  // absent field: the default set
}

// ---------------------------------------------------------------------------------------------
// Streaming detokenizer

TEST(StreamingDetokenizerUnit, HoldsBackUntilCharacterIsComplete) {
    const Tokenizer t(spm_spec({{kSp, -1}, {"a", -2}, {kSp + "a", -1}}));
    StreamingDetokenizer d(t);
    // 🦙 = F0 9F A6 99
    EXPECT_EQ(d.push(byte_id(0xF0)), "");
    EXPECT_EQ(d.push(byte_id(0x9F)), "");
    EXPECT_EQ(d.push(byte_id(0xA6)), "");
    EXPECT_EQ(d.pending_bytes(), 3u);
    EXPECT_EQ(d.push(byte_id(0x99)), "\xF0\x9F\xA6\x99");
    EXPECT_EQ(d.pending_bytes(), 0u);
    EXPECT_EQ(d.push(id_of(t, kSp + "a")), " a");
    EXPECT_EQ(d.flush(), "");
}

TEST(StreamingDetokenizerUnit, InvalidBytesBecomeReplacementCharacters) {
    const Tokenizer t(spm_spec({{kSp, -1}, {"a", -2}}));
    StreamingDetokenizer d(t);
    EXPECT_EQ(d.push(byte_id(0xFF)), kReplacement);  // can never start a character
    EXPECT_EQ(d.push(byte_id(0xE4)), "");            // might still become one
    EXPECT_EQ(d.push(id_of(t, "a")), kReplacement + "a");
    EXPECT_EQ(d.push(byte_id(0xED)), "");
    EXPECT_EQ(d.push(byte_id(0xA0)), kReplacement + kReplacement);  // a surrogate
    EXPECT_EQ(d.push(byte_id(0xC3)), "");
    EXPECT_EQ(d.flush(), kReplacement);
}

TEST(StreamingDetokenizerUnit, StripsOnlyTheFirstSpace) {
    const Tokenizer t(spm_spec({{kSp, -1}, {"a", -2}, {kSp + "a", -1}}));
    const TokenId sa = id_of(t, kSp + "a");
    StreamingDetokenizer d(t);
    EXPECT_EQ(d.push(1), "");  // <s> is skipped and does not count as text
    EXPECT_EQ(d.push(sa), "a");
    EXPECT_EQ(d.push(sa), " a");
    d.reset();
    EXPECT_EQ(d.push(sa), "a");

    StreamingDetokenizer keep(t, {.skip_special = true, .strip_leading_space = false});
    EXPECT_EQ(keep.push(sa), " a");
    StreamingDetokenizer render(t, {.skip_special = false});
    EXPECT_EQ(render.push(1), "<s>");
    EXPECT_EQ(render.push(sa), " a");
}

TEST(StreamingDetokenizerUnit, RejectsIdsOutsideTheVocabulary) {
    const Tokenizer t(spm_spec({{kSp, -1}}));
    StreamingDetokenizer d(t);
    EXPECT_THROW(d.push(static_cast<TokenId>(t.vocab_size())), TokenizerError);
    EXPECT_THROW(d.push(-1), TokenizerError);
    EXPECT_THROW((void)t.token_text(-5), TokenizerError);
}

// ---------------------------------------------------------------------------------------------
// Malformed metadata: the error names the field.

// Files are written, read and removed one at a time, so one name per process is enough.
std::string temp_path() {
    return (std::filesystem::temp_directory_path() /
            ("ember_tok_" + std::to_string(::getpid()) + ".gguf"))
        .string();
}

GgufValue string_array(std::vector<std::string> v) {
    GgufArray a;
    a.elem_type = GgufValueType::STRING;
    a.strings = std::move(v);
    return GgufValue{GgufValueType::ARRAY, std::move(a)};
}

GgufValue int_array(GgufValueType type, std::vector<int64_t> v) {
    GgufArray a;
    a.elem_type = type;
    a.ints = std::move(v);
    return GgufValue{GgufValueType::ARRAY, std::move(a)};
}

GgufValue float_array(std::vector<double> v) {
    GgufArray a;
    a.elem_type = GgufValueType::F32;
    a.floats = std::move(v);
    return GgufValue{GgufValueType::ARRAY, std::move(a)};
}

// A valid byte-level BPE tokenizer: "a", "b", "ab", "<|end|>".
GgufWriter bpe_writer() {
    GgufWriter w;
    w.set_string("general.architecture", "llama");
    w.set_string("tokenizer.ggml.model", "gpt2");
    w.set_string("tokenizer.ggml.pre", "qwen2");
    w.set("tokenizer.ggml.tokens", string_array({"a", "b", "ab", "<|end|>"}));
    w.set("tokenizer.ggml.token_type", int_array(GgufValueType::I32, {1, 1, 1, 3}));
    w.set("tokenizer.ggml.merges", string_array({"a b"}));
    w.set_u32("tokenizer.ggml.eos_token_id", 3);
    w.set_u32("tokenizer.ggml.padding_token_id", 0xFFFFFFFFu);  // "none", as converters write it
    return w;
}

std::unique_ptr<Tokenizer> load(const GgufWriter& w) {
    const std::string path = temp_path();
    w.write(path);
    struct Remove {
        std::string p;
        ~Remove() { std::filesystem::remove(p); }
    } remove{path};
    const std::unique_ptr<GgufFile> f = GgufFile::open(path);
    return std::make_unique<Tokenizer>(*f);
}

void expect_field_error(const std::function<void(GgufWriter&)>& change, const std::string& field,
                        const std::string& also = "") {
    GgufWriter w = bpe_writer();
    change(w);
    try {
        load(w);
        ADD_FAILURE() << "no error; expected one naming " << field;
    } catch (const TokenizerError& e) {
        EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find(also), std::string::npos) << e.what();
    }
}

TEST(TokenizerErrors, ValidFileLoads) {
    const auto t = load(bpe_writer());
    EXPECT_EQ(t->vocab_size(), 4u);
    EXPECT_EQ(t->encode("ab"), (std::vector<TokenId>{2}));
    EXPECT_EQ(t->eos_id(), 3);
    EXPECT_EQ(t->pad_id(), kNoToken);
    EXPECT_EQ(t->eog_ids(), (std::vector<TokenId>{3}));
}

TEST(TokenizerErrors, NameTheField) {
    using W = GgufWriter;
    // GgufWriter cannot drop a key, so "missing" is tested by writing a file without it.
    {
        GgufWriter w;
        w.set_string("general.architecture", "llama");
        w.set("tokenizer.ggml.tokens", string_array({"a"}));
        try {
            load(w);
            ADD_FAILURE() << "no error";
        } catch (const TokenizerError& e) {
            EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.model"), std::string::npos)
                << e.what();
        }
    }
    {
        GgufWriter w;
        w.set_string("tokenizer.ggml.model", "llama");
        try {
            load(w);
            ADD_FAILURE() << "no error";
        } catch (const TokenizerError& e) {
            EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.tokens"), std::string::npos)
                << e.what();
        }
    }
    {
        GgufWriter w;
        w.set_string("tokenizer.ggml.model", "gpt2");
        w.set_string("tokenizer.ggml.pre", "gpt-2");
        w.set("tokenizer.ggml.tokens", string_array({"a"}));
        try {
            load(w);
            ADD_FAILURE() << "no error";
        } catch (const TokenizerError& e) {
            EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.merges"), std::string::npos)
                << e.what();
        }
    }
    expect_field_error([](W& w) { w.set_string("tokenizer.ggml.model", "t5"); },
                       "tokenizer.ggml.model", "t5");
    expect_field_error([](W& w) { w.set_u32("tokenizer.ggml.model", 1); }, "tokenizer.ggml.model");
    expect_field_error([](W& w) { w.set_string("tokenizer.ggml.pre", "no-such-family"); },
                       "tokenizer.ggml.pre", "no-such-family");
    expect_field_error(
        [](W& w) {
            w.set("tokenizer.ggml.tokens", int_array(GgufValueType::I32, {1, 2}));
        },
        "tokenizer.ggml.tokens");
    expect_field_error([](W& w) { w.set("tokenizer.ggml.tokens", string_array({})); },
                       "tokenizer.ggml.tokens");
    expect_field_error(
        [](W& w) {
            w.set("tokenizer.ggml.scores", float_array({0, 0}));
        },
        "tokenizer.ggml.scores");
    expect_field_error(
        [](W& w) {
            w.set("tokenizer.ggml.scores", string_array({"x", "y", "z", "w"}));
        },
        "tokenizer.ggml.scores");
    expect_field_error(
        [](W& w) {
            w.set("tokenizer.ggml.token_type", int_array(GgufValueType::I32, {1, 1, 9, 1}));
        },
        "tokenizer.ggml.token_type");
    expect_field_error(
        [](W& w) { w.set("tokenizer.ggml.token_type", int_array(GgufValueType::I32, {1})); },
        "tokenizer.ggml.token_type");
    expect_field_error([](W& w) { w.set("tokenizer.ggml.merges", string_array({"ab"})); },
                       "tokenizer.ggml.merges");
    expect_field_error(
        [](W& w) { w.set("tokenizer.ggml.merges", int_array(GgufValueType::I32, {1})); },
        "tokenizer.ggml.merges");
    expect_field_error([](W& w) { w.set_u32("tokenizer.ggml.bos_token_id", 4); },
                       "tokenizer.ggml.bos_token_id");
    expect_field_error([](W& w) { w.set_string("tokenizer.ggml.eos_token_id", "3"); },
                       "tokenizer.ggml.eos_token_id");
    expect_field_error([](W& w) { w.set_u32("tokenizer.ggml.add_bos_token", 1); },
                       "tokenizer.ggml.add_bos_token");
}

TEST(TokenizerErrors, SpmByteTokenText) {
    TokenizerSpec s = spm_spec({});
    s.tokens[3] = "<0xZZ>";
    try {
        Tokenizer t(std::move(s));
        ADD_FAILURE() << "no error";
    } catch (const TokenizerError& e) {
        EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.tokens"), std::string::npos)
            << e.what();
    }
}

TEST(TokenizerErrors, AddBosWithoutBos) {
    const Tokenizer t(bpe_spec({}));
    EXPECT_THROW(t.encode("a", {.add_bos = true}), TokenizerError);
}

}  // namespace
}  // namespace ember
