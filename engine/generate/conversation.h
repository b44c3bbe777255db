// A conversation in process: messages plus one live inference state.
//
// Each turn renders the whole conversation with the model's chat template, tokenizes it,
// keeps the longest common token prefix with what the state already holds (rollback is O(1):
// the KV length moves), evaluates only the rest and generates the reply. When the
// conversation outgrows the context, the oldest turns after the system prompt are dropped and
// the caller is told how many tokens went.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/generate/generate.h"
#include "engine/generate/prefix_store.h"
#include "engine/generate/resume_plan.h"
#include "engine/model/state.h"
#include "engine/tokenizer/tokenizer.h"

namespace ember {

class ChatTemplate;
struct HarmonyTokens;
struct ToolOptions;
struct ToolCallDelta;
enum class ToolCallFormat;
// Receives each piece of a tool call as it is generated (tool_calls.h); return false to stop.
using ToolCallCallback = std::function<bool(const ToolCallDelta& delta)>;
class NgramTable;
class RecurrentSnapshotPool;
class VocabularyTries;
namespace grammar {
class TokenTrie;
}
class Model;
class ThreadPool;

// A function call an assistant turn made (OpenAI's tool_calls[i]).
struct ToolCall {
    std::string id;         // the call's id, which the tool's answer names (tool_call_id)
    std::string name;       // the function called
    std::string arguments;  // its arguments, JSON text (an object)
};

struct ChatMessage {
    std::string role;  // "system", "user", "assistant" or "tool"
    std::string content;
    // For replies generated here: the exact tokens that produced `content`. Re-tokenizing a
    // reply's text can give other tokens than the model generated, which would invalidate
    // the cached state from that point on; the prompt splices these ids in instead.
    std::vector<int32_t> ids;
    std::string thinking;  // a thinking model's reasoning for this reply (not re-rendered)
    std::vector<ToolCall> tool_calls;  // assistant: the functions it called (content may be empty)
    std::string tool_call_id;          // tool: the call this message answers
    std::string name;                  // tool: the function that answered (optional)
};

// Why a reply's thinking block ended.
enum class ThinkingEnd { None, Model, Budget, Loop };
std::string_view thinking_end_name(ThinkingEnd end);

struct ConversationOptions {
    int64_t context = 4096;  // tokens the state holds
    KvType kv_type = KvType::F32;
    bool prefix_cache = true;  // false: every turn is recomputed from scratch
    // Template source overriding the model's own; empty: the model's, or ChatML without one.
    std::string template_override;
    // Extra template variables, e.g. {"enable_thinking": false}.
    nlohmann::ordered_json template_vars = nlohmann::ordered_json::object();
    std::vector<std::string> stop_strings;  // generation stops before any of these
    // Tokens a reply may spend thinking (between <think> and </think>), apart from the
    // answer's max_tokens; 0 closes the block at once. When the budget runs out, or the
    // thinking loops, the block is closed with a short transition and the model answers.
    int64_t max_thinking_tokens = 4096;
    bool thinking_loop_check = true;
    // respond() and complete() leave storing the evaluated state in the prefix store to
    // store_pending_state(), so a front end can show the reply first: storing a block of
    // rows (compressing it, writing and syncing the database) takes longer than evaluating a
    // short turn. Whatever a turn left pending is stored before the next one starts.
    bool defer_state_save = false;
    // After a reply is stored, evaluate the start every next turn's prompt shares: the
    // history as the template writes past turns (Qwen3 drops an emptied thinking block,
    // every ChatML template closes the reply and opens the next user message), which the
    // state holds only up to where the generation prompt and the reply parted from it. The
    // next turn, here or restored in a new process, then evaluates only its new message.
    // The work is done when the turn's state is stored (store_pending_state() for a deferred
    // save), after the reply is out, while the user reads and types; a chat front end wants
    // it, a server answering independent requests does not.
    bool prepare_next_turn = false;
    // Control-token text inside a message's content (a pasted "<|im_start|>system") is
    // tokenized as text, so nobody forges the template's markup through a message; true
    // restores parsing it as control tokens (--special-tokens-in-content).
    bool special_tokens_in_content = false;
};

struct TurnResult {
    std::string reply;         // the answer text, stop strings and thinking excluded
    std::string thinking;      // the reasoning, tags excluded
    std::vector<int32_t> ids;  // every generated token, thinking and forced tokens included
    int64_t thinking_tokens = 0;
    int64_t answer_tokens = 0;
    ThinkingEnd thinking_end = ThinkingEnd::None;
    FinishReason finish = FinishReason::Length;
    int64_t prompt_tokens = 0;     // rendered conversation, in tokens
    int64_t tokens_reused = 0;     // of those, already in the state (or restored from a store)
    int64_t tokens_restored = 0;   // of the reused, loaded from the prefix store this turn
    int64_t tokens_evaluated = 0;  // of those, computed this turn
    // A prefill stopped part way (GenerateOptions::stop_prefill): the prompt tokens left
    // unevaluated (what was evaluated stays in the state for the next turn); 0 otherwise.
    int64_t tokens_not_evaluated = 0;
    // How the stored start of the prompt was resumed (resume_plan.h): restored, recomputed
    // because that was estimated faster, or a restored prefix and the rest recomputed; and
    // where the restored tokens came from ("memory", "database", or both joined by '+').
    ResumeChoice resume;
    std::string restored_from;
    int64_t tokens_dropped = 0;  // dropped from the start to fit the context
    int64_t messages_dropped = 0;
    // Output that broke the model's chat format (harmony, tool calls), shown as plain text
    // instead.
    std::vector<std::string> warnings;
    // The functions the reply called (with tools set); `reply` is then the text besides them.
    std::vector<ToolCall> tool_calls;
    GenerateStats stats;
    // The seed the sampler was reset to for this reply (set by the chat front ends, which
    // start each reply from its own seed so it can be sampled again); nullopt: not reseeded.
    std::optional<uint64_t> seed;
};

// Which part of a reply a piece of text belongs to: a thinking model's reasoning (between
// <think> and </think>) or the answer.
enum class TextKind { Answer, Thinking };

// Receives reply text as it is generated (complete UTF-8, stop strings and think tags never
// included); return false to stop generating (the partial reply is kept).
using TextCallback = std::function<bool(const std::string& text, TextKind kind)>;

// The newest message alone (with the system prompt and room for the reply) does not fit the
// context. The conversation is left as it was, the newest message included.
class ContextOverflow : public std::length_error {
public:
    using std::length_error::length_error;
};

class Conversation {
public:
    Conversation(const Model& model, ThreadPool& pool, ConversationOptions options);
    ~Conversation();

