// The full-screen chat as a daily user meets it, through tmux: where the store lives on the
// first run, a warning for a model without a chat template, no stats line under replies
// unless asked (/set stats on), /continue extending a reply cut at the token limit (to what
// one longer reply would have been), /set listing every setting, an error wrapped rather than
// cut at the screen's width, Tab showing ambiguous candidates, a narrow status line that
// shortens names but never a number, Ctrl-C on an empty input that only warns (twice leaves),
// messages that expire, the way back printed on leaving, and `ctx` right after --continue.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/fixtures.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tmux.h"
#include "ui/tui/text.h"

namespace ember::test {
namespace {

namespace fs = std::filesystem;

const char* const kShellPrompt = "SHELL$";
// A trained model (greedy text is stable) whose file has no chat template.
const char* const kModel = "models/stories260K.gguf";

std::vector<std::string> rows_of(const std::string& screen) {
    std::vector<std::string> rows;
    std::stringstream in(screen);
    std::string row;
    while (std::getline(in, row)) {
        while (!row.empty() && row.back() == ' ') row.pop_back();
        rows.push_back(row);
    }
    return rows;
}

bool shows(const std::string& screen, const std::string& text) {
    return screen.find(text) != std::string::npos;
}

bool idle(const std::string& s) {
    return shows(s, "» Type a message") && !shows(s, "replying ");
}

// The status line: the row above the input box's first row.
std::string status_row(const std::string& screen) {
    const auto rows = rows_of(screen);
    for (size_t i = 1; i < rows.size(); ++i) {
        if (rows[i].starts_with("» ")) return rows[i - 1];
    }
    return {};
}

bool at_shell(const std::string& screen) {
    const auto rows = rows_of(screen);
    for (auto it = rows.rbegin(); it != rows.rend(); ++it) {
        if (!it->empty()) return *it == kShellPrompt;
    }
    return false;
}

class TuiDaily : public ::testing::Test {
protected:
    void SetUp() override {
        EMBER_REQUIRE_TMUX(tmux);
        EMBER_REQUIRE_FIXTURE(kModel);
        dir_ = std::make_unique<TempDir>("ember-tui-daily");
        db_ = dir_->file("chat.db");
        tmux_ = std::make_unique<TmuxSession>(tmux, "ember-tui-daily");
        const std::string shell = "env PS1=" + shell_quote(std::string(kShellPrompt) + " ") +
                                  " LANG=C.UTF-8 XDG_DATA_HOME=" + shell_quote(dir_->path()) +
                                  " XDG_CONFIG_HOME=" + shell_quote(dir_->file("config")) +
                                  " EMBER_MODEL= /bin/sh";
        ASSERT_EQ(tmux_->start(shell, 100, 30).status, 0);
        std::string screen;
        ASSERT_TRUE(wait_for(at_shell, screen)) << screen;
    }

    bool wait_for(const std::function<bool(const std::string&)>& done, std::string& screen,
                  double seconds = 20.0) const {
        return TmuxSession::poll([this] { return tmux_->capture(); }, done, screen, seconds);
    }
    void line(const std::string& text) const {
        tmux_->text(text);
        tmux_->keys("Enter");
    }
    void resize(int width, int height) const {
        tmux_->run({"resize-window", "-t", "t", "-x", std::to_string(width), "-y",
                    std::to_string(height)});
    }
    std::string sessions(const std::vector<std::string>& args) const {
        std::vector<std::string> argv = {ember_binary(), "sessions"};
        argv.insert(argv.end(), args.begin(), args.end());
        argv.insert(argv.end(), {"--db", db_});
        return run_command(argv).out;
    }

    // The most recent conversation's id (`ember sessions list`'s first row).
    std::string first_id() const {
        const auto rows = rows_of(sessions({"list"}));
        return rows.size() < 2 ? std::string() : rows[1].substr(0, rows[1].find(' '));
    }

