#include "ui/tui/editor.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace ember::ui::tui {

namespace {

std::string env_value(const char* name) {
    const char* value = std::getenv(name);
    return value == nullptr ? std::string() : std::string(value);
}

bool blank(const std::string& s) {
    return s.find_first_not_of(" \t") == std::string::npos;
}

// A file of our own in $TMPDIR (else /tmp), mode 0600; empty path when it cannot be made.
std::string make_temp_file(const std::string& text, std::string& error) {
    std::string dir = env_value("TMPDIR");
    if (dir.empty() || dir[0] != '/') dir = "/tmp";
    std::string path = dir + "/ember-message-XXXXXX.md";
    const int fd = mkostemps(path.data(), 3, O_CLOEXEC);
    if (fd < 0) {
        error = "cannot create a temporary file in " + dir;
        return {};
    }
    size_t done = 0;
    while (done < text.size()) {
        const ssize_t n = write(fd, text.data() + done, text.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        done += static_cast<size_t>(n);
    }
    close(fd);
    if (done != text.size()) {
        unlink(path.c_str());
        error = "cannot write the temporary file " + path;
        return {};
    }
    return path;
}

// Runs `sh -c 'COMMAND "$1"' sh PATH` on the terminal and returns its wait status, or -1.
int run_editor(const std::string& command, const std::string& path) {
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    struct sigaction old_int {
    }, old_quit{};
    sigaction(SIGINT, &ignore, &old_int);
    sigaction(SIGQUIT, &ignore, &old_quit);
    const std::string script = command + " \"$1\"";
    const pid_t pid = fork();
    if (pid == 0) {
        struct sigaction standard {};
        standard.sa_handler = SIG_DFL;
        sigemptyset(&standard.sa_mask);
        sigaction(SIGINT, &standard, nullptr);
        sigaction(SIGQUIT, &standard, nullptr);
        execl("/bin/sh", "sh", "-c", script.c_str(), "sh", path.c_str(),
              static_cast<char*>(nullptr));
        _exit(127);
    }
    int status = -1;
    if (pid > 0) {
        while (waitpid(pid, &status, 0) < 0) {
            if (errno != EINTR) {
                status = -1;
                break;
            }
        }
    }
    sigaction(SIGINT, &old_int, nullptr);
    sigaction(SIGQUIT, &old_quit, nullptr);
    return status;
}

}  // namespace

std::string editor_command() {
    for (const char* name : {"VISUAL", "EDITOR"}) {
        std::string value = env_value(name);
        if (!blank(value)) return value;
    }
    return {};
}

EditorOutcome edit_text(const std::string& command, const std::string& text) {
    EditorOutcome outcome;
    if (blank(command)) {
        outcome.error = "no editor: set $EDITOR (or $VISUAL) to compose in one";
        return outcome;
    }
    const std::string path = make_temp_file(text, outcome.error);
    if (path.empty()) return outcome;
    const int status = run_editor(command, path);
    if (status == -1) {
        outcome.error = "cannot start the editor '" + command + "'";
    } else if (WIFEXITED(status) && WEXITSTATUS(status) == 127) {
        outcome.error = "editor '" + command + "' not found (set $EDITOR); the input is unchanged";
    } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        outcome.error = "editor '" + command + "' failed (exit status " + std::to_string(code) +
                        "); the input is unchanged";
    } else {
        std::ifstream in(path, std::ios::binary);
        std::ostringstream content;
        content << in.rdbuf();
        if (!in) {
            outcome.error = "cannot read the edited file " + path;
        } else {
            std::string edited = content.str();
            if (edited.ends_with("\r\n")) {
                edited.resize(edited.size() - 2);
            } else if (edited.ends_with('\n')) {
                edited.pop_back();
            }
            outcome.text = std::move(edited);
        }
    }
    unlink(path.c_str());
    return outcome;
}

}  // namespace ember::ui::tui
