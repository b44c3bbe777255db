// What every chat front end does with the tool calls of a reply (ember chat --tools): the
// calls are shown, each runs only after the user's yes (or with --yes-tools), its result goes
// back to the model as a `tool` message, and the model goes on, for a bounded number of
// rounds. A declined call is answered with a `tool` message saying so (every template wants a
// result for every call) and the turn ends there: the user's next message goes on.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/generate/conversation.h"
#include "engine/generate/tool_calls.h"
#include "ui/tools/builtin_tools.h"
#include "ui/tools/tool_set.h"

namespace ember::ui {

// Replies in a row that may call tools after one prompt of the user's; a call past it is not
// run (the model is told why) and the turn ends.
constexpr int kMaxToolRounds = 8;
// Lines of a tool's result shown on screen (the model gets all of it).
constexpr size_t kShownResultLines = 20;

// A chat's tools and how calls are approved.
struct ChatToolSettings {
    std::shared_ptr<const ToolSet> tools;  // null or empty: no tools
    std::shared_ptr<const ToolRoot> root;  // where the built-in tools read
    // The choice for the first reply to each prompt (--tool-choice); replies after tool
    // results choose freely (auto), so a forced call does not force every round.
    ToolChoice choice = ToolChoice::Auto;
    std::string named;          // the function for ToolChoice::Named
    bool auto_approve = false;  // --yes-tools: calls run without asking
    int max_rounds = kMaxToolRounds;

    bool enabled() const { return tools != nullptr && !tools->empty(); }
};

// The tools offered to the model for its first reply to a prompt or (`first` false) for one
// after tool results.
ToolOptions tool_options(const ChatToolSettings& settings, bool first);

// "read_file {\"path\": \"notes.txt\"}" laid out for a person: the name, then the arguments
// pretty-printed (as written when they are not JSON).
std::string describe_call(const ToolCall& call);

// Runs `call` with the chat's tools (a name the chat does not offer is an error output).
ToolOutput run_call(const ChatToolSettings& settings, const ToolCall& call);

// The `tool` message answering `call` with `output` (an error's text marked as one).
ChatMessage tool_result_message(const ToolCall& call, const ToolOutput& output);
// The `tool` message answering a call that did not run, saying why (`reason`).
ChatMessage tool_not_run_message(const ToolCall& call, const std::string& reason);

// What the user is told the model reads for a declined call, and for a call nobody could
// approve (a script without --yes-tools), and for one past the round limit.
extern const char* const kDeclinedByUser;
extern const char* const kNoOneToApprove;
std::string round_limit_reason(int max_rounds);
// Whether a tool message's content says its call did not run (one of the reasons above).
bool is_not_run_text(const std::string& content);

// A tool message for the screen: "read_file returned:" and the first kShownResultLines lines
// of its content (with a count of the rest).
std::string shown_result(const ChatMessage& tool_message);

}  // namespace ember::ui
