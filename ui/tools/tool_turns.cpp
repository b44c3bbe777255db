#include "ui/tools/tool_turns.h"

#include <nlohmann/json.hpp>

#include "engine/util/bounded_json.h"
#include "ui/tools/tool_runner.h"

namespace ember::ui {

namespace {

// What a failed call's message starts with, so the model tells a failure from a result.
constexpr const char* kErrorPrefix = "Error: ";

}  // namespace

const char* const kDeclinedByUser = "This tool call was not run: the user declined it.";
const char* const kNoOneToApprove =
    "This tool call was not run: no one was there to approve it (a script without "
    "--yes-tools).";

std::string round_limit_reason(int max_rounds) {
    return "This tool call was not run: " + std::to_string(max_rounds) +
           " rounds of tool calls in a row is the limit; the user may ask to go on.";
}

bool is_not_run_text(const std::string& content) {
    // Every reason starts so.
    return content.starts_with("This tool call was not run: ");
}

ToolOptions tool_options(const ChatToolSettings& settings, bool first) {
    ToolOptions options;
    if (!settings.enabled()) return options;
    options.tools = settings.tools->definitions();
    options.choice = first ? settings.choice : ToolChoice::Auto;
    if (first && settings.choice == ToolChoice::Named) options.named = settings.named;
    return options;
}

std::string describe_call(const ToolCall& call) {
    const auto arguments = try_parse_json_bounded<nlohmann::ordered_json>(call.arguments);
    std::string shown;
    if (arguments.is_object() && arguments.empty()) {
        shown = "(no arguments)";
    } else if (!arguments.is_discarded()) {
        shown = arguments.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
    } else {
        shown = call.arguments.empty() ? "(no arguments)" : call.arguments;
    }
    return call.name + " " + shown;
}

ToolOutput run_call(const ChatToolSettings& settings, const ToolCall& call) {
    const ToolSpec* tool = settings.enabled() ? settings.tools->find(call.name) : nullptr;
    if (tool == nullptr) return {"there is no tool named \"" + call.name + "\"", true};
    return run_tool(*tool, call.arguments, settings.root.get());
}

ChatMessage tool_result_message(const ToolCall& call, const ToolOutput& output) {
    ChatMessage message;
    message.role = "tool";
    message.content = output.error ? kErrorPrefix + output.content : output.content;
    message.tool_call_id = call.id;
    message.name = call.name;
    return message;
}

ChatMessage tool_not_run_message(const ToolCall& call, const std::string& reason) {
    ChatMessage message;
    message.role = "tool";
    message.content = reason;
    message.tool_call_id = call.id;
    message.name = call.name;
    return message;
}

std::string shown_result(const ChatMessage& tool_message) {
    std::string text = tool_message.name + " returned:";
    const std::string& content = tool_message.content;
    if (content.empty()) return text + " (nothing)";
    size_t at = 0;
    size_t lines = 0;
    while (at < content.size() && lines < kShownResultLines) {
        const size_t end = content.find('\n', at);
        text += '\n';
        text.append(content, at, end == std::string::npos ? std::string::npos : end - at);
        at = end == std::string::npos ? content.size() : end + 1;
        ++lines;
    }
    size_t rest = 0;
    for (size_t i = at; i < content.size(); ++i) rest += content[i] == '\n' ? 1 : 0;
    if (at < content.size() && content.back() != '\n') ++rest;
    if (rest > 0) {
        text.append("\n… ")
            .append(std::to_string(rest))
            .append(rest == 1 ? " more line" : " more lines");
        text.append(" (the model reads all of it)");
    }
    return text;
}

}  // namespace ember::ui
