// The full-screen UI driven through a real terminal: tmux runs a shell, the test types into
// it, resizes it and reads the screen back (capture-pane). Covers a streamed reply and the
// status line, scrolling and resizing while a reply streams, Ctrl-C keeping the partial
// reply (on screen and in the database), /regen, /edit, /new, /sessions, /load, Markdown with
// CJK, emoji and a code block, bracketed paste, Alt-Enter, Tab completion, thinking blocks,
// NO_COLOR, and the terminal restored after /quit, Ctrl-D and SIGTERM.
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/fixtures.h"
#include "tests/support/process.h"
#include "tests/support/tmux.h"
#include "ui/tui/text.h"

namespace ember::test {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

const char* const kShellPrompt = "SHELL$";
constexpr int kWidth = 100;
constexpr int kHeight = 30;

std::vector<std::string> lines_of(const std::string& text) {
    std::vector<std::string> lines;
    std::stringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
        while (!line.empty() && line.back() == ' ') line.pop_back();
        lines.push_back(line);
    }
    return lines;
}

bool shows(const std::string& screen, const std::string& text) {
    return screen.find(text) != std::string::npos;
}

std::string last_nonempty_line(const std::string& screen) {
    const auto lines = lines_of(screen);
    for (auto it = lines.rbegin(); it != lines.rend(); ++it) {
        if (!it->empty()) return *it;
    }
    return {};
}

// The TUI test's terminal: kWidth x kHeight, its visible screen.
class Tmux : public TmuxSession {
public:
    Tmux(std::string binary, const std::string& name)
        : TmuxSession(std::move(binary), "ember-tui-" + name) {}
    CommandResult start(const std::string& command) const {
        return TmuxSession::start(command, kWidth, kHeight);
    }
    void line(const std::string& line) const {
        text(line);
        keys("Enter");
    }
    void paste(const std::string& text) const {
        run({"set-buffer", "-b", "clip", text});
        run({"paste-buffer", "-p", "-d", "-b", "clip", "-t", "t"});
    }
    void resize(int width, int height) const {
        run({"resize-window", "-t", "t", "-x", std::to_string(width), "-y",
             std::to_string(height)});
    }
    // The visible screen, one line per row.
    std::string screen(bool with_styles = false) const {
        return with_styles ? capture({"-e"}) : capture();
    }
    int pane_pid() const {
        return std::atoi(run({"display-message", "-p", "-t", "t", "#{pane_pid}"}).out.c_str());
    }
    bool wait_for(const std::function<bool(const std::string&)>& done, std::string& screen,
                  double seconds = 15.0) const {
        return poll([this] { return this->screen(); }, done, screen, seconds);
    }
};

// Children of `parent` (from /proc), to signal the ember process the shell started.
std::vector<int> child_pids(int parent) {
    std::vector<int> out;
    DIR* dir = opendir("/proc");
    if (dir == nullptr) return out;
    while (dirent* entry = readdir(dir)) {
        const int pid = std::atoi(entry->d_name);
        if (pid <= 0) continue;
        std::ifstream stat("/proc/" + std::string(entry->d_name) + "/stat");
        std::string content;
        std::getline(stat, content);
        const size_t close = content.rfind(')');
        if (close == std::string::npos) continue;
        std::istringstream fields(content.substr(close + 2));
        std::string state;
        int ppid = 0;
        fields >> state >> ppid;
        if (ppid == parent) out.push_back(pid);
    }
    closedir(dir);
    return out;
}

// The screen a full-screen UI leaves: no row wider than the terminal, exactly one status
// line, on the row above the input box.
void expect_consistent(const std::string& screen, int width, const std::string& model) {
    const auto lines = lines_of(screen);
    int status_lines = 0;
    for (const auto& line : lines) {
        EXPECT_LE(ui::tui::display_width(line), width) << line << "\n" << screen;
        if (line.starts_with(std::string(" ").append(model).append(" │ ctx "))) ++status_lines;
    }
    EXPECT_EQ(status_lines, 1) << screen;
}

bool at_shell_prompt(const std::string& screen) {
    return last_nonempty_line(screen) == kShellPrompt;
}

