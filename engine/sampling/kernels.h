// Vocabulary-wide loops of the sampler, written so that GCC vectorizes them for baseline
// x86-64 (SSE2) without -ffast-math. Float max reductions and some float selects only
// vectorize under -ffinite-math-only, so the hot ones (max, exp's range clamp) use integer
// bit tricks instead, and the block tests use SSE2 directly.
//
// exp is our own as well: the weights decide which token is drawn, and libm's expf differs
// between library versions in the last bit, which would make a replay on another machine
// drift. This one is plain IEEE arithmetic, so it gives the same bits everywhere (with FMA
// contraction off, the default for ISO C++ on GCC and the norm on x86 without -mfma).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace ember::sampling_kernels {

// exp(x) for x <= 0 (including -inf), relative error below 2.5e-7; exactly 1 at x = 0, and 0
// below -87, where the result would leave the normal range (such a token is 1e-38 times less
// likely than the best one).
inline float exp_nonpositive(float x) {
    constexpr float kLog2e = 1.44269504088896341f;
    // Adding 1.5 * 2^23 rounds x * log2(e) to an integer in the low mantissa bits.
    constexpr float kRound = 12582912.0f;
    // ln 2 split so that n * kLn2Hi is exact for |n| < 2^15 (Cody & Waite).
    constexpr float kLn2Hi = 0.693359375f;
    constexpr float kLn2Lo = -2.12194440054690583e-4f;
    constexpr uint32_t kLowestBits = std::bit_cast<uint32_t>(-87.0f);

    // For x <= 0 the bit pattern grows with |x| (as does -inf's), so one unsigned compare
    // finds the underflow range; the mask clamps the input and zeroes the result.
    const uint32_t bits = std::bit_cast<uint32_t>(x);
    const uint32_t in_range = bits > kLowestBits ? 0u : ~0u;
    const float xc = std::bit_cast<float>((bits & in_range) | (kLowestBits & ~in_range));

    // exp(x) = 2^n * exp(r), n = round(x / ln 2), |r| <= ln(2) / 2.
    const float t = xc * kLog2e + kRound;
    const float n = t - kRound;
    const float r = (xc - n * kLn2Hi) - n * kLn2Lo;
    // Taylor series to r^7: truncation error 0.347^8 / 8! = 5e-9, below float rounding.
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    // 2^n built in the exponent field; n lies in [-126, 0] here, so it stays normal.
    const uint32_t n_int = std::bit_cast<uint32_t>(t) - std::bit_cast<uint32_t>(kRound);
    const float scale = std::bit_cast<float>((n_int + 127u) << 23);
    return std::bit_cast<float>(std::bit_cast<uint32_t>(p * scale) & in_range);
}

// Maps a float to an int32 with the same order (for non-NaN values), so that max reductions
// run as integer maxima, which vectorize.
inline int32_t order_key(float x) {
    const int32_t b = std::bit_cast<int32_t>(x);
    return b ^ ((b >> 31) & 0x7fffffff);
}
inline float from_order_key(int32_t key) {
    return std::bit_cast<float>(key ^ ((key >> 31) & 0x7fffffff));
}

// Largest value of a non-empty, NaN-free array.
inline float max_value(const float* x, size_t n) {
    int32_t best = std::numeric_limits<int32_t>::min();
    for (size_t i = 0; i < n; ++i) {
        const int32_t key = order_key(x[i]);
        best = key > best ? key : best;
    }
    return from_order_key(best);
}

// Whether any of x[0, 16) exceeds `threshold` / equals `value`. Lets scans skip a block with
// one vector test. Written with SSE2 (baseline on x86-64) because compilers turn the portable
// form into sixteen branches.
constexpr size_t kScanBlock = 16;
inline bool any_above(const float* x, float threshold) {
#if defined(__SSE2__)
    const __m128 t = _mm_set1_ps(threshold);
    const __m128 a =
        _mm_or_ps(_mm_cmpgt_ps(_mm_loadu_ps(x), t), _mm_cmpgt_ps(_mm_loadu_ps(x + 4), t));
    const __m128 b =
        _mm_or_ps(_mm_cmpgt_ps(_mm_loadu_ps(x + 8), t), _mm_cmpgt_ps(_mm_loadu_ps(x + 12), t));
    return _mm_movemask_ps(_mm_or_ps(a, b)) != 0;
#else
    bool any = false;
    for (size_t j = 0; j < kScanBlock; ++j) any = any || x[j] > threshold;
    return any;
#endif
}
inline bool any_equal(const float* x, float value) {
#if defined(__SSE2__)
    const __m128 v = _mm_set1_ps(value);
    const __m128 a =
        _mm_or_ps(_mm_cmpeq_ps(_mm_loadu_ps(x), v), _mm_cmpeq_ps(_mm_loadu_ps(x + 4), v));
    const __m128 b =
        _mm_or_ps(_mm_cmpeq_ps(_mm_loadu_ps(x + 8), v), _mm_cmpeq_ps(_mm_loadu_ps(x + 12), v));
    return _mm_movemask_ps(_mm_or_ps(a, b)) != 0;
#else
    bool any = false;
    for (size_t j = 0; j < kScanBlock; ++j) any = any || x[j] == value;
    return any;
#endif
}

// Lowest index holding `value` (which must occur).
inline size_t first_index_of(const float* x, size_t n, float value) {
    size_t i = 0;
    while (i + kScanBlock <= n && !any_equal(x + i, value)) i += kScanBlock;
    while (x[i] != value) ++i;
    return i;
}

// out[i] = exp((logits[i] - max) * inv_temperature); logits[i] <= max.
inline void tempered_weights(const float* __restrict logits, float* __restrict out, size_t n,
                             float max, float inv_temperature) {
    for (size_t i = 0; i < n; ++i) out[i] = exp_nonpositive((logits[i] - max) * inv_temperature);
}

// Sum in double over eight interleaved lanes (vectorizable, and a fixed order, so the same
// input always gives the same bits).
inline double sum(const float* x, size_t n) {
    double lanes[8] = {};
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        for (size_t j = 0; j < 8; ++j) lanes[j] += x[i + j];
    }
    double tail = 0.0;
    for (; i < n; ++i) tail += x[i];
    return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
           ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7])) + tail;
}

// Sum of the values >= threshold, in the same lane order as sum().
inline double sum_at_least(const float* x, size_t n, float threshold) {
    double lanes[8] = {};
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        for (size_t j = 0; j < 8; ++j) lanes[j] += x[i + j] >= threshold ? x[i + j] : 0.0f;
    }
    double tail = 0.0;
    for (; i < n; ++i) tail += x[i] >= threshold ? x[i] : 0.0f;
    return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
           ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7])) + tail;
}

// Mass histogram buckets from a weight in (0, 1]: a quarter octave each (exponent and top two
// mantissa bits), bucket 0 holding exactly 1. Integer-only and monotone: a larger weight never
// lands in a later bucket. Everything below 2^-40 (and 0) shares the last bucket.
constexpr uint32_t kBuckets = 161;
inline uint32_t weight_bucket(float w) {
    const uint32_t b = (std::bit_cast<uint32_t>(1.0f) >> 21) - (std::bit_cast<uint32_t>(w) >> 21);
    return b < kBuckets - 1 ? b : kBuckets - 1;
}

}  // namespace ember::sampling_kernels
