// The decode loop: prefill a prompt, then sample one token at a time until a stop condition.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "engine/model/forward.h"
#include "engine/sampling/sampler.h"

namespace ember {

class Model;
class ThreadPool;
struct InferenceState;

enum class FinishReason { Stop, Length, Context, Cancelled };
std::string_view finish_reason_name(FinishReason reason);

// N-gram self-speculation: draft tokens from an n-gram table of the context, verify them in
// one batched forward pass, keep what the model agrees with.
struct SpeculationOptions {
    bool enabled = false;
    int draft_max = 6;  // drafts per verification step at most (capped at kExactBatchTokens-1)
    // Cost model of the gate: verifying k drafts costs (1 + draft_cost * k) single-token
    // decodes (the weights are read once for the whole batch; each extra token adds compute
    // and attention). Negative: from the model (generate.cpp, draft_cost: its bytes per weight,
    // or a compute-bound figure for a model small enough to be read from cache).
    // Deterministic on purpose: a timing-based gate would make seeded sampled runs depend on
    // machine load. Families with recurrent state add the cost of snapshotting it and, on a
    // rejection, of re-advancing over the kept tokens (estimated from the model's sizes).
    double draft_cost = -1.0;
    double decay = 0.85;      // weight of the old acceptance estimate per verification step
    int probe_interval = 16;  // plain steps before drafting is tried again after the gate shut
};

struct SpeculationStats {
    int64_t verify_steps = 0;  // batched verifications
    int64_t drafted = 0;       // draft tokens proposed
    int64_t accepted = 0;      // of those, kept
    int64_t full_steps = 0;    // verifications that kept every draft
    // Families with recurrent state: verifications undone by restoring the state's snapshot,
    // and the tokens evaluated again after those restores.
    int64_t restores = 0;
    int64_t readvanced = 0;
    double acceptance_rate() const {
        return drafted > 0 ? static_cast<double>(accepted) / static_cast<double>(drafted) : 0.0;
    }
    SpeculationStats& operator+=(const SpeculationStats& o) {
        verify_steps += o.verify_steps;
        drafted += o.drafted;
        accepted += o.accepted;
        full_steps += o.full_steps;
        restores += o.restores;
        readvanced += o.readvanced;
        return *this;
    }
};

// How far the evaluation of a prompt got, for a front end's progress display.
struct PrefillProgress {
    int64_t done = 0;    // prompt tokens evaluated (a batch in progress counts by its layers)
    int64_t total = 0;   // prompt tokens this turn evaluates
    double seconds = 0;  // since the evaluation started
};
using PrefillCallback = std::function<void(const PrefillProgress&)>;

class NgramTable;
namespace grammar {
class GrammarConstraint;
}

// Takes a generation's one-token steps in place of forward(): a server that batches the steps of
// concurrent generations (app/serve/decode_batcher.h). generate() calls step() for every token
// after the prompt's, and exclusive() before it evaluates anything itself again (a verification
// batch) and before it returns. The caller holds exclusive use of the engine when it calls
// generate(); from a step() until the next exclusive() it may have given that use to others.
class DecodeStepper {
public:
    virtual ~DecodeStepper() = default;
    // The logits [n_vocab] after `token`, evaluated in `state` at its next position; valid
    // until the next step(). Throws what forward() would.
    virtual std::span<const float> step(InferenceState& state, int32_t token) = 0;
    virtual void exclusive() = 0;
    // Whether other generations share the steps now: a verification batch would take the
    // engine from them, so generate() does not draft then (its tokens are the same either way).
    virtual bool shares_steps() const = 0;
};

struct GenerateOptions {
    int64_t max_tokens = 128;  // generated tokens at most; < 0 means until the context is full
    bool ignore_eos = false;   // keep going past end-of-generation tokens
    SpeculationOptions speculation;
    // The table drafts come from, holding the context so far (the caller feeds it the prompt;
    // generate() adds the tokens it emits). Required when speculation is enabled.
    NgramTable* ngram = nullptr;
    // Constrained decoding (a grammar or a JSON schema): every token is sampled through it
    // (masked before the sampling chain) and accepted into it, while `constrain_now` (when
    // set) says the reply is in its constrained part: a thinking model's reasoning is free.
    // A draft the constraint refuses ends the draft. Null: unconstrained.
    grammar::GrammarConstraint* constraint = nullptr;
    std::function<bool()> constrain_now;
    // Tokens the constrained part may still take after the next one, so the constraint can
    // close its output within the limit; unset: from max_tokens (none when that is < 0).
    // The room left in the context limits it as well.
    std::function<int64_t()> tokens_left;
    // A long prompt: `on_prefill` hears how far its evaluation got and `stop_prefill` (true:
    // stop) is asked, between the layers of each batch (EvaluationWatch, forward.h: after
    // each batch for the hybrid families and on a GPU). A stop ends the turn at once with
    // FinishReason::Cancelled and no token; the batches evaluated stay in the state, so the
    // next turn reuses them. Either may be empty. Called on the generating thread.
    PrefillCallback on_prefill;
    std::function<bool()> stop_prefill;
    // Takes the one-token steps (DecodeStepper); null: forward() itself.
    DecodeStepper* stepper = nullptr;
};

struct GenerateStats {
    int64_t prompt_tokens = 0;
    int64_t generated_tokens = 0;
    double prefill_seconds = 0;  // evaluating the prompt, up to the first sampled token
    double decode_seconds = 0;   // everything after the first token
    double ttft_seconds = 0;     // start to first token
    SpeculationStats speculation;
};

struct GenerateResult {
    std::vector<int32_t> ids;  // generated tokens (an end-of-generation token is not included)
    FinishReason finish = FinishReason::Length;
    GenerateStats stats;
};

// Called with each generated token; return false to stop (FinishReason::Cancelled).
using TokenCallback = std::function<bool(int32_t id)>;

// The watch forward() takes while a turn evaluates its `total` prompt tokens (in one call, or
// a hybrid's several), reporting to `options`' on_prefill and asking its stop_prefill;
// `start` is when the turn's evaluation started.
struct PrefillWatch {
    PrefillWatch(const GenerateOptions& options, int64_t total,
                 std::chrono::steady_clock::time_point start);
    PrefillWatch(const PrefillWatch&) = delete;  // the watch points at this object
    PrefillWatch& operator=(const PrefillWatch&) = delete;
    // The watch for a call that starts `offset` tokens into the prompt; null when `options`
    // wants neither progress nor a way to stop.
    const EvaluationWatch* at(int64_t offset);

private:
    const GenerateOptions& options_;
    int64_t total_;
    std::chrono::steady_clock::time_point start_;
    int64_t offset_ = 0;
    EvaluationWatch watch_;
};

// Evaluates `prompt` on top of what `state` holds and generates. The state keeps the prompt
// and every generated token except the last sampled one, which has not been evaluated yet.
GenerateResult generate(const Model& model, InferenceState& state, ThreadPool& pool,
                        Sampler& sampler, std::span<const int32_t> prompt,
                        const GenerateOptions& options, const TokenCallback& on_token);

}  // namespace ember
