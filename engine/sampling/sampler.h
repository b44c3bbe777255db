// Token sampling: a fixed chain over one row of logits.
//
//   penalties -> top-k -> softmax(logits / temperature) -> top-p -> min-p -> draw
//
// Top-p and min-p act on the tempered probabilities. Every cut ranks tokens by penalized
// logit, ties going to the lower id, so the kept set never depends on sort internals.
//
// The Sampler owns everything that changes while a conversation runs (the random generator
// and the window of recent tokens the penalties look at) so the model stays const and the
// state can be snapshotted as bytes next to the KV cache. Same seed + same parameters + same
// sequence of logits and accept() calls => same tokens, and on any x86-64 or other IEEE
// platform, not just in one build: the generator (rng.h) and exp (kernels.h) are our own
// rather than the standard library's or libm's.
//
// After the first call with a given vocabulary size, sample(), distribution() and accept()
// do not allocate: every buffer lives in the object and is sized to the vocabulary once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "engine/sampling/rng.h"
#include "engine/sampling/token_filter.h"

namespace ember {

struct SamplingParams {
    // 0 means greedy: argmax after penalties, no draw. Must be finite and >= 0.
    float temperature = 0.8f;
    // Keep the k most likely tokens; 0 disables the cut.
    int32_t top_k = 40;
    // Keep the smallest set of most likely tokens whose probability mass reaches top_p;
    // 1 disables the cut. Must lie in (0, 1].
    float top_p = 0.95f;
    // Drop tokens whose probability is below min_p x the most likely token's; 0 disables.
    float min_p = 0.05f;
    // llama.cpp-style: logits of recently seen tokens are divided by this when positive and
    // multiplied when negative; 1 is off, > 1 discourages repetition.
    float repeat_penalty = 1.0f;
    // OpenAI-style: logit -= presence_penalty if the token occurred in the window, and
    // -= frequency_penalty x its number of occurrences there. 0 is off; negative encourages.
    float presence_penalty = 0.0f;
    float frequency_penalty = 0.0f;
    // How many of the most recently accepted tokens the penalties consider; 0 disables them.
    int32_t penalty_last_n = 64;
    // Seed for the constructor; reset(seed) reseeds later. Nothing in the engine picks a
    // random seed by itself: reproducible output is the default, the app may choose otherwise.
    uint64_t seed = 0;

    // Upper bound on penalty_last_n: the window is a preallocated ring, and a larger window
    // than any context would only waste memory.
    static constexpr int32_t kMaxPenaltyLastN = 1 << 20;

    // Throws std::invalid_argument naming the first bad field and its value.
    void validate() const;
};

// One entry of the final distribution, as reported by Sampler::distribution().
struct TokenProb {
    int32_t id = 0;
    float p = 0.0f;
};

// One Sampler per conversation (or per parallel sequence); it is not thread-safe.
class Sampler {
public:
    // Validates `params` (std::invalid_argument) and seeds the generator with params.seed.
    explicit Sampler(const SamplingParams& params = {});

    const SamplingParams& params() const { return params_; }
    // Changes the parameters mid-conversation; the generator state is kept (params.seed is
    // ignored, use reset for that) and so are the most recent min(history, penalty_last_n)
    // tokens. Validates first; on error nothing changes.
    void set_params(const SamplingParams& params);

    // Records a token in the penalty window. The sampler never records its own picks: the
    // caller accepts what it actually emits (and, if it wants the prompt penalized too, the
    // prompt tokens). Throws std::invalid_argument for a negative id.
    void accept(int32_t token);
    void accept(std::span<const int32_t> tokens);

    // Runs the chain over `logits` (one value per vocabulary entry) and returns the chosen id.
    // Greedy (temperature 0) returns the lowest id among the maximal penalized logits and does
    // not touch the generator; otherwise exactly one 64-bit draw is consumed per call.
    // NaN logits count as -inf and +inf as the largest float. Throws std::invalid_argument
    // when `logits` is empty or no logit is above -inf.
    // With a `filter` (constrained decoding), tokens it does not allow are dropped after the
    // penalties and before the chain, exactly as if their logits were -inf.
    int32_t sample(std::span<const float> logits, TokenFilter* filter = nullptr);

