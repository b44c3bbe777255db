#include "ui/tools/tool_runner.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>
#include <thread>

#include "engine/util/bounded_json.h"
#include "ui/io/attachments.h"

extern char** environ;

namespace ember::ui {

namespace {

// A pipe whose ends close themselves; both are close-on-exec (the child gets dup2'd copies).
struct Pipe {
    int read_end = -1;
    int write_end = -1;
    Pipe() {
        int fds[2];
        if (::pipe2(fds, O_CLOEXEC) != 0) {
            throw std::runtime_error(std::string("cannot make a pipe: ") + std::strerror(errno));
        }
        read_end = fds[0];
        write_end = fds[1];
    }
    ~Pipe() {
        close_read();
        close_write();
    }
    Pipe(const Pipe&) = delete;
    Pipe& operator=(const Pipe&) = delete;
    void close_read() {
        if (read_end >= 0) ::close(read_end);
        read_end = -1;
    }
    void close_write() {
        if (write_end >= 0) ::close(write_end);
        write_end = -1;
    }
};

// SIGPIPE held back in this thread while it writes to a child that may have exited without
// reading (a process-wide SIG_IGN would race with the other threads); a SIGPIPE raised
// meanwhile is taken off before the mask is restored.
class SigpipeBlocked {
public:
    SigpipeBlocked() {
        sigemptyset(&pipe_);
        sigaddset(&pipe_, SIGPIPE);
        pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
    }
    ~SigpipeBlocked() {
        const timespec none{0, 0};
        while (sigtimedwait(&pipe_, nullptr, &none) > 0) {
        }
        pthread_sigmask(SIG_SETMASK, &old_, nullptr);
    }
    SigpipeBlocked(const SigpipeBlocked&) = delete;
    SigpipeBlocked& operator=(const SigpipeBlocked&) = delete;

private:
    sigset_t pipe_{};
    sigset_t old_{};
};

// Starts `argv` with the pipes as its stdin, stdout and stderr, in a process group of its
// own, SIGPIPE at its default. Returns the pid, or -1 with `error` set.
pid_t spawn(const std::vector<std::string>& argv, Pipe& in, Pipe& out, Pipe& err,
            std::string& error) {
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, in.read_end, STDIN_FILENO);
    posix_spawn_file_actions_adddup2(&actions, out.write_end, STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&actions, err.write_end, STDERR_FILENO);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t defaults;
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGPIPE);
    sigset_t no_mask;
    sigemptyset(&no_mask);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    posix_spawnattr_setsigmask(&attr, &no_mask);
    posix_spawnattr_setpgroup(&attr, 0);
    posix_spawnattr_setflags(
        &attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    pid_t pid = -1;
    const int rc = posix_spawnp(&pid, args[0], &actions, &attr, args.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    if (rc != 0) {
        error = "cannot run '" + argv[0] + "': " + std::strerror(rc);
        return -1;
    }
    return pid;
}

// Feeds `input` and collects stdout and stderr until both close, the time is up or stdout
// passes `max_bytes`.
using Deadline = std::chrono::steady_clock::time_point;

void exchange(Pipe& in, Pipe& out, Pipe& err, const std::string& input, size_t max_bytes,
              Deadline deadline, ProcessRun& run) {
    const SigpipeBlocked no_sigpipe;
    size_t written = 0;
    if (input.empty()) in.close_write();
    char buffer[65536];
    while (out.read_end >= 0 || err.read_end >= 0) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                              deadline - std::chrono::steady_clock::now())
                              .count();
        if (left <= 0) {
            run.timed_out = true;
            return;
        }
        pollfd fds[3] = {
            {out.read_end, POLLIN, 0}, {err.read_end, POLLIN, 0}, {in.write_end, POLLOUT, 0}};
        const int ready = ::poll(fds, 3, static_cast<int>(left));
        if (ready < 0 && errno != EINTR) return;
        if (ready <= 0) continue;
        if (fds[2].revents != 0) {
            const ssize_t n = ::write(in.write_end, input.data() + written, input.size() - written);
            if (n > 0) written += static_cast<size_t>(n);
            // Done, or the child closed its stdin: it takes no more.
            if (written == input.size() || (n < 0 && errno != EINTR && errno != EAGAIN)) {
                in.close_write();
            }
        }
        for (int i = 0; i < 2; ++i) {
            if (fds[i].revents == 0) continue;
            Pipe& pipe = i == 0 ? out : err;
            const ssize_t n = ::read(pipe.read_end, buffer, sizeof buffer);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) {
                pipe.close_read();
                continue;
            }
            std::string& text = i == 0 ? run.out : run.err;
            text.append(buffer, static_cast<size_t>(n));
            if (i == 0 && text.size() > max_bytes) {
                run.too_large = true;
                return;
            }
            if (i == 1 && text.size() > 2 * kToolStderrKeptBytes) {
                text.erase(0, text.size() - kToolStderrKeptBytes);
            }
        }
    }
}

