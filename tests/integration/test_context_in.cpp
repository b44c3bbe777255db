// Context brought into a conversation, through the real binary, real SQLite files and a real
// terminal (tmux): -f FILE (repeatable) and stdin joined with -p in the documented format
// (ui/io/attachments.h), for `ember chat -p`, scripted chat and `ember run`; text that is not
// text refused with one line; /file and /run in the full-screen chat and in line mode (token
// count shown, binary and too-large files refused, nothing run without a yes); a file
// attached first being a shared prefix that a new conversation resumes warm.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "tests/support/fixtures.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tmux.h"

namespace ember::test {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// A trained model without a chat template (greedy text is stable) and a random-weight one
// with a template and a 4096-token context.
constexpr const char* kModel = "models/stories260K.gguf";
constexpr const char* kLongModel = "arch/qwen2/qwen2.gguf";

void write_file(const std::string& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary) << bytes;
}

CommandResult ember(const std::vector<std::string>& args, const std::string& input = "") {
    std::vector<std::string> argv = {ember_binary()};
    argv.insert(argv.end(), args.begin(), args.end());
    return run_command(argv, input, 300);
}

std::string only_line(std::string text) {
    while (!text.empty() && text.back() == '\n') text.pop_back();
    return text;
}

// The user messages of the most recent conversation in `db`, in order.
std::vector<std::string> user_messages(const std::string& db) {
    const CommandResult list = ember({"sessions", "list", "--db", db});
    const auto rows = split_lines(list.out);
    EXPECT_GE(rows.size(), 2u) << list.out << list.err;
    if (rows.size() < 2) return {};
    const std::string id = rows[1].substr(0, rows[1].find(' '));
    const CommandResult out = ember({"sessions", "export", id, "--format", "json", "--db", db});
    std::vector<std::string> users;
    EXPECT_EQ(out.status, 0) << id << ": " << out.err;
    if (out.status != 0) return {};
    const json conversation = json::parse(out.out);
    for (const auto& m : conversation["messages"]) {
        if (m["role"] == "user") users.push_back(m["content"].get<std::string>());
    }
    return users;
}

// ~`lines` lines of varied words (a seeded generator: the same text every run).
std::string document(int lines) {
    static const char* const kWords[] = {"the",   "a",      "river", "stone",   "light", "garden",
                                         "paper", "window", "seven", "under",   "over",  "north",
                                         "reads", "builds", "many",  "quietly", "small"};
    std::mt19937 rng(7);
    std::string text;
    for (int i = 0; i < lines; ++i) {
        for (int w = 0; w < 12; ++w) {
            if (w > 0) text += ' ';
            text += kWords[rng() % std::size(kWords)];
        }
        text += ".\n";
    }
    return text;
}

TEST(ContextIn, FilesAndStdinJoinBeforeThePromptInTheDocumentedFormat) {
    EMBER_REQUIRE_FIXTURE(kModel);
    TempDir dir("ember-context-in");
    const std::string a = dir.file("notes.txt"), b = dir.file("code.md");
    write_file(a, "hello world\nline two\n");
    // Content holding a ``` fence gets a longer one; no final newline gets one.
    write_file(b, "see ```x``` here");
    const std::string db = dir.file("chat.db");
    const CommandResult chat = ember({"chat", "-m", fixture_path(kModel), "--db", db, "-f", a, "-f",
                                      b, "-p", "Summarize", "--temp", "0", "-n", "3", "-t", "1"},
                                     "piped input\n");
    ASSERT_EQ(chat.status, 0) << chat.err;
    const std::string expected =
        "File: notes.txt\n```\nhello world\nline two\n```\n\n"
        "File: code.md\n````\nsee ```x``` here\n````\n\n"
        "File: (stdin)\n```\npiped input\n```\n\n"
        "Summarize";
    const auto users = user_messages(db);
    ASSERT_EQ(users.size(), 1u);
    EXPECT_EQ(users[0], expected);

    // `ember run`: the same text, so the same prompt tokens as that text given whole.
    const auto run_ids = [&](const std::vector<std::string>& extra, const std::string& input) {
        std::vector<std::string> args = {
            "run", "-m", fixture_path(kModel), "--json", "-n", "1", "--temp", "0", "-t", "1"};
        args.insert(args.end(), extra.begin(), extra.end());
        const CommandResult r = ember(args, input);
        EXPECT_EQ(r.status, 0) << r.err;
        return r.status == 0 ? json::parse(r.out)["prompt_ids"] : json();
    };
    const json joined = run_ids({"-f", a, "-f", b, "-p", "Summarize"}, "piped input\n");
    EXPECT_EQ(joined, run_ids({"-p", expected}, ""));
    EXPECT_NE(joined, run_ids({"-p", "Summarize"}, ""));

    // Scripted chat: the files go before the first prompt only; stdin holds the prompts.
    const std::string db2 = dir.file("scripted.db");
    const CommandResult scripted = ember({"chat", "-m", fixture_path(kModel), "--db", db2, "-f", a,
                                          "--script", "--temp", "0", "-n", "2", "-t", "1"},
                                         "First question\nSecond question\n");
    ASSERT_EQ(scripted.status, 0) << scripted.err;
    const auto turns = user_messages(db2);
    ASSERT_EQ(turns.size(), 2u);
    EXPECT_EQ(turns[0], "File: notes.txt\n```\nhello world\nline two\n```\n\nFirst question");
    EXPECT_EQ(turns[1], "Second question");
}

