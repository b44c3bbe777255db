// A tmux server of its own (a unique socket, killed with its socket file at the end) with one
// session "t", for tests that drive the real binary through a real terminal.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/fixtures.h"
#include "tests/support/process.h"

namespace ember::test {

// A captured screen's rows, trailing blanks (and carriage returns) trimmed, without the empty
// rows at the bottom.
inline std::vector<std::string> screen_lines(const std::string& screen) {
    std::vector<std::string> lines;
    std::stringstream in(screen);
    std::string line;
    while (std::getline(in, line)) {
        while (!line.empty() && (line.back() == ' ' || line.back() == '\r')) line.pop_back();
        lines.push_back(line);
    }
    while (!lines.empty() && lines.back().empty()) lines.pop_back();
    return lines;
}

// What a line-mode chat printed after the last line typed as `input` ("> input"), up to its
// stats line ("[N tokens, ...", --verbose).
inline std::string reply_after(const std::string& screen, const std::string& input) {
    const auto lines = screen_lines(screen);
    size_t at = lines.size();
    for (size_t i = 0; i < lines.size(); ++i) {
        if (lines[i] == "> " + input) at = i;
    }
    std::string reply;
    for (size_t i = at + 1; i < lines.size(); ++i) {
        if (lines[i].starts_with("[") && lines[i].find(" tokens, ") != std::string::npos) break;
        reply += lines[i] + "\n";
    }
    return reply;
}

class TmuxSession {
public:
    // `name` tells this test's server apart; the process id keeps parallel runs apart.
    TmuxSession(std::string binary, const std::string& name)
        : binary_(std::move(binary)), socket_(name + "-" + std::to_string(getpid())) {}
    ~TmuxSession() {
        // tmux leaves its socket file behind after kill-server.
        std::string socket_path = run({"display-message", "-p", "#{socket_path}"}).out;
        while (!socket_path.empty() && socket_path.back() == '\n') socket_path.pop_back();
        run({"kill-server"});
        std::error_code ignored;
        if (!socket_path.empty()) std::filesystem::remove(socket_path, ignored);
    }
    TmuxSession(const TmuxSession&) = delete;
    TmuxSession& operator=(const TmuxSession&) = delete;

    CommandResult run(const std::vector<std::string>& args) const {
        std::vector<std::string> argv = {binary_, "-L", socket_, "-f", "/dev/null"};
        argv.insert(argv.end(), args.begin(), args.end());
        return run_command(argv);
    }
    CommandResult start(const std::string& command, int width, int height) const {
        return run({"new-session", "-d", "-x", std::to_string(width), "-y", std::to_string(height),
                    "-s", "t", command});
    }
    // Keys by tmux name ("Enter", "C-c").
    void keys(const std::string& keys) const { run({"send-keys", "-t", "t", keys}); }
    // Literal text.
    void text(const std::string& text) const { run({"send-keys", "-t", "t", "-l", text}); }
    // capture-pane with extra flags ("-J", "-S", "-" for the whole history; "-e" for styles).
    std::string capture(const std::vector<std::string>& flags = {}) const {
        std::vector<std::string> args = {"capture-pane", "-p"};
        args.insert(args.end(), flags.begin(), flags.end());
        args.insert(args.end(), {"-t", "t"});
        return run(args).out;
    }
    // Polls `grab` until `done` holds or the deadline passes; `screen` keeps the last grab.
    static bool poll(const std::function<std::string()>& grab,
                     const std::function<bool(const std::string&)>& done, std::string& screen,
                     double seconds) {
        const auto deadline =
            std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
        for (;;) {
            screen = grab();
            if (done(screen)) return true;
            if (std::chrono::steady_clock::now() > deadline) return false;
            std::this_thread::sleep_for(std::chrono::milliseconds(30));
        }
    }

private:
    std::string binary_;
    std::string socket_;
};

}  // namespace ember::test

// At the top of a test or SetUp: `var` becomes tmux's path; without tmux the test skips (fails
// under CI=true, where scripts/setup.sh installs it).
#define EMBER_REQUIRE_TMUX(var)                                  \
    const std::string var = ::ember::test::find_in_path("tmux"); \
    do {                                                         \
        if (var.empty()) {                                       \
            EMBER_SKIP_OR_FAIL("tmux not found in PATH");        \
        }                                                        \
    } while (0)
