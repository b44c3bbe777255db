// Running the real binary on a real terminal (a pseudo-terminal, as `script` and tmux use)
// and keeping every byte it wrote there. Output post-processing is off on the terminal, so
// the bytes read back are exactly the bytes the program wrote (no "\n" -> "\r\n"), and echo
// is off, so typed input does not show up in them either.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace ember::test {

class TerminalProcess {
public:
    struct Options {
        // Environment entries set in the child ("TERM=dumb"); the rest is inherited.
        std::vector<std::string> env;
        // stdin: the terminal itself (typed input through type()), else a pipe fed with
        // `piped_input` and closed.
        bool stdin_is_terminal = false;
        std::string piped_input;
        int columns = 100;
        int rows = 30;
    };

    TerminalProcess(const std::vector<std::string>& argv, const Options& options) {
        master_ = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
        if (master_ < 0 || grantpt(master_) != 0 || unlockpt(master_) != 0) {
            throw std::runtime_error("cannot open a pseudo-terminal");
        }
        const std::string slave_name = ptsname(master_);
        winsize size{};
        size.ws_col = static_cast<unsigned short>(options.columns);
        size.ws_row = static_cast<unsigned short>(options.rows);
        ioctl(master_, TIOCSWINSZ, &size);
        int input_pipe[2] = {-1, -1};
        if (!options.stdin_is_terminal && pipe2(input_pipe, O_CLOEXEC) != 0) {
            throw std::runtime_error("cannot create a pipe");
        }
        pid_ = fork();
        if (pid_ < 0) throw std::runtime_error("fork failed");
        if (pid_ == 0) {
            setsid();
            const int slave = open(slave_name.c_str(), O_RDWR);  // the controlling terminal
            if (slave < 0) _exit(127);
            termios t{};
            tcgetattr(slave, &t);
            t.c_oflag &= ~static_cast<tcflag_t>(OPOST);
            t.c_lflag &= ~static_cast<tcflag_t>(ECHO | ECHOE | ECHOK | ECHONL | ECHOCTL);
            tcsetattr(slave, TCSANOW, &t);
            dup2(options.stdin_is_terminal ? slave : input_pipe[0], STDIN_FILENO);
            dup2(slave, STDOUT_FILENO);
            dup2(slave, STDERR_FILENO);
            if (slave > STDERR_FILENO) close(slave);
            for (const auto& entry : options.env) putenv(const_cast<char*>(entry.c_str()));
            std::vector<char*> args;
            for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
            args.push_back(nullptr);
            execv(args[0], args.data());
            _exit(127);
        }
        if (!options.stdin_is_terminal) {
            close(input_pipe[0]);
            const std::string& in = options.piped_input;
            size_t at = 0;
            while (at < in.size()) {
                const ssize_t n = write(input_pipe[1], in.data() + at, in.size() - at);
                if (n <= 0) break;
                at += static_cast<size_t>(n);
            }
            close(input_pipe[1]);
        }
    }
    ~TerminalProcess() {
        if (pid_ > 0 && !reaped_) {
            kill(pid_, SIGKILL);
            waitpid(pid_, nullptr, 0);
        }
        if (master_ >= 0) close(master_);
    }
    TerminalProcess(const TerminalProcess&) = delete;
    TerminalProcess& operator=(const TerminalProcess&) = delete;

    // Everything written to the terminal so far.
    const std::string& output() const { return output_; }

    // Types `text` at the terminal (the program's stdin when stdin_is_terminal).
    void type(const std::string& text) const {
        size_t at = 0;
        while (at < text.size()) {
            const ssize_t n = write(master_, text.data() + at, text.size() - at);
            if (n <= 0) return;
            at += static_cast<size_t>(n);
        }
    }

    // Reads until the output holds `text` after `from` (returns true) or `seconds` pass.
    bool wait_for(const std::string& text, size_t from = 0, double seconds = 60.0) {
        const auto deadline = std::chrono::steady_clock::now() +
                              std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
        while (output_.find(text, from) == std::string::npos) {
            if (!read_some(deadline)) return output_.find(text, from) != std::string::npos;
        }
        return true;
    }

    // Reads until the program closes the terminal, then its exit status (128 + signal when
    // killed; -1 when it did not end within `seconds`, and it is killed).
    int finish(double seconds = 120.0) {
        const auto deadline = std::chrono::steady_clock::now() +
                              std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
        while (read_some(deadline)) {
        }
        int status = 0;
        if (std::chrono::steady_clock::now() >= deadline && waitpid(pid_, &status, WNOHANG) == 0) {
            kill(pid_, SIGKILL);
            waitpid(pid_, nullptr, 0);
            reaped_ = true;
            return -1;
        }
        waitpid(pid_, &status, 0);
        reaped_ = true;
        if (WIFEXITED(status)) return WEXITSTATUS(status);
        return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : -1;
    }

private:
    // Appends what is readable; false at the end of output (every copy of the terminal's
    // other side closed: read gives EIO) or at the deadline.
    bool read_some(std::chrono::steady_clock::time_point deadline) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) return false;
        pollfd p{master_, POLLIN, 0};
        if (poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000))) <= 0) {
            return std::chrono::steady_clock::now() < deadline;
        }
        char buffer[4096];
        const ssize_t n = read(master_, buffer, sizeof buffer);
        if (n <= 0) return false;
        output_.append(buffer, static_cast<size_t>(n));
        return true;
    }

    int master_ = -1;
    pid_t pid_ = -1;
    bool reaped_ = false;
    std::string output_;
};

// Runs `argv` on a terminal to its end; returns the exit status and the terminal's bytes.
inline std::pair<int, std::string> run_on_terminal(const std::vector<std::string>& argv,
                                                   const TerminalProcess::Options& options = {}) {
    TerminalProcess process(argv, options);
    const int status = process.finish();
    return {status, process.output()};
}

}  // namespace ember::test