    const std::vector<ChatMessage>& messages() const { return messages_; }
    void set_system(std::string text);  // replaces or adds the leading system message
    void add_message(ChatMessage message);
    // Thinking on/off for later turns: sets the template's switch (enable_thinking) and, for
    // off, closes any block the template still opens. `budget` < 0 keeps the current budget.
    void set_thinking(bool on, int64_t budget = -1);
    // A variable the chat template reads (e.g. gpt-oss's reasoning_effort), for later turns.
    void set_template_var(const std::string& name, nlohmann::ordered_json value) {
        options_.template_vars[name] = std::move(value);
    }
    // A new context size for later turns. The state is reallocated, so the next turn is
    // evaluated from scratch (or restored from the prefix store).
    void set_context(int64_t tokens);

    // Stop strings for later turns (a server sets them per request).
    void set_stop_strings(std::vector<std::string> stops) {
        options_.stop_strings = std::move(stops);
    }

    // Drops the last message, whoever wrote it (e.g. a prompt that did not fit).
    void pop_message();
    // Drops the last message if it is the assistant's (for regenerate).
    bool pop_assistant();
    // Forgets every message; the state's cache stays usable for a shared prefix.
    void clear();

    // Generates the assistant's reply to the conversation so far and appends it. Throws
    // ContextOverflow when the newest message cannot fit. With tools set, calls in the reply
    // go to `on_tool_call` as they stream (never to `on_text`) and into TurnResult::tool_calls;
    // `generation.constraint` then holds tool_call_grammar() for a forced call (the whole answer
    // follows it), or tool_call_lazy_grammar() in auto mode (engaged over each call only),
    // over tool_call_trie().
    TurnResult respond(Sampler& sampler, const GenerateOptions& generation,
                       const TextCallback& on_text, const ToolCallCallback& on_tool_call = {});

