// The generation side of `ember serve`: a parsed request as a Job, the prompt it renders to,
// the slots that run jobs and the queue before them (slots.h), compiling a job's grammars
// once it holds a slot, and running it on the slot's conversation. Nothing here writes HTTP;
// routes.h turns requests into jobs and streaming.h writes their replies.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "app/serve/api.h"
#include "app/serve/decode_batcher.h"
#include "app/serve/server.h"
#include "app/serve/slots.h"
#include "engine/generate/constrained.h"
#include "engine/generate/conversation.h"
#include "engine/generate/tool_calls.h"
#include "engine/sampling/sampler.h"

namespace ember::serve {

class FrontDoor;

// Thrown when a request's client hangs up while it waits for a slot.
struct ClientLeft {};

// The 503 of a request the stopping server cancels.
ApiError shutting_down();

// One line of the server's log (ServerOptions::log; nothing when it has none).
void log_line(const ServerOptions& options, const std::string& line);

// One generation request after parsing: what to run and how.
struct Job {
    bool chat = true;
    std::vector<ChatMessage> messages;  // chat
    std::vector<int32_t> prompt;        // the prompt's tokens (chat: as rendered)
    std::vector<std::string> stop;
    SamplingParams sampling;
    int64_t max_tokens = 0;
    bool stream = false;
    bool include_usage = false;
    bool ignore_eos = false;
    OutputFormat response_format;                       // as the request gave it
    std::shared_ptr<const grammar::Grammar> grammar;    // ... compiled (null: free text)
    ToolOptions tools;                                  // offered functions (chat)
    ToolCallFormat tool_format = ToolCallFormat::None;  // the template's, for tool_grammar
    // The grammar a reply that must call is held to (tool_choice required or a function), or
    // in auto mode the one each call is held to once it starts (null: none).
    std::shared_ptr<const grammar::Grammar> tool_grammar;
    std::string id;
    int64_t created = 0;
};

class JobRunner {
public:
    // `model`, `pool`, `store` (may be null), `options` and `http` must outlive the runner.
    // Each slot gets a Conversation with `conversation_options` and `store`.
    JobRunner(const Model& model, ThreadPool& pool, ConversationOptions conversation_options,
              PrefixStore* store, const ServerOptions& options, const FrontDoor& http);

    // The prompt's tokens as the slot will render them; checks the tools against the model's
    // tool-call format (their grammar is compiled later, by compile_grammars). Throws
    // ApiError 400 for tools or messages the template refuses.
    std::vector<int32_t> chat_prompt(const std::vector<ChatMessage>& messages, Job& job);
    // A raw completion's tokens, as `ember run` tokenizes a prompt; ApiError 400 when empty.
    std::vector<int32_t> completion_prompt(const std::string& text) const;
    // Sets the ids of the assistant messages whose text is a reply this server generated.
    void attach_reply_ids(std::vector<ChatMessage>& messages) { reply_ids_.attach(messages); }
    // Whether replies are in the harmony format (gpt-oss).
    bool harmony() const { return renderer_->harmony(); }
    // Tokens each slot's context holds.
    int64_t context() const { return conversation_options_.context; }

    // Waits for a slot for `prompt` (slots.h); ApiError 503 when too many wait or the server
    // stops, ClientLeft when the client hangs up while waiting.
    SlotLease take_slot(const std::vector<int32_t>& prompt);
    // Compiles the request's response_format and its tools' call grammar, once it holds a
    // slot: the work is one of the --parallel generations /health counts as busy, bounded by
    // --max-waiting like them, stops at the compile time limit (400), and stops when the
    // client hangs up or the server stops (the budget's cancel check polls both).
    void compile_grammars(Job& job);
    // Runs the job on a slot; `on_text` gets the reply as it is generated (false: stop).
    TurnResult generate(Job& job, SlotLease& lease, const TextCallback& on_text,
                        const ToolCallCallback& on_tool_call = {});

    SlotPoolStats stats() { return slots_->stats(); }
    DecodeBatchStats decode_stats() { return batcher_->stats(); }
    int decode_batch() const { return batcher_->max_batch(); }
    // Of the busy slots, those compiling a request's grammar.
    int compiling() const { return compiling_.load(); }
    // No slot is handed out any more; the requests waiting get 503.
    void close() { slots_->close(); }

private:
    const Model& model_;
    ConversationOptions conversation_options_;
    const ServerOptions& options_;
    const FrontDoor& http_;
    // Renders and tokenizes prompts (under its mutex); its vocabulary tries are the slots'.
    std::unique_ptr<Conversation> renderer_;
    std::mutex renderer_mutex_;
    std::unique_ptr<SlotPool> slots_;
    std::unique_ptr<DecodeBatcher> batcher_;  // the slots' one-token steps
    ReplyIds reply_ids_{1024};
    std::atomic<int> compiling_{0};  // requests compiling their grammar (each holds a slot)
};

}  // namespace ember::serve
