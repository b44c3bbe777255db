#include "ui/io/clipboard.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <vector>

#include "ui/io/attachments.h"

namespace ember::ui {

namespace {

// The file `name` names on PATH, executable; empty when there is none.
std::string find_on_path(const std::string& name) {
    const char* path = std::getenv("PATH");
    if (path == nullptr) return {};
    std::stringstream dirs(path);
    std::string dir;
    while (std::getline(dirs, dir, ':')) {
        if (dir.empty()) continue;
        const std::string candidate = dir + "/" + name;
        if (access(candidate.c_str(), X_OK) == 0 && !std::filesystem::is_directory(candidate)) {
            return candidate;
        }
    }
    return {};
}

// Runs `argv` with `text` on its stdin, its output and errors discarded; true when it exits 0.
// (xclip stays behind to own the selection: its copy holds /dev/null, not our pipe.)
bool feed(const std::vector<std::string>& argv, const std::string& text) {
    std::vector<char*> args;  // built before fork: the child only calls what exec allows
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return false;
    const pid_t pid = fork();
    if (pid == 0) {
        const int null = open("/dev/null", O_WRONLY);
        dup2(fds[0], STDIN_FILENO);
        if (null >= 0) {
            dup2(null, STDOUT_FILENO);
            dup2(null, STDERR_FILENO);
        }
        execv(args[0], args.data());
        _exit(127);
    }
    close(fds[0]);
    if (pid < 0) {
        close(fds[1]);
        return false;
    }
    // A tool that exits without reading must not kill us with SIGPIPE.
    struct sigaction ignore {
    }, old{};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    sigaction(SIGPIPE, &ignore, &old);
    size_t done = 0;
    while (done < text.size()) {
        const ssize_t n = write(fds[1], text.data() + done, text.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        done += static_cast<size_t>(n);
    }
    close(fds[1]);
    sigaction(SIGPIPE, &old, nullptr);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) return false;
    }
    return done == text.size() && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

bool is_fence(const std::string& line, std::string& fence) {
    const size_t start = line.find_first_not_of(' ');
    if (start == std::string::npos || start > 3) return false;
    const char c = line[start];
    if (c != '`' && c != '~') return false;
    size_t n = start;
    while (n < line.size() && line[n] == c) ++n;
    if (n - start < 3) return false;
    if (fence.empty()) {
        fence = line.substr(start, n - start);
        return true;
    }
    // A closing fence: the same character, at least as long, nothing after it but blanks.
    return fence[0] == c && n - start >= fence.size() &&
           line.find_first_not_of(" \t", n) == std::string::npos;
}

}  // namespace

std::vector<std::string> code_blocks(const std::string& markdown) {
    std::vector<std::string> blocks;
    std::stringstream in(markdown);
    std::string line, fence, block;
    bool inside = false;
    while (std::getline(in, line)) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (!inside) {
            fence.clear();
            if (is_fence(line, fence)) {
                inside = true;
                block.clear();
            }
        } else if (is_fence(line, fence)) {
            inside = false;
            blocks.push_back(block);
        } else {
            block += line + "\n";
        }
    }
    if (inside) blocks.push_back(block);  // an unclosed block runs to the end
    return blocks;
}

std::optional<std::string> copy_selection(const std::string& reply, const std::string& arg,
                                          std::string& error) {
    if (arg.empty()) return reply;
    size_t used = 0;
    long n = 0;
    try {
        n = std::stol(arg, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    if (used != arg.size() || n < 1) {
        error = "/copy " + arg + ": expected a code block's number (1, 2, ...), or nothing";
        return std::nullopt;
    }
    const auto blocks = code_blocks(reply);
    if (static_cast<size_t>(n) > blocks.size()) {
        error = "/copy " + arg + ": the last reply has " + std::to_string(blocks.size()) +
                (blocks.size() == 1 ? " code block" : " code blocks");
        return std::nullopt;
    }
    return blocks[static_cast<size_t>(n) - 1];
}

std::string osc52_sequence(const std::string& text) {
    static constexpr char kAlphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out = "\x1b]52;c;";
    size_t i = 0;
    for (; i + 2 < text.size(); i += 3) {
        const uint32_t v = (static_cast<unsigned char>(text[i]) << 16) |
                           (static_cast<unsigned char>(text[i + 1]) << 8) |
                           static_cast<unsigned char>(text[i + 2]);
        for (int shift : {18, 12, 6, 0}) out += kAlphabet[(v >> shift) & 63];
    }
    if (i < text.size()) {
        uint32_t v = static_cast<unsigned char>(text[i]) << 16;
        if (i + 1 < text.size()) v |= static_cast<unsigned char>(text[i + 1]) << 8;
        out += kAlphabet[(v >> 18) & 63];
        out += kAlphabet[(v >> 12) & 63];
        out += i + 1 < text.size() ? kAlphabet[(v >> 6) & 63] : '=';
        out += '=';
    }
    out += '\a';
    return out;
}

std::string osc52_blocker() {
    const char* tmux = std::getenv("TMUX");
    if (tmux == nullptr || *tmux == '\0') return {};
    constexpr size_t kMaxAnswer = 256;
    constexpr int kTimeoutMs = 2000;
    const CommandOutput out =
        run_shell_command("tmux show-options -gv set-clipboard", kMaxAnswer, kTimeoutMs);
    std::string value = out.output;
    while (!value.empty() && (value.back() == '\n' || value.back() == ' ')) value.pop_back();
    if (out.exit_status != 0 || out.timed_out || value == "on") return {};
    return "tmux's set-clipboard is " + value + " (tmux set -g set-clipboard on lets it through)";
}

ClipboardResult copy_to_clipboard(const std::string& text) {
    const std::vector<std::vector<std::string>> tools = {{"wl-copy"},
                                                         {"xclip", "-selection", "clipboard"},
                                                         {"xsel", "--clipboard", "--input"},
                                                         {"pbcopy"}};
    ClipboardResult result;
    for (const auto& tool : tools) {
        const std::string path = find_on_path(tool[0]);
        if (path.empty()) continue;
        std::vector<std::string> argv = tool;
        argv[0] = path;
        if (feed(argv, text)) {
            result.via_tool = true;
            result.tool = tool[0];
            return result;
        }
    }
    result.osc52 = osc52_sequence(text);
    return result;
}

}  // namespace ember::ui