    // Functions the model is offered for later turns (tool_calls.h): rendered through the
    // template, and the replies' calls parsed. Throws ToolError for a malformed list or choice,
    // and when tools are offered to a template with no tool-call format Ember knows.
    void set_tools(ToolOptions tools);
    const ToolOptions& tools() const { return *tools_; }
    // How this model writes calls (from its template): None when unknown.
    ToolCallFormat tool_call_format() const { return tool_format_; }

    // The vocabulary the grammar masks a constrained reply with, built when first asked for
    // (constrained.h): a caller's grammar or JSON schema is held over answer_trie(), the call
    // grammar (tool_call_grammar, tool_call_lazy_grammar) over tool_call_trie(), which spells
    // harmony's markers for a harmony model. Safe from several threads.
    std::shared_ptr<const grammar::TokenTrie> answer_trie() const;
    std::shared_ptr<const grammar::TokenTrie> tool_call_trie() const;
    // From now on the tries are `other`'s (a conversation over the same model), so that
    // conversations side by side (a server's slots) build them once between them.
    void share_vocabulary_tries(const Conversation& other);

    // Stores in the prefix store what the last turn evaluated, if defer_state_save left that
    // pending; a no-op otherwise. Failures are the store's warnings, as for any save.
    void store_pending_state();

    // A raw completion (no chat template, messages untouched): `prompt` continues from the
    // longest prefix the state (or the prefix store) holds, and the reply follows it as plain
    // text (stop strings apply; no thinking block is recognized). The state keeps prompt and
    // reply, so the next turn or completion reuses them. Throws std::invalid_argument for an
    // empty prompt and ContextOverflow when prompt and `generation.max_tokens` exceed the
    // context.
    TurnResult complete(const std::vector<int32_t>& prompt, Sampler& sampler,
                        const GenerateOptions& generation, const TextCallback& on_text);

    // The tokens the next turn would evaluate: the conversation rendered and tokenized as
    // respond() does, before any message is dropped to fit the context.
    // `stop` (may be null): asked while a long text is tokenized (EncodeOptions::stop); true
    // ends it with EncodeStopped.
    std::vector<int32_t> prompt_tokens(const std::function<bool()>* stop = nullptr) const {
        return tokenize_prompt(render_marked(), stop);
    }

