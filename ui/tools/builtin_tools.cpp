#include "ui/tools/builtin_tools.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <optional>
#include <vector>

#include "engine/util/utf8.h"
#include "ui/io/attachments.h"

namespace ember::ui {

namespace {

using ojson = nlohmann::ordered_json;
namespace fs = std::filesystem;

ToolOutput refused(std::string why) {
    return {std::move(why), true};
}

// Whether `path` (canonical) is `root` or lies under it, compared by whole components (so
// /work/ab is not under /work/a).
bool inside(const fs::path& path, const fs::path& root) {
    auto p = path.begin();
    for (auto r = root.begin(); r != root.end(); ++r, ++p) {
        if (r->empty()) continue;  // the empty last component of a root written with "/"
        if (p == path.end() || *p != *r) return false;
    }
    return true;
}

// The string argument `name`; nullopt when absent; an error message when not a string.
std::optional<std::string> string_argument(const nlohmann::json& arguments, const char* name,
                                           std::string& error) {
    if (!arguments.is_object() || !arguments.contains(name)) return std::nullopt;
    const nlohmann::json& value = arguments[name];
    if (!value.is_string()) {
        error = std::string("\"") + name + "\" must be a string";
        return std::nullopt;
    }
    return value.get<std::string>();
}

// A line number argument (1-based); 0 when absent; -1 after setting `error`.
int64_t line_argument(const nlohmann::json& arguments, const char* name, std::string& error) {
    if (!arguments.is_object() || !arguments.contains(name) || arguments[name].is_null()) {
        return 0;
    }
    const nlohmann::json& value = arguments[name];
    if (!value.is_number_integer() || value.get<int64_t>() < 1) {
        error = std::string("\"") + name + "\" must be a whole number, 1 or more";
        return -1;
    }
    return value.get<int64_t>();
}

std::atomic<bool> g_force_component_walk{false};

int sys_openat2(int dirfd, const char* path, int flags) {
#ifdef SYS_openat2
    struct open_how how {};
    how.flags = static_cast<uint64_t>(flags);
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
    return static_cast<int>(::syscall(SYS_openat2, dirfd, path, &how, sizeof how));
#else
    (void)dirfd;
    (void)path;
    (void)flags;
    errno = ENOSYS;
    return -1;
#endif
}

// `relative` (no "..", no empty components) opened beneath `dirfd` one component at a time,
// each directory with O_NOFOLLOW | O_DIRECTORY and the last with O_NOFOLLOW: a link anywhere
// on the way fails the open (ELOOP or ENOTDIR) instead of being followed.
int open_by_components(int dirfd, const fs::path& relative, int flags) {
    std::vector<std::string> parts;
    for (const fs::path& part : relative) {
        const std::string p = part.string();
        if (p.empty() || p == ".") continue;
        if (p == "..") {
            errno = EXDEV;
            return -1;
        }
        parts.push_back(p);
    }
    if (parts.empty()) return ::openat(dirfd, ".", flags | O_CLOEXEC);
    int at = dirfd;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
        const int next =
            ::openat(at, parts[i].c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        const int saved = errno;
        if (at != dirfd) ::close(at);
        if (next < 0) {
            errno = saved;
            return -1;
        }
        at = next;
    }
    const int fd = ::openat(at, parts.back().c_str(), flags | O_NOFOLLOW | O_CLOEXEC);
    const int saved = errno;
    if (at != dirfd) ::close(at);
    errno = saved;
    return fd;
}

// The whole of a regular file (the descriptor, which this closes), without blocking on a FIFO
// (opened O_NONBLOCK) and refusing anything but a regular file.
std::string read_regular_file(int fd, const std::string& shown) {
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(fd);
        throw ToolsError("'" + shown + "' is not a regular file");
    }
    if (static_cast<size_t>(st.st_size) > kReadFileMaxFileBytes) {
        ::close(fd);
        throw ToolsError("'" + shown + "' is " + std::to_string(st.st_size) +
                         " bytes; files over " + std::to_string(kReadFileMaxFileBytes >> 20) +
                         " MiB are not read");
    }
    std::string content;
    char buffer[65536];
    for (;;) {
        const ssize_t n = ::read(fd, buffer, sizeof buffer);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            const int saved = errno;
            ::close(fd);
            throw ToolsError("cannot read '" + shown + "': " + std::strerror(saved));
        }
        if (n == 0) break;
        content.append(buffer, static_cast<size_t>(n));
        if (content.size() > kReadFileMaxFileBytes) {
            ::close(fd);
            throw ToolsError("'" + shown + "' grew past " +
                             std::to_string(kReadFileMaxFileBytes >> 20) + " MiB while read");
        }
    }
    ::close(fd);
    return content;
}

