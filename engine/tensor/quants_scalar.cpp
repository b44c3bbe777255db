// Scalar reference kernels for every supported type: dequantize, reference quantize, and dot
// products against the activation format the type declares.
//
// Each format is decoded by one "unpack" function into plain integers (quants with their
// offset applied, per-group integer scales and mins) plus the float super-scales; dequantize and
// dot are then written once on top of that. This keeps the bit twiddling of each format in one
// place and makes the dot product, by construction, the same arithmetic as the dequantization.
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "engine/tensor/blocks.h"
#include "engine/tensor/iq_grids.h"
#include "engine/tensor/traits.h"

namespace ember {

namespace {

// Round to nearest, ties to even (the default FP environment).
inline int nearest_int(float v) {
    return static_cast<int>(std::nearbyint(v));
}

// The same for |v| < 2^22 without a libm call (activation quantization runs once per token per
// matmul): adding 1.5 * 2^23 pushes the fraction out of the mantissa, and the FPU rounds it to
// nearest-even; the low mantissa bits are then the integer, offset by 2^22.
inline int nearest_int_small(float v) {
    const float shifted = v + 12582912.0f;
    return static_cast<int>(std::bit_cast<uint32_t>(shifted) & 0x007fffffu) - 0x00400000;
}

inline int clamp_int(int v, int lo, int hi) {
    return std::min(hi, std::max(lo, v));
}

// Smallest non-negative fp16 h with value(h) * levels >= v, so that a scale stored in fp16 still
// covers the data after rounding (quantizers then never have to clip). 0 for v <= 0.
uint16_t fp16_at_least(float v, int levels) {
    if (!(v > 0.0f)) return 0;
    uint16_t h = fp32_to_fp16(v / static_cast<float>(levels));
    while (h < 0x7c00u && fp16_to_fp32(h) * static_cast<float>(levels) < v) ++h;
    return h;
}

// Largest fp16 whose value is <= v (v finite).
uint16_t fp16_at_most(float v) {
    const uint16_t h = fp32_to_fp16(v);
    if (fp16_to_fp32(h) <= v) return h;
    if (h & 0x8000u) return static_cast<uint16_t>(h + 1u);  // more negative
    if (h == 0) return 0x8001u;                             // +0 > v: smallest negative
    return static_cast<uint16_t>(h - 1u);
}

// Sum over the first `count` elements of a * b.
inline int32_t dot_i8(const int8_t* a, const int8_t* b, int count) {
    int32_t sum = 0;
    for (int i = 0; i < count; ++i) sum += static_cast<int32_t>(a[i]) * static_cast<int32_t>(b[i]);
    return sum;
}

inline void store_u32_le(uint8_t* p, uint32_t v) {
    for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

// =============================================================================================
// Float types: f32 activations, no rounding.

// Float dot with 8 independent partial sums: shorter dependency chains for the compiler and
// a pairwise-like error growth instead of a single long running sum. Half-precision weights are
// widened a chunk at a time into a stack buffer first: two simple loops vectorize where one
// fused loop does not.
constexpr int64_t kFloatChunk = 256;

inline void dot_accumulate(const float* w, const float* x, int64_t n, float* acc) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        for (int k = 0; k < 8; ++k) acc[k] += w[i + k] * x[i + k];
    }
    for (; i < n; ++i) acc[0] += w[i] * x[i];
}

inline float dot_finish(const float* acc) {
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

template <float (*Widen)(uint16_t)>
float dot_half(int64_t n, const uint16_t* w, const float* x) {
    float acc[8] = {};
    float buf[kFloatChunk];  // [chunk] widened weights
    for (int64_t i0 = 0; i0 < n; i0 += kFloatChunk) {
        const int64_t m = std::min(kFloatChunk, n - i0);
        for (int64_t i = 0; i < m; ++i) buf[i] = Widen(w[i0 + i]);
        dot_accumulate(buf, x + i0, m, acc);
    }
    return dot_finish(acc);
}

void dequantize_row_f32(const void* src, float* dst, int64_t n) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}
void quantize_row_f32(const float* src, void* dst, int64_t n) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}
float dot_f32(int64_t n, const void* w, const void* a) {
    const auto* wf = static_cast<const float*>(w);  // [n]
    float acc[8] = {};
    dot_accumulate(wf, static_cast<const float*>(a), n, acc);
    return dot_finish(acc);
}

void dequantize_row_f16(const void* src, float* dst, int64_t n) {
    const auto* h = static_cast<const uint16_t*>(src);  // [n] fp16 bits
    for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(h[i]);
}
void quantize_row_f16(const float* src, void* dst, int64_t n) {
    auto* h = static_cast<uint16_t*>(dst);  // [n] fp16 bits
    for (int64_t i = 0; i < n; ++i) h[i] = fp32_to_fp16(src[i]);
}
float dot_f16(int64_t n, const void* w, const void* a) {
    const auto* h = static_cast<const uint16_t*>(w);  // [n] fp16 bits
    return dot_half<fp16_to_fp32>(n, h, static_cast<const float*>(a));
}

void dequantize_row_bf16(const void* src, float* dst, int64_t n) {
    const auto* b = static_cast<const uint16_t*>(src);  // [n] bf16 bits
    for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(b[i]);
}
void quantize_row_bf16(const float* src, void* dst, int64_t n) {
    auto* b = static_cast<uint16_t*>(dst);  // [n] bf16 bits
    for (int64_t i = 0; i < n; ++i) b[i] = fp32_to_bf16(src[i]);
}
float dot_bf16(int64_t n, const void* w, const void* a) {
    const auto* b = static_cast<const uint16_t*>(w);  // [n] bf16 bits
    return dot_half<bf16_to_fp32>(n, b, static_cast<const float*>(a));
}

// =============================================================================================
// Q8_32 activations.

void quantize_act_q8_32(const float* x, void* dst, int64_t n) {
    auto* out = static_cast<BlockQ8_32*>(dst);  // [n / 32]
    for (int64_t b = 0; b < n / kQK; ++b) {
        const float* xb = x + b * kQK;  // [32]
        float amax = 0.0f;
        for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(xb[j]));
        const float d = amax / 127.0f;
        const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
        BlockQ8_32& o = out[b];
        o.d = d;
        for (int h = 0; h < 2; ++h) {
            int sum = 0;
            for (int j = 16 * h; j < 16 * h + 16; ++j) {
                // |x * id| <= 127 up to rounding, so the clamp only guards against the last ulp.
                const int q = clamp_int(nearest_int_small(xb[j] * id), -127, 127);
                o.qs[j] = static_cast<int8_t>(q);
                sum += q;
            }
            o.s[h] = static_cast<int16_t>(sum);
        }
    }
}

