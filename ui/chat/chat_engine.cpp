#include "ui/chat/chat_engine.h"

#include <algorithm>
#include <random>
#include <stdexcept>

namespace ember::ui {

uint64_t ReplySeeds::take() {
    if (next_) return (*next_)++;
    std::random_device device;
    // 63 bits: a seed also goes to OpenAI-compatible servers, which take a signed 64-bit one.
    return ((static_cast<uint64_t>(device()) << 32) ^ device()) & 0x7fffffffffffffffull;
}

ChatReply respond_seeded(ChatEngine& engine, Sampler& sampler, ReplySeeds& seeds,
                         const GenerateOptions& options, const TextCallback& on_text,
                         const StopRequested& stop_requested) {
    const uint64_t seed = seeds.take();
    sampler.reset(seed);
    ChatReply reply = engine.respond(sampler, options, on_text, stop_requested);
    reply.turn.seed = seed;
    return reply;
}

void ChatEngine::set_tools(const ToolOptions& tools) {
    if (tools.active()) {
        throw std::invalid_argument("tool calls need the local engine (not --remote)");
    }
}

void LocalChatEngine::set_tools(const ToolOptions& tools) {
    conversation_->set_tools(tools);  // refuses a template without a tool-call format
    tools_ = tools;
    // Built now, so an unenforceable parameter schema is said at once.
    call_grammar_ = call_grammar();
}

std::shared_ptr<const grammar::Grammar> LocalChatEngine::call_grammar() const {
    if (!tools_.active()) return nullptr;
    // A forced call is held from the reply's start; in auto mode a call is held from its
    // start marker on (harmony's calls are then only parsed: null).
    const ToolCallFormat format = conversation_->tool_call_format();
    return tools_.forces_call() ? tool_call_grammar(format, tools_)
                                : tool_call_lazy_grammar(format, tools_);
}

void LocalChatEngine::offer_tools_to(Conversation& conversation) const {
    if (tools_.active()) conversation.set_tools(tools_);
}

ChatReply LocalChatEngine::respond(Sampler& sampler, const GenerateOptions& options,
                                   const TextCallback& on_text,
                                   const StopRequested& stop_requested) {
    // In process, every generated piece of text passes through here, so the stop request is
    // checked with it; the engine has no waiting that text would not interrupt.
    const TextCallback checked = [&](const std::string& text, TextKind kind) {
        const bool keep_going = !on_text || on_text(text, kind);
        return keep_going && !(stop_requested && stop_requested());
    };
    // Calls are shown once the reply is complete (ChatController); while they stream, only
    // the stop request is checked.
    const ToolCallCallback on_call = [&](const ToolCallDelta&) {
        return !(stop_requested && stop_requested());
    };
    GenerateOptions generation = options;
    // A long prompt stops between two layers when asked, not only at the first token.
    if (stop_requested) generation.stop_prefill = stop_requested;
    std::optional<grammar::GrammarConstraint> call_constraint;
    if (tools_.active() && options.constraint == nullptr) {
        if (!call_grammar_) call_grammar_ = call_grammar();
        if (call_grammar_) {
            call_constraint.emplace(call_grammar_, conversation_->tool_call_trie());
            generation.constraint = &*call_constraint;
        }
    }
    ChatReply reply;
    reply.turn = conversation_->respond(sampler, generation, checked, on_call);
    return reply;
}

ChatReply ChatEngine::continue_reply(Sampler&, const GenerateOptions&, const TextCallback&,
                                     const StopRequested&) {
    throw std::invalid_argument("a remote model's reply cannot be continued; /regen answers again");
}

ChatReply LocalChatEngine::continue_reply(Sampler& sampler, const GenerateOptions& options,
                                          const TextCallback& on_text,
                                          const StopRequested& stop_requested) {
    const auto& messages = conversation_->messages();
    if (messages.empty() || messages.back().role != "assistant") {
        throw std::invalid_argument("there is no reply to continue");
    }
    ChatMessage last = messages.back();
    if (conversation_->harmony()) {
        throw std::invalid_argument("a gpt-oss reply cannot be continued; /regen answers again");
    }
    if (last.ids.empty()) {
        throw std::invalid_argument(
            "the reply's tokens are not known (saved with another model); /regen answers again");
    }
    if (last.content.empty() && !last.thinking.empty()) {
        throw std::invalid_argument("the reply was cut while thinking; /regen answers again");
    }
    const TextCallback checked = [&](const std::string& text, TextKind kind) {
        const bool keep_going = !on_text || on_text(text, kind);
        return keep_going && !(stop_requested && stop_requested());
    };
    // The prompt the reply was generated from, then the reply's own tokens: what the state
    // held when it stopped, so nothing is evaluated again and generation goes on from there.
    conversation_->pop_message();
    ChatReply reply;
    try {
        std::vector<int32_t> tokens = conversation_->prompt_tokens();
        tokens.insert(tokens.end(), last.ids.begin(), last.ids.end());
        GenerateOptions generation = options;
        if (stop_requested) generation.stop_prefill = stop_requested;
        reply.turn = conversation_->complete(tokens, sampler, generation, checked);
    } catch (...) {
        conversation_->add_message(std::move(last));
        throw;
    }
    last.content += reply.turn.reply;
    last.ids.insert(last.ids.end(), reply.turn.ids.begin(), reply.turn.ids.end());
    conversation_->add_message(std::move(last));
    return reply;
}

int64_t LocalChatEngine::context_needed(const std::function<bool()>* stop) const {
    if (conversation_->messages().empty()) return 0;
    try {
        return static_cast<int64_t>(conversation_->prompt_tokens(stop).size());
    } catch (const EncodeStopped&) {
        throw;  // asked to stop: not a count of 0
    } catch (const std::exception&) {
        return 0;
    }
}

int64_t LocalChatEngine::fewest_tokens(size_t bytes) const {
    if (longest_token_bytes_ == 0) {
        // An entry's stored text is never shorter than the bytes it stands for (BPE's byte
        // alphabet and SPM's U+2581 take 2-3 bytes for one; <0xXX> six).
        const Tokenizer& tok = conversation_->tokenizer();
        size_t longest = 1;
        for (size_t id = 0; id < tok.vocab_size(); ++id) {
            longest = std::max(longest, tok.token_text(static_cast<TokenId>(id)).size());
        }
        longest_token_bytes_ = longest;
    }
    return static_cast<int64_t>(bytes / longest_token_bytes_);
}

std::optional<bool> LocalChatEngine::thinking() const {
    const auto& vars = conversation_->options().template_vars;
    if (vars.contains("enable_thinking") && vars["enable_thinking"].is_boolean()) {
        return vars["enable_thinking"].get<bool>();
    }
    return std::nullopt;
}

std::string LocalChatEngine::reasoning_effort() const {
    const auto& vars = conversation_->options().template_vars;
    if (vars.contains("reasoning_effort") && vars["reasoning_effort"].is_string()) {
        return vars["reasoning_effort"].get<std::string>();
    }
    return {};
}

}  // namespace ember::ui
