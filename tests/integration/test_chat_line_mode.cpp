// Line mode (`ember chat --plain`) driven through a real terminal: tmux runs a shell, the test
// types into it and reads the screen back. Covers a streamed reply, Ctrl-C mid-reply keeping
// the partial reply, /set, /regen giving a new reply, an unknown command, Ctrl-C at the
// prompt, Ctrl-D leaving with the terminal restored, and the saved input history.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/fixtures.h"
#include "tests/support/process.h"
#include "tests/support/tmux.h"

namespace ember::test {
namespace {

namespace fs = std::filesystem;

const char* const kModel = "arch/llama/llama.gguf";
const char* const kShellPrompt = "SHELL$";

std::string last_line(const std::string& screen) {
    const auto lines = screen_lines(screen);
    return lines.empty() ? std::string() : lines.back();
}

// One reply's stats line, as line mode prints it after every reply with --verbose.
struct TurnStats {
    size_t line = 0;  // index in screen_lines()
    int64_t generated = 0;
    int64_t reused = 0;
    int64_t evaluated = 0;
    std::string finish;
};

std::vector<TurnStats> stats_lines(const std::string& screen) {
    static const std::regex pattern(
        R"(^\[(\d+) tokens, .* prompt (\d+) reused \+ (\d+) evaluated, (\w+)\])");
    std::vector<TurnStats> out;
    const auto lines = screen_lines(screen);
    for (size_t i = 0; i < lines.size(); ++i) {
        std::smatch m;
        if (!std::regex_search(lines[i], m, pattern)) continue;
        out.push_back({i, std::stoll(m[1]), std::stoll(m[2]), std::stoll(m[3]), m[4]});
    }
    return out;
}

// The line-mode test's terminal: 100 x 30, screens with the whole history, lines joined.
class Tmux : public TmuxSession {
public:
    explicit Tmux(std::string binary) : TmuxSession(std::move(binary), "ember-line-test") {}
    CommandResult start(const std::string& command) const {
        return TmuxSession::start(command, 100, 30);
    }
    // Keys by tmux name ("Enter", "C-c"), or literal text with `literal`.
    void keys(const std::string& keys, bool literal = false) const {
        if (literal) {
            text(keys);
        } else {
            TmuxSession::keys(keys);
        }
    }
    void type_line(const std::string& text) const {
        keys(text, true);
        keys("Enter");
    }
    std::string screen() const { return capture({"-J", "-S", "-"}); }

    // Polls the screen until `done` holds or the deadline passes; returns the last screen.
    bool wait_for(const std::function<bool(const std::string&)>& done, std::string& screen,
                  double seconds = 15.0) const {
        return poll([this] { return this->screen(); }, done, screen, seconds);
    }
};

// A shell in tmux with XDG_DATA_HOME in a fresh directory (removed at the end), at its prompt.
// `skip` says why the test cannot run here (no fixture or no tmux outside CI; under CI=true
// those are failures); `tmux` is null then and when the shell failed to start.
struct LineModeTerminal {
    std::unique_ptr<Tmux> tmux;
    fs::path data_home;
    std::string skip;