// Q16_32: as Q8_32 with q in [-kQ16Max, kQ16Max], split into hi = round-half-up(q / 256) and
// lo = q - 256 * hi, both signed bytes.
void quantize_act_q16_32(const float* x, void* dst, int64_t n) {
    auto* out = static_cast<BlockQ16_32*>(dst);  // [n / 32]
    constexpr auto kMax = static_cast<float>(kQ16Max);
    for (int64_t b = 0; b < n / kQK; ++b) {
        const float* xb = x + b * kQK;  // [32]
        float amax = 0.0f;
        for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(xb[j]));
        const float id = amax > 0.0f ? kMax / amax : 0.0f;
        BlockQ16_32& o = out[b];
        o.d = amax / kMax;
        int sum_lo = 0, sum_hi = 0;
        for (int j = 0; j < kQK; ++j) {
            // NaN products give 0, as in the SIMD kernels; the clamp guards the last ulp.
            const float v = xb[j] * id;
            const int q = std::isnan(v) ? 0 : clamp_int(nearest_int_small(v), -kQ16Max, kQ16Max);
            const int hi = (q + 128) >> 8;  // arithmetic shift: floor
            o.hi[j] = static_cast<int8_t>(hi);
            o.lo[j] = static_cast<int8_t>(q - 256 * hi);
            sum_lo += o.lo[j];
            sum_hi += hi;
        }
        o.s[0] = static_cast<int16_t>(sum_lo);
        o.s[1] = static_cast<int16_t>(sum_hi);
    }
}

// =============================================================================================
// 32-element formats: x[j] = d * q[j] + m.

struct Affine {
    float d;
    float m;
};

Affine unpack(const BlockQ8_0& b, int8_t* q) {
    std::memcpy(q, b.qs, kQK);
    return {fp16_to_fp32(b.d), 0.0f};
}

Affine unpack(const BlockQ4_0& b, int8_t* q) {
    for (int j = 0; j < kQK / 2; ++j) {
        q[j] = static_cast<int8_t>((b.qs[j] & 0x0f) - 8);
        q[j + 16] = static_cast<int8_t>((b.qs[j] >> 4) - 8);
    }
    return {fp16_to_fp32(b.d), 0.0f};
}

Affine unpack(const BlockQ4_1& b, int8_t* q) {
    for (int j = 0; j < kQK / 2; ++j) {
        q[j] = static_cast<int8_t>(b.qs[j] & 0x0f);
        q[j + 16] = static_cast<int8_t>(b.qs[j] >> 4);
    }
    return {fp16_to_fp32(b.d), fp16_to_fp32(b.m)};
}

// Shared by Q5_0/Q5_1: nibble plus the element's bit of the little-endian qh word as bit 4.
void unpack_q5(const uint8_t* qs, const uint8_t* qh_bytes, int offset, int8_t* q) {
    const uint32_t qh =
        static_cast<uint32_t>(qh_bytes[0]) | static_cast<uint32_t>(qh_bytes[1]) << 8 |
        static_cast<uint32_t>(qh_bytes[2]) << 16 | static_cast<uint32_t>(qh_bytes[3]) << 24;
    for (int j = 0; j < kQK / 2; ++j) {
        const int lo = (qs[j] & 0x0f) | static_cast<int>((qh >> j) & 1u) << 4;
        const int hi = (qs[j] >> 4) | static_cast<int>((qh >> (j + 16)) & 1u) << 4;
        q[j] = static_cast<int8_t>(lo - offset);
        q[j + 16] = static_cast<int8_t>(hi - offset);
    }
}

Affine unpack(const BlockQ5_0& b, int8_t* q) {
    unpack_q5(b.qs, b.qh, 16, q);
    return {fp16_to_fp32(b.d), 0.0f};
}

Affine unpack(const BlockQ5_1& b, int8_t* q) {
    unpack_q5(b.qs, b.qh, 0, q);
    return {fp16_to_fp32(b.d), fp16_to_fp32(b.m)};
}

Affine unpack(const BlockIQ4_NL& b, int8_t* q) {
    for (int j = 0; j < kQK / 2; ++j) {
        q[j] = kIQ4NLValues[b.qs[j] & 0x0f];
        q[j + 16] = kIQ4NLValues[b.qs[j] >> 4];
    }
    return {fp16_to_fp32(b.d), 0.0f};
}

// 2^(e - 128), exactly, for every e8m0 byte (e = 0 and 1 are the subnormals 2^-128, 2^-127).
inline float mxfp4_scale(uint8_t e) {
    return e >= 2 ? std::bit_cast<float>(static_cast<uint32_t>(e - 1) << 23)
                  : std::bit_cast<float>(0x00200000u << e);
}

Affine unpack(const BlockMXFP4& b, int8_t* q) {
    for (int j = 0; j < kQK / 2; ++j) {
        q[j] = kMXFP4Values[b.qs[j] & 0x0f];
        q[j + 16] = kMXFP4Values[b.qs[j] >> 4];
    }
    return {mxfp4_scale(b.e), 0.0f};
}

template <typename Block>
constexpr bool kHasMin = std::is_same_v<Block, BlockQ4_1> || std::is_same_v<Block, BlockQ5_1>;

template <typename Block>
void dequantize_row_32(const void* src, float* dst, int64_t n) {
    const auto* blocks = static_cast<const Block*>(src);  // [n / 32]
    int8_t q[kQK];
    for (int64_t b = 0; b < n / kQK; ++b) {
        const Affine a = unpack(blocks[b], q);
        float* y = dst + b * kQK;  // [32]
        for (int j = 0; j < kQK; ++j) {
            y[j] = kHasMin<Block> ? a.d * static_cast<float>(q[j]) + a.m
                                  : a.d * static_cast<float>(q[j]);
        }
    }
}

template <typename Block>
float dot_32(int64_t n, const void* w, const void* act) {
    const auto* blocks = static_cast<const Block*>(w);    // [n / 32]
    const auto* a = static_cast<const BlockQ8_32*>(act);  // [n / 32]
    int8_t q[kQK];
    float acc = 0.0f;
    for (int64_t b = 0; b < n / kQK; ++b) {
        const Affine wa = unpack(blocks[b], q);
        const int32_t sumi = dot_i8(q, a[b].qs, kQK);
        float block = wa.d * static_cast<float>(sumi);
        if constexpr (kHasMin<Block>) {
            block += wa.m * static_cast<float>(a[b].s[0] + a[b].s[1]);
        }
        acc += a[b].d * block;
    }
    return acc;
}

// Against Q16_32 activations (family-A types without a min only): the block's exact integer
// sum of q * (256 * hi + lo), then the same float steps as dot_32.
template <typename Block>
float dot_32_wide(int64_t n, const void* w, const void* act) {
    static_assert(!kHasMin<Block>);
    const auto* blocks = static_cast<const Block*>(w);     // [n / 32]
    const auto* a = static_cast<const BlockQ16_32*>(act);  // [n / 32]
    int8_t q[kQK];
    float acc = 0.0f;
    for (int64_t b = 0; b < n / kQK; ++b) {
        const Affine wa = unpack(blocks[b], q);
        const int32_t sumi = 256 * dot_i8(q, a[b].hi, kQK) + dot_i8(q, a[b].lo, kQK);
        acc += a[b].d * (wa.d * static_cast<float>(sumi));
    }
    return acc;
}

