// Where the chat front ends (the controller, scripted mode, line mode, curses) get their
// replies from, as an interface: the in-process engine (LocalChatEngine, over a Conversation)
// or a remote OpenAI-compatible server (app/remote/remote_chat.h, which holds the HTTP client that
// ui/ may not see). The front ends keep the messages here and ask for the next reply; how it
// is produced, and where its state lives, is the engine's business.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "engine/generate/conversation.h"
#include "engine/generate/tool_calls.h"
#include "engine/grammar/token_mask.h"

namespace ember::ui {

// A reply as far as it got. `interruption` is empty when the reply ended normally (finished,
// hit a limit, or was cancelled by the user); otherwise it says why it broke off (a remote
// server dropped the connection or reported an error mid-reply): the partial reply is in
// `turn` and in the messages all the same, to be kept.
struct ChatReply {
    TurnResult turn;
    std::string interruption;
};

// The seed each reply is sampled with. From a fixed seed S (--seed, /set seed) a run's
// replies take S, S+1, S+2, ... (so /regen draws anew, and the same command line gives the
// same replies); without one each reply takes a fresh random seed. The front ends reset the
// sampler to a reply's seed before it starts (Sampler::reset) and store the seed with the
// reply, so that seed alone samples it again (ember replay --regenerate).
class ReplySeeds {
public:
    explicit ReplySeeds(std::optional<uint64_t> fixed = std::nullopt) : next_(fixed) {}
    void fix(uint64_t seed) { next_ = seed; }
    // The next reply's seed when fixed; nullopt: a fresh random one.
    const std::optional<uint64_t>& next() const { return next_; }
    // The next reply's seed.
    uint64_t take();

private:
    std::optional<uint64_t> next_;
};

// Asked from another thread while a reply is being produced: true once the user wants it
// stopped. Must be cheap and thread-safe (it reads atomics).
using StopRequested = std::function<bool()>;

class ChatEngine {
public:
    virtual ~ChatEngine() = default;

    virtual const std::vector<ChatMessage>& messages() const = 0;
    virtual void set_system(std::string text) = 0;  // replaces or adds the leading system message
    virtual void add_message(ChatMessage message) = 0;
    virtual void pop_message() = 0;    // drops the last message, whoever wrote it
    virtual bool pop_assistant() = 0;  // drops the last message if it is the assistant's
    virtual void clear() = 0;          // forgets every message

    // Produces the assistant's reply to the conversation so far, streams it through `on_text`
    // (false stops it: the partial reply is kept) and appends it. Throws when no reply could
    // start (ContextOverflow: the newest message does not fit; std::runtime_error: a server
    // that cannot be reached or refuses the request); the messages are then as they were.
    // `stop_requested` (may be empty) is polled where `on_text` cannot be: while a remote
    // server has not sent anything yet.
    virtual ChatReply respond(Sampler& sampler, const GenerateOptions& options,
                              const TextCallback& on_text, const StopRequested& stop_requested) = 0;
    // Extends the last message, a reply cut short (by the token limit or the user), from
    // where it stopped: the new text streams through `on_text` and is appended to it; the
    // turn's numbers are the extension's. Throws std::invalid_argument when it cannot (no
    // reply last, its tokens unknown, an engine that cannot); the messages are then as they
    // were.
    virtual ChatReply continue_reply(Sampler& sampler, const GenerateOptions& options,
                                     const TextCallback& on_text,
                                     const StopRequested& stop_requested);
    // Stores the state behind the last reply where the engine deferred that until the reply
    // was shown (ConversationOptions::defer_state_save); a no-op otherwise.
    virtual void store_pending_state() {}

    // The functions offered to the model for later replies (engine/generate/tool_calls.h):
    // the replies' calls then land in ChatMessage::tool_calls. Throws std::invalid_argument
    // where the engine cannot offer them (by default: any active tools).
    virtual void set_tools(const ToolOptions& tools);

