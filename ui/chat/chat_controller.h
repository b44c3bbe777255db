// The logic the interactive front ends (line mode, curses) share: running a turn, keeping the
// session store in step with the conversation, and the slash commands.
//
// Results come back as data (a message, whether to quit, the turn's numbers) rather than being
// printed, so each front end shows them its own way: line mode on the terminal, curses in its
// status line. Nothing here throws out of submit() or handle_command(): a failing turn or a
// bad command becomes an error message and the conversation carries on.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/generate/conversation.h"
#include "ui/chat/chat_engine.h"
#include "ui/chat/model_switcher.h"
#include "ui/chat/presets.h"
#include "ui/chat/session_backend.h"
#include "ui/io/attachments.h"
#include "ui/tools/tool_turns.h"

namespace ember::ui {

// What a prompt or a command produced.
struct ChatOutcome {
    std::string message;  // to show the user (may span lines); empty: nothing to say
    bool error = false;   // `message` explains what went wrong
    bool quit = false;    // the user asked to leave
    // The conversation was replaced (/new, /load) or rewritten: redraw it from messages().
    bool conversation_replaced = false;
    std::optional<TurnResult> turn;  // set when a reply was generated (even if cancelled)
    // `message` asks a yes/no question (/run's, a tool call's): the next line the user
    // enters, whatever it is, answers it (handle_command or submit); only "y" or "yes" says
    // yes.
    bool confirm = false;
    // Tool calls (--tools, ui/tools/tool_turns.h), for the conversation view: what came of calls
    // (a result, or that a call did not run), in order, and the call now waiting for the
    // user's yes (`confirm` is set then). With `tools_continue` the results are in and the
    // model goes on: the front end calls continue_after_tools() next.
    std::vector<std::string> tool_results;
    std::string tool_proposal;
    bool tools_continue = false;
};

class ChatController {
public:
    // Every reference must outlive the controller. The engine (local or remote) may already
    // hold messages (e.g. a system prompt); the backend starts a new session with its system
    // prompt.
    ChatController(ChatEngine& engine, Sampler& sampler, SessionBackend& backend,
                   GenerateOptions generation);

    // Adds `prompt` as the user's message, commits it, generates the reply (streamed through
    // `on_text`; returning false stops it) and commits the reply, also a cancelled one.
    ChatOutcome submit(const std::string& prompt, const TextCallback& on_text);

    // Makes the stored session `id` current (what /load does); a front end may call it at
    // start to resume one. `own_model`: a conversation made with another model is opened
    // with that one (the switcher loads it); false at start, where the command line chose
    // the model (-m, else the conversation's own).
    ChatOutcome load_session(const std::string& id, bool own_model = true);

    // "/set NAME VALUE" without the /set, never taken as the answer to a waiting question
    // (a resumed conversation's tool call): the command line's settings over a resumed
    // conversation's.
    ChatOutcome apply_setting(const std::string& name_value) { return command_set(name_value); }

    // Whether `line` is a slash command rather than a prompt.
    static bool is_command(const std::string& line);
    // Runs one slash command; commands that generate (/regen, /edit) stream through `on_text`.
    ChatOutcome handle_command(const std::string& line, const TextCallback& on_text);

    // Stops the reply being generated after the current token; the partial reply is kept.
    // Safe from any thread and from a signal handler (a lock-free atomic store).
    void request_cancel() { cancel_requested_.store(true, std::memory_order_relaxed); }
    // A flag set from outside (line mode's SIGINT handler) that stops a reply too, also while
    // a remote server has sent nothing yet. Must outlive the controller; null: none.
    void stop_also_on(const std::atomic<bool>* flag) { outside_stop_ = flag; }
    // The process is leaving (a terminating signal, the terminal gone): the reply in progress
    // stops as with request_cancel() and is committed, but the model state behind it is not
    // stored (a cache; storing a long prompt's rows takes seconds). Signal-safe, any thread.
    void request_leave() {
        leaving_.store(true, std::memory_order_relaxed);
        request_cancel();
    }
    // A terminating signal's number set from outside (line mode's handler; 0: none) that
    // does what request_leave() does. Must outlive the controller; null: none.
    void leave_also_on(const std::atomic<int>* signal) { outside_leave_ = signal; }
    // Told how the evaluation of a long prompt goes (GenerateOptions::on_prefill), on the
    // thread that runs the turn; empty: nothing is told.
    void set_prefill_progress(PrefillCallback on_prefill) {
        generation_.on_prefill = std::move(on_prefill);
    }

    // What /model switches with (not owned; must outlive the controller); null: the model
    // cannot be switched (a remote one), and /model says so.
    void set_model_switcher(ModelSwitcher* switcher) { switcher_ = switcher; }
    // The file name of the model answering; empty without a switcher (the front end keeps the
    // name it was started with).
    std::string model_name() const;
    // The names /model NAME takes (Tab completion); empty without a switcher.
    std::vector<std::string> model_names();

