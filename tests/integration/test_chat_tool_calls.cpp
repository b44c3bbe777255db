// Tool calls in `ember chat` driven through the real binary: the fixture model has random
// weights and calls nothing by itself, so --tool-choice forces the call (the core's call
// grammar). In line mode and in the full-screen UI (through tmux) the proposal is shown, "n"
// runs nothing (the tool's command would create a marker file: it stays absent), "y" runs it,
// shows its output and stores it in the database; a resumed conversation asks again for a call
// left waiting, and the built-in read_file refuses a "../" path out of its root. Scripted runs
// run nothing without --yes-tools, and a conversation with tool turns resumes warm (its prompt
// renders to the tokens the state already holds). Expected texts come from the files and
// commands the tests write, and from the file system.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "sessions/sqlite.h"
#include "tests/support/fixtures.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tmux.h"

namespace ember::test {
namespace {

namespace fs = std::filesystem;

// Qwen3's template carries tools (Hermes <tool_call> format).
const char* const kModel = "arch/qwen3/qwen3.gguf";
const char* const kShellPrompt = "SHELL$";
// What the user tool prints: independent of the code under test.
const char* const kToolOutput = "marker-made-by-tool";

void write_file(const fs::path& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary);
    out << text;
}

bool shows(const std::string& screen, const std::string& text) {
    return screen.find(text) != std::string::npos;
}

int64_t count_between(const std::string& screen, const std::string& text) {
    int64_t n = 0;
    for (size_t at = screen.find(text); at != std::string::npos; at = screen.find(text, at + 1)) {
        ++n;
    }
    return n;
}

// Rows of the `tool` messages in the database: content, in order.
std::vector<std::string> tool_messages(const std::string& db_path) {
    sessions::Database db(db_path);
    sessions::Statement s =
        db.prepare("SELECT content FROM messages WHERE role = 'tool' ORDER BY id");
    std::vector<std::string> out;
    while (s.step()) out.push_back(s.column_text(0));
    return out;
}

class ChatToolCalls : public ::testing::Test {
protected:
    void SetUp() override {
        EMBER_REQUIRE_FIXTURE(kModel);
        dir_ = std::make_unique<TempDir>("ember-tool-calls");
        db_ = dir_->file("chat.db");
        marker_ = dir_->path() / "marker";
        // The tool creates the marker and says so; its argument is whatever the model wrote.
        tools_file_ = dir_->file("tools.json");
        write_file(tools_file_, R"([{"type": "function",
            "function": {"name": "make_marker", "description": "Create the marker file",
                         "parameters": {"type": "object",
                                        "properties": {"label": {"type": "string"}},
                                        "required": ["label"]}},
            "command": ["sh", "-c", "touch )" +
                                    marker_.string() + "; echo " + kToolOutput + R"("]}])");
    }

    // The chat's command line; `extra` adds flags.
    std::string chat_command(const std::string& extra) const {
        return shell_quote(ember_binary()) + " chat -m " + shell_quote(fixture_path(kModel)) +
               " --db " + shell_quote(db_) + " -t 1 --seed 3 -n 160 -c 2048 --think off " + extra;
    }

    void start_terminal(const std::string& tmux_binary) {
        tmux_ = std::make_unique<TmuxSession>(tmux_binary, "ember-tool-calls");
        const std::string shell = "env PS1=" + shell_quote(std::string(kShellPrompt) + " ") +
                                  " LANG=C.UTF-8 XDG_DATA_HOME=" + shell_quote(dir_->file("data")) +
                                  " XDG_CONFIG_HOME=" + shell_quote(dir_->file("config")) +
                                  " EMBER_MODEL= /bin/sh";
        ASSERT_EQ(tmux_->start(shell, 110, 40).status, 0);
        std::string screen;
        ASSERT_TRUE(wait_for([](const std::string& s) { return shows(s, kShellPrompt); }, screen))
            << screen;
        tmux_->text("cd " + shell_quote(dir_->path().string()));
        tmux_->keys("Enter");
    }
    bool wait_for(const std::function<bool(const std::string&)>& done, std::string& screen,
                  double seconds = 30.0) const {
        return TmuxSession::poll(
            [this] {
                return tmux_->capture({"-J", "-S", "-"});
            },
            done, screen, seconds);
    }
    void line(const std::string& text) const {
        tmux_->text(text);
        tmux_->keys("Enter");
    }

    std::unique_ptr<TempDir> dir_;
    std::string db_;
    fs::path marker_;
    std::string tools_file_;
    std::unique_ptr<TmuxSession> tmux_;
};