// Back at the shell with the terminal in its normal mode; returns ember's exit status.
int expect_terminal_restored(const Tmux& tmux, const fs::path& dir) {
    std::string screen;
    EXPECT_TRUE(tmux.wait_for(at_shell_prompt, screen)) << screen;
    const fs::path status_file = dir / "exit-status";
    const fs::path stty_file = dir / "stty";
    tmux.line("echo $? > " + shell_quote(status_file.string()) + "; stty -a > " +
              shell_quote(stty_file.string()) + ".tmp; mv " + shell_quote(stty_file.string()) +
              ".tmp " + shell_quote(stty_file.string()));
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    while (!fs::exists(stty_file) && Clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(30));
    }
    std::string settings = std::string(" ").append(read_file(stty_file.string())).append(" ");
    for (char& c : settings) {
        if (c == '\n' || c == ';') c = ' ';
    }
    for (const char* flag : {" icanon ", " echo ", " isig ", " icrnl ", " opost "}) {
        EXPECT_NE(settings.find(flag), std::string::npos) << flag << " in " << settings;
    }
    // The mouse modes are off again: tmux reports them per pane.
    const std::string modes =
        tmux.run({"display-message", "-p", "-t", "t", "#{mouse_any_flag}#{mouse_button_flag}"}).out;
    EXPECT_EQ(modes, "00\n");
    fs::remove(stty_file);
    return std::atoi(read_file(status_file.string()).c_str());
}

class TuiTest : public ::testing::Test {
protected:
    void SetUp() override {
        tmux_binary_ = find_in_path("tmux");
        if (tmux_binary_.empty()) EMBER_SKIP_OR_FAIL("tmux not found in PATH");
        char dir_template[] = "/tmp/ember-tui-test-XXXXXX";
        ASSERT_NE(mkdtemp(dir_template), nullptr);
        dir_ = dir_template;
        db_ = (dir_ / "ember.db").string();
    }
    void TearDown() override {
        std::error_code ignored;
        if (!dir_.empty()) fs::remove_all(dir_, ignored);
    }

    // A shell in tmux with a recognizable prompt; `env` adds variables.
    std::unique_ptr<Tmux> start_shell(const std::string& name, const std::string& env = "") {
        auto tmux = std::make_unique<Tmux>(tmux_binary_, name);
        const std::string shell = "env PS1=" + shell_quote(std::string(kShellPrompt) + " ") +
                                  " LANG=C.UTF-8 XDG_DATA_HOME=" + shell_quote(dir_.string()) +
                                  " " + env + " /bin/sh";
        const CommandResult started = tmux->start(shell);
        EXPECT_EQ(started.status, 0) << started.err;
        std::string screen;
        EXPECT_TRUE(tmux->wait_for(at_shell_prompt, screen)) << screen;
        return tmux;
    }

    std::string ember(const std::string& model, const std::string& args) const {
        return shell_quote(ember_binary()) + " -m " + shell_quote(fixture_path(model)) + " --db " +
               shell_quote(db_) + " -t 1 " + args;
    }

    // `ember sessions ...` on the test's database.
    std::string sessions(const std::vector<std::string>& args) const {
        std::vector<std::string> argv = {ember_binary(), "sessions"};
        argv.insert(argv.end(), args.begin(), args.end());
        argv.push_back("--db");
        argv.push_back(db_);
        const CommandResult r = run_command(argv);
        EXPECT_EQ(r.status, 0) << r.err;
        return r.out;
    }

    std::vector<std::string> session_ids() const {
        std::vector<std::string> ids;
        const auto lines = lines_of(sessions({"list"}));
        for (size_t i = 1; i < lines.size(); ++i) {
            if (!lines[i].empty()) ids.push_back(lines[i].substr(0, lines[i].find(' ')));
        }
        return ids;
    }

    std::string tmux_binary_;
    fs::path dir_;
    std::string db_;
};

// The input box is idle (its placeholder shows) and no reply is being written.
bool idle(const std::string& s) {
    return shows(s, "» Type a message") && !shows(s, "replying ") && !shows(s, "thinking ");
}

int count_of(const std::string& s, const std::string& what) {
    int n = 0;
    for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
    return n;
}

