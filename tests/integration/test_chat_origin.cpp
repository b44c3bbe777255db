// Issue 43, items 2 to 4, through the real binary (tmux for the full-screen chat, real SQLite
// files, a real `ember serve`):
// - every reply's origin: the transcript names the model where it changes, `sessions show`,
//   the JSON export and `replay` name each reply's model, and the sessions picker reopens a
//   conversation with its own model;
// - settings stick: /set is stored with the conversation and comes back with --continue,
//   `replay --regenerate` generates each turn with its own settings, /preset B after /preset A
//   keeps none of A's, and the CLI refuses what the server refuses, in the same words;
// - what went with a message stays visible: attachments collapsed with name and size, titles
//   from what the user typed, Esc or Ctrl-C answering a pending /run question with no, Esc
//   followed by Enter a second later (full-screen during a reply, and in line mode, where the
//   Enter was lost);
// - a remote chat whose server went away keeps the prompt on screen with the reason
//   (connection refused), and its status line shows no "cold" or "prefill";
// - a database of schema 6 is migrated without loss;
// - /copy says what it did (nothing, where tmux drops OSC 52).
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "sessions/schema.h"
#include "sessions/sqlite.h"
#include "tests/support/fixtures.h"
#include "tests/support/process.h"
#include "tests/support/serve.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tmux.h"

namespace ember::test {
namespace {

namespace fs = std::filesystem;

const char* const kShellPrompt = "SHELL$";
const char* const kFirst = "arch/qwen3/qwen3.gguf";     // found as "qwen3"
const char* const kSecond = "arch/gemma3/gemma3.gguf";  // found as "gemma3"
const char* const kStories = "models/stories260K.gguf";

bool shows(const std::string& screen, const std::string& text) {
    return screen.find(text) != std::string::npos;
}

bool at_shell(const std::string& screen) {
    const auto lines = screen_lines(screen);
    return !lines.empty() && lines.back() == kShellPrompt;
}

// The status line: the row above the input box.
std::string status_row(const std::string& screen) {
    const auto rows = screen_lines(screen);
    for (size_t i = 1; i < rows.size(); ++i) {
        if (rows[i].starts_with("» ")) return rows[i - 1];
    }
    return {};
}

bool idle(const std::string& s) {
    return shows(s, "» Type a message") && !shows(s, "replying ");
}

// Idle with a reply's numbers in the status line.
bool replied(const std::string& s) {
    return idle(s) && shows(status_row(s), " tok");
}

std::string query_text(const std::string& db, const std::string& sql) {
    sessions::Database d(db);
    auto s = d.prepare(sql);
    return s.step() ? s.column_text(0) : std::string();
}

int64_t query_number(const std::string& db, const std::string& sql) {
    sessions::Database d(db);
    auto s = d.prepare(sql);
    return s.step() ? s.column_int(0) : -1;
}

class ChatOrigin : public ::testing::Test {
protected:
    void SetUp() override {
        EMBER_REQUIRE_TMUX(tmux);
        EMBER_REQUIRE_FIXTURE(kFirst);
        EMBER_REQUIRE_FIXTURE(kSecond);
        EMBER_REQUIRE_FIXTURE(kStories);
        dir_ = std::make_unique<TempDir>("ember-chat-origin");
        db_ = dir_->file("chat.db");
        const fs::path models = dir_->path() / "data" / "ember" / "models";
        fs::create_directories(models);
        fs::create_symlink(fixture_path(kFirst), models / "qwen3.gguf");
        fs::create_symlink(fixture_path(kSecond), models / "gemma3.gguf");
        // A PATH with no clipboard tool (wl-copy, xclip, ...): only what the chat runs.
        const fs::path bin = dir_->path() / "bin";
        fs::create_directories(bin);
        for (const char* tool : {"sh", "echo", "env", "clear", "sleep"}) {
            const std::string found = find_in_path(tool);
            if (!found.empty()) fs::create_symlink(found, bin / tool);
        }
        fs::create_symlink(tmux, bin / "tmux");
        tmux_ = std::make_unique<TmuxSession>(tmux, "ember-chat-origin");
        const std::string shell =
            "env PS1=" + shell_quote(std::string(kShellPrompt) + " ") +
            " LANG=C.UTF-8 PATH=" + shell_quote(bin.string()) +
            " XDG_DATA_HOME=" + shell_quote((dir_->path() / "data").string()) +
            " XDG_CONFIG_HOME=" + shell_quote(dir_->file("config")) +
            " EMBER_MODEL= LLAMA_CACHE=/nonexistent OLLAMA_MODELS=/nonexistent HOME=" +
            shell_quote(dir_->path().string()) + " /bin/sh";
        ASSERT_EQ(tmux_->start(shell, 120, 40).status, 0);
        std::string screen;
        ASSERT_TRUE(wait_for(at_shell, screen)) << screen;
    }