// ---- reference quantizers, 32-element formats ----------------------------------------------

// Signed scale s for symmetric levels q in [-qneg, qpos] such that s * q covers [min, max]:
// with s > 0 the negative side gets qneg levels, with s < 0 the positive side does. Picks the
// smaller magnitude (the finer grid).
float symmetric_scale(const float* x, int count, int qneg, int qpos) {
    float lo = 0.0f, hi = 0.0f;
    for (int i = 0; i < count; ++i) {
        lo = std::min(lo, x[i]);
        hi = std::max(hi, x[i]);
    }
    const float neg = -lo;
    const float pos_scale = std::max(neg / static_cast<float>(qneg), hi / static_cast<float>(qpos));
    const float neg_scale = std::max(hi / static_cast<float>(qneg), neg / static_cast<float>(qpos));
    return pos_scale <= neg_scale ? pos_scale : -neg_scale;
}

// fp16 scale (sign kept) whose magnitude is >= |s|: never clips.
uint16_t fp16_scale(float s) {
    const uint16_t h = fp16_at_least(std::fabs(s), 1);
    return s < 0.0f ? static_cast<uint16_t>(h | 0x8000u) : h;
}

// q[j] in [-qneg, qpos], d stored as fp16 in *d_out.
void quantize_symmetric_32(const float* x, int qneg, int qpos, uint16_t* d_out, int* q) {
    const uint16_t dh = fp16_scale(symmetric_scale(x, kQK, qneg, qpos));
    *d_out = dh;
    const float d = fp16_to_fp32(dh);
    for (int j = 0; j < kQK; ++j)
        q[j] = d != 0.0f ? clamp_int(nearest_int(x[j] / d), -qneg, qpos) : 0;
}

// x ~= d * q + m with q in [0, qmax]; m <= min(x) and d * qmax >= max(x) - m.
void quantize_affine_32(const float* x, int qmax, uint16_t* d_out, uint16_t* m_out, int* q) {
    float lo = x[0], hi = x[0];
    for (int j = 1; j < kQK; ++j) {
        lo = std::min(lo, x[j]);
        hi = std::max(hi, x[j]);
    }
    const uint16_t mh = fp16_at_most(lo);
    const float m = fp16_to_fp32(mh);
    const uint16_t dh = fp16_at_least(hi - m, qmax);
    const float d = fp16_to_fp32(dh);
    *d_out = dh;
    *m_out = mh;
    for (int j = 0; j < kQK; ++j)
        q[j] = d > 0.0f ? clamp_int(nearest_int((x[j] - m) / d), 0, qmax) : 0;
}

void pack_nibbles(const int* q, uint8_t* qs) {
    for (int j = 0; j < kQK / 2; ++j) {
        qs[j] = static_cast<uint8_t>((q[j] & 0x0f) | (q[j + 16] & 0x0f) << 4);
    }
}

uint32_t pack_high_bits(const int* q) {
    uint32_t qh = 0;
    for (int j = 0; j < kQK; ++j) qh |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
    return qh;
}

void quantize_row_q8_0(const float* src, void* dst, int64_t n) {
    auto* out = static_cast<BlockQ8_0*>(dst);  // [n / 32]
    int q[kQK];
    for (int64_t b = 0; b < n / kQK; ++b) {
        quantize_symmetric_32(src + b * kQK, 127, 127, &out[b].d, q);
        for (int j = 0; j < kQK; ++j) out[b].qs[j] = static_cast<int8_t>(q[j]);
    }
}

void quantize_row_q4_0(const float* src, void* dst, int64_t n) {
    auto* out = static_cast<BlockQ4_0*>(dst);  // [n / 32]
    int q[kQK];
    for (int64_t b = 0; b < n / kQK; ++b) {
        quantize_symmetric_32(src + b * kQK, 8, 7, &out[b].d, q);
        for (int& v : q) v += 8;
        pack_nibbles(q, out[b].qs);
    }
}

void quantize_row_q5_0(const float* src, void* dst, int64_t n) {
    auto* out = static_cast<BlockQ5_0*>(dst);  // [n / 32]
    int q[kQK];
    for (int64_t b = 0; b < n / kQK; ++b) {
        quantize_symmetric_32(src + b * kQK, 16, 15, &out[b].d, q);
        for (int& v : q) v += 16;
        pack_nibbles(q, out[b].qs);
        store_u32_le(out[b].qh, pack_high_bits(q));
    }
}

void quantize_row_q4_1(const float* src, void* dst, int64_t n) {
    auto* out = static_cast<BlockQ4_1*>(dst);  // [n / 32]
    int q[kQK];
    for (int64_t b = 0; b < n / kQK; ++b) {
        quantize_affine_32(src + b * kQK, 15, &out[b].d, &out[b].m, q);
        pack_nibbles(q, out[b].qs);
    }
}

void quantize_row_q5_1(const float* src, void* dst, int64_t n) {
    auto* out = static_cast<BlockQ5_1*>(dst);  // [n / 32]
    int q[kQK];
    for (int64_t b = 0; b < n / kQK; ++b) {
        quantize_affine_32(src + b * kQK, 31, &out[b].d, &out[b].m, q);
        pack_nibbles(q, out[b].qs);
        store_u32_le(out[b].qh, pack_high_bits(q));
    }
}

// IQ4_NL: the element of largest magnitude maps onto the codebook end -127 (up to the rounding
// of d); every other element takes the nearest codebook entry.
void quantize_row_iq4_nl(const float* src, void* dst, int64_t n) {
    auto* out = static_cast<BlockIQ4_NL*>(dst);  // [n / 32]
    int q[kQK];
    for (int64_t b = 0; b < n / kQK; ++b) {
        const float* x = src + b * kQK;  // [32]
        float extreme = 0.0f;
        for (int j = 0; j < kQK; ++j) {
            if (std::fabs(x[j]) > std::fabs(extreme)) extreme = x[j];
        }
        // |d| rounded up so that a tiny block cannot collapse to d = 0; the sign makes the
        // extreme land on the negative end of the codebook.
        const uint16_t mag = fp16_at_least(std::fabs(extreme), -kIQ4NLValues[0]);
        out[b].d = extreme > 0.0f ? static_cast<uint16_t>(mag | 0x8000u) : mag;
        const float d = fp16_to_fp32(out[b].d);
        for (int j = 0; j < kQK; ++j) {
            int best = 8;  // the entry nearest zero, used when d == 0
            float best_err = std::numeric_limits<float>::infinity();
            for (int k = 0; k < 16 && d != 0.0f; ++k) {
                const float err = std::fabs(x[j] - d * static_cast<float>(kIQ4NLValues[k]));
                if (err < best_err) {
                    best_err = err;
                    best = k;
                }
            }
            q[j] = best;
        }
        pack_nibbles(q, out[b].qs);
    }
}

