#include "app/bench/bench_grammar.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <vector>

#include "app/bench/bench_spec.h"
#include "app/commands/commands.h"
#include "engine/generate/constrained.h"
#include "engine/model/forward.h"
#include "engine/model/model.h"
#include "engine/model/state.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/util/thread_pool.h"

namespace ember::app {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Per-token times of one rep, milliseconds, summed over its tokens.
struct RepTimes {
    double forward = 0;        // one-token forward pass
    double plain = 0;          // the unconstrained draw
    double constrained = 0;    // the draw through the grammar (best candidates, else the mask)
    double full_mask = 0;      // a whole-vocabulary mask, every token
    double worst_mask = 0;     // the slowest single mask
    int64_t masks_needed = 0;  // constrained draws the best candidates did not settle
    int64_t documents = 0;     // JSON texts completed (the grammar restarts after each)
};

// Counts whole-vocabulary masks asked for by the sampler.
class CountingFilter : public TokenFilter {
public:
    explicit CountingFilter(grammar::GrammarConstraint& c) : c_(c) {}
    bool allows(int32_t id) override { return c_.allows(id); }
    void mask(std::span<float> logits) override {
        ++masks;
        c_.mask(logits);
    }
    int64_t masks = 0;

private:
    grammar::GrammarConstraint& c_;
};

RepTimes run_rep(const Model& model, InferenceState& state, ThreadPool& pool,
                 grammar::GrammarConstraint& constraint, const std::vector<int32_t>& prompt,
                 int64_t gen, uint64_t seed) {
    RepTimes t;
    state.kv.set_length(0);
    constraint.reset();
    Sampler plain(SamplingParams{.seed = seed});
    Sampler constrained(SamplingParams{.seed = seed});
    CountingFilter filter(constraint);
    std::vector<uint8_t> allowed;
    std::span<const float> logits = forward(model, state, pool, prompt, LogitsWanted::Last);
    for (int64_t i = 0; i < gen; ++i) {
        // A document per 64 tokens at most: the length rule closes it, as a reply's limit would.
        constraint.set_remaining(63 - (i % 64));
        const std::vector<float> row(logits.begin(), logits.end());
        auto t0 = Clock::now();
        (void)plain.sample(row);
        t.plain += ms_since(t0);
        t0 = Clock::now();
        const int32_t next = constrained.sample(row, &filter);
        t.constrained += ms_since(t0);
        t0 = Clock::now();
        constraint.allowed_tokens(allowed);
        const double mask = ms_since(t0);
        t.full_mask += mask;
        t.worst_mask = std::max(t.worst_mask, mask);
        constraint.accept(next);
        if (constraint.finished() ||
            (constraint.complete() && !constraint.matcher().can_continue())) {
            ++t.documents;
            constraint.reset();
        }
        t0 = Clock::now();
        logits =
            forward(model, state, pool, std::span<const int32_t>(&next, 1), LogitsWanted::Last);
        t.forward += ms_since(t0);
    }
    t.masks_needed = filter.masks;
    return t;
}

}  // namespace

int run_bench_grammar(const BenchGrammarArgs& a) {
    const auto grammar = grammar_from_flags(a.format);
    if (!grammar) throw std::runtime_error("bench: give --json-schema or --grammar");
    auto model = load_model(a.model, a.activations, a.gpu);
    const Tokenizer& tok = model->tokenizer();
    auto t0 = Clock::now();
    const auto trie = make_token_trie(tok);
    const double trie_ms = ms_since(t0);
    grammar::GrammarConstraint constraint(grammar, trie);
    ThreadPool pool(a.threads);
    const std::vector<int32_t> prompt = tok.encode("Reply with the order as JSON:");
    auto state = make_state(model->config(), static_cast<int64_t>(prompt.size()) + a.gen + 8,
                            kv_type_of(a.kv_type));
    run_rep(*model, *state, pool, constraint, prompt, std::min<int64_t>(a.gen, 16),
            a.seed);  // warm-up
    std::vector<double> forward, plain, constrained, full, worst;
    int64_t masks = 0, documents = 0;
    for (int r = 0; r < a.reps; ++r) {
        const RepTimes t = run_rep(*model, *state, pool, constraint, prompt, a.gen, a.seed + r);
        const auto per_token = [&](double ms) { return ms / static_cast<double>(a.gen); };
        forward.push_back(per_token(t.forward));
        plain.push_back(per_token(t.plain));
        constrained.push_back(per_token(t.constrained));
        full.push_back(per_token(t.full_mask));
        worst.push_back(t.worst_mask);
        masks += t.masks_needed;
        documents += t.documents;
    }
    const double decode_ms = median(forward) + median(plain);
    const double grammar_ms = std::max(0.0, median(constrained) - median(plain));
    nlohmann::json j = {{"model", a.model},
                        {"vocab", trie->vocab_size()},
                        {"trie_nodes", trie->nodes().size()},
                        {"trie_build_ms", trie_ms},
                        {"threads", a.threads},
                        {"tokens_per_rep", a.gen},
                        {"reps", a.reps},
                        {"decode_ms_per_token", decode_ms},
                        {"grammar_ms_per_token", grammar_ms},
                        {"grammar_share_of_decode", grammar_ms / decode_ms},
                        {"full_mask_ms_per_token", median(full)},
                        {"full_mask_share_of_decode", median(full) / decode_ms},
                        {"worst_full_mask_ms", *std::max_element(worst.begin(), worst.end())},
                        {"draws_needing_the_mask",
                         static_cast<double>(masks) / static_cast<double>(a.gen * a.reps)},
                        {"json_documents_completed", documents}};
    if (a.json_out) {
        std::printf("%s\n", j.dump().c_str());
        return 0;
    }
    std::printf(
        "vocabulary %zu tokens (trie %zu nodes, built in %.0f ms); %lld tokens x %d reps, %d "
        "threads\n"
        "decode            %8.3f ms/token (forward + plain draw)\n"
        "grammar           %8.3f ms/token (%.1f%% of decode; %.0f%% of draws needed the mask)\n"
        "full mask         %8.3f ms/token (%.1f%% of decode; worst %.3f ms)\n",
        trie->vocab_size(), trie->nodes().size(), trie_ms, static_cast<long long>(a.gen), a.reps,
        a.threads, decode_ms, grammar_ms, 100.0 * grammar_ms / decode_ms,
        100.0 * j["draws_needing_the_mask"].get<double>(), median(full),
        100.0 * median(full) / decode_ms, j["worst_full_mask_ms"].get<double>());
    return 0;
}

}  // namespace ember::app
