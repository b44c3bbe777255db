// A scripted gpt-oss (harmony) conversation through the real binary: later turns keep the
// earlier turns' state warm although the harmony template re-renders past turns (it drops their
// analysis), answer exactly what a from-scratch run answers, and a conversation resumed from the
// session database in a new process restores that state and continues the same way.
#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "tests/support/fixtures.h"
#include "tests/support/process.h"
#include "tests/support/scripted_chat.h"
#include "tests/support/temp_dir.h"

namespace ember::test {
namespace {

using json = nlohmann::json;

const char* const kModel = "arch/gptoss/gptoss.gguf";
const std::vector<std::string> kPrompts = {"Hello there", "What is two plus two?",
                                           "And three plus three?"};

ChatRun run_chat(const std::vector<std::string>& prompts, const std::vector<std::string>& extra) {
    return run_scripted_chat(kModel, prompts, extra);
}

int64_t num(const json& turn, const char* key) {
    return turn[key].get<int64_t>();
}

TEST(ChatGptOss, ScriptedTurnsKeepThePrefixWarmAndMatchRecompute) {
    EMBER_REQUIRE_FIXTURE(kModel);
    TempDir dir;
    const auto warm = run_chat(kPrompts, {"--db", dir.file("warm.db")});
    const auto cold = run_chat(kPrompts, {"--no-db", "--no-prefix-cache"});
    ASSERT_EQ(warm.status, 0) << warm.err;
    ASSERT_EQ(cold.status, 0) << cold.err;
    ASSERT_EQ(warm.turns.size(), kPrompts.size());
    ASSERT_EQ(cold.turns.size(), kPrompts.size());

    EXPECT_EQ(num(warm.turns[0], "tokens_reused"), 0);
    for (size_t i = 0; i < kPrompts.size(); ++i) {
        const json& w = warm.turns[i];
        const json& c = cold.turns[i];
        std::printf("[gptoss] turn %zu: tokens_reused %lld, tokens_evaluated %lld (cold %lld)\n",
                    i + 1, static_cast<long long>(num(w, "tokens_reused")),
                    static_cast<long long>(num(w, "tokens_evaluated")),
                    static_cast<long long>(num(c, "tokens_evaluated")));
        // Reusing the prefix changes nothing the user sees (greedy).
        EXPECT_EQ(w["reply"], c["reply"]) << "turn " << i;
        EXPECT_EQ(w["thinking"], c["thinking"]) << "turn " << i;
        EXPECT_EQ(num(c, "tokens_reused"), 0) << "turn " << i;
        EXPECT_EQ(num(w, "tokens_reused") + num(w, "tokens_evaluated"), num(c, "tokens_evaluated"))
            << "turn " << i;
        if (i == 0) continue;
        EXPECT_GT(num(w, "tokens_reused"), 0) << "turn " << i;
        // At least the previous turn's whole prompt is reused: the template re-renders the
        // previous reply (dropping its analysis), so that is where the new tokens start.
        EXPECT_GE(num(w, "tokens_reused"), num(cold.turns[i - 1], "tokens_evaluated"))
            << "turn " << i;
    }
}

// Two turns in one process, the third in a new one with --continue: the restored state is
// reused (exactly as much as one continuous process reuses) and the greedy continuation is the
// cold run's.
TEST(ChatGptOss, ResumedConversationRestoresStateAndContinuesLikeAColdRun) {
    EMBER_REQUIRE_FIXTURE(kModel);
    TempDir dir;
    const auto cold = run_chat(kPrompts, {"--no-db", "--no-prefix-cache"});
    const auto warm = run_chat(kPrompts, {"--db", dir.file("warm.db")});
    const std::string db = dir.file("split.db");
    const auto first = run_chat({kPrompts[0], kPrompts[1]}, {"--db", db});
    const auto second = run_chat({kPrompts[2]}, {"--db", db, "--continue"});
    ASSERT_EQ(cold.status, 0) << cold.err;
    ASSERT_EQ(warm.status, 0) << warm.err;
    ASSERT_EQ(first.status, 0) << first.err;
    ASSERT_EQ(second.status, 0) << second.err;
    ASSERT_EQ(cold.turns.size(), 3u);
    ASSERT_EQ(warm.turns.size(), 3u);
    ASSERT_EQ(first.turns.size(), 2u);
    ASSERT_EQ(second.turns.size(), 1u);

    const json& resumed = second.turns[0];
    std::printf("[gptoss] resumed turn 3: tokens_reused %lld, tokens_evaluated %lld\n",
                static_cast<long long>(num(resumed, "tokens_reused")),
                static_cast<long long>(num(resumed, "tokens_evaluated")));
    for (size_t i = 0; i < 2; ++i) EXPECT_EQ(first.turns[i]["reply"], cold.turns[i]["reply"]);
    EXPECT_EQ(resumed["reply"], cold.turns[2]["reply"]);
    EXPECT_EQ(resumed["thinking"], cold.turns[2]["thinking"]);
    EXPECT_GE(num(resumed, "tokens_reused"), num(cold.turns[1], "tokens_evaluated"));
    EXPECT_EQ(num(resumed, "tokens_reused"), num(warm.turns[2], "tokens_reused"));
    EXPECT_EQ(num(resumed, "tokens_evaluated"), num(warm.turns[2], "tokens_evaluated"));
}

}  // namespace
}  // namespace ember::test
