// ember replay through the real binary: the transcript of a saved conversation, and
// --regenerate reporting every turn identical for a conversation the chat generated greedily
// (over two processes), and a changed stored reply reported as different with exit 1.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "sessions/sqlite.h"
#include "tests/support/fixtures.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"

namespace ember::test {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

using TempDir = ::ember::test::TempDir;

CommandResult chat(const std::string& model, const std::vector<std::string>& prompts,
                   const std::vector<std::string>& extra) {
    std::string input;
    for (const auto& p : prompts) input += json{{"role", "user"}, {"content", p}}.dump() + "\n";
    std::vector<std::string> argv = {ember_binary(), "chat",    "-m",     fixture_path(model),
                                     "--script",     "--jsonl", "--temp", "0",
                                     "-n",           "16",      "-t",     "2"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return run_command(argv, input);
}

CommandResult replay(const std::string& db, const std::string& id,
                     const std::vector<std::string>& extra) {
    std::vector<std::string> argv = {ember_binary(), "replay", id, "--db", db, "-t", "2"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return run_command(argv);
}

std::string conversation_id(const std::string& db) {
    sessions::Database d(db);
    auto s = d.prepare("SELECT public_id FROM conversations");
    return s.step() ? s.column_text(0) : std::string();
}

class Replay : public ::testing::TestWithParam<std::string> {};

TEST_P(Replay, RegenerateReportsEveryTurnIdentical) {
    const std::string model = GetParam();
    EMBER_REQUIRE_FIXTURE(model);
    TempDir dir;
    const std::string db = dir.file("replay.db");
    // Thinking off where the template knows it: a thinking block's limits are not stored.
    const std::vector<std::string> common = {"--db", db, "--think", "off"};
    auto second_args = common;
    second_args.push_back("--continue");
    auto first_args = common;
    first_args.insert(first_args.end(), {"--system", "You are terse."});
    ASSERT_EQ(chat(model, {"Hello there", "What is two plus two?"}, first_args).status, 0);
    ASSERT_EQ(chat(model, {"And three plus three?", "Name a colour."}, second_args).status, 0);
    const std::string id = conversation_id(db);
    ASSERT_FALSE(id.empty());

    const auto shown = replay(db, id.substr(0, 5), {});
    ASSERT_EQ(shown.status, 0) << shown.err;
    EXPECT_NE(shown.out.find("[system]\nYou are terse."), std::string::npos) << shown.out;
    EXPECT_NE(shown.out.find("[user]\nName a colour."), std::string::npos) << shown.out;
    EXPECT_NE(shown.out.find("[assistant]"), std::string::npos) << shown.out;

    const auto again = replay(db, id, {"--regenerate", "-m", fixture_path(model)});
    EXPECT_EQ(again.status, 0) << again.out << again.err;
    for (int turn = 1; turn <= 4; ++turn) {
        EXPECT_NE(again.out.find("turn " + std::to_string(turn) + ": identical"), std::string::npos)
            << again.out;
    }
    EXPECT_NE(again.out.find("all 4 turns identical"), std::string::npos) << again.out;

    // A stored reply that the model would not give is reported, with a failing status. (The
    // last one: a changed reply changes the history later turns were answered from.)
    {
        sessions::Database d(db);
        d.exec(
            "UPDATE messages SET content = 'something else entirely', token_ids = NULL "
            "WHERE id = (SELECT MAX(id) FROM messages WHERE role = 'assistant')");
    }
    const auto changed = replay(db, id, {"--regenerate", "-m", fixture_path(model)});
    EXPECT_EQ(changed.status, 1) << changed.out << changed.err;
    EXPECT_NE(changed.out.find("turn 3: identical"), std::string::npos) << changed.out;
    EXPECT_NE(changed.out.find("turn 4: different at character 0"), std::string::npos)
        << changed.out;
    EXPECT_NE(changed.out.find("1 of 4 turns different"), std::string::npos) << changed.out;
}

INSTANTIATE_TEST_SUITE_P(Models, Replay,
                         ::testing::Values("arch/llama/llama.gguf", "arch/qwen3/qwen3.gguf"),
                         [](const auto& param_info) {
                             return fs::path(param_info.param).stem().string();
                         });

TEST(ReplayErrors, UnknownConversationAndMissingDatabase) {
    TempDir dir;
    const auto missing = replay(dir.file("none.db"), "abc", {});
    EXPECT_NE(missing.status, 0);
    EXPECT_NE(missing.err.find("no session database"), std::string::npos) << missing.err;
    { sessions::Database d(dir.file("empty.db")); }
    const auto unknown = replay(dir.file("empty.db"), "abc", {});
    EXPECT_NE(unknown.status, 0);
    EXPECT_NE(unknown.err.find("no saved conversation 'abc'"), std::string::npos) << unknown.err;
}

}  // namespace
}  // namespace ember::test
