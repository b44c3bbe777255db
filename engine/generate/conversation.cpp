#include "engine/generate/conversation.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include "engine/generate/constrained.h"
#include "engine/generate/control_text.h"
#include "engine/generate/default_template.h"
#include "engine/generate/harmony.h"
#include "engine/generate/ngram.h"
#include "engine/generate/reply_router.h"
#include "engine/generate/thinking_policy.h"
#include "engine/generate/tool_calls.h"
#include "engine/grammar/token_mask.h"
#include "engine/model/compute_device.h"
#include "engine/model/forward.h"
#include "engine/model/model.h"
#include "engine/model/recurrent_state.h"
#include "engine/template/template.h"
#include "engine/tokenizer/tokenizer.h"

namespace ember {

std::string_view thinking_end_name(ThinkingEnd end) {
    switch (end) {
        case ThinkingEnd::None:
            return "none";
        case ThinkingEnd::Model:
            return "model";
        case ThinkingEnd::Budget:
            return "budget";
        case ThinkingEnd::Loop:
            return "loop";
    }
    return "unknown";
}

namespace {

// How many leading tokens `a` and `b` have in common.
size_t shared_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
    const size_t n = std::min(a.size(), b.size());
    return static_cast<size_t>(
        std::mismatch(a.begin(), a.begin() + static_cast<ptrdiff_t>(n), b.begin()).first -
        a.begin());
}

std::string token_text_or_empty(const Tokenizer& tok, TokenId id) {
    return id == kNoToken ? std::string() : tok.token_to_piece(id, /*render_special=*/true);
}

bool prompt_opens_thinking(const std::string& text) {
    const size_t end = text.find_last_not_of(" \t\r\n");
    return end != std::string::npos && end + 1 >= 7 && text.compare(end + 1 - 7, 7, "<think>") == 0;
}

// One interface over the two ways a reply marks its thinking: <think> tags in the text
// (ReplyRouter, fed detokenized text) or harmony messages (HarmonyRouter, fed the ids).
class ReplyStream {
public:
    ReplyStream(const Tokenizer& tok, const HarmonyTokens* harmony,
                const std::vector<std::string>& stops, bool thinking_possible,
                bool starts_in_thinking, bool starts_in_final, bool stop_at_end,
                const TextCallback& on_text)
        : detok_(tok, DecodeOptions{.skip_special = true, .strip_leading_space = false}),
          on_text_(on_text) {
        // Answer text passes through the tool-call parser when there is one.
        answer_filter_ = [this](const std::string& text, TextKind kind) {
            if (kind == TextKind::Thinking || !calls_) return !on_text_ || on_text_(text, kind);
            calls_->push(text);
            return !calls_->cancelled();
        };
        if (harmony != nullptr) {
            harmony_.emplace(tok, *harmony, stops, starts_in_final, stop_at_end, on_text);
        } else {
            think_.emplace(stops, thinking_possible, starts_in_thinking, answer_filter_);
        }
    }
    // Calls in the reply are read in `format` and handed to `on_call` (which must outlive
    // the stream) rather than shown as text.
    void enable_tool_calls(ToolCallFormat format, const ToolOptions& tools,
                           const ToolCallCallback& on_call) {
        std::vector<std::string> names = tool_names(tools.tools);
        if (harmony_) {
            // A call's start engages the lazy constraint (auto mode) for its arguments.
            call_relay_ = [this, &on_call](const ToolCallDelta& delta) {
                if (lazy_ != nullptr && !delta.name.empty()) lazy_->on_call_start(delta.name);
                return !on_call || on_call(delta);
            };
            harmony_->enable_tool_calls(std::move(names), call_relay_);
            return;
        }
        ToolCallParser::Options options;
        options.names = std::move(names);
        // Llama 3's template renders one call per assistant turn.
        if (!tools.parallel || format == ToolCallFormat::Llama3) options.max_calls = 1;
        calls_.emplace(
            format, std::move(options),
            [this](const std::string& text) {
                return !on_text_ || on_text_(text, TextKind::Answer);
            },
            on_call);
    }
    // The answer's text goes to `lazy` too, which engages its constraint where a call starts.
    void set_lazy_constraint(LazyToolConstraint* lazy) { lazy_ = lazy; }
    void push(int32_t id) {
        if (harmony_) {
            harmony_->push(id);
            return;
        }
        const ReplyRouter::Phase before = think_->phase();
        const std::string piece = detok_.push(id);
        think_->push(piece);
        if (lazy_ != nullptr && before != ReplyRouter::Phase::Thinking &&
            think_->phase() == ReplyRouter::Phase::Answer) {
            lazy_->on_answer_text(piece);
        }
    }
    // The generated text is complete (no more tokens follow).
    void finish() {
        if (harmony_) {
            harmony_->finish();
            return;
        }
        if (!think_->stopped_by_string()) think_->push(detok_.flush());
        think_->finish();
        if (calls_) calls_->finish();
    }
    // Ends a thinking block cut short; returns the text to feed the model after the last token.
    std::string force_end_thinking(const std::string& transition) {
        if (harmony_) {
            harmony_->force_end_thinking(transition);
            return transition + kHarmonyCloseAnalysis;
        }
        think_->push(detok_.flush());
        think_->force_end_thinking(transition);
        return transition + "</think>\n\n";
    }
    ReplyRouter::Phase phase() const { return harmony_ ? harmony_->phase() : think_->phase(); }
    // The reply ended: a stop string, the format's end of the reply (harmony), or the one call
    // a reply may make is complete.
    bool done() const {
        if (harmony_) return harmony_->done();
        return think_->stopped_by_string() || (calls_ && calls_->done());
    }
    bool stopped_by_string() const {
        return harmony_ ? harmony_->stopped_by_string() : think_->stopped_by_string();
    }
    bool cancelled() const {
        if (harmony_) return harmony_->cancelled();
        return think_->cancelled() || (calls_ && calls_->cancelled());
    }
    const std::string& answer() const {
        if (harmony_) return harmony_->answer();
        return calls_ ? calls_->content() : think_->answer();
    }
    const std::string& thinking() const {
        return harmony_ ? harmony_->thinking() : think_->thinking();
    }
    std::vector<std::string> warnings() const {
        if (harmony_) return harmony_->warnings();
        return calls_ ? calls_->warnings() : std::vector<std::string>{};
    }
    std::vector<ToolCall> tool_calls() const {
        if (harmony_) return harmony_->tool_calls();
        return calls_ ? calls_->calls() : std::vector<ToolCall>{};
    }

private:
    StreamingDetokenizer detok_;
    const TextCallback& on_text_;
    TextCallback answer_filter_;
    std::optional<ToolCallParser> calls_;
    std::optional<ReplyRouter> think_;
    std::optional<HarmonyRouter> harmony_;
    ToolCallCallback call_relay_;  // harmony's calls, through the lazy constraint's trigger
    LazyToolConstraint* lazy_ = nullptr;
};

// Samples the answer through generation.constraint; the reasoning stays free. Before the reply
// has shown which it starts with, the grammar holds, and a thinking model (`thinking_tokenizer`
// set) may still open its block. With `lazy`, only the tool calls in the answer are held.
void constrain_answer(GenerateOptions& unbounded, ReplyStream& router,
                      const GenerateOptions& generation, const Tokenizer* thinking_tokenizer,
                      LazyToolConstraint* lazy, const TurnResult& result) {
    if (lazy != nullptr) {
        unbounded.constrain_now = [&router, lazy] {
            return router.phase() != ReplyRouter::Phase::Thinking && lazy->engaged();
        };
    } else {
        const std::optional<int32_t> open_tag =
            thinking_tokenizer ? thinking_tokenizer->find_token("<think>") : std::nullopt;
        unbounded.constrain_now = [&router, &generation, open_tag] {
            const ReplyRouter::Phase phase = router.phase();
            generation.constraint->set_extra_allowed(
                phase == ReplyRouter::Phase::Undecided && open_tag ? *open_tag : -1);
            return phase != ReplyRouter::Phase::Thinking;
        };
    }
    unbounded.tokens_left = [&generation, &result] {
        return generation.max_tokens < 0 ? -1 : generation.max_tokens - result.answer_tokens - 1;
    };
}

// Takes each generated token as the thinking's (the policy may end the block) or the
// answer's, counts it in the turn's result and says whether generation goes on: not after the
// reply's end, the policy's end of the thinking or the answer's own limit (thinking does not
// count against it).
class ReplyTally {
public:
    ReplyTally(ReplyStream& router, ThinkingPolicy& thinking, int64_t max_answer_tokens,
               TurnResult& result)
        : router_(router), thinking_(thinking), max_answer_(max_answer_tokens), result_(result) {}

