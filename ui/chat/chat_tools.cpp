// Tool calls in the interactive chat (ui/tools/tool_turns.h): a reply's calls are asked about one
// at a time, each answer commits a `tool` message, and once every call is answered and one
// ran, the front end lets the model read the results (continue_after_tools).
#include <algorithm>
#include <cctype>
#include <stdexcept>

#include "ui/chat/chat_controller.h"

namespace ember::ui {

namespace {

bool says_yes(std::string answer) {
    const size_t begin = answer.find_first_not_of(" \t\r\n");
    const size_t end = answer.find_last_not_of(" \t\r\n");
    answer = begin == std::string::npos ? std::string() : answer.substr(begin, end - begin + 1);
    std::transform(answer.begin(), answer.end(), answer.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return answer == "y" || answer == "yes";
}

}  // namespace

void ChatController::set_tools(ChatToolSettings settings) {
    // The engine refuses first (a template without a tool-call format): nothing changes then.
    engine_.set_tools(tool_options(settings, /*first=*/true));
    tools_ = std::move(settings);
}

void ChatController::offer_tools_for(bool first) {
    if (tools_.enabled()) engine_.set_tools(tool_options(tools_, first));
}

void ChatController::start_tool_rounds() {
    tool_rounds_ = 0;
    offer_tools_for(/*first=*/true);
}

ChatOutcome ChatController::command_tools() const {
    ChatOutcome outcome;
    if (!tools_.enabled()) {
        outcome.message =
            "no tools: start with --tools FILE.json (your own commands) or --builtin-tools "
            "read_file,list_directory (read-only, under the current directory); README: Tools";
        return outcome;
    }
    std::string text = "tools the model may call (each call asks you first";
    text += tools_.auto_approve ? "; --yes-tools: they run without asking):" : "):";
    for (const ToolSpec& tool : tools_.tools->tools()) {
        text += "\n  " + tool.name;
        if (tool.kind == ToolKind::Command) {
            std::string argv;
            for (const std::string& arg : tool.command) argv += (argv.empty() ? "" : " ") + arg;
            text += " (runs " + argv + ")";
        } else {
            text += " (built-in, read-only";
            if (tools_.root) text += ", under " + tools_.root->path().string();
            text += ")";
        }
        if (!tool.description.empty()) text += ": " + tool.description;
    }
    outcome.message = text;
    return outcome;
}

void ChatController::offer_tool_calls(ChatOutcome& outcome) {
    calls_waiting_.clear();
    call_ran_ = false;
    const ChatMessage* last = last_non_system();
    if (!tools_.enabled() || last == nullptr || last->role != "assistant" ||
        last->tool_calls.empty() || !outcome.turn) {
        return;
    }
    if (outcome.turn->finish == FinishReason::Cancelled) {
        // A call the user stopped is not asked about; the next prompt goes on without it.
        outcome.tool_results.push_back("the reply was stopped: its tool call did not run");
        return;
    }
    calls_waiting_ = last->tool_calls;
    if (tool_rounds_ >= tools_.max_rounds) {
        while (!calls_waiting_.empty()) {
            answer_first_call(false, round_limit_reason(tools_.max_rounds), outcome);
        }
        return;
    }
    if (tools_.auto_approve) {
        while (!calls_waiting_.empty()) answer_first_call(true, {}, outcome);
        outcome.tools_continue = call_ran_;
        return;
    }
    ask_next_call(outcome);
}

void ChatController::ask_next_call(ChatOutcome& outcome) {
    const ToolCall& call = calls_waiting_.front();
    outcome.tool_proposal = "the model asks to run a tool:\n" + describe_call(call);
    outcome.confirm = true;
    const ToolSpec* tool = tools_.tools->find(call.name);
    std::string how = "it runs nothing else";
    if (tool != nullptr && tool->kind == ToolKind::Command) {
        std::string argv;
        for (const std::string& arg : tool->command) argv += (argv.empty() ? "" : " ") + arg;
        how = "it runs " + argv;
    } else if (tool != nullptr) {
        how = "a built-in, read-only tool";
    }
    // The question goes on the status line (TUI) or before the y/N prompt (line mode).
    outcome.message = "run " + call.name + "? (" + how +
                      ") y runs it; anything else declines (the model is told)";
}

void ChatController::answer_first_call(bool run, const std::string& reason, ChatOutcome& outcome) {
    const ToolCall call = calls_waiting_.front();
    calls_waiting_.erase(calls_waiting_.begin());
    ChatMessage message;
    if (run) {
        message = tool_result_message(call, run_call(tools_, call));
        call_ran_ = true;
        outcome.tool_results.push_back(shown_result(message));
    } else {
        message = tool_not_run_message(call, reason);
        outcome.tool_results.push_back(call.name + ": not run" +
                                       (reason == kDeclinedByUser ? " (declined)" : ""));
    }
    // The result is part of the conversation as soon as it exists: a crash later keeps it.
    try {
        message_ids_.push_back(backend_.commit(message, current_parent(), nullptr));
    } catch (const std::exception& e) {
        message_ids_.push_back(0);
        outcome.error = true;
        outcome.message = std::string("the tool result was not saved: ") + e.what();
    }
    engine_.add_message(std::move(message));
}

ChatOutcome ChatController::answer_tool_call(const std::string& answer) {
    ChatOutcome outcome;
    answer_first_call(says_yes(answer), kDeclinedByUser, outcome);
    if (!calls_waiting_.empty()) {
        const std::string saved_error = outcome.error ? outcome.message : std::string();
        ask_next_call(outcome);
        if (!saved_error.empty()) outcome.message = saved_error + "; " + outcome.message;
        return outcome;
    }
    if (call_ran_) {
        outcome.tools_continue = true;
    } else if (!outcome.error) {
        outcome.message = "declined: nothing ran (the model is told so when you write next)";
    }
    return outcome;
}

void ChatController::resume_waiting_calls() {
    calls_waiting_.clear();
    call_ran_ = false;
    if (!tools_.enabled()) return;
    // The last reply's calls that no tool message after it answers (the chat ended while one
    // waited for its yes) wait again.
    const std::vector<ChatMessage>& messages = engine_.messages();
    size_t reply = messages.size();
    std::vector<std::string> answered;
    while (reply > 0 && messages[reply - 1].role == "tool") {
        const ChatMessage& result = messages[reply - 1];
        answered.push_back(result.tool_call_id);
        if (!is_not_run_text(result.content)) call_ran_ = true;
        --reply;
    }
    if (reply == 0 || messages[reply - 1].role != "assistant") return;
    for (const ToolCall& call : messages[reply - 1].tool_calls) {
        if (std::find(answered.begin(), answered.end(), call.id) == answered.end()) {
            calls_waiting_.push_back(call);
        }
    }
    if (calls_waiting_.empty()) call_ran_ = false;
}

ChatOutcome ChatController::waiting_call_question() {
    ChatOutcome outcome;
    if (!calls_waiting_.empty()) ask_next_call(outcome);
    return outcome;
}

ChatOutcome ChatController::continue_after_tools(const TextCallback& on_text) {
    const ChatMessage* last = last_non_system();
    if (last == nullptr || last->role != "tool" || !calls_waiting_.empty()) {
        ChatOutcome outcome;
        outcome.error = true;
        outcome.message = "there are no tool results for the model to read";
        return outcome;
    }
    ++tool_rounds_;
    const auto saved_messages = engine_.messages();
    const auto saved_ids = message_ids_;
    try {
        offer_tools_for(/*first=*/false);
    } catch (const std::exception& e) {
        ChatOutcome outcome;
        outcome.error = true;
        outcome.message = std::string("could not answer: ") + e.what();
        return outcome;
    }
    return run_turn(on_text, saved_messages, saved_ids);
}

}  // namespace ember::ui