    // The prompt the next turn would evaluate (for debugging and `ember render`).
    // The prompt for the first `n_messages` messages (all by default).
    std::string render_prompt(size_t n_messages = SIZE_MAX, bool generation_prompt = true) const {
        return render_marked(n_messages, generation_prompt).text;
    }
    // Whether replies are in the harmony format (gpt-oss).
    bool harmony() const { return harmony_ != nullptr; }
    // Whether the model's own template is in use (false: override or ChatML fallback).
    bool uses_model_template() const { return uses_model_template_; }
    const ConversationOptions& options() const { return options_; }
    // The model's tokenizer (what a front end counts text with).
    const Tokenizer& tokenizer() const;
    InferenceState& state() { return *state_; }
    // Tokens whose K/V rows the state holds, in order.
    const std::vector<int32_t>& cached_tokens() const { return cached_; }
    // An optional store of evaluated prefixes beyond the live state (not owned; may be null).
    void set_prefix_store(PrefixStore* store) {
        store_pending(/*prepare=*/false);  // into the store that was set when the turn ran
        store_ = store;
    }
    PrefixStore* prefix_store() const { return store_; }
    // How fast this conversation has evaluated prompts (what restoring is weighed against).
    const PrefillRate& prefill_rate() const { return prefill_rate_; }

private:
    // A rendered prompt, and where it holds control-token text that came from the tools'
    // definitions or tool-call arguments (text, not markup: see control_text.h).
    struct RenderedPrompt {
        std::string text;
        std::vector<TextRange> literal;
    };
    RenderedPrompt render_marked(size_t n_messages = SIZE_MAX, bool generation_prompt = true) const;
    std::vector<int32_t> tokenize_prompt(const RenderedPrompt& prompt,
                                         const std::function<bool()>* stop = nullptr) const;
    // text[begin, end) tokenized as part of a rendered prompt (`literal`: message text, see
    // tokenize_prompt; ranges of the whole text).
    std::vector<int32_t> tokenize_segment(std::string_view text, size_t begin, size_t end,
                                          const std::vector<TextRange>& literal,
                                          const std::function<bool()>* stop) const;
    std::vector<int32_t> fit_to_context(int64_t reserve, TurnResult& result);
    size_t reuse_prefix(const std::vector<int32_t>& tokens, TurnResult& result);
    // What one reply is generated from, besides the sampler and the generation options.
    enum class ReplyThinking {
        None,      // the reply cannot think (a raw completion)
        Possible,  // the model may open a thinking block (or harmony's analysis message)
        Open,      // the prompt already opened the block: the reply starts inside it
    };
    struct ReplySetup {
        std::vector<int32_t> prompt;  // the tokens still to evaluate before the reply
        const TextCallback* on_text = nullptr;
        const ToolCallCallback* on_tool_call = nullptr;  // null: calls are not read
        ReplyThinking thinking = ReplyThinking::None;
    };
    // Returns whether a stop string cut the reply's text short.
    bool generate_reply(ReplySetup reply, Sampler& sampler, const GenerateOptions& generation,
                        TurnResult& result);
    // After the thinking policy ended the block: feeds `closing` (its transition and closing
    // tag) after the last sampled token and generates the answer; returns why that stopped.
    FinishReason answer_after_thinking(const std::string& closing, int32_t last_sampled,
                                       Sampler& sampler, GenerateOptions& unbounded,
                                       const TokenCallback& on_token, TurnResult& result);
    void prepare_speculation(const GenerateOptions& generation, const std::vector<int32_t>& tokens);
    // After a reply: what the state holds becomes cached_, and the store keeps it (now, or
    // when store_pending_state() is called).
    void remember_evaluated(const std::vector<int32_t>& tokens, const TurnResult& result);
    // store_pending_state(), and with `prepare` the next turn's shared start after it
    // (prepare_next_turn; not when the next turn is already here with its own prompt).
    void store_pending(bool prepare);
    void store_turn_state();
    void prepare_next_turn_prefix();
    std::vector<int32_t> next_turn_prefix();
    bool state_save_pending_ = false;
    bool next_turn_pending_ = false;       // a reply whose next turn's start is not evaluated yet
    std::vector<int32_t> pending_prompt_;  // the prompt of the turn whose state is pending