    bool take(int32_t id) {
        const bool was_thinking = router_.phase() == ReplyRouter::Phase::Thinking;
        router_.push(id);
        const bool thinking_now = router_.phase() == ReplyRouter::Phase::Thinking;
        if (was_thinking || thinking_now) {
            ++result_.thinking_tokens;
            thinking_.count(id);
            if (was_thinking && !thinking_now) result_.thinking_end = ThinkingEnd::Model;
        } else {
            ++result_.answer_tokens;
        }
        if (router_.done() || router_.cancelled()) return false;
        if (thinking_now) return !thinking_.must_end_now();
        answer_full_ = max_answer_ >= 0 && result_.answer_tokens >= max_answer_;
        return !answer_full_;
    }
    // The answer reached its limit (max_tokens).
    bool answer_full() const { return answer_full_; }

private:
    ReplyStream& router_;
    ThinkingPolicy& thinking_;
    int64_t max_answer_;
    TurnResult& result_;
    bool answer_full_ = false;
};

// `text` (control-token text parsed as such) tokenized, for markup Ember writes into a reply.
std::vector<int32_t> encode_markup(const Tokenizer& tok, std::string_view text) {
    EncodeOptions special;
    special.parse_special = true;
    return tok.encode(text, special);
}

}  // namespace

Conversation::Conversation(const Model& model, ThreadPool& pool, ConversationOptions options)
    : model_(model), pool_(pool), options_(std::move(options)) {
    std::string source = options_.template_override;
    if (source.empty()) {
        ChatTemplateChoice choice = choose_chat_template(model_.gguf(), model_.tokenizer());
        source = std::move(choice.source);
        uses_model_template_ = choice.from_file;
    }
    template_knows_thinking_ = source.find("<think>") != std::string::npos;
    template_ = std::make_unique<ChatTemplate>(source);
    const Tokenizer& tok = model_.tokenizer();
    // Harmony when the template writes its channels and the vocabulary has its markers.
    if (source.find("<|channel|>") != std::string::npos) {
        if (auto markers = HarmonyTokens::find(tok)) {
            harmony_ = std::make_unique<const HarmonyTokens>(*markers);
        }
    }
    tool_format_ = detect_tool_call_format(source, harmony_ != nullptr);
    tools_ = std::make_unique<ToolOptions>();
    tries_ = std::make_shared<const VocabularyTries>(tok);
    bos_text_ = token_text_or_empty(tok, tok.bos_id());
    eos_text_ = token_text_or_empty(tok, tok.eos_id());
    state_ = make_state(model_.config(), options_.context, options_.kv_type);
    // A GPU evaluates prompts tens of times faster than a CPU: restoring must beat that.
    if (const ComputeDevice* device = model_.device()) {
        prefill_rate_ = PrefillRate(device->assumed_prefill_tokens_per_second());
    }
    if (options_.max_thinking_tokens > 0) thinking_budget_on_ = options_.max_thinking_tokens;
}

