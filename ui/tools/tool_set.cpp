#include "ui/tools/tool_set.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/util/bounded_json.h"
#include "ui/tools/builtin_tools.h"

namespace ember::ui {

namespace {

using ojson = nlohmann::ordered_json;
namespace fs = std::filesystem;

// OpenAI's rule for function names, which every chat template can print as they are.
bool valid_tool_name(const std::string& name) {
    if (name.empty() || name.size() > 64) return false;
    for (const char c : name) {
        const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                        (c >= '0' && c <= '9') || c == '_' || c == '-';
        if (!ok) return false;
    }
    return true;
}

// Where the errors of one tool of one file point: "tools.json: tool 2 (\"get_weather\"): ".
class Blame {
public:
    Blame(std::string source, size_t index) : source_(std::move(source)), index_(index) {}
    void set_name(const std::string& name) { name_ = name; }
    [[noreturn]] void fail(const std::string& what) const {
        std::string where = source_ + ": tool " + std::to_string(index_ + 1);
        if (!name_.empty()) where += " (\"" + name_ + "\")";
        throw ToolsError(where + ": " + what);
    }

private:
    std::string source_;
    size_t index_;
    std::string name_;
};

// "./weather.sh" from the tools file's directory; "python3" stays for PATH. The result keeps a
// slash ("./weather.sh" from "." is not "weather.sh", which posix_spawnp would look up on PATH).
std::string resolve_program(const std::string& program, const std::string& base_dir) {
    if (program.find('/') == std::string::npos || program.front() == '/') return program;
    std::string path =
        (fs::path(base_dir.empty() ? "." : base_dir) / program).lexically_normal().string();
    if (path.find('/') == std::string::npos) path = "./" + path;
    return path;
}

// Why `program` (argv[0] as resolved) would not start, or empty: a path that is no executable
// file, a bare name found nowhere on PATH.
std::string why_program_cannot_run(const std::string& program) {
    const auto runnable = [](const fs::path& p) {
        std::error_code ec;
        return fs::is_regular_file(p, ec) && ::access(p.c_str(), X_OK) == 0;
    };
    if (program.find('/') != std::string::npos) {
        std::error_code ec;
        if (!fs::exists(program, ec)) return "'" + program + "' does not exist";
        if (!runnable(program)) return "'" + program + "' is not an executable file (chmod +x?)";
        return {};
    }
    const char* path_env = std::getenv("PATH");
    std::string dirs = path_env != nullptr ? path_env : "/usr/bin:/bin";
    size_t at = 0;
    while (at <= dirs.size()) {
        size_t colon = dirs.find(':', at);
        if (colon == std::string::npos) colon = dirs.size();
        const std::string dir = dirs.substr(at, colon - at);
        if (runnable(fs::path(dir.empty() ? "." : dir) / program)) return {};
        at = colon + 1;
    }
    const std::string beside = "./" + program;
    return "'" + program + "' is not found on PATH (a program beside the tools file is written " +
           beside + ")";
}

std::vector<std::string> parse_command(const ojson& entry, const std::string& base_dir,
                                       const Blame& blame) {
    if (!entry.contains("command")) {
        blame.fail(
            "\"command\" is missing: the argv that runs the tool, e.g. "
            "[\"./tool.sh\"] (it reads the arguments as JSON on stdin)");
    }
    const ojson& command = entry["command"];
    if (!command.is_array() || command.empty()) {
        blame.fail("\"command\" must be a non-empty array of strings (an argv, no shell)");
    }
    std::vector<std::string> argv;
    for (size_t i = 0; i < command.size(); ++i) {
        if (!command[i].is_string() || command[i].get<std::string>().empty()) {
            blame.fail("\"command\"[" + std::to_string(i) + "] must be a non-empty string");
        }
        const std::string arg = command[i].get<std::string>();
        if (arg.find('\0') != std::string::npos) {
            blame.fail("\"command\"[" + std::to_string(i) + "] holds a NUL byte");
        }
        argv.push_back(arg);
    }
    argv.front() = resolve_program(argv.front(), base_dir);
    return argv;
}

int parse_timeout(const ojson& entry, const Blame& blame) {
    if (!entry.contains("timeout_seconds")) return kDefaultToolTimeoutSeconds;
    const ojson& t = entry["timeout_seconds"];
    if (!t.is_number_integer() || t.get<int64_t>() < 1 ||
        t.get<int64_t>() > kMaxToolTimeoutSeconds) {
        blame.fail("\"timeout_seconds\" must be a whole number from 1 to " +
                   std::to_string(kMaxToolTimeoutSeconds));
    }
    return static_cast<int>(t.get<int64_t>());
}

// The "function" object: name, description, parameters.
void parse_function(const ojson& entry, ToolSpec& tool, Blame& blame) {
    if (!entry.contains("function") || !entry["function"].is_object()) {
        blame.fail(
            "\"function\" must be an object with \"name\", \"description\" and "
            "\"parameters\"");
    }
    const ojson& function = entry["function"];
    for (const auto& [key, value] : function.items()) {
        if (key != "name" && key != "description" && key != "parameters" && key != "strict") {
            blame.fail("\"function\" has an unknown field \"" + key +
                       "\" (known: name, description, parameters, strict)");
        }
    }
    if (!function.contains("name") || !function["name"].is_string()) {
        blame.fail("\"function\".\"name\" must be a string");
    }
    tool.name = function["name"].get<std::string>();
    if (!valid_tool_name(tool.name)) {
        blame.fail("\"function\".\"name\" \"" + tool.name +
                   "\" must be 1 to 64 letters, digits, '_' or '-'");
    }
    blame.set_name(tool.name);
    if (function.contains("description")) {
        if (!function["description"].is_string()) {
            blame.fail("\"function\".\"description\" must be a string");
        }
        tool.description = function["description"].get<std::string>();
    }
    if (function.contains("parameters")) {
        const ojson& parameters = function["parameters"];
        if (!parameters.is_object()) {
            blame.fail("\"function\".\"parameters\" must be a JSON Schema object");
        }
        if (parameters.contains("type") && parameters["type"] != "object") {
            blame.fail(
                "\"function\".\"parameters\".\"type\" must be \"object\" (a call's "
                "arguments are one JSON object)");
        }
        if (parameters.contains("properties") && !parameters["properties"].is_object()) {
            blame.fail("\"function\".\"parameters\".\"properties\" must be an object");
        }
        tool.parameters = parameters;
    } else {
        tool.parameters = {{"type", "object"}, {"properties", ojson::object()}};
    }
}

ToolSpec parse_tool(const ojson& entry, size_t index, const std::string& source,
                    const std::string& base_dir) {
    Blame blame(source, index);
    if (!entry.is_object()) blame.fail("must be an object ({\"type\": \"function\", ...})");
    // The name first, so every later error can say which tool it is about.
    ToolSpec tool;
    parse_function(entry, tool, blame);
    for (const auto& [key, value] : entry.items()) {
        if (key != "type" && key != "function" && key != "command" && key != "timeout_seconds") {
            blame.fail("unknown field \"" + key +
                       "\" (known: type, function, command, timeout_seconds)");
        }
    }
    if (!entry.contains("type") || entry["type"] != "function") {
        blame.fail("\"type\" must be \"function\"");
    }
    tool.kind = ToolKind::Command;
    tool.command = parse_command(entry, base_dir, blame);
    tool.timeout_seconds = parse_timeout(entry, blame);
    return tool;
}

}  // namespace

std::vector<ToolSpec> parse_tools_json(const std::string& text, const std::string& source,
                                       const std::string& base_dir) {
    ojson root;
    try {
        root = parse_json_bounded(text, {}, source, InvalidJson::Throw);
    } catch (const JsonLimitError& e) {
        throw ToolsError(e.what());
    } catch (const nlohmann::json::parse_error& e) {
        // "[json.exception.parse_error.101] parse error at line 3, column 5: ..." without the
        // library's prefix.
        std::string what = e.what();
        if (const size_t at = what.find("] "); at != std::string::npos) what = what.substr(at + 2);
        throw ToolsError(source + ": not valid JSON: " + what);
    }
    if (!root.is_array()) {
        throw ToolsError(source +
                         ": must be a JSON array of tools ([{\"type\": \"function\", "
                         "\"function\": {...}, \"command\": [...]}])");
    }
    if (root.empty()) throw ToolsError(source + ": holds no tools (an empty array)");
    std::vector<ToolSpec> tools;
    for (size_t i = 0; i < root.size(); ++i) {
        ToolSpec tool = parse_tool(root[i], i, source, base_dir);
        for (const ToolSpec& earlier : tools) {
            if (earlier.name == tool.name) {
                throw ToolsError(source + ": tool " + std::to_string(i + 1) + " (\"" + tool.name +
                                 "\"): the name is taken by an earlier tool");
            }
        }
        tools.push_back(std::move(tool));
    }
    return tools;
}

std::vector<ToolSpec> read_tools_file(const std::string& path) {
    std::error_code error;
    if (fs::is_directory(path, error)) throw ToolsError(path + ": is a directory, not a file");
    std::ifstream in(path, std::ios::binary);
    if (!in) throw ToolsError(path + ": cannot be read (does it exist?)");
    std::ostringstream text;
    text << in.rdbuf();
    if (in.bad()) throw ToolsError(path + ": cannot be read");
    // Relative programs are taken from the file's directory whatever the current one is.
    const fs::path base = fs::absolute(fs::path(path), error).parent_path();
    std::vector<ToolSpec> tools = parse_tools_json(text.str(), path, base.string());
    // A program that cannot start is a mistake in the file: said now, not as a failed call
    // after the model has answered (and a script's exit status 0).
    for (size_t i = 0; i < tools.size(); ++i) {
        if (tools[i].kind != ToolKind::Command || tools[i].command.empty()) continue;
        if (const std::string why = why_program_cannot_run(tools[i].command.front());
            !why.empty()) {
            throw ToolsError(path + ": tool " + std::to_string(i + 1) + " (\"" + tools[i].name +
                             "\"): \"command\"[0] " + why);
        }
    }
    return tools;
}

const std::vector<std::string>& builtin_tool_names() {
    static const std::vector<std::string> names = {"read_file", "list_directory"};
    return names;
}

void ToolSet::add(ToolSpec tool, const std::string& source) {
    if (find(tool.name) != nullptr) {
        throw ToolsError(source + ": tool \"" + tool.name + "\" is defined twice");
    }
    tools_.push_back(std::move(tool));
}

void ToolSet::add_file(const std::string& path) {
    std::vector<ToolSpec> tools = read_tools_file(path);
    for (const ToolSpec& tool : tools) {
        if (find(tool.name) != nullptr) {
            throw ToolsError(path + ": tool \"" + tool.name +
                             "\": the name is taken by another tool (another file's or a "
                             "built-in one)");
        }
    }
    for (ToolSpec& tool : tools) tools_.push_back(std::move(tool));
}

void ToolSet::add_builtin(const std::string& name) {
    add(builtin_tool(name), "--builtin-tools");
}

const ToolSpec* ToolSet::find(const std::string& name) const {
    for (const ToolSpec& tool : tools_) {
        if (tool.name == name) return &tool;
    }
    return nullptr;
}

nlohmann::ordered_json ToolSet::definitions() const {
    ojson out = ojson::array();
    for (const ToolSpec& tool : tools_) {
        ojson function = {{"name", tool.name}};
        if (!tool.description.empty()) function["description"] = tool.description;
        function["parameters"] = tool.parameters;
        out.push_back({{"type", "function"}, {"function", std::move(function)}});
    }
    return out;
}

}  // namespace ember::ui
