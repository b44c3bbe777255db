#include "ui/io/attachments.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "engine/util/utf8.h"

namespace ember::ui {

namespace {

std::string fence_for(const std::string& content) {
    size_t longest = 0, run = 0;
    for (const char c : content) {
        run = c == '`' ? run + 1 : 0;
        longest = std::max(longest, run);
    }
    return std::string(std::max<size_t>(3, longest + 1), '`');
}

Attachment checked(std::string heading, std::string content, const std::string& what) {
    if (const std::string problem = text_problem(content); !problem.empty()) {
        throw std::runtime_error(what + " is not text: " + problem);
    }
    return {std::move(heading), std::move(content)};
}

}  // namespace

std::string text_problem(const std::string& content) {
    for (size_t i = 0; i < content.size();) {
        if (content[i] == '\0') return "it holds a NUL byte (byte " + std::to_string(i) + ")";
        const Utf8Step step = utf8_step(std::string_view(content).substr(i));
        if (step.status != Utf8Status::Valid) return "invalid UTF-8 at byte " + std::to_string(i);
        i += step.length;
    }
    return {};
}

Attachment read_text_file(const std::string& path, const std::string& name) {
    const std::string what = "'" + path + "'";
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
        throw std::runtime_error("cannot read " + what + ": " + std::strerror(errno));
    }
    if (!S_ISREG(st.st_mode)) throw std::runtime_error(what + " is not a regular file");
    if (static_cast<size_t>(st.st_size) > kMaxAttachmentBytes) {
        throw std::runtime_error(
            what + " is " + std::to_string(st.st_size) + " bytes, more than the " +
            std::to_string(kMaxAttachmentBytes >> 20) + " MiB attached at most");
    }
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("cannot read " + what);
    std::ostringstream text;
    text << in.rdbuf();
    std::string heading = name;
    if (heading.empty()) {
        const size_t slash = path.find_last_of('/');
        heading = slash == std::string::npos ? path : path.substr(slash + 1);
    }
    return checked("File: " + heading, text.str(), what);
}

Attachment read_stdin_attachment(std::FILE* in) {
    std::string content;
    char buffer[65536];
    for (;;) {
        const size_t n = std::fread(buffer, 1, sizeof buffer, in);
        content.append(buffer, n);
        if (content.size() > kMaxAttachmentBytes) {
            throw std::runtime_error("standard input is more than the " +
                                     std::to_string(kMaxAttachmentBytes >> 20) +
                                     " MiB attached at most");
        }
        if (n < sizeof buffer) break;
    }
    if (std::ferror(in)) throw std::runtime_error("cannot read standard input");
    return checked("File: (stdin)", std::move(content), "standard input");
}

std::vector<Attachment> command_line_attachments(const std::vector<std::string>& files,
                                                 bool with_stdin) {
    std::vector<Attachment> out;
    for (const std::string& path : files) {
        try {
            out.push_back(read_text_file(path));
        } catch (const std::runtime_error& e) {
            throw std::runtime_error(std::string("-f: ") + e.what());
        }
    }
    if (with_stdin && !::isatty(STDIN_FILENO)) {
        Attachment in = read_stdin_attachment(stdin);
        if (!in.content.empty()) out.push_back(std::move(in));
    }
    return out;
}

std::string join_attachments(const std::vector<Attachment>& attachments,
                             const std::string& prompt) {
    std::string text;
    for (const Attachment& a : attachments) {
        const std::string fence = fence_for(a.content);
        text += a.heading + "\n" + fence + "\n" + a.content;
        if (!a.content.empty() && a.content.back() != '\n') text += '\n';
        text += fence + "\n\n";
    }
    return text + prompt;
}

CommandOutput run_shell_command(const std::string& command, size_t max_bytes, int timeout_ms) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) {
        throw std::runtime_error(std::string("cannot make a pipe: ") + std::strerror(errno));
    }
    const pid_t pid = ::fork();
    if (pid < 0) {
        ::close(fds[0]);
        ::close(fds[1]);
        throw std::runtime_error(std::string("cannot start a process: ") + std::strerror(errno));
    }
    if (pid == 0) {
        ::setpgid(0, 0);
        const int null_in = ::open("/dev/null", O_RDONLY);
        if (null_in >= 0) ::dup2(null_in, STDIN_FILENO);
        ::dup2(fds[1], STDOUT_FILENO);
        ::dup2(fds[1], STDERR_FILENO);
        ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
        ::_exit(127);
    }
    ::setpgid(pid, pid);
    ::close(fds[1]);
    CommandOutput result;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    char buffer[65536];
    for (;;) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                              deadline - std::chrono::steady_clock::now())
                              .count();
        if (left <= 0) {
            result.timed_out = true;
            break;
        }
        pollfd p{fds[0], POLLIN, 0};
        const int ready = ::poll(&p, 1, static_cast<int>(left));
        if (ready < 0 && errno == EINTR) continue;
        if (ready <= 0) continue;
        const ssize_t n = ::read(fds[0], buffer, sizeof buffer);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        result.output.append(buffer, static_cast<size_t>(n));
        if (result.output.size() > max_bytes) {
            result.too_large = true;
            break;
        }
    }
    ::close(fds[0]);
    if (result.timed_out || result.too_large) ::kill(-pid, SIGKILL);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    result.exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return result;
}

}  // namespace ember::ui