// Index of the codebook entry nearest to v (the first of equals).
template <size_t N>
int nearest_entry(const int8_t (&codebook)[N], float v) {
    int best = 0;
    float best_err = std::numeric_limits<float>::infinity();
    for (int k = 0; k < static_cast<int>(N); ++k) {
        const float err = std::fabs(v - static_cast<float>(codebook[k]));
        if (err < best_err) {
            best_err = err;
            best = k;
        }
    }
    return best;
}

// MXFP4: the smallest power-of-two scale whose largest code point (12) covers the block's
// largest magnitude, so nothing clips; each element then takes the nearest code point.
void quantize_row_mxfp4(const float* src, void* dst, int64_t n) {
    auto* out = static_cast<BlockMXFP4*>(dst);  // [n / 32]
    int q[kQK];
    for (int64_t b = 0; b < n / kQK; ++b) {
        const float* x = src + b * kQK;  // [32]
        float amax = 0.0f;
        for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
        int e = 0;
        if (amax > 0.0f) {
            // amax / 12 = m * 2^k with m in [0.5, 1): 2^k >= amax / 12 > 2^(k-1), exactly 2^(k-1)
            // when m is 0.5. The scale 2^(e - 128) must reach 2^k (or 2^(k-1)).
            int k = 0;
            const float m = std::frexp(amax / 12.0f, &k);
            e = clamp_int(128 + (m == 0.5f ? k - 1 : k), 0, 254);
        }
        out[b].e = static_cast<uint8_t>(e);
        const float inv = 1.0f / mxfp4_scale(out[b].e);  // a power of two: exact
        for (int j = 0; j < kQK; ++j) q[j] = nearest_entry(kMXFP4Values, x[j] * inv);
        pack_nibbles(q, out[b].qs);
    }
}

// =============================================================================================
// K-quants: 256-element super-blocks, 16 groups of 16 elements. Element e uses group e / 16:
//   x[e] = (d * sc[g]) * q[e] - (dmin * mn[g]).
// Q4_K/Q5_K have 32-element sub-blocks; unpack repeats their scale for both 16-element groups.

struct UnpackedK {
    int8_t q[kQK_K];  // [256] quants with their offset applied
    int16_t sc[16];   // [16] integer scale per 16-element group
    int16_t mn[16];   // [16] integer min per group (0 where the type has none)
    float d;          // super-block scale of the scales
    float dmin;       // super-block scale of the mins (0 where the type has none)
};

void unpack(const BlockQ2_K& b, UnpackedK& u) {
    // Element 128*n + 32*j + l is bits 2j..2j+1 of qs[32*n + l].
    for (int n = 0; n < 2; ++n) {
        for (int j = 0; j < 4; ++j) {
            int8_t* q = u.q + 128 * n + 32 * j;  // [32]
            for (int l = 0; l < 32; ++l)
                q[l] = static_cast<int8_t>((b.qs[32 * n + l] >> (2 * j)) & 3);
        }
    }
    for (int g = 0; g < 16; ++g) {
        u.sc[g] = b.scales[g] & 0x0f;
        u.mn[g] = b.scales[g] >> 4;
    }
    u.d = fp16_to_fp32(b.d);
    u.dmin = fp16_to_fp32(b.dmin);
}

// Q3_K's 16 6-bit scales (unsigned, before subtracting 32).
int q3k_scale(const uint8_t* scales, int i) {
    const int lo = i < 8 ? scales[i] & 0x0f : scales[i - 8] >> 4;
    const int hi = (scales[8 + i % 4] >> (2 * (i / 4))) & 3;
    return lo | hi << 4;
}

void unpack(const BlockQ3_K& b, UnpackedK& u) {
    // Element 128*n + 32*j + l: bits 2j..2j+1 of qs[32*n + l], high bit (4n + j) of hmask[l].
    for (int n = 0; n < 2; ++n) {
        for (int j = 0; j < 4; ++j) {
            int8_t* q = u.q + 128 * n + 32 * j;  // [32]
            for (int l = 0; l < 32; ++l) {
                const int low = (b.qs[32 * n + l] >> (2 * j)) & 3;
                const int high = (b.hmask[l] >> (4 * n + j)) & 1;
                q[l] = static_cast<int8_t>(low - 4 + 4 * high);
            }
        }
    }
    for (int g = 0; g < 16; ++g) {
        u.sc[g] = static_cast<int16_t>(q3k_scale(b.scales, g) - 32);
        u.mn[g] = 0;
    }
    u.d = fp16_to_fp32(b.d);
    u.dmin = 0.0f;
}

// Q4_K/Q5_K: 8 scales and 8 mins of 6 bits in 12 bytes.
void q4k_scale_min(const uint8_t* scales, int i, int* sc, int* mn) {
    if (i < 4) {
        *sc = scales[i] & 63;
        *mn = scales[i + 4] & 63;
    } else {
        *sc = (scales[i + 4] & 0x0f) | (scales[i - 4] >> 6) << 4;
        *mn = (scales[i + 4] >> 4) | (scales[i] >> 6) << 4;
    }
}

void q4k_scales(const uint8_t* scales, UnpackedK& u) {
    for (int i = 0; i < 8; ++i) {
        int sc = 0, mn = 0;
        q4k_scale_min(scales, i, &sc, &mn);
        u.sc[2 * i] = u.sc[2 * i + 1] = static_cast<int16_t>(sc);
        u.mn[2 * i] = u.mn[2 * i + 1] = static_cast<int16_t>(mn);
    }
}

void unpack(const BlockQ4_K& b, UnpackedK& u) {
    // Elements 64*j + l and 64*j + 32 + l are the low and high nibble of qs[32*j + l].
    for (int j = 0; j < 4; ++j) {
        int8_t* q = u.q + 64 * j;  // [64]
        for (int l = 0; l < 32; ++l) {
            q[l] = static_cast<int8_t>(b.qs[32 * j + l] & 0x0f);
            q[l + 32] = static_cast<int8_t>(b.qs[32 * j + l] >> 4);
        }
    }
    q4k_scales(b.scales, u);
    u.d = fp16_to_fp32(b.d);
    u.dmin = fp16_to_fp32(b.dmin);
}

void unpack(const BlockQ5_K& b, UnpackedK& u) {
    // As Q4_K, plus bit (e / 32) of qh[e % 32] as bit 4.
    for (int j = 0; j < 4; ++j) {
        int8_t* q = u.q + 64 * j;  // [64]
        for (int l = 0; l < 32; ++l) {
            q[l] = static_cast<int8_t>((b.qs[32 * j + l] & 0x0f) | ((b.qh[l] >> (2 * j)) & 1) << 4);
            q[l + 32] =
                static_cast<int8_t>((b.qs[32 * j + l] >> 4) | ((b.qh[l] >> (2 * j + 1)) & 1) << 4);
        }
    }
    q4k_scales(b.scales, u);
    u.d = fp16_to_fp32(b.d);
    u.dmin = fp16_to_fp32(b.dmin);
}