TEST_F(ChatToolCalls, LineModeAsksAndRunsOnlyOnYes) {
    EMBER_REQUIRE_TMUX(tmux);
    start_terminal(tmux);
    std::string screen;
    line(
        chat_command("--plain --tools " + shell_quote(tools_file_) + " --tool-choice make_marker"));
    ASSERT_TRUE(wait_for([](const std::string& s) { return shows(s, "ember line mode"); }, screen))
        << screen;

    line("make a marker please");
    ASSERT_TRUE(wait_for([](const std::string& s) { return shows(s, "run it? [y/N]"); }, screen))
        << screen;
    EXPECT_TRUE(shows(screen, "the model asks to run a tool:")) << screen;
    EXPECT_TRUE(shows(screen, "make_marker {")) << screen;
    EXPECT_TRUE(shows(screen, "\"label\":")) << screen;
    // No: nothing runs, the model is told.
    line("n");
    ASSERT_TRUE(
        wait_for([](const std::string& s) { return shows(s, "declined: nothing ran"); }, screen))
        << screen;
    EXPECT_FALSE(fs::exists(marker_));
    std::vector<std::string> stored = tool_messages(db_);
    ASSERT_EQ(stored.size(), 1u);
    EXPECT_NE(stored[0].find("declined"), std::string::npos) << stored[0];

    // Yes: it runs, its output shows and is stored as the call's result.
    line("once more");
    ASSERT_TRUE(wait_for(
        [](const std::string& s) { return count_between(s, "run it? [y/N]") >= 2; }, screen))
        << screen;
    line("y");
    ASSERT_TRUE(
        wait_for([](const std::string& s) { return shows(s, "make_marker returned:"); }, screen))
        << screen;
    EXPECT_TRUE(shows(screen, kToolOutput)) << screen;
    EXPECT_TRUE(fs::exists(marker_));
    stored = tool_messages(db_);
    ASSERT_GE(stored.size(), 2u);
    EXPECT_EQ(stored[1], std::string(kToolOutput) + "\n");
    // The model goes on after reading the result (and may call again: answered no).
    ASSERT_TRUE(wait_for(
        [](const std::string& s) {
            return s.rfind("\n>") != std::string::npos &&
                   s.rfind("\n>") > s.rfind("make_marker returned:");
        },
        screen))
        << screen;
    line("/quit");
}

// Issue 41 row 11: a paste whose later line is "y" arrives while the model is still writing
// its call. That line was typed before the question existed, so it must not answer it: the
// question discards type-ahead (tcflush) and waits for a line typed after it.
TEST_F(ChatToolCalls, LineModeTypeAheadDoesNotAnswerTheQuestion) {
    EMBER_REQUIRE_TMUX(tmux);
    start_terminal(tmux);
    std::string screen;
    line(
        chat_command("--plain --tools " + shell_quote(tools_file_) + " --tool-choice make_marker"));
    ASSERT_TRUE(wait_for([](const std::string& s) { return shows(s, "ember line mode"); }, screen))
        << screen;

    // One paste: the prompt and, right behind it, "y" and Enter.
    tmux_->text("make a marker please");
    tmux_->keys("Enter");
    tmux_->text("y");
    tmux_->keys("Enter");
    ASSERT_TRUE(wait_for([](const std::string& s) { return shows(s, "run it? [y/N]"); }, screen))
        << screen;
    // The question stays open: nothing ran, nothing was declined, for a good while after.
    EXPECT_FALSE(wait_for(
        [](const std::string& s) {
            return shows(s, "make_marker returned:") || shows(s, "declined: nothing ran");
        },
        screen, 2.0))
        << screen;
    EXPECT_FALSE(fs::exists(marker_)) << "the pasted y approved the call";
    EXPECT_TRUE(tool_messages(db_).empty());

    // A fresh answer is what decides.
    line("n");
    ASSERT_TRUE(
        wait_for([](const std::string& s) { return shows(s, "declined: nothing ran"); }, screen))
        << screen;
    EXPECT_FALSE(fs::exists(marker_));
    const std::vector<std::string> stored = tool_messages(db_);
    ASSERT_EQ(stored.size(), 1u);
    EXPECT_NE(stored[0].find("declined"), std::string::npos) << stored[0];
    line("/quit");
}