Conversation::~Conversation() = default;

void Conversation::set_system(std::string text) {
    if (!messages_.empty() && messages_.front().role == "system") {
        messages_.front().content = std::move(text);
    } else {
        messages_.insert(messages_.begin(), ChatMessage{"system", std::move(text), {}});
    }
}

void Conversation::add_message(ChatMessage message) {
    messages_.push_back(std::move(message));
}

void Conversation::set_thinking(bool on, int64_t budget) {
    if (budget >= 0) thinking_budget_on_ = budget;
    options_.template_vars["enable_thinking"] = on;
    options_.max_thinking_tokens = on ? thinking_budget_on_ : 0;
}

void Conversation::set_context(int64_t tokens) {
    if (tokens < 16) throw std::invalid_argument("the context must hold at least 16 tokens");
    if (tokens > model_.config().n_ctx_train) {
        throw std::invalid_argument("the model was trained for " +
                                    std::to_string(model_.config().n_ctx_train) +
                                    " tokens at most");
    }
    store_pending(/*prepare=*/false);  // the old state goes
    state_ = make_state(model_.config(), tokens, options_.kv_type);
    options_.context = tokens;
    cached_.clear();
}

void Conversation::pop_message() {
    if (!messages_.empty()) messages_.pop_back();
}

bool Conversation::pop_assistant() {
    if (messages_.empty() || messages_.back().role != "assistant") return false;
    messages_.pop_back();
    return true;
}

void Conversation::clear() {
    messages_.clear();
}

void Conversation::set_tools(ToolOptions tools) {
    validate_tool_options(tools);
    if (tools.active() && tool_format_ == ToolCallFormat::None) {
        throw ToolError(
            "this model's chat template has no tool-call format Ember knows (Qwen3/"
            "Hermes <tool_call>, Llama 3 JSON, gpt-oss harmony, Gemma 3)",
            "tools");
    }
    *tools_ = std::move(tools);
}

std::shared_ptr<const grammar::TokenTrie> Conversation::answer_trie() const {
    return tries_->plain();
}

std::shared_ptr<const grammar::TokenTrie> Conversation::tool_call_trie() const {
    // Harmony's calls are spelled with its markers (harmony_sentinel); the other formats'
    // calls are text, and their replies end at the vocabulary's end tokens.
    return tool_format_ == ToolCallFormat::Harmony ? tries_->harmony() : tries_->plain();
}

void Conversation::share_vocabulary_tries(const Conversation& other) {
    if (&other.model_ != &model_) {
        throw std::invalid_argument("vocabulary tries are shared only over the same model");
    }
    tries_ = other.tries_;
}

Conversation::RenderedPrompt Conversation::render_marked(size_t n_messages,
                                                         bool generation_prompt) const {
    std::span<const ChatMessage> messages(messages_.data(), std::min(n_messages, messages_.size()));
    const ToolOptions* tools = tools_.get();
    // Control-token text in the tools' definitions and in replayed calls stays text, as in
    // content (unless --special-tokens-in-content): masked before rendering, restored after.
    ControlTextMask mask(model_.tokenizer());
    ToolOptions masked_tools;
    std::vector<ChatMessage> masked_messages;
    if (!options_.special_tokens_in_content) {
        if (tools->active()) {
            masked_tools = *tools;
            if (mask.mask(masked_tools.tools)) tools = &masked_tools;
        }
        for (size_t i = 0; i < messages.size(); ++i) {
            for (size_t c = 0; c < messages[i].tool_calls.size(); ++c) {
                ToolCall call = messages[i].tool_calls[c];
                const bool name = mask.mask(call.name);
                if (!(mask.mask(call.arguments) || name)) continue;
                if (masked_messages.empty()) {
                    masked_messages.assign(messages.begin(), messages.end());
                }
                masked_messages[i].tool_calls[c] = std::move(call);
            }
        }
        if (!masked_messages.empty()) messages = masked_messages;
    }
    ChatTemplateInputs in;
    TemplateMessages rendered = template_messages(messages, tool_format_, tools);
    in.messages = std::move(rendered.messages);
    in.tools = std::move(rendered.tools);
    in.add_generation_prompt = generation_prompt;
    in.bos_token = bos_text_;
    in.eos_token = eos_text_;
    in.extra = options_.template_vars;
    std::string text = template_->render(in);
    if (!mask.used()) return {std::move(text), {}};
    if (auto restored = mask.restore(text)) {
        return {std::move(restored->text), std::move(restored->literal)};
    }
    // The template rewrote a placeholder (it changes the case of descriptions, say): render
    // the data as it is, its control-token text then tokenized as the template's markup is.
    ChatTemplateInputs plain = std::move(in);
    TemplateMessages original = template_messages(
        std::span<const ChatMessage>(messages_.data(), std::min(n_messages, messages_.size())),
        tool_format_, tools_.get());
    plain.messages = std::move(original.messages);
    plain.tools = std::move(original.tools);
    return {template_->render(plain), {}};
}