    bool wait_for(const std::function<bool(const std::string&)>& done, std::string& screen,
                  double seconds = 30.0) const {
        return TmuxSession::poll([this] { return tmux_->capture(); }, done, screen, seconds);
    }
    void line(const std::string& text) const {
        tmux_->text(text);
        tmux_->keys("Enter");
    }
    void chat(const std::string& flags) const {
        line("clear; " + shell_quote(ember_binary()) + " chat --db " + shell_quote(db_) + " -t 1 " +
             flags);
    }
    void leave() const {
        tmux_->keys("C-d");
        std::string screen;
        ASSERT_TRUE(wait_for(at_shell, screen)) << screen;
    }
    CommandResult ember(std::vector<std::string> args) const {
        args.insert(args.begin(), ember_binary());
        args.insert(args.end(), {"--db", db_});
        return run_command(args);
    }
    std::string latest_id() const {
        return query_text(db_, "SELECT public_id FROM conversations ORDER BY activity DESC");
    }

    std::unique_ptr<TempDir> dir_;
    std::string db_;
    std::unique_ptr<TmuxSession> tmux_;
};

TEST_F(ChatOrigin, EveryReplyNamesItsModelAndThePickerReopensIt) {
    std::string screen;
    chat("-m qwen3 --temp 0 -n 6 -c 1024");
    ASSERT_TRUE(wait_for(idle, screen)) << screen;
    line("hello one");
    ASSERT_TRUE(wait_for(replied, screen)) << screen;
    EXPECT_FALSE(shows(screen, "model: ")) << "one model so far: no line names it\n" << screen;
    line("/model gemma3");
    ASSERT_TRUE(wait_for(
        [](const std::string& s) { return idle(s) && status_row(s).starts_with(" gemma3.gguf"); },
        screen))
        << screen;
    line("hello two");
    ASSERT_TRUE(wait_for(
        [](const std::string& s) { return replied(s) && shows(s, "model: gemma3.gguf"); }, screen))
        << "the transcript names the model where it changes\n"
        << screen;
    // The reply before the switch is named too: another model than the one answering now.
    EXPECT_TRUE(shows(screen, "model: qwen3.gguf")) << screen;
    EXPECT_LT(screen.find("model: qwen3.gguf"), screen.find("model: gemma3.gguf")) << screen;
    leave();
    const std::string id = latest_id();
    ASSERT_FALSE(id.empty());

    // Stored per reply, and shown by sessions show, the export and replay.
    EXPECT_EQ(query_text(db_, "SELECT model FROM messages WHERE role = 'assistant' ORDER BY id"),
              "qwen3.gguf");
    EXPECT_EQ(query_text(db_,
                         "SELECT model FROM messages WHERE role = 'assistant' ORDER BY id "
                         "DESC"),
              "gemma3.gguf");
    const CommandResult show = ember({"sessions", "show", id});
    ASSERT_EQ(show.status, 0) << show.err;
    EXPECT_TRUE(shows(show.out, "by qwen3.gguf]")) << show.out;
    EXPECT_TRUE(shows(show.out, "by gemma3.gguf]")) << show.out;
    const CommandResult exported = ember({"sessions", "export", id, "--format", "json"});
    ASSERT_EQ(exported.status, 0) << exported.err;
    const auto doc = nlohmann::json::parse(exported.out);
    std::vector<std::string> reply_models;
    for (const auto& m : doc["messages"]) {
        if (m["role"] == "assistant") reply_models.push_back(m.value("model", ""));
    }
    EXPECT_EQ(reply_models, (std::vector<std::string>{"qwen3.gguf", "gemma3.gguf"}));
    const CommandResult replay = ember({"replay", id});
    ASSERT_EQ(replay.status, 0) << replay.err;
    EXPECT_TRUE(shows(replay.out, "[assistant] (by qwen3.gguf)")) << replay.out;
    EXPECT_TRUE(shows(replay.out, "[assistant] (by gemma3.gguf)")) << replay.out;
    // --regenerate: each turn with the model that wrote it, so both come out the same.
    const CommandResult again = ember({"replay", id, "--regenerate", "-t", "1"});
    EXPECT_EQ(again.status, 0) << again.out << again.err;
    EXPECT_TRUE(shows(again.out, "turn 1: with qwen3.gguf, the model that wrote it")) << again.out;
    EXPECT_TRUE(shows(again.out, "turn 2: with gemma3.gguf, the model that wrote it")) << again.out;
    EXPECT_TRUE(shows(again.out, "all 2 turns identical")) << again.out;

    // A chat on qwen3 opens the conversation from the picker: gemma3 answers it again.
    chat("-m qwen3 --temp 0 -n 6 -c 1024");
    ASSERT_TRUE(wait_for(idle, screen)) << screen;
    EXPECT_TRUE(status_row(screen).starts_with(" qwen3.gguf")) << screen;
    tmux_->keys("C-o");
    ASSERT_TRUE(wait_for([&](const std::string& s) { return shows(s, id); }, screen)) << screen;
    tmux_->keys("Enter");
    ASSERT_TRUE(wait_for(
        [](const std::string& s) {
            return idle(s) && status_row(s).starts_with(" gemma3.gguf") && shows(s, "hello two");
        },
        screen, 60))
        << screen;
    // Loaded under another model than the first reply's: both replies are named.
    EXPECT_TRUE(shows(screen, "model: qwen3.gguf")) << screen;
    EXPECT_TRUE(shows(screen, "model: gemma3.gguf")) << screen;
    leave();
    EXPECT_EQ(query_text(db_, "SELECT model FROM conversations WHERE public_id = '" + id + "'"),
              "gemma3.gguf");

    // -m with --continue still chooses the model: the conversation goes on with qwen3.
    chat("-m qwen3 --continue");
    ASSERT_TRUE(
        wait_for([](const std::string& s) { return idle(s) && shows(s, "hello two"); }, screen))
        << screen;
    EXPECT_TRUE(status_row(screen).starts_with(" qwen3.gguf")) << screen;
    leave();
}

TEST_F(ChatOrigin, SettingsStickPresetsReplaceAndReplayUsesEachTurnsOwn) {
    const std::string config = dir_->file("config") + "/ember/config.json";
    fs::create_directories(fs::path(config).parent_path());
    std::ofstream(config) << R"({"presets": {
        "a": {"system": "Be brief.", "sampling": {"top_k": 5, "temp": 0.2}},
        "b": {"sampling": {"temp": 0.5}}}})";
    std::string screen;
    chat("-m qwen3 --temp 0 -n 8 -c 1024 --top-k 40");
    ASSERT_TRUE(wait_for(idle, screen)) << screen;
    line("first question");
    ASSERT_TRUE(wait_for(replied, screen)) << screen;
    // A sampled second turn: replay must generate it at these settings, not the start's.
    line("/set temp 1.5");
    ASSERT_TRUE(wait_for([](const std::string& s) { return shows(s, "temp = 1.5"); }, screen))
        << screen;
    line("/set seed 7");
    ASSERT_TRUE(wait_for([](const std::string& s) { return shows(s, "seed = 7"); }, screen))
        << screen;
    line("second question");
    ASSERT_TRUE(wait_for(
        [](const std::string& s) { return replied(s) && shows(s, "second question"); }, screen))
        << screen;
    leave();
    const std::string id = latest_id();

    const CommandResult replay = ember({"replay", id, "--regenerate", "-t", "1"});
    EXPECT_EQ(replay.status, 0) << replay.out << replay.err;
    EXPECT_TRUE(shows(replay.out, "all 2 turns identical")) << replay.out;

    // --continue comes back at temp 1.5 (and the next reply's seed after 7's).
    chat("--continue");
    ASSERT_TRUE(wait_for(
        [](const std::string& s) { return idle(s) && shows(s, "second question"); }, screen))
        << screen;
    line("/set");
    ASSERT_TRUE(wait_for([](const std::string& s) { return shows(s, "settings (/set"); }, screen))
        << screen;
    EXPECT_TRUE(shows(screen, "temp 1.5,")) << screen;
    EXPECT_TRUE(shows(screen, "n-predict 8")) << screen;

    // Presets replace: b after a keeps none of a's (top-k back to 40, a's system prompt gone).
    line("/preset a");
    ASSERT_TRUE(wait_for(
        [](const std::string& s) { return shows(s, "preset a: system prompt, temp 0.2, top-k 5"); },
        screen))
        << screen;
    line("/preset b");
    ASSERT_TRUE(wait_for(
        [](const std::string& s) {
            return shows(s, "preset b: temp 0.5; back to the chat's own: top-k 40, no system");
        },
        screen))
        << screen;
    line("/system");
    ASSERT_TRUE(wait_for([](const std::string& s) { return shows(s, "no system prompt"); }, screen))
        << screen;
    leave();
    const std::string stored = query_text(db_, "SELECT sampling FROM conversations");
    const auto settings = nlohmann::json::parse(stored);
    EXPECT_EQ(settings["top_k"], 40) << stored;
    EXPECT_EQ(settings["temperature"], 0.5) << "stored as written, not 0.5000000xx: " << stored;
}