TEST_F(ChatToolCalls, FullScreenShowsTheProposalInTheConversation) {
    EMBER_REQUIRE_TMUX(tmux);
    start_terminal(tmux);
    std::string screen;
    const auto idle = [](const std::string& s) {
        return shows(s, "» Type a message") && !shows(s, "replying ");
    };
    line(chat_command("--tools " + shell_quote(tools_file_) + " --tool-choice required"));
    ASSERT_TRUE(wait_for(idle, screen)) << screen;
    line("make a marker");
    ASSERT_TRUE(wait_for([](const std::string& s) { return shows(s, "[y/N] y runs it"); }, screen))
        << screen;
    EXPECT_TRUE(shows(screen, "the model asks to run a tool:")) << screen;
    EXPECT_TRUE(shows(screen, "make_marker {")) << screen;
    line("n");
    ASSERT_TRUE(
        wait_for([](const std::string& s) { return shows(s, "make_marker: not run"); }, screen))
        << screen;
    EXPECT_FALSE(fs::exists(marker_));

    line("again");
    ASSERT_TRUE(wait_for(
        [](const std::string& s) { return count_between(s, "[y/N] y runs it") >= 2; }, screen))
        << screen;
    line("y");
    ASSERT_TRUE(
        wait_for([](const std::string& s) { return shows(s, "make_marker returned:"); }, screen))
        << screen;
    EXPECT_TRUE(shows(screen, kToolOutput)) << screen;
    EXPECT_TRUE(fs::exists(marker_));
    const std::vector<std::string> stored = tool_messages(db_);
    ASSERT_GE(stored.size(), 2u);
    EXPECT_EQ(stored[1], std::string(kToolOutput) + "\n");
    tmux_->keys("C-d");
}

TEST_F(ChatToolCalls, ScriptedRunsNothingWithoutYesTools) {
    const CommandResult run =
        run_command({ember_binary(), "chat", "-m", fixture_path(kModel), "--db", db_, "-t", "1",
                     "--seed", "3", "-n", "160", "--think", "off", "--tools", tools_file_,
                     "--tool-choice", "required", "--jsonl"},
                    "{\"prompt\": \"make a marker\"}\n", 120);
    ASSERT_EQ(run.status, 0) << run.err;
    EXPECT_FALSE(fs::exists(marker_));
    const auto reply = nlohmann::json::parse(run.out.substr(0, run.out.find('\n')));
    ASSERT_TRUE(reply.contains("tool_calls")) << run.out;
    EXPECT_EQ(reply["tool_calls"][0]["name"], "make_marker");
    EXPECT_TRUE(nlohmann::json::parse(reply["tool_calls"][0]["arguments"].get<std::string>())
                    .contains("label"));
    EXPECT_EQ(reply["tool_results"][0]["ran"], false);
    EXPECT_EQ(tool_messages(db_).size(), 1u);

    // --yes-tools: it runs; its output is the result, in the output and in the store.
    const CommandResult yes =
        run_command({ember_binary(),  "chat",     "-m",          fixture_path(kModel),
                     "--db",          db_,        "-t",          "1",
                     "--seed",        "3",        "-n",          "160",
                     "--think",       "off",      "--tools",     tools_file_,
                     "--tool-choice", "required", "--yes-tools", "-p",
                     "make a marker"},
                    "", 120);
    ASSERT_EQ(yes.status, 0) << yes.err;
    EXPECT_TRUE(fs::exists(marker_));
    EXPECT_TRUE(shows(yes.out, "[tool result] make_marker\n" + std::string(kToolOutput) + "\n"))
        << yes.out;
}

