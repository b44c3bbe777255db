#include "engine/generate/conversation.h"

#include <algorithm>
#include <stdexcept>

#include "engine/chat/template.h"
#include "engine/model/model.h"
#include "engine/tokenizer/tokenizer.h"

namespace ember {

const char* const kChatMlTemplate =
    "{%- for message in messages -%}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}";

namespace {

std::string token_text_or_empty(const Tokenizer& tok, TokenId id) {
    return id == kNoToken ? std::string() : tok.token_to_piece(id, /*render_special=*/true);
}

// Length of the longest suffix of `text` that is a proper prefix of some stop string: that
// much must be held back, because the next token may complete the stop string.
size_t stop_holdback(const std::string& text, const std::vector<std::string>& stops) {
    size_t hold = 0;
    for (const auto& stop : stops) {
        for (size_t len = std::min(stop.size() - 1, text.size()); len > hold; --len) {
            if (text.compare(text.size() - len, len, stop, 0, len) == 0) {
                hold = len;
                break;
            }
        }
    }
    return hold;
}

}  // namespace

Conversation::Conversation(const Model& model, ThreadPool& pool, ConversationOptions options)
    : model_(model), pool_(pool), options_(std::move(options)) {
    std::string source = options_.template_override;
    if (source.empty()) {
        if (auto own = model_.gguf().get_string("tokenizer.chat_template")) {
            source = *own;
            uses_model_template_ = true;
        } else {
            source = kChatMlTemplate;
        }
    }
    template_ = std::make_unique<ChatTemplate>(source);
    const Tokenizer& tok = model_.tokenizer();
    bos_text_ = token_text_or_empty(tok, tok.bos_id());
    eos_text_ = token_text_or_empty(tok, tok.eos_id());
    state_ = make_state(model_.config(), options_.context, options_.kv_type);
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

bool Conversation::pop_assistant() {
    if (messages_.empty() || messages_.back().role != "assistant") return false;
    messages_.pop_back();
    return true;
}

void Conversation::clear() {
    messages_.clear();
}

std::string Conversation::render_prompt() const {
    ChatTemplateInputs in;
    for (const auto& m : messages_) {
        in.messages.push_back({{"role", m.role}, {"content", m.content}});
    }
    in.add_generation_prompt = true;
    in.bos_token = bos_text_;
    in.eos_token = eos_text_;
    in.extra = options_.template_vars;
    return template_->render(in);
}

std::vector<int32_t> Conversation::tokenize_segment(std::string_view text, bool first) const {
    const Tokenizer& tok = model_.tokenizer();
    EncodeOptions enc;
    enc.parse_special = true;
    // Templates usually write the BOS text themselves; add it only when they do not.
    enc.add_bos = first && tok.add_bos() && tok.bos_id() != kNoToken &&
                  (bos_text_.empty() || text.substr(0, bos_text_.size()) != bos_text_);
    return tok.encode(text, enc);
}

std::vector<int32_t> Conversation::tokenize_prompt(const std::string& text) const {
    // Where a generated reply appears verbatim in the rendered text, use its own tokens and
    // tokenize only the text around it. Every message is located in order (the search
    // cursor moves past each one), so a short reply cannot match inside an earlier message.
    std::vector<int32_t> out;
    size_t pending = 0;  // start of the text not yet tokenized
    size_t cursor = 0;   // where the next message's search starts
    for (const auto& m : messages_) {
        if (m.content.empty()) continue;
        const size_t at = text.find(m.content, cursor);
        if (at == std::string::npos) continue;  // the template rewrote it: tokenize as text
        cursor = at + m.content.size();
        if (m.ids.empty()) continue;
        auto seg =
            tokenize_segment(std::string_view(text).substr(pending, at - pending), pending == 0);
        out.insert(out.end(), seg.begin(), seg.end());
        out.insert(out.end(), m.ids.begin(), m.ids.end());
        pending = cursor;
    }
    auto rest = tokenize_segment(std::string_view(text).substr(pending), pending == 0);
    out.insert(out.end(), rest.begin(), rest.end());
    return out;
}

std::vector<int32_t> Conversation::fit_to_context(int64_t reserve, TurnResult& result) {
    std::vector<int32_t> tokens = tokenize_prompt(render_prompt());
    const int64_t full = static_cast<int64_t>(tokens.size());
    const size_t first_droppable = !messages_.empty() && messages_[0].role == "system" ? 1 : 0;
    while (static_cast<int64_t>(tokens.size()) + reserve > options_.context) {
        // Keep the system prompt and the newest message; drop the oldest turn in between.
        if (messages_.size() <= first_droppable + 1) {
            throw std::length_error("the prompt needs " + std::to_string(tokens.size()) +
                                    " tokens (plus " + std::to_string(reserve) +
                                    " for the reply), more than the context of " +
                                    std::to_string(options_.context));
        }
        messages_.erase(messages_.begin() + static_cast<std::ptrdiff_t>(first_droppable));
        ++result.messages_dropped;
        tokens = tokenize_prompt(render_prompt());
    }
    result.tokens_dropped = full - static_cast<int64_t>(tokens.size());
    return tokens;
}

TurnResult Conversation::respond(Sampler& sampler, const GenerateOptions& options,
                                 const TextCallback& on_text) {
    TurnResult result;
    // Room for the reply: what was asked for, but never more than half the context.
    const int64_t reserve = std::min<int64_t>(
        options.max_tokens < 0 ? options_.context / 2 : options.max_tokens, options_.context / 2);
    const std::vector<int32_t> tokens = fit_to_context(reserve, result);
    result.prompt_tokens = static_cast<int64_t>(tokens.size());

    size_t reuse = 0;
    if (options_.prefix_cache) {
        const size_t limit = std::min(cached_.size(), tokens.size());
        while (reuse < limit && cached_[reuse] == tokens[reuse]) ++reuse;
        state_->kv.set_length(static_cast<int64_t>(reuse));
        cached_.resize(reuse);
        if (store_ != nullptr) {
            const size_t restored =
                static_cast<size_t>(store_->restore(tokens, static_cast<int64_t>(reuse), *state_));
            if (restored > reuse && restored <= tokens.size()) {
                result.tokens_restored = static_cast<int64_t>(restored - reuse);
                cached_.assign(tokens.begin(), tokens.begin() + static_cast<ptrdiff_t>(restored));
                reuse = restored;
            }
        }
        // At least one token must be evaluated to get logits for the first reply token.
        if (reuse == tokens.size()) --reuse;
    }
    state_->kv.set_length(static_cast<int64_t>(reuse));
    cached_.resize(reuse);
    result.tokens_reused = static_cast<int64_t>(reuse);
    result.tokens_evaluated = static_cast<int64_t>(tokens.size() - reuse);

    const Tokenizer& tok = model_.tokenizer();
    DecodeOptions dec;
    dec.strip_leading_space = false;
    StreamingDetokenizer detok(tok, dec);
    std::string text;    // everything generated so far
    size_t emitted = 0;  // bytes of `text` handed to on_text
    bool stopped_by_string = false;
    bool cancelled_by_user = false;
    const auto& stops = options_.stop_strings;

    auto emit_upto = [&](size_t end) {
        if (end > emitted) {
            if (on_text && !on_text(text.substr(emitted, end - emitted), TextKind::Answer)) cancelled_by_user = true;
            emitted = end;
        }
    };
    auto on_token = [&](int32_t id) {
        text += detok.push(id);
        for (const auto& stop : stops) {
            const size_t at = text.find(stop, emitted > stop.size() ? emitted - stop.size() : 0);
            if (at != std::string::npos) {
                text.resize(at);
                emit_upto(at);
                stopped_by_string = true;
                return false;
            }
        }
        emit_upto(text.size() - stop_holdback(text, stops));
        return !cancelled_by_user;
    };

    const auto prompt = std::span<const int32_t>(tokens).subspan(reuse);
    GenerateResult gen = generate(model_, *state_, pool_, sampler, prompt, options, on_token);
    if (!stopped_by_string) {
        text += detok.flush();
        emit_upto(text.size());
    }
    result.finish = stopped_by_string ? FinishReason::Stop : gen.finish;
    result.ids = std::move(gen.ids);
    result.stats = gen.stats;
    result.reply = text;

    // The state now holds the prompt and the generated tokens it evaluated.
    cached_ = tokens;
    cached_.insert(cached_.end(), result.ids.begin(), result.ids.end());
    cached_.resize(static_cast<size_t>(state_->kv.length()));
    if (store_ != nullptr && options_.prefix_cache) store_->save(cached_, *state_);
    // The ids stand for the reply only when no stop string cut its text short.
    messages_.push_back(ChatMessage{"assistant", result.reply,
                                    stopped_by_string ? std::vector<int32_t>{} : result.ids});
    return result;
}

}  // namespace ember
