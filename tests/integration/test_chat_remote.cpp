// `ember chat --remote` against a real `ember serve` on a free loopback port (no mock server):
// a scripted conversation answers exactly as the local chat does (greedy), its reasoning
// arrives as thinking, the saved conversation replays against the remote; in line mode a
// cancelled reply is kept and the chat goes on (/regen, /edit, /export); a server killed
// mid-reply leaves the partial reply saved, the error said and the database intact; the
// full-screen UI streams a remote reply.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "sessions/sqlite.h"
#include "tests/support/fixtures.h"
#include "tests/support/process.h"
#include "tests/support/serve.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tmux.h"

namespace ember::test {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const char* const kQwen = "arch/qwen3/qwen3.gguf";

std::string thinking_template() {
    return std::string(EMBER_SOURCE_DIR) + "/tests/data/qwen3_thinking.jinja";
}

std::vector<json> jsonl(const std::string& out) {
    std::vector<json> lines;
    for (const auto& line : split_lines(out)) lines.push_back(json::parse(line));
    return lines;
}

std::string query_text(const std::string& db, const std::string& sql) {
    sessions::Database d(db);
    auto s = d.prepare(sql);
    std::string out;
    while (s.step()) out += s.column_text(0) + "\n";
    return out;
}

int64_t query_int(const std::string& db, const std::string& sql) {
    sessions::Database d(db);
    auto s = d.prepare(sql);
    return s.step() ? s.column_int(0) : -1;
}

// The id of the only conversation in `db`.
std::string only_conversation(const std::string& db) {
    EXPECT_EQ(query_int(db, "SELECT COUNT(*) FROM conversations"), 1);
    std::string id = query_text(db, "SELECT public_id FROM conversations");
    while (!id.empty() && id.back() == '\n') id.pop_back();
    return id;
}

#define REQUIRE_TMUX(binary)                                                \
    do {                                                                    \
        if ((binary).empty()) EMBER_SKIP_OR_FAIL("tmux not found in PATH"); \
    } while (0)

TEST(ChatRemote, ScriptedConversationEqualsLocalChatAndReplays) {
    EMBER_REQUIRE_FIXTURE(kQwen);
    const std::string input =
        "{\"role\":\"system\",\"content\":\"You are terse.\"}\n"
        "{\"role\":\"user\",\"content\":\"What is two plus two?\"}\n"
        "{\"role\":\"user\",\"content\":\"And three more?\"}\n"
        "{\"role\":\"user\",\"content\":\"Thanks\"}\n";
    // The thinking template makes the model reason first: its reasoning must come back over
    // the wire as reasoning_content and show as thinking.
    const std::vector<std::string> common = {"--jsonl", "--temp", "0",
                                             "-n",      "12",     "--show-thinking"};
    std::vector<std::string> local_argv = {ember_binary(),
                                           "chat",
                                           "-m",
                                           fixture_path(kQwen),
                                           "-t",
                                           "1",
                                           "--chat-template",
                                           thinking_template(),
                                           "--max-thinking-tokens",
                                           "6"};
    local_argv.insert(local_argv.end(), common.begin(), common.end());
    const auto local = run_command(local_argv, input);
    ASSERT_EQ(local.status, 0) << local.err;
    const auto expected = jsonl(local.out);
    ASSERT_EQ(expected.size(), 3u) << local.out;

    TempDir dir;
    ServeProcess server({"-m", fixture_path(kQwen), "--no-db", "-t", "1", "--chat-template",
                         thinking_template(), "--max-thinking-tokens", "6"},
                        dir.file("serve.log"));
    ASSERT_GT(server.port(), 0) << server.process().log();
    const std::string db = dir.file("chat.db");
    std::vector<std::string> remote_argv = {ember_binary(),       "chat", "--remote",
                                            server.url() + "/v1", "--db", db};
    remote_argv.insert(remote_argv.end(), common.begin(), common.end());
    const auto remote = run_command(remote_argv, input);
    ASSERT_EQ(remote.status, 0) << remote.err;
    const auto got = jsonl(remote.out);
    ASSERT_EQ(got.size(), expected.size()) << remote.out;
    for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(got[i]["reply"], expected[i]["reply"]) << "turn " << i;
        ASSERT_TRUE(got[i]["thinking"].is_string()) << got[i].dump();
        EXPECT_FALSE(got[i]["thinking"].get<std::string>().empty());
        EXPECT_EQ(got[i]["thinking"], expected[i]["thinking"]) << "turn " << i;
        EXPECT_EQ(got[i]["tokens_generated"], expected[i]["tokens_generated"]) << "turn " << i;
        EXPECT_EQ(got[i]["finish"], expected[i]["finish"]);
    }
    // The server keeps the conversation's state: later turns report reused prompt tokens.
    EXPECT_GT(got[1]["tokens_reused"].get<int64_t>(), 0) << got[1].dump();