void unpack(const BlockQ6_K& b, UnpackedK& u) {
    // Element 128*n + 32*k + l: nibble k/2 of ql[64*n + 32*(k%2) + l], bits 2k..2k+1 of
    // qh[32*n + l].
    for (int n = 0; n < 2; ++n) {
        const uint8_t* ql = b.ql + 64 * n;  // [64]
        const uint8_t* qh = b.qh + 32 * n;  // [32]
        int8_t* q = u.q + 128 * n;          // [128]
        for (int l = 0; l < 32; ++l) {
            q[l] = static_cast<int8_t>(((ql[l] & 0x0f) | (qh[l] & 3) << 4) - 32);
            q[l + 32] = static_cast<int8_t>(((ql[l + 32] & 0x0f) | ((qh[l] >> 2) & 3) << 4) - 32);
            q[l + 64] = static_cast<int8_t>(((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32);
            q[l + 96] = static_cast<int8_t>(((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32);
        }
    }
    for (int g = 0; g < 16; ++g) {
        u.sc[g] = b.scales[g];
        u.mn[g] = 0;
    }
    u.d = fp16_to_fp32(b.d);
    u.dmin = 0.0f;
}

// IQ4_XS: one 6-bit scale (minus 32) per 32-element sub-block, codebook values as quants.
void unpack(const BlockIQ4_XS& b, UnpackedK& u) {
    for (int i = 0; i < 8; ++i) {
        const uint8_t* qs = b.qs + 16 * i;  // [16] nibbles of sub-block i
        int8_t* q = u.q + 32 * i;           // [32]
        for (int j = 0; j < 16; ++j) {
            q[j] = kIQ4NLValues[qs[j] & 0x0f];
            q[j + 16] = kIQ4NLValues[qs[j] >> 4];
        }
        const int low = (b.scales_l[i / 2] >> (4 * (i % 2))) & 0x0f;
        const int high = (b.scales_h >> (2 * i)) & 3;
        u.sc[2 * i] = u.sc[2 * i + 1] = static_cast<int16_t>((low | high << 4) - 32);
        u.mn[2 * i] = u.mn[2 * i + 1] = 0;
    }
    u.d = fp16_to_fp32(b.d);
    u.dmin = 0.0f;
}

// IQ3_S: signed grid magnitudes as quants, the odd multiplier 1 + 2s as the sub-block scale.
void unpack(const BlockIQ3_S& b, UnpackedK& u) {
    for (int i = 0; i < 8; ++i) {
        int8_t* q = u.q + 32 * i;  // [32]
        const uint32_t signs = static_cast<uint32_t>(b.signs[4 * i]) |
                               static_cast<uint32_t>(b.signs[4 * i + 1]) << 8 |
                               static_cast<uint32_t>(b.signs[4 * i + 2]) << 16 |
                               static_cast<uint32_t>(b.signs[4 * i + 3]) << 24;
        for (int k = 0; k < 8; ++k) {
            const uint32_t index = b.qs[8 * i + k] | ((b.qh[i] >> k) & 1u) << 8;
            const uint32_t grid = kIQ3SGrid[index];
            for (int j = 0; j < 4; ++j) {
                const int e = 4 * k + j;
                const int g = static_cast<int>((grid >> (8 * j)) & 0xffu);
                q[e] = static_cast<int8_t>((signs >> e) & 1u ? -g : g);
            }
        }
        const int s = (b.scales[i / 2] >> (4 * (i % 2))) & 0x0f;
        u.sc[2 * i] = u.sc[2 * i + 1] = static_cast<int16_t>(1 + 2 * s);
        u.mn[2 * i] = u.mn[2 * i + 1] = 0;
    }
    u.d = fp16_to_fp32(b.d);
    u.dmin = 0.0f;
}

template <typename Block>
void dequantize_row_k(const void* src, float* dst, int64_t n) {
    const auto* blocks = static_cast<const Block*>(src);  // [n / 256]
    UnpackedK u;
    for (int64_t b = 0; b < n / kQK_K; ++b) {
        unpack(blocks[b], u);
        float* y = dst + b * kQK_K;  // [256]
        for (int g = 0; g < 16; ++g) {
            // Both products are exact in f32 (11-bit mantissa times a <= 8-bit integer), so only
            // the subtraction rounds, as in the format's own reference dequantization.
            const float ds = u.d * static_cast<float>(u.sc[g]);
            const float dm = u.dmin * static_cast<float>(u.mn[g]);
            for (int l = 16 * g; l < 16 * g + 16; ++l) y[l] = ds * static_cast<float>(u.q[l]) - dm;
        }
    }
}

template <typename Block>
float dot_k(int64_t n, const void* w, const void* act) {
    const auto* blocks = static_cast<const Block*>(w);    // [n / 256]
    const auto* a = static_cast<const BlockQ8_32*>(act);  // [n / 32]
    UnpackedK u;
    float acc = 0.0f;
    for (int64_t b = 0; b < n / kQK_K; ++b) {
        unpack(blocks[b], u);
        const BlockQ8_32* ab = a + b * (kQK_K / kQK);  // [8] activation blocks of this super-block
        for (int k = 0; k < kQK_K / kQK; ++k) {
            int32_t sumi = 0;  // sum of sc * q * qa over the 32 elements
            int32_t summ = 0;  // sum of mn * qa
            for (int h = 0; h < 2; ++h) {
                const int g = 2 * k + h;
                sumi += u.sc[g] * dot_i8(u.q + 16 * g, ab[k].qs + 16 * h, 16);
                summ += u.mn[g] * ab[k].s[h];
            }
            acc += ab[k].d * (u.d * static_cast<float>(sumi) - u.dmin * static_cast<float>(summ));
        }
    }
    return acc;
}

// ---- reference quantizers, K-quants ---------------------------------------------------------
//
// Simple and safe rather than rmse-optimal: every scale is rounded *up* (integer scales by
// ceil, fp16 super-scales by fp16_at_least) so the quantization grid always covers the data and
// no element is clipped; the per-element error is then at most half a grid step.

// x ~= (d * sc[g]) * q - (dmin * m[g]); q in [0, qmax]; sc, m in [0, smax]; groups of `group`.
struct AffineK {
    uint16_t d = 0, dmin = 0;
    int sc[16] = {}, m[16] = {};  // [n_groups]
    int q[kQK_K] = {};            // [256]
};

void quantize_affine_k(const float* x, int group, int qmax, int smax, AffineK& out) {
    const int n_groups = kQK_K / group;
    float mins[16], maxs[16];  // [n_groups] -min (>= 0) and max per group
    float max_min = 0.0f;
    for (int g = 0; g < n_groups; ++g) {
        float lo = 0.0f, hi = 0.0f;  // the format's offset can only shift downwards
        for (int l = 0; l < group; ++l) {
            lo = std::min(lo, x[g * group + l]);
            hi = std::max(hi, x[g * group + l]);
        }
        mins[g] = -lo;
        maxs[g] = hi;
        max_min = std::max(max_min, mins[g]);
    }
    out.dmin = fp16_at_least(max_min, smax);
    const float dmin = fp16_to_fp32(out.dmin);
    float need[16];  // [n_groups] group step size needed to reach max from -dm
    float max_need = 0.0f;
    for (int g = 0; g < n_groups; ++g) {
        out.m[g] = dmin > 0.0f ? std::min(smax, static_cast<int>(std::ceil(mins[g] / dmin))) : 0;
        const float dm = dmin * static_cast<float>(out.m[g]);
        need[g] = (maxs[g] + dm) / static_cast<float>(qmax);
        max_need = std::max(max_need, need[g]);
    }
    out.d = fp16_at_least(max_need, smax);
    const float d = fp16_to_fp32(out.d);
    for (int g = 0; g < n_groups; ++g) {
        out.sc[g] = d > 0.0f ? std::min(smax, static_cast<int>(std::ceil(need[g] / d))) : 0;
        const float ds = d * static_cast<float>(out.sc[g]);
        const float dm = dmin * static_cast<float>(out.m[g]);
        for (int l = g * group; l < (g + 1) * group; ++l) {
            out.q[l] = ds > 0.0f ? clamp_int(nearest_int((x[l] + dm) / ds), 0, qmax) : 0;
        }
    }
}

// x ~= (d * sc[g]) * q; q in [-qneg, qpos]; sc in [-smax, smax]; groups of 16.
struct SymmetricK {
    uint16_t d = 0;
    int sc[16] = {};    // [16]
    int q[kQK_K] = {};  // [256]
};

void quantize_symmetric_k(const float* x, int qneg, int qpos, int smax, SymmetricK& out) {
    float s[16];  // [16] signed group scales
    float max_s = 0.0f;
    for (int g = 0; g < 16; ++g) {
        s[g] = symmetric_scale(x + 16 * g, 16, qneg, qpos);
        max_s = std::max(max_s, std::fabs(s[g]));
    }
    out.d = fp16_at_least(max_s, smax);
    const float d = fp16_to_fp32(out.d);
    for (int g = 0; g < 16; ++g) {
        const int mag =
            d > 0.0f ? std::min(smax, static_cast<int>(std::ceil(std::fabs(s[g]) / d))) : 0;
        out.sc[g] = s[g] < 0.0f ? -mag : mag;
        const float ds = d * static_cast<float>(out.sc[g]);
        for (int l = 16 * g; l < 16 * g + 16; ++l) {
            out.q[l] = ds != 0.0f ? clamp_int(nearest_int(x[l] / ds), -qneg, qpos) : 0;
        }
    }
}

void quantize_row_q2_k(const float* src, void* dst, int64_t n) {
    auto* out = static_cast<BlockQ2_K*>(dst);  // [n / 256]
    AffineK k;
    for (int64_t b = 0; b < n / kQK_K; ++b) {
        quantize_affine_k(src + b * kQK_K, 16, 3, 15, k);
        BlockQ2_K& o = out[b];
        std::memset(&o, 0, sizeof(o));
        o.d = k.d;
        o.dmin = k.dmin;
        for (int g = 0; g < 16; ++g) o.scales[g] = static_cast<uint8_t>(k.sc[g] | k.m[g] << 4);
        for (int e = 0; e < kQK_K; ++e) {
            const int nn = e / 128, j = (e % 128) / 32, l = e % 32;
            o.qs[32 * nn + l] |= static_cast<uint8_t>(k.q[e] << (2 * j));
        }
    }
}

void quantize_row_q3_k(const float* src, void* dst, int64_t n) {
    auto* out = static_cast<BlockQ3_K*>(dst);  // [n / 256]
    SymmetricK k;
    for (int64_t b = 0; b < n / kQK_K; ++b) {
        quantize_symmetric_k(src + b * kQK_K, 4, 3, 31, k);
        BlockQ3_K& o = out[b];
        std::memset(&o, 0, sizeof(o));
        o.d = k.d;
        for (int i = 0; i < 16; ++i) {
            const int v = k.sc[i] + 32;  // 6-bit unsigned
            if (i < 8) {
                o.scales[i] |= static_cast<uint8_t>(v & 0x0f);
            } else {
                o.scales[i - 8] |= static_cast<uint8_t>((v & 0x0f) << 4);
            }
            o.scales[8 + i % 4] |= static_cast<uint8_t>((v >> 4) << (2 * (i / 4)));
        }
        for (int e = 0; e < kQK_K; ++e) {
            const int nn = e / 128, j = (e % 128) / 32, l = e % 32;
            const int u = k.q[e] + 4;  // [0, 7]: bit 2 is the "high" bit (set means no -4)
            o.qs[32 * nn + l] |= static_cast<uint8_t>((u & 3) << (2 * j));
            if (u & 4) o.hmask[l] |= static_cast<uint8_t>(1u << (4 * nn + j));
        }
    }
}

void pack_q4k_scales(const int* sc, const int* m, uint8_t* scales) {
    for (int i = 0; i < 4; ++i) {
        scales[i] = static_cast<uint8_t>((sc[i] & 63) | (sc[i + 4] >> 4) << 6);
        scales[i + 4] = static_cast<uint8_t>((m[i] & 63) | (m[i + 4] >> 4) << 6);
        scales[i + 8] = static_cast<uint8_t>((sc[i + 4] & 0x0f) | (m[i + 4] & 0x0f) << 4);
    }
}

void quantize_row_q4_k(const float* src, void* dst, int64_t n) {
    auto* out = static_cast<BlockQ4_K*>(dst);  // [n / 256]
    AffineK k;
    for (int64_t b = 0; b < n / kQK_K; ++b) {
        quantize_affine_k(src + b * kQK_K, 32, 15, 63, k);
        BlockQ4_K& o = out[b];
        o.d = k.d;
        o.dmin = k.dmin;
        pack_q4k_scales(k.sc, k.m, o.scales);
        for (int j = 0; j < 4; ++j) {
            for (int l = 0; l < 32; ++l) {
                o.qs[32 * j + l] =
                    static_cast<uint8_t>(k.q[64 * j + l] | k.q[64 * j + 32 + l] << 4);
            }
        }
    }
}

void quantize_row_q5_k(const float* src, void* dst, int64_t n) {
    auto* out = static_cast<BlockQ5_K*>(dst);  // [n / 256]
    AffineK k;
    for (int64_t b = 0; b < n / kQK_K; ++b) {
        quantize_affine_k(src + b * kQK_K, 32, 31, 63, k);
        BlockQ5_K& o = out[b];
        o.d = k.d;
        o.dmin = k.dmin;
        pack_q4k_scales(k.sc, k.m, o.scales);
        std::memset(o.qh, 0, sizeof(o.qh));
        for (int j = 0; j < 4; ++j) {
            for (int l = 0; l < 32; ++l) {
                o.qs[32 * j + l] = static_cast<uint8_t>((k.q[64 * j + l] & 0x0f) |
                                                        (k.q[64 * j + 32 + l] & 0x0f) << 4);
            }
        }
        for (int e = 0; e < kQK_K; ++e) {
            o.qh[e % 32] |= static_cast<uint8_t>(((k.q[e] >> 4) & 1) << (e / 32));
        }
    }
}

void quantize_row_q6_k(const float* src, void* dst, int64_t n) {
    auto* out = static_cast<BlockQ6_K*>(dst);  // [n / 256]
    SymmetricK k;
    for (int64_t b = 0; b < n / kQK_K; ++b) {
        quantize_symmetric_k(src + b * kQK_K, 32, 31, 127, k);
        BlockQ6_K& o = out[b];
        std::memset(&o, 0, sizeof(o));
        o.d = k.d;
        for (int g = 0; g < 16; ++g) o.scales[g] = static_cast<int8_t>(k.sc[g]);
        for (int e = 0; e < kQK_K; ++e) {
            const int nn = e / 128, kk = (e % 128) / 32, l = e % 32;
            const int u = k.q[e] + 32;  // [0, 63]
            o.ql[64 * nn + 32 * (kk % 2) + l] |= static_cast<uint8_t>((u & 0x0f) << (4 * (kk / 2)));
            o.qh[32 * nn + l] |= static_cast<uint8_t>((u >> 4) << (2 * kk));
        }
    }
}

// IQ4_XS: per sub-block a signed scale as IQ4_NL's (the extreme lands on the codebook end
// -127), then one fp16 d for the block with the 6-bit integer scales rounded away from zero
// (never shrinking a sub-block's range), then the nearest codebook entry per element.
void quantize_row_iq4_xs(const float* src, void* dst, int64_t n) {
    auto* out = static_cast<BlockIQ4_XS*>(dst);  // [n / 256]
    for (int64_t b = 0; b < n / kQK_K; ++b) {
        const float* x = src + b * kQK_K;  // [256]
        float want[8];                     // [8] signed scale each sub-block asks for
        float max_scale = 0.0f;
        for (int i = 0; i < 8; ++i) {
            float extreme = 0.0f;
            for (int j = 0; j < kQK; ++j) {
                if (std::fabs(x[32 * i + j]) > std::fabs(extreme)) extreme = x[32 * i + j];
            }
            want[i] = extreme / static_cast<float>(kIQ4NLValues[0]);
            max_scale = std::max(max_scale, std::fabs(want[i]));
        }
        BlockIQ4_XS& o = out[b];
        std::memset(&o, 0, sizeof(o));
        o.d = fp16_at_least(max_scale, 31);
        const float d = fp16_to_fp32(o.d);
        int q[kQK];
        for (int i = 0; i < 8; ++i) {
            int l = 0;
            if (d > 0.0f) {
                const int mag = std::min(31, static_cast<int>(std::ceil(std::fabs(want[i]) / d)));
                l = want[i] < 0.0f ? -mag : mag;
            }
            const int ls = l + 32;  // [1, 63]
            o.scales_l[i / 2] |= static_cast<uint8_t>((ls & 0x0f) << (4 * (i % 2)));
            o.scales_h |= static_cast<uint16_t>((ls >> 4) << (2 * i));
            const float dl = d * static_cast<float>(l);
            for (int j = 0; j < kQK; ++j) {
                q[j] = dl != 0.0f ? nearest_entry(kIQ4NLValues, x[32 * i + j] / dl) : 8;
            }
            pack_nibbles(q, o.qs + 16 * i);
        }
    }
}

// For each point (2a+1, 2b+1, 2c+1, 2e+1) of the odd 4-D lattice (a..e in 0..7, a in the low 3
// bits of the index) the IQ3_S grid entry nearest to it (least squared distance). Built once.
const std::array<uint16_t, 4096>& iq3s_nearest() {
    static const std::array<uint16_t, 4096> table = [] {
        std::array<uint16_t, 4096> t{};
        for (int p = 0; p < 4096; ++p) {
            int best = 0, best_dist = std::numeric_limits<int>::max();
            for (int i = 0; i < 512; ++i) {
                int dist = 0;
                for (int j = 0; j < 4; ++j) {
                    const int diff = static_cast<int>((kIQ3SGrid[i] >> (8 * j)) & 0xffu) -
                                     (2 * ((p >> (3 * j)) & 7) + 1);
                    dist += diff * diff;
                }
                if (dist < best_dist) {
                    best_dist = dist;
                    best = i;
                }
            }
            t[static_cast<size_t>(p)] = static_cast<uint16_t>(best);
        }
        return t;
    }();
    return table;
}

// IQ3_S: sub-block scales D_i = d * (1 + 2 s_i) rounded up so that the largest grid magnitude
// (15) covers the sub-block; signs from the data; each run of 4 magnitudes |x| / D_i rounded to
// the odd lattice and mapped to the grid entry nearest that lattice point.
void quantize_row_iq3_s(const float* src, void* dst, int64_t n) {
    auto* out = static_cast<BlockIQ3_S*>(dst);  // [n / 256]
    const std::array<uint16_t, 4096>& nearest = iq3s_nearest();
    for (int64_t b = 0; b < n / kQK_K; ++b) {
        const float* x = src + b * kQK_K;  // [256]
        float amax[8];                     // [8] largest magnitude per sub-block
        float max_all = 0.0f;
        for (int i = 0; i < 8; ++i) {
            amax[i] = 0.0f;
            for (int j = 0; j < kQK; ++j) amax[i] = std::max(amax[i], std::fabs(x[32 * i + j]));
            max_all = std::max(max_all, amax[i]);
        }
        BlockIQ3_S& o = out[b];
        std::memset(&o, 0, sizeof(o));
        o.d = fp16_at_least(max_all, 31 * 15);
        const float d = fp16_to_fp32(o.d);
        for (int i = 0; i < 8; ++i) {
            // The smallest odd multiplier m = 1 + 2s with d * m * 15 >= amax.
            int s = 0;
            if (d > 0.0f) {
                const int m = static_cast<int>(std::ceil(amax[i] / (15.0f * d)));
                s = clamp_int(m / 2, 0, 15);  // odd m -> (m - 1) / 2, even m -> m / 2
            }
            o.scales[i / 2] |= static_cast<uint8_t>(s << (4 * (i % 2)));
            const float step = d * static_cast<float>(1 + 2 * s);
            for (int k = 0; k < 8; ++k) {
                int point = 0;
                for (int j = 0; j < 4; ++j) {
                    const float v = x[32 * i + 4 * k + j];
                    if (v < 0.0f)
                        o.signs[4 * i + k / 2] |= static_cast<uint8_t>(1u << (4 * (k % 2) + j));
                    const int level =
                        step > 0.0f
                            ? clamp_int(nearest_int((std::fabs(v) / step - 1.0f) / 2.0f), 0, 7)
                            : 0;
                    point |= level << (3 * j);
                }
                const uint16_t index = nearest[static_cast<size_t>(point)];
                o.qs[8 * i + k] = static_cast<uint8_t>(index & 0xffu);
                o.qh[i] |= static_cast<uint8_t>((index >> 8) << k);
            }
        }
    }
}

// Quantized rows against f32 activations (KernelTable::exact): each block dequantized as
// dequantize_row does it, then accumulated in dot_f32's order.
template <class Block, int64_t kElems, DequantizeRowFn Dequantize>
float dot_exact(int64_t n, const void* w, const void* a) {
    const auto* blocks = static_cast<const Block*>(w);  // [n / kElems]
    const auto* x = static_cast<const float*>(a);       // [n]
    float buf[kElems];                                  // one block, dequantized
    float acc[8] = {};
    for (int64_t b = 0; b < n / kElems; ++b) {
        Dequantize(blocks + b, buf, kElems);
        dot_accumulate(buf, x + b * kElems, kElems, acc);
    }
    return dot_finish(acc);
}

template <class Block, int64_t kElems, DequantizeRowFn Dequantize>
void install_exact(KernelTable& table, TensorType type) {
    TypeKernels k = table[type];
    k.act_format = ActFormat::F32;
    k.dot = dot_exact<Block, kElems, Dequantize>;
    k.gemm = nullptr;
    k.gemm_scratch = nullptr;
    k.gemm_panels16 = nullptr;
    table.exact_for(type) = k;
}

template <class Block>
void install_exact_32(KernelTable& table, TensorType type) {
    install_exact<Block, 32, dequantize_row_32<Block>>(table, type);
}
template <class Block>
void install_exact_k(KernelTable& table, TensorType type) {
    install_exact<Block, kQK_K, dequantize_row_k<Block>>(table, type);
}

}  // namespace

void install_scalar_kernels(KernelTable& table) {
    table.isa = "scalar";
    table.quantize_act[static_cast<size_t>(ActFormat::F32)] = quantize_row_f32;
    table.quantize_act[static_cast<size_t>(ActFormat::Q8_32)] = quantize_act_q8_32;
    table.quantize_act[static_cast<size_t>(ActFormat::Q16_32)] = quantize_act_q16_32;

    table[TensorType::F32] = {ActFormat::F32, dequantize_row_f32, quantize_row_f32, dot_f32};
    table[TensorType::F16] = {ActFormat::F32, dequantize_row_f16, quantize_row_f16, dot_f16};
    table[TensorType::BF16] = {ActFormat::F32, dequantize_row_bf16, quantize_row_bf16, dot_bf16};

    table[TensorType::Q8_0] = {ActFormat::Q8_32, dequantize_row_32<BlockQ8_0>, quantize_row_q8_0,
                               dot_32<BlockQ8_0>};
    table[TensorType::Q4_0] = {ActFormat::Q8_32, dequantize_row_32<BlockQ4_0>, quantize_row_q4_0,
                               dot_32<BlockQ4_0>};
    table[TensorType::Q4_1] = {ActFormat::Q8_32, dequantize_row_32<BlockQ4_1>, quantize_row_q4_1,
                               dot_32<BlockQ4_1>};
    table[TensorType::Q5_0] = {ActFormat::Q8_32, dequantize_row_32<BlockQ5_0>, quantize_row_q5_0,
                               dot_32<BlockQ5_0>};
    table[TensorType::Q5_1] = {ActFormat::Q8_32, dequantize_row_32<BlockQ5_1>, quantize_row_q5_1,
                               dot_32<BlockQ5_1>};
    table[TensorType::IQ4_NL] = {ActFormat::Q8_32, dequantize_row_32<BlockIQ4_NL>,
                                 quantize_row_iq4_nl, dot_32<BlockIQ4_NL>};
    table[TensorType::MXFP4] = {ActFormat::Q16_32, dequantize_row_32<BlockMXFP4>,
                                quantize_row_mxfp4, dot_32_wide<BlockMXFP4>};

    table[TensorType::Q2_K] = {ActFormat::Q8_32, dequantize_row_k<BlockQ2_K>, quantize_row_q2_k,
                               dot_k<BlockQ2_K>};
    table[TensorType::Q3_K] = {ActFormat::Q8_32, dequantize_row_k<BlockQ3_K>, quantize_row_q3_k,
                               dot_k<BlockQ3_K>};
    table[TensorType::Q4_K] = {ActFormat::Q8_32, dequantize_row_k<BlockQ4_K>, quantize_row_q4_k,
                               dot_k<BlockQ4_K>};
    table[TensorType::Q5_K] = {ActFormat::Q8_32, dequantize_row_k<BlockQ5_K>, quantize_row_q5_k,
                               dot_k<BlockQ5_K>};
    table[TensorType::Q6_K] = {ActFormat::Q8_32, dequantize_row_k<BlockQ6_K>, quantize_row_q6_k,
                               dot_k<BlockQ6_K>};
    table[TensorType::IQ4_XS] = {ActFormat::Q8_32, dequantize_row_k<BlockIQ4_XS>,
                                 quantize_row_iq4_xs, dot_k<BlockIQ4_XS>};
    table[TensorType::IQ3_S] = {ActFormat::Q8_32, dequantize_row_k<BlockIQ3_S>, quantize_row_iq3_s,
                                dot_k<BlockIQ3_S>};

    for (TensorType t : {TensorType::F32, TensorType::F16, TensorType::BF16}) {
        table.exact_for(t) = table[t];
    }
    install_exact_32<BlockQ8_0>(table, TensorType::Q8_0);
    install_exact_32<BlockQ4_0>(table, TensorType::Q4_0);
    install_exact_32<BlockQ4_1>(table, TensorType::Q4_1);
    install_exact_32<BlockQ5_0>(table, TensorType::Q5_0);
    install_exact_32<BlockQ5_1>(table, TensorType::Q5_1);
    install_exact_32<BlockIQ4_NL>(table, TensorType::IQ4_NL);
    install_exact_32<BlockMXFP4>(table, TensorType::MXFP4);
    install_exact_k<BlockQ2_K>(table, TensorType::Q2_K);
    install_exact_k<BlockQ3_K>(table, TensorType::Q3_K);
    install_exact_k<BlockQ4_K>(table, TensorType::Q4_K);
    install_exact_k<BlockQ5_K>(table, TensorType::Q5_K);
    install_exact_k<BlockQ6_K>(table, TensorType::Q6_K);
    install_exact_k<BlockIQ4_XS>(table, TensorType::IQ4_XS);
    install_exact_k<BlockIQ3_S>(table, TensorType::IQ3_S);
}

}  // namespace ember