// Offsets where each line of `text` starts (a last line without '\n' counts).
std::vector<size_t> line_starts(const std::string& text) {
    std::vector<size_t> starts;
    if (text.empty()) return starts;
    starts.push_back(0);
    for (size_t i = 0; i + 1 < text.size(); ++i) {
        if (text[i] == '\n') starts.push_back(i + 1);
    }
    return starts;
}

}  // namespace

ToolRoot::ToolRoot(const std::string& dir) {
    std::error_code error;
    root_ = fs::canonical(dir.empty() ? "." : dir, error);
    if (error || !fs::is_directory(root_, error)) {
        throw ToolsError("--tool-root '" + dir + "' is not a directory");
    }
    root_fd_ = ::open(root_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (root_fd_ < 0) {
        throw ToolsError("--tool-root '" + dir + "' cannot be opened: " + std::strerror(errno));
    }
}

ToolRoot::~ToolRoot() {
    if (root_fd_ >= 0) ::close(root_fd_);
}

bool ToolRoot::kernel_has_openat2() {
    static const bool has = [] {
        const int fd = sys_openat2(AT_FDCWD, ".", O_PATH | O_CLOEXEC);
        if (fd >= 0) ::close(fd);
        return fd >= 0 || errno != ENOSYS;
    }();
    return has && !g_force_component_walk.load();
}

void ToolRoot::force_component_walk(bool on) {
    g_force_component_walk = on;
}

int ToolRoot::open(const std::string& requested, int flags) const {
    const fs::path real = resolve(requested);
    const fs::path relative = real.lexically_relative(root_);
    // The check above read the path; this open holds it to what was checked: beneath the
    // root's descriptor, no link followed anywhere (one swapped in since fails the open).
    int fd = -1;
    if (kernel_has_openat2()) {
        const std::string rel = relative.empty() ? "." : relative.string();
        fd = sys_openat2(root_fd_, rel.c_str(), flags | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0 && (errno == EPERM || errno == ENOSYS)) {  // seccomp may refuse openat2
            fd = open_by_components(root_fd_, relative, flags);
        }
    } else {
        fd = open_by_components(root_fd_, relative, flags);
    }
    if (fd < 0) {
        const int saved = errno;
        if (saved == ELOOP || saved == EXDEV || saved == ENOTDIR) {
            throw ToolsError("'" + requested +
                             "' changed while it was opened (a link appeared "
                             "on its way); not read");
        }
        throw ToolsError("cannot read '" + requested + "': " + std::strerror(saved));
    }
    return fd;
}

fs::path ToolRoot::resolve(const std::string& requested) const {
    if (requested.empty()) throw ToolsError("the path is empty");
    if (requested.find('\0') != std::string::npos) throw ToolsError("the path holds a NUL byte");
    const fs::path asked(requested);
    const fs::path joined = asked.is_absolute() ? asked : root_ / asked;
    std::error_code error;
    const fs::path real = fs::canonical(joined, error);
    if (error) {
        // Where it would lead matters more than whether it exists: "../secret" is refused as
        // outside even when there is no such file.
        if (!inside(joined.lexically_normal(), root_)) {
            throw ToolsError("'" + requested + "' is outside the directory tools may read (" +
                             root_.string() + ")");
        }
        throw ToolsError("'" + requested + "': " + error.message());
    }
    if (!inside(real, root_)) {
        throw ToolsError("'" + requested + "' is outside the directory tools may read (" +
                         root_.string() + ")");
    }
    return real;
}

ToolSpec builtin_tool(const std::string& name) {
    ToolSpec tool;
    tool.name = name;
    if (name == "read_file") {
        tool.kind = ToolKind::ReadFile;
        tool.description =
            "Read a text file under the current directory. Returns its text (at most " +
            std::to_string(kReadFileMaxBytes >> 10) +
            " KiB; ask for a line range to read more of a long file).";
        tool.parameters = ojson::parse(R"({
            "type": "object",
            "properties": {
                "path": {"type": "string",
                         "description": "The file's path, relative to the current directory"},
                "start_line": {"type": "integer",
                               "description": "First line to read (1-based); default 1"},
                "end_line": {"type": "integer",
                             "description": "Last line to read (inclusive); default the end"}
            },
            "required": ["path"]
        })");
    } else if (name == "list_directory") {
        tool.kind = ToolKind::ListDirectory;
        tool.description =
            "List a directory under the current directory: one entry a line, directories "
            "ending in '/', symbolic links in '@'.";
        tool.parameters = ojson::parse(R"({
            "type": "object",
            "properties": {
                "path": {"type": "string",
                         "description": "The directory, relative to the current directory; default ."}
            },
            "required": []
        })");
    } else {
        std::string known;
        for (const std::string& n : builtin_tool_names()) known += (known.empty() ? "" : ", ") + n;
        throw ToolsError("--builtin-tools: no built-in tool \"" + name + "\" (there are: " + known +
                         ")");
    }
    return tool;
}