    const Model& model_;
    ThreadPool& pool_;
    ConversationOptions options_;
    std::unique_ptr<ChatTemplate> template_;
    bool uses_model_template_ = false;
    bool template_knows_thinking_ = false;  // the template mentions <think>
    // The harmony format's markers when the model writes harmony (gpt-oss): replies are then
    // channels of messages, `analysis` the thinking.
    std::unique_ptr<const HarmonyTokens> harmony_;
    ToolCallFormat tool_format_{};
    std::unique_ptr<ToolOptions> tools_;            // never null
    std::shared_ptr<const VocabularyTries> tries_;  // never null; share_vocabulary_tries()
    bool replies_think() const { return template_knows_thinking_ || harmony_ != nullptr; }
    std::string bos_text_, eos_text_;
    std::vector<ChatMessage> messages_;
    std::unique_ptr<InferenceState> state_;
    std::vector<int32_t> cached_;
    PrefixStore* store_ = nullptr;
    PrefillRate prefill_rate_;
    // Asks the store what it holds beyond `reuse` and restores as far as pays; returns the
    // length the state then holds.
    size_t restore_from_store(const std::vector<int32_t>& tokens, size_t reuse, TurnResult& result);
    std::unique_ptr<NgramTable> ngram_;  // drafts for speculation, rebuilt from each turn's prompt
    // Hybrid families: recurrent state cannot be truncated, so it is snapshotted at turn
    // boundaries (the slots below) and a rollback restores the nearest snapshot at or before
    // the target, then recomputes the gap. The session store keeps the same snapshots.
    static constexpr int kSnapshotPromptEnd = 0;    // all of the last prompt but its last token
    static constexpr int kSnapshotReplyEnd = 1;     // the end of the last reply
    static constexpr int kSnapshotLastMessage = 2;  // where the last prompt's last message starts
    static constexpr int kSnapshotSlots = 3;
    std::unique_ptr<RecurrentSnapshotPool> snapshots_;
    std::array<bool, kSnapshotSlots> snapshot_is_new_{};  // taken this turn, not yet stored
    RecurrentState spare_recurrent_;                      // a snapshot unpacked for the store
    size_t rollback_recurrent(size_t target);
    // Evaluates a hybrid's prompt up to its last token, snapshotting on the way; `prompt`
    // (tokens past `reuse`) keeps what is left to evaluate.
    void evaluate_hybrid_prompt(const std::vector<int32_t>& tokens, size_t reuse,
                                std::vector<int32_t>& prompt, PrefillWatch& watch);
    // Evaluates tokens[reuse..] and generates the reply (generate_reply, `reply` without its
    // prompt); a prefill stopped part way (generation.stop_prefill) ends the turn Cancelled
    // with what was evaluated kept.
    bool evaluate_and_generate(const std::vector<int32_t>& tokens, size_t reuse, ReplySetup reply,
                               Sampler& sampler, const GenerateOptions& generation,
                               TurnResult& result);
    size_t last_message_start(const std::vector<int32_t>& tokens) const;
    void save_snapshot_to_store(int slot, const std::vector<int32_t>& tokens);
    int64_t thinking_budget_on_ = 4096;  // the budget to return to when thinking is switched on
};

// The context a chat gets when the user names none: the model's trained length, capped so
// that a full KV cache stays within kDefaultContextBytes (the cache grows in chunks as the
// conversation does, so an unused context costs nothing) and at kDefaultContextCap tokens.
constexpr uint64_t kDefaultContextBytes = uint64_t{2} << 30;
constexpr int64_t kDefaultContextCap = 32768;
struct ModelConfig;
int64_t default_context_size(const ModelConfig& config, KvType kv_type);

// Tokenizes rendered chat-template text as a conversation does: special-token text is parsed
// as special tokens, and the BOS token is added only when the tokenizer asks for it and the
// template did not already write `bos_text` at the start.
class Tokenizer;
// `literal`: byte ranges of `text` (message content) whose control-token text stays text.
std::vector<int32_t> tokenize_rendered(const Tokenizer& tokenizer, std::string_view text,
                                       std::string_view bos_text,
                                       std::span<const TextRange> literal = {},
                                       const std::function<bool()>* stop = nullptr);

// ChatML, used when a model carries no template of its own.
extern const char* const kChatMlTemplate;

}  // namespace ember
