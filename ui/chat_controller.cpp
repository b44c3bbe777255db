#include "ui/chat_controller.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdarg>
#include <cstdio>
#include <exception>
#include <sstream>
#include <stdexcept>
#include <system_error>

namespace ember::ui {

namespace {

// Sessions listed by /sessions: enough to find recent work without flooding a status line.
constexpr int64_t kSessionListLimit = 20;

const char* const kSettingNames =
    "temp, top-k, top-p, min-p, repeat-penalty, seed, n-predict, ignore-eos, stats, think, "
    "thinking-budget, reasoning-effort, ctx";

std::string trim(const std::string& s) {
    const size_t begin = s.find_first_not_of(" \t\r\n");
    if (begin == std::string::npos) return {};
    const size_t end = s.find_last_not_of(" \t\r\n");
    return s.substr(begin, end - begin + 1);
}

// Splits "/name rest of line" into "/name" and the trimmed rest.
std::pair<std::string, std::string> split_command(const std::string& line) {
    const std::string text = trim(line);
    const size_t space = text.find_first_of(" \t");
    if (space == std::string::npos) return {text, {}};
    return {text.substr(0, space), trim(text.substr(space))};
}

ChatOutcome info(std::string message) {
    ChatOutcome outcome;
    outcome.message = std::move(message);
    return outcome;
}

ChatOutcome failure(std::string message) {
    ChatOutcome outcome;
    outcome.message = std::move(message);
    outcome.error = true;
    return outcome;
}

double per_second(int64_t count, double seconds) {
    return seconds > 0 ? static_cast<double>(count) / seconds : 0.0;
}

// The first token's time is prefill; decode speed counts the tokens after it.
int64_t decoded_after_first(const TurnResult& turn) {
    return std::max<int64_t>(0, turn.stats.generated_tokens - 1);
}

__attribute__((format(printf, 1, 2))) std::string format(const char* fmt, ...) {
    std::va_list args;
    va_start(args, fmt);
    std::va_list copy;
    va_copy(copy, args);
    const int size = std::vsnprintf(nullptr, 0, fmt, copy);
    va_end(copy);
    std::string text(size > 0 ? static_cast<size_t>(size) : 0, '\0');
    if (size > 0) std::vsnprintf(text.data(), text.size() + 1, fmt, args);
    va_end(args);
    return text;
}

// Whole-string numeric parsing: "12x", "" and out-of-range values are rejected.
template <class T>
std::optional<T> parse_number(const std::string& text) {
    T value{};
    const char* first = text.data();
    const char* last = first + text.size();
    if (first != last && *first == '+') ++first;
    const auto [end, error] = std::from_chars(first, last, value);
    if (error != std::errc() || end != last || first == last) return std::nullopt;
    return value;
}

std::optional<bool> parse_switch(const std::string& text) {
    if (text == "on" || text == "true" || text == "1" || text == "yes") return true;
    if (text == "off" || text == "false" || text == "0" || text == "no") return false;
    return std::nullopt;
}

// "Top_K" and "top-k" name the same setting.
std::string normalize_setting(std::string name) {
    for (char& c : name) {
        c = c == '_' ? '-' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    while (!name.empty() && name.front() == '-') name.erase(name.begin());
    return name;
}

// SamplingParams::validate() says "SamplingParams.top_p = 2: must lie in (0, 1]"; the user
// typed "top-p", so keep only the rule.
std::string rule_of(const std::invalid_argument& e) {
    const std::string what = e.what();
    const size_t colon = what.find(": ");
    return colon == std::string::npos ? what : what.substr(colon + 2);
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

std::string ChatController::help_text() {
    return "Commands:\n"
           "  /help               this list\n"
           "  /new                start a new conversation (the system prompt stays)\n"
           "  /regen              answer the last prompt again (the old reply stays saved)\n"
           "  /continue           go on with a reply that was cut short\n"
           "  /edit TEXT          replace the last prompt with TEXT and answer it\n"
           "  /branch [TITLE]     go on in a copy of this conversation (the original stays)\n"
           "  /system [TEXT]      set the system prompt, or show it\n"
           "  /set [PARAM VALUE]  change a setting, or list them all\n"
           "  /stats              numbers for the last reply and the session store\n"
           "  /sessions           list saved conversations\n"
           "  /load ID            open a saved conversation\n"
           "  /rename TITLE       rename this conversation\n"
           "  /export PATH        write this conversation as Markdown\n"
           "  /model [NAME]       go on with another model (a path or a name `ember models`\n"
           "                      lists; the conversation stays), or show them\n"
           "  /file PATH          attach a text file to your next message\n"
           "  /run CMD            attach a command's output to your next message (asks first)\n"
           "  /tools              the tools the model may call (ember chat --tools FILE,\n"
           "                      --builtin-tools read_file,list_directory); each call asks first\n"
           "  /quit               leave (Ctrl-D does too)\n"
           "Start a line with // to send a prompt that begins with /.";
}

const std::vector<std::string>& ChatController::command_names() {
    static const std::vector<std::string> names = {
        "/branch", "/continue", "/edit", "/export",   "/file",  "/help",
        "/load",   "/model",    "/new",  "/quit",     "/regen", "/rename",
        "/run",    "/set",      "/sessions", "/stats", "/system", "/tools"};
    return names;
}

const std::vector<std::string>& ChatController::setting_names() {
    static const std::vector<std::string> names = {
        "temp",       "top-k", "top-p", "min-p",           "repeat-penalty",   "seed", "n-predict",
        "ignore-eos", "stats", "think", "thinking-budget", "reasoning-effort", "ctx"};
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
        line += format("%s[stopped reading the prompt at %lld of %lld tokens; what was read is "
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

void ChatController::add_user_message(const std::string& text) {
    ChatMessage message{"user", text, {}, {}};
    // Committed before the reply is generated, so a crash mid-reply loses only the reply.
    const int64_t id = backend_.commit(message, current_parent(), nullptr);
    engine_.add_message(std::move(message));
    message_ids_.push_back(id);
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
        message_ids_.push_back(backend_.commit(engine_.messages().back(), parent, &*outcome.turn));
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
    // Attached files and command output go first (ui/attachments.h), so a conversation
    // opened on the same file shares its prompt prefix.
    const std::string text = join_attachments(attachments_, typed);
    const auto saved_messages = engine_.messages();
    const auto saved_ids = message_ids_;
    try {
        start_tool_rounds();
        add_user_message(text);
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
    try {
        if (name == "/help" || name == "/?") return info(help_text());
        if (name == "/file") return command_file(args);
        if (name == "/run") return command_run(args);
        if (name == "/quit" || name == "/exit" || name == "/q") {
            ChatOutcome outcome;
            outcome.quit = true;
            return outcome;
        }
        if (name == "/new") return command_new();
        if (name == "/regen") return command_regen(on_text);
        if (name == "/continue") return command_continue(on_text);
        if (name == "/edit") return command_edit(args, on_text);
        if (name == "/system") return command_system(args);
        if (name == "/set") return command_set(args);
        if (name == "/stats") return command_stats();
        if (name == "/sessions") return command_sessions();
        if (name == "/load") return load_session(args);
        if (name == "/rename") return command_rename(args);
        if (name == "/export") return command_export(args);
        if (name == "/branch") return command_branch(args);
        if (name == "/model") return command_model(args);
        if (name == "/tools") return command_tools();
    } catch (const std::exception& e) {
        return failure(name + ": " + e.what());
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

std::string ChatController::settings_text() const {
    const SamplingParams& p = sampler_.params();
    std::ostringstream text;
    text << "settings (/set NAME VALUE changes one):\n";
    text << "  temp " << p.temperature << ", top-k " << p.top_k << ", top-p " << p.top_p
         << ", min-p " << p.min_p << ", repeat-penalty " << p.repeat_penalty << ", seed ";
    if (seeds_.next()) {
        text << *seeds_.next() << " (the next reply's)";
    } else {
        text << "random (a fresh one per reply)";
    }
    text << "\n  n-predict " << generation_.max_tokens
         << (generation_.max_tokens < 0 ? " (to the end of the turn or the context)" : "")
         << ", ignore-eos " << (generation_.ignore_eos ? "on" : "off") << ", stats "
         << (show_stats_ ? "on" : "off") << "\n  think ";
    if (const std::optional<bool> think = engine_.thinking()) {
        text << (*think ? "on" : "off");
    } else {
        text << "auto (the template's default)";
    }
    text << ", thinking-budget ";
    if (engine_.thinking_budget() >= 0) {
        text << engine_.thinking_budget();
    } else {
        text << "(the server's)";
    }
    text << ", reasoning-effort ";
    const std::string effort = engine_.reasoning_effort();
    text << (effort.empty() ? std::string("(the template's default)") : effort) << ", ctx ";
    if (engine_.context_size() > 0) {
        text << engine_.context_size();
    } else {
        text << "(the server's)";
    }
    return text.str();
}

ChatOutcome ChatController::command_set(const std::string& args) {
    if (args.empty()) return info(settings_text());
    const auto [raw_name, value] = split_command(args);
    const std::string name = normalize_setting(raw_name);
    if (value.empty()) {
        return failure("usage: /set PARAM VALUE, PARAM one of: " + std::string(kSettingNames));
    }
    const auto not_a = [&](const char* what) {
        return failure("/set " + name + ": '" + value + "' is not " + what);
    };
    SamplingParams params = sampler_.params();
    if (name == "temp" || name == "temperature") {
        const auto v = parse_number<float>(value);
        if (!v) return not_a("a number");
        params.temperature = *v;
    } else if (name == "top-k") {
        const auto v = parse_number<int32_t>(value);
        if (!v) return not_a("a whole number");
        params.top_k = *v;
    } else if (name == "top-p") {
        const auto v = parse_number<float>(value);
        if (!v) return not_a("a number");
        params.top_p = *v;
    } else if (name == "min-p") {
        const auto v = parse_number<float>(value);
        if (!v) return not_a("a number");
        params.min_p = *v;
    } else if (name == "repeat-penalty") {
        const auto v = parse_number<float>(value);
        if (!v) return not_a("a number");
        params.repeat_penalty = *v;
    } else if (name == "seed") {
        const auto v = parse_number<uint64_t>(value);
        if (!v) return not_a("a whole number >= 0");
        sampler_.reset(*v);
        seeds_.fix(*v);
        return info("seed = " + std::to_string(*v) + " (the next reply starts from it)");
    } else if (name == "n-predict" || name == "n" || name == "max-tokens") {
        const auto v = parse_number<int64_t>(value);
        if (!v) return not_a("a whole number");
        if (*v == 0 || *v < -1) {
            return failure("/set n-predict: must be > 0, or -1 for as many as the context holds");
        }
        generation_.max_tokens = *v;
        return info("n-predict = " + value);
    } else if (name == "stats") {
        const auto v = parse_switch(value);
        if (!v) return not_a("on or off");
        show_stats_ = *v;
        return info(*v ? "stats = on (a line of numbers after each reply)"
                       : "stats = off (the status line keeps the numbers)");
    } else if (name == "ignore-eos") {
        const auto v = parse_switch(value);
        if (!v) return not_a("on or off");
        generation_.ignore_eos = *v;
        return info(std::string("ignore-eos = ") + (*v ? "on" : "off"));
    } else if (name == "think") {
        const auto v = parse_switch(value);
        if (!v) return not_a("on or off");
        engine_.set_thinking(*v);
        return info(std::string("think = ") + (*v ? "on" : "off"));
    } else if (name == "thinking-budget" || name == "max-thinking-tokens") {
        const auto v = parse_number<int64_t>(value);
        if (!v || *v < 0) return not_a("a whole number >= 0");
        engine_.set_thinking(*v > 0, *v);
        return info("thinking-budget = " + value);
    } else if (name == "reasoning-effort") {
        // gpt-oss's system message says how hard to think: low, medium or high.
        if (value != "low" && value != "medium" && value != "high") {
            return not_a("low, medium or high");
        }
        engine_.set_reasoning_effort(value);
        return info("reasoning-effort = " + value);
    } else if (name == "ctx" || name == "context") {
        const auto v = parse_number<int64_t>(value);
        if (!v) return not_a("a whole number");
        try {
            engine_.set_context(*v);
        } catch (const std::invalid_argument& e) {
            return failure("/set ctx " + value + ": " + e.what());
        }
        return info("ctx = " + value + " (the next turn is evaluated afresh)");
    } else {
        return failure("/set: unknown setting '" + raw_name + "'; settings: " + kSettingNames);
    }
    try {
        sampler_.set_params(params);  // validates; on error nothing changes
    } catch (const std::invalid_argument& e) {
        return failure("/set " + name + " " + value + ": " + rule_of(e));
    }
    return info(name + " = " + value);
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

ChatOutcome ChatController::load_session(const std::string& id) {
    if (id.empty()) return failure("usage: /load ID (/sessions lists them)");
    std::optional<LoadedSession> loaded = backend_.load(id);
    if (!loaded) return failure("/load: no saved conversation '" + id + "' (/sessions lists them)");
    if (loaded->messages.size() != loaded->message_ids.size()) {
        return failure("/load: conversation '" + id + "' is inconsistent in the store");
    }
    engine_.clear();
    if (!loaded->system_prompt.empty()) engine_.set_system(loaded->system_prompt);
    for (auto& m : loaded->messages) engine_.add_message(std::move(m));
    message_ids_ = std::move(loaded->message_ids);
    last_turn_.reset();
    ChatOutcome outcome = info("loaded '" + loaded->summary.title + "' (" +
                               std::to_string(message_ids_.size()) + " messages)");
    outcome.conversation_replaced = true;
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
        std::string text = "model: " + switcher_->current_name() + " (" +
                           switcher_->current_path() + ")\n";
        const std::vector<std::string> names = switcher_->candidates();
        if (names.empty()) {
            text += "no other models found (ember models says where it looks); /model PATH "
                    "takes a GGUF file";
        } else {
            text += "models (/model NAME switches; a path works too):";
            for (const auto& n : names) text += "\n  " + n;
        }
        return info(text);
    }
    // Nothing changes unless the new model loads: the switcher throws before it swaps.
    ChatOutcome outcome = info(switcher_->switch_to(name));
    // The numbers of the last reply were the old model's, and its tokens are not the new
    // model's (/continue cannot extend a reply across models).
    last_turn_.reset();
    outcome.conversation_replaced = true;
    return outcome;
}

ChatOutcome ChatController::command_export(const std::string& path) {
    if (path.empty()) return failure("usage: /export PATH");
    backend_.export_markdown(path);
    return info("written to " + path);
}

}  // namespace ember::ui
