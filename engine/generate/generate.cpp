#include "engine/generate/generate.h"

#include <algorithm>
#include <chrono>

#include "engine/generate/ngram.h"
#include "engine/grammar/token_mask.h"
#include "engine/model/forward.h"
#include "engine/model/model.h"
#include "engine/model/state.h"
#include "engine/tokenizer/tokenizer.h"

namespace ember {

std::string_view finish_reason_name(FinishReason reason) {
    switch (reason) {
        case FinishReason::Stop:
            return "stop";
        case FinishReason::Length:
            return "length";
        case FinishReason::Context:
            return "context";
        case FinishReason::Cancelled:
            return "cancelled";
    }
    return "unknown";
}

namespace {

// What undoing a partly rejected verification costs a family with recurrent state, in
// single-token decodes; all zero for the KV-cache-only families, whose rollback is O(1).
struct RollbackCosts {
    bool needed = false;
    double snapshot = 0.0;  // saving the recurrent state before every verification
    // Restoring it and re-evaluating the first kept token (each further one: draft_cost).
    double readvance = 0.0;
};

// Each drafted token of a verification, in single-token decodes: the option, or from the model.
// A batch reads the weights once, so a draft adds the compute of one token per weight: about
// kDraftComputePerWeight decode times per weight byte of the average type (on the 2-core AVX-512
// machines, -t 2, 8-token batches: Q8_0 ~0.07, Q4_K_M ~0.13-0.18 of a decode per draft). Fewer
// bytes per weight mean less time to read the same compute in, so a dearer draft.
// A model whose weights fit in a core's caches is not memory-bound at all: a forward costs its
// compute, so each drafted token adds a large share of a decode (stories260K, 1 MB: 0.3-0.45;
// with the memory-bound estimate its rows ran at 0.64-0.80x of plain decoding).
// Exact f32 activations (Activations::Exact) multiply 16 products per instruction where 8-bit
// ones take 64, and decode the weights in registers: gemma-3-270m (1.06 bytes per weight, its
// Q8_0 output a 262,144-row matrix every drafted token multiplies) measured ~0.44 of a decode
// per draft (-t 2, rows of 1.00 acceptance at 1.93x), where kDraftComputePerWeight would say
// 0.07 and the gate kept drafting fresh text at a loss (0.93x).
double draft_cost(const Model& model, const SpeculationOptions& o) {
    if (o.draft_cost >= 0.0) return o.draft_cost;
    constexpr double kDraftComputePerWeight = 0.075;
    constexpr double kDraftComputePerWeightExact = 0.42;
    // 16-bit activations (Activations::Wide) take the 8-bit constant for now: they run two
    // vpdpbusd where 8-bit ones take one, but float weights (the fixtures) run the same kernels
    // under both, and the wide constant is not measured yet on real files (issue 38, item 5).
    const double per_weight = model.activations() == Activations::Exact
                                  ? kDraftComputePerWeightExact
                                  : kDraftComputePerWeight;
    constexpr uint64_t kCacheResidentBytes = uint64_t{16} << 20;
    constexpr double kCacheResidentDraftCost = 0.45;
    const uint64_t weight_bytes = std::max<uint64_t>(1, model.weight_bytes_per_token());
    if (weight_bytes <= kCacheResidentBytes) return kCacheResidentDraftCost;
    const double weights = static_cast<double>(model.weight_elements_per_token());
    return std::min(1.0, per_weight * weights / static_cast<double>(weight_bytes));
}

// Deterministic (timing-based costs would make seeded sampled runs depend on machine load):
// decode streams the weights once per step, so copying the state costs its bytes read and
// written relative to the weight bytes, and a re-advance reads every weight but the output
// matrix (its logits are not needed).
RollbackCosts rollback_costs(const Model& model, const InferenceState& state) {
    RollbackCosts costs;
    if (state.recurrent.empty()) return costs;
    costs.needed = true;
    const double weights =
        static_cast<double>(std::max<uint64_t>(1, model.weight_bytes_per_token()));
    const MatrixView& out = model.output();
    const double output = static_cast<double>(out.rows) * static_cast<double>(out.row_stride);
    const double copy = 2.0 * static_cast<double>(state.recurrent.bytes()) / weights;
    costs.snapshot = copy;
    costs.readvance = copy + std::max(0.0, 1.0 - output / weights);
    return costs;
}

// Decides, from a decayed estimate of how often a draft is accepted once the drafts before it
// were, how many drafts a verification step should carry (0: decode plainly). Expected tokens
// per step with k drafts each accepted at rate a: 1 + a + ... + a^k; cost: 1 + draft_cost * k,
// plus for recurrent state the snapshot and, when some draft is rejected (the j-th first, j-1
// kept), a re-advance over j tokens: sum over j of a^(j-1) (1 - a) (readvance + draft_cost (j-1)).
class SpeculationGate {
public:
    // With rollback costs the optimistic start does not open the gate, so the first chance
    // to draft probes instead.
    SpeculationGate(const SpeculationOptions& o, double draft_cost, RollbackCosts costs)
        : o_(o),
          draft_cost_(draft_cost),
          costs_(costs),
          plain_steps_(costs.needed ? o.probe_interval - 1 : 0) {}

