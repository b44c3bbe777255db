// Thinking models through the real binary: with a Qwen3-style template whose generation
// prompt opens <think>, a random-weight model never closes the block by itself, so the
// budget (or the loop detector) must end it — and the answer must still arrive.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/support/fixtures.h"
#include "tests/support/process.h"

namespace ember::test {
namespace {

using json = nlohmann::json;

std::string thinking_template() {
    return std::string(EMBER_SOURCE_DIR) + "/tests/data/qwen3_thinking.jinja";
}

std::vector<json> chat(const std::vector<std::string>& extra, int expect_status = 0) {
    std::vector<std::string> argv = {ember_binary(),
                                     "chat",
                                     "-m",
                                     fixture_path("arch/qwen3/qwen3.gguf"),
                                     "--chat-template",
                                     thinking_template(),
                                     "--jsonl",
                                     "--temp",
                                     "0",
                                     "-n",
                                     "12",
                                     "-t",
                                     "2"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    const auto r = run_command(argv, "{\"prompt\":\"Hello there\"}\n{\"prompt\":\"Again\"}\n");
    EXPECT_EQ(r.status, expect_status) << r.err;
    std::vector<json> turns;
    for (const auto& line : split_lines(r.out)) turns.push_back(json::parse(line));
    return turns;
}

TEST(ChatThinking, BudgetEndsThinkingAndTheAnswerArrives) {
    EMBER_REQUIRE_FIXTURE("arch/qwen3/qwen3.gguf");
    const auto turns = chat({"--max-thinking-tokens", "8", "--show-thinking"});
    ASSERT_EQ(turns.size(), 2u);
    for (const auto& t : turns) {
        EXPECT_EQ(t["thinking_end"], "budget") << t.dump();
        EXPECT_EQ(t["thinking_tokens"].get<int64_t>(), 8);
        ASSERT_TRUE(t["thinking"].is_string());
        EXPECT_FALSE(t["thinking"].get<std::string>().empty());
        // The answer has its own budget (-n 12): it is not eaten by the thinking.
        EXPECT_FALSE(t["reply"].get<std::string>().empty());
        EXPECT_EQ(t["finish"], "length");
        EXPECT_GE(t["tokens_generated"].get<int64_t>(), 8 + 12);
        EXPECT_EQ(t["reply"].get<std::string>().find("</think>"), std::string::npos);
    }
}

TEST(ChatThinking, ThinkingOmittedUnlessAsked) {
    EMBER_REQUIRE_FIXTURE("arch/qwen3/qwen3.gguf");
    const auto shown = chat({"--max-thinking-tokens", "8", "--show-thinking"});
    const auto hidden = chat({"--max-thinking-tokens", "8"});
    ASSERT_EQ(shown.size(), 2u);
    ASSERT_EQ(hidden.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
        EXPECT_TRUE(hidden[i]["thinking"].is_null());
        EXPECT_EQ(hidden[i]["reply"], shown[i]["reply"]);  // greedy: same answer either way
        EXPECT_EQ(hidden[i]["thinking_tokens"], shown[i]["thinking_tokens"]);
    }
}

TEST(ChatThinking, LoopingThinkingIsCutShortOfTheBudget) {
    EMBER_REQUIRE_FIXTURE("arch/qwen3/qwen3.gguf");
    // This random model repeats itself within a hundred tokens; the budget is far away.
    const auto turns = chat({"--max-thinking-tokens", "3000", "--show-thinking"});
    ASSERT_EQ(turns.size(), 2u);
    for (const auto& t : turns) {
        EXPECT_EQ(t["thinking_end"], "loop") << t.dump();
        EXPECT_LT(t["thinking_tokens"].get<int64_t>(), 3000);
        EXPECT_FALSE(t["reply"].get<std::string>().empty());
    }
}

TEST(ChatThinking, ThinkOffClosesTheBlockBeforeTheModelStarts) {
    EMBER_REQUIRE_FIXTURE("arch/qwen3/qwen3.gguf");
    const auto turns = chat({"--think", "off", "--show-thinking"});
    ASSERT_EQ(turns.size(), 2u);
    for (const auto& t : turns) {
        EXPECT_EQ(t["thinking_tokens"].get<int64_t>(), 0);
        EXPECT_TRUE(t["thinking"].is_null());
        EXPECT_FALSE(t["reply"].get<std::string>().empty());
        EXPECT_EQ(t["tokens_generated"].get<int64_t>(), 12);
    }
}

TEST(ChatThinking, PlainOutputWrapsShownThinking) {
    EMBER_REQUIRE_FIXTURE("arch/qwen3/qwen3.gguf");
    const auto r = run_command({ember_binary(), "chat", "-m", fixture_path("arch/qwen3/qwen3.gguf"),
                                "--chat-template", thinking_template(), "--temp", "0", "-n", "6",
                                "--max-thinking-tokens", "5", "--show-thinking", "-p", "hi"});
    ASSERT_EQ(r.status, 0) << r.err;
    const size_t open = r.out.find("<think>\n");
    const size_t close = r.out.find("\n</think>\n\n");
    ASSERT_EQ(open, 0u) << r.out;
    ASSERT_NE(close, std::string::npos) << r.out;
    EXPECT_GT(r.out.size(), close + 11);  // the answer follows the block
}

}  // namespace
}  // namespace ember::test
