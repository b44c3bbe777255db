// Running the real binary from tests: fork/exec with captured stdout and stderr.
#pragma once

#include <string>
#include <vector>

namespace ember::test {

struct CommandResult {
    int status = -1;  // exit status, or 128 + signal number when killed by a signal
    std::string out;
    std::string err;
    bool timed_out = false;  // killed (SIGKILL, status 137) for running past its time limit
};

// Runs argv[0] with the arguments (no shell), feeding `input` on stdin. With a positive
// `timeout_seconds`, a command still running then is killed, so a test of something that can
// block (a FIFO, a lock) fails instead of hanging.
CommandResult run_command(const std::vector<std::string>& argv, const std::string& input = "",
                          double timeout_seconds = 0);

std::vector<std::string> split_lines(const std::string& text);

// The full path of an executable found on $PATH, or empty.
std::string find_in_path(const std::string& program);
// `s` quoted for a POSIX shell command line.
std::string shell_quote(const std::string& s);

}  // namespace ember::test

namespace ember::test {

// A process left running in the background (a server), its stdout and stderr going to
// `log_path`. The destructor kills it (SIGKILL) if it still runs.
class BackgroundProcess {
public:
    BackgroundProcess(const std::vector<std::string>& argv, const std::string& log_path);
    ~BackgroundProcess();
    BackgroundProcess(const BackgroundProcess&) = delete;
    BackgroundProcess& operator=(const BackgroundProcess&) = delete;

    int pid() const { return pid_; }
    bool running();
    // The log so far.
    std::string log() const;
    // Waits up to `timeout_seconds` for a log line containing `needle`; returns that line,
    // or empty when it did not come (or the process ended first).
    std::string wait_for_line(const std::string& needle, double timeout_seconds);
    // Sends `signal_number` and waits up to `timeout_seconds` for the exit (then SIGKILL);
    // returns the exit status as CommandResult::status does.
    int stop(int signal_number, double timeout_seconds = 20);
    // Peak resident memory (VmHWM) in KiB while it runs; -1 when unknown.
    long peak_rss_kib() const;

private:
    int pid_ = -1;
    int status_ = -1;
    std::string log_path_;
};

}  // namespace ember::test