    int drafts_wanted(int available, int limit) {
        int best_k = 0;
        double best_gain = 1.0;  // plain decoding: one token per unit of cost
        double expected = 1.0, power = 1.0, rollback = 0.0;
        for (int k = 1; k <= std::min(available, limit); ++k) {
            // power = a^(k-1): drafts 1..k-1 held and draft k is the first rejected.
            if (costs_.needed) {
                rollback += power * (1.0 - acceptance_) *
                            (costs_.readvance + draft_cost_ * static_cast<double>(k - 1));
            }
            power *= acceptance_;
            expected += power;
            const double cost = 1.0 + draft_cost_ * k + costs_.snapshot + rollback;
            const double gain = expected / cost;
            if (gain > best_gain) {
                best_gain = gain;
                best_k = k;
            }
        }
        if (best_k > 0) return best_k;
        // Shut: probe now and then, so a change of workload is noticed. A probe is short
        // (two drafts, one where a rejection also costs a restore and a re-advance), and
        // each probe that finds nothing doubles the wait before the next (up to 8x), so
        // fresh text pays well under the "few percent" a full draft every 16 steps cost.
        if (++plain_steps_ < o_.probe_interval << failed_probes_) return 0;
        plain_steps_ = 0;
        probing_ = true;
        return std::min({available, limit, costs_.needed ? 1 : 2});
    }
    // Of `drafted` drafts the first `accepted` were kept. Each draft up to the first rejected
    // one is evidence of the rate (held, or not); the ones after it were never judged. (Counting
    // them as rejected, as accepted / drafted does, makes long drafts look worse than they are
    // and kept the gate at two or three drafts inside long repeated runs.)
    void record(int drafted, int accepted) {
        for (int i = 0; i < drafted && i <= accepted; ++i) {
            acceptance_ = o_.decay * acceptance_ + (1.0 - o_.decay) * (i < accepted ? 1.0 : 0.0);
        }
        if (probing_) failed_probes_ = accepted == 0 ? std::min(failed_probes_ + 1, 3) : 0;
        probing_ = false;
    }

private:
    const SpeculationOptions& o_;
    double draft_cost_;
    RollbackCosts costs_;
    double acceptance_ = 0.5;  // optimistic start: drafting is tried early
    int plain_steps_;
    bool probing_ = false;   // the step being verified was a probe of a shut gate
    int failed_probes_ = 0;  // probes in a row that found nothing (the wait doubles each)
};

// Leaves `state`, which evaluated `batch` from position `base`, as if it had evaluated only
// the first `kept` tokens. The KV cache just moves its length; recurrent state (`snapshots`
// holding it from before the batch in slot 0, null without) folded in the rest, so it is
// restored and re-advanced over the kept tokens. That forward is bit for bit the decoding it
// replaces (kExactBatchTokens), and its logits are not needed: the verification gave them.
void keep_prefix(const Model& model, InferenceState& state, ThreadPool& pool,
                 std::span<const int32_t> batch, int64_t base, int64_t kept,
                 const RecurrentSnapshotPool* snapshots, SpeculationStats& spec) {
    if (snapshots == nullptr) {
        state.kv.set_length(base + kept);
        return;
    }
    snapshots->restore(0, state.recurrent);
    state.kv.set_length(base);
    forward(model, state, pool, batch.first(static_cast<size_t>(kept)), LogitsWanted::None);
    ++spec.restores;
    spec.readvanced += kept;
}

// The constraint to sample the next token through, told how many tokens may follow that
// token; null when the token is free (no constraint, or a thinking model's reasoning).
TokenFilter* constraint_for_next(const GenerateOptions& options, int64_t generated,
                                 const InferenceState& state) {
    grammar::GrammarConstraint* c = options.constraint;
    if (c == nullptr || (options.constrain_now && !options.constrain_now())) return nullptr;
    int64_t left = -1;
    if (options.tokens_left) {
        left = options.tokens_left();
    } else if (options.max_tokens >= 0) {
        left = options.max_tokens - generated - 1;
    }
    // The context is a limit too: each token after the next needs its predecessor evaluated
    // (one row), and one row is kept spare.
    const int64_t context_left = state.kv.capacity() - state.kv.length() - 2;
    left = left < 0 ? context_left : std::min(left, context_left);
    c->set_remaining(std::max<int64_t>(left, 0));
    return c;
}

}  // namespace

PrefillWatch::PrefillWatch(const GenerateOptions& options, int64_t total,
                           std::chrono::steady_clock::time_point start)
    : options_(options), total_(total), start_(start) {
    if (!options_.on_prefill && !options_.stop_prefill) return;
    watch_ = [this](double tokens_done) {
        if (options_.on_prefill) {
            PrefillProgress progress;
            progress.done = std::min(total_, offset_ + static_cast<int64_t>(tokens_done));
            progress.total = total_;
            progress.seconds =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
            options_.on_prefill(progress);
        }
        return !(options_.stop_prefill && options_.stop_prefill());
    };
}

const EvaluationWatch* PrefillWatch::at(int64_t offset) {
    offset_ = offset;
    return watch_ ? &watch_ : nullptr;
}

GenerateResult generate(const Model& model, InferenceState& state, ThreadPool& pool,
                        Sampler& sampler, std::span<const int32_t> prompt,
                        const GenerateOptions& options, const TokenCallback& on_token) {
    using Clock = std::chrono::steady_clock;
    const auto seconds = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
    GenerateResult result;
    result.stats.prompt_tokens = static_cast<int64_t>(prompt.size());
    const Tokenizer& tok = model.tokenizer();
    const auto start = Clock::now();
    // The caller's exclusive use of the engine is back when this returns, however it returns.
    struct ExclusiveOnReturn {
        DecodeStepper* stepper;
        ~ExclusiveOnReturn() {
            if (stepper != nullptr) stepper->exclusive();
        }
    } exclusive_on_return{options.stepper};

    auto filter = [&] {
        return constraint_for_next(options, static_cast<int64_t>(result.ids.size()), state);
    };

    // A long prompt can be stopped part way; what was evaluated stays in the state.
    PrefillWatch prefill(options, static_cast<int64_t>(prompt.size()), start);
    std::span<const float> logits;
    try {
        logits = forward(model, state, pool, prompt, LogitsWanted::Last, prefill.at(0));
    } catch (const EvaluationStopped&) {
        result.finish = FinishReason::Cancelled;
        result.stats.prefill_seconds = seconds(Clock::now() - start);
        return result;
    }
    if (options.on_prefill) {
        options.on_prefill({result.stats.prompt_tokens, result.stats.prompt_tokens,
                            seconds(Clock::now() - start)});
    }
    int32_t next = sampler.sample(logits, filter());
    const auto first = Clock::now();
    result.stats.ttft_seconds = seconds(first - start);
    result.stats.prefill_seconds = result.stats.ttft_seconds;

    const int64_t capacity = state.kv.capacity();
    const bool speculate = options.speculation.enabled && options.ngram != nullptr;
    // Recurrent state (hybrid families) cannot be rolled back by moving a length: it is saved
    // before each verification and, unless the whole batch is kept, restored and re-advanced
    // over the kept tokens. The pool is sized here, so the loop does not allocate.
    const bool recurrent = speculate && !state.recurrent.empty();
    RecurrentSnapshotPool snapshots;
    if (recurrent) snapshots.init(state.recurrent, 1);
    // Verification (and re-advance) batches must evaluate bit for bit as one token at a time.
    const int draft_limit = static_cast<int>(
        std::clamp<int64_t>(options.speculation.draft_max, 0, kExactBatchTokens - 1));
    SpeculationGate gate(options.speculation, draft_cost(model, options.speculation),
                         rollback_costs(model, state));
    SpeculationStats& spec = result.stats.speculation;
    std::vector<int32_t> drafts, batch;
    // Emits `token` (already sampled): returns false when generation ends with it or before.
    auto emit = [&](int32_t token) {
        // Accepted before the callback, which may move the reply out of its free part.
        if (filter() != nullptr) options.constraint->accept(token);
        if (!options.ignore_eos && tok.is_eog(token)) {
            result.finish = FinishReason::Stop;
            return false;
        }
        result.ids.push_back(token);
        sampler.accept(token);
        if (speculate) options.ngram->add(token);
        if (on_token && !on_token(token)) {
            result.finish = FinishReason::Cancelled;
            return false;
        }
        if (options.max_tokens >= 0 &&
            static_cast<int64_t>(result.ids.size()) >= options.max_tokens) {
            result.finish = FinishReason::Length;
            return false;
        }
        if (state.kv.length() + 1 > capacity) {
            result.finish = FinishReason::Context;
            return false;
        }
        return true;
    };

    for (;;) {
        if (!emit(next)) break;
        const int32_t token = next;
        // Room for drafts: the context, and the tokens still wanted after this one.
        int64_t room = capacity - state.kv.length() - 1;
        if (options.max_tokens >= 0) {
            room = std::min<int64_t>(
                room, options.max_tokens - static_cast<int64_t>(result.ids.size()) - 1);
        }
        int wanted = 0;
        const bool sharing = options.stepper != nullptr && options.stepper->shares_steps();
        if (speculate && room > 0 && !sharing) {
            options.ngram->draft(static_cast<int>(std::min<int64_t>(room, draft_limit)), drafts);
            if (!drafts.empty() && filter() != nullptr) {
                drafts.resize(options.constraint->accepted_prefix(drafts));
            }
            if (!drafts.empty()) {
                wanted = gate.drafts_wanted(static_cast<int>(drafts.size()), draft_limit);
            }
        }
        if (wanted == 0) {
            logits = options.stepper != nullptr
                         ? options.stepper->step(state, token)
                         : forward(model, state, pool, std::span<const int32_t>(&token, 1),
                                   LogitsWanted::Last);
            next = sampler.sample(logits, filter());
            continue;
        }
        if (options.stepper != nullptr) options.stepper->exclusive();
        // Verify [token, d1..dk] in one pass; row i holds the logits after batch[i].
        drafts.resize(static_cast<size_t>(wanted));
        batch.assign(1, token);
        batch.insert(batch.end(), drafts.begin(), drafts.end());
        const int64_t base = state.kv.length();
        if (recurrent) snapshots.save(0, state.recurrent);
        const std::span<const float> rows = forward(model, state, pool, batch, LogitsWanted::All);
        const size_t n_vocab = rows.size() / batch.size();
        int accepted = 0;
        bool stopped = false;
        for (size_t i = 0; i < drafts.size(); ++i) {
            bool agreed = false;
            next = sampler.sample_draft(rows.subspan(i * n_vocab, n_vocab), drafts[i], agreed,
                                        filter());
            if (!agreed) break;
            ++accepted;
            if (!emit(drafts[i])) {
                stopped = true;
                break;
            }
        }
        if (!stopped && accepted == wanted) {
            // Every draft held: the last row gives one more token for free.
            next = sampler.sample(rows.subspan(drafts.size() * n_vocab, n_vocab), filter());
            ++spec.full_steps;
        }
        // Plain decoding would have evaluated `token` and the accepted drafts; a draft that
        // ended generation (stopped) was emitted but, like any last token, not evaluated.
        const int64_t kept = 1 + accepted - (stopped ? 1 : 0);
        if (kept < static_cast<int64_t>(batch.size())) {
            keep_prefix(model, state, pool, batch, base, kept, recurrent ? &snapshots : nullptr,
                        spec);
        }
        ++spec.verify_steps;
        spec.drafted += wanted;
        spec.accepted += accepted;
        gate.record(wanted, accepted);
        if (stopped) break;
    }
    result.stats.generated_tokens = static_cast<int64_t>(result.ids.size());
    result.stats.decode_seconds = seconds(Clock::now() - first);
    return result;
}

}  // namespace ember