int64_t default_context_size(const ModelConfig& c, KvType kv_type) {
    // Bytes of one position's K and V rows in every layer, in the cache's type (q8_0: whole
    // blocks of 34 bytes per 32 elements).
    const uint64_t per_token =
        static_cast<uint64_t>(c.n_layer * (kv_row_bytes(kv_type, c.n_head_kv * c.head_dim) +
                                           kv_row_bytes(kv_type, c.n_head_kv * c.value_dim)));
    const int64_t by_memory =
        per_token > 0 ? static_cast<int64_t>(kDefaultContextBytes / per_token) : kDefaultContextCap;
    return std::max<int64_t>(16, std::min({c.n_ctx_train > 0 ? c.n_ctx_train : kDefaultContextCap,
                                           kDefaultContextCap, by_memory}));
}

std::vector<int32_t> tokenize_rendered(const Tokenizer& tok, std::string_view text,
                                       std::string_view bos_text,
                                       std::span<const TextRange> literal,
                                       const std::function<bool()>* stop) {
    EncodeOptions enc;
    enc.parse_special = true;
    enc.literal = literal;
    enc.stop = stop;
    // Templates usually write the BOS text themselves; add it only when they do not.
    enc.add_bos = tok.add_bos() && tok.bos_id() != kNoToken &&
                  (bos_text.empty() || !text.starts_with(bos_text));
    return tok.encode(text, enc);
}

const Tokenizer& Conversation::tokenizer() const {
    return model_.tokenizer();
}

std::vector<int32_t> Conversation::tokenize_segment(std::string_view text, size_t begin, size_t end,
                                                    const std::vector<TextRange>& literal,
                                                    const std::function<bool()>* stop) const {
    // The literal ranges inside [begin, end), relative to begin.
    std::vector<TextRange> inside;
    for (const TextRange& r : literal) {
        const size_t b = std::max(r.begin, begin), e = std::min(r.end, end);
        if (b < e) inside.push_back({b - begin, e - begin});
    }
    const std::string_view segment = text.substr(begin, end - begin);
    const Tokenizer& tok = model_.tokenizer();
    if (begin == 0) return tokenize_rendered(tok, segment, bos_text_, inside, stop);
    EncodeOptions enc;
    enc.parse_special = true;
    enc.literal = inside;
    enc.stop = stop;
    return tok.encode(segment, enc);
}

namespace {

// Where message text `content` stands in the rendered prompt from `cursor` on: as written, or
// trimmed of surrounding whitespace (templates such as Gemma's trim each message).
std::pair<size_t, size_t> find_content(std::string_view text, std::string_view content,
                                       size_t cursor) {
    if (const size_t at = text.find(content, cursor); at != std::string_view::npos) {
        return {at, content.size()};
    }
    constexpr std::string_view kSpace = " \t\n\r\f\v";
    const size_t first = content.find_first_not_of(kSpace);
    if (first == std::string_view::npos) return {std::string_view::npos, 0};
    const std::string_view trimmed =
        content.substr(first, content.find_last_not_of(kSpace) - first + 1);
    return {text.find(trimmed, cursor), trimmed.size()};
}

}  // namespace

std::vector<int32_t> Conversation::tokenize_prompt(const RenderedPrompt& prompt,
                                                   const std::function<bool()>* stop) const {
    // Where a generated reply appears verbatim in the rendered text, use its own tokens and
    // tokenize only the text around it. Every message is located in order (the search
    // cursor moves past each one), so a short reply cannot match inside an earlier message.
    // A message's text is text: where it spells a control token (a pasted "<|im_end|>") that
    // stays text, so a user cannot forge the template's markup (a system turn, the end of their
    // own); only the template's own markup around it is special. A message the template
    // rewrote beyond trimming cannot be located and is tokenized with the markup. The control-
    // token text render_marked() found in tools and calls is text too.
    const std::string& text = prompt.text;
    struct Located {
        size_t at, end;
        const ChatMessage* message;  // a reply with its own tokens
    };
    std::vector<Located> replies;
    std::vector<TextRange> literal = prompt.literal;
    size_t cursor = 0;  // where the next message's search starts
    for (const auto& m : messages_) {
        if (m.content.empty()) continue;
        const auto [at, length] = find_content(text, m.content, cursor);
        if (at == std::string::npos) continue;
        cursor = at + length;
        if (m.ids.empty()) {
            if (!options_.special_tokens_in_content) literal.push_back({at, cursor});
        } else {
            replies.push_back({at, cursor, &m});
        }
    }
    literal = merge_ranges(std::move(literal));
    std::vector<int32_t> out;
    size_t pending = 0;  // start of the text not yet tokenized
    for (const Located& r : replies) {
        auto seg = tokenize_segment(text, pending, r.at, literal, stop);
        out.insert(out.end(), seg.begin(), seg.end());
        out.insert(out.end(), r.message->ids.begin(), r.message->ids.end());
        pending = r.end;
    }
    auto rest = tokenize_segment(text, pending, text.size(), literal, stop);
    out.insert(out.end(), rest.begin(), rest.end());
    return out;
}

std::vector<int32_t> Conversation::fit_to_context(int64_t reserve, TurnResult& result) {
    std::vector<int32_t> tokens = tokenize_prompt(render_marked());
    const int64_t full = static_cast<int64_t>(tokens.size());
    const size_t first_droppable = !messages_.empty() && messages_[0].role == "system" ? 1 : 0;
    std::vector<ChatMessage> kept;  // the messages as they were, should nothing fit
    while (static_cast<int64_t>(tokens.size()) + reserve > options_.context) {
        // Keep the system prompt and the newest message; drop the oldest turn in between.
        if (messages_.size() <= first_droppable + 1) {
            if (!kept.empty()) messages_ = std::move(kept);
            throw ContextOverflow("the prompt needs " + std::to_string(tokens.size()) +
                                  " tokens (plus " + std::to_string(reserve) +
                                  " for the reply), more than the context of " +
                                  std::to_string(options_.context));
        }
        if (kept.empty()) kept = messages_;
        messages_.erase(messages_.begin() + static_cast<std::ptrdiff_t>(first_droppable));
        ++result.messages_dropped;
        tokens = tokenize_prompt(render_marked());
    }
    result.tokens_dropped = full - static_cast<int64_t>(tokens.size());
    return tokens;
}