TEST(ContextIn, TextThatIsNotTextIsRefusedWithOneLine) {
    EMBER_REQUIRE_FIXTURE(kModel);
    TempDir dir("ember-context-in-bad");
    const std::string nul = dir.file("image.bin"), latin1 = dir.file("latin1.txt");
    write_file(nul, std::string("PNG\0\x01\x02", 6));
    write_file(latin1, "caf\xe9\n");
    const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
        {{"chat", "-f", nul, "-p", "x"},
         "-f: '" + nul + "' is not text: it holds a NUL byte (byte 3)"},
        {{"chat", "-f", latin1, "-p", "x"},
         "-f: '" + latin1 + "' is not text: invalid UTF-8 at byte 3"},
        {{"run", "-f", nul, "-p", "x"},
         "-f: '" + nul + "' is not text: it holds a NUL byte (byte 3)"},
        {{"chat", "-f", dir.file("missing.txt"), "-p", "x"},
         "-f: cannot read '" + dir.file("missing.txt") + "': No such file or directory"},
        {{"chat", "-f", dir.path().string(), "-p", "x"},
         "-f: '" + dir.path().string() + "' is not a regular file"},
    };
    for (const auto& [args, message] : cases) {
        std::vector<std::string> full = args;
        full.insert(full.begin() + 1, {"-m", fixture_path(kModel)});
        if (full[0] == "chat") full.push_back("--no-db");
        const CommandResult r = ember(full);
        EXPECT_EQ(r.status, 1) << message;
        EXPECT_EQ(only_line(r.err), "ember: error: " + message);
        EXPECT_TRUE(r.out.empty()) << r.out;
    }
    // Binary on stdin with -p: refused too, never dropped.
    const CommandResult piped =
        ember({"chat", "-m", fixture_path(kModel), "--no-db", "-p", "x"}, std::string("a\0b", 3));
    EXPECT_EQ(piped.status, 1);
    EXPECT_EQ(only_line(piped.err),
              "ember: error: standard input is not text: it holds a NUL byte (byte 1)");
}

// The file first, the question after it: a new conversation on the same file finds the
// file's state in the store and evaluates little more than its question.
TEST(ContextIn, AFileAttachedFirstIsASharedPrefixWarmInANewConversation) {
    EMBER_REQUIRE_FIXTURE(kLongModel);
    TempDir dir("ember-context-in-warm");
    const std::string doc = dir.file("doc.txt"), db = dir.file("chat.db");
    write_file(doc, document(140));  // ~1,870 tokens with the template's markup
    std::vector<json> turns;
    for (const char* question : {"What is this about?", "Which words repeat?"}) {
        const CommandResult r =
            ember({"chat", "-m", fixture_path(kLongModel), "--db", db, "-f", doc, "-p", question,
                   "--jsonl", "--temp", "0", "-n", "4", "-t", "2"});
        ASSERT_EQ(r.status, 0) << r.err;
        turns.push_back(json::parse(r.out));
    }
    const int64_t cold = turns[0]["tokens_evaluated"];
    EXPECT_GT(cold, 1700);
    EXPECT_EQ(turns[0]["tokens_reused"], 0);
    // Everything but the question and the last partial 64-token block comes from the store.
    EXPECT_GE(turns[1]["tokens_reused"].get<int64_t>(), cold - 64);
    EXPECT_LE(turns[1]["tokens_evaluated"].get<int64_t>(), 64 + 16);
    // Loose (shared CI cores); README has the real model's ratio.
    EXPECT_LT(turns[1]["ttft_ms"].get<double>(), 0.5 * turns[0]["ttft_ms"].get<double>())
        << turns[0].dump() << "\n"
        << turns[1].dump();
    // Two conversations, not one.
    EXPECT_EQ(split_lines(ember({"sessions", "list", "--db", db}).out).size(), 3u);
}