    // Speculative sampling of a drafted token (n-gram speculation). Returns the token to emit
    // at this position and sets `accepted` when it is the draft. Greedy: the argmax, accepted
    // when it equals the draft; no draw. Otherwise the draft is accepted with the probability
    // p(draft) the chain gives it (one draw), and on rejection a token is drawn from the
    // chain's distribution with the draft removed and renormalized (a second draw). The
    // emitted token is then distributed exactly as sample() would draw it; only the number of
    // draws differs, so a seeded run with speculation is reproducible but not draw-for-draw
    // the same as one without.
    // `filter` as for sample(): a draft it does not allow is always rejected.
    int32_t sample_draft(std::span<const float> logits, int32_t draft, bool& accepted,
                         TokenFilter* filter = nullptr);

    // The distribution sample() would draw from, most likely first (ties: lower id first),
    // probabilities summing to 1. Does not touch the generator or the history. Meant for
    // tests and for showing alternatives; it sorts the whole kept set, so it is slower than
    // sample() when the chain keeps most of a large vocabulary. The span stays valid until the
    // next call to sample() or distribution().
    std::span<const TokenProb> distribution(std::span<const float> logits,
                                            TokenFilter* filter = nullptr);

    // Reseeds the generator (and params().seed) and clears the penalty window.
    void reset(uint64_t seed);

    // Tokens in the penalty window, oldest first.
    std::vector<int32_t> history() const;

    // Generator state and penalty window as a versioned little-endian blob (see sampler.cpp
    // for the layout). The parameters are not included: they are configuration, stored by
    // whoever owns the conversation settings.
    std::vector<uint8_t> save_state() const;
    // Restores a blob from save_state(). Throws std::invalid_argument on a malformed blob and
    // then leaves the sampler unchanged. If the blob holds more tokens than penalty_last_n,
    // the most recent ones are kept.
    void load_state(std::span<const uint8_t> bytes);

private:
    // One surviving token during the chain. `weight` is exp((logit - max) / temperature),
    // i.e. its probability up to the common normalizer.
    struct Candidate {
        int32_t id;
        float logit;
        float weight;
    };
    // What the chain left to draw from: either candidates_[0, n_kept) (ranked after top-k,
    // in a fixed but unranked order otherwise), or the whole vocabulary with weights in
    // weights_ (when no cut was active).
    struct Kept {
        bool whole_vocab = false;
        size_t n_kept = 0;
        double mass = 0.0;  // sum of the kept weights
    };

    void load_logits(std::span<const float> logits);
    void apply_filter(TokenFilter& filter);
    bool filter_best_candidates(TokenFilter& filter, size_t needed);
    void apply_penalties();
    float max_logit() const;
    int32_t argmax() const;
    float inverse_temperature() const;
    double whole_vocab_mass();
    int32_t draw_whole_vocab(double target) const;
    int32_t draw_candidates(size_t n_kept, double target) const;
    Kept run_chain();
    void select_top_k(size_t k);
    size_t cut_sorted_candidates(double total_mass, size_t n_sorted) const;
    Kept cut_whole_vocab(float max_logit);
    size_t top_p_prefix(double target);
    size_t select_mass(size_t begin, size_t end, double residual);
    void resize_ring(size_t capacity);

    SamplingParams params_;
    Rng rng_;

    // Penalty window: a ring of the last penalty_last_n accepted tokens.
    std::vector<int32_t> ring_;
    size_t ring_head_ = 0;  // next slot to write
    size_t ring_size_ = 0;

    // Per-call scratch, kept to avoid allocating on every token.
    std::vector<float> work_;         // penalized, sanitized logits (vocabulary size)
    std::vector<float> weights_;      // exp((logit - max) / T) when the whole vocabulary is used
    std::vector<double> block_sums_;  // sums of weights_ per draw block
    std::vector<Candidate> candidates_;
    std::vector<int32_t> window_sorted_;  // copy of the ring, sorted to count occurrences
    std::vector<TokenProb> probs_;        // distribution() output
};

}  // namespace ember