size_t Conversation::rollback_recurrent(size_t target) {
    if (state_->recurrent.position() == static_cast<int64_t>(target)) return target;
    // The nearest snapshot at or before the target; none: start over.
    int best = -1;
    for (int slot = 0; snapshots_ && slot < snapshots_->slots(); ++slot) {
        const int64_t at = snapshots_->position(slot);
        if (at >= 0 && at <= static_cast<int64_t>(target) &&
            (best < 0 || at > snapshots_->position(best))) {
            best = slot;
        }
    }
    if (best < 0) {
        state_->recurrent.reset();
        return 0;
    }
    snapshots_->restore(best, state_->recurrent);
    return static_cast<size_t>(snapshots_->position(best));
}

void Conversation::save_snapshot_to_store(int slot, const std::vector<int32_t>& tokens) {
    // The KV rows up to the snapshot are still in the cache; the snapshot's recurrent state is
    // swapped in for the call. Done after the reply, so it costs the user no latency.
    const int64_t at = snapshots_->position(slot);
    if (at <= 0 || at > static_cast<int64_t>(tokens.size()) || at > state_->kv.length()) return;
    if (spare_recurrent_.empty()) spare_recurrent_ = state_->recurrent;
    snapshots_->restore(slot, spare_recurrent_);
    std::swap(state_->recurrent, spare_recurrent_);
    store_->save(std::span<const int32_t>(tokens.data(), static_cast<size_t>(at)), *state_);
    std::swap(state_->recurrent, spare_recurrent_);
}

size_t Conversation::last_message_start(const std::vector<int32_t>& tokens) const {
    if (messages_.size() < 2) return 0;
    try {
        const std::vector<int32_t> before =
            tokenize_prompt(render_marked(messages_.size() - 1, false));
        size_t n = 0;
        while (n < before.size() && n < tokens.size() && before[n] == tokens[n]) ++n;
        return n;
    } catch (const std::exception&) {
        return 0;  // a template that cannot render the earlier messages alone: no split
    }
}

void Conversation::evaluate_hybrid_prompt(const std::vector<int32_t>& tokens, size_t reuse,
                                          std::vector<int32_t>& prompt, PrefillWatch& watch) {
    const size_t first = tokens.size() - prompt.size();  // where this turn's evaluation starts
    if (!snapshots_) {
        snapshots_ = std::make_unique<RecurrentSnapshotPool>();
        snapshots_->init(state_->recurrent, kSnapshotSlots);
    }
    // A snapshot past the reused prefix may lie on another path (an edited message, a
    // retry): only those at or before it still describe these tokens.
    for (int slot = 0; slot < kSnapshotSlots; ++slot) {
        if (snapshots_->position(slot) > static_cast<int64_t>(reuse)) snapshots_->forget(slot);
    }
    snapshot_is_new_.fill(false);
    // Evaluates the prompt up to `end` and snapshots there. A snapshot of state that was
    // restored rather than evaluated is kept in memory but not stored again.
    auto snapshot_at = [&](size_t end, int slot) {
        const size_t at = tokens.size() - prompt.size();
        if (end > at) {
            // A stop (EvaluationStopped) leaves the state at the end of a whole batch.
            forward(model_, *state_, pool_, std::span<const int32_t>(prompt.data(), end - at),
                    LogitsWanted::Last, watch.at(static_cast<int64_t>(at - first)));
            prompt.erase(prompt.begin(), prompt.begin() + static_cast<ptrdiff_t>(end - at));
            snapshot_is_new_[static_cast<size_t>(slot)] = true;
        }
        snapshots_->save(slot, state_->recurrent);
    };
    // Where the last message starts: another conversation with the same system prompt, or
    // this one with its last message edited or retried, resumes from there.
    const size_t split = last_message_start(tokens);
    if (split > reuse && split + 1 < tokens.size()) snapshot_at(split, kSnapshotLastMessage);
    // All but the last prompt token (generation evaluates that one): the end of this prompt
    // is where the next turn's prompt most likely departs from this one.
    snapshot_at(tokens.size() - 1, kSnapshotPromptEnd);
}

size_t Conversation::reuse_prefix(const std::vector<int32_t>& tokens, TurnResult& result) {
    size_t reuse = 0;
    if (options_.prefix_cache) {
        reuse = shared_prefix(cached_, tokens);
        // At least one token must be evaluated to get logits for the first reply token.
        if (reuse == tokens.size()) --reuse;
        if (!state_->recurrent.empty()) reuse = rollback_recurrent(reuse);
        // A cut behind a sliding layer's window (gemma3) lost rows the window needs: start
        // over, and let the store restore what it can.
        if (!state_->kv.can_resume_at(static_cast<int64_t>(reuse))) reuse = 0;
        state_->kv.set_length(static_cast<int64_t>(reuse));
        cached_.resize(reuse);
        // Hybrids restore only to a stored snapshot of their recurrent state (the store
        // checks), so `restored` is then always a turn's prompt or reply end.
        if (store_ != nullptr) reuse = restore_from_store(tokens, reuse, result);
        // At least one token must be evaluated to get logits for the first reply token.
        if (reuse == tokens.size()) --reuse;
    }
    // A restore that failed part way may have overwritten ring rows the kept prefix needed.
    if (!state_->kv.can_resume_at(static_cast<int64_t>(reuse))) reuse = 0;
    if (!state_->recurrent.empty() && reuse == 0) state_->recurrent.reset();
    state_->kv.set_length(static_cast<int64_t>(reuse));
    cached_.resize(reuse);
    result.tokens_reused = static_cast<int64_t>(reuse);
    result.tokens_evaluated = static_cast<int64_t>(tokens.size() - reuse);
    return reuse;
}

