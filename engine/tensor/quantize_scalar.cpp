// The reference quantizers, 32-element formats and K-quants (see quantize_scalar.h).
#include "engine/tensor/quantize_scalar.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>

#include "engine/tensor/blocks.h"
#include "engine/tensor/iq_grids.h"
#include "engine/tensor/scalar_common.h"

namespace ember::scalar {

// ---- reference quantizers, 32-element formats ----------------------------------------------

namespace {

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
}  // namespace

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

namespace {
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
}  // namespace

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
// ---- reference quantizers, K-quants ---------------------------------------------------------
//
// Simple and safe rather than rmse-optimal: every scale is rounded *up* (integer scales by
// ceil, fp16 super-scales by fp16_at_least) so the quantization grid always covers the data and
// no element is clipped; the per-element error is then at most half a grid step.

namespace {

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
}  // namespace

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

namespace {
void pack_q4k_scales(const int* sc, const int* m, uint8_t* scales) {
    for (int i = 0; i < 4; ++i) {
        scales[i] = static_cast<uint8_t>((sc[i] & 63) | (sc[i + 4] >> 4) << 6);
        scales[i + 4] = static_cast<uint8_t>((m[i] & 63) | (m[i + 4] >> 4) << 6);
        scales[i + 8] = static_cast<uint8_t>((sc[i + 4] & 0x0f) | (m[i + 4] & 0x0f) << 4);
    }
}
}  // namespace

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

namespace {
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
}  // namespace

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

}  // namespace ember::scalar