ToolOutput read_file_tool(const ToolRoot& root, const nlohmann::json& arguments) {
    std::string error;
    const std::optional<std::string> path = string_argument(arguments, "path", error);
    if (!error.empty()) return refused(error);
    if (!path) return refused("\"path\" is required: the file to read");
    const int64_t first = line_argument(arguments, "start_line", error);
    const int64_t last = line_argument(arguments, "end_line", error);
    if (!error.empty()) return refused(error);
    if (last > 0 && first > last) return refused("\"start_line\" is past \"end_line\"");
    std::string text;
    try {
        text = read_regular_file(root.open(*path, O_RDONLY | O_NONBLOCK), *path);
    } catch (const ToolsError& e) {
        return refused(e.what());
    }
    if (const std::string problem = text_problem(text); !problem.empty()) {
        return refused("'" + *path + "' is not text: " + problem);
    }
    const std::vector<size_t> starts = line_starts(text);
    const auto total = static_cast<int64_t>(starts.size());
    if (first == 0 && last == 0 && text.size() <= kReadFileMaxBytes) return {text, false};
    const int64_t from = std::max<int64_t>(first, 1);
    if (from > total) {
        return refused("'" + *path + "' has " + std::to_string(total) + " lines; start_line " +
                       std::to_string(from) + " is past its end");
    }
    int64_t to = last == 0 ? total : std::min(last, total);
    const auto begin = starts[static_cast<size_t>(from - 1)];
    const auto end_of = [&](int64_t line) {
        return line >= total ? text.size() : starts[static_cast<size_t>(line)];
    };
    // Cut at the last whole line within the cap (a single line longer than the cap is cut
    // inside it, at a character boundary).
    while (to > from && end_of(to) - begin > kReadFileMaxBytes) --to;
    std::string out = text.substr(begin, end_of(to) - begin);
    bool cut_line = false;
    if (out.size() > kReadFileMaxBytes) {
        out.resize(utf8_cut(out, kReadFileMaxBytes));
        cut_line = true;
    }
    const int64_t wanted_to = last == 0 ? total : std::min(last, total);
    if (cut_line || to < wanted_to) {
        if (!out.empty() && out.back() != '\n') out += '\n';
        out += "[" + std::string(cut_line ? "part of line " : "lines ") + std::to_string(from) +
               (cut_line ? "" : "-" + std::to_string(to)) + " of " + std::to_string(total) +
               " shown (at most " + std::to_string(kReadFileMaxBytes >> 10) +
               " KiB a call); start_line " + std::to_string(to + 1) + " reads on]";
    }
    return {out, false};
}

ToolOutput list_directory_tool(const ToolRoot& root, const nlohmann::json& arguments) {
    std::string error;
    const std::string path = string_argument(arguments, "path", error).value_or(".");
    if (!error.empty()) return refused(error);
    int fd = -1;
    try {
        fd = root.open(path, O_RDONLY | O_NONBLOCK);
    } catch (const ToolsError& e) {
        return refused(e.what());
    }
    struct stat dir_stat {};
    if (::fstat(fd, &dir_stat) != 0 || !S_ISDIR(dir_stat.st_mode)) {
        ::close(fd);
        return refused("'" + path + "' is not a directory");
    }
    DIR* d = ::fdopendir(fd);
    if (d == nullptr) {
        ::close(fd);
        return refused("cannot list '" + path + "': " + std::strerror(errno));
    }
    std::vector<std::string> entries;
    errno = 0;
    while (const dirent* e = ::readdir(d)) {
        std::string name = e->d_name;
        if (name == "." || name == "..") continue;
        struct stat st {};
        if (::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
            if (S_ISLNK(st.st_mode)) {
                name += "@";
            } else if (S_ISDIR(st.st_mode)) {
                name += "/";
            }
        }
        entries.push_back(std::move(name));
        errno = 0;
    }
    const int read_error = errno;
    ::closedir(d);
    if (read_error != 0) return refused("cannot list '" + path + "': " + std::strerror(read_error));
    std::sort(entries.begin(), entries.end());
    std::string out;
    const size_t shown = std::min(entries.size(), kListDirectoryMaxEntries);
    for (size_t i = 0; i < shown; ++i) out += entries[i] + "\n";
    if (entries.empty()) out = "(empty directory)\n";
    if (shown < entries.size()) {
        out += "[" + std::to_string(entries.size() - shown) + " more entries not shown]\n";
    }
    return {out, false};
}

}  // namespace ember::ui