TEST_F(ChatOrigin, CommandLineRefusesWhatTheServerRefusesInTheSameWords) {
    const CommandResult cli = run_command({ember_binary(), "chat", "-m", fixture_path(kStories),
                                           "--no-db", "--temp", "5", "-p", "hi"});
    EXPECT_EQ(cli.status, 2) << cli.out << cli.err;
    EXPECT_TRUE(shows(cli.err, "--temp: must be a number between 0 and 2, not '5'")) << cli.err;

    ServeProcess server({"-m", fixture_path(kStories), "--no-db", "-t", "1"},
                        dir_->file("serve.log"));
    ASSERT_GT(server.port(), 0) << server.process().log();
    const auto res = server.client()->Post(
        "/v1/chat/completions",
        R"({"messages": [{"role": "user", "content": "hi"}], "temperature": 5})",
        "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 400);
    EXPECT_TRUE(shows(res->body, "'temperature' must be a number between 0 and 2, not 5"))
        << res->body;
}

TEST_F(ChatOrigin, AttachmentsShowCollapsedTitlesComeFromTheTypedTextAndQuestionsCancel) {
    const std::string notes = dir_->file("notes.txt");
    std::ofstream(notes) << "SECRET LINE ONE\nSECRET LINE TWO\n";
    std::string screen;
    chat("-m qwen3 --temp 0 -n 4 -c 1024");
    ASSERT_TRUE(wait_for(idle, screen)) << screen;
    line("/file " + notes);
    ASSERT_TRUE(
        wait_for([](const std::string& s) { return shows(s, "attached notes.txt"); }, screen))
        << screen;
    line("what is in it?");
    ASSERT_TRUE(wait_for(replied, screen)) << screen;
    EXPECT_TRUE(shows(screen, "[attached] File: notes.txt (32 bytes)")) << screen;
    EXPECT_FALSE(shows(screen, "SECRET LINE")) << "the file is collapsed\n" << screen;

    // /run's question: Ctrl-C answers no at once; a "y" typed later is a prompt.
    line("/run echo hi");
    ASSERT_TRUE(
        wait_for([](const std::string& s) { return shows(s, "run this command?"); }, screen))
        << screen;
    tmux_->keys("C-c");
    ASSERT_TRUE(wait_for(
        [](const std::string& s) { return shows(s, "/run: cancelled; nothing ran"); }, screen))
        << screen;
    line("y");
    const std::string db = db_;
    const auto y_answered = [db](const std::string& s) {
        return idle(s) && query_number(db,
                                       "SELECT COUNT(*) FROM messages WHERE role = "
                                       "'assistant'") == 2;
    };
    ASSERT_TRUE(wait_for(y_answered, screen)) << screen;
    EXPECT_EQ(query_number(db_,
                           "SELECT COUNT(*) FROM messages WHERE role = 'user' AND content = "
                           "'y'"),
              1)
        << "the late y is sent as a prompt, never as the yes";
    EXPECT_FALSE(shows(screen, "Output of: echo hi")) << screen;

    // A conversation started with an attachment is titled by what was typed.
    line("/new");
    ASSERT_TRUE(wait_for([](const std::string& s) { return shows(s, "new conversation"); }, screen))
        << screen;
    line("/run echo hi");
    ASSERT_TRUE(
        wait_for([](const std::string& s) { return shows(s, "run this command?"); }, screen))
        << screen;
    line("y");
    ASSERT_TRUE(
        wait_for([](const std::string& s) { return shows(s, "attached the output of"); }, screen))
        << screen;
    line("summarize the output");
    ASSERT_TRUE(wait_for(
        [](const std::string& s) { return replied(s) && shows(s, "summarize the output"); },
        screen))
        << screen;
    EXPECT_TRUE(shows(screen, "[attached] Output of: echo hi (3 bytes)")) << screen;
    leave();
    EXPECT_EQ(query_text(db_, "SELECT title FROM conversations ORDER BY activity DESC"),
              "summarize the output");
    // Stored whole (the model read it), with the record of what was attached.
    EXPECT_TRUE(shows(query_text(db_,
                                 "SELECT content FROM messages WHERE content LIKE "
                                 "'%summarize%'"),
                      "Output of: echo hi\n```\nhi\n```"));
}

TEST_F(ChatOrigin, EscDuringAReplyThenEnterSendsTheNextPrompt) {
    // A trained model, slow enough that its reply streams for a while (the fixtures answer
    // thousands of tokens a second).
    EMBER_REQUIRE_REAL_MODEL_OF(kSmolLM2_135m);
    std::string screen;
    // A reply long enough to be stopped: to the end of the context, past end-of-turn.
    chat("-m " + shell_quote(real_model_path(kSmolLM2_135m)) +
         " --temp 0 -n -1 --ignore-eos -c 8192");
    ASSERT_TRUE(wait_for(idle, screen)) << screen;
    line("tell me a long story");
    ASSERT_TRUE(wait_for([](const std::string& s) { return shows(s, "replying "); }, screen))
        << screen;
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    tmux_->keys("Escape");
    ASSERT_TRUE(wait_for([](const std::string& s) { return shows(s, "reply stopped") && idle(s); },
                         screen, 5))
        << "Esc stops a streaming reply at once\n"
        << screen;
    std::this_thread::sleep_for(std::chrono::seconds(1));
    tmux_->keys("Escape");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    tmux_->text("after the stop");
    tmux_->keys("Enter");
    ASSERT_TRUE(wait_for(
        [](const std::string& s) { return shows(s, "after the stop") && shows(s, "replying "); },
        screen, 10))
        << "the Enter after Esc sends the prompt\n"
        << screen;
    tmux_->keys("Escape");
    ASSERT_TRUE(wait_for(idle, screen)) << screen;
    leave();
}

// Line mode: readline read Esc as a Meta prefix and the Enter a second later as an unbound
// Meta-Enter, so the line was not sent.
TEST_F(ChatOrigin, LineModeEnterAfterEscSendsTheLine) {
    std::string screen;
    chat("--plain -m qwen3 --temp 0 -n 4 -c 1024 -v");
    ASSERT_TRUE(wait_for([](const std::string& s) { return shows(s, "ember line mode"); }, screen))
        << screen;
    tmux_->text("hello there");
    tmux_->keys("Escape");
    std::this_thread::sleep_for(std::chrono::seconds(1));
    tmux_->keys("Enter");
    ASSERT_TRUE(wait_for([](const std::string& s) { return shows(s, " tokens, "); }, screen, 10))
        << "the Enter after Esc sends the line\n"
        << screen;
    tmux_->keys("C-d");
    ASSERT_TRUE(wait_for(at_shell, screen)) << screen;
}

TEST_F(ChatOrigin, CopySaysWhatItDid) {
    std::string screen;
    chat("-m qwen3 --temp 0 -n 4 -c 1024");
    ASSERT_TRUE(wait_for(idle, screen)) << screen;
    line("hello");
    ASSERT_TRUE(wait_for(replied, screen)) << screen;
    // tmux's default set-clipboard ("external") drops an application's OSC 52.
    line("/copy");
    ASSERT_TRUE(
        wait_for([](const std::string& s) { return shows(s, "/copy: nothing copied"); }, screen))
        << screen;
    EXPECT_FALSE(shows(screen, "copied the last reply")) << screen;
    tmux_->run({"set-option", "-g", "set-clipboard", "on"});
    line("/copy");
    ASSERT_TRUE(
        wait_for([](const std::string& s) { return shows(s, "sent the last reply"); }, screen))
        << screen;
    leave();
}

TEST_F(ChatOrigin, ARemoteChatKeepsThePromptAndTheReasonWhenTheServerGoes) {
    auto server = std::make_unique<ServeProcess>(
        std::vector<std::string>{"-m", fixture_path(kFirst), "--no-db", "-t", "1"},
        dir_->file("serve.log"));
    ASSERT_GT(server->port(), 0) << server->process().log();
    std::string screen;
    line("clear; " + shell_quote(ember_binary()) + " chat --db " + shell_quote(db_) + " --remote " +
         server->url() + "/v1 --temp 0 -n 4");
    ASSERT_TRUE(wait_for(idle, screen)) << screen;
    line("hello there");
    ASSERT_TRUE(wait_for(replied, screen)) << screen;
    // What a remote chat cannot know is not shown.
    EXPECT_FALSE(shows(status_row(screen), "cold")) << status_row(screen);
    EXPECT_FALSE(shows(status_row(screen), "prefill")) << status_row(screen);
    server->process().stop(SIGKILL);
    server.reset();
    line("are you still there");
    ASSERT_TRUE(wait_for(
        [](const std::string& s) { return idle(s) && shows(s, "connection refused"); }, screen))
        << screen;
    EXPECT_TRUE(shows(screen, "are you still there")) << "the prompt stays on screen\n" << screen;
    leave();
    EXPECT_EQ(query_number(db_,
                           "SELECT COUNT(*) FROM messages WHERE content = 'are you still "
                           "there'"),
              1);
}

// A scripted --continue goes on with the conversation's settings (a flag given now wins).
// The status line's context counter follows /set ctx and /new at once (it showed the old
// figures until the next reply).
TEST_F(ChatOrigin, TheContextCounterFollowsSetCtxAndNew) {
    std::string screen;
    chat("-m qwen3 --temp 0 -n 8 -c 1024");
    ASSERT_TRUE(wait_for(idle, screen)) << screen;
    EXPECT_TRUE(shows(status_row(screen), "/1024")) << status_row(screen);
    line("first question");
    ASSERT_TRUE(wait_for(replied, screen)) << screen;
    EXPECT_FALSE(shows(status_row(screen), "ctx 0/")) << status_row(screen);
    line("/set ctx 512");
    ASSERT_TRUE(
        wait_for([](const std::string& s) { return shows(status_row(s), "/512"); }, screen, 10.0))
        << screen;
    line("/new");
    ASSERT_TRUE(wait_for([](const std::string& s) { return shows(status_row(s), "ctx 0/512"); },
                         screen, 10.0))
        << screen;
    leave();
}

TEST(ChatOriginStore, ScriptedContinueKeepsTheConversationsSettings) {
    EMBER_REQUIRE_FIXTURE(kStories);
    TempDir dir("ember-origin-scripted");
    const std::string db = dir.file("chat.db");
    const auto chat = [&](std::vector<std::string> extra) {
        std::vector<std::string> argv = {
            ember_binary(), "chat", "-m", fixture_path(kStories), "--db", db, "-t", "1", "-n", "4"};
        argv.insert(argv.end(), extra.begin(), extra.end());
        return run_command(argv);
    };
    ASSERT_EQ(chat({"--temp", "0.3", "--top-k", "7", "-p", "Once upon a time"}).status, 0);
    ASSERT_EQ(chat({"--continue", "-p", "The end"}).status, 0);
    ASSERT_EQ(chat({"--continue", "--top-k", "9", "-p", "Again"}).status, 0);
    std::vector<nlohmann::json> replies;
    {
        sessions::Database d(db);
        auto s = d.prepare("SELECT settings FROM messages WHERE role = 'assistant' ORDER BY id");
        while (s.step()) replies.push_back(nlohmann::json::parse(s.column_text(0)));
    }
    ASSERT_EQ(replies.size(), 3u);
    for (const auto& r : replies) EXPECT_EQ(r["temperature"], 0.3) << r.dump();
    EXPECT_EQ(replies[1]["top_k"], 7) << replies[1].dump();
    EXPECT_EQ(replies[2]["top_k"], 9) << replies[2].dump();
}

TEST(ChatOriginStore, ASchemaSixDatabaseIsMigratedWithoutLoss) {
    TempDir dir("ember-origin-migrate");
    const std::string db = dir.file("old.db");
    {
        sessions::Database d(db);
        sessions::migrate(d, 6);
        d.exec(
            "INSERT INTO conversations(public_id, title, model, model_fingerprint, sampling, "
            "created_at, updated_at) VALUES ('6666abcd', 'v6 chat', 'qwen3.gguf', 'f00d', "
            "'{\"temperature\": 0.3}', '2026-01-01T00:00:00.000Z', '2026-01-01T00:00:00.000Z');"
            "INSERT INTO messages(conversation_id, parent_id, role, content, created_at) VALUES "
            "(1, NULL, 'user', 'hello', '2026-01-01T00:00:00.000Z'), "
            "(1, 1, 'assistant', 'hi there', '2026-01-01T00:00:01.000Z');"
            "UPDATE conversations SET current_leaf = 2;");
    }
    const CommandResult show =
        run_command({ember_binary(), "sessions", "show", "6666", "--db", db});
    ASSERT_EQ(show.status, 0) << show.err;
    EXPECT_TRUE(shows(show.out, "hi there")) << show.out;
    EXPECT_EQ(query_number(db, "PRAGMA user_version"), sessions::kSchemaVersion);
    EXPECT_EQ(query_number(db, "SELECT COUNT(*) FROM messages"), 2);
    EXPECT_EQ(query_text(db, "SELECT content FROM messages WHERE id = 2"), "hi there");
    // Unknown origin in old rows: empty, never a guess.
    EXPECT_EQ(query_text(db, "SELECT model FROM messages WHERE id = 2"), "");
    EXPECT_EQ(query_text(db, "SELECT sampling FROM conversations"), "{\"temperature\": 0.3}");
}

}  // namespace
}  // namespace ember::test
