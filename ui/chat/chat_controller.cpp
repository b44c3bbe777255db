#include "ui/chat/chat_controller.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdarg>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <system_error>
#include <type_traits>

#include "ui/chat/chat_text.h"

namespace ember::ui {

namespace {

// Sessions listed by /sessions: enough to find recent work without flooding a status line.
constexpr int64_t kSessionListLimit = 20;

using chat_text::answers_to;
using chat_text::failure;
using chat_text::format;
using chat_text::info;
using chat_text::split_command;
using chat_text::trim;

double per_second(int64_t count, double seconds) {
    return seconds > 0 ? static_cast<double>(count) / seconds : 0.0;
}

// The first token's time is prefill; decode speed counts the tokens after it.
int64_t decoded_after_first(const TurnResult& turn) {
    return std::max<int64_t>(0, turn.stats.generated_tokens - 1);
}

}  // namespace

ChatController::ChatController(ChatEngine& engine, Sampler& sampler, SessionBackend& backend,
                               GenerateOptions generation)
    : engine_(engine),
      sampler_(sampler),
      backend_(backend),
      generation_(generation),
      seeds_(sampler.params().seed) {
    // Messages already in the conversation (other than the system prompt) were never
    // committed; they count as unsaved, with 0 standing for "no id".
    for (const auto& m : engine_.messages()) {
        if (m.role != "system") message_ids_.push_back(0);
    }
    backend_.new_session(system_prompt());
}

bool ChatController::is_command(const std::string& line) {
    // "//text" sends "/text" as a prompt.
    return !line.empty() && line[0] == '/' && !(line.size() > 1 && line[1] == '/');
}

// What a command is run with: the rest of its line, and where a reply it generates streams.
struct ChatController::CommandCall {
    const std::string& args;
    const TextCallback& on_text;
};

// A slash command: /help's line for it, the names it answers to and what runs it.
struct ChatController::Command {
    const char* name;
    const char* aliases;  // the other names it answers to, space-separated ("" for none)
    const char* usage;    // the name with its arguments, as /help shows it
    const char* help;
    // Null: the command exists only in the full-screen chat, which runs it itself (it needs
    // the screen); elsewhere it is unknown.
    ChatOutcome (*run)(ChatController& chat, const CommandCall& call);
};

template <auto Method>
ChatOutcome ChatController::run(ChatController& chat, const CommandCall& call) {
    using Self = ChatController&;
    if constexpr (std::is_invocable_v<decltype(Method), Self, const std::string&,
                                      const TextCallback&>) {
        return std::invoke(Method, chat, call.args, call.on_text);
    } else if constexpr (std::is_invocable_v<decltype(Method), Self, const std::string&>) {
        return std::invoke(Method, chat, call.args);
    } else if constexpr (std::is_invocable_v<decltype(Method), Self, const TextCallback&>) {
        return std::invoke(Method, chat, call.on_text);
    } else {
        return std::invoke(Method, chat);
    }
}

std::span<const ChatController::Command> ChatController::commands() {
    using Chat = ChatController;
    using Call = CommandCall;
    static constexpr Command kCommands[] = {
        {"/help", "/?", "/help", "this list",
         [](ChatController&, const Call&) { return info(help_text()); }},
        {"/new", "", "/new", "start a new conversation (the system prompt stays)",
         &Chat::run<&Chat::command_new>},
        {"/regen", "", "/regen", "answer the last prompt again (the old reply stays saved)",
         &Chat::run<&Chat::command_regen>},
        {"/continue", "", "/continue", "go on with a reply that was cut short",
         &Chat::run<&Chat::command_continue>},
        {"/edit", "", "/edit TEXT", "replace the last prompt with TEXT and answer it",
         &Chat::run<&Chat::command_edit>},
        {"/branch", "", "/branch [TITLE]",
         "go on in a copy of this conversation (the original stays)",
         &Chat::run<&Chat::command_branch>},
        {"/system", "", "/system [TEXT]", "set the system prompt, or show it",
         &Chat::run<&Chat::command_system>},
        {"/set", "", "/set [NAME VALUE]",
         "change a setting (kept with the conversation), or list them all",
         &Chat::run<&Chat::command_set>},
        {"/preset", "", "/preset [NAME]",
         "use a preset of the config file instead of the settings now (alone: list them)",
         &Chat::run<&Chat::command_preset>},
        {"/stats", "", "/stats", "numbers for the last reply and the session store",
         &Chat::run<&Chat::command_stats>},
        {"/sessions", "", "/sessions", "list saved conversations",
         &Chat::run<&Chat::command_sessions>},
        {"/load", "", "/load ID", "open a saved conversation (with its own model and settings)",
         [](ChatController& c, const Call& call) { return c.load_session(call.args); }},
        {"/rename", "", "/rename TITLE", "rename this conversation",
         &Chat::run<&Chat::command_rename>},
        {"/export", "", "/export PATH", "write this conversation as Markdown",
         &Chat::run<&Chat::command_export>},
        {"/model", "", "/model [NAME]",
         "go on with another model (a path or a name `ember models` lists; the conversation "
         "stays), or show them",
         &Chat::run<&Chat::command_model>},
        {"/file", "", "/file PATH", "attach a text file to your next message",
         &Chat::run<&Chat::command_file>},
        {"/run", "", "/run CMD", "attach a command's output to your next message (asks first)",
         &Chat::run<&Chat::command_run>},
        {"/tools", "", "/tools",
         "the tools the model may call (ember chat --tools FILE, --builtin-tools NAMES); each "
         "call asks first",
         &Chat::run<&Chat::command_tools>},
        {"/copy", "", "/copy [N]", "the last reply (or its Nth code block) to the clipboard",
         nullptr},
        {"/quit", "/exit /q", "/quit", "leave (Ctrl-D does too)",
         [](ChatController&, const Call&) {
             ChatOutcome outcome;
             outcome.quit = true;
             return outcome;
         }},
    };
    return kCommands;
}

const ChatController::Command* ChatController::find_command(const std::string& name) {
    for (const Command& c : commands()) {
        if (answers_to(c.name, c.aliases, name)) return &c;
    }
    return nullptr;
}

std::string ChatController::command_name(const std::string& typed) {
    const Command* command = find_command(typed);
    return command != nullptr ? command->name : typed;
}

std::string ChatController::help_text(bool full_screen) {
    constexpr size_t kUsageWidth = 20;
    std::string text = "Commands:\n";
    for (const Command& c : commands()) {
        if (c.run == nullptr && !full_screen) continue;
        std::string usage = c.usage;
        usage.resize(std::max(kUsageWidth, usage.size() + 1), ' ');
        text += "  " + usage + c.help + "\n";
    }
    return text + "Start a line with // to send a prompt that begins with /.";
}

std::vector<std::string> ChatController::command_names(bool full_screen) {
    std::vector<std::string> names;
    for (const Command& c : commands()) {
        if (c.run != nullptr || full_screen) names.push_back(c.name);
    }
    std::sort(names.begin(), names.end());
    return names;
}

std::string ChatController::turn_summary(const TurnResult& turn) {
    std::string line =
        format("[%lld tokens, %.1f tok/s, ttft %.0f ms, prompt %lld reused + %lld evaluated, %s]",
               static_cast<long long>(turn.stats.generated_tokens),
               per_second(decoded_after_first(turn), turn.stats.decode_seconds),
               turn.stats.ttft_seconds * 1000.0, static_cast<long long>(turn.tokens_reused),
               static_cast<long long>(turn.tokens_evaluated),
               std::string(finish_reason_name(turn.finish)).c_str());
    if (turn.stats.speculation.drafted > 0) {
        line += format(" [speculation: %lld of %lld drafts accepted]",
                       static_cast<long long>(turn.stats.speculation.accepted),
                       static_cast<long long>(turn.stats.speculation.drafted));
    }
    for (const auto& warning : turn.warnings) line += " [warning: " + warning + "]";
    if (turn.tokens_dropped > 0) {
        line += format(" [context full: dropped the oldest %lld messages, %lld tokens]",
                       static_cast<long long>(turn.messages_dropped),
                       static_cast<long long>(turn.tokens_dropped));
    }
    return line;
}

std::string ChatController::turn_notes(const TurnResult& turn) {
    std::string line;
    for (const auto& warning : turn.warnings) {
        line += std::string(line.empty() ? "" : " ") + "[warning: " + warning + "]";
    }
    if (turn.tokens_dropped > 0) {
        line += format("%s[context full: dropped the oldest %lld messages, %lld tokens]",
                       line.empty() ? "" : " ", static_cast<long long>(turn.messages_dropped),
                       static_cast<long long>(turn.tokens_dropped));
    }
    if (turn.finish == FinishReason::Length) {
        line += line.empty() ? "" : " ";
        line += "[cut at the token limit: /continue goes on]";
    }
    if (turn.tokens_not_evaluated > 0) {
        const int64_t read = turn.prompt_tokens - turn.tokens_not_evaluated;
        line += format(
            "%s[stopped reading the prompt at %lld of %lld tokens; what was read is "
            "kept: /regen goes on from there]",
            line.empty() ? "" : " ", static_cast<long long>(read),
            static_cast<long long>(turn.prompt_tokens));
    }
    return line;
}

std::string ChatController::turn_details(const TurnResult& turn) {
    std::string text = format("last reply: %lld tokens generated, finish: %s\n",
                              static_cast<long long>(turn.stats.generated_tokens),
                              std::string(finish_reason_name(turn.finish)).c_str());
    if (turn.thinking_tokens > 0) {
        text += format("  thinking: %lld tokens (ended by %s), answer: %lld tokens\n",
                       static_cast<long long>(turn.thinking_tokens),
                       std::string(thinking_end_name(turn.thinking_end)).c_str(),
                       static_cast<long long>(turn.answer_tokens));
    }
    text += format(
        "  prompt: %lld tokens, %lld reused (%lld restored from the store), %lld "
        "evaluated\n",
        static_cast<long long>(turn.prompt_tokens), static_cast<long long>(turn.tokens_reused),
        static_cast<long long>(turn.tokens_restored),
        static_cast<long long>(turn.tokens_evaluated));
    if (turn.resume.path != ResumePath::None) {
        // What the store held beyond the live state, and why it was (or was not) restored.
        text += format("  resume: %s%s%s (restoring estimated %.1f ms, recomputing %.1f ms)\n",
                       std::string(resume_path_name(turn.resume.path)).c_str(),
                       turn.restored_from.empty() ? "" : " from ", turn.restored_from.c_str(),
                       turn.resume.all_restore_seconds * 1000.0,
                       turn.resume.all_recompute_seconds * 1000.0);
    }
    text += format("  prefill: %.1f tok/s (%.3f s), time to first token %.0f ms\n",
                   per_second(turn.tokens_evaluated, turn.stats.prefill_seconds),
                   turn.stats.prefill_seconds, turn.stats.ttft_seconds * 1000.0);
    text += format("  decode: %.1f tok/s (%lld tokens in %.3f s)",
                   per_second(decoded_after_first(turn), turn.stats.decode_seconds),
                   static_cast<long long>(decoded_after_first(turn)), turn.stats.decode_seconds);
    if (turn.seed) {
        text += format("\n  seed: %llu (ember replay --regenerate samples it again)",
                       static_cast<unsigned long long>(*turn.seed));
    }
    if (turn.tokens_dropped > 0) {
        text += format("\n  context full: dropped the oldest %lld messages (%lld tokens)",
                       static_cast<long long>(turn.messages_dropped),
                       static_cast<long long>(turn.tokens_dropped));
    }
    return text;
}

std::string ChatController::system_prompt() const {
    const auto& messages = engine_.messages();
    if (!messages.empty() && messages.front().role == "system") return messages.front().content;
    return {};
}

const ChatMessage* ChatController::last_non_system() const {
    const auto& messages = engine_.messages();
    if (messages.empty() || messages.back().role == "system") return nullptr;
    return &messages.back();
}

void ChatController::replace_messages(const std::vector<ChatMessage>& messages) {
    engine_.clear();
    for (const auto& m : messages) engine_.add_message(m);
}

void ChatController::add_user_message(const std::string& text, const MessageNotes& notes) {
    ChatMessage message{"user", text, {}, {}};
    // Committed before the reply is generated, so a crash mid-reply loses only the reply.
    const int64_t id = backend_.commit(message, current_parent(), nullptr, notes);
    engine_.add_message(std::move(message));
    message_ids_.push_back(id);
    if (!notes.attachments.empty()) notes_[id] = notes;
}

bool ChatController::stop_requested() const {
    return cancel_requested_.load(std::memory_order_relaxed) ||
           (outside_stop_ != nullptr && outside_stop_->load(std::memory_order_relaxed)) ||
           leaving();
}

bool ChatController::leaving() const {
    return leaving_.load(std::memory_order_relaxed) ||
           (outside_leave_ != nullptr && outside_leave_->load(std::memory_order_relaxed) != 0);
}

ChatOutcome ChatController::run_turn(const TextCallback& on_text,
                                     const std::vector<ChatMessage>& restore_messages,
                                     const std::vector<int64_t>& restore_ids, bool continuing) {
    cancel_requested_.store(false, std::memory_order_relaxed);
    const int64_t parent = current_parent();
    ChatOutcome outcome;
    std::string interruption;
    try {
        const TextCallback checked = [&](const std::string& text, TextKind kind) {
            const bool keep_going = !on_text || on_text(text, kind);
            return keep_going && !stop_requested();
        };
        const StopRequested stop = [this] { return stop_requested(); };
        ChatReply reply;
        if (continuing) {
            const uint64_t seed = seeds_.take();
            sampler_.reset(seed);
            reply = engine_.continue_reply(sampler_, generation_, checked, stop);
            reply.turn.seed = seed;
        } else {
            reply = respond_seeded(engine_, sampler_, seeds_, generation_, checked, stop);
        }
        TurnResult& turn = reply.turn;
        interruption = std::move(reply.interruption);
        // Messages dropped to fit the context are the oldest after the system prompt.
        const auto dropped =
            std::min<size_t>(static_cast<size_t>(turn.messages_dropped), message_ids_.size());
        message_ids_.erase(message_ids_.begin(),
                           message_ids_.begin() + static_cast<std::ptrdiff_t>(dropped));
        outcome.turn = turn;
        last_turn_ = std::move(turn);
    } catch (const std::exception& e) {
        // Nothing of a failed turn stays in the conversation; what was committed (the
        // user's message) stays in the store as a branch without a reply.
        replace_messages(restore_messages);
        message_ids_ = restore_ids;
        outcome.error = true;
        outcome.message = std::string("could not answer: ") + e.what();
        outcome.conversation_replaced = true;
        return outcome;
    }
    if (!interruption.empty()) {
        // A remote reply that broke off: what arrived is kept and saved like a cancelled one.
        outcome.error = true;
        outcome.message = "the reply broke off: " + interruption + " (what arrived is kept)";
    }
    try {
        // A cancelled reply is kept as far as it got, in the conversation and in the store.
        MessageNotes notes;
        notes.model = model_name();
        const int64_t id =
            backend_.commit(engine_.messages().back(), parent, &*outcome.turn, notes);
        message_ids_.push_back(id);
        if (!notes.model.empty()) notes_[id] = std::move(notes);
        // A fixed seed moved on to the next reply's: --continue goes on from there.
        record_settings(outcome);
    } catch (const std::exception& e) {
        // The reply stays on screen and in the conversation; 0 marks it as unsaved.
        message_ids_.push_back(0);
        outcome.error = true;
        if (!outcome.message.empty()) outcome.message += "; ";
        outcome.message += std::string("the reply was not saved: ") + e.what();
    }
    // The state behind the reply (and the next turn's start, prepared) is stored once the
    // reply is committed: the message is what must survive, the state is a cache. Not when
    // the process is leaving, nor after a prefill the user stopped: that part-read prompt
    // stays in the live state, and the next turn stores it before it starts.
    if (!leaving() && outcome.turn->tokens_not_evaluated == 0) engine_.store_pending_state();
    offer_tool_calls(outcome);
    return outcome;
}

ChatOutcome ChatController::submit(const std::string& prompt, const TextCallback& on_text) {
    if (run_asked_) return answer_run(prompt);
    if (!calls_waiting_.empty()) return answer_tool_call(prompt);
    const std::string typed = prompt.starts_with("//") ? prompt.substr(1) : prompt;
    if (trim(typed).empty()) return failure("nothing to send: the prompt is empty");
    // Attached files and command output go first (ui/io/attachments.h), so a conversation
    // opened on the same file shares its prompt prefix.
    const std::string text = join_attachments(attachments_, typed);
    MessageNotes notes;
    notes.attachments = pending_attachments();
    const auto saved_messages = engine_.messages();
    const auto saved_ids = message_ids_;
    try {
        start_tool_rounds();
        add_user_message(text, notes);
    } catch (const std::exception& e) {
        return failure(std::string("could not save the prompt: ") + e.what());
    }
    ChatOutcome outcome = run_turn(on_text, saved_messages, saved_ids);
    if (outcome.turn) attachments_.clear();
    return outcome;
}

ChatOutcome ChatController::handle_command(const std::string& line, const TextCallback& on_text) {
    if (run_asked_) return answer_run(line);
    if (!calls_waiting_.empty()) return answer_tool_call(line);
    const auto [name, args] = split_command(line);
    const Command* command = find_command(name);
    if (command != nullptr && command->run != nullptr) {
        try {
            return command->run(*this, CommandCall{args, on_text});
        } catch (const std::exception& e) {
            return failure(name + ": " + e.what());
        }
    }
    return failure("unknown command " + name + "; /help lists the commands");
}

ChatOutcome ChatController::command_new() {
    const std::string system = system_prompt();
    engine_.clear();
    if (!system.empty()) engine_.set_system(system);
    message_ids_.clear();
    last_turn_.reset();
    backend_.new_session(system);
    ChatOutcome outcome = info("new conversation");
    outcome.conversation_replaced = true;
    return outcome;
}

ChatOutcome ChatController::command_regen(const TextCallback& on_text) {
    const ChatMessage* last = last_non_system();
    if (last == nullptr) return failure("/regen: nothing to answer again yet");
    const auto saved_messages = engine_.messages();
    const auto saved_ids = message_ids_;
    if (last->role == "assistant") {
        // The old reply stays in the store; the new one becomes its sibling.
        engine_.pop_assistant();
        message_ids_.pop_back();
    }
    last = last_non_system();
    // After tool results (the last message a tool's), the reply that read them is made again.
    if (last == nullptr || (last->role != "user" && last->role != "tool")) {
        replace_messages(saved_messages);
        message_ids_ = saved_ids;
        return failure("/regen: the conversation does not end with a prompt to answer");
    }
    try {
        if (last->role == "user") {
            start_tool_rounds();
        } else {
            offer_tools_for(/*first=*/false);
        }
    } catch (...) {
        replace_messages(saved_messages);
        message_ids_ = saved_ids;
        throw;
    }
    return run_turn(on_text, saved_messages, saved_ids);
}

ChatOutcome ChatController::command_continue(const TextCallback& on_text) {
    const ChatMessage* last = last_non_system();
    if (last == nullptr || last->role != "assistant") {
        return failure("/continue: there is no reply to continue");
    }
    if (last_turn_ && last_turn_->finish == FinishReason::Stop) {
        return failure(
            "/continue: the last reply is complete (it ended its turn); /regen "
            "answers again");
    }
    if (last_turn_ && last_turn_->finish == FinishReason::Context) {
        return failure("/continue: the context is full (/set ctx N makes it larger)");
    }
    const auto saved_messages = engine_.messages();
    const auto saved_ids = message_ids_;
    // The longer reply is saved beside the cut one, under the same prompt.
    message_ids_.pop_back();
    ChatOutcome outcome = run_turn(on_text, saved_messages, saved_ids, /*continuing=*/true);
    if (outcome.error && !outcome.turn) {
        // Nothing generated: the conversation is as it was (run_turn restored it).
        outcome.message = "/continue: " + outcome.message.substr(outcome.message.find(": ") + 2);
    }
    return outcome;
}

ChatOutcome ChatController::command_edit(const std::string& text, const TextCallback& on_text) {
    if (text.empty()) return failure("usage: /edit TEXT (replaces your last prompt)");
    const auto saved_messages = engine_.messages();
    const auto saved_ids = message_ids_;
    auto kept = saved_messages;
    auto kept_ids = saved_ids;
    // Back to the last prompt: past its reply, and the tool calls and results after it.
    while (!kept.empty() && (kept.back().role == "assistant" || kept.back().role == "tool") &&
           !kept_ids.empty()) {
        kept.pop_back();
        kept_ids.pop_back();
    }
    if (kept.empty() || kept.back().role != "user") {
        return failure("/edit: there is no prompt to replace yet");
    }
    // The edited prompt is committed under the old one's parent: a new branch.
    kept.pop_back();
    kept_ids.pop_back();
    replace_messages(kept);
    message_ids_ = kept_ids;
    try {
        start_tool_rounds();
        add_user_message(text);
    } catch (...) {
        replace_messages(saved_messages);
        message_ids_ = saved_ids;
        throw;
    }
    ChatOutcome outcome = run_turn(on_text, saved_messages, saved_ids);
    outcome.conversation_replaced = true;
    return outcome;
}

ChatOutcome ChatController::command_system(const std::string& text) {
    if (text.empty()) {
        const std::string current = system_prompt();
        return info(current.empty() ? "no system prompt (set one with /system TEXT)"
                                    : "system prompt: " + current);
    }
    backend_.set_system_prompt(text);
    engine_.set_system(text);
    return info("system prompt set");
}

ChatOutcome ChatController::command_stats() {
    std::string text = last_turn_ ? turn_details(*last_turn_) : "no reply yet";
    text += "\nsession store: " + backend_.stats_text();
    return info(text);
}

ChatOutcome ChatController::command_sessions() {
    const auto sessions = backend_.list(kSessionListLimit);
    if (sessions.empty()) return info("no saved conversations");
    const std::string current = backend_.current_id();
    std::string text;
    for (const auto& s : sessions) {
        if (!text.empty()) text += '\n';
        text += format("%s %-10s %-40s %3lld turns  %s  %s", s.id == current ? "*" : " ",
                       s.id.c_str(), s.title.c_str(), static_cast<long long>(s.turns),
                       s.updated.c_str(), s.model.c_str());
    }
    return info(text);
}

ChatOutcome ChatController::load_session(const std::string& id, bool own_model) {
    if (id.empty()) return failure("usage: /load ID (/sessions lists them)");
    std::optional<LoadedSession> loaded = backend_.load(id);
    if (!loaded) return failure("/load: no saved conversation '" + id + "' (/sessions lists them)");
    if (loaded->messages.size() != loaded->message_ids.size()) {
        return failure("/load: conversation '" + id + "' is inconsistent in the store");
    }
    // Its own model first (the picker, /load): the messages then load under it, so its
    // stored reply tokens and state are used.
    const std::string model_note = own_model ? reopen_model_of(*loaded) : std::string();
    if (!model_note.empty()) {
        loaded = backend_.load(id);
        if (!loaded || loaded->messages.size() != loaded->message_ids.size()) {
            return failure("/load: conversation '" + id + "' changed in the store");
        }
    }
    engine_.clear();
    if (!loaded->system_prompt.empty()) engine_.set_system(loaded->system_prompt);
    for (auto& m : loaded->messages) engine_.add_message(std::move(m));
    message_ids_ = std::move(loaded->message_ids);
    notes_.clear();
    for (size_t i = 0; i < message_ids_.size() && i < loaded->notes.size(); ++i) {
        const MessageNotes& n = loaded->notes[i];
        if (!n.attachments.empty() || !n.model.empty()) notes_[message_ids_[i]] = n;
    }
    last_turn_.reset();
    ChatOutcome outcome = info("loaded '" + loaded->summary.title + "' (" +
                               std::to_string(message_ids_.size()) + " messages)");
    outcome.conversation_replaced = true;
    if (!model_note.empty()) outcome.message += "; " + model_note;
    // The settings it went on with (/set, /preset) come back with it.
    if (loaded->settings) {
        const std::string not_taken = apply_settings(*loaded->settings);
        if (!not_taken.empty()) outcome.message += "; " + not_taken;
    }
    record_settings(outcome);
    resume_waiting_calls();
    if (tool_call_waiting()) {
        const std::string loaded_note = outcome.message;
        ask_next_call(outcome);
        outcome.message = loaded_note + "; a tool call waits: " + outcome.message;
    }
    return outcome;
}

ChatOutcome ChatController::command_rename(const std::string& title) {
    if (title.empty()) return failure("usage: /rename TITLE");
    backend_.rename(title);
    return info("renamed to '" + title + "'");
}

ChatOutcome ChatController::command_branch(const std::string& title) {
    if (message_ids_.empty()) return failure("/branch: nothing to branch from yet");
    // The copy is a new conversation in the store holding the current branch's messages, so
    // the original and the copy can go their own ways. The copy's replies carry no stats:
    // they were not generated for it.
    const std::string original = backend_.current_id();
    const auto saved_ids = message_ids_;
    backend_.new_session(system_prompt());
    std::vector<int64_t> ids;
    try {
        int64_t parent = 0;
        for (const auto& m : engine_.messages()) {
            if (m.role == "system") continue;
            parent = backend_.commit(m, parent, nullptr);
            ids.push_back(parent);
        }
        if (!title.empty()) backend_.rename(title);
    } catch (...) {
        // Back to the original, so later turns do not land in a half-made copy.
        if (!original.empty()) backend_.load(original);
        message_ids_ = saved_ids;
        throw;
    }
    message_ids_ = std::move(ids);
    const std::string copy = backend_.current_id();
    return info("branched: now in " + (copy.empty() ? std::string("a copy") : copy) +
                (original.empty() ? std::string() : "; " + original + " stays as it was"));
}

std::string ChatController::model_name() const {
    return switcher_ != nullptr ? switcher_->current_name() : std::string();
}

std::vector<std::string> ChatController::model_names() {
    return switcher_ != nullptr ? switcher_->candidates() : std::vector<std::string>{};
}

ChatOutcome ChatController::command_model(const std::string& name) {
    if (switcher_ == nullptr) {
        return failure("/model: this chat's model is the server's (--remote-model chooses it)");
    }
    if (name.empty()) {
        std::string text =
            "model: " + switcher_->current_name() + " (" + switcher_->current_path() + ")\n";
        const std::vector<std::string> names = switcher_->candidates();
        if (names.empty()) {
            text +=
                "no other models found (ember models says where it looks); /model PATH "
                "takes a GGUF file";
        } else {
            text += "models (/model NAME switches; a path works too):";
            for (const auto& n : names) text += "\n  " + n;
        }
        return info(text);
    }
    // Nothing changes unless the new model loads: the switcher throws before it swaps, also
    // when Esc / Ctrl-C stop a long load.
    cancel_requested_.store(false, std::memory_order_relaxed);
    const auto stop = [this] { return stop_requested(); };
    std::string switched;
    try {
        switched = switcher_->switch_to(name, stop);
    } catch (const std::exception&) {
        if (!stop_requested()) throw;
        return info("/model: loading " + name + " stopped; " + switcher_->current_name() +
                    " still answers");
    }
    ChatOutcome outcome = info(std::move(switched));
    // The numbers of the last reply were the old model's, and its tokens are not the new
    // model's (/continue cannot extend a reply across models).
    last_turn_.reset();
    outcome.conversation_replaced = true;
    // The new model's context may differ: the record says what later replies run with.
    record_settings(outcome);
    return outcome;
}

ChatOutcome ChatController::command_export(const std::string& path) {
    if (path.empty()) return failure("usage: /export PATH");
    backend_.export_markdown(path);
    return info("written to " + path);
}

std::vector<AttachmentNote> ChatController::pending_attachments() const {
    std::vector<AttachmentNote> notes;
    for (const Attachment& a : attachments_) {
        notes.push_back({a.heading, static_cast<int64_t>(a.content.size()),
                         static_cast<int64_t>(join_attachments({a}, "").size())});
    }
    return notes;
}

std::string ChatController::shown_prompt(const std::string& typed,
                                         const std::vector<AttachmentNote>& attachments) {
    std::string shown;
    for (const AttachmentNote& a : attachments) {
        shown += "[attached] " + a.heading + " (" + std::to_string(a.bytes) +
                 (a.bytes == 1 ? " byte" : " bytes") + ")\n";
    }
    return shown.empty() ? typed : shown + "\n" + typed;
}

std::string ChatController::shown_message(const std::string& content, const MessageNotes& notes) {
    size_t attached = 0;
    for (const AttachmentNote& a : notes.attachments) {
        attached += static_cast<size_t>(std::max<int64_t>(0, a.length));
    }
    // A record that does not fit the content (an edited file) shows the content whole.
    if (notes.attachments.empty() || attached > content.size()) return content;
    return shown_prompt(content.substr(attached), notes.attachments);
}

}  // namespace ember::ui