// /file and /run in a real terminal: the full-screen chat, then line mode.
class ContextInChat : public ::testing::Test {
protected:
    void SetUp() override {
        EMBER_REQUIRE_TMUX(tmux);
        EMBER_REQUIRE_FIXTURE(kModel);
        dir_ = std::make_unique<TempDir>("ember-context-in-chat");
        db_ = dir_->file("chat.db");
        write_file(dir_->file("notes.txt"), "Lily had a red ball.\n");
        write_file(dir_->file("big.txt"), document(200));
        write_file(dir_->file("blob.bin"), std::string("\x7f"
                                                       "ELF\0\0",
                                                       6));
        tmux_ = std::make_unique<TmuxSession>(tmux, "ember-context-in");
        const std::string shell =
            "env PS1='SHELL$ ' LANG=C.UTF-8 XDG_DATA_HOME=" + shell_quote(dir_->path()) +
            " XDG_CONFIG_HOME=" + shell_quote(dir_->file("config")) + " EMBER_MODEL= /bin/sh";
        ASSERT_EQ(tmux_->start(shell, 200, 50).status, 0);
        std::string screen;
        ASSERT_TRUE(wait_for([](const std::string& s) { return shows(s, "SHELL$"); }, screen));
        line("cd " + shell_quote(dir_->path()));
    }

    static bool shows(const std::string& screen, const std::string& text) {
        return screen.find(text) != std::string::npos;
    }
    static int count(const std::string& screen, const std::string& text) {
        int n = 0;
        for (size_t at = screen.find(text); at != std::string::npos;
             at = screen.find(text, at + 1)) {
            ++n;
        }
        return n;
    }
    bool wait_for(const std::function<bool(const std::string&)>& done, std::string& screen,
                  double seconds = 20.0) const {
        return TmuxSession::poll([this] { return tmux_->capture({"-J"}); }, done, screen, seconds);
    }
    bool wait_shows(const std::string& text, std::string& screen) const {
        return wait_for([&](const std::string& s) { return shows(s, text); }, screen);
    }
    void line(const std::string& text) const {
        tmux_->text(text);
        tmux_->keys("Enter");
    }
    std::string start_command(const std::string& flags) const {
        // A 256-token context: big.txt (~2,600 tokens) cannot fit.
        return shell_quote(ember_binary()) + " chat -m " + shell_quote(fixture_path(kModel)) +
               " --db " + shell_quote(db_) + " -t 1 --temp 0 -n 4 -c 256 " + flags;
    }