TEST_F(TuiTest, StreamsScrollsResizesCancelsAndManagesSessions) {
    const char* const model = "arch/qwen2/qwen2.gguf";
    EMBER_REQUIRE_FIXTURE(model);
    auto tmux = start_shell("main");
    std::string screen;
    // Bare `ember -m` opens the chat. Replies run until the context is full, a few seconds.
    // --verbose: a stats line under each reply ("[8 tokens, ..."), which the test waits for.
    tmux->line(ember(model, "-n 100000 --ignore-eos -c 4096 --verbose"));
    ASSERT_TRUE(tmux->wait_for(idle, screen)) << screen;
    expect_consistent(screen, kWidth, "qwen2.gguf");

    tmux->line("Tell me a story");
    ASSERT_TRUE(tmux->wait_for(
        [](const std::string& s) {
            const std::regex streaming(R"(replying (\d{3,}) tok)");
            return shows(s, "> Tell me a story") && std::regex_search(s, streaming);
        },
        screen))
        << screen;
    expect_consistent(screen, kWidth, "qwen2.gguf");

    // Scrolling back while the reply streams: the view stays put and says how much is below.
    tmux->keys("PPage");
    ASSERT_TRUE(
        tmux->wait_for([](const std::string& s) { return shows(s, " more · End"); }, screen))
        << screen;
    const auto first_view = lines_of(screen);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const auto later_view = lines_of(tmux->screen());
    ASSERT_EQ(first_view.size(), later_view.size());
    // The transcript rows (all but status, input and message rows) did not move. (A few may
    // change in place: Markdown in the reply settles as it grows, e.g. a '*' that later pairs
    // up as emphasis.)
    size_t same = 0;
    const size_t transcript_rows = first_view.size() - 4;
    for (size_t i = 0; i < transcript_rows; ++i) same += first_view[i] == later_view[i];
    EXPECT_GE(same * 4, transcript_rows * 3) << screen;
    tmux->keys("NPage");
    tmux->keys("PPage");
    tmux->keys("End");
    ASSERT_TRUE(
        tmux->wait_for([](const std::string& s) { return !shows(s, " more · End"); }, screen))
        << screen;
    expect_consistent(screen, kWidth, "qwen2.gguf");

    // Resizing mid-reply re-wraps everything to the new width.
    tmux->resize(70, 24);
    ASSERT_TRUE(tmux->wait_for(
        [](const std::string& s) { return lines_of(s).size() == 24 && shows(s, "replying "); },
        screen))
        << screen;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    expect_consistent(tmux->screen(), 70, "qwen2.gguf");

    // Ctrl-C stops the reply; what was written stays, on screen and in the database.
    tmux->keys("C-c");
    ASSERT_TRUE(tmux->wait_for(
        [](const std::string& s) { return shows(s, "cancelled]") && idle(s); }, screen))
        << screen;
    expect_consistent(screen, 70, "qwen2.gguf");
    tmux->resize(kWidth, kHeight);
    ASSERT_TRUE(tmux->wait_for(
        [](const std::string& s) {
            return std::regex_search(
                s,
                std::regex(
                    R"(│ \d+ tok │ prefill [\d.]+ tok/s │ decode [\d.]+ tok/s( │ spec \d+%)? │ cold)"));
        },
        screen))
        << screen;
    auto ids = session_ids();
    ASSERT_EQ(ids.size(), 1u);
    const std::string first_id = ids[0];
    std::string stored = sessions({"show", first_id});
    EXPECT_TRUE(shows(stored, "cancelled\n")) << stored;
    EXPECT_TRUE(shows(stored, "(2 messages in all branches)")) << stored;

    // /regen: a new reply on a new branch; the old one stays in the database.
    tmux->line("/set n-predict 8");
    ASSERT_TRUE(
        tmux->wait_for([](const std::string& s) { return shows(s, "n-predict = 8"); }, screen))
        << screen;
    tmux->line("/regen");
    ASSERT_TRUE(tmux->wait_for(
        [](const std::string& s) { return shows(s, "[8 tokens") && idle(s); }, screen))
        << screen;
    EXPECT_FALSE(shows(screen, "cancelled]")) << "the old reply is still on screen\n" << screen;
    stored = sessions({"show", first_id});
    EXPECT_TRUE(shows(stored, "(3 messages in all branches)")) << stored;
    EXPECT_FALSE(shows(stored, "cancelled\n")) << "the current branch has the new reply";

    // /edit alone puts the last prompt in the input box; the edit answers on a new branch.
    tmux->line("/edit");
    ASSERT_TRUE(
        tmux->wait_for([](const std::string& s) { return shows(s, "✎ Tell me a story"); }, screen))
        << screen;
    tmux->keys("C-u");
    tmux->line("A different prompt");
    ASSERT_TRUE(tmux->wait_for(
        [](const std::string& s) {
            return shows(s, "> A different prompt") && shows(s, "[8 tokens") && idle(s);
        },
        screen))
        << screen;
    EXPECT_FALSE(shows(screen, "> Tell me a story")) << screen;
    stored = sessions({"show", first_id});
    EXPECT_TRUE(shows(stored, "(5 messages in all branches)")) << stored;
    EXPECT_TRUE(shows(stored, "\nA different prompt\n")) << stored;
    EXPECT_FALSE(shows(stored, "\nTell me a story\n")) << stored;

    // /new: an empty transcript, and the next prompt starts a second conversation.
    tmux->line("/new");
    ASSERT_TRUE(tmux->wait_for(
        [](const std::string& s) { return !shows(s, "A different prompt") && idle(s); }, screen))
        << screen;
    tmux->line("Second conversation");
    ASSERT_TRUE(tmux->wait_for(
        [](const std::string& s) { return shows(s, "[8 tokens") && idle(s); }, screen))
        << screen;
    ids = session_ids();
    ASSERT_EQ(ids.size(), 2u);
    const std::string second_id = ids[0] == first_id ? ids[1] : ids[0];

    // /sessions opens the picker with both; Esc closes it.
    tmux->line("/sessions");
    ASSERT_TRUE(tmux->wait_for(
        [&](const std::string& s) {
            return shows(s, "Sessions · Enter opens") && shows(s, "* " + second_id) &&
                   shows(s, "  " + first_id);
        },
        screen))
        << screen;
    tmux->keys("Escape");
    ASSERT_TRUE(tmux->wait_for(
        [](const std::string& s) { return !shows(s, "Sessions · Enter opens"); }, screen))
        << screen;

    // /load (Tab completes the id) brings the first conversation back.
    tmux->text("/load " + first_id.substr(0, 4));
    tmux->keys("Tab");
    ASSERT_TRUE(tmux->wait_for(
        [&](const std::string& s) { return shows(s, "» /load " + first_id); }, screen))
        << screen;
    tmux->keys("Enter");
    ASSERT_TRUE(tmux->wait_for(
        [](const std::string& s) {
            return shows(s, "> A different prompt") && !shows(s, "Second conversation");
        },
        screen))
        << screen;

    tmux->line("/quit");
    EXPECT_EQ(expect_terminal_restored(*tmux, dir_), 0);
}

