#include "tests/support/process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <stdexcept>

namespace ember::test {

CommandResult run_command(const std::vector<std::string>& argv, const std::string& input,
                          double timeout_seconds) {
    using Clock = std::chrono::steady_clock;
    const auto deadline =
        Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(
                           timeout_seconds > 0 ? timeout_seconds : 0));
    // Two threads may run commands at once (SessionsFaults.TwoProcessesShareOneDatabase): the
    // pipes close on exec, so that one child does not carry the other's pipe ends into its
    // program (each would keep the other's stdin open and both wait for an EOF that never
    // comes), and the child calls nothing that may take a lock between fork and exec (another
    // thread may have held the allocator's at the fork): its argv is built first.
    int in_pipe[2], out_pipe[2], err_pipe[2];
    if (pipe2(in_pipe, O_CLOEXEC) || pipe2(out_pipe, O_CLOEXEC) || pipe2(err_pipe, O_CLOEXEC)) {
        throw std::runtime_error("pipe failed");
    }
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    const pid_t pid = fork();
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid == 0) {
        // dup2's copies do not close on exec; the originals do.
        dup2(in_pipe[0], 0);
        dup2(out_pipe[1], 1);
        dup2(err_pipe[1], 2);
        execv(args[0], args.data());
        _exit(127);
    }
    close(in_pipe[0]);
    close(out_pipe[1]);
    close(err_pipe[1]);
    signal(SIGPIPE, SIG_IGN);
    CommandResult r;
    size_t written = 0;
    if (input.empty()) {
        close(in_pipe[1]);
        in_pipe[1] = -1;
    }
    pollfd fds[3] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}, {in_pipe[1], POLLOUT, 0}};
    int open_reads = 2;
    char buf[65536];
    while (open_reads > 0) {
        const nfds_t n = in_pipe[1] >= 0 ? 3 : 2;
        int wait_ms = -1;
        if (timeout_seconds > 0) {
            const auto left =
                std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
            if (left.count() <= 0) {
                // Killing the child closes its ends of the pipes (a grandchild that kept them
                // open is not waited for: the reads stop here).
                kill(pid, SIGKILL);
                r.timed_out = true;
                break;
            }
            wait_ms = static_cast<int>(std::min<int64_t>(left.count(), 1000));
        }
        if (poll(fds, n, wait_ms) <= 0) continue;
        for (int i = 0; i < 2; ++i) {
            if (fds[i].fd >= 0 && (fds[i].revents & (POLLIN | POLLHUP))) {
                ssize_t got = read(fds[i].fd, buf, sizeof buf);
                if (got <= 0) {
                    close(fds[i].fd);
                    fds[i].fd = -1;
                    --open_reads;
                } else {
                    (i == 0 ? r.out : r.err).append(buf, static_cast<size_t>(got));
                }
            }
        }
        if (n == 3 && (fds[2].revents & (POLLOUT | POLLERR | POLLHUP))) {
            ssize_t put = write(in_pipe[1], input.data() + written, input.size() - written);
            if (put > 0) written += static_cast<size_t>(put);
            if (put <= 0 || written == input.size()) {
                close(in_pipe[1]);
                in_pipe[1] = -1;
                fds[2].fd = -1;
            }
        }
    }
    if (in_pipe[1] >= 0) close(in_pipe[1]);
    for (int i = 0; i < 2; ++i) {
        if (fds[i].fd >= 0) close(fds[i].fd);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return r;
}

std::vector<std::string> split_lines(const std::string& text) {
    std::vector<std::string> lines;
    size_t start = 0;
    while (start < text.size()) {
        size_t end = text.find('\n', start);
        if (end == std::string::npos) end = text.size();
        if (end > start) lines.push_back(text.substr(start, end - start));
        start = end + 1;
    }
    return lines;
}

std::string find_in_path(const std::string& program) {
    const char* path = std::getenv("PATH");
    std::stringstream dirs(path != nullptr ? path : "/usr/bin:/bin");
    std::string dir;
    while (std::getline(dirs, dir, ':')) {
        const std::string candidate = dir + "/" + program;
        if (!dir.empty() && access(candidate.c_str(), X_OK) == 0) return candidate;
    }
    return {};
}

std::string shell_quote(const std::string& s) {
    std::string out = "'";
    for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
}

}  // namespace ember::test

#include <fcntl.h>

#include <chrono>
#include <fstream>
#include <thread>

namespace ember::test {

BackgroundProcess::BackgroundProcess(const std::vector<std::string>& argv,
                                     const std::string& log_path)
    : log_path_(log_path) {
    // argv built before the fork: the child calls nothing that may take a lock (run_command).
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    const pid_t pid = fork();
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid == 0) {
        const int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        const int null_fd = open("/dev/null", O_RDONLY);
        if (fd < 0 || null_fd < 0) _exit(126);
        dup2(null_fd, 0);
        dup2(fd, 1);
        dup2(fd, 2);
        close(fd);
        close(null_fd);
        execv(args[0], args.data());
        _exit(127);
    }
    pid_ = pid;
}

BackgroundProcess::~BackgroundProcess() {
    if (running()) stop(SIGKILL, 5);
}

bool BackgroundProcess::running() {
    if (pid_ < 0 || status_ >= 0) return false;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
        status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        return false;
    }
    return true;
}

std::string BackgroundProcess::log() const {
    std::ifstream in(log_path_, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

std::string BackgroundProcess::wait_for_line(const std::string& needle, double timeout_seconds) {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
    while (std::chrono::steady_clock::now() < deadline) {
        for (const auto& line : split_lines(log())) {
            if (line.find(needle) != std::string::npos) return line;
        }
        if (!running()) return {};
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return {};
}

int BackgroundProcess::stop(int signal_number, double timeout_seconds) {
    if (!running()) return status_;
    kill(pid_, signal_number);
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
    while (running()) {
        if (std::chrono::steady_clock::now() > deadline) {
            kill(pid_, SIGKILL);
            int status = 0;
            waitpid(pid_, &status, 0);
            status_ = 128 + SIGKILL;
            break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return status_;
}

long BackgroundProcess::peak_rss_kib() const {
    std::ifstream in("/proc/" + std::to_string(pid_) + "/status");
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("VmHWM:", 0) == 0) return std::atol(line.c_str() + 6);
    }
    return -1;
}

}  // namespace ember::test