    // The /file and /run session both front ends go through; `idle` tells a ready input.
    void attach_and_ask(const std::function<bool(const std::string&)>& idle) {
        std::string screen;
        line("/file notes.txt");
        ASSERT_TRUE(wait_shows("attached notes.txt: ", screen)) << screen;
        std::smatch m;
        ASSERT_TRUE(std::regex_search(screen, m, std::regex(R"(attached notes.txt: (\d+) tokens)")))
            << screen;
        const int tokens = std::stoi(m[1]);
        EXPECT_GE(tokens, 8) << screen;  // the sentence and its heading and fences
        EXPECT_LE(tokens, 40) << screen;

        line("/file big.txt");
        ASSERT_TRUE(wait_shows("nothing attached", screen)) << screen;
        EXPECT_TRUE(std::regex_search(
            screen,
            std::regex(
                // "at least": refused before its tokens are counted, as it cannot fit at the
                // vocabulary's longest token per token (ChatEngine::fewest_tokens).
                R"(/file: big.txt is (at least )?[\d,]+ tokens and [\d,]+ of the context's 256 are free \(4 kept)")))
            << screen;
        line("/file blob.bin");
        ASSERT_TRUE(wait_shows("is not text: it holds a NUL byte (byte 4)", screen)) << screen;

        // No: nothing runs.
        line("/run touch ran-once && echo RUN-OUTPUT");
        ASSERT_TRUE(wait_shows("[y/N]", screen)) << screen;
        EXPECT_TRUE(shows(screen, "run this command? touch ran-once && echo RUN-OUTPUT")) << screen;
        line("n");
        ASSERT_TRUE(wait_shows("/run: cancelled; nothing ran", screen)) << screen;
        EXPECT_FALSE(fs::exists(dir_->file("ran-once")));
        // Yes: it runs, its output waits for the next message.
        // The second question's own marks: the first left `asked` "[y/N]" on the screen (line
        // mode: its hint and its prompt; the full screen: its hint), the second shows as many.
        // Typed before line mode's prompt, the answer would be discarded with the type-ahead
        // (a command runs only on an answer to the question shown).
        const int asked = count(screen, "[y/N]");
        ASSERT_GT(asked, 0) << screen;
        line("/run touch ran-once && echo RUN-OUTPUT");
        ASSERT_TRUE(wait_for(
            [asked](const std::string& s) { return count(s, "[y/N]") >= 2 * asked; }, screen))
            << screen;
        line("y");
        ASSERT_TRUE(
            wait_shows("attached the output of touch ran-once && echo RUN-OUTPUT (exit 0)", screen))
            << screen;
        EXPECT_TRUE(fs::exists(dir_->file("ran-once")));
        EXPECT_TRUE(shows(screen, "2 attachments wait")) << screen;

        line("Once upon a time");
        ASSERT_TRUE(wait_for(idle, screen, 60)) << screen;
    }

    void expect_stored_message() const {
        const auto users = user_messages(db_);
        ASSERT_EQ(users.size(), 1u);
        EXPECT_EQ(users[0],
                  "File: notes.txt\n```\nLily had a red ball.\n```\n\n"
                  "Output of: touch ran-once && echo RUN-OUTPUT\n```\nRUN-OUTPUT\n```\n\n"
                  "Once upon a time");
    }

    std::unique_ptr<TempDir> dir_;
    std::string db_;
    std::unique_ptr<TmuxSession> tmux_;
};

TEST_F(ContextInChat, FullScreenFileAndRun) {
    line(start_command(""));
    std::string screen;
    const auto idle = [](const std::string& s) {
        return shows(s, "» Type a message") && !shows(s, "replying ");
    };
    ASSERT_TRUE(wait_for(idle, screen)) << screen;
    attach_and_ask([&](const std::string& s) { return idle(s) && shows(s, "tok │"); });
    if (HasFatalFailure()) return;
    tmux_->keys("C-d");
    ASSERT_TRUE(wait_shows("--continue (or --resume", screen)) << screen;
    expect_stored_message();
}

// -f in an interactive chat waits for the first message, as /file does.
TEST_F(ContextInChat, FileFlagInTheChatGoesWithTheFirstMessage) {
    line(start_command("-f notes.txt"));
    std::string screen;
    ASSERT_TRUE(wait_shows("attached notes.txt: ", screen)) << screen;
    line("Once upon a time");
    ASSERT_TRUE(wait_for([](const std::string& s) { return count(s, "/continue goes on") == 1; },
                         screen, 60))
        << screen;
    line("The end");
    // Each reply is cut at -n 4 and says so.
    ASSERT_TRUE(wait_for([](const std::string& s) { return count(s, "/continue goes on") == 2; },
                         screen, 60))
        << screen;
    tmux_->keys("C-d");
    ASSERT_TRUE(wait_shows("--continue (or --resume", screen)) << screen;
    const auto users = user_messages(db_);
    ASSERT_EQ(users.size(), 2u);
    EXPECT_EQ(users[0], "File: notes.txt\n```\nLily had a red ball.\n```\n\nOnce upon a time");
    EXPECT_EQ(users[1], "The end");  // attached once only
}

TEST_F(ContextInChat, LineModeFileAndRun) {
    line(start_command("--plain"));
    std::string screen;
    ASSERT_TRUE(wait_shows("ember line mode", screen)) << screen;
    attach_and_ask([](const std::string& s) {
        const size_t asked = s.rfind("Once upon a time");
        return asked != std::string::npos && s.rfind("\n> ") > asked;
    });
    if (HasFatalFailure()) return;
    tmux_->keys("C-d");
    ASSERT_TRUE(wait_shows("--continue (or --resume", screen)) << screen;
    expect_stored_message();
}

}  // namespace
}  // namespace ember::test