TEST_F(TuiTest, RendersMarkdownWideCharactersAndPastedText) {
    const char* const model = "arch/llama/llama.gguf";
    EMBER_REQUIRE_FIXTURE(model);
    auto tmux = start_shell("render");
    std::string screen;
    tmux->line(shell_quote(ember_binary()) + " chat -m " + shell_quote(fixture_path(model)) +
               " --db " + shell_quote(db_) + " -n 4 -t 1 --seed 1 --verbose");
    ASSERT_TRUE(tmux->wait_for(idle, screen)) << screen;

    // Tab completes a command.
    tmux->text("/he");
    tmux->keys("Tab");
    ASSERT_TRUE(tmux->wait_for([](const std::string& s) { return shows(s, "» /help"); }, screen))
        << screen;
    tmux->keys("C-u");

    // A bracketed paste keeps its newlines and does not send.
    const std::string cjk(20, 'x');
    tmux->paste(
        "## Wide text\n\n"
        "Plain **bold** and `code` with 日本語のテキストと絵文字😀🎉がたくさん並んでいる長い行は"
        "正しく折り返されなければならない café\n\n"
        "- first item\n- second 項目\n\n"
        "```python\nprint('你好')  # ok\n```");
    ASSERT_TRUE(tmux->wait_for([](const std::string& s) { return shows(s, "```python"); }, screen))
        << screen;
    EXPECT_FALSE(shows(screen, "> ## Wide")) << "the paste was sent\n" << screen;
    tmux->keys("Enter");
    ASSERT_TRUE(tmux->wait_for(
        [](const std::string& s) { return shows(s, "[4 tokens") && idle(s); }, screen))
        << screen;
    // Markdown rendered: no markup characters, bullets, the code block's bar. The seed is fixed
    // because the whole screen is read: a random-weight reply writes "(**" about once in 25
    // seeds, which failed CI once.
    EXPECT_TRUE(shows(screen, "> Wide text")) << screen;
    EXPECT_FALSE(shows(screen, "**")) << screen;
    EXPECT_FALSE(shows(screen, "```")) << screen;
    EXPECT_FALSE(shows(screen, "`code`")) << screen;
    EXPECT_TRUE(shows(screen, "  • second 項目")) << screen;
    EXPECT_TRUE(shows(screen, "  ┃ print('你好')  # ok")) << screen;
    expect_consistent(screen, kWidth, "llama.gguf");
    // The long CJK line wrapped onto several rows, each within the width.
    int cjk_rows = 0;
    for (const auto& line : lines_of(screen)) {
        if (shows(line, "日本語") || shows(line, "ならない café")) ++cjk_rows;
    }
    EXPECT_EQ(cjk_rows, 2) << screen;
    // Styled: the code line and the heading carry attributes.
    const std::string styled = tmux->screen(true);
    bool code_styled = false;
    for (const auto& line : lines_of(styled)) {
        if (shows(line, "print(") && shows(line, "\x1b[")) code_styled = true;
    }
    EXPECT_TRUE(code_styled) << styled;

    // Alt-Enter starts a new line in the same message.
    tmux->text("line one");
    tmux->keys("M-Enter");
    tmux->text("line two");
    tmux->keys("Enter");
    ASSERT_TRUE(tmux->wait_for(
        [](const std::string& s) {
            return shows(s, "> line one\n  line two") && count_of(s, "[4 tokens") >= 2 && idle(s);
        },
        screen))
        << screen;

    // Ctrl-D leaves.
    tmux->keys("C-d");
    EXPECT_EQ(expect_terminal_restored(*tmux, dir_), 0);
}