size_t Conversation::restore_from_store(const std::vector<int32_t>& tokens, size_t reuse,
                                        TurnResult& result) {
    const auto have = static_cast<int64_t>(reuse);
    // On a GPU: the state's device share first, so the restore copies rows there as it goes.
    if (ComputeDevice* device = model_.device()) device->attach(*state_);
    const std::vector<RestoreSpan> offer = store_->offer(tokens, have, *state_);
    result.resume = choose_resume(have, offer, prefill_rate_.tokens_per_second());
    // Asked even for nothing: the store counts its lookups, and what the choice left.
    const auto restored =
        static_cast<size_t>(store_->restore_up_to(tokens, have, result.resume.restore_to, *state_));
    if (restored <= reuse || restored > tokens.size()) return reuse;
    result.tokens_restored = static_cast<int64_t>(restored - reuse);
    cached_.assign(tokens.begin(), tokens.begin() + static_cast<ptrdiff_t>(restored));
    // Where the restored tokens came from: the offer's spans they reach into.
    int64_t from = have;
    for (size_t i = 0; i < result.resume.spans_used && from < static_cast<int64_t>(restored); ++i) {
        const std::string& source = offer[i].source;
        if (result.restored_from.find(source) == std::string::npos) {
            result.restored_from += (result.restored_from.empty() ? "" : "+") + source;
        }
        from = offer[i].end;
    }
    return restored;
}

TurnResult Conversation::respond(Sampler& sampler, const GenerateOptions& generation,
                                 const TextCallback& on_text,
                                 const ToolCallCallback& on_tool_call) {
    store_pending(/*prepare=*/false);  // this turn's prompt is here: no need to guess its start
    TurnResult result;
    const std::string rendered = render_prompt();
    ReplySetup reply;
    reply.on_text = &on_text;
    reply.on_tool_call = &on_tool_call;
    if (template_knows_thinking_ && prompt_opens_thinking(rendered)) {
        reply.thinking = ReplyThinking::Open;
    } else if (replies_think()) {
        reply.thinking = ReplyThinking::Possible;
    }
    // Room for the reply: what was asked for (plus the thinking budget when the reply will
    // think), but never more than half the context.
    const int64_t thinking_room =
        replies_think() ? std::max<int64_t>(0, options_.max_thinking_tokens) : 0;
    const int64_t asked =
        generation.max_tokens < 0 ? options_.context / 2 : generation.max_tokens + thinking_room;
    const int64_t reserve = std::min<int64_t>(asked, options_.context / 2);
    std::vector<int32_t> tokens = fit_to_context(reserve, result);
    result.prompt_tokens = static_cast<int64_t>(tokens.size());
    const size_t reuse = reuse_prefix(tokens, result);

    prepare_speculation(generation, tokens);
    const bool stop_cut =
        evaluate_and_generate(tokens, reuse, std::move(reply), sampler, generation, result);
    // The ids stand for the reply text only when they are exactly its tokens: no stop string
    // cut the text short and no thinking precedes it. A harmony reply's ids hold its channel
    // markup, and the template writes a past reply otherwise anyway (no analysis, <|end|>).
    // A reply that called functions is not its text either: the template writes the calls.
    const bool ids_are_text = !stop_cut && result.thinking_tokens == 0 &&
                              result.thinking_end == ThinkingEnd::None && !harmony_ &&
                              result.tool_calls.empty();
    messages_.push_back(ChatMessage{"assistant", result.reply,
                                    ids_are_text ? result.ids : std::vector<int32_t>{},
                                    result.thinking, result.tool_calls});
    // After the reply is a message: preparing the next turn renders the conversation. Not
    // after a stopped prefill: the user asked for the work to stop.
    next_turn_pending_ = options_.prepare_next_turn && result.tokens_not_evaluated == 0;
    remember_evaluated(tokens, result);
    return result;
}

bool Conversation::evaluate_and_generate(const std::vector<int32_t>& tokens, size_t reuse,
                                         ReplySetup reply, Sampler& sampler,
                                         const GenerateOptions& generation, TurnResult& result) {
    reply.prompt.assign(tokens.begin() + static_cast<ptrdiff_t>(reuse), tokens.end());
    // The turn's whole prompt counts in its progress: a hybrid evaluates most of it here,
    // generate() the rest.
    const auto start = std::chrono::steady_clock::now();
    const auto total = static_cast<int64_t>(reply.prompt.size());
    PrefillWatch watch(generation, total, start);
    bool stop_cut = false;
    double hybrid_seconds = 0;  // a hybrid's prompt evaluated before generate()
    try {
        if (!state_->recurrent.empty()) {
            evaluate_hybrid_prompt(tokens, reuse, reply.prompt, watch);
            hybrid_seconds =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        }
        GenerateOptions rest = generation;
        if (generation.on_prefill) {
            const int64_t done = total - static_cast<int64_t>(reply.prompt.size());
            rest.on_prefill = [&generation, done, total, start](const PrefillProgress& p) {
                generation.on_prefill(
                    {done + p.done, total,
                     std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
                         .count()});
            };
        }
        stop_cut = generate_reply(std::move(reply), sampler, rest, result);
    } catch (const EvaluationStopped&) {
        result.finish = FinishReason::Cancelled;  // a hybrid's prompt, stopped part way
    }
    // A stopped prefill: the batches evaluated stay (the next turn reuses them).
    const int64_t held = state_->kv.length();
    if (held >= static_cast<int64_t>(tokens.size())) {
        prefill_rate_.add(total, hybrid_seconds + result.stats.prefill_seconds);
    }
    if (held < static_cast<int64_t>(tokens.size())) {
        result.tokens_evaluated = held - static_cast<int64_t>(reuse);
        result.tokens_not_evaluated = static_cast<int64_t>(tokens.size()) - held;
        result.stats.prompt_tokens = total;
    }
    return stop_cut;
}

