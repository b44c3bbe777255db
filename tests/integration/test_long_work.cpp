// Long work shows progress and stops when asked, through the real binary and a real model
// (SmolLM2 135M): a prompt of thousands of tokens pasted into the full-screen chat shows its
// progress in the status line, repainted with no key pressed, and Esc stops the reading within
// a bound; the chat whose terminal went away (its tmux server killed) or that gets SIGTERM
// mid-prefill ends within a second or two with the conversation saved; line mode shows a
// progress line and Ctrl-C stops it; a scripted --jsonl run stopped by SIGINT or SIGTERM
// prints its turn as "finish": "cancelled" after the --progress events.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/fixtures.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tmux.h"

namespace ember::test {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
}

// About 6,500 tokens of SmolLM2 (the context is 8,192): seconds of prefill on two cores.
std::string long_prompt() {
    std::string text = "Read these notes, then say which item is filed under 3. ";
    for (int i = 0; i < 720; ++i) {
        text +=
            "Item " + std::to_string(i) + " is filed under " + std::to_string(i * 7 % 13) + ". ";
    }
    return text;
}

// Whether process `pid` has ended (gone, or a zombie waiting for its parent).
bool ended(int pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string stat;
    if (!std::getline(in, stat)) return true;
    const size_t paren = stat.rfind(')');
    return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'Z';
}

