#include "engine/sampling/sampler.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

#include "engine/sampling/kernels.h"

namespace ember {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kMaxFloat = std::numeric_limits<float>::max();

namespace kern = sampling_kernels;

// Up to this k, top-k keeps a heap of k entries while scanning the logits: almost every block
// of logits fails one vector comparison against the current k-th best, so a 152k vocabulary
// costs one read and no candidate list. Larger k make the heap updates dominate, and
// nth_element over all ids wins.
constexpr size_t kHeapTopKMax = 1024;

// Constrained decoding checks the best-ranked tokens one by one before it asks for a mask of
// the whole vocabulary: up to this many, or 4x the tokens the chain needs, whichever is more.
constexpr size_t kFilterProbeMin = 64;
// Past this top-k, checking candidates one by one costs more than the mask.
constexpr size_t kFilterProbeMaxNeeded = 256;

// Block length for drawing over the whole vocabulary: block sums (vectorized) find the block
// holding the target, and only that block is scanned one token at a time.
constexpr size_t kDrawBlock = 256;

// Sampler state blob, little-endian:
//   [0,4) magic "ESMP"  [4,8) u32 version  [8,40) 4 x u64 generator state
//   [40,44) u32 token count n  [44, 44 + 4n) i32 tokens, oldest first
constexpr uint8_t kStateMagic[4] = {'E', 'S', 'M', 'P'};
constexpr uint32_t kStateVersion = 1;
constexpr size_t kStateHeaderBytes = 44;

// NaN would poison every comparison and sum downstream; a model that emits one for a token
// has said nothing about it, so it becomes impossible. +inf becomes the largest float so that
// (logit - max) stays finite for the maximal tokens.
inline float sanitize(float x) {
    return std::isnan(x) ? kNegInf : std::min(x, kMaxFloat);
}

[[noreturn]] void bad_param(const char* field, double value, const char* rule) {
    std::ostringstream msg;
    msg << "SamplingParams." << field << " = " << value << ": " << rule;
    throw std::invalid_argument(msg.str());
}

[[noreturn]] void bad_state(const std::string& why) {
    throw std::invalid_argument("Sampler::load_state: " + why);
}

void put_u32(uint8_t* p, uint32_t v) {
    for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void put_u64(uint8_t* p, uint64_t v) {
    for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t get_u32(const uint8_t* p) {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
    return v;
}
uint64_t get_u64(const uint8_t* p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
    return v;
}

// The one ranking behind every cut: higher logit first, then lower id. Being a strict total
// order, it makes the kept set independent of how the standard library's sort, heap or
// nth_element happens to break ties.
template <class C>
bool ranks_before(const C& a, const C& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

}  // namespace

void SamplingParams::validate() const {
    if (!(std::isfinite(temperature) && temperature >= 0.0f)) {
        bad_param("temperature", temperature, "must be finite and >= 0 (0 = greedy)");
    }
    if (top_k < 0) bad_param("top_k", top_k, "must be >= 0 (0 = disabled)");
    // Written so that NaN fails too.
    if (!(top_p > 0.0f && top_p <= 1.0f)) {
        bad_param("top_p", top_p, "must lie in (0, 1] (1 = disabled)");
    }
    if (!(min_p >= 0.0f && min_p <= 1.0f)) {
        bad_param("min_p", min_p, "must lie in [0, 1] (0 = disabled)");
    }
    if (!(std::isfinite(repeat_penalty) && repeat_penalty > 0.0f)) {
        bad_param("repeat_penalty", repeat_penalty, "must be finite and > 0 (1 = off)");
    }
    if (!std::isfinite(presence_penalty)) {
        bad_param("presence_penalty", presence_penalty, "must be finite (0 = off)");
    }
    if (!std::isfinite(frequency_penalty)) {
        bad_param("frequency_penalty", frequency_penalty, "must be finite (0 = off)");
    }
    if (penalty_last_n < 0 || penalty_last_n > kMaxPenaltyLastN) {
        bad_param("penalty_last_n", penalty_last_n, "must lie in [0, 1048576] (0 = off)");
    }
}

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {
    params_.validate();
    resize_ring(static_cast<size_t>(params_.penalty_last_n));
}

void Sampler::set_params(const SamplingParams& params) {
    params.validate();
    resize_ring(static_cast<size_t>(params.penalty_last_n));
    const uint64_t seed = params_.seed;
    params_ = params;
    params_.seed = seed;  // params().seed keeps naming the seed the generator last got
}

void Sampler::resize_ring(size_t capacity) {
    const std::vector<int32_t> recent = history();
    const size_t keep = std::min(recent.size(), capacity);
    std::vector<int32_t> ring(capacity, 0);
    std::copy(recent.end() - static_cast<std::ptrdiff_t>(keep), recent.end(), ring.begin());
    window_sorted_.reserve(capacity);
    // Invariant relied on by apply_penalties: the occupied slots are ring_[0, ring_size_)
    // until the ring is full, so filling starts at slot `keep`.
    ring_ = std::move(ring);
    ring_size_ = keep;
    ring_head_ = capacity == 0 ? 0 : keep % capacity;
}

void Sampler::accept(int32_t token) {
    if (token < 0) {
        throw std::invalid_argument("Sampler::accept: negative token id " + std::to_string(token));
    }
    if (ring_.empty()) return;
    ring_[ring_head_] = token;
    ring_head_ = (ring_head_ + 1) % ring_.size();
    ring_size_ = std::min(ring_size_ + 1, ring_.size());
}

void Sampler::accept(std::span<const int32_t> tokens) {
    // Check everything first so a bad id leaves the window as it was.
    for (const int32_t token : tokens) {
        if (token < 0) {
            throw std::invalid_argument("Sampler::accept: negative token id " +
                                        std::to_string(token));
        }
    }
    for (const int32_t token : tokens) accept(token);
}

std::vector<int32_t> Sampler::history() const {
    std::vector<int32_t> out;
    out.reserve(ring_size_);
    if (ring_size_ == 0) return out;
    const size_t capacity = ring_.size();
    const size_t start = (ring_head_ + capacity - ring_size_) % capacity;
    for (size_t i = 0; i < ring_size_; ++i) out.push_back(ring_[(start + i) % capacity]);
    return out;
}

void Sampler::reset(uint64_t seed) {
    rng_.reseed(seed);
    params_.seed = seed;
    ring_head_ = 0;
    ring_size_ = 0;
}

void Sampler::load_logits(std::span<const float> logits) {
    if (logits.empty()) throw std::invalid_argument("Sampler: empty logits");
    if (logits.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
        throw std::invalid_argument("Sampler: vocabulary larger than int32 ids allow");
    }
    const size_t n = logits.size();
    // All sized to the vocabulary once, so later calls never allocate.
    work_.resize(n);
    candidates_.reserve(n);
    probs_.reserve(n);
    for (size_t i = 0; i < n; ++i) work_[i] = sanitize(logits[i]);
}

void Sampler::apply_penalties() {
    const float repeat = params_.repeat_penalty;
    const float presence = params_.presence_penalty;
    const float frequency = params_.frequency_penalty;
    if (ring_size_ == 0 || (repeat == 1.0f && presence == 0.0f && frequency == 0.0f)) return;

    // Sorting a copy of the window groups equal tokens, which gives each distinct token and its
    // count without a vocabulary-sized counter; the window is small (64 by default).
    window_sorted_.assign(ring_.begin(), ring_.begin() + static_cast<std::ptrdiff_t>(ring_size_));
    std::sort(window_sorted_.begin(), window_sorted_.end());
    const size_t n_vocab = work_.size();
    for (size_t i = 0; i < window_sorted_.size();) {
        const int32_t token = window_sorted_[i];
        size_t j = i + 1;
        while (j < window_sorted_.size() && window_sorted_[j] == token) ++j;
        const auto count = static_cast<float>(j - i);
        i = j;
        // Ids beyond this vocabulary can only come from a caller mixing models; they have no
        // logit to penalize.
        if (static_cast<size_t>(token) >= n_vocab) continue;
        float& logit = work_[static_cast<size_t>(token)];
        // Dividing a negative logit would raise it, so negative ones are multiplied instead:
        // either way the token becomes less likely when repeat > 1.
        if (repeat != 1.0f) logit = logit > 0.0f ? logit / repeat : logit * repeat;
        logit -= count * frequency + presence;
        logit = std::min(logit, kMaxFloat);  // a negative penalty may push FLT_MAX to +inf
    }
}

float Sampler::max_logit() const {
    const float max = kern::max_value(work_.data(), work_.size());
    if (max == kNegInf) throw std::invalid_argument("Sampler: every logit is -inf or NaN");
    return max;
}

int32_t Sampler::argmax() const {
    // The first occurrence of the maximum: the lowest id wins a tie.
    return static_cast<int32_t>(kern::first_index_of(work_.data(), work_.size(), max_logit()));
}

void Sampler::select_top_k(size_t k) {
    candidates_.clear();
    const auto worse_first = [](const Candidate& a, const Candidate& b) {
        return ranks_before(a, b);
    };
    if (k <= kHeapTopKMax) {
        for (size_t i = 0; i < k; ++i) {
            candidates_.push_back({static_cast<int32_t>(i), work_[i], 0.0f});
        }
        // With ranks_before as "less", the heap's front is the worst of the current k.
        std::make_heap(candidates_.begin(), candidates_.end(), worse_first);
        float worst = candidates_.front().logit;
        const size_t n = work_.size();
        size_t i = k;
        while (i < n) {
            if (i + kern::kScanBlock <= n && !kern::any_above(&work_[i], worst)) {
                i += kern::kScanBlock;
                continue;
            }
            const size_t block_end = std::min(i + kern::kScanBlock, n);
            for (; i < block_end; ++i) {
                const float logit = work_[i];
                // A later id with an equal logit ranks after everything in the heap, so only
                // a strictly larger logit can enter.
                if (logit > worst) {
                    std::pop_heap(candidates_.begin(), candidates_.end(), worse_first);
                    candidates_.back() = {static_cast<int32_t>(i), logit, 0.0f};
                    std::push_heap(candidates_.begin(), candidates_.end(), worse_first);
                    worst = candidates_.front().logit;
                }
            }
        }
    } else {
        for (size_t i = 0; i < work_.size(); ++i) {
            candidates_.push_back({static_cast<int32_t>(i), work_[i], 0.0f});
        }
        std::nth_element(candidates_.begin(), candidates_.begin() + static_cast<std::ptrdiff_t>(k),
                         candidates_.end(), worse_first);
        candidates_.resize(k);
    }
    std::sort(candidates_.begin(), candidates_.end(), worse_first);
}

size_t Sampler::cut_sorted_candidates(double total_mass, size_t n_sorted) const {
    // Top-p and min-p each keep a prefix of the ranked candidates, and min-p compares against
    // the most likely token, which top-p's renormalization does not change. So "top-p, then
    // min-p" keeps exactly the shorter of the two prefixes, and top-p's target is a fraction of
    // the mass before either cut.
    size_t keep = n_sorted;
    if (params_.min_p > 0.0f) {
        // Weights are probabilities relative to the first candidate (weight 1) and never
        // increase along the ranking.
        size_t m = 1;
        while (m < keep && candidates_[m].weight >= params_.min_p) ++m;
        keep = m;
    }
    if (params_.top_p < 1.0f) {
        const double target = static_cast<double>(params_.top_p) * total_mass;
        double cumulative = 0.0;
        size_t i = 0;
        while (i < keep) {
            cumulative += candidates_[i].weight;
            ++i;
            if (cumulative >= target) break;
        }
        keep = i;
    }
    return std::max<size_t>(keep, 1);
}

size_t Sampler::select_mass(size_t begin, size_t end, double residual) {
    // Halves the range with nth_element until the minimal best-ranked prefix whose weights
    // reach `residual` is pinned down: O(n) expected, against O(n log n) for sorting. On return
    // candidates_[begin, begin + r) are that prefix (in no particular order).
    const auto better = [](const Candidate& a, const Candidate& b) { return ranks_before(a, b); };
    const auto at = [this](size_t i) {
        return candidates_.begin() + static_cast<std::ptrdiff_t>(i);
    };
    size_t lo = begin;
    size_t hi = end;
    while (hi - lo > 1) {
        const size_t mid = lo + (hi - lo) / 2;
        std::nth_element(at(lo), at(mid), at(hi), better);
        double upper = 0.0;
        for (size_t i = lo; i < mid; ++i) upper += candidates_[i].weight;
        if (upper >= residual) {
            hi = mid;  // the prefix ends inside [lo, mid)
            continue;
        }
        residual -= upper;
        if (candidates_[mid].weight >= residual) return mid + 1 - begin;
        residual -= candidates_[mid].weight;
        lo = mid + 1;
    }
    // One candidate left completes the prefix; none left means rounding kept the target just
    // out of reach, and the whole range is kept.
    return (lo < hi ? lo + 1 : lo) - begin;
}

float Sampler::inverse_temperature() const {
    // A subnormal temperature would overflow 1/T to inf and turn 0 * inf into NaN for the
    // maximal tokens; FLT_MAX gives the same limit (only the maximal tokens keep weight).
    return std::min(1.0f / params_.temperature, kMaxFloat);
}

double Sampler::whole_vocab_mass() {
    // Summed block by block and the block sums kept, so the draw can skip whole blocks and its
    // running sum retraces this total exactly.
    const size_t n = weights_.size();
    block_sums_.resize((n + kDrawBlock - 1) / kDrawBlock);
    double total = 0.0;
    for (size_t b = 0; b < block_sums_.size(); ++b) {
        const size_t begin = b * kDrawBlock;
        block_sums_[b] = kern::sum(&weights_[begin], std::min(kDrawBlock, n - begin));
        total += block_sums_[b];
    }
    return total;
}

Sampler::Kept Sampler::cut_whole_vocab(float max_logit) {
    const size_t n = work_.size();
    weights_.resize(n);
    kern::tempered_weights(work_.data(), weights_.data(), n, max_logit, inverse_temperature());
    const double total = whole_vocab_mass();
    const float min_p = params_.min_p;
    const bool top_p_on = params_.top_p < 1.0f;
    if (min_p <= 0.0f && !top_p_on) return Kept{true, n, total};

    // Top-p and min-p each keep a best-ranked prefix and the result is the shorter one (see
    // cut_sorted_candidates). Weights are relative to the best token (weight 1), so the min-p
    // set is {weight >= min_p}. If it holds less mass than top-p asks for, min-p is the
    // shorter cut; otherwise the top-p prefix lies inside it.
    const double target = static_cast<double>(params_.top_p) * total;
    const double above_min_p = min_p > 0.0f ? kern::sum_at_least(weights_.data(), n, min_p) : total;
    Kept kept;
    candidates_.clear();
    if (!top_p_on || above_min_p < target) {
        for (size_t i = 0; i < n; ++i) {
            if (weights_[i] >= min_p) {
                candidates_.push_back({static_cast<int32_t>(i), work_[i], weights_[i]});
            }
        }
        kept.n_kept = candidates_.size();
    } else {
        kept.n_kept = top_p_prefix(target);
    }
    for (size_t i = 0; i < kept.n_kept; ++i) kept.mass += candidates_[i].weight;
    return kept;
}

size_t Sampler::top_p_prefix(double target) {
    // Finds the top-p set without sorting the vocabulary: a histogram of mass over buckets of
    // weight (kernels.h) locates the bucket in which the ranked cumulative mass crosses the
    // target; better buckets are kept whole and only the crossing bucket is searched. The last
    // bucket is open-ended and never summed (it is where most of a peaked vocabulary lies, and
    // skipping it keeps the scattered adds few); if the crossing is not found before it, it
    // plays the crossing bucket and select_mass takes what it needs from it.
    const size_t n = weights_.size();
    constexpr uint32_t kLast = kern::kBuckets - 1;
    std::array<double, kern::kBuckets> bucket_mass{};
    for (size_t i = 0; i < n; ++i) {
        const uint32_t b = kern::weight_bucket(weights_[i]);
        if (b != kLast) bucket_mass[b] += weights_[i];
    }
    uint32_t crossing = 0;
    double mass_before = 0.0;
    for (; crossing < kLast; ++crossing) {
        if (mass_before + bucket_mass[crossing] >= target) break;
        mass_before += bucket_mass[crossing];
    }

    // Where in the crossing bucket the prefix ends: its last (worst-ranked) token.
    candidates_.clear();
    for (size_t i = 0; i < n; ++i) {
        if (kern::weight_bucket(weights_[i]) == crossing) {
            candidates_.push_back({static_cast<int32_t>(i), work_[i], weights_[i]});
        }
    }
    const auto better = [](const Candidate& a, const Candidate& b) { return ranks_before(a, b); };
    const size_t r = select_mass(0, candidates_.size(), target - mass_before);
    // r is 0 only when rounding left the target just out of reach with an empty last bucket.
    const Candidate last =
        r > 0 ? *std::max_element(candidates_.begin(),
                                  candidates_.begin() + static_cast<std::ptrdiff_t>(r), better)
              : Candidate{-1, kNegInf, 0.0f};

    // The kept set in id order, so the draw does not depend on how nth_element (which differs
    // between standard libraries) permuted the bucket.
    candidates_.clear();
    for (size_t i = 0; i < n; ++i) {
        const uint32_t b = kern::weight_bucket(weights_[i]);
        const Candidate c{static_cast<int32_t>(i), work_[i], weights_[i]};
        if (b < crossing || (b == crossing && r > 0 && !ranks_before(last, c))) {
            candidates_.push_back(c);
        }
    }
    return candidates_.size();
}

Sampler::Kept Sampler::run_chain() {
    const size_t n = work_.size();
    const auto k = static_cast<size_t>(params_.top_k);
    if (k == 0 || k >= n) return cut_whole_vocab(max_logit());
    select_top_k(k);
    const float max = candidates_.front().logit;
    if (max == kNegInf) throw std::invalid_argument("Sampler: every logit is -inf or NaN");
    // Top-k renormalizes: the softmax runs over the k survivors only.
    const float inv_temperature = inverse_temperature();
    double total = 0.0;
    for (Candidate& c : candidates_) {
        c.weight = kern::exp_nonpositive((c.logit - max) * inv_temperature);
        total += c.weight;
    }
    Kept kept;
    kept.n_kept = cut_sorted_candidates(total, candidates_.size());
    for (size_t i = 0; i < kept.n_kept; ++i) kept.mass += candidates_[i].weight;
    return kept;
}

bool Sampler::filter_best_candidates(TokenFilter& filter, size_t needed) {
    const size_t n = work_.size();
    const size_t probe = std::min(n, std::max(kFilterProbeMin, 4 * needed));
    select_top_k(probe);  // ranked, best first
    size_t found = 0;
    for (size_t i = 0; i < probe && found < needed; ++i) {
        if (candidates_[i].logit == kNegInf) break;
        if (filter.allows(candidates_[i].id)) candidates_[found++] = candidates_[i];
    }
    if (found < needed) return false;
    // The `needed` best allowed tokens are what the chain would keep from the masked logits
    // (greedy: the best; top-k: the k best), so the rest may as well be -inf.
    std::fill(work_.begin(), work_.end(), kNegInf);
    for (size_t i = 0; i < found; ++i) {
        work_[static_cast<size_t>(candidates_[i].id)] = candidates_[i].logit;
    }
    return true;
}

void Sampler::apply_filter(TokenFilter& filter) {
    // Greedy needs the best allowed token, top-k the k best; anything else (top-k off) needs
    // the whole allowed set.
    const auto k = static_cast<size_t>(params_.top_k);
    const size_t needed = params_.temperature == 0.0f ? 1 : (k > 0 && k < work_.size() ? k : 0);
    if (needed > 0 && needed <= kFilterProbeMaxNeeded && filter_best_candidates(filter, needed)) {
        return;
    }
    filter.mask(work_);
}

int32_t Sampler::sample(std::span<const float> logits, TokenFilter* filter) {
    load_logits(logits);
    apply_penalties();
    if (filter != nullptr) apply_filter(*filter);
    if (params_.temperature == 0.0f) return argmax();
    const Kept kept = run_chain();
    const double target = rng_.next_double() * kept.mass;
    if (kept.whole_vocab) return draw_whole_vocab(target);

    return draw_candidates(kept.n_kept, target);
}

int32_t Sampler::draw_candidates(size_t n_kept, double target) const {
    // Inverse-CDF draw over the kept candidates in their fixed order, summed in the order that
    // made the mass. Zero weights are skipped so rounding at the end can never pick one.
    double cumulative = 0.0;
    int32_t last_positive = -1;
    for (size_t i = 0; i < n_kept; ++i) {
        const Candidate& c = candidates_[i];
        if (c.weight > 0.0f) {
            cumulative += c.weight;
            last_positive = c.id;
            if (target < cumulative) return last_positive;
        }
    }
    // Only reachable when the target rounds up to the full mass; -1 only when every weight
    // was zero.
    return last_positive;
}

int32_t Sampler::draw_whole_vocab(double target) const {
    // Whole blocks first, then the block holding the target one token at a time.
    const size_t n = weights_.size();
    double cumulative = 0.0;
    size_t b = 0;
    for (; b < block_sums_.size(); ++b) {
        if (target < cumulative + block_sums_[b]) break;
        cumulative += block_sums_[b];
    }
    if (b < block_sums_.size()) {
        int32_t last_positive = -1;
        for (size_t i = b * kDrawBlock; i < std::min((b + 1) * kDrawBlock, n); ++i) {
            if (weights_[i] > 0.0f) {
                cumulative += weights_[i];
                last_positive = static_cast<int32_t>(i);
                if (target < cumulative) return last_positive;
            }
        }
        // The token-by-token sum fell short of the vectorized block sum by rounding.
        if (last_positive >= 0) return last_positive;
    }
    // The target rounded up to the full mass: the last token of positive weight.
    size_t i = n - 1;
    while (weights_[i] <= 0.0f) --i;  // the best token has weight 1, so this stops
    return static_cast<int32_t>(i);
}

int32_t Sampler::sample_draft(std::span<const float> logits, int32_t draft, bool& accepted,
                              TokenFilter* filter) {
    load_logits(logits);
    apply_penalties();
    if (filter != nullptr) apply_filter(*filter);
    if (params_.temperature == 0.0f) {
        const int32_t best = argmax();
        accepted = best == draft;
        return best;
    }
    const Kept kept = run_chain();
    // The draft's weight in what the chain kept (0 when it was cut).
    double draft_weight = 0.0;
    size_t draft_index = 0;
    if (kept.whole_vocab) {
        if (draft >= 0 && static_cast<size_t>(draft) < weights_.size()) {
            draft_weight = weights_[static_cast<size_t>(draft)];
        }
    } else {
        for (size_t i = 0; i < kept.n_kept; ++i) {
            if (candidates_[i].id == draft) {
                draft_weight = candidates_[i].weight;
                draft_index = i;
                break;
            }
        }
    }
    accepted = rng_.next_double() * kept.mass < draft_weight;
    if (accepted) return draft;
    // Rejected: draw from the rest. The draft's weight is taken out of the pool (and its
    // block sum), so it cannot be drawn, and the target spans only the remaining mass.
    const double rest = kept.mass - draft_weight;
    const double target = rng_.next_double() * rest;
    if (kept.whole_vocab) {
        if (draft_weight > 0.0) {
            weights_[static_cast<size_t>(draft)] = 0.0f;
            block_sums_[static_cast<size_t>(draft) / kDrawBlock] -= draft_weight;
        }
        return draw_whole_vocab(target);
    }
    if (draft_weight > 0.0) candidates_[draft_index].weight = 0.0f;
    // -1 only if the draft held all the mass, and then p(draft) = 1 accepted it above.
    const int32_t drawn = draw_candidates(kept.n_kept, target);
    return drawn >= 0 ? drawn : draft;
}

std::span<const TokenProb> Sampler::distribution(std::span<const float> logits,
                                                 TokenFilter* filter) {
    load_logits(logits);
    apply_penalties();
    if (filter != nullptr) apply_filter(*filter);
    probs_.clear();
    if (params_.temperature == 0.0f) {
        probs_.push_back({argmax(), 1.0f});
        return probs_;
    }
    Kept kept = run_chain();
    if (kept.whole_vocab) {
        candidates_.clear();
        for (size_t i = 0; i < weights_.size(); ++i) {
            candidates_.push_back({static_cast<int32_t>(i), work_[i], weights_[i]});
        }
    }
    // sample() draws in whatever fixed order the chain left; the report is ranked.
    std::sort(candidates_.begin(), candidates_.begin() + static_cast<std::ptrdiff_t>(kept.n_kept),
              [](const Candidate& a, const Candidate& b) { return ranks_before(a, b); });
    for (size_t i = 0; i < kept.n_kept; ++i) {
        const Candidate& c = candidates_[i];
        probs_.push_back({c.id, static_cast<float>(c.weight / kept.mass)});
    }
    return probs_;
}

std::vector<uint8_t> Sampler::save_state() const {
    std::vector<uint8_t> out(kStateHeaderBytes + 4 * ring_size_);
    uint8_t* p = out.data();
    std::copy(std::begin(kStateMagic), std::end(kStateMagic), p);
    put_u32(p + 4, kStateVersion);
    for (size_t i = 0; i < 4; ++i) put_u64(p + 8 + 8 * i, rng_.state()[i]);
    put_u32(p + 40, static_cast<uint32_t>(ring_size_));
    const std::vector<int32_t> tokens = history();
    for (size_t i = 0; i < tokens.size(); ++i) {
        put_u32(p + kStateHeaderBytes + 4 * i, static_cast<uint32_t>(tokens[i]));
    }
    return out;
}

void Sampler::load_state(std::span<const uint8_t> bytes) {
    // Everything is checked before anything changes, so a bad blob leaves the sampler intact.
    if (bytes.size() < kStateHeaderBytes) {
        bad_state("blob of " + std::to_string(bytes.size()) + " bytes is shorter than the " +
                  std::to_string(kStateHeaderBytes) + "-byte header");
    }
    const uint8_t* p = bytes.data();
    if (!std::equal(std::begin(kStateMagic), std::end(kStateMagic), p)) {
        bad_state("bad magic (not a sampler state)");
    }
    const uint32_t version = get_u32(p + 4);
    if (version != kStateVersion) bad_state("unsupported version " + std::to_string(version));
    Rng::State state{};
    for (size_t i = 0; i < state.size(); ++i) state[i] = get_u64(p + 8 + 8 * i);
    if (!Rng::valid_state(state)) bad_state("generator state is all zero");
    const uint64_t count = get_u32(p + 40);
    if (bytes.size() - kStateHeaderBytes != 4 * count) {
        bad_state("token count " + std::to_string(count) + " does not match the blob size " +
                  std::to_string(bytes.size()));
    }
    const uint8_t* tokens = p + kStateHeaderBytes;
    for (uint64_t i = 0; i < count; ++i) {
        if (static_cast<int32_t>(get_u32(tokens + 4 * i)) < 0) {
            bad_state("negative token id at history index " + std::to_string(i));
        }
    }

    rng_.set_state(state);
    const size_t capacity = ring_.size();
    const size_t keep = std::min(static_cast<size_t>(count), capacity);
    const size_t skip = static_cast<size_t>(count) - keep;
    for (size_t i = 0; i < keep; ++i) {
        ring_[i] = static_cast<int32_t>(get_u32(tokens + 4 * (skip + i)));
    }
    ring_size_ = keep;
    ring_head_ = capacity == 0 ? 0 : keep % capacity;
}

}  // namespace ember