    // Saved here: the conversation (system prompt, 3 prompts, 3 replies with their thinking),
    // no prefix state (the server holds it).
    const std::string id = only_conversation(db);
    EXPECT_EQ(query_int(db, "SELECT COUNT(*) FROM messages WHERE role = 'assistant'"), 3);
    EXPECT_EQ(query_int(db, "SELECT COUNT(*) FROM messages WHERE role = 'user'"), 3);
    EXPECT_EQ(query_int(db, "SELECT COUNT(*) FROM messages WHERE thinking != ''"), 3);
    EXPECT_EQ(query_int(db, "SELECT COUNT(*) FROM state_blobs"), 0);
    EXPECT_EQ(query_text(db, "SELECT system_prompt FROM conversations"), "You are terse.\n");

    // replay --regenerate asks the server it was recorded with, turn by turn.
    const auto replay = run_command({ember_binary(), "replay", id, "--regenerate", "--db", db});
    EXPECT_EQ(replay.status, 0) << replay.out << replay.err;
    EXPECT_NE(replay.out.find(server.url() + "/v1"), std::string::npos) << replay.out;
    EXPECT_NE(replay.out.find("all 3 turns identical"), std::string::npos) << replay.out;

    // export writes what was said.
    const auto exported = run_command({ember_binary(), "sessions", "export", id, "--db", db});
    EXPECT_EQ(exported.status, 0) << exported.err;
    EXPECT_NE(exported.out.find(expected[2]["reply"].get<std::string>()), std::string::npos)
        << exported.out;
}

TEST(ChatRemote, UnreachableServerIsReportedAndThePromptStaysSaved) {
    EMBER_REQUIRE_FIXTURE("models/stories260K.gguf");
    TempDir dir;
    const std::string db = dir.file("chat.db");
    // A port nothing listens on (a server that started and stopped).
    std::string url;
    {
        ServeProcess server({"-m", fixture_path("models/stories260K.gguf"), "--no-db", "-t", "1"},
                            dir.file("serve.log"));
        ASSERT_GT(server.port(), 0) << server.process().log();
        url = server.url() + "/v1";
        server.process().stop(SIGKILL);
    }
    const auto r = run_command({ember_binary(), "chat", "--remote", url, "--remote-model", "m",
                                "--db", db, "-p", "hello"});
    EXPECT_EQ(r.status, 1);
    EXPECT_NE(r.err.find("ember: no reply: cannot reach http://127.0.0.1:"), std::string::npos)
        << r.err;
    // The system's reason, not httplib's bare "Connection".
    EXPECT_NE(r.err.find(": connection refused"), std::string::npos) << r.err;
    EXPECT_EQ(query_int(db, "SELECT COUNT(*) FROM messages WHERE role = 'user'"), 1);
    EXPECT_EQ(query_int(db, "SELECT COUNT(*) FROM messages WHERE role = 'assistant'"), 0);
}