    std::unique_ptr<TempDir> dir_;
    std::string db_;
    std::unique_ptr<TmuxSession> tmux_;
};

TEST_F(TuiDaily, QuietRepliesContinueSettingsKeysAndTheWayBack) {
    // What one greedy reply of 12 tokens is: /continue after 6 must come to the same text.
    const CommandResult longer =
        run_command({ember_binary(), "chat", "-m", fixture_path(kModel), "--no-db", "--temp", "0",
                     "-n", "12", "-t", "1", "-p", "Once upon a time"});
    ASSERT_EQ(longer.status, 0) << longer.err;
    std::string twelve = longer.out;
    while (!twelve.empty() && twelve.back() == '\n') twelve.pop_back();
    ASSERT_FALSE(twelve.empty());

    std::string screen;
    line(shell_quote(ember_binary()) + " chat -m " + shell_quote(fixture_path(kModel)) + " --db " +
         shell_quote(db_) + " -t 1 --temp 0 -n 6 -c 2048");
    ASSERT_TRUE(wait_for(idle, screen)) << screen;
    // First run: where the store is and its cap; the model has no template.
    EXPECT_TRUE(shows(screen, "conversations and model state are saved in " + db_)) << screen;
    EXPECT_TRUE(shows(screen, "2GiB")) << screen;
    EXPECT_TRUE(shows(screen, "stories260K.gguf has no chat template")) << screen;

    line("Once upon a time");
    ASSERT_TRUE(wait_for(
        [](const std::string& s) { return shows(s, "/continue goes on") && idle(s); }, screen))
        << screen;
    // No stats line under the reply; the status line has the numbers.
    EXPECT_FALSE(shows(screen, "[6 tokens")) << screen;
    EXPECT_TRUE(shows(status_row(screen), "│ 6 tok │")) << screen;

    // /continue: the cut reply grows into what a longer one would have been.
    line("/continue");
    ASSERT_TRUE(wait_for([&](const std::string& s) { return shows(s, twelve) && idle(s); }, screen))
        << twelve << "\n"
        << screen;
    const std::string stored = sessions({"show", first_id()});
    EXPECT_TRUE(shows(stored, "\n" + twelve + "\n")) << stored;
    EXPECT_TRUE(shows(stored, "(3 messages in all branches)")) << stored;

    // The stats line on request.
    line("/set stats on");
    ASSERT_TRUE(wait_for([](const std::string& s) { return shows(s, "stats = on"); }, screen));
    line("The end");
    ASSERT_TRUE(
        wait_for([](const std::string& s) { return shows(s, "[6 tokens, ") && idle(s); }, screen))
        << screen;

    // /set lists every setting.
    line("/set");
    ASSERT_TRUE(wait_for([](const std::string& s) { return shows(s, "thinking-budget "); }, screen))
        << screen;
    for (const char* name : {"temp 0", "top-k", "seed random", "n-predict 6", "stats on",
                             "think auto", "reasoning-effort", "ctx 2048"}) {
        EXPECT_TRUE(shows(screen, name)) << name << "\n" << screen;
    }

    // An error wider than the screen wraps: its end is on screen too.
    resize(60, 24);
    line("/set bogus 1");
    ASSERT_TRUE(
        wait_for([](const std::string& s) { return shows(s, "unknown setting 'bogus'"); }, screen))
        << screen;
    EXPECT_TRUE(shows(screen, "reasoning-effort, ctx")) << screen;

    // Tab with several candidates shows them.
    tmux_->text("/s");
    tmux_->keys("Tab");
    ASSERT_TRUE(wait_for(
        [](const std::string& s) { return shows(s, "/sessions  /set  /stats  /system"); }, screen))
        << screen;
    tmux_->keys("C-u");

    // Narrow: names shorten and labels go; every number stays whole, within the width.
    for (int width : {44, 30, 20}) {
        resize(width, 24);
        // tmux crops the old frame at once; ember's own frame for the width follows.
        const std::regex context(R"((\d+)/(\d+))");
        const bool redrawn = wait_for(
            [&](const std::string& s) {
                const std::string status = status_row(s);
                std::smatch m;
                return ui::tui::display_width(status) <= width &&
                       std::regex_search(status, m, context) && m[2].str() == "2048";
            },
            screen);
        EXPECT_TRUE(redrawn) << width << ": a number cut or the line too wide\n" << screen;
    }
    resize(100, 30);

    // Ctrl-C on an empty input warns and stays; the warning expires.
    tmux_->keys("C-c");
    ASSERT_TRUE(
        wait_for([](const std::string& s) { return shows(s, "Ctrl-C again to leave"); }, screen))
        << screen;
    std::this_thread::sleep_for(std::chrono::milliseconds(1200));
    screen = tmux_->capture();
    EXPECT_TRUE(idle(screen)) << "a single Ctrl-C left the chat\n" << screen;
    ASSERT_TRUE(wait_for([](const std::string& s) { return !shows(s, "Ctrl-C again to leave"); },
                         screen, 8.0))
        << "the message did not expire\n"
        << screen;
    // Twice within a second leaves, saying how to come back.
    tmux_->keys("C-c");
    tmux_->keys("C-c");
    ASSERT_TRUE(wait_for(at_shell, screen)) << screen;
    screen = tmux_->capture({"-J"});  // the line as printed, not as the terminal wrapped it
    const std::string id = first_id();
    EXPECT_TRUE(shows(screen, "conversation " + id + " saved: ember chat --db " + db_ +
                                  " --continue (or --resume " + id + ")"))
        << screen;

    // Back, without -m: the conversation's model, and the context it already fills.
    line("clear; " + shell_quote(ember_binary()) + " chat --db " + shell_quote(db_) +
         " -t 1 --continue");
    ASSERT_TRUE(
        wait_for([](const std::string& s) { return idle(s) && shows(s, "The end"); }, screen))
        << screen;
    std::smatch m;
    const std::string status = status_row(screen);
    ASSERT_TRUE(std::regex_search(status, m, std::regex(R"(ctx (\d+)/(\d+))"))) << status;
    EXPECT_GT(std::stoi(m[1].str()), 20) << status;  // three turns of a 512-token vocabulary
    EXPECT_TRUE(shows(status, "stories260K.gguf")) << status;
    tmux_->keys("C-d");
    ASSERT_TRUE(wait_for(at_shell, screen)) << screen;
}

}  // namespace
}  // namespace ember::test