    // The tools the model is offered (--tools, --builtin-tools) and how calls are approved.
    // Throws std::invalid_argument where the engine cannot offer them (a model whose
    // template has no tool-call format Ember knows).
    void set_tools(ChatToolSettings settings);
    const ChatToolSettings& tools() const { return tools_; }
    // Whether a tool call waits for the user's yes (the next line answers it).
    bool tool_call_waiting() const { return !calls_waiting_.empty(); }
    // The question for a call that waits (one a resumed conversation left unanswered), with
    // `confirm` set; nothing when none waits. A front end asks it when it starts.
    ChatOutcome waiting_call_question();
    // After an outcome with tools_continue: the model reads the tool results and goes on
    // (streamed through `on_text`); its reply may call tools again.
    ChatOutcome continue_after_tools(const TextCallback& on_text);

    // The seeds replies are sampled with (default: fixed from the sampler's seed).
    void set_seeds(ReplySeeds seeds);

    // The config file's presets for /preset, and what a preset is applied over: the settings
    // and system prompt the chat had before any preset, so a preset replaces the one before
    // it instead of adding to it.
    struct PresetBase {
        SamplingParams sampling;
        std::optional<uint64_t> fixed_seed;
        std::string system;
    };
    void set_presets(Presets presets, std::string config_path, PresetBase base);

    // The settings later replies are generated with (what /set changes).
    ChatSettings settings() const;
    // Makes `settings` the ones later replies use (as /set would, one by one) and records
    // them; what the engine cannot take (a context a remote server decides) is left as it is.
    // Returns what was not taken, or empty.
    std::string apply_settings(const ChatSettings& settings);
    // What is attached to the next prompt (/file, /run), collapsed.
    std::vector<AttachmentNote> pending_attachments() const;
    // A prompt as the transcript shows it: a line per attachment (its heading and size), then
    // what the user typed. `shown_message`: the same from a stored message's content.
    static std::string shown_prompt(const std::string& typed,
                                    const std::vector<AttachmentNote>& attachments);
    static std::string shown_message(const std::string& content, const MessageNotes& notes);

    // What each message of the current branch carries (a prompt's attachments, a reply's
    // model), in the order of message_ids().
    std::vector<MessageNotes> message_notes() const;
    // Whether a line of numbers follows each reply (--verbose, /set stats); the status line
    // shows them either way.
    bool show_stats() const { return show_stats_; }
    void set_show_stats(bool on) { show_stats_ = on; }

    ChatEngine& engine() { return engine_; }
    const ChatEngine& engine() const { return engine_; }
    const Sampler& sampler() const { return sampler_; }
    const GenerateOptions& generation() const { return generation_; }
    // Store ids of the conversation's non-system messages, in order (the current branch).
    const std::vector<int64_t>& message_ids() const { return message_ids_; }
    const std::optional<TurnResult>& last_turn() const { return last_turn_; }
    // Saved conversations, most recent first (the sessions picker, Tab completion of ids).
    std::vector<SessionSummary> list_sessions(int64_t limit) { return backend_.list(limit); }
    // Id of the current conversation in the store; empty until its first message is saved.
    std::string session_id() const { return backend_.current_id(); }

    // The slash commands, for Tab completion ("/help", "/load", ...); `full_screen` adds
    // the full-screen chat's own (/copy).
    static std::vector<std::string> command_names(bool full_screen = false);
    // The command `typed` names by its own name or another it answers to ("/q": "/quit");
    // `typed` itself when it names none.
    static std::string command_name(const std::string& typed);
    // What /set accepts ("temp", "top-k", ...), for Tab completion.
    static const std::vector<std::string>& setting_names();
    // The value of the /set setting `name` now, as /set takes it back ("0.7", "on"); empty
    // when it has none to give (a random seed, the template's default, the server's) or
    // `name` is no setting.
    std::string setting_value(const std::string& name) const;

    // The command list shown by /help (`full_screen`: with the full-screen chat's own).
    static std::string help_text(bool full_screen = false);
    // One short line after a reply: tokens, speed, time to first token, why it ended.
    static std::string turn_summary(const TurnResult& turn);
    // What must be said after a reply even without the stats line: warnings, turns dropped
    // to fit the context, a reply cut at the token limit; empty when nothing.
    static std::string turn_notes(const TurnResult& turn);
    // The fuller account /stats gives of a turn.
    static std::string turn_details(const TurnResult& turn);

private:
    // Generates a reply to the conversation as it stands and commits it under the last
    // message's id. If generation fails, the conversation and ids become `restore_*` (what
    // they were before the caller changed them for this turn).
    // `continuing`: extend the last reply (/continue) instead of answering.
    ChatOutcome run_turn(const TextCallback& on_text,
                         const std::vector<ChatMessage>& restore_messages,
                         const std::vector<int64_t>& restore_ids, bool continuing = false);
    // Adds a user message to the conversation and commits it at once.
    void add_user_message(const std::string& text, const MessageNotes& notes = {});
    void replace_messages(const std::vector<ChatMessage>& messages);
    int64_t current_parent() const { return message_ids_.empty() ? 0 : message_ids_.back(); }
    const ChatMessage* last_non_system() const;
    std::string system_prompt() const;