// Polls until `pid` ends; the seconds it took, or a negative number past `limit`.
double wait_for_end(int pid, double limit) {
    const auto start = Clock::now();
    while (!ended(pid)) {
        if (since(start) > limit) return -1.0;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return since(start);
}

std::vector<std::string> rows_of(const std::string& screen) {
    std::vector<std::string> rows;
    std::stringstream in(screen);
    std::string row;
    while (std::getline(in, row)) rows.push_back(row);
    return rows;
}

bool shows(const std::string& screen, const std::string& text) {
    return screen.find(text) != std::string::npos;
}

// The status line: the row above the input box's first row.
std::string status_row(const std::string& screen) {
    const auto rows = rows_of(screen);
    for (size_t i = 1; i < rows.size(); ++i) {
        if (rows[i].starts_with("» ") || rows[i].starts_with("✎ ")) return rows[i - 1];
    }
    return {};
}

// "3,072/6,511 tok" in a line: {done, total}, or {-1, -1}.
std::pair<int64_t, int64_t> progress_numbers(const std::string& line) {
    static const std::regex kNumbers("([0-9][0-9,]*)/([0-9][0-9,]*) tok");
    std::smatch m;
    if (!std::regex_search(line, m, kNumbers)) return {-1, -1};
    const auto number = [](std::string s) {
        std::erase(s, ',');
        return std::stoll(s);
    };
    return {number(m[1].str()), number(m[2].str())};
}

class LongWork : public ::testing::Test {
protected:
    void SetUp() override {
        EMBER_REQUIRE_REAL_MODEL_OF(kSmolLM2_135m);
        model_ = real_model_path(kSmolLM2_135m);
        dir_ = std::make_unique<TempDir>("ember-long-work");
        db_ = dir_->file("chat.db");
        prompt_file_ = dir_->file("prompt.txt");
        std::ofstream(prompt_file_) << long_prompt();
    }

    // The chat as the pane's own process (exec'd by the shell, so its pid is the one
    // written): the full-screen UI, or line mode with `extra` = {"--plain"}.
    void start_chat(const std::string& tmux, const std::vector<std::string>& extra = {}) {
        tmux_ = std::make_unique<TmuxSession>(tmux, "ember-long-work");
        std::ostringstream command;
        command << "echo $$ > " << shell_quote(dir_->file("pid"))
                << "; exec env LANG=C.UTF-8 XDG_DATA_HOME=" << shell_quote(dir_->path().string())
                << " XDG_CONFIG_HOME=" << shell_quote(dir_->file("config")) << " "
                << shell_quote(ember_binary()) << " chat -m " << shell_quote(model_) << " --db "
                << shell_quote(db_) << " -c 8192 -n 16 -t 2 --temp 0";
        for (const auto& e : extra) command << " " << shell_quote(e);
        // Built by appending: GCC 12 warns (-Wrestrict, wrongly) on "literal" + std::string&&.
        std::string shell_command = "sh -c ";
        shell_command += shell_quote(command.str());
        ASSERT_EQ(tmux_->start(shell_command, 110, 30).status, 0);
        std::string screen;
        ASSERT_TRUE(wait_for([&](const std::string& s) { return ready(s, extra); }, screen, 60))
            << screen;
        pid_ = std::stoi(read_file(dir_->file("pid")));
    }
    static bool ready(const std::string& screen, const std::vector<std::string>& extra) {
        if (extra.empty()) return shows(screen, "» Type a message");
        // Line mode: its banner, then readline's prompt (trailing blanks are not captured).
        const auto rows = rows_of(screen);
        for (auto row = rows.rbegin(); row != rows.rend(); ++row) {
            if (!row->empty()) return *row == ">" && shows(screen, "ember line mode");
        }
        return false;
    }

    // Pastes the long prompt (bracketed, as a terminal pastes) and sends it once its end
    // shows in the input.
    void send_long_prompt() const {
        tmux_->run({"load-buffer", "-b", "long", prompt_file_});
        tmux_->run({"paste-buffer", "-p", "-d", "-b", "long", "-t", "t"});
        std::string screen;
        // The input wraps it anywhere: compared without white space.
        const auto at_end = [](const std::string& s) {
            std::string squeezed = s;
            std::erase_if(squeezed, [](char c) { return c == ' ' || c == '\n'; });
            return shows(squeezed, "Item719isfiledunder2.");
        };
        ASSERT_TRUE(wait_for(at_end, screen, 30)) << screen;
        tmux_->keys("Enter");
    }

    bool wait_for(const std::function<bool(const std::string&)>& done, std::string& screen,
                  double seconds = 30.0) const {
        return TmuxSession::poll([this] { return tmux_->capture(); }, done, screen, seconds);
    }

    // The conversation the store holds, as JSON (its messages in "messages").
    json stored_conversation() const {
        const CommandResult list =
            run_command({ember_binary(), "sessions", "list", "--db", db_}, "", 30);
        const auto rows = split_lines(list.out);
        if (rows.size() < 2) return json();
        const std::string id = rows[1].substr(0, rows[1].find(' '));
        const CommandResult exported = run_command(
            {ember_binary(), "sessions", "export", id, "--format", "json", "--db", db_}, "", 30);
        return json::parse(exported.out, nullptr, false);
    }

    // Whether the store holds the long prompt as a user message.
    bool prompt_saved() const {
        const json conversation = stored_conversation();
        if (!conversation.is_object() || !conversation.contains("messages")) return false;
        for (const json& m : conversation["messages"]) {
            if (m.value("role", "") == "user" && m.value("content", "") == long_prompt()) {
                return true;
            }
        }
        return false;
    }

    std::string model_;
    std::unique_ptr<TempDir> dir_;
    std::string db_;
    std::string prompt_file_;
    std::unique_ptr<TmuxSession> tmux_;
    int pid_ = -1;
};

bool reading(const std::string& screen) {
    return shows(status_row(screen), "reading prompt") &&
           progress_numbers(status_row(screen)).first > 0;
}

TEST_F(LongWork, FullScreenShowsTheReadingAndEscStopsIt) {
    EMBER_REQUIRE_TMUX(tmux);
    ASSERT_NO_FATAL_FAILURE(start_chat(tmux));
    ASSERT_NO_FATAL_FAILURE(send_long_prompt());
    std::string screen;
    ASSERT_TRUE(wait_for(reading, screen, 60)) << screen;
    const auto [first_done, total] = progress_numbers(status_row(screen));
    EXPECT_GT(total, 5000);
    EXPECT_LT(first_done, total);
    // No key pressed: the status line repaints on its own, the count climbing.
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    screen = tmux_->capture();
    ASSERT_TRUE(reading(screen)) << screen;
    const auto [later_done, later_total] = progress_numbers(status_row(screen));
    EXPECT_EQ(later_total, total);
    EXPECT_GT(later_done, first_done) << status_row(screen);
    EXPECT_TRUE(shows(status_row(screen), "tok/s")) << status_row(screen);
    EXPECT_TRUE(shows(status_row(screen), "▕")) << status_row(screen);  // the bar

    // Esc stops it: the screen says so well within a second (the engine stops at the next
    // layer, ~20 ms here; the rest is tmux and the frame).
    const auto pressed = Clock::now();
    tmux_->keys("Escape");
    ASSERT_TRUE(wait_for(
        [](const std::string& s) {
            return shows(s, "stopped while reading the prompt") && !reading(s);
        },
        screen, 10))
        << screen;
    const double stop_seconds = since(pressed);
    EXPECT_LT(stop_seconds, 1.0) << "Esc took " << stop_seconds << " s to stop the prefill";
    // The reply's note says how far the reading got; the read part is kept.
    ASSERT_TRUE(
        wait_for([](const std::string& s) { return shows(s, "[stopped reading the prompt at "); },
                 screen, 5))
        << screen;
    static const std::regex kNote("stopped reading the prompt at ([0-9]+) of ([0-9]+) tokens");
    std::smatch m;
    const std::string flat = std::regex_replace(screen, std::regex("\n"), " ");
    ASSERT_TRUE(std::regex_search(flat, m, kNote)) << screen;
    EXPECT_GT(std::stoll(m[1].str()), 0);
    EXPECT_LT(std::stoll(m[1].str()), std::stoll(m[2].str()));
    EXPECT_EQ(std::stoll(m[2].str()), total);
    // Idle again: no CPU is burnt on the rest of the prompt.
    EXPECT_TRUE(shows(screen, "» Type a message")) << screen;
    tmux_->keys("C-d");
    EXPECT_GE(wait_for_end(pid_, 10), 0.0);
    EXPECT_TRUE(prompt_saved());
}

TEST_F(LongWork, FullScreenWhoseTerminalWentAwayEndsAndKeepsTheConversation) {
    EMBER_REQUIRE_TMUX(tmux);
    ASSERT_NO_FATAL_FAILURE(start_chat(tmux));
    ASSERT_NO_FATAL_FAILURE(send_long_prompt());
    std::string screen;
    ASSERT_TRUE(wait_for(reading, screen, 60)) << screen;
    // The terminal goes: SIGHUP, and the pty reads nothing more.
    tmux_->run({"kill-server"});
    const double seconds = wait_for_end(pid_, 10);
    ASSERT_GE(seconds, 0.0) << "the chat kept running after its terminal went away";
    EXPECT_LT(seconds, 2.0);
    EXPECT_TRUE(prompt_saved());
}

TEST_F(LongWork, FullScreenEndsOnSigtermMidPrefill) {
    EMBER_REQUIRE_TMUX(tmux);
    ASSERT_NO_FATAL_FAILURE(start_chat(tmux));
    ASSERT_NO_FATAL_FAILURE(send_long_prompt());
    std::string screen;
    ASSERT_TRUE(wait_for(reading, screen, 60)) << screen;
    ASSERT_EQ(kill(pid_, SIGTERM), 0);
    const double seconds = wait_for_end(pid_, 10);
    ASSERT_GE(seconds, 0.0) << "SIGTERM was not honoured";
    EXPECT_LT(seconds, 1.5);
    EXPECT_TRUE(prompt_saved());
}

TEST_F(LongWork, LineModeShowsTheReadingAndCtrlCStopsIt) {
    EMBER_REQUIRE_TMUX(tmux);
    ASSERT_NO_FATAL_FAILURE(start_chat(tmux, {"--plain"}));
    ASSERT_NO_FATAL_FAILURE(send_long_prompt());
    std::string screen;
    const auto line_reading = [](const std::string& s) {
        for (const auto& row : rows_of(s)) {
            if (row.starts_with("prompt ▕") && progress_numbers(row).first > 0) return true;
        }
        return false;
    };
    ASSERT_TRUE(wait_for(line_reading, screen, 60)) << screen;
    const auto pressed = Clock::now();
    tmux_->keys("C-c");
    ASSERT_TRUE(
        wait_for([](const std::string& s) { return shows(s, "[stopped reading the prompt at "); },
                 screen, 10))
        << screen;
    EXPECT_LT(since(pressed), 1.0);
    // The progress line is gone; SIGTERM at the prompt ends line mode at once.
    ASSERT_EQ(kill(pid_, SIGTERM), 0);
    const double seconds = wait_for_end(pid_, 10);
    ASSERT_GE(seconds, 0.0);
    EXPECT_LT(seconds, 1.5);
    EXPECT_TRUE(prompt_saved());
}

// A scripted --jsonl run stopped by `signal_number` while it reads a long prompt.
void expect_scripted_stop(const std::string& model, const TempDir& dir, int signal_number) {
    const std::string db = dir.file("scripted.db");
    BackgroundProcess chat(
        {ember_binary(), "chat", "-m", model, "--jsonl", "--progress", "-p", long_prompt(), "--db",
         db, "-c", "8192", "-n", "16", "-t", "2", "--temp", "0"},
        dir.file("scripted.log"));
    const std::string event = chat.wait_for_line("\"event\":\"progress\"", 60);
    ASSERT_FALSE(event.empty()) << chat.log();
    const auto sent = Clock::now();
    const int status = chat.stop(signal_number, 10);
    const double seconds = since(sent);
    EXPECT_EQ(status, 128 + signal_number) << chat.log();
    EXPECT_LT(seconds, 1.5);
    std::vector<json> lines;
    for (const auto& line : split_lines(chat.log())) {
        if (line.starts_with("{")) lines.push_back(json::parse(line));
    }
    ASSERT_GE(lines.size(), 2u) << chat.log();
    // Progress events first: the same total, climbing.
    int64_t last_done = 0;
    for (size_t i = 0; i + 1 < lines.size(); ++i) {
        EXPECT_EQ(lines[i]["event"], "progress") << lines[i];
        EXPECT_EQ(lines[i]["stage"], "prefill");
        EXPECT_GE(lines[i]["done"].get<int64_t>(), last_done);
        last_done = lines[i]["done"].get<int64_t>();
        EXPECT_LT(last_done, lines[i]["total"].get<int64_t>());
        EXPECT_GT(lines[i]["tokens_per_second"].get<double>(), 0.0);
    }
    // Then the turn, cancelled: no reply, the prompt read in part.
    const json& turn = lines.back();
    EXPECT_EQ(turn["finish"], "cancelled") << turn;
    EXPECT_EQ(turn["reply"], "");
    EXPECT_GT(turn["tokens_not_evaluated"].get<int64_t>(), 0);
    EXPECT_GE(turn["tokens_evaluated"].get<int64_t>(), last_done - 256);
    EXPECT_TRUE(shows(chat.log(), "ember: stopped by SIG")) << chat.log();
    // The prompt is in the store.
    const CommandResult list = run_command({ember_binary(), "sessions", "list", "--db", db});
    EXPECT_EQ(split_lines(list.out).size(), 2u) << list.out << list.err;
}

TEST_F(LongWork, ScriptedJsonlStoppedByCtrlCPrintsACancelledTurn) {
    expect_scripted_stop(model_, *dir_, SIGINT);
}

TEST_F(LongWork, ScriptedJsonlStoppedBySigterm) {
    expect_scripted_stop(model_, *dir_, SIGTERM);
}

TEST_F(LongWork, ScriptedJsonlFromStdinStopsAndReadsNoFurtherPrompt) {
    // A script of two prompts on stdin: SIGTERM while the first is read ends the run there.
    const std::string input = dir_->file("prompts.jsonl");
    std::ofstream(input) << json{{"prompt", long_prompt()}}.dump() << "\n"
                         << json{{"prompt", "And the next question?"}}.dump() << "\n";
    const std::string command = "exec " + shell_quote(ember_binary()) + " chat -m " +
                                shell_quote(model_) + " --jsonl --progress --no-db -c 8192 -n 16 " +
                                "-t 2 --temp 0 < " + shell_quote(input);
    BackgroundProcess chat({"/bin/sh", "-c", command}, dir_->file("stdin.log"));
    ASSERT_FALSE(chat.wait_for_line("\"event\":\"progress\"", 60).empty()) << chat.log();
    const auto sent = Clock::now();
    EXPECT_EQ(chat.stop(SIGTERM, 10), 128 + SIGTERM) << chat.log();
    EXPECT_LT(since(sent), 1.5);
    std::vector<json> turns;
    for (const auto& line : split_lines(chat.log())) {
        if (!line.starts_with("{")) continue;
        const json j = json::parse(line);
        if (!j.contains("event")) turns.push_back(j);
    }
    ASSERT_EQ(turns.size(), 1u) << chat.log();
    EXPECT_EQ(turns[0]["finish"], "cancelled");
    EXPECT_TRUE(shows(chat.log(), "ember: stopped by SIGTERM")) << chat.log();
}

// Processes whose command line mentions `text`.
std::vector<int> processes_mentioning(const std::string& text) {
    std::vector<int> found;
    for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
        const std::string name = entry.path().filename().string();
        if (name.find_first_not_of("0123456789") != std::string::npos) continue;
        std::ifstream in(entry.path() / "cmdline", std::ios::binary);
        std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
        if (cmdline.find(text) != std::string::npos && !ended(std::stoi(name))) {
            found.push_back(std::stoi(name));
        }
    }
    return found;
}

