// `ember chat --script --jsonl` through a real pipe: later turns reuse the earlier turns'
// state, evaluate only the new tokens, and answer exactly what a from-scratch run answers.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/support/fixtures.h"
#include "tests/support/process.h"

namespace ember::test {
namespace {

using json = nlohmann::json;

const char* const kPrompts[] = {"Hello there", "What is two plus two?", "And three plus three?",
                                "Name a colour.", "Thanks, bye!"};

std::vector<json> run_chat(const std::vector<std::string>& extra) {
    std::string input;
    for (const char* p : kPrompts) input += json{{"role", "user"}, {"content", p}}.dump() + "\n";
    std::vector<std::string> argv = {ember_binary(), "chat", "-m",
                                     fixture_path("arch/qwen3/qwen3.gguf"),
                                     "--script", "--jsonl", "--temp", "0", "-n", "12", "-t", "2"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    const auto r = run_command(argv, input);
    EXPECT_EQ(r.status, 0) << r.err;
    std::vector<json> turns;
    for (const auto& line : split_lines(r.out)) turns.push_back(json::parse(line));
    return turns;
}

TEST(ChatScripted, LaterTurnsReuseStateAndMatchRecompute) {
    EMBER_REQUIRE_FIXTURE("arch/qwen3/qwen3.gguf");
    const auto warm = run_chat({});
    const auto cold = run_chat({"--no-prefix-cache"});
    ASSERT_EQ(warm.size(), std::size(kPrompts));
    ASSERT_EQ(cold.size(), std::size(kPrompts));

    EXPECT_EQ(warm[0]["tokens_reused"].get<int64_t>(), 0);
    for (size_t i = 0; i < warm.size(); ++i) {
        // Same greedy replies whether or not the prefix was reused.
        EXPECT_EQ(warm[i]["reply"], cold[i]["reply"]) << "turn " << i;
        // Without the cache every turn evaluates its whole prompt.
        EXPECT_EQ(cold[i]["tokens_reused"].get<int64_t>(), 0);
        const int64_t prompt_len = cold[i]["tokens_evaluated"].get<int64_t>();
        EXPECT_EQ(warm[i]["tokens_reused"].get<int64_t>() +
                      warm[i]["tokens_evaluated"].get<int64_t>(),
                  prompt_len);
        if (i == 0) continue;
        // Everything the previous turn rendered (its prompt and reply) is reused, up to the
        // template's unstable tail of a few tokens around the end of the reply.
        const int64_t previous_len = cold[i - 1]["tokens_evaluated"].get<int64_t>() +
                                     cold[i - 1]["tokens_generated"].get<int64_t>();
        EXPECT_GE(warm[i]["tokens_reused"].get<int64_t>(), previous_len - 4) << "turn " << i;
        EXPECT_LT(warm[i]["tokens_evaluated"].get<int64_t>(), prompt_len - previous_len + 8)
            << "turn " << i;
    }
}

TEST(ChatScripted, InvalidJsonlLineIsNamedAndFails) {
    EMBER_REQUIRE_FIXTURE("arch/qwen3/qwen3.gguf");
    const auto r = run_command({ember_binary(), "chat", "-m", fixture_path("arch/qwen3/qwen3.gguf"),
                                "--script", "--jsonl", "--temp", "0", "-n", "4"},
                               "{\"prompt\":\"hi\"}\n{broken\n");
    EXPECT_NE(r.status, 0);
    EXPECT_NE(r.err.find("line 2"), std::string::npos) << r.err;
    // The first prompt was still answered.
    EXPECT_EQ(split_lines(r.out).size(), 1u);
}

TEST(ChatScripted, UnreadableModelGivesClearError) {
    const auto r = run_command({ember_binary(), "chat", "-m", "/nonexistent/model.gguf", "-p", "hi"});
    EXPECT_NE(r.status, 0);
    EXPECT_NE(r.err.find("model.gguf"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace ember::test