    static LineModeTerminal open() {
        LineModeTerminal t;
        if (!fixture_exists(kModel)) {
            if (running_in_ci()) ADD_FAILURE() << "fixture missing under CI=true: " << kModel;
            t.skip = "fixture not found: " + fixture_path(kModel);
            return t;
        }
        const std::string tmux_binary = find_in_path("tmux");
        if (tmux_binary.empty()) {
            if (running_in_ci()) ADD_FAILURE() << "tmux is required under CI=true";
            t.skip = "tmux not found in PATH";
            return t;
        }
        char dir_template[] = "/tmp/ember-line-mode-XXXXXX";
        if (mkdtemp(dir_template) == nullptr) {
            ADD_FAILURE() << "cannot create " << dir_template;
            return t;
        }
        t.data_home = dir_template;
        auto tmux = std::make_unique<Tmux>(tmux_binary);
        const std::string shell = "env PS1=" + shell_quote(std::string(kShellPrompt) + " ") +
                                  " XDG_DATA_HOME=" + shell_quote(t.data_home.string()) +
                                  " /bin/sh";
        const CommandResult started = tmux->start(shell);
        if (started.status != 0) {
            ADD_FAILURE() << started.err;
            return t;
        }
        std::string screen;
        if (!tmux->wait_for([](const std::string& s) { return last_line(s) == kShellPrompt; },
                            screen)) {
            ADD_FAILURE() << screen;
            return t;
        }
        t.tmux = std::move(tmux);
        return t;
    }
    LineModeTerminal() = default;
    LineModeTerminal(LineModeTerminal&&) = default;
    ~LineModeTerminal() {
        tmux.reset();
        std::error_code ignored;
        if (!data_home.empty()) fs::remove_all(data_home, ignored);
    }
};

bool at_prompt(const std::string& screen) {
    return last_line(screen) == ">";
}

bool shows(const std::string& screen, const std::string& text) {
    return screen.find(text) != std::string::npos;
}

// A finished turn: its stats line printed and the prompt back.
auto turn_done(size_t count) {
    return [count](const std::string& s) { return stats_lines(s).size() >= count && at_prompt(s); };
}

TEST(ChatLineMode, StreamsCancelsRegeneratesAndRestoresTheTerminal) {
    const LineModeTerminal t = LineModeTerminal::open();
    if (!t.skip.empty()) GTEST_SKIP() << t.skip;
    ASSERT_TRUE(t.tmux);
    const Tmux& tmux = *t.tmux;
    const fs::path& data_home = t.data_home;
    std::string screen;

    // Long replies (until the context is full) so that Ctrl-C lands mid-reply.
    // --verbose: the stats line after each reply, which the test reads.
    tmux.type_line(shell_quote(ember_binary()) + " chat --plain --verbose -m " +
                   shell_quote(fixture_path(kModel)) + " -n 100000 --ignore-eos -c 2048 -t 2");
    ASSERT_TRUE(tmux.wait_for(at_prompt, screen)) << screen;
    EXPECT_TRUE(shows(screen, "/help")) << screen;

    // A prompt; the reply streams; Ctrl-C once some of it is on screen.
    tmux.type_line("Tell me a story");
    ASSERT_TRUE(tmux.wait_for(
        [](const std::string& s) { return reply_after(s, "Tell me a story").size() > 40; }, screen))
        << screen;
    tmux.keys("C-c");
    ASSERT_TRUE(tmux.wait_for(turn_done(1), screen)) << screen;
    const TurnStats cancelled = stats_lines(screen).at(0);
    EXPECT_EQ(cancelled.finish, "cancelled") << screen;
    EXPECT_GE(cancelled.generated, 8);
    EXPECT_LT(cancelled.generated, 2000) << "the reply ran to the end before Ctrl-C";
    EXPECT_FALSE(reply_after(screen, "Tell me a story").empty());

    // Short replies from here on.
    tmux.type_line("/set n-predict 16");
    ASSERT_TRUE(
        tmux.wait_for([](const std::string& s) { return shows(s, "n-predict = 16"); }, screen))
        << screen;

    // The partial reply stayed in the conversation: the next turn reuses the state that
    // holds the first prompt and every token generated before Ctrl-C.
    tmux.type_line("and then?");
    ASSERT_TRUE(tmux.wait_for(turn_done(2), screen)) << screen;
    const TurnStats second = stats_lines(screen).at(1);
    EXPECT_EQ(second.finish, "length");
    EXPECT_EQ(second.generated, 16);
    EXPECT_GE(second.reused, cancelled.evaluated + cancelled.generated - 4) << screen;
    const std::string second_reply = reply_after(screen, "and then?");
    EXPECT_FALSE(second_reply.empty()) << screen;

    // /regen answers the same prompt again with a new reply.
    tmux.type_line("/set seed 7");
    ASSERT_TRUE(tmux.wait_for([](const std::string& s) { return shows(s, "seed = 7"); }, screen))
        << screen;
    tmux.type_line("/regen");
    ASSERT_TRUE(tmux.wait_for(turn_done(3), screen)) << screen;
    const std::string regenerated = reply_after(screen, "/regen");
    EXPECT_FALSE(regenerated.empty()) << screen;
    EXPECT_NE(regenerated, second_reply) << screen;
    EXPECT_GT(stats_lines(screen).at(2).reused, second.evaluated) << screen;

    // An unknown command is explained and the chat carries on.
    tmux.type_line("/bogus");
    ASSERT_TRUE(tmux.wait_for(
        [](const std::string& s) {
            return shows(s, "unknown command /bogus; /help lists the commands") && at_prompt(s);
        },
        screen))
        << screen;
    tmux.type_line("/stats");
    ASSERT_TRUE(tmux.wait_for(
        [](const std::string& s) { return shows(s, "last reply: 16 tokens") && at_prompt(s); },
        screen))
        << screen;

    // Ctrl-C at the prompt drops the half-typed line and gives a fresh prompt.
    tmux.keys("half typed", true);
    ASSERT_TRUE(
        tmux.wait_for([](const std::string& s) { return last_line(s) == "> half typed"; }, screen))
        << screen;
    tmux.keys("C-c");
    ASSERT_TRUE(tmux.wait_for(
        [](const std::string& s) { return shows(s, "> half typed^C") && at_prompt(s); }, screen))
        << screen;

    // Ctrl-D leaves; the shell is back and the terminal is in its normal (cooked) mode.
    tmux.keys("C-d");
    ASSERT_TRUE(
        tmux.wait_for([](const std::string& s) { return last_line(s) == kShellPrompt; }, screen))
        << screen;
    tmux.type_line("stty -a");
    ASSERT_TRUE(tmux.wait_for(
        [](const std::string& s) { return shows(s, "icanon") && last_line(s) == kShellPrompt; },
        screen))
        << screen;
    std::string settings;
    for (const auto& line : screen_lines(screen)) {
        if (line.find("icanon") != std::string::npos) settings = " " + line + " ";
    }
    EXPECT_NE(settings.find(" icanon "), std::string::npos) << settings;
    EXPECT_NE(settings.find(" echo "), std::string::npos) << settings;
    EXPECT_NE(settings.find(" isig "), std::string::npos) << settings;

    // What was typed is saved under $XDG_DATA_HOME/ember.
    const std::string history = read_file((data_home / "ember" / "history").string());
    EXPECT_NE(history.find("and then?"), std::string::npos) << history;
    EXPECT_NE(history.find("/regen"), std::string::npos) << history;
    EXPECT_EQ(history.find("half typed"), std::string::npos) << history;
}

// The next turn starts from the state prepared behind the last reply: its prompt evaluates only
// the new message and what the template puts after it (the assistant header), counted here from
// `ember render` and `ember tokenize` of a one-message conversation. Without the preparation it
// would evaluate the reply's end-of-turn and the user header too.
TEST(ChatLineMode, NextTurnEvaluatesOnlyTheNewMessage) {
    const LineModeTerminal t = LineModeTerminal::open();
    if (!t.skip.empty()) GTEST_SKIP() << t.skip;
    ASSERT_TRUE(t.tmux);
    const Tmux& tmux = *t.tmux;
    std::string screen;
    tmux.type_line(shell_quote(ember_binary()) + " chat --plain --verbose -m " +
                   shell_quote(fixture_path(kModel)) + " -n 12 --ignore-eos -c 2048 -t 2");
    ASSERT_TRUE(tmux.wait_for(at_prompt, screen)) << screen;
    tmux.type_line("Hello there");
    ASSERT_TRUE(tmux.wait_for(turn_done(1), screen)) << screen;
    const std::string message = "Tell me more about it";
    tmux.type_line(message);
    ASSERT_TRUE(tmux.wait_for(turn_done(2), screen)) << screen;
    const TurnStats first = stats_lines(screen).at(0);
    const TurnStats second = stats_lines(screen).at(1);

    // The message and the assistant header after it, as the template renders them.
    const std::string messages = (t.data_home / "one.json").string();
    std::ofstream(messages) << R"([{"role": "user", "content": ")" << message << R"("}])";
    const CommandResult rendered =
        run_command({ember_binary(), "render", "-m", fixture_path(kModel), "--messages", messages});
    ASSERT_EQ(rendered.status, 0) << rendered.err;
    const size_t at = rendered.out.find(message);
    ASSERT_NE(at, std::string::npos) << rendered.out;
    const CommandResult ids = run_command({ember_binary(), "tokenize", "-m", fixture_path(kModel),
                                           "--special", rendered.out.substr(at)});
    ASSERT_EQ(ids.status, 0) << ids.err;
    const int64_t tail_tokens = std::count(ids.out.begin(), ids.out.end(), ',') + 1;
    EXPECT_EQ(second.evaluated, tail_tokens) << ids.out << "\n" << screen;
    // Everything before: the first prompt, the reply and the glue between the turns.
    EXPECT_GT(second.reused, first.reused + first.evaluated + first.generated) << screen;
    tmux.keys("C-d");
    ASSERT_TRUE(
        tmux.wait_for([](const std::string& s) { return last_line(s) == kShellPrompt; }, screen))
        << screen;
}

}  // namespace
}  // namespace ember::test