TEST_F(LongWork, BenchResumeStopsWithItsChatProcesses) {
    // bench-resume runs chat processes for a minute or more; SIGTERM ends it and them at once.
    const std::string keep = dir_->file("bench");
    BackgroundProcess bench({ember_binary(), "bench-resume", "-m", model_, "--tokens", "3000", "-t",
                             "2", "--keep", keep},
                            dir_->file("bench.log"));
    // Its first chat process is running.
    const auto start = Clock::now();
    while (processes_mentioning(keep + "/resume.db").empty() && since(start) < 30) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ASSERT_FALSE(processes_mentioning(keep + "/resume.db").empty()) << bench.log();
    std::this_thread::sleep_for(std::chrono::seconds(2));
    const auto sent = Clock::now();
    const int status = bench.stop(SIGTERM, 10);
    EXPECT_EQ(status, 128 + SIGTERM) << bench.log();
    EXPECT_LT(since(sent), 1.5);
    EXPECT_TRUE(shows(bench.log(), "bench-resume: stopped by SIGTERM; nothing measured"))
        << bench.log();
    // No chat process is left behind.
    std::vector<int> left = processes_mentioning(keep);
    for (int i = 0; i < 50 && !left.empty(); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        left = processes_mentioning(keep);
    }
    EXPECT_TRUE(left.empty()) << left.size() << " chat process(es) left running";
}

