// The built-in tools a chat may offer the model (--builtin-tools read_file,list_directory):
// read-only, confined to one directory tree (the tool root: the current directory unless
// --tool-root names another), and bounded in what they return.
//
// Confinement: a path the model names is taken relative to the root (an absolute one must
// lie inside it), every symbolic link on the way is resolved, and what it resolves to must
// still lie inside the root: "../x", "/etc/passwd" and a link pointing out of the root are
// refused alike. The kernel then holds the file to that answer: the resolved path is opened
// beneath a descriptor of the root, following no symbolic link and no "..", with openat2
// (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS) where the kernel has it (Linux 5.6), else one
// component at a time with openat(O_NOFOLLOW). So a directory swapped for a link out of the
// root between the check and the open makes the open fail; it never reads outside. FIFOs,
// devices and sockets are refused (opened non-blocking, checked with fstat), and nothing is
// ever written. Not detected: a hard link inside the root to a file outside it (it is the
// same file; making one needs write access inside the root and to the file).
#pragma once

#include <cstddef>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "ui/tools/tool_set.h"

namespace ember::ui {

// What read_file returns at most: past this the text is cut at a line end, with a note
// saying which lines it holds and how to ask for the rest.
constexpr size_t kReadFileMaxBytes = size_t{64} << 10;
// Files larger than this are refused (read_file reads the whole file to check it is text).
constexpr size_t kReadFileMaxFileBytes = size_t{16} << 20;
// Entries list_directory returns at most (then a note says how many more there are).
constexpr size_t kListDirectoryMaxEntries = 1000;

// What a tool call gave back: the text the model reads, and whether it is an error (the
// model reads that too, as the call's result).
struct ToolOutput {
    std::string content;
    bool error = false;
};

// The directory tree built-in tools may read.
class ToolRoot {
public:
    // Throws ToolsError when `dir` is not an existing directory.
    explicit ToolRoot(const std::string& dir);
    ~ToolRoot();
    ToolRoot(const ToolRoot&) = delete;
    ToolRoot& operator=(const ToolRoot&) = delete;
    const std::filesystem::path& path() const { return root_; }
    // `requested` resolved (links and "..") to a path inside the root; throws ToolsError
    // naming the path when it does not exist or lies outside the root.
    std::filesystem::path resolve(const std::string& requested) const;
    // A descriptor of `requested` (resolve()d), opened beneath the root without following any
    // link (see the top of this file), with `flags` (O_RDONLY, O_NONBLOCK; O_CLOEXEC and
    // O_NOFOLLOW are added). The caller closes it. Throws ToolsError naming the path.
    int open(const std::string& requested, int flags) const;
    // Whether openat2 is used (false: the component-by-component fallback). For tests.
    static bool kernel_has_openat2();
    // Tests only: the fallback even where openat2 exists.
    static void force_component_walk(bool on);

private:
    std::filesystem::path root_;  // canonical
    int root_fd_ = -1;            // O_PATH descriptor of root_
};

// The built-in tool named `name` (ToolKind::ReadFile or ToolKind::ListDirectory); throws
// ToolsError for another name.
ToolSpec builtin_tool(const std::string& name);

// read_file {"path": STRING, "start_line": N, "end_line": N}: the file's text (lines
// start_line..end_line, 1-based and inclusive, when given).
ToolOutput read_file_tool(const ToolRoot& root, const nlohmann::json& arguments);
// list_directory {"path": STRING} (default "."): one entry a line, sorted by name,
// directories ending in "/", symbolic links in "@" (not followed).
ToolOutput list_directory_tool(const ToolRoot& root, const nlohmann::json& arguments);

}  // namespace ember::ui
