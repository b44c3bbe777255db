// Scalar reference kernels for every supported type: dequantize, and dot products against the
// activation format the type declares (the reference quantizers are in quantize_scalar.cpp).
//
// Each format is decoded by one "unpack" function into plain integers (quants with their
// offset applied, per-group integer scales and mins) plus the float super-scales; dequantize and
// dot are then written once on top of that. This keeps the bit twiddling of each format in one
// place and makes the dot product, by construction, the same arithmetic as the dequantization.
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "engine/tensor/blocks.h"
#include "engine/tensor/iq_grids.h"
#include "engine/tensor/quantize_scalar.h"
#include "engine/tensor/scalar_common.h"
#include "engine/tensor/traits.h"

namespace ember {

namespace {

using namespace scalar;  // the shared helpers and the reference quantizers

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
    const auto* x = static_cast<const float*>(a);  // [n]
    float acc[8] = {};
    if (reinterpret_cast<uintptr_t>(w) % alignof(float) == 0) {
        dot_accumulate(static_cast<const float*>(w), x, n, acc);  // w: [n]
        return dot_finish(acc);
    }
    // A row no float may be read from in place (a file whose alignment is under 4 bytes): read
    // a chunk at a time through a copy, in the same order, so the sum is the same bit for bit.
    const auto* bytes = static_cast<const unsigned char*>(w);  // [n * 4]
    float buf[kFloatChunk];                                    // [chunk] weights
    for (int64_t i0 = 0; i0 < n; i0 += kFloatChunk) {
        const int64_t m = std::min(kFloatChunk, n - i0);
        std::memcpy(buf, bytes + i0 * 4, static_cast<size_t>(m) * sizeof(float));
        dot_accumulate(buf, x + i0, m, acc);
    }
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
        o.sx[0] = 0;
        o.sx[1] = 0;
        for (int j = 0; j < kQK; ++j) {
            // NaN products give 0, as in the SIMD kernels; the clamp guards the last ulp.
            const float v = xb[j] * id;
            const int q = std::isnan(v) ? 0 : clamp_int(nearest_int_small(v), -kQ16Max, kQ16Max);
            const int hi = (q + 128) >> 8;  // arithmetic shift: floor
            o.hi[j] = static_cast<int8_t>(hi);
            o.lo[j] = static_cast<int8_t>(q - 256 * hi);
            o.sx[j / 16] += q;
        }
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
        // dot_accumulate's order; whole blocks have no tail (written out: GCC's loop analysis
        // warned about the tail loop it would inline).
        static_assert(kElems % 8 == 0);
        const float* xb = x + b * kElems;  // [kElems]
        for (int64_t j = 0; j < kElems; j += 8) {
            for (int k = 0; k < 8; ++k) acc[k] += buf[j + k] * xb[j + k];
        }
    }
    return dot_finish(acc);
}

// Quantized rows against Q16_32 activations (KernelTable::wide), the reference the SIMD wide
// kernels are checked against: each block dequantized as dequantize_row does it, times the
// activations' values d * (256 * hi + lo), in dot_f32's order. The SIMD kernels sum the same
// products as exact integers per group instead (simd_unpack.h), so they agree within rounding.
template <class Block, int64_t kElems, DequantizeRowFn Dequantize>
float dot_wide(int64_t n, const void* w, const void* act) {
    const auto* blocks = static_cast<const Block*>(w);     // [n / kElems]
    const auto* a = static_cast<const BlockQ16_32*>(act);  // [n / 32]
    float buf[kElems];                                     // one block, dequantized
    float x[kElems];                                       // its activations
    float acc[8] = {};
    for (int64_t b = 0; b < n / kElems; ++b) {
        Dequantize(blocks + b, buf, kElems);
        for (int64_t j = 0; j < kElems; ++j) {
            const BlockQ16_32& ab = a[(b * kElems + j) / kQK];
            const int64_t e = (b * kElems + j) % kQK;
            x[j] = ab.d * static_cast<float>(256 * ab.hi[e] + ab.lo[e]);
        }
        static_assert(kElems % 8 == 0);
        for (int64_t j = 0; j < kElems; j += 8) {
            for (int k = 0; k < 8; ++k) acc[k] += buf[j + k] * x[j + k];
        }
    }
    return dot_finish(acc);
}

template <class Block, int64_t kElems, DequantizeRowFn Dequantize>
void install_wide(KernelTable& table, TensorType type) {
    TypeKernels k = table[type];
    k.act_format = ActFormat::Q16_32;
    k.dot = dot_wide<Block, kElems, Dequantize>;
    k.gemm = nullptr;
    k.gemm_scratch = nullptr;
    k.gemm_panels16 = nullptr;
    table.wide_for(type) = k;
}

template <class Block, int64_t kElems, DequantizeRowFn Dequantize>
void install_exact(KernelTable& table, TensorType type) {
    install_wide<Block, kElems, Dequantize>(table, type);
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
        table.wide_for(t) = table[t];
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
    // MXFP4 takes 16-bit activations anyway: its own entry is already the wide one.
    table.wide_for(TensorType::MXFP4) = table[TensorType::MXFP4];
}

}  // namespace ember