std::string seconds_text(int seconds) {
    return std::to_string(seconds) + (seconds == 1 ? " second" : " seconds");
}

ToolOutput run_command_tool(const ToolSpec& tool, const nlohmann::json& arguments) {
    const ProcessRun run = run_process(tool.command, arguments.dump() + "\n", kToolOutputMaxBytes,
                                       tool.timeout_seconds * 1000);
    if (!run.start_error.empty()) return {run.start_error, true};
    if (run.timed_out) {
        return {"the tool ran past its " + seconds_text(tool.timeout_seconds) +
                    " and was stopped; it returned nothing",
                true};
    }
    if (run.too_large) {
        return {"the tool wrote more than " + std::to_string(kToolOutputMaxBytes >> 10) +
                    " KiB and was stopped; it returned nothing",
                true};
    }
    if (const std::string problem = text_problem(run.out); !problem.empty()) {
        return {"the tool's output is not text (" + problem + ")", true};
    }
    if (run.exit_status != 0) {
        std::string text = "the tool failed (exit status " + std::to_string(run.exit_status) + ")";
        std::string err = run.err;
        if (err.size() > kToolStderrKeptBytes) err.erase(0, err.size() - kToolStderrKeptBytes);
        if (!text_problem(err).empty()) err.clear();
        if (!run.out.empty()) text += "\n" + run.out;
        if (!err.empty()) text += "\nstderr:\n" + err;
        return {text, true};
    }
    return {run.out, false};
}

}  // namespace

ProcessRun run_process(const std::vector<std::string>& argv, const std::string& input,
                       size_t max_bytes, int timeout_ms) {
    ProcessRun run;
    if (argv.empty()) {
        run.start_error = "no program to run";
        return run;
    }
    Pipe in, out, err;
    const pid_t pid = spawn(argv, in, out, err, run.start_error);
    if (pid < 0) return run;
    // The child holds its own copies; these ends would keep the pipes open.
    in.close_read();
    out.close_write();
    err.close_write();
    const Deadline deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    exchange(in, out, err, input, max_bytes, deadline, run);
    in.close_write();
    out.close_read();
    err.close_read();
    int status = 0;
    // A program that closed its output may still run: it gets what is left of its time.
    while (!run.timed_out && !run.too_large) {
        const pid_t done = ::waitpid(pid, &status, WNOHANG);
        if (done == pid || (done < 0 && errno != EINTR)) break;
        if (std::chrono::steady_clock::now() >= deadline) {
            run.timed_out = true;
            break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (run.timed_out || run.too_large) {
        ::kill(-pid, SIGKILL);
        while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
    }
    run.exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return run;
}

ToolOutput run_tool(const ToolSpec& tool, const std::string& arguments, const ToolRoot* root) {
    const nlohmann::json parsed = arguments.empty()
                                      ? nlohmann::json::object()
                                      : try_parse_json_bounded<nlohmann::json>(arguments);
    if (parsed.is_discarded() || !parsed.is_object()) {
        return {"the arguments are not a JSON object: " + arguments, true};
    }
    if (tool.kind != ToolKind::Command && root == nullptr) {
        return {"the built-in tools have no directory to read", true};
    }
    try {
        switch (tool.kind) {
            case ToolKind::ReadFile:
                return read_file_tool(*root, parsed);
            case ToolKind::ListDirectory:
                return list_directory_tool(*root, parsed);
            case ToolKind::Command:
                return run_command_tool(tool, parsed);
        }
    } catch (const std::exception& e) {
        return {std::string("the tool could not run: ") + e.what(), true};
    }
    return {"unknown tool kind", true};
}

}  // namespace ember::ui
