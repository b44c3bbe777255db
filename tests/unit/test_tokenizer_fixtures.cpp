// Tokenizers against independent references: llama.cpp's vocabulary test pairs (.inp/.out,
// generated with HF tokenizers), HF tokenizers on hard strings (tokref_*.json) and the
// trained stories260K model.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "engine/gguf/gguf.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/support/fixtures.h"
#include "tests/support/vocab_cases.h"

namespace ember {
namespace {

// Through the engine's tokenizer-only path (metadata read, weights never mapped).
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& relative) {
    return std::make_unique<Tokenizer>(ember::load_tokenizer(test::fixture_path(relative)));
}

std::string ids_str(const std::vector<TokenId>& ids) {
    std::ostringstream ss;
    for (size_t i = 0; i < ids.size(); ++i) ss << (i ? " " : "") << ids[i];
    return ss.str();
}

// Escapes control characters so that failing strings are readable.
std::string show(const std::string& s) {
    std::string out = "\"";
    for (char c : s) {
        if (c == '\n') {
            out += "\\n";
        } else if (c == '\t') {
            out += "\\t";
        } else if (c == '\r') {
            out += "\\r";
        } else {
            out += c;
        }
    }
    return out + "\"";
}

// Well-formed UTF-8 (RFC 3629), checked independently of the engine's helpers.
bool valid_utf8(const std::string& s) {
    size_t i = 0;
    while (i < s.size()) {
        const auto c = static_cast<unsigned char>(s[i]);
        size_t n = 0;
        uint32_t cp = 0;
        if (c < 0x80) {
            ++i;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            n = 2;
            cp = c & 0x1F;
        } else if ((c & 0xF0) == 0xE0) {
            n = 3;
            cp = c & 0x0F;
        } else if ((c & 0xF8) == 0xF0) {
            n = 4;
            cp = c & 0x07;
        } else {
            return false;
        }
        if (i + n > s.size()) return false;
        for (size_t k = 1; k < n; ++k) {
            const auto d = static_cast<unsigned char>(s[i + k]);
            if ((d & 0xC0) != 0x80) return false;
            cp = (cp << 6) | (d & 0x3F);
        }
        const uint32_t min_cp[] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min_cp[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
        i += n;
    }
    return true;
}

using test::read_vocab_cases;
using test::VocabCase;

// ---------------------------------------------------------------------------------------------
// llama.cpp vocabulary pairs: no BOS, special-token text not parsed.

struct VocabParam {
    std::string family;  // ggml-vocab-<family>.gguf.inp/.out
    std::string gguf;    // the vocabulary to test them with
    std::string pre;     // overrides tokenizer.ggml.pre when not empty
};

std::ostream& operator<<(std::ostream& os, const VocabParam& p) {
    return os << p.family;
}

class VocabPairs : public ::testing::TestWithParam<VocabParam> {};

TEST_P(VocabPairs, IdsAndRoundTrip) {
    const VocabParam& p = GetParam();
    const std::string base = "tokenizers/ggml-vocab-" + p.family + ".gguf";
    EMBER_REQUIRE_FIXTURE(base + ".inp");
    EMBER_REQUIRE_FIXTURE(p.gguf);
    std::unique_ptr<Tokenizer> tok;
    if (p.pre.empty()) {
        tok = load_tokenizer(p.gguf);
    } else {
        const std::unique_ptr<GgufFile> f = GgufFile::open(test::fixture_path(p.gguf));
        TokenizerSpec spec = tokenizer_spec_from_gguf(*f);
        spec.pre = p.pre;
        tok = std::make_unique<Tokenizer>(std::move(spec));
    }
    const std::vector<VocabCase> cases = read_vocab_cases(test::fixture_path(base));
    ASSERT_FALSE(cases.empty());
    size_t ids_ok = 0, text_ok = 0;
    for (const VocabCase& c : cases) {
        const std::vector<TokenId> ids =
            tok->encode(c.text, {.add_bos = false, .parse_special = false});
        if (ids == c.ids) {
            ++ids_ok;
        } else {
            ADD_FAILURE() << p.family << ": " << show(c.text) << "\n  expected: " << ids_str(c.ids)
                          << "\n  got:      " << ids_str(ids);
        }
        // SPM puts a space in front of the text; decode takes it off again.
        const std::string back = tok->decode(c.ids);
        if (back == c.text) {
            ++text_ok;
        } else {
            ADD_FAILURE() << p.family << ": decode of " << show(c.text) << " gave " << show(back);
        }
    }
    EXPECT_EQ(ids_ok, cases.size());
    EXPECT_EQ(text_ok, cases.size());
    std::cout << "[ vocab    ] " << p.family << " (" << p.gguf << "): ids " << ids_ok << "/"
              << cases.size() << ", round trip " << text_ok << "/" << cases.size() << "\n";
}

// Families whose own GGUF is in the fixtures, plus two pairs tested with a model GGUF that
// carries the same vocabulary (the README names lfm2's as Llama 3's; qwen2's is Qwen2's).
// lfm2.gguf declares pre "smaug-bpe": the Llama-3 split without ignore_merges, which is how
// its converter told it apart from "llama-bpe"; the llama-bpe pairs need ignore_merges.
const VocabParam kVocabParams[] = {
    {"llama-spm", "tokenizers/ggml-vocab-llama-spm.gguf"},
    {"phi-3", "tokenizers/ggml-vocab-phi-3.gguf"},
    {"gpt-2", "tokenizers/ggml-vocab-gpt-2.gguf"},
    {"starcoder", "tokenizers/ggml-vocab-starcoder.gguf"},
    {"falcon", "tokenizers/ggml-vocab-falcon.gguf"},
    {"deepseek-coder", "tokenizers/ggml-vocab-deepseek-coder.gguf"},
    {"llama-bpe", "arch/lfm2/lfm2.gguf", "llama-bpe"},
    {"qwen2", "arch/qwen2/qwen2.gguf"},
    {"qwen35", "arch/qwen35/qwen35.gguf", "qwen35"},
};

INSTANTIATE_TEST_SUITE_P(Fixtures, VocabPairs, ::testing::ValuesIn(kVocabParams),
                         [](const ::testing::TestParamInfo<VocabParam>& pinfo) {
                             std::string name;
                             for (char c : pinfo.param.family) {
                                 name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                             }
                             return name;
                         });

// A pair that gains its GGUF must not go untested.
TEST(VocabPairsCoverage, EveryPairWithItsGgufIsListed) {
    EMBER_REQUIRE_FIXTURE("tokenizers");
    std::set<std::string> listed;
    for (const VocabParam& p : kVocabParams) listed.insert(p.family);
    const std::string prefix = "ggml-vocab-", suffix = ".gguf.inp";
    for (const auto& e : std::filesystem::directory_iterator(test::fixture_path("tokenizers"))) {
        const std::string name = e.path().filename().string();
        if (name.size() <= prefix.size() + suffix.size() || name.rfind(prefix, 0) != 0 ||
            name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
            continue;
        }
        const std::string family =
            name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
        if (test::fixture_exists("tokenizers/ggml-vocab-" + family + ".gguf")) {
            EXPECT_TRUE(listed.count(family)) << family << " has a GGUF but is not tested";
        }
    }
}

// ---------------------------------------------------------------------------------------------
// HF tokenizers on hard strings: no BOS, special-token text parsed.

struct RefParam {
    std::string name;  // tokref_<name>.json
    std::string gguf;
};

std::ostream& operator<<(std::ostream& os, const RefParam& p) {
    return os << p.name;
}

class HfReference : public ::testing::TestWithParam<RefParam> {
protected:
    void SetUp() override {
        const RefParam& p = GetParam();
        json_path_ = "tokenizers/ref/tokref_" + p.name + ".json";
    }
    std::string json_path_;
};

TEST_P(HfReference, Cases) {
    EMBER_REQUIRE_FIXTURE(json_path_);
    EMBER_REQUIRE_FIXTURE(GetParam().gguf);
    const auto tok = load_tokenizer(GetParam().gguf);
    const auto ref = nlohmann::json::parse(test::read_file(test::fixture_path(json_path_)));
    size_t ids_ok = 0, text_ok = 0, n = 0;
    for (const auto& c : ref.at("cases")) {
        ++n;
        const std::string text = c.at("text");
        const std::vector<TokenId> expected = c.at("ids");
        const std::string decoded = c.at("decoded");
        const std::vector<TokenId> ids =
            tok->encode(text, {.add_bos = false, .parse_special = true});
        if (ids == expected) {
            ++ids_ok;
        } else {
            ADD_FAILURE() << show(text) << "\n  expected: " << ids_str(expected)
                          << "\n  got:      " << ids_str(ids);
        }
        const std::string back = tok->decode(expected, {.skip_special = false});
        if (back == decoded) {
            ++text_ok;
        } else {
            ADD_FAILURE() << "decode of " << show(text) << " gave " << show(back);
        }
    }
    EXPECT_EQ(n, 22u);
    EXPECT_EQ(ids_ok, n);
    EXPECT_EQ(text_ok, n);
    std::cout << "[ hf ref   ] " << GetParam().name << ": ids " << ids_ok << "/" << n << ", decode "
              << text_ok << "/" << n << "\n";
}

// `with_special`: what HF adds by default (none of these adds a BOS).
TEST_P(HfReference, WithSpecial) {
    EMBER_REQUIRE_FIXTURE(json_path_);
    EMBER_REQUIRE_FIXTURE(GetParam().gguf);
    const auto tok = load_tokenizer(GetParam().gguf);
    const auto ref = nlohmann::json::parse(test::read_file(test::fixture_path(json_path_)));
    for (const auto& c : ref.at("with_special")) {
        const std::string text = c.at("text");
        const std::vector<TokenId> expected = c.at("ids");
        EXPECT_EQ(ids_str(tok->encode(text, {.add_bos = tok->add_bos(), .parse_special = true})),
                  ids_str(expected))
            << show(text);
    }
}

// Rendered chat templates: the role markers must become single special tokens.
TEST_P(HfReference, ChatRenderings) {
    EMBER_REQUIRE_FIXTURE(json_path_);
    EMBER_REQUIRE_FIXTURE(GetParam().gguf);
    const auto tok = load_tokenizer(GetParam().gguf);
    const auto ref = nlohmann::json::parse(test::read_file(test::fixture_path(json_path_)));
    for (const auto& c : ref.at("chat")) {
        const std::string text = c.at("text");
        const std::vector<TokenId> expected = c.at("ids");
        EXPECT_EQ(ids_str(tok->encode(text, {.add_bos = false, .parse_special = true})),
                  ids_str(expected))
            << show(text);
        EXPECT_EQ(tok->decode(expected, {.skip_special = false}), text);
    }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HfReference,
                         ::testing::Values(RefParam{"qwen3", "arch/qwen3/qwen3.gguf"},
                                           RefParam{"llama3", "arch/lfm2/lfm2.gguf"},
                                           RefParam{"smollm2", "arch/llama/llama.gguf"},
                                           RefParam{"gptoss", "arch/gptoss/gptoss.gguf"}),
                         [](const ::testing::TestParamInfo<RefParam>& pinfo) {
                             return pinfo.param.name;
                         });

TEST(HfReferenceIds, SpecialIdsOfQwen3) {
    EMBER_REQUIRE_FIXTURE("arch/qwen3/qwen3.gguf");
    const auto tok = load_tokenizer("arch/qwen3/qwen3.gguf");
    EXPECT_EQ(tok->vocab_size(), 151936u);
    EXPECT_EQ(tok->kind(), TokenizerKind::Bpe);
    EXPECT_EQ(tok->bos_id(), kNoToken);
    EXPECT_EQ(tok->eos_id(), 151645);  // <|im_end|>
    EXPECT_EQ(tok->token_text(151645), "<|im_end|>");
    EXPECT_TRUE(tok->is_eog(151645));
    EXPECT_TRUE(tok->is_eog(151643));   // <|endoftext|>
    EXPECT_FALSE(tok->is_eog(151644));  // <|im_start|>
    EXPECT_FALSE(tok->add_bos());
    // Without parse_special the marker is plain text.
    const auto plain = tok->encode("<|im_start|>", {.add_bos = false, .parse_special = false});
    EXPECT_GT(plain.size(), 1u);
    EXPECT_EQ(tok->decode(plain), "<|im_start|>");
    EXPECT_EQ(tok->encode("<|im_start|>", {.add_bos = false, .parse_special = true}),
              std::vector<TokenId>{151644});
    // Special tokens vanish from decoded text unless asked for.
    EXPECT_EQ(tok->decode(std::vector<TokenId>{151644, 872}), "user");
}

TEST(HfReferenceIds, SpecialIdsOfLlama3) {
    EMBER_REQUIRE_FIXTURE("arch/lfm2/lfm2.gguf");
    const auto tok = load_tokenizer("arch/lfm2/lfm2.gguf");
    EXPECT_EQ(tok->bos_id(), 128000);
    EXPECT_EQ(tok->eos_id(), 128001);
    EXPECT_EQ(tok->eot_id(), 128009);  // <|eot_id|>
    EXPECT_TRUE(tok->is_eog(128001));
    EXPECT_TRUE(tok->is_eog(128009));
    EXPECT_FALSE(tok->is_eog(128006));
}

// ignore_merges (Llama 3's tokenizer.json) takes a whole pre-token from the vocabulary even
// where merging by rank would split it; smaug-bpe merges.
TEST(HfReferenceIds, IgnoreMergesOnlyForLlama3Pre) {
    EMBER_REQUIRE_FIXTURE("arch/lfm2/lfm2.gguf");
    const std::unique_ptr<GgufFile> f = GgufFile::open(test::fixture_path("arch/lfm2/lfm2.gguf"));
    TokenizerSpec spec = tokenizer_spec_from_gguf(*f);
    EXPECT_EQ(spec.pre, "smaug-bpe");
    const Tokenizer smaug(spec);
    spec.pre = "llama-bpe";
    const Tokenizer llama3(std::move(spec));
    EXPECT_EQ(ids_str(llama3.encode(" Vi\xE1\xBB\x87t")), "101798");
    EXPECT_EQ(ids_str(smaug.encode(" Vi\xE1\xBB\x87t")), "11655 26298 83");
    EXPECT_FALSE(smaug.add_bos());
    EXPECT_TRUE(llama3.add_bos());  // llama.cpp's default for the Llama-3 family
}

// ---------------------------------------------------------------------------------------------
// The trained model's SPM vocabulary.

TEST(Stories260K, OnceUponATimeRoundTrips) {
    EMBER_REQUIRE_FIXTURE("models/stories260K.gguf");
    const auto tok = load_tokenizer("models/stories260K.gguf");
    EXPECT_EQ(tok->kind(), TokenizerKind::Spm);
    EXPECT_EQ(tok->vocab_size(), 512u);
    EXPECT_TRUE(tok->add_bos());
    EXPECT_TRUE(tok->add_space_prefix());
    const std::vector<TokenId> ids =
        tok->encode("Once upon a time", {.add_bos = true, .parse_special = false});
    ASSERT_GE(ids.size(), 2u);
    EXPECT_EQ(ids[0], tok->bos_id());
    EXPECT_EQ(tok->bos_id(), 1);
    EXPECT_EQ(tok->eos_id(), 2);
    // The first word carries the space SentencePiece puts in front.
    EXPECT_EQ(tok->token_text(ids[1]).rfind("\xE2\x96\x81", 0), 0u) << tok->token_text(ids[1]);
    EXPECT_EQ(tok->decode(ids), "Once upon a time");
    EXPECT_EQ(tok->decode(ids, {.skip_special = false}), "<s> Once upon a time");

    // The reference continuation survives a round trip too (byte fallback for the rest).
    EMBER_REQUIRE_FIXTURE("models/stories260K.greedy.json");
    const auto ref = nlohmann::json::parse(
        test::read_file(test::fixture_path("models/stories260K.greedy.json")));
    const std::string story = ref.at("expected_text_with_prompt");
    EXPECT_EQ(tok->decode(tok->encode(story, {.add_bos = true, .parse_special = false})), story);
}

// ---------------------------------------------------------------------------------------------
// Streaming detokenization.

// Feeds ids one at a time; every chunk must be valid UTF-8 and the whole must equal decode().
void check_streaming(const Tokenizer& tok, const std::string& text, bool expect_holdback) {
    const std::vector<TokenId> ids = tok.encode(text, {.add_bos = false, .parse_special = false});
    StreamingDetokenizer stream(tok);
    std::string all;
    bool held_back = false;
    for (TokenId id : ids) {
        const std::string chunk = stream.push(id);
        EXPECT_TRUE(valid_utf8(chunk)) << "invalid chunk after token " << id;
        held_back = held_back || stream.pending_bytes() > 0;
        all += chunk;
    }
    const std::string rest = stream.flush();
    EXPECT_TRUE(valid_utf8(rest));
    EXPECT_TRUE(rest.empty()) << "complete text should leave nothing held back";
    all += rest;
    EXPECT_EQ(all, text);
    EXPECT_EQ(all, tok.decode(ids));
    if (expect_holdback) {
        EXPECT_TRUE(held_back) << "expected some token to end inside a character: " << show(text);
    }
}

const char* const kMultiByte =
    "emoji 🦙🚀🇫🇷 👩\u200d👩\u200d👧 中文测试：你好，世界！ 日本語 "
    "한국어 "
    "Ünïcödé "
    "\xF0\x9F\x98\x81";

TEST(StreamingDetokenizer, ByteLevelBpeHoldsBackPartialCharacters) {
    EMBER_REQUIRE_FIXTURE("arch/qwen3/qwen3.gguf");
    const auto tok = load_tokenizer("arch/qwen3/qwen3.gguf");
    check_streaming(*tok, kMultiByte, true);
}

TEST(StreamingDetokenizer, SpmByteFallbackHoldsBackPartialCharacters) {
    EMBER_REQUIRE_FIXTURE("tokenizers/ggml-vocab-llama-spm.gguf");
    const auto tok = load_tokenizer("tokenizers/ggml-vocab-llama-spm.gguf");
    // Emoji are not SPM pieces: each comes as four <0xXX> tokens.
    check_streaming(*tok, kMultiByte, true);
}

TEST(StreamingDetokenizer, SmallSpmVocabulary) {
    EMBER_REQUIRE_FIXTURE("models/stories260K.gguf");
    const auto tok = load_tokenizer("models/stories260K.gguf");
    check_streaming(*tok, kMultiByte, true);
}

TEST(StreamingDetokenizer, CutOffCharacterBecomesReplacement) {
    EMBER_REQUIRE_FIXTURE("arch/qwen3/qwen3.gguf");
    const auto tok = load_tokenizer("arch/qwen3/qwen3.gguf");
    const std::vector<TokenId> ids = tok->encode(kMultiByte, {});
    // Stop right after the first token that ends inside a character.
    StreamingDetokenizer stream(*tok);
    std::string out;
    size_t cut = 0;
    while (cut < ids.size()) {
        out += stream.push(ids[cut++]);
        if (stream.pending_bytes() > 0) break;
    }
    ASSERT_GT(stream.pending_bytes(), 0u);
    const std::string rest = stream.flush();
    EXPECT_EQ(rest, "\xEF\xBF\xBD");  // one U+FFFD for the cut-off character
    EXPECT_EQ(stream.pending_bytes(), 0u);
    const std::vector<TokenId> prefix(ids.begin(), ids.begin() + static_cast<long>(cut));
    EXPECT_EQ(tok->decode(prefix), out + rest);
}

// ---------------------------------------------------------------------------------------------
// Speed: long inputs must not go quadratic.

std::string long_text(size_t bytes) {
    const std::string para =
        "The quick brown fox jumps over the lazy dog. 1234567890 Ünïcödé 中文测试 🦙\n"
        "def f(x):\n    return x**2  # square\n";
    std::string s;
    while (s.size() < bytes) s += para;
    return s;
}

double seconds_to_encode(const Tokenizer& tok, const std::string& text, size_t* n_ids) {
    const auto t0 = std::chrono::steady_clock::now();
    *n_ids = tok.encode(text, {.add_bos = false, .parse_special = true}).size();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr double kMaxSeconds = 10.0;
#else
constexpr double kMaxSeconds = 1.0;
#endif

TEST(TokenizerSpeed, HundredKilobytes) {
    EMBER_REQUIRE_FIXTURE("arch/qwen3/qwen3.gguf");
    EMBER_REQUIRE_FIXTURE("tokenizers/ggml-vocab-llama-spm.gguf");
    const std::string text = long_text(100 * 1024);
    // One pre-token of 100 KB: merging must not rescan the word after every merge.
    const std::string one_word(100 * 1024, 'a');
    for (const char* path : {"arch/qwen3/qwen3.gguf", "tokenizers/ggml-vocab-llama-spm.gguf"}) {
        const auto tok = load_tokenizer(path);
        for (const std::string* t : {&text, &one_word}) {
            size_t n = 0;
            const double s = seconds_to_encode(*tok, *t, &n);
            EXPECT_LT(s, kMaxSeconds) << path;
            EXPECT_GT(n, 0u);
            std::cout << "[ speed    ] " << path << ": " << t->size() << " bytes -> " << n
                      << " tokens in " << s * 1e3 << " ms\n";
        }
    }
}

}  // namespace
}  // namespace ember