    // Thinking on/off for later turns (the template's enable_thinking); `budget` < 0 keeps the
    // current budget. Throws std::invalid_argument where the engine cannot do it.
    virtual void set_thinking(bool on, int64_t budget = -1) = 0;
    // The thinking switch as last set, if any.
    virtual std::optional<bool> thinking() const = 0;
    // How hard a reasoning model thinks (gpt-oss: low, medium, high) for later turns; locally
    // the template's reasoning_effort, remotely the API's field of that name.
    virtual void set_reasoning_effort(const std::string& effort) = 0;
    // As last set; empty: the default.
    virtual std::string reasoning_effort() const = 0;
    // Tokens a reply may spend thinking; -1: unknown (a remote server decides).
    virtual int64_t thinking_budget() const { return -1; }
    // A new context size for later turns; std::invalid_argument where it cannot change.
    virtual void set_context(int64_t tokens) = 0;
    // Tokens the context holds; 0: unknown (a remote server decides).
    virtual int64_t context_size() const = 0;
    // Tokens of the context in use after the last reply (a remote one: as the server counted).
    virtual int64_t context_used() const = 0;
    // Tokens the conversation as it stands takes (after /load, --continue, /new: before any
    // of it is evaluated); by default what context_used() says. `stop` (may be null) is asked
    // while a long text is counted (a large /file); true ends the count with an exception.
    virtual int64_t context_needed(const std::function<bool()>* stop = nullptr) const {
        (void)stop;
        return context_used();
    }
    // The fewest tokens `bytes` of text can take (the vocabulary's longest entry each); 0:
    // unknown (a remote server's vocabulary).
    virtual int64_t fewest_tokens(size_t bytes) const {
        (void)bytes;
        return 0;
    }
};

// Resets `sampler` to the next seed of `seeds`, asks `engine` for the reply and records the
// seed in it: what every chat front end does for a reply.
ChatReply respond_seeded(ChatEngine& engine, Sampler& sampler, ReplySeeds& seeds,
                         const GenerateOptions& options, const TextCallback& on_text,
                         const StopRequested& stop_requested);

// The in-process engine: a Conversation (not owned) with its live inference state. /model
// rebinds it to another model's Conversation, so the front ends keep talking to this object.
class LocalChatEngine final : public ChatEngine {
public:
    explicit LocalChatEngine(Conversation& conversation) : conversation_(&conversation) {}

    const std::vector<ChatMessage>& messages() const override { return conversation_->messages(); }
    void set_system(std::string text) override { conversation_->set_system(std::move(text)); }
    void add_message(ChatMessage message) override {
        conversation_->add_message(std::move(message));
    }
    void pop_message() override { conversation_->pop_message(); }
    bool pop_assistant() override { return conversation_->pop_assistant(); }
    void clear() override { conversation_->clear(); }
    void store_pending_state() override { conversation_->store_pending_state(); }
    // Kept here as well, so a conversation rebound to (/model) offers the same tools. A
    // choice that forces a call (required, a named function) holds the reply to the call
    // grammar (tool_call_grammar), auto mode each call from its start marker on (the lazy
    // grammar), over the conversation's tool_call_trie().
    void set_tools(const ToolOptions& tools) override;
    ChatReply respond(Sampler& sampler, const GenerateOptions& options, const TextCallback& on_text,
                      const StopRequested& stop_requested) override;
    ChatReply continue_reply(Sampler& sampler, const GenerateOptions& options,
                             const TextCallback& on_text,
                             const StopRequested& stop_requested) override;
    int64_t thinking_budget() const override {
        return conversation_->options().max_thinking_tokens;
    }
    void set_thinking(bool on, int64_t budget) override { conversation_->set_thinking(on, budget); }
    std::optional<bool> thinking() const override;
    void set_reasoning_effort(const std::string& effort) override {
        conversation_->set_template_var("reasoning_effort", effort);
    }
    std::string reasoning_effort() const override;
    void set_context(int64_t tokens) override { conversation_->set_context(tokens); }
    int64_t context_size() const override { return conversation_->options().context; }
    int64_t context_used() const override {
        return static_cast<int64_t>(conversation_->cached_tokens().size());
    }
    // The conversation rendered and tokenized as the next turn's prompt.
    int64_t context_needed(const std::function<bool()>* stop = nullptr) const override;
    int64_t fewest_tokens(size_t bytes) const override;

    Conversation& conversation() { return *conversation_; }
    // From now on the replies come from `conversation` (another model's, holding the same
    // messages); the caller keeps it alive while this engine uses it.
    void rebind(Conversation& conversation) {
        conversation_ = &conversation;
        call_grammar_.reset();  // the call syntax is the new model's
    }
    // Offers `conversation` (another model's, before rebind) the tools this one offers.
    // Throws (ToolError) when its model's template has no tool-call format Ember knows.
    void offer_tools_to(Conversation& conversation) const;

private:
    Conversation* conversation_;
    ToolOptions tools_;
    // The grammar calls are held to for tools_ (a forced call's, or auto mode's lazy one;
    // null: none), and building it.
    std::shared_ptr<const grammar::Grammar> call_grammar() const;
    std::shared_ptr<const grammar::Grammar> call_grammar_;
    mutable size_t longest_token_bytes_ = 0;  // fewest_tokens(); 0: not looked up yet
};

}  // namespace ember::ui
