#include "engine/generate/generate.h"

#include <algorithm>
#include <chrono>

#include "engine/generate/ngram.h"
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

// Decides, from a decayed estimate of the per-draft acceptance rate, how many drafts a
// verification step should carry (0: decode plainly). Expected tokens per step with k drafts
// accepted independently at rate a: 1 + a + ... + a^k; cost: 1 + draft_cost * k.
class SpeculationGate {
public:
    explicit SpeculationGate(const SpeculationOptions& o) : o_(o) {}

    int drafts_wanted(int available) {
        int best_k = 0;
        double best_gain = 1.0;  // plain decoding: one token per unit of cost
        double expected = 1.0, power = 1.0;
        for (int k = 1; k <= std::min(available, o_.draft_max); ++k) {
            power *= acceptance_;
            expected += power;
            const double gain = expected / (1.0 + o_.draft_cost * k);
            if (gain > best_gain) {
                best_gain = gain;
                best_k = k;
            }
        }
        if (best_k > 0) return best_k;
        // Shut: probe with a full draft now and then, so a change of workload is noticed.
        if (++plain_steps_ < o_.probe_interval) return 0;
        plain_steps_ = 0;
        return std::min(available, o_.draft_max);
    }
    void record(int drafted, int accepted) {
        const double rate = static_cast<double>(accepted) / static_cast<double>(drafted);
        acceptance_ = o_.decay * acceptance_ + (1.0 - o_.decay) * rate;
    }

private:
    const SpeculationOptions& o_;
    double acceptance_ = 0.5;  // optimistic start: drafting is tried early
    int plain_steps_ = 0;
};

}  // namespace

GenerateResult generate(const Model& model, InferenceState& state, ThreadPool& pool,
                        Sampler& sampler, std::span<const int32_t> prompt,
                        const GenerateOptions& options, const TokenCallback& on_token) {
    using Clock = std::chrono::steady_clock;
    const auto seconds = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
    GenerateResult result;
    result.stats.prompt_tokens = static_cast<int64_t>(prompt.size());
    const Tokenizer& tok = model.tokenizer();
    const auto start = Clock::now();

    std::span<const float> logits = forward(model, state, pool, prompt, LogitsWanted::Last);
    int32_t next = sampler.sample(logits);
    const auto first = Clock::now();
    result.stats.ttft_seconds = seconds(first - start);
    result.stats.prefill_seconds = result.stats.ttft_seconds;

    const int64_t capacity = state.kv.capacity();
    // Recurrent state cannot be rolled back by moving a length: speculation on hybrid families
    // needs snapshot/restore around verification, which is not wired here yet.
    const bool speculate =
        options.speculation.enabled && options.ngram != nullptr && state.recurrent.empty();
    SpeculationGate gate(options.speculation);
    std::vector<int32_t> drafts, batch;
    // Emits `token` (already sampled): returns false when generation ends with it or before.
    auto emit = [&](int32_t token) {
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
        if (speculate && room > 0) {
            options.ngram->draft(
                static_cast<int>(std::min<int64_t>(room, options.speculation.draft_max)), drafts);
            if (!drafts.empty()) wanted = gate.drafts_wanted(static_cast<int>(drafts.size()));
        }
        if (wanted == 0) {
            logits = forward(model, state, pool, std::span<const int32_t>(&token, 1),
                             LogitsWanted::Last);
            next = sampler.sample(logits);
            continue;
        }
        // Verify [token, d1..dk] in one pass; row i holds the logits after batch[i].
        drafts.resize(static_cast<size_t>(wanted));
        batch.assign(1, token);
        batch.insert(batch.end(), drafts.begin(), drafts.end());
        const int64_t base = state.kv.length();
        const std::span<const float> rows = forward(model, state, pool, batch, LogitsWanted::All);
        const size_t n_vocab = rows.size() / batch.size();
        int accepted = 0;
        bool stopped = false;
        for (size_t i = 0; i < drafts.size(); ++i) {
            bool agreed = false;
            next = sampler.sample_draft(rows.subspan(i * n_vocab, n_vocab), drafts[i], agreed);
            if (!agreed) break;
            ++accepted;
            if (!emit(drafts[i])) {
                stopped = true;
                break;
            }
        }
        if (!stopped && accepted == wanted) {
            // Every draft held: the last row gives one more token for free.
            next = sampler.sample(rows.subspan(drafts.size() * n_vocab, n_vocab));
        }
        // The cache keeps `token` and the accepted drafts; a draft that ended generation
        // (stopped) was emitted but, like any last token, not kept as evaluated.
        state.kv.set_length(base + 1 + accepted - (stopped ? 1 : 0));
        ++result.stats.speculation.verify_steps;
        result.stats.speculation.drafted += wanted;
        result.stats.speculation.accepted += accepted;
        gate.record(wanted, accepted);
        if (stopped) break;
    }
    result.stats.generated_tokens = static_cast<int64_t>(result.ids.size());
    result.stats.decode_seconds = seconds(Clock::now() - first);
    return result;
}

}  // namespace ember
