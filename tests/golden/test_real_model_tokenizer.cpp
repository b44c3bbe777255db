// The real models' tokenizers and chat formats against HF transformers
// (tests/data/<model>/tokenizer.json, written by scripts/real_model_refs.py from the very GGUF,
// one table row a model: Gemma 3 270M's SentencePiece vocabulary, SmolLM2's byte-level BPE with
// its `smollm` pre-tokenizer): every case must encode to HF's ids exactly
//   ids           special-token strings split as plain text (split_special_tokens=True),
//   ids_special   special-token strings parsed as the special tokens,
//   ids_with_bos  as `ids`, with the BOS the model's metadata asks for (add_special_tokens=True),
// and decode back to its text. The chat references are templates rendered by jinja2 as HF
// renders them (Gemma 3's published template, the file having none; SmolLM2's own, from the
// GGUF): Ember's rendering (for Gemma its turn-format fallback) must give the same text through
// the real binary, byte for byte, and the same ids tokenized as a conversation tokenizes its
// prompt.
#include <gtest/gtest.h>

#include <cctype>
#include <fstream>
#include <nlohmann/json.hpp>
#include <ostream>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "engine/generate/conversation.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/support/fixtures.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"

namespace ember::test {
namespace {

using json = nlohmann::json;

struct TokenizerCase {
    RealModel model;
    // The reference holds this many texts; fewer means a truncated or replaced file.
    size_t cases;
};

// gtest prints a failing row by its name.
void PrintTo(const TokenizerCase& c, std::ostream* os) {
    *os << c.model.name;
}

const TokenizerCase kModels[] = {{kGemma3_270m, 55}, {kSmolLM2_135m, 56}};

class RealModelTokenizer : public ::testing::TestWithParam<TokenizerCase> {
protected:
    void SetUp() override { EMBER_REQUIRE_REAL_MODEL_OF(GetParam().model); }
    const RealModel& model() const { return GetParam().model; }
    std::string path() const { return real_model_path(model()); }
    json load_reference() const {
        return json::parse(read_file(real_model_reference("tokenizer.json", model())));
    }
};

std::string ids_str(std::span<const TokenId> ids) {
    std::ostringstream ss;
    ss << '[';
    for (size_t i = 0; i < ids.size(); ++i) ss << (i ? "," : "") << ids[i];
    ss << ']';
    return ss.str();
}

// JSON quoting shows newlines, tabs and control characters readably in failure messages.
std::string shown(const std::string& s) {
    return json(s).dump();
}

// Collects every mismatch so that one run reports all failing cases, not just the first.
class Mismatches {
public:
    void add(const std::string& what, const std::string& text, const std::string& expected,
             const std::string& got) {
        ++count_;
        report_ << "\n  [" << what << "] text " << shown(text) << "\n    expected " << expected
                << "\n    got      " << got;
    }
    size_t count() const { return count_; }
    std::string report() const { return report_.str(); }

private:
    size_t count_ = 0;
    std::ostringstream report_;
};

TEST_P(RealModelTokenizer, EncodesEveryReferenceTextAsHf) {
    const json ref = load_reference();
    const Tokenizer tok = load_tokenizer(path());
    // The ids HF puts around a text come from the same file; a different BOS would make every
    // ids_with_bos case fail for a reason unrelated to the text.
    ASSERT_EQ(tok.bos_id(), ref.at("bos_token_id").get<TokenId>());
    ASSERT_EQ(tok.eos_id(), ref.at("eos_token_id").get<TokenId>());

    const json& cases = ref.at("cases");
    ASSERT_EQ(cases.size(), GetParam().cases);
    Mismatches bad;
    for (const json& c : cases) {
        const std::string text = c.at("text").get<std::string>();
        struct Variant {
            const char* key;
            EncodeOptions options;
        };
        EncodeOptions with_bos;
        // add_special_tokens=True adds BOS as the tokenizer's configuration says, which HF read
        // from the same metadata Tokenizer::add_bos() reports.
        with_bos.add_bos = tok.add_bos();
        EncodeOptions special;
        special.parse_special = true;
        for (const Variant& v : {Variant{"ids", EncodeOptions{}}, Variant{"ids_special", special},
                                 Variant{"ids_with_bos", with_bos}}) {
            const auto expected = c.at(v.key).get<std::vector<TokenId>>();
            const std::vector<TokenId> got = tok.encode(text, v.options);
            if (got != expected) bad.add(v.key, text, ids_str(expected), ids_str(got));
        }
    }
    EXPECT_EQ(bad.count(), 0u) << bad.count() << " of " << 3 * cases.size()
                               << " encodings differ from HF:" << bad.report();
}

// Both vocabularies decode losslessly (Gemma: U+2581 to space, byte fallback, fuse, no strip, as
// the normalizer adds no prefix; SmolLM2: byte-level, every byte a symbol), so each reference id
// list decodes back to its text: `ids` and `ids_with_bos` with special tokens skipped (a BOS is
// dropped), `ids_special` with them rendered as their text (they came from that text).
TEST_P(RealModelTokenizer, ReferenceIdsDecodeBackToTheirText) {
    const json ref = load_reference();
    const Tokenizer tok = load_tokenizer(path());
    const json& cases = ref.at("cases");
    ASSERT_EQ(cases.size(), GetParam().cases);
    Mismatches bad;
    DecodeOptions keep_special;
    keep_special.skip_special = false;
    for (const json& c : cases) {
        const std::string text = c.at("text").get<std::string>();
        for (const auto& [key, options] :
             {std::pair<const char*, DecodeOptions>{"ids", DecodeOptions{}},
              std::pair<const char*, DecodeOptions>{"ids_with_bos", DecodeOptions{}},
              std::pair<const char*, DecodeOptions>{"ids_special", keep_special}}) {
            const auto ids = c.at(key).get<std::vector<TokenId>>();
            const std::string got = tok.decode(ids, options);
            if (got != text) bad.add(std::string("decode ") + key, text, shown(text), shown(got));
        }
    }
    EXPECT_EQ(bad.count(), 0u) << bad.count() << " decodings differ from the text:" << bad.report();
}

// Renders each reference conversation with `ember render` (the template a chat with this model
// uses) and checks the text and, tokenized as a conversation tokenizes its prompt, the ids.
TEST_P(RealModelTokenizer, ChatRendersAndTokenizesAsHf) {
    const json ref = load_reference();
    // Gemma's reference has one chat ("chat"); SmolLM2's several ("chats", by name).
    json chats = ref.contains("chats") ? ref.at("chats") : json{{"chat", ref.at("chat")}};
    const Tokenizer tok = load_tokenizer(path());
    // A conversation passes the BOS token's text as the template's bos_token (and to
    // tokenize_rendered, so that a rendered BOS is not doubled).
    const std::string bos_text =
        tok.bos_id() >= 0 ? tok.token_to_piece(tok.bos_id(), /*render_special=*/true) : "";
    TempDir dir("ember-real-chat");
    for (const auto& [name, chat] : chats.items()) {
        const std::string expected_text = chat.at("text").get<std::string>();
        const auto expected_ids = chat.at("ids").get<std::vector<TokenId>>();
        const std::string messages = dir.file(name + ".json");
        {
            std::ofstream out(messages, std::ios::binary);
            out << chat.at("messages").dump();
            ASSERT_TRUE(out.good()) << messages;
        }
        const CommandResult r =
            run_command({ember_binary(), "render", "-m", path(), "--messages", messages}, "", 120);
        ASSERT_EQ(r.status, 0) << r.err;
        // `ember render` prints the rendering verbatim (no newline added), so the bytes compare.
        EXPECT_EQ(r.out, expected_text) << name << ": Ember's rendering " << shown(r.out)
                                        << "\nHF's              " << shown(expected_text);

        const std::vector<TokenId> from_ember = tokenize_rendered(tok, r.out, bos_text);
        EXPECT_EQ(from_ember, expected_ids) << name << ": expected " << ids_str(expected_ids)
                                            << "\ngot      " << ids_str(from_ember);
        // The reference text itself too, so a rendering difference above is not also reported
        // as a tokenizer one.
        const std::vector<TokenId> from_reference = tokenize_rendered(tok, expected_text, bos_text);
        EXPECT_EQ(from_reference, expected_ids) << name << ": expected " << ids_str(expected_ids)
                                                << "\ngot      " << ids_str(from_reference);
    }
}

INSTANTIATE_TEST_SUITE_P(Models, RealModelTokenizer, ::testing::ValuesIn(kModels),
                         [](const ::testing::TestParamInfo<TokenizerCase>& param_info) {
                             std::string name = param_info.param.model.name;
                             for (char& ch : name) {
                                 if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                             }
                             return name;
                         });

}  // namespace
}  // namespace ember::test
