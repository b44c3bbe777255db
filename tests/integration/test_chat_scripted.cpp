// `ember chat --script --jsonl` through a real pipe: later turns reuse the earlier turns'
// state, evaluate only the new tokens, and answer exactly what a from-scratch run answers.
#include <gtest/gtest.h>

#include <fstream>
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
    std::vector<std::string> argv = {
        ember_binary(), "chat",    "-m",     fixture_path("arch/qwen3/qwen3.gguf"),
        "--script",     "--jsonl", "--temp", "0",
        "-n",           "12",      "-t",     "2"};
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
        EXPECT_EQ(
            warm[i]["tokens_reused"].get<int64_t>() + warm[i]["tokens_evaluated"].get<int64_t>(),
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

// Hybrid families keep recurrent state that cannot be truncated: later turns restore a
// snapshot taken at a turn boundary and recompute the gap. Same replies as from scratch.
TEST(ChatScripted, HybridConversationsReuseSnapshotsAndMatchRecompute) {
    for (const char* model : {"arch/qwen35/qwen35.gguf", "arch/lfm2/lfm2.gguf"}) {
        SCOPED_TRACE(model);
        EMBER_REQUIRE_FIXTURE(model);
        std::string input;
        for (const char* p : kPrompts) input += json{{"prompt", p}}.dump() + "\n";
        auto run = [&](const char* extra) {
            std::vector<std::string> argv = {ember_binary(), "chat",   "-m", fixture_path(model),
                                             "--jsonl",      "--temp", "0",  "-n",
                                             "10",           "--no-db"};
            if (extra != nullptr) argv.push_back(extra);
            const auto r = run_command(argv, input);
            EXPECT_EQ(r.status, 0) << r.err;
            std::vector<json> turns;
            for (const auto& line : split_lines(r.out)) turns.push_back(json::parse(line));
            return turns;
        };
        const auto warm = run(nullptr);
        const auto cold = run("--no-prefix-cache");
        ASSERT_EQ(warm.size(), std::size(kPrompts));
        ASSERT_EQ(cold.size(), std::size(kPrompts));
        for (size_t i = 0; i < warm.size(); ++i) {
            EXPECT_EQ(warm[i]["reply"], cold[i]["reply"]) << "turn " << i;
            if (i == 0) continue;
            // At least the previous turn's prompt comes from a snapshot.
            EXPECT_GE(warm[i]["tokens_reused"].get<int64_t>(),
                      cold[i - 1]["tokens_evaluated"].get<int64_t>() - 1)
                << "turn " << i;
        }
    }
}

TEST(ChatScripted, InvalidJsonlLineIsNamedSkippedAndFailsTheRun) {
    EMBER_REQUIRE_FIXTURE("arch/qwen3/qwen3.gguf");
    const auto r =
        run_command({ember_binary(), "chat", "-m", fixture_path("arch/qwen3/qwen3.gguf"),
                     "--script", "--jsonl", "--temp", "0", "-n", "4", "--no-db"},
                    "{\"prompt\":\"hi\"}\n{broken\n{\"role\":\"tool\",\"content\":\"x\"}\n"
                    "{\"prompt\":\"still here\"}\n");
    EXPECT_EQ(r.status, 1);
    EXPECT_NE(r.err.find("line 2: not valid JSON"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("line 3: role \"tool\""), std::string::npos) << r.err;
    // The prompts before and after the bad lines were answered.
    EXPECT_EQ(split_lines(r.out).size(), 2u) << r.out;
}

TEST(ChatScripted, PromptLongerThanContextIsReportedAndTheRunGoesOn) {
    EMBER_REQUIRE_FIXTURE("arch/qwen3/qwen3.gguf");
    std::string huge;
    for (int i = 0; i < 400; ++i) huge += "word" + std::to_string(i) + " ";
    const std::string input = json{{"prompt", "short one"}}.dump() + "\n" +
                              json{{"prompt", huge}}.dump() + "\n" +
                              json{{"prompt", "another short one"}}.dump() + "\n";
    const auto r = run_command({ember_binary(), "chat", "-m", fixture_path("arch/qwen3/qwen3.gguf"),
                                "--jsonl", "--temp", "0", "-n", "8", "-c", "256", "--no-db"},
                               input);
    EXPECT_EQ(r.status, 1);
    EXPECT_NE(r.err.find("more than the context of 256"), std::string::npos) << r.err;
    const auto lines = split_lines(r.out);
    ASSERT_EQ(lines.size(), 3u) << r.out;
    const json skipped = json::parse(lines[1]);
    EXPECT_EQ(skipped["finish"], "context");
    EXPECT_TRUE(skipped.contains("error"));
    // The conversation carries on without the prompt that did not fit: the third turn reuses
    // the whole first turn.
    const json first = json::parse(lines[0]);
    const json third = json::parse(lines[2]);
    EXPECT_EQ(third["finish"], "length");
    EXPECT_GE(
        third["tokens_reused"].get<int64_t>(),
        first["tokens_evaluated"].get<int64_t>() + first["tokens_generated"].get<int64_t>() - 4);
}

TEST(ChatScripted, LongConversationDropsOldestTurnsAndSaysSo) {
    EMBER_REQUIRE_FIXTURE("arch/qwen3/qwen3.gguf");
    std::string input;
    for (int i = 0; i < 12; ++i) {
        input +=
            json{{"prompt", "turn " + std::to_string(i) + " tell me something long"}}.dump() + "\n";
    }
    const auto r = run_command(
        {ember_binary(), "chat", "-m", fixture_path("arch/qwen3/qwen3.gguf"), "--jsonl", "--temp",
         "0", "-n", "24", "--ignore-eos", "-c", "160", "--system", "You are terse.", "--no-db"},
        input);
    ASSERT_EQ(r.status, 0) << r.err;
    const auto lines = split_lines(r.out);
    ASSERT_EQ(lines.size(), 12u);
    int64_t dropped = 0;
    for (const auto& line : lines) {
        const json t = json::parse(line);
        EXPECT_LE(t["tokens_reused"].get<int64_t>() + t["tokens_evaluated"].get<int64_t>() + 24,
                  160);
        if (t.contains("context_dropped_tokens"))
            dropped += t["context_dropped_tokens"].get<int64_t>();
    }
    EXPECT_GT(dropped, 0);
}

TEST(ChatScripted, UnreadableModelGivesClearError) {
    auto r = run_command({ember_binary(), "chat", "-m", "/nonexistent/model.gguf", "-p", "hi"});
    EXPECT_NE(r.status, 0);
    EXPECT_NE(r.err.find("/nonexistent/model.gguf"), std::string::npos) << r.err;

    const std::string dir = ::testing::TempDir();
    r = run_command({ember_binary(), "chat", "-m", dir, "-p", "hi"});
    EXPECT_NE(r.status, 0);
    EXPECT_NE(r.err.find("directory"), std::string::npos) << r.err;

    const std::string garbage = dir + "/not-a-model.gguf";
    {
        std::ofstream f(garbage, std::ios::binary);
        f << "this is not a GGUF file at all";
    }
    r = run_command({ember_binary(), "chat", "-m", garbage, "-p", "hi"});
    EXPECT_NE(r.status, 0);
    EXPECT_NE(r.err.find("not-a-model.gguf"), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "");
}

}  // namespace
}  // namespace ember::test