    // The slash commands and the /set settings, each listed once: dispatch, /help, Tab
    // completion and the settings' names and values all come from these tables
    // (ui/chat/chat_controller.cpp, ui/chat/chat_settings.cpp).
    struct CommandCall;
    struct Command;
    struct Setting;
    static std::span<const Command> commands();
    // A command's entry that runs `Method` with what it takes of the call (its arguments,
    // where a reply streams, both or neither).
    template <auto Method>
    static ChatOutcome run(ChatController& chat, const CommandCall& call);
    static std::span<const Setting> setting_table();
    // The entry `name` names (its own name or another it answers to); null when none.
    static const Command* find_command(const std::string& name);
    static const Setting* find_setting(const std::string& name);
    // A sampling setting's entry (`Field` of the sampler's parameters): set from `value` as
    // /set does, and its value read back.
    template <auto Field>
    static ChatOutcome set_sampling(ChatController& chat, const std::string& name,
                                    const std::string& value);
    template <auto Field>
    static std::string sampling_value(const ChatController& chat);

    ChatOutcome command_new();
    ChatOutcome command_regen(const TextCallback& on_text);
    ChatOutcome command_continue(const TextCallback& on_text);
    ChatOutcome command_edit(const std::string& text, const TextCallback& on_text);
    ChatOutcome command_system(const std::string& text);
    ChatOutcome command_set(const std::string& args);
    ChatOutcome set_one(const std::string& args);  // /set NAME VALUE, not recorded
    ChatOutcome command_stats();
    ChatOutcome command_sessions();
    ChatOutcome command_rename(const std::string& title);
    ChatOutcome command_export(const std::string& path);
    ChatOutcome command_model(const std::string& name);
    ChatOutcome command_branch(const std::string& title);
    ChatOutcome command_preset(const std::string& name);
    // Stores the settings now in force with the conversation (after /set, /preset, /model, a
    // load); a failed write becomes `outcome`'s error.
    void record_settings(ChatOutcome& outcome);
    // /load of a conversation made with another model: that model answers again (asked of
    // the switcher); says what happened, or why it could not.
    std::string reopen_model_of(const LoadedSession& loaded);
    // /file and /run (ui/chat/chat_attachments.cpp): attach to the next prompt.
    ChatOutcome command_file(const std::string& path);
    ChatOutcome command_run(const std::string& command);
    ChatOutcome answer_run(const std::string& answer);
    ChatOutcome attach(Attachment attachment, const std::string& what);
    std::string settings_text() const;
    // Tool calls (ui/chat/chat_tools.cpp). A reply's calls become the waiting ones and the first
    // is asked about (or, with auto-approval or past the round limit, all are answered).
    void offer_tool_calls(ChatOutcome& outcome);
    void ask_next_call(ChatOutcome& outcome);
    ChatOutcome answer_tool_call(const std::string& answer);
    // Runs the first waiting call (`run`) or answers it with `reason`, and commits the tool
    // message; what it shows goes into `outcome`.
    void answer_first_call(bool run, const std::string& reason, ChatOutcome& outcome);
    // The tools for the next reply: the first to a prompt (`first`) or one after results.
    void offer_tools_for(bool first);
    // After a load: the calls of the last reply no tool message answers wait again.
    void resume_waiting_calls();
    // A new prompt (or /regen, /edit): its first reply gets the configured tool choice and
    // the round count starts again. Throws where the engine refuses the tools.
    void start_tool_rounds();
    ChatOutcome command_tools() const;

    bool stop_requested() const;
    bool leaving() const;

    ChatEngine& engine_;
    Sampler& sampler_;
    SessionBackend& backend_;
    ModelSwitcher* switcher_ = nullptr;
    GenerateOptions generation_;
    ReplySeeds seeds_;
    bool show_stats_ = false;
    std::vector<int64_t> message_ids_;
    // What went with a message (by store id; a message without notes has none here).
    std::unordered_map<int64_t, MessageNotes> notes_;
    Presets presets_;
    std::string config_path_;
    std::optional<PresetBase> preset_base_;
    std::optional<TurnResult> last_turn_;
    std::vector<Attachment> attachments_;   // joined before the next prompt
    std::optional<std::string> run_asked_;  // the /run command waiting for its yes
    ChatToolSettings tools_;
    std::vector<ToolCall> calls_waiting_;  // the last reply's calls not answered yet, in order
    bool call_ran_ = false;                // one of the last reply's calls ran
    int tool_rounds_ = 0;                  // replies after tool results since the last prompt
    std::atomic<bool> cancel_requested_{false};
    const std::atomic<bool>* outside_stop_ = nullptr;
    std::atomic<bool> leaving_{false};
    const std::atomic<int>* outside_leave_ = nullptr;
    static_assert(std::atomic<bool>::is_always_lock_free, "request_cancel must be signal-safe");
};

}  // namespace ember::ui
