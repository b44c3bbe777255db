// The fallback chat templates that ship in assets/templates/ and are compiled into the engine:
// what a model without a template of its own is rendered with. The expected texts are the
// published turn formats written out by hand (ChatML: <|im_start|>ROLE\n ... <|im_end|>\n;
// Gemma: <start_of_turn>ROLE\n ... <end_of_turn>\n with the assistant named "model" and the
// system text folded into the first user turn), not renders of the templates under test.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "engine/generate/conversation.h"
#include "engine/generate/default_template.h"
#include "engine/gguf/gguf.h"
#include "engine/template/template.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/support/fixtures.h"

namespace ember {
namespace {

ChatTemplateInputs three_turns() {
    ChatTemplateInputs in;
    in.messages = nlohmann::ordered_json::array({
        {{"role", "system"}, {"content", "Be brief."}},
        {{"role", "user"}, {"content", "  Hi there \n"}},
        {{"role", "assistant"}, {"content", "Hello."}},
        {{"role", "user"}, {"content", "Name a colour."}},
    });
    in.bos_token = "<bos>";
    return in;
}

TEST(FallbackTemplates, AModelWithoutATemplateIsRenderedAsChatMl) {
    // The llama fixture carries no tokenizer.chat_template.
    const std::string file = "arch/llama/llama.gguf";
    EMBER_REQUIRE_FIXTURE(file);
    auto gguf = GgufFile::open(test::fixture_path(file));
    const Tokenizer tokenizer(*gguf);
    const ChatTemplateChoice choice = choose_chat_template(*gguf, tokenizer);
    EXPECT_FALSE(choice.from_file);
    EXPECT_EQ(choice.description, "none in the file; ChatML fallback");
    EXPECT_EQ(ChatTemplate(choice.source).render(three_turns()),
              "<|im_start|>system\nBe brief.<|im_end|>\n"
              "<|im_start|>user\n  Hi there \n<|im_end|>\n"
              "<|im_start|>assistant\nHello.<|im_end|>\n"
              "<|im_start|>user\nName a colour.<|im_end|>\n"
              "<|im_start|>assistant\n");
    ChatTemplateInputs no_prompt = three_turns();
    no_prompt.add_generation_prompt = false;
    EXPECT_EQ(ChatTemplate(kChatMlTemplate).render(no_prompt),
              "<|im_start|>system\nBe brief.<|im_end|>\n"
              "<|im_start|>user\n  Hi there \n<|im_end|>\n"
              "<|im_start|>assistant\nHello.<|im_end|>\n"
              "<|im_start|>user\nName a colour.<|im_end|>\n");
}

TEST(FallbackTemplates, GemmaTurnsFoldTheSystemTextIntoTheFirstUserTurn) {
    EXPECT_EQ(ChatTemplate(kGemmaTurnTemplate).render(three_turns()),
              "<bos><start_of_turn>user\nBe brief.\n\nHi there<end_of_turn>\n"
              "<start_of_turn>model\nHello.<end_of_turn>\n"
              "<start_of_turn>user\nName a colour.<end_of_turn>\n"
              "<start_of_turn>model\n");
    ChatTemplateInputs no_system = three_turns();
    no_system.messages.erase(0);
    no_system.add_generation_prompt = false;
    EXPECT_EQ(ChatTemplate(kGemmaTurnTemplate).render(no_system),
              "<bos><start_of_turn>user\nHi there<end_of_turn>\n"
              "<start_of_turn>model\nHello.<end_of_turn>\n"
              "<start_of_turn>user\nName a colour.<end_of_turn>\n");
}

}  // namespace
}  // namespace ember
