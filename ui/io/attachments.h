// Context brought into a message: text files (-f FILE, /file PATH), standard input joined with
// -p, and a command's output (/run CMD). Each is checked to be text and joined before the
// prompt in one fixed format, so the same file asked about in another conversation renders
// the same prompt prefix (and resumes warm from the prefix store):
//
//     File: notes.txt            (or "Output of: CMD", or "File: (stdin)")
//     ```
//     ...the content, with a final newline...
//     ```
//     <blank line>
//     ...the next attachment, and after the last one the prompt.
//
// The fence is three backticks, or one more than the longest run of backticks in the content.
// Nothing is ever cut: content that is not text or does not fit is refused whole.
#pragma once

#include <cstddef>
#include <cstdio>
#include <string>
#include <vector>

namespace ember::ui {

struct Attachment {
    std::string heading;  // "File: notes.txt", "Output of: ls -l"
    std::string content;
};

// Files larger than this are refused before they are read (no model's context holds them).
constexpr size_t kMaxAttachmentBytes = size_t{16} << 20;

// Why `content` is not text (a NUL byte, invalid UTF-8, naming the byte offset); empty when it
// is text.
std::string text_problem(const std::string& content);

// Reads `path` as a text attachment headed by `name` (default: the file's name without its
// directory, so the same file renders the same prefix from anywhere). Throws
// std::runtime_error with one line naming the file when it cannot be read, is not a regular
// file, is larger than kMaxAttachmentBytes or is not text.
Attachment read_text_file(const std::string& path, const std::string& name = {});

// All of `in` as the attachment "File: (stdin)"; the same checks.
Attachment read_stdin_attachment(std::FILE* in);

// What the command line attaches (ember chat / ember run): each -f FILE in order (headed by
// the file's name), then, with `with_stdin`, standard input when it is not a terminal and
// holds anything. Throws std::runtime_error with one line ("-f 'x' is not text: ...").
std::vector<Attachment> command_line_attachments(const std::vector<std::string>& files,
                                                 bool with_stdin);

// The attachments in order, then `prompt` (see the format above). No attachments: `prompt`.
std::string join_attachments(const std::vector<Attachment>& attachments, const std::string& prompt);

// A shell command's output (stdout and stderr together).
struct CommandOutput {
    std::string output;
    int exit_status = 0;     // the command's status; 128 + N for a signal N
    bool timed_out = false;  // killed after the time limit
    bool too_large = false;  // killed for writing more than the byte limit
};

// Runs `command` with /bin/sh -c, stdin from /dev/null, in a process group of its own that is
// killed whole after `timeout_ms` or once it has written more than `max_bytes`.
CommandOutput run_shell_command(const std::string& command, size_t max_bytes, int timeout_ms);

}  // namespace ember::ui
