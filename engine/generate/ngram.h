// The n-gram table behind self-speculative decoding: which tokens followed each 1- to 4-token
// context in the prompt and the reply so far, so the decoder can guess the next few
// tokens without a draft model and verify the guesses in one batched forward pass.
//
// Each context keeps up to kCandidates next tokens with a count and the time they were last
// seen; drafting takes the longest context that has a confident candidate, appends it, and
// goes on from the new context. The table is bounded: when it holds more than
// max_contexts contexts, the least recently used half is evicted.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace ember {

struct NgramOptions {
    // Shortest context looked up (tokens). One token finds a run of one token the model repeats
    // (and a phrase it copies) one step earlier than two: on the random-weight benchmark models
    // that lifted the predictable tokens of a reply by 8-12% at the same acceptance.
    int min_context = 1;
    int max_context = 4;  // longest context looked up
    // A candidate is drafted only when seen at least this often after its context ...
    int32_t min_support = 1;
    // ... and it holds at least this share of what followed the context.
    float min_confidence = 0.5f;
    size_t max_contexts = size_t{1} << 16;
};

class NgramTable {
public:
    static constexpr size_t kCandidates = 4;

    explicit NgramTable(NgramOptions options = {});

    // Forgets everything.
    void clear();
    // Appends tokens to the history, recording each as a continuation of the contexts before it.
    void add(std::span<const int32_t> tokens);
    void add(int32_t token) { add(std::span<const int32_t>(&token, 1)); }
    // Guesses up to `max_tokens` tokens that continue the history; appends them to `out`
    // (which is cleared first). Allocates nothing once `out` has grown.
    void draft(int max_tokens, std::vector<int32_t>& out) const;

    size_t contexts() const { return map_.size(); }
    const std::vector<int32_t>& history() const { return history_; }

private:
    struct Candidate {
        int32_t token = -1;
        int32_t count = 0;
        uint64_t last_seen = 0;
    };
    struct Entry {
        std::array<Candidate, kCandidates> candidates;
        int32_t total = 0;  // continuations seen, evicted candidates included
        uint64_t last_used = 0;
    };

    // Key of the `n` tokens ending just before `end` in `tokens` (n folded in, so contexts of
    // different lengths never share a key).
    static uint64_t context_key(const int32_t* end, int n);
    void record(uint64_t key, int32_t next);
    void evict_oldest_half();
    // The confident continuation of the context ending at `end` (tokens before it), or -1.
    int32_t best_next(const int32_t* end, size_t available) const;

    NgramOptions options_;
    std::unordered_map<uint64_t, Entry> map_;
    std::vector<int32_t> history_;
    uint64_t tick_ = 0;
    mutable std::vector<int32_t> scratch_;  // history tail + drafts, for chained lookups
};

}  // namespace ember
