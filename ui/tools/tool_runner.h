// Running one tool call the user said yes to: a built-in tool (ui/tools/builtin_tools.h) or a user
// tool's command (ui/tools/tool_set.h), bounded in time and in what it returns.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "ui/tools/builtin_tools.h"
#include "ui/tools/tool_set.h"

namespace ember::ui {

// What a user tool's command may write to stdout at most; past it the command is stopped
// and the call fails (a result cut in the middle could mislead the model).
constexpr size_t kToolOutputMaxBytes = size_t{64} << 10;
// What of its stderr is kept for an error message (the end of it).
constexpr size_t kToolStderrKeptBytes = 2048;

// A program's run with input on stdin.
struct ProcessRun {
    std::string out;          // stdout, up to the limit
    std::string err;          // stderr, its last kToolStderrKeptBytes
    int exit_status = 0;      // 128 + N for a signal N
    bool timed_out = false;   // stopped at the time limit
    bool too_large = false;   // stopped for writing more than the limit to stdout
    std::string start_error;  // the program could not be started (then nothing else is set)
};

// Runs `argv` (PATH searched for a bare name, no shell) with `input` on stdin, in a process
// group of its own that is killed whole at `timeout_ms` or once stdout passes `max_bytes`.
ProcessRun run_process(const std::vector<std::string>& argv, const std::string& input,
                       size_t max_bytes, int timeout_ms);

// Runs `tool` with `arguments` (the call's arguments as the model wrote them: a JSON text).
// Arguments that are not a JSON object, a refused path, a command that fails, times out or
// writes too much: all come back as an error output the model reads, never as an exception.
// `root`: where built-in tools read (null: they refuse).
ToolOutput run_tool(const ToolSpec& tool, const std::string& arguments, const ToolRoot* root);

}  // namespace ember::ui