void Conversation::prepare_speculation(const GenerateOptions& generation,
                                       const std::vector<int32_t>& tokens) {
    if (!generation.speculation.enabled) return;
    // The table sees the whole conversation, so replies can draft from any earlier text.
    if (!ngram_) ngram_ = std::make_unique<NgramTable>();
    ngram_->clear();
    ngram_->add(tokens);
}

void Conversation::remember_evaluated(const std::vector<int32_t>& tokens,
                                      const TurnResult& result) {
    // The state now holds the prompt and the generated tokens it evaluated.
    cached_ = tokens;
    cached_.insert(cached_.end(), result.ids.begin(), result.ids.end());
    cached_.resize(static_cast<size_t>(state_->kv.length()));
    if (snapshots_) snapshots_->save(kSnapshotReplyEnd, state_->recurrent);
    if (!options_.prefix_cache) {
        next_turn_pending_ = false;  // every turn starts from scratch anyway
        return;
    }
    if (store_ != nullptr) {
        pending_prompt_ = tokens;
        state_save_pending_ = true;
    }
    if (!options_.defer_state_save) store_pending_state();
}

void Conversation::store_pending_state() {
    store_pending(/*prepare=*/true);
}

void Conversation::store_pending(bool prepare) {
    const bool prepare_now = prepare && next_turn_pending_;
    next_turn_pending_ = false;
    store_turn_state();
    if (prepare_now) prepare_next_turn_prefix();
}

void Conversation::store_turn_state() {
    if (!state_save_pending_) return;
    state_save_pending_ = false;
    if (store_ == nullptr) return;
    store_->save(cached_, *state_);
    // The snapshots taken inside this prompt go to the store too (slot 0 may be one the reply
    // would make useless to a later prompt: its thinking is dropped, say).
    for (int slot : {kSnapshotPromptEnd, kSnapshotLastMessage}) {
        if (snapshot_is_new_[static_cast<size_t>(slot)])
            save_snapshot_to_store(slot, pending_prompt_);
    }
}

std::vector<int32_t> Conversation::next_turn_prefix() {
    // The conversation with a new user message, for two messages that differ from their
    // first character: where their tokens part is where the new message's own tokens begin
    // (or a token before, where the tokenizer joins a message to the text before it).
    std::array<std::vector<int32_t>, 2> probes;
    const std::array<const char*, 2> texts = {"Hi", "Ok"};
    for (size_t i = 0; i < probes.size(); ++i) {
        messages_.push_back(ChatMessage{"user", texts[i], {}, {}});
        try {
            probes[i] = tokenize_prompt(render_marked());
        } catch (...) {
            messages_.pop_back();
            throw;
        }
        messages_.pop_back();
    }
    probes[0].resize(shared_prefix(probes[0], probes[1]));
    return std::move(probes[0]);
}

void Conversation::prepare_next_turn_prefix() {
    // Hybrids roll back only to snapshots of their recurrent state (taken at turn ends).
    if (!state_->recurrent.empty() || messages_.empty()) return;
    std::vector<int32_t> prefix;
    try {
        prefix = next_turn_prefix();
    } catch (const std::exception&) {
        return;  // a template that cannot render: the next turn reports it
    }
    // A conversation near the end of the context drops its oldest turns next time (the
    // prefix would not be the next prompt's start); leave room for a message and its reply.
    if (static_cast<int64_t>(prefix.size()) > options_.context * 3 / 4) return;
    const size_t keep = shared_prefix(cached_, prefix);
    if (keep == prefix.size() || !state_->kv.can_resume_at(static_cast<int64_t>(keep))) return;
    state_->kv.set_length(static_cast<int64_t>(keep));
    cached_.resize(keep);
    try {
        forward(model_, *state_, pool_,
                std::span<const int32_t>(prefix.data() + keep, prefix.size() - keep),
                LogitsWanted::None);
    } catch (const std::exception&) {
        return;  // the state is unchanged by a failed forward: it holds cached_ still
    }
    cached_ = std::move(prefix);
    if (store_ != nullptr) store_->save(cached_, *state_);
}

TurnResult Conversation::complete(const std::vector<int32_t>& tokens, Sampler& sampler,
                                  const GenerateOptions& generation, const TextCallback& on_text) {
    if (tokens.empty()) throw std::invalid_argument("the prompt is empty (no tokens)");
    store_pending(/*prepare=*/false);
    const int64_t room = generation.max_tokens < 0 ? 1 : generation.max_tokens;
    if (static_cast<int64_t>(tokens.size()) + room > options_.context) {
        throw ContextOverflow("the prompt needs " + std::to_string(tokens.size()) +
                              " tokens (plus " + std::to_string(room) +
                              " for the reply), more than the context of " +
                              std::to_string(options_.context));
    }
    TurnResult result;
    result.prompt_tokens = static_cast<int64_t>(tokens.size());
    const size_t reuse = reuse_prefix(tokens, result);
    prepare_speculation(generation, tokens);
    // Plain text: no calls are read and no thinking block is recognized.
    ReplySetup reply;
    reply.on_text = &on_text;
    evaluate_and_generate(tokens, reuse, std::move(reply), sampler, generation, result);
    remember_evaluated(tokens, result);
    return result;
}