TEST_F(LongWork, BenchResumeFromMemoryRestoresFromTheHostTier) {
    // One serving process: conversation A, then B takes the slot, then A's next turn comes
    // back from the host tier; a server without a store recomputes the same turn.
    const CommandResult r = run_command({ember_binary(), "bench-resume", "-m", model_, "--from",
                                         "memory", "--tokens", "600", "-t", "2"},
                                        "", 300);
    ASSERT_EQ(r.status, 0) << r.out << r.err;
    const json j = json::parse(r.out, nullptr, false);
    ASSERT_TRUE(j.is_object()) << r.out;
    EXPECT_EQ(j["from"], "memory");
    EXPECT_EQ(j["warm"]["restored_from"], "memory");
    EXPECT_EQ(j["warm"]["resume"], "restore");
    // A's message (~600 tokens) is restored, the turn's own tokens evaluated.
    EXPECT_GT(j["warm"]["tokens_restored"].get<int64_t>(), 500);
    EXPECT_LT(j["warm"]["tokens_evaluated"].get<int64_t>(), 64);
    EXPECT_EQ(j["cold"]["tokens_reused"].get<int64_t>(), 0);
    EXPECT_GT(j["cold"]["tokens_evaluated"].get<int64_t>(), 500);
    EXPECT_TRUE(j["replies_equal"].get<bool>()) << j.dump(2);
    EXPECT_GT(j["restore"]["raw_bytes"].get<int64_t>(), 0);
    EXPECT_TRUE(j["pass"].get<bool>());
}

}  // namespace
}  // namespace ember::test