TEST_F(ChatToolCalls, AResumedWaitingCallAsksAgainAndReadFileStaysInItsRoot) {
    EMBER_REQUIRE_TMUX(tmux);
    const fs::path root = dir_->path() / "root";
    fs::create_directories(root);
    write_file(root / "inside.txt", "inside\n");
    const std::string secret = "the-secret-beside-the-root";
    write_file(dir_->path() / "secret.txt", secret + "\n");
    // A conversation whose forced read_file call went unanswered (the chat ended at the
    // question); its path is set to one that escapes the root.
    const CommandResult first = run_command({ember_binary(),
                                             "chat",
                                             "-m",
                                             fixture_path(kModel),
                                             "--db",
                                             db_,
                                             "-t",
                                             "1",
                                             "--seed",
                                             "3",
                                             "-n",
                                             "160",
                                             "--think",
                                             "off",
                                             "--builtin-tools",
                                             "read_file",
                                             "--tool-root",
                                             root.string(),
                                             "--tool-choice",
                                             "read_file",
                                             "-p",
                                             "read a file"},
                                            "", 120);
    ASSERT_EQ(first.status, 0) << first.err;
    {
        sessions::Database db(db_);
        db.exec(
            "DELETE FROM messages WHERE role = 'tool';"
            "UPDATE messages SET tool_calls = json_set(tool_calls, '$[0].arguments', "
            "'{\"path\": \"../secret.txt\"}') WHERE role = 'assistant';"
            "UPDATE conversations SET current_leaf = "
            "(SELECT id FROM messages WHERE role = 'assistant');");
    }
    start_terminal(tmux);
    std::string screen;
    line(chat_command("--plain --continue --builtin-tools read_file --tool-root " +
                      shell_quote(root.string())));
    ASSERT_TRUE(wait_for([](const std::string& s) { return shows(s, "run it? [y/N]"); }, screen))
        << screen;
    EXPECT_TRUE(shows(screen, "\"path\": \"../secret.txt\"")) << screen;
    line("y");
    ASSERT_TRUE(
        wait_for([](const std::string& s) { return shows(s, "read_file returned:"); }, screen))
        << screen;
    EXPECT_TRUE(shows(screen, "outside the directory tools may read")) << screen;
    EXPECT_FALSE(shows(screen, secret)) << screen;
    const std::vector<std::string> stored = tool_messages(db_);
    ASSERT_EQ(stored.size(), 1u);
    EXPECT_NE(stored[0].find("outside the directory tools may read"), std::string::npos);
    EXPECT_EQ(stored[0].find(secret), std::string::npos);
    line("/quit");
}

TEST_F(ChatToolCalls, AConversationWithToolTurnsResumesWarm) {
    const auto chat = [&](const std::vector<std::string>& extra, const std::string& input) {
        std::vector<std::string> argv = {ember_binary(), "chat", "-m",      fixture_path(kModel),
                                         "--db",         db_,    "-t",      "1",
                                         "--seed",       "3",    "-n",      "160",
                                         "--think",      "off",  "--tools", tools_file_,
                                         "--jsonl"};
        argv.insert(argv.end(), extra.begin(), extra.end());
        return run_command(argv, input, 120);
    };
    // A call that ran, its result, and the reply after it.
    const CommandResult first =
        chat({"--tool-choice", "required", "--yes-tools"}, "{\"prompt\": \"make a marker\"}\n");
    ASSERT_EQ(first.status, 0) << first.err;
    ASSERT_TRUE(fs::exists(marker_));
    ASSERT_EQ(tool_messages(db_).size(), 1u);
    // A new process resumes it: the tool turns render as they were evaluated, so only the new
    // prompt is evaluated (the state of everything before it comes from the store).
    const CommandResult second = chat({"--continue"}, "{\"prompt\": \"thanks\"}\n");
    ASSERT_EQ(second.status, 0) << second.err;
    const auto turn = nlohmann::json::parse(second.out.substr(0, second.out.find('\n')));
    const int64_t reused = turn["tokens_reused"];
    const int64_t evaluated = turn["tokens_evaluated"];
    EXPECT_GT(reused, 20) << second.out;
    EXPECT_LT(evaluated, 16) << second.out;
}

}  // namespace
}  // namespace ember::test
