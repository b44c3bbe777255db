// The tools a chat offers the model (ember chat --tools FILE.json, --builtin-tools NAMES):
// their definitions as the model's chat template receives them, and how each one runs.
//
// A tools file is a JSON array of OpenAI-style tool definitions, each also saying how to run
// it:
//
//     [{"type": "function",
//       "function": {"name": "get_weather", "description": "...",
//                    "parameters": {"type": "object", "properties": {...}}},
//       "command": ["./weather.sh", "--metric"],
//       "timeout_seconds": 10}]
//
// `command` is an argv (no shell). It receives the call's arguments as one line of JSON on
// stdin; what it writes to stdout is the result the model reads. A relative program path
// with a slash ("./weather.sh", "bin/x") is taken from the tools file's directory; a bare
// name ("python3") is looked up in PATH. The command runs in ember's current directory.
//
// Built-in tools (read_file, list_directory: ui/tools/builtin_tools.h) are read-only and offered
// only when named. Nothing runs without the user's yes (ui/chat/chat_controller.h).
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

namespace ember::ui {

// A user tool's time limit when its definition names none, and the bounds of the one it
// names: a call waits for the user's command at most this long.
constexpr int kDefaultToolTimeoutSeconds = 30;
constexpr int kMaxToolTimeoutSeconds = 600;

enum class ToolKind {
    Command,        // a user tool: an argv from the tools file
    ReadFile,       // built-in: a text file under the tool root
    ListDirectory,  // built-in: a directory under the tool root
};

struct ToolSpec {
    std::string name;
    std::string description;
    nlohmann::ordered_json parameters = nlohmann::ordered_json::object();  // a JSON Schema
    ToolKind kind = ToolKind::Command;
    std::vector<std::string> command;  // Command: the argv, the program resolved
    int timeout_seconds = kDefaultToolTimeoutSeconds;
};

// A tools file or a built-in name that cannot be used. The message is one line naming the
// file, the tool (its position and name) and the field: "tools.json: tool 2 (\"get_weather\"):
// \"command\" must be a non-empty array of strings".
class ToolsError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// The tools of one file's text; `source` names it in errors and `base_dir` is where relative
// program paths are taken from. Throws ToolsError.
std::vector<ToolSpec> parse_tools_json(const std::string& text, const std::string& source,
                                       const std::string& base_dir);
// The tools of the file at `path` (parse_tools_json). Throws ToolsError, also when the file
// cannot be read.
std::vector<ToolSpec> read_tools_file(const std::string& path);

// The built-in tools' names, in the order --help lists them.
const std::vector<std::string>& builtin_tool_names();

// The tools of one chat, names unique.
class ToolSet {
public:
    // Adds every tool of a tools file (read_tools_file). Throws ToolsError; nothing is added
    // then.
    void add_file(const std::string& path);
    // Adds a built-in tool by name. Throws ToolsError for a name that is no built-in.
    void add_builtin(const std::string& name);
    // Adds `tool`; throws ToolsError when its name is taken (`source` says where it came from).
    void add(ToolSpec tool, const std::string& source);

    bool empty() const { return tools_.empty(); }
    const std::vector<ToolSpec>& tools() const { return tools_; }
    // The tool named `name`; null when there is none.
    const ToolSpec* find(const std::string& name) const;
    // The definitions as a chat template and an OpenAI API take them:
    // [{"type": "function", "function": {"name", "description", "parameters"}}] (how a tool
    // runs stays here).
    nlohmann::ordered_json definitions() const;

private:
    std::vector<ToolSpec> tools_;
};

}  // namespace ember::ui