TEST_F(TuiTest, ThinkingCollapsesAndSigtermRestoresTheTerminal) {
    const char* const model = "arch/qwen3/qwen3.gguf";
    EMBER_REQUIRE_FIXTURE(model);
    // Monochrome: with NO_COLOR the screen carries no colours, only attributes.
    auto tmux = start_shell("thinking", "NO_COLOR=1");
    std::string screen;
    const std::string template_file =
        std::string(EMBER_SOURCE_DIR) + "/tests/data/qwen3_thinking.jinja";
    tmux->line(ember(
        model, "--chat-template " + shell_quote(template_file) + " --max-thinking-tokens 8 -n 6"));
    ASSERT_TRUE(tmux->wait_for(idle, screen)) << screen;
    tmux->line("Think first");
    ASSERT_TRUE(tmux->wait_for(
        [](const std::string& s) { return shows(s, "▸ thought for") && idle(s); }, screen))
        << screen;
    tmux->keys("C-t");
    ASSERT_TRUE(tmux->wait_for(
        [](const std::string& s) { return shows(s, "▾ thinking (Ctrl-T hides it)"); }, screen))
        << screen;
    EXPECT_TRUE(shows(screen, "┊ ")) << screen;
    const std::string styled = tmux->screen(true);
    EXPECT_FALSE(std::regex_search(styled, std::regex("\x1b\\[[0-9;]*3[1-7]m"))) << styled;

    // SIGTERM: the UI leaves and gives the terminal back.
    const auto children = child_pids(tmux->pane_pid());
    ASSERT_EQ(children.size(), 1u);
    ASSERT_EQ(kill(children[0], SIGTERM), 0);
    EXPECT_EQ(expect_terminal_restored(*tmux, dir_), 128 + SIGTERM);
}

}  // namespace
}  // namespace ember::test
