#include "app/serve/jobs.h"

#include <algorithm>

#include "app/serve/front_door.h"
#include "engine/model/forward.h"
#include "engine/model/model.h"
#include "engine/tokenizer/tokenizer.h"

namespace ember::serve {

ApiError shutting_down() {
    return ApiError(503, "the server is shutting down; the request was cancelled");
}

void log_line(const ServerOptions& options, const std::string& line) {
    if (options.log) options.log(line);
}

JobRunner::JobRunner(const Model& model, ThreadPool& pool, ConversationOptions conversation_options,
                     PrefixStore* store, const ServerOptions& options, const FrontDoor& http)
    : model_(model),
      conversation_options_(std::move(conversation_options)),
      options_(options),
      http_(http) {
    ConversationOptions small = conversation_options_;
    small.context = 16;  // the renderer never evaluates anything
    renderer_ = std::make_unique<Conversation>(model, pool, small);
    const auto make_slot = [this, &pool, store] {
        auto conv = std::make_unique<Conversation>(model_, pool, conversation_options_);
        conv->set_prefix_store(store);
        // The vocabulary is built once, by the first request that needs it, for every slot.
        conv->share_vocabulary_tries(*renderer_);
        // On a GPU, the slot's first request should not pay for its state's first use.
        warm_up(model_, conv->state(), pool);
        return conv;
    };
    slots_ = std::make_unique<SlotPool>(options_.parallel, options_.max_waiting, make_slot);
    const int by_default = model.device() != nullptr
                               ? std::min(options_.parallel, static_cast<int>(kMaxDecodeBatch))
                               : 1;
    batcher_ = std::make_unique<DecodeBatcher>(
        model, pool, slots_->engine_turn(),
        options_.decode_batch > 0 ? options_.decode_batch : std::max(1, by_default));
}

std::vector<int32_t> JobRunner::chat_prompt(const std::vector<ChatMessage>& messages, Job& job) {
    std::lock_guard lock(renderer_mutex_);
    renderer_->clear();
    try {
        renderer_->set_tools(job.tools);
        job.tool_format = renderer_->tool_call_format();
    } catch (const ToolError& e) {
        throw ApiError(400, e.what(), e.field());
    }
    for (const auto& m : messages) renderer_->add_message(m);
    try {
        return renderer_->prompt_tokens();
    } catch (const std::exception& e) {
        throw ApiError(400,
                       std::string("the chat template cannot render these messages: ") + e.what(),
                       "messages");
    }
}

std::vector<int32_t> JobRunner::completion_prompt(const std::string& text) const {
    const Tokenizer& tok = model_.tokenizer();
    EncodeOptions enc;  // as `ember run` tokenizes a prompt
    enc.add_bos = tok.add_bos() && tok.bos_id() != kNoToken;
    std::vector<int32_t> ids = tok.encode(text, enc);
    if (ids.empty()) throw ApiError(400, "the prompt is empty (no tokens)", "prompt");
    return ids;
}

SlotLease JobRunner::take_slot(const std::vector<int32_t>& prompt) {
    Connection* conn = current_connection();
    bool gone = false;
    std::optional<SlotLease> lease = slots_->acquire(prompt, [conn, &gone] {
        gone = conn != nullptr && conn->client_closed();
        return gone;
    });
    if (!lease && slots_->closed()) throw shutting_down();
    if (!lease && gone) throw ClientLeft{};
    if (!lease) {
        throw ApiError(503, "the server is busy: " + std::to_string(options_.max_waiting) +
                                " requests already wait for a slot; retry later");
    }
    return std::move(*lease);
}

void JobRunner::compile_grammars(Job& job) {
    if (job.response_format.kind == OutputFormatKind::Free && !job.tools.active()) return;
    Connection* conn = current_connection();
    grammar::CompileLimits limits;
    limits.max_time = options_.limits.compile_time;
    limits.cancelled = [this, conn] {
        return http_.stopping() || (conn != nullptr && conn->client_closed());
    };
    grammar::CompileBudget budget(std::move(limits));
    ++compiling_;
    struct Done {
        std::atomic<int>& n;
        ~Done() { --n; }
    } done{compiling_};
    try {
        job.grammar = compile_response_format(job.response_format, &budget);
        // A forced call is held from the reply's start; in auto mode a call is held from
        // its start marker on.
        if (job.tools.active()) {
            const ToolCallFormat f = job.tool_format;
            job.tool_grammar = job.tools.forces_call()
                                   ? tool_call_grammar(f, job.tools, &budget)
                                   : tool_call_lazy_grammar(f, job.tools, &budget);
        }
    } catch (const grammar::CompileCancelled&) {
        if (http_.stopping()) throw shutting_down();
        log_line(options_,
                 job.id + " client left while its grammar was compiled; compiling stopped");
        throw ClientLeft{};
    } catch (const ToolError& e) {
        throw ApiError(400, e.what(), e.field());
    }
}

TurnResult JobRunner::generate(Job& job, SlotLease& lease, const TextCallback& on_text,
                               const ToolCallCallback& on_tool_call) {
    Conversation& conv = lease.conversation();
    EngineTurn turn(slots_->engine_turn());
    DecodeBatcher::Member steps(*batcher_, turn);  // gives the turn up while it steps
    conv.set_stop_strings(job.stop);
    Sampler sampler(job.sampling);
    GenerateOptions gen;
    gen.max_tokens = job.max_tokens;
    gen.ignore_eos = job.ignore_eos;
    gen.speculation.enabled = options_.speculation;
    gen.speculation.draft_max = options_.draft_max;
    gen.stepper = &steps;
    std::optional<grammar::GrammarConstraint> constraint;
    if (job.grammar) {
        constraint.emplace(job.grammar, conv.answer_trie());
        gen.constraint = &*constraint;
    } else if (job.tool_grammar) {
        constraint.emplace(job.tool_grammar, conv.tool_call_trie());
        gen.constraint = &*constraint;
    }
    // Text goes to the client with the turn given up, so a slow reader holds up no one,
    // and the other generating slots take their turns in between. Text from between two
    // steps comes without the turn (the steps gave it up), and stays so.
    // A server told to stop cancels every generation at its next piece of text.
    auto without_turn = [&turn](const auto& write) {
        const bool held = turn.held();
        turn.release();
        const bool go_on = write();
        if (held) turn.acquire();
        return go_on;
    };
    auto pass_turn = [&](const std::string& text, TextKind kind) {
        return without_turn([&] { return !http_.stopping() && on_text(text, kind); });
    };
    TurnResult result;
    if (job.chat) {
        conv.clear();
        conv.set_tools(job.tools);  // every request sets its own (none included)
        for (auto& m : job.messages) conv.add_message(std::move(m));
        auto pass_call = [&](const ToolCallDelta& delta) {
            return without_turn(
                [&] { return !http_.stopping() && (!on_tool_call || on_tool_call(delta)); });
        };
        result = conv.respond(sampler, gen, pass_turn, pass_call);
        if (!conv.messages().empty() && result.tool_calls.empty()) {
            const ChatMessage& reply = conv.messages().back();
            reply_ids_.remember(reply.content, reply.ids);
        }
    } else {
        result = conv.complete(job.prompt, sampler, gen, pass_turn);
    }
    return result;
}

}  // namespace ember::serve