TEST(ChatRemote, ServerKilledMidReplyKeepsThePartialReplyAndTheDatabase) {
    EMBER_REQUIRE_FIXTURE(kQwen);
    TempDir dir;
    const std::string db = dir.file("chat.db");
    ServeProcess server({"-m", fixture_path(kQwen), "--no-db", "-t", "1"}, dir.file("serve.log"));
    ASSERT_GT(server.port(), 0) << server.process().log();
    // A first turn completes; the second is a long reply the server dies in.
    const auto first = run_command({ember_binary(), "chat", "--remote", server.url(), "--db", db,
                                    "--temp", "0", "-n", "8", "-p", "Hello"});
    ASSERT_EQ(first.status, 0) << first.err;
    const std::string id = only_conversation(db);

    BackgroundProcess chat(
        {ember_binary(), "chat", "--remote", server.url(), "--db", db, "--continue", "--temp", "0",
         "-n", "3000", "--ignore-eos", "-p", "Tell me a long story"},
        dir.file("chat.log"));
    // Some of the reply has streamed (it goes to the log as it arrives).
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (chat.log().size() < 200 && chat.running() &&
           std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_GE(chat.log().size(), 200u) << chat.log();
    server.process().stop(SIGKILL);
    const std::string said = chat.wait_for_line("the reply broke off", 30);
    EXPECT_NE(said.find("the connection was lost mid-reply"), std::string::npos) << chat.log();
    const auto exit_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (chat.running() && std::chrono::steady_clock::now() < exit_deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_EQ(chat.stop(SIGTERM, 10), 1) << "a broken reply makes the run fail";

    // The database is intact; the first turn and the second prompt are there, and the
    // partial reply was saved as far as it got (what the log shows of it).
    ASSERT_EQ(query_text(db, "PRAGMA integrity_check"), "ok\n");
    EXPECT_EQ(query_text(db, "PRAGMA foreign_key_check"), "");
    EXPECT_EQ(only_conversation(db), id);
    EXPECT_EQ(query_int(db, "SELECT COUNT(*) FROM messages WHERE role = 'user'"), 2);
    EXPECT_EQ(query_int(db, "SELECT COUNT(*) FROM messages WHERE role = 'assistant'"), 2);
    std::string partial = query_text(
        db, "SELECT content FROM messages WHERE role = 'assistant' ORDER BY id DESC LIMIT 1");
    partial.pop_back();  // query_text's newline
    EXPECT_GE(partial.size(), 100u);
    EXPECT_NE(chat.log().find(partial), std::string::npos);
    EXPECT_EQ(query_text(db,
                         "SELECT finish FROM reply_stats JOIN messages ON message_id = id "
                         "ORDER BY id DESC LIMIT 1"),
              "cancelled\n");
    const auto replayed = run_command({ember_binary(), "replay", id, "--db", db});
    EXPECT_EQ(replayed.status, 0);
    EXPECT_NE(replayed.out.find(partial), std::string::npos);
}

// Line mode in a real terminal (tmux) against the server.
class RemoteLineMode : public ::testing::Test {
protected:
    std::string screen() const { return tmux_->capture({"-J", "-S", "-"}); }
    bool wait_for(const std::function<bool(const std::string&)>& done, std::string& s,
                  double seconds = 30) const {
        return TmuxSession::poll([this] { return screen(); }, done, s, seconds);
    }
    static bool shows(const std::string& s, const std::string& text) {
        return s.find(text) != std::string::npos;
    }
    // The text after the last line that is `line`.
    static std::string after_line(const std::string& s, const std::string& line) {
        const size_t at = s.rfind("\n" + line + "\n");
        if (at == std::string::npos) return {};
        std::string rest = s.substr(at + line.size() + 2);
        while (!rest.empty() && (rest.back() == '\n' || rest.back() == ' ')) rest.pop_back();
        return rest;
    }
    static int count(const std::string& s, const std::string& text) {
        int n = 0;
        for (size_t at = s.find(text); at != std::string::npos; at = s.find(text, at + 1)) ++n;
        return n;
    }
    void type_line(const std::string& text) const {
        tmux_->text(text);
        tmux_->keys("Enter");
    }
    std::unique_ptr<TmuxSession> tmux_;
};

TEST_F(RemoteLineMode, CancelRegenEditAndExportAgainstTheServer) {
    EMBER_REQUIRE_FIXTURE(kQwen);
    const std::string tmux_binary = find_in_path("tmux");
    REQUIRE_TMUX(tmux_binary);
    TempDir dir;
    ServeProcess server({"-m", fixture_path(kQwen), "--no-db", "-t", "1"}, dir.file("serve.log"));
    ASSERT_GT(server.port(), 0) << server.process().log();
    const std::string db = dir.file("chat.db");

    tmux_ = std::make_unique<TmuxSession>(tmux_binary, "ember-remote-line");
    const std::string command = "env XDG_DATA_HOME=" + shell_quote(dir.path().string()) + " " +
                                shell_quote(ember_binary()) + " chat --plain --remote " +
                                shell_quote(server.url() + "/v1") + " --db " + shell_quote(db) +
                                " --temp 0 -n 3000 --ignore-eos --verbose; sleep 30";
    ASSERT_EQ(tmux_->start(command, 100, 30).status, 0);
    std::string s;
    ASSERT_TRUE(wait_for([](const std::string& t) { return shows(t, "Ctrl-D to leave"); }, s)) << s;

    // A long reply; Ctrl-C once some of it has streamed.
    type_line("Tell me a story");
    ASSERT_TRUE(wait_for(
        [](const std::string& t) { return after_line(t, "> Tell me a story").size() > 200; }, s))
        << s;
    tmux_->keys("C-c");
    ASSERT_TRUE(wait_for([](const std::string& t) { return shows(t, ", cancelled]"); }, s)) << s;
    // The server saw the connection close and stopped generating.
    const std::string closed = server.process().wait_for_line("client disconnected", 30);
    EXPECT_FALSE(closed.empty()) << server.process().log();

    type_line("/set n-predict 6");
    ASSERT_TRUE(wait_for([](const std::string& t) { return shows(t, "n-predict = 6"); }, s)) << s;
    type_line("/regen");
    ASSERT_TRUE(wait_for([](const std::string& t) { return count(t, ", length]") >= 1; }, s)) << s;
    type_line("/edit Tell me a poem");
    ASSERT_TRUE(wait_for([](const std::string& t) { return count(t, ", length]") >= 2; }, s)) << s;
    const std::string exported = dir.file("talk.md");
    type_line("/export " + exported);
    ASSERT_TRUE(wait_for([](const std::string& t) { return shows(t, "written to"); }, s)) << s;
    tmux_->keys("C-d");

    // The store holds the branches: the cancelled reply and its /regen sibling under the
    // first prompt, the edited prompt (a sibling of the first) with its reply.
    ASSERT_EQ(query_text(db, "PRAGMA integrity_check"), "ok\n");
    EXPECT_EQ(query_int(db, "SELECT COUNT(*) FROM messages WHERE role = 'user'"), 2);
    EXPECT_EQ(query_int(db, "SELECT COUNT(*) FROM messages WHERE role = 'assistant'"), 3);
    EXPECT_EQ(query_int(db,
                        "SELECT COUNT(*) FROM reply_stats WHERE finish = 'cancelled' AND "
                        "tokens_generated > 0"),
              1);
    EXPECT_EQ(query_int(db,
                        "SELECT COUNT(*) FROM messages m JOIN messages p ON m.parent_id = p.id "
                        "WHERE p.content = 'Tell me a story'"),
              2);
    const std::string md = read_file(exported);
    EXPECT_NE(md.find("Tell me a poem"), std::string::npos) << md;
}

TEST_F(RemoteLineMode, FullScreenStreamsARemoteReply) {
    EMBER_REQUIRE_FIXTURE(kQwen);
    const std::string tmux_binary = find_in_path("tmux");
    REQUIRE_TMUX(tmux_binary);
    TempDir dir;
    ServeProcess server({"-m", fixture_path(kQwen), "--no-db", "-t", "1", "--model-id", "qwen-x"},
                        dir.file("serve.log"));
    ASSERT_GT(server.port(), 0) << server.process().log();
    // The reply the server gives, to find on the screen.
    const auto expected = run_command({ember_binary(), "chat", "--remote", server.url(), "--temp",
                                       "0", "-n", "8", "--no-db", "-p", "Hello"});
    ASSERT_EQ(expected.status, 0) << expected.err;
    std::string reply = expected.out;
    while (!reply.empty() && reply.back() == '\n') reply.pop_back();
    const std::string first_word = reply.substr(0, reply.find(' '));
    ASSERT_FALSE(first_word.empty());

    tmux_ = std::make_unique<TmuxSession>(tmux_binary, "ember-remote-tui");
    const std::string command =
        "env TERM=xterm-256color XDG_DATA_HOME=" + shell_quote(dir.path().string()) + " " +
        shell_quote(ember_binary()) + " chat --remote " + shell_quote(server.url()) +
        " --temp 0 -n 8 --verbose --db " + shell_quote(dir.file("chat.db")) + "; sleep 30";
    ASSERT_EQ(tmux_->start(command, 100, 30).status, 0);
    std::string s;
    ASSERT_TRUE(wait_for([](const std::string& t) { return shows(t, "qwen-x"); }, s)) << s;
    type_line("Hello");
    ASSERT_TRUE(wait_for([](const std::string& t) { return shows(t, "[8 tokens"); }, s)) << s;
    EXPECT_TRUE(shows(s, first_word)) << s;
    tmux_->keys("C-d");
    EXPECT_EQ(query_int(dir.file("chat.db"), "SELECT COUNT(*) FROM messages"), 2);
}

}  // namespace
}  // namespace ember::test
