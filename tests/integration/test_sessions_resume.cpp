// The session database through the real binary: a conversation resumed in a new process
// evaluates only its new tokens and answers exactly what a cold run answers; a second
// conversation with the same long system prompt starts warm; corrupted state is dropped,
// recomputed and reported; another model's state is never used; storage grows with the
// tokens, not the turns; and bad input fails with clear messages.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "sessions/sqlite.h"
#include "tests/support/fixtures.h"
#include "tests/support/process.h"
#include "tests/support/scripted_chat.h"
#include "tests/support/temp_dir.h"

namespace ember::test {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const std::vector<std::string> kPrompts = {"Hello there", "What is two plus two?",
                                           "And three plus three?", "Name a colour."};
const char* const kSystem = "You are a helpful assistant.";

using TempDir = ::ember::test::TempDir;

CommandResult sessions_cmd(const std::string& db, std::vector<std::string> args) {
    std::vector<std::string> argv = {ember_binary(), "sessions", "--db", db};
    argv.insert(argv.end(), args.begin(), args.end());
    return run_command(argv);
}

int64_t query_int(const std::string& db, const std::string& sql) {
    sessions::Database d(db);
    auto s = d.prepare(sql);
    s.step();
    return s.column_int(0);
}

int64_t num(const json& turn, const char* key) {
    return turn[key].get<int64_t>();
}

std::vector<std::string> slice(size_t from, size_t to) {
    return std::vector<std::string>(kPrompts.begin() + from, kPrompts.begin() + to);
}

class SessionsResume : public ::testing::TestWithParam<std::string> {};

TEST_P(SessionsResume, RestartEvaluatesOnlyNewTokensAndMatchesCold) {
    const std::string model = GetParam();
    EMBER_REQUIRE_FIXTURE(model);
    TempDir dir;
    const auto cold =
        run_scripted_chat(model, kPrompts, {"--system", kSystem, "--no-db", "--no-prefix-cache"});
    // One process holding the whole conversation: what warm turns evaluate.
    const auto warm =
        run_scripted_chat(model, kPrompts, {"--system", kSystem, "--db", dir.file("w.db")});
    // The same conversation split over two processes.
    const std::string db = dir.file("split.db");
    const auto first = run_scripted_chat(model, slice(0, 2), {"--system", kSystem, "--db", db});
    const auto second = run_scripted_chat(model, slice(2, 4), {"--db", db, "--continue"});
    ASSERT_EQ(cold.status, 0) << cold.err;
    ASSERT_EQ(first.status, 0) << first.err;
    ASSERT_EQ(second.status, 0) << second.err;
    ASSERT_EQ(cold.turns.size(), 4u);
    ASSERT_EQ(warm.turns.size(), 4u);
    ASSERT_EQ(first.turns.size(), 2u);
    ASSERT_EQ(second.turns.size(), 2u);

    for (size_t i = 0; i < 4; ++i) {
        const json& split = i < 2 ? first.turns[i] : second.turns[i - 2];
        EXPECT_EQ(split["reply"], cold.turns[i]["reply"]) << "turn " << i;
        EXPECT_EQ(warm.turns[i]["reply"], cold.turns[i]["reply"]) << "turn " << i;
        // The resumed process evaluates exactly what the continuous one did.
        EXPECT_EQ(num(split, "tokens_reused"), num(warm.turns[i], "tokens_reused")) << i;
        EXPECT_EQ(num(split, "tokens_evaluated"), num(warm.turns[i], "tokens_evaluated")) << i;
    }
    // The first turn after the restart reuses at least the whole previous prompt; a hybrid
    // resumes from a snapshot of its recurrent state, the latest one inside the prompt being
    // taken before its last token (the token generation starts from).
    const json& resumed = second.turns[0];
    const bool hybrid =
        model.find("qwen35") != std::string::npos || model.find("lfm2") != std::string::npos;
    EXPECT_GE(num(resumed, "tokens_reused"),
              num(cold.turns[1], "tokens_evaluated") - (hybrid ? 1 : 0));
    EXPECT_EQ(num(resumed, "tokens_reused") + num(resumed, "tokens_evaluated"),
              num(cold.turns[2], "tokens_evaluated"));

    // Both processes wrote one conversation of four turns.
    const auto list = sessions_cmd(db, {"list"});
    EXPECT_EQ(list.status, 0) << list.err;
    EXPECT_EQ(query_int(db, "SELECT COUNT(*) FROM conversations"), 1);
    EXPECT_EQ(query_int(db, "SELECT COUNT(*) FROM messages"), 8);
    EXPECT_NE(list.out.find("Hello there"), std::string::npos) << list.out;
    EXPECT_NE(list.out.find("    4  "), std::string::npos) << list.out;
}

TEST_P(SessionsResume, SecondConversationWithSameSystemPromptStartsWarm) {
    const std::string model = GetParam();
    EMBER_REQUIRE_FIXTURE(model);
    TempDir dir;
    std::string system = "You are Ember, a careful assistant running in a terminal.";
    for (int i = 0; i < 12; ++i) {
        system += " Rule " + std::to_string(i) + ": answer briefly, cite nothing, stay polite.";
    }
    const std::string db = dir.file("shared.db");
    const auto one = run_scripted_chat(model, {"Hello there"}, {"--system", system, "--db", db});
    const auto two = run_scripted_chat(model, {"Name a colour."}, {"--system", system, "--db", db});
    const auto cold = run_scripted_chat(model, {"Name a colour."},
                                        {"--system", system, "--no-db", "--no-prefix-cache"});
    ASSERT_EQ(one.status, 0) << one.err;
    ASSERT_EQ(two.status, 0) << two.err;
    ASSERT_EQ(two.turns.size(), 1u);
    ASSERT_EQ(cold.turns.size(), 1u);
    const int64_t prompt = num(cold.turns[0], "tokens_evaluated");
    ASSERT_GT(prompt, 150);
    // Everything up to the question is restored from the first conversation's state.
    EXPECT_GE(num(two.turns[0], "tokens_reused"), prompt - 24);
    EXPECT_EQ(num(two.turns[0], "tokens_reused") + num(two.turns[0], "tokens_evaluated"), prompt);
    EXPECT_EQ(two.turns[0]["reply"], cold.turns[0]["reply"]);
    EXPECT_EQ(query_int(db, "SELECT COUNT(*) FROM conversations"), 2);
}

TEST_P(SessionsResume, CorruptedStateIsDroppedRecomputedAndReported) {
    const std::string model = GetParam();
    EMBER_REQUIRE_FIXTURE(model);
    TempDir dir;
    const std::string db = dir.file("corrupt.db");
    const auto cold =
        run_scripted_chat(model, kPrompts, {"--system", kSystem, "--no-db", "--no-prefix-cache"});
    const auto first = run_scripted_chat(model, slice(0, 2), {"--system", kSystem, "--db", db});
    ASSERT_EQ(first.status, 0) << first.err;
    ASSERT_GT(query_int(db, "SELECT COUNT(*) FROM state_blocks"), 0);
    {
        sessions::Database d(db);
        d.exec("UPDATE state_blobs SET state = randomblob(length(state))");
    }
    const auto second = run_scripted_chat(model, slice(2, 4), {"--db", db, "--continue"});
    ASSERT_EQ(second.status, 0) << second.err;
    ASSERT_EQ(second.turns.size(), 2u);
    EXPECT_NE(second.err.find("warning"), std::string::npos) << second.err;
    EXPECT_NE(second.err.find("dropped"), std::string::npos) << second.err;
    // Nothing of the bad state was used: the whole prompt was evaluated, and the answers are
    // the cold ones.
    EXPECT_EQ(num(second.turns[0], "tokens_reused"), 0);
    EXPECT_EQ(second.turns[0]["reply"], cold.turns[2]["reply"]);
    EXPECT_EQ(second.turns[1]["reply"], cold.turns[3]["reply"]);
    const auto stats = sessions_cmd(db, {"stats"});
    EXPECT_EQ(stats.status, 0) << stats.err;
    EXPECT_NE(stats.out.find("1 corrupted blobs dropped"), std::string::npos) << stats.out;
}

INSTANTIATE_TEST_SUITE_P(Models, SessionsResume,
                         ::testing::Values("arch/llama/llama.gguf", "arch/qwen2/qwen2.gguf",
                                           "arch/qwen3/qwen3.gguf", "arch/qwen35/qwen35.gguf",
                                           "arch/lfm2/lfm2.gguf", "arch/gemma3/gemma3.gguf",
                                           "arch/qwen3moe/qwen3moe.gguf"),
                         [](const auto& param_info) {
                             return fs::path(param_info.param).stem().string();
                         });

// gemma3's sliding layers (window 8 in the fixture) keep their rows in rings of 512 positions:
// a conversation far longer than both, split over two processes, resumes warm (the store held
// the rows the rings had at each turn end, which cover the window) and answers as a cold run.
TEST(SessionsResumeSlidingWindow, ConversationLongerThanTheRingsResumesWarm) {
    const std::string model = "arch/gemma3/gemma3.gguf";
    EMBER_REQUIRE_FIXTURE(model);
    TempDir dir;
    std::string system = "You are Ember, a careful assistant running in a terminal.";
    for (int i = 0; i < 60; ++i) {
        system += " Rule " + std::to_string(i) + ": answer briefly, cite nothing, stay polite.";
    }
    const auto cold =
        run_scripted_chat(model, kPrompts, {"--system", system, "--no-db", "--no-prefix-cache"});
    const std::string db = dir.file("long.db");
    const auto first = run_scripted_chat(model, slice(0, 2), {"--system", system, "--db", db});
    const auto second = run_scripted_chat(model, slice(2, 4), {"--db", db, "--continue"});
    ASSERT_EQ(cold.status, 0) << cold.err;
    ASSERT_EQ(first.status, 0) << first.err;
    ASSERT_EQ(second.status, 0) << second.err;
    ASSERT_EQ(cold.turns.size(), 4u);
    ASSERT_EQ(first.turns.size(), 2u);
    ASSERT_EQ(second.turns.size(), 2u);
    ASSERT_GT(num(cold.turns[0], "tokens_evaluated"), 600);  // past the rings
    for (size_t i = 0; i < 4; ++i) {
        const json& split = i < 2 ? first.turns[i] : second.turns[i - 2];
        EXPECT_EQ(split["reply"], cold.turns[i]["reply"]) << "turn " << i;
    }
    const json& resumed = second.turns[0];
    EXPECT_GE(num(resumed, "tokens_reused"), num(cold.turns[1], "tokens_evaluated"));
    EXPECT_EQ(num(resumed, "tokens_reused") + num(resumed, "tokens_evaluated"),
              num(cold.turns[2], "tokens_evaluated"));
    EXPECT_EQ(second.err.find("warning"), std::string::npos) << second.err;
}

TEST(SessionsStorage, GrowsWithTokensNotTurns) {
    const std::string model = "arch/llama/llama.gguf";
    EMBER_REQUIRE_FIXTURE(model);
    TempDir dir;
    const std::string db = dir.file("grow.db");
    std::vector<std::string> prompts;
    for (int i = 0; i < 8; ++i) prompts.push_back("Question number " + std::to_string(i) + "?");
    const auto run = run_scripted_chat(model, prompts, {"--system", kSystem, "--db", db});
    ASSERT_EQ(run.status, 0) << run.err;
    ASSERT_EQ(run.turns.size(), prompts.size());
    const json& last = run.turns.back();
    const int64_t final_tokens =
        num(last, "tokens_reused") + num(last, "tokens_evaluated") + num(last, "tokens_generated");
    int64_t all_prompts = 0;
    for (const auto& t : run.turns)
        all_prompts += num(t, "tokens_reused") + num(t, "tokens_evaluated");
    const int64_t stored = query_int(db, "SELECT SUM(n_tokens) FROM state_blocks");
    // Each token's rows are stored once: the final conversation, give or take the last
    // sampled token (never evaluated), plus the start of the next turn the chat prepares
    // (the reply's end-of-turn token and the next user header: 5 tokens in Llama 3's
    // template), and far less than every turn's prompt summed.
    EXPECT_GE(stored, final_tokens - 1);
    EXPECT_LE(stored, final_tokens + 5);
    EXPECT_LT(stored * 3, all_prompts);
    const int64_t bytes = query_int(db, "SELECT SUM(raw_bytes) FROM state_blocks");
    const int64_t per_token = query_int(db, "SELECT MIN(raw_bytes / n_tokens) FROM state_blocks");
    EXPECT_LE(bytes, (stored + 64) * per_token);
}

TEST(SessionsStorage, OtherModelsStateIsNeverRestored) {
    EMBER_REQUIRE_FIXTURE("arch/llama/llama.gguf");
    EMBER_REQUIRE_FIXTURE("arch/qwen3/qwen3.gguf");
    TempDir dir;
    const std::string db = dir.file("models.db");
    const auto first = run_scripted_chat("arch/llama/llama.gguf", slice(0, 2), {"--db", db});
    ASSERT_EQ(first.status, 0) << first.err;
    const auto other =
        run_scripted_chat("arch/qwen3/qwen3.gguf", slice(2, 3), {"--db", db, "--continue"});
    ASSERT_EQ(other.status, 0) << other.err;
    ASSERT_EQ(other.turns.size(), 1u);
    EXPECT_NE(other.err.find("recorded with llama.gguf"), std::string::npos) << other.err;
    EXPECT_EQ(num(other.turns[0], "tokens_reused"), 0);
    EXPECT_EQ(query_int(db, "SELECT COUNT(DISTINCT seed) FROM state_blocks"), 2);
}

TEST(SessionsCommands, ListSearchExportRenameRemove) {
    EMBER_REQUIRE_FIXTURE("arch/llama/llama.gguf");
    TempDir dir;
    const std::string db = dir.file("cmds.db");
    ASSERT_EQ(run_scripted_chat("arch/llama/llama.gguf", {"Tell me about marmalade"}, {"--db", db})
                  .status,
              0);
    sessions::Database d(db);
    auto s = d.prepare("SELECT public_id FROM conversations");
    ASSERT_TRUE(s.step());
    const std::string id = s.column_text(0);

    const auto found = sessions_cmd(db, {"search", "marmalade"});
    EXPECT_EQ(found.status, 0) << found.err;
    EXPECT_NE(found.out.find(id), std::string::npos) << found.out;
    EXPECT_NE(found.out.find("[marmalade]"), std::string::npos) << found.out;

    const auto exported = sessions_cmd(db, {"export", id.substr(0, 6), "--format", "json"});
    ASSERT_EQ(exported.status, 0) << exported.err;
    const json j = json::parse(exported.out);
    EXPECT_EQ(j["messages"].size(), 2u);
    EXPECT_EQ(j["model"], "llama.gguf");
    const auto md = sessions_cmd(db, {"export", id, "--format", "md"});
    EXPECT_NE(md.out.find("## User\n\nTell me about marmalade"), std::string::npos) << md.out;

    EXPECT_EQ(sessions_cmd(db, {"rename", id, "Jam notes"}).status, 0);
    EXPECT_NE(sessions_cmd(db, {"list"}).out.find("Jam notes"), std::string::npos);
    const auto show = sessions_cmd(db, {"show", id});
    // Each reply names the model that wrote it.
    EXPECT_NE(show.out.find("[assistant #2 by llama.gguf]"), std::string::npos) << show.out;

    EXPECT_EQ(sessions_cmd(db, {"rm", id}).status, 0);
    EXPECT_NE(sessions_cmd(db, {"list"}).out.find("no saved conversations"), std::string::npos);
    const auto stats = sessions_cmd(db, {"stats"});
    EXPECT_EQ(stats.status, 0) << stats.err;
    EXPECT_NE(stats.out.find("conversations: 0, messages: 0"), std::string::npos) << stats.out;
}

TEST(SessionsCommands, BadInputGivesClearErrors) {
    EMBER_REQUIRE_FIXTURE("arch/llama/llama.gguf");
    TempDir dir;
    const std::string garbage = dir.file("garbage.db");
    {
        std::ofstream out(garbage, std::ios::binary);
        for (int i = 0; i < 400; ++i) out << "definitely not a database ";
    }
    const auto bad_db = run_scripted_chat("arch/llama/llama.gguf", {"hi"}, {"--db", garbage});
    EXPECT_NE(bad_db.status, 0);
    EXPECT_NE(bad_db.err.find(garbage), std::string::npos) << bad_db.err;
    EXPECT_NE(bad_db.err.find("not a database"), std::string::npos) << bad_db.err;
    const auto bad_list = sessions_cmd(garbage, {"list"});
    EXPECT_NE(bad_list.status, 0);
    EXPECT_NE(bad_list.err.find("not a database"), std::string::npos) << bad_list.err;

    const std::string db = dir.file("empty.db");
    const auto unknown =
        run_scripted_chat("arch/llama/llama.gguf", {"hi"}, {"--db", db, "--resume", "nope"});
    EXPECT_NE(unknown.status, 0);
    EXPECT_NE(unknown.err.find("no saved conversation 'nope'"), std::string::npos) << unknown.err;
    const auto nothing =
        run_scripted_chat("arch/llama/llama.gguf", {"hi"}, {"--db", db, "--continue"});
    EXPECT_NE(nothing.status, 0);
    EXPECT_NE(nothing.err.find("no saved conversation to continue"), std::string::npos)
        << nothing.err;
    const auto no_db =
        run_scripted_chat("arch/llama/llama.gguf", {"hi"}, {"--no-db", "--continue"});
    EXPECT_NE(no_db.status, 0);
    for (const char* cmd : {"show", "rm", "export"}) {
        const auto r = sessions_cmd(db, {cmd, "nope"});
        EXPECT_NE(r.status, 0) << cmd;
        EXPECT_NE(r.err.find("no saved conversation 'nope'"), std::string::npos) << r.err;
    }
    const auto bad_cap =
        run_scripted_chat("arch/llama/llama.gguf", {"hi"}, {"--db", db, "--state-cap", "lots"});
    EXPECT_NE(bad_cap.status, 0);
    EXPECT_NE(bad_cap.err.find("'lots' is not a size"), std::string::npos) << bad_cap.err;
}

}  // namespace
}  // namespace ember::test