bool Conversation::generate_reply(ReplySetup reply, Sampler& sampler,
                                  const GenerateOptions& generation, TurnResult& result) {
    const Tokenizer& tok = model_.tokenizer();
    ThinkingPolicy thinking(options_.max_thinking_tokens, options_.thinking_loop_check);
    const bool may_think = reply.thinking != ReplyThinking::None;
    bool starts_in_thinking = reply.thinking == ReplyThinking::Open;
    const HarmonyTokens* harmony = may_think ? harmony_.get() : nullptr;
    bool starts_in_final = false;
    // With tools a harmony reply may be a call (a commentary message), so no thinking is not
    // taken to mean opening the final message at once.
    const bool tools_on = reply.on_tool_call != nullptr && tools_->active();
    if (!thinking.allows_thinking() && (starts_in_thinking || (harmony != nullptr && !tools_on))) {
        // No thinking wanted: close the block the template opened (or open harmony's final
        // message) before the model starts.
        const auto close = encode_markup(tok, harmony ? kHarmonyOpenFinal : "</think>\n\n");
        reply.prompt.insert(reply.prompt.end(), close.begin(), close.end());
        starts_in_thinking = false;
        starts_in_final = harmony != nullptr;
        result.thinking_end = ThinkingEnd::Budget;
    }

    ReplyStream router(tok, harmony, options_.stop_strings, may_think && thinking.allows_thinking(),
                       starts_in_thinking, starts_in_final, !generation.ignore_eos, *reply.on_text);
    if (tools_on) router.enable_tool_calls(tool_format_, *tools_, *reply.on_tool_call);
    ReplyTally tally(router, thinking, generation.max_tokens, result);
    const TokenCallback on_token = [&tally](int32_t id) { return tally.take(id); };

    // The answer's limit is enforced above, so the generator itself runs until the context
    // is full.
    GenerateOptions unbounded = generation;
    unbounded.max_tokens = -1;
    std::optional<LazyToolConstraint> lazy;
    if (generation.constraint != nullptr) {
        if (harmony != nullptr && !tools_on) {
            throw std::invalid_argument(
                "constrained output (a grammar or JSON schema) is not supported for harmony "
                "(gpt-oss) models");
        }
        // tool_choice auto: the constraint holds the calls only (tool_call_lazy_grammar).
        if (tools_on && !tools_->forces_call()) {
            lazy.emplace(tool_format_, *generation.constraint);
            router.set_lazy_constraint(&*lazy);
        }
        constrain_answer(unbounded, router, generation, may_think ? &tok : nullptr,
                         lazy ? &*lazy : nullptr, result);
    }
    // Harmony ends a message with <|end|>, an end-of-generation token, also after the
    // thinking: the router says when the reply is over.
    if (harmony != nullptr) unbounded.ignore_eos = true;
    unbounded.ngram = generation.speculation.enabled ? ngram_.get() : nullptr;
    GenerateResult gen =
        generate(model_, *state_, pool_, sampler, reply.prompt, unbounded, on_token);
    result.stats = gen.stats;
    result.ids = gen.ids;
    FinishReason finish = gen.finish;
    if (thinking.forced() != ThinkingEnd::None && gen.finish == FinishReason::Cancelled) {
        result.thinking_end = thinking.forced();
        const std::string closing = router.force_end_thinking(ThinkingPolicy::kTransition);
        finish =
            answer_after_thinking(closing, gen.ids.back(), sampler, unbounded, on_token, result);
    }
    router.finish();
    result.warnings = router.warnings();
    result.tool_calls = router.tool_calls();
    result.finish = router.done()         ? FinishReason::Stop
                    : tally.answer_full() ? FinishReason::Length
                    : router.cancelled()  ? FinishReason::Cancelled
                                          : finish;
    result.reply = router.answer();
    result.thinking = router.thinking();
    return router.stopped_by_string();
}

FinishReason Conversation::answer_after_thinking(const std::string& closing, int32_t last_sampled,
                                                 Sampler& sampler, GenerateOptions& unbounded,
                                                 const TokenCallback& on_token,
                                                 TurnResult& result) {
    // The closing text is fed to the model after the last sampled token (which has not been
    // evaluated yet), and the answer follows.
    const auto closing_ids = encode_markup(model_.tokenizer(), closing);
    std::vector<int32_t> resume{last_sampled};
    resume.insert(resume.end(), closing_ids.begin(), closing_ids.end());
    for (int32_t id : closing_ids) sampler.accept(id);
    if (unbounded.ngram != nullptr) unbounded.ngram->add(closing_ids);
    result.ids.insert(result.ids.end(), closing_ids.begin(), closing_ids.end());
    unbounded.on_prefill = nullptr;  // a few tokens in the middle of the reply
    GenerateResult rest = generate(model_, *state_, pool_, sampler, resume, unbounded, on_token);
    result.ids.insert(result.ids.end(), rest.ids.begin(), rest.ids.end());
    result.stats.generated_tokens += rest.stats.generated_tokens;
    result.stats.speculation += rest.stats.speculation;
    result.stats.decode_seconds += rest.stats.prefill_seconds + rest.stats.decode_seconds;
    return rest.finish;
}

}  // namespace ember
