// AVX-512 decode matrix-vector products straight from the weights' own layout: one token, or a
// few (up to kGemvTokens, the tokens a speculative-decoding check verifies at once), every
// weight block read once for all of them. matmul takes them for up to kGemvTokens tokens (see
// Avx512::gemv_max_tokens in quants_avx512.cpp); larger batches go through the panels.
//
// The panel path (simd_gemm.h) transposes 16 rows into panels in memory so that int32 lanes are
// rows; for a few tokens that transpose, its stores and reloads cost more than the weights take
// to arrive. Here the rows stay as they are: a zmm holds a piece of two rows (256-bit halves) or
// of four (128-bit lanes). For one token vpdpbusd leaves each row's sum spread over a few lanes
// and a transpose-and-add tree brings the 16 rows' sums into the 16 lanes; for several tokens
// the group's rows are transposed in registers once (transpose_rows / transpose_quads) and each
// token's 4-byte broadcasts meet them with no tree. From there on it is the
// canonical order of simd_unpack.h per (row, token) (exact integer sum of the group, then the
// group's float multiply-adds), so the results are bitwise those of the panel path and of the
// scalar reference, whatever the number of tokens.
//
//   panel_a:   Q8_0                       two rows per zmm, one group per step
//   panel_nib: Q4_0, IQ4_NL, Q4_1,        four rows per zmm: 16 nibble bytes of each row give
//              Q5_0, Q5_1, MXFP4          elements 0-15 (low nibbles) and 16-31 (high ones);
//                                         Q5's bit 4 from qh by byte masks (high_bits);
//                                         MXFP4's codebook and e8m0 scale
//   panel_k:   Q4_K, Q5_K, Q6_K,          two rows per zmm; the super-block's scales of the 16
//              IQ4_XS, IQ3_S              rows are unpacked once (gathers) into 16-lane vectors;
//                                         IQ3_S's grid entries by one gather per group
//
// A 16-row panel is 16 consecutive rows, usually one contiguous stretch of memory: while one
// panel is computed the next one is prefetched into L2 in the order it will be read (Prefetcher).
//
// Included only by quants_avx512.cpp, after simd_unpack.h.
#pragma once

#ifndef EMBER_SIMD_NS
#error "gemv_avx512.h belongs to quants_avx512.cpp"
#endif

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>

#include "engine/tensor/blocks.h"
#include "engine/tensor/iq_grids.h"
#include "engine/tensor/simd_unpack.h"
#include "engine/tensor/traits.h"

namespace ember::EMBER_SIMD_NS {
namespace gemv512 {

// Most tokens of one gemv call (the speculative check's batch).
constexpr int kGemvTokens = 8;

// p[i] holds row lo(i) in its low 256 bits and row hi(i) in its high ones, each as 8 int32
// partial sums of one group. Rows are placed (i, i+4) for i < 4 and (i+4, i+8) after, so that
// the tree below ends with lane r = row r.
inline int lo_row(int i) {
    return i < 4 ? i : i + 4;
}
inline int hi_row(int i) {
    return lo_row(i) + 4;
}

// The first two levels of the tree: u[j]'s 128-bit lanes hold (lo rows, elements 0-15),
// (lo rows, 16-31), (hi rows, 0-15), (hi rows, 16-31) of the rows 4j..4j+3 of the result order.
inline void reduce_rows_2(const __m512i p[8], __m512i u[2]) {
    __m512i t[4];
    for (int j = 0; j < 4; ++j) {  // per 128-bit lane: [2j, 2j+1, 2j, 2j+1] of each half
        t[j] = _mm512_add_epi32(_mm512_unpacklo_epi32(p[2 * j], p[2 * j + 1]),
                                _mm512_unpackhi_epi32(p[2 * j], p[2 * j + 1]));
    }
    for (int j = 0; j < 2; ++j) {  // per 128-bit lane: slots 4j..4j+3, half of the lanes each
        u[j] = _mm512_add_epi32(_mm512_unpacklo_epi64(t[2 * j], t[2 * j + 1]),
                                _mm512_unpackhi_epi64(t[2 * j], t[2 * j + 1]));
    }
}

// Lane r = sum of row r's 8 partial lanes.
inline __m512i reduce_rows(const __m512i p[8]) {
    __m512i u[2];
    reduce_rows_2(p, u);
    return _mm512_add_epi32(_mm512_shuffle_i32x4(u[0], u[1], _MM_SHUFFLE(2, 0, 2, 0)),
                            _mm512_shuffle_i32x4(u[0], u[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

// Lane r of h0 / h1 = row r's sum over elements 0-15 / 16-31 of the group.
inline void reduce_halves(const __m512i p[8], __m512i* h0, __m512i* h1) {
    __m512i u[2];
    reduce_rows_2(p, u);
    *h0 = _mm512_shuffle_i32x4(u[0], u[1], _MM_SHUFFLE(2, 0, 2, 0));
    *h1 = _mm512_shuffle_i32x4(u[0], u[1], _MM_SHUFFLE(3, 1, 3, 1));
}

// q[k]'s 128-bit lane L holds 4 partial sums of row 4L + k: lane r of the result = row r.
inline __m512i reduce_quads(const __m512i q[4]) {
    const __m512i t0 =
        _mm512_add_epi32(_mm512_unpacklo_epi32(q[0], q[1]), _mm512_unpackhi_epi32(q[0], q[1]));
    const __m512i t1 =
        _mm512_add_epi32(_mm512_unpacklo_epi32(q[2], q[3]), _mm512_unpackhi_epi32(q[2], q[3]));
    return _mm512_add_epi32(_mm512_unpacklo_epi64(t0, t1), _mm512_unpackhi_epi64(t0, t1));
}

// The inverse layout, for several tokens: u[i] holds rows lo(i) | hi(i), 8 dwords each (as p
// above); v[k] lane r = dword k (bytes 4k .. 4k+3) of row r. Transposed once per group, the
// rows' bytes then meet each token's 4-byte broadcasts with one vpdpbusd per dword and no
// reduction tree per token (24 shuffles per group instead of ~20 per token).
inline void transpose_rows(const __m512i u[8], __m512i v[8]) {
    __m512i b[8];  // b[4h + k]'s 128-bit lanes: dwords k, k + 4 of rows 8h..8h+3, then 8h+4..
    for (int h = 0; h < 2; ++h) {
        const __m512i* x = u + 4 * h;
        const __m512i a0 = _mm512_unpacklo_epi32(x[0], x[1]);
        const __m512i a1 = _mm512_unpackhi_epi32(x[0], x[1]);
        const __m512i a2 = _mm512_unpacklo_epi32(x[2], x[3]);
        const __m512i a3 = _mm512_unpackhi_epi32(x[2], x[3]);
        b[4 * h + 0] = _mm512_unpacklo_epi64(a0, a2);
        b[4 * h + 1] = _mm512_unpackhi_epi64(a0, a2);
        b[4 * h + 2] = _mm512_unpacklo_epi64(a1, a3);
        b[4 * h + 3] = _mm512_unpackhi_epi64(a1, a3);
    }
    for (int k = 0; k < 4; ++k) {
        v[k] = _mm512_shuffle_i32x4(b[k], b[4 + k], _MM_SHUFFLE(2, 0, 2, 0));
        v[k + 4] = _mm512_shuffle_i32x4(b[k], b[4 + k], _MM_SHUFFLE(3, 1, 3, 1));
    }
}

// q[k]'s 128-bit lane L holds the 4 dwords of row 4L + k: v[j] lane r = dword j of row r.
inline void transpose_quads(const __m512i q[4], __m512i v[4]) {
    const __m512i t0 = _mm512_unpacklo_epi32(q[0], q[1]);
    const __m512i t1 = _mm512_unpackhi_epi32(q[0], q[1]);
    const __m512i t2 = _mm512_unpacklo_epi32(q[2], q[3]);
    const __m512i t3 = _mm512_unpackhi_epi32(q[2], q[3]);
    v[0] = _mm512_unpacklo_epi64(t0, t2);
    v[1] = _mm512_unpackhi_epi64(t0, t2);
    v[2] = _mm512_unpacklo_epi64(t1, t3);
    v[3] = _mm512_unpackhi_epi64(t1, t3);
}

// Dword k of a token's 32 activation bytes in every lane.
inline __m512i act_dword(const int8_t* qs, int k) {
    int32_t v;
    std::memcpy(&v, qs + 4 * k, 4);
    return _mm512_set1_epi32(v);
}

inline __m512i pair256(const uint8_t* lo, const uint8_t* hi) {
    return _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(lo))),
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(hi)), 1);
}

inline __m512i quad128(const uint8_t* r0, const uint8_t* r1, const uint8_t* r2, const uint8_t* r3) {
    __m512i v = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(r0)));
    v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(r1)), 1);
    v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(r2)), 2);
    return _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(r3)), 3);
}

// fp16 in the low (kHigh: high) 16 bits of each lane -> f32.
template <bool kHigh>
inline __m512 half_lanes(__m512i v) {
    if constexpr (kHigh) v = _mm512_srli_epi32(v, 16);
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(v));
}

inline __mmask16 first_rows(int rows) {
    return static_cast<__mmask16>(rows >= 16 ? 0xffffu : (1u << rows) - 1u);
}

// Row pointers and gather offsets of a panel: rows past `rows` repeat the last one (their lanes
// are never stored).
struct PanelRows {
    const uint8_t* row[16];
    __m512i voffs;
    PanelRows(const uint8_t* w, size_t stride, int rows) {
        alignas(64) int32_t offs[16];
        for (int r = 0; r < 16; ++r) {
            offs[r] = static_cast<int32_t>(static_cast<size_t>(r < rows ? r : rows - 1) * stride);
            row[r] = w + offs[r];
        }
        voffs = _mm512_load_si512(offs);
    }
    // 16 lanes: the dword at byte `off` of each row.
    __m512i gather(const uint8_t* w, size_t off) const {
        return _mm512_i32gather_epi32(voffs, w + off, 1);
    }
};

// Prefetches the next panel into L2 in the order the kernel will read it: one 64-byte step of
// all 16 rows each time the kernel has consumed 64 bytes per row, so every line is requested one
// panel ahead of its use. Requesting the panel front to back into L1 instead (the first version)
// left the rows read first waiting longest and overflowed L1 once a panel passed ~10 KB (Q8_0 at
// 1024 columns is 17 KB): the DRAM matvec gained 20-60% (Q8_0 1024 columns 20 -> 28-35 GB/s).
struct Prefetcher {
    const char* next;     // the next panel's first row; nullptr: none
    size_t stride;        // bytes between its rows
    size_t step;          // bytes per row the kernel consumes per call
    size_t consumed = 0;  // bytes per row consumed so far
    size_t issued = 0;    // bytes per row requested so far
    void operator()() {
        if (next == nullptr) return;
        if (consumed >= issued) {
            for (int r = 0; r < 16; ++r) _mm_prefetch(next + r * stride + issued, _MM_HINT_T1);
            issued += 64;
        }
        consumed += step;
    }
};

// The prepared activation rows of C tokens: Q8_32, or Q16_32 for the kWideAct types.
template <int C, class Act = BlockQ8_32>
struct Tokens {
    const Act* act[C];
    Tokens(const uint8_t* a, size_t stride) {
        for (int t = 0; t < C; ++t) act[t] = reinterpret_cast<const Act*>(a + t * stride);
    }
};

template <int C>
inline void store_tokens(const __m512 tot[C], float* y, int64_t ldy, int rows) {
    for (int t = 0; t < C; ++t) _mm512_mask_storeu_ps(y + t * ldy, first_rows(rows), tot[t]);
}

// ---- family A, 32 bytes per row and group (Q8_0, Q5_0) ------------------------------------------

template <class T, int C>
void panel_a(const uint8_t* w, size_t stride, int rows, int64_t n_groups, const Tokens<C>& tk,
             float* y, int64_t ldy, const uint8_t* next) {
    using Block = typename T::Block;
    static_assert(T::kFamily == Family::A && T::kGroups == 1, "one scale per 32-element block");
    constexpr size_t B = sizeof(Block);
    const PanelRows pr(w, stride, rows);
    Prefetcher pf{reinterpret_cast<const char*>(next), stride, B};
    __m512 tot[C];
    for (int t = 0; t < C; ++t) tot[t] = _mm512_setzero_ps();
    for (int64_t g = 0; g < n_groups; ++g) {
        pf();
        const size_t off = static_cast<size_t>(g) * B;
        __m512i u[8];
        for (int i = 0; i < 8; ++i) {
            const __m256i lo =
                T::unpack(reinterpret_cast<const Block*>(pr.row[lo_row(i)] + off), 0);
            const __m256i hi =
                T::unpack(reinterpret_cast<const Block*>(pr.row[hi_row(i)] + off), 0);
            u[i] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
        }
        // Every family-A block starts with its fp16 scale.
        const __m512 d = half_lanes<false>(pr.gather(w, off));
        if constexpr (C == 1) {
            const BlockQ8_32& a = tk.act[0][g];
            const __m512i av =
                _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.qs)));
            __m512i p[8];
            for (int i = 0; i < 8; ++i)
                p[i] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u[i], av);
            // i = sum u * qa - kOff * (s0 + s1), exact.
            const __m512i isum =
                _mm512_add_epi32(reduce_rows(p), _mm512_set1_epi32(-T::kOff * (a.s[0] + a.s[1])));
            tot[0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum),
                                     _mm512_mul_ps(d, _mm512_set1_ps(a.d)), tot[0]);
        } else {
            __m512i v[8];
            transpose_rows(u, v);
            for (int t = 0; t < C; ++t) {
                const BlockQ8_32& a = tk.act[t][g];
                // Two chains, so that vpdpbusd's latency overlaps even for two tokens.
                __m512i i0 = _mm512_set1_epi32(-T::kOff * (a.s[0] + a.s[1]));
                __m512i i1 = _mm512_setzero_si512();
                for (int k = 0; k < 8; k += 2) {
                    i0 = _mm512_dpbusd_epi32(i0, v[k], act_dword(a.qs, k));
                    i1 = _mm512_dpbusd_epi32(i1, v[k + 1], act_dword(a.qs, k + 1));
                }
                const __m512i isum = _mm512_add_epi32(i0, i1);
                tot[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum),
                                         _mm512_mul_ps(d, _mm512_set1_ps(a.d)), tot[t]);
            }
        }
    }
    store_tokens<C>(tot, y, ldy, rows);
}

// ---- 16 nibble bytes per row and group (Q4_0, IQ4_NL: family A; Q4_1: family B) ---------------

template <class T>
struct NibbleLayout;
template <>
struct NibbleLayout<TQ4_0> {
    static constexpr size_t kQs = offsetof(BlockQ4_0, qs);
    static constexpr bool kTable = false;
};
template <>
struct NibbleLayout<TIQ4_NL> {
    static constexpr size_t kQs = offsetof(BlockIQ4_NL, qs);
    static constexpr bool kTable = true;
};
template <>
struct NibbleLayout<TQ4_1> {
    static constexpr size_t kQs = offsetof(BlockQ4_1, qs);
    static constexpr bool kTable = false;
};
// Q5_0 / Q5_1: the nibbles as Q4_0 / Q4_1, and bit j of the 32-bit qh as element j's bit 4.
template <>
struct NibbleLayout<TQ5_0> {
    static constexpr size_t kQs = offsetof(BlockQ5_0, qs);
    static constexpr bool kTable = false;
    static constexpr size_t kQh = offsetof(BlockQ5_0, qh);
};
template <>
struct NibbleLayout<TQ5_1> {
    static constexpr size_t kQs = offsetof(BlockQ5_1, qs);
    static constexpr bool kTable = false;
    static constexpr size_t kQh = offsetof(BlockQ5_1, qh);
};
// MXFP4: the nibbles as Q4_0 after a one-byte e8m0 exponent, through its own codebook.
template <>
struct NibbleLayout<TMXFP4> {
    static constexpr size_t kQs = offsetof(BlockMXFP4, qs);
    static constexpr bool kTable = true;
    static constexpr bool kE8M0 = true;  // the scale is 2^(e - 128), not an fp16
};
template <class L>
concept HasHighBits = requires {
    L::kQh;
};
template <class L>
concept HasE8M0 = requires {
    L::kE8M0;
};

// The low byte of each lane as an e8m0 exponent -> 2^(e - 128), exactly (TMXFP4::params).
inline __m512 e8m0_half_lanes(__m512i v) {
    const __m512i e = _mm512_and_si512(v, _mm512_set1_epi32(0xff));
    const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
    const __m512i subnormal = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
    const __mmask16 small = _mm512_cmplt_epi32_mask(e, _mm512_set1_epi32(2));
    return _mm512_castsi512_ps(_mm512_mask_blend_epi32(small, normal, subnormal));
}

// For the transposed nibbles (lane r = dword j of row r's nibble bytes, see panel_nib): the
// 64-lane mask of the bytes whose element has bit 4 set, qh[r] in dword lane r. lo[j] holds
// elements 4j..4j+3 (qh bits 4j..), hi[j] elements 16+4j.. (bits 16+4j..): each byte takes
// the qh byte holding its bit (vpshufb within the lane's dword) and tests that bit.
template <bool kHigh>
inline __mmask64 high_bits(__m512i qh, int j) {
    const int byte = (kHigh ? 2 : 0) + j / 2;  // qh byte of bits 4j.. (+16)
    const __m512i first = _mm512_broadcast_i32x4(
        _mm_setr_epi8(0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12));  // each dword's byte 0
    const __m512i spread =
        _mm512_shuffle_epi8(qh, _mm512_add_epi8(first, _mm512_set1_epi8(static_cast<char>(byte))));
    const int shift = 4 * (j % 2);  // bit of element 4j + i within its byte: shift + i
    const __m512i bit = _mm512_set1_epi32(static_cast<int32_t>(0x08040201u << shift));
    return _mm512_test_epi8_mask(spread, bit);
}

// The byte at `off` of the 16 rows, one per dword lane, by plain loads: the 16-lane gather
// costs more than the rest of an MXFP4 group's work.
inline __m512i e_bytes(const PanelRows& pr, size_t off) {
    alignas(64) int32_t e[16];
    for (int r = 0; r < 16; ++r) e[r] = pr.row[r][off];
    return _mm512_load_si512(e);
}

template <class T, int C>
void panel_nib(const uint8_t* w, size_t stride, int rows, int64_t n_groups,
               const Tokens<C, ActBlock<T>>& tk, float* y, int64_t ldy, const uint8_t* next) {
    using L = NibbleLayout<T>;
    // Q16_32 activations (MXFP4): every product pass runs once per byte plane, and the planes'
    // exact sums join as lo + 256 * hi (simd_unpack.h's A16 order).
    constexpr bool kPlanes = kWideAct<T>;
    static_assert(!kPlanes || T::kFamily == Family::A);
    constexpr size_t B = sizeof(typename T::Block);
    const PanelRows pr(w, stride, rows);
    Prefetcher pf{reinterpret_cast<const char*>(next), stride, B};
    const __m512i nib = _mm512_set1_epi8(0x0f);
    // The codebook shifted by +kOff (as the type's unpack), in every 128-bit lane: MXFP4's, or
    // IQ4_NL's.
    const __m512i table =
        HasE8M0<L>
            ? _mm512_broadcast_i32x4(_mm256_castsi256_si128(TMXFP4::table()))
            : _mm512_broadcast_i32x4(_mm_setr_epi8(
                  1, 24, 45, 63, 79, 93, 106, 118, static_cast<int8_t>(129),
                  static_cast<int8_t>(141), static_cast<int8_t>(153), static_cast<int8_t>(166),
                  static_cast<int8_t>(181), static_cast<int8_t>(197), static_cast<int8_t>(217),
                  static_cast<int8_t>(241)));
    __m512 tot[C];
    for (int t = 0; t < C; ++t) tot[t] = _mm512_setzero_ps();
    for (int64_t g = 0; g < n_groups; ++g) {
        pf();
        const size_t off = static_cast<size_t>(g) * B;
        // q[k]: the 16 nibble bytes of rows k, 4 + k, 8 + k, 12 + k; low nibbles are elements
        // 0-15, high ones 16-31.
        __m512i q[4];
        for (int k = 0; k < 4; ++k) {
            const size_t o = off + L::kQs;
            q[k] = quad128(pr.row[k] + o, pr.row[4 + k] + o, pr.row[8 + k] + o, pr.row[12 + k] + o);
        }
        auto nibbles = [&](__m512i v, bool high) {
            __m512i n = _mm512_and_si512(high ? _mm512_srli_epi16(v, 4) : v, nib);
            if constexpr (L::kTable) n = _mm512_shuffle_epi8(table, n);
            return n;
        };
        __m512i qh;  // Q5_0 / Q5_1: the 16 rows' high bits, one dword lane per row
        if constexpr (HasHighBits<L>) qh = pr.gather(w, off + L::kQh);
        const __m512i dm = kPlanes ? e_bytes(pr, off)
                                   : pr.gather(w, off);  // d (and Q4_1's m above it), or MXFP4's e
        __m512 d;
        if constexpr (HasE8M0<L>) {
            d = e8m0_half_lanes(dm);
        } else {
            d = half_lanes<false>(dm);
        }
        __m512 m;
        if constexpr (T::kFamily == Family::B) m = half_lanes<true>(dm);
        auto finish = [&](int t, __m512i isum) {
            const auto& a = tk.act[t][g];
            if constexpr (kPlanes) {
                isum = _mm512_add_epi32(isum, _mm512_set1_epi32(-T::kOff * (a.sx[0] + a.sx[1])));
            } else if constexpr (T::kFamily == Family::A) {
                isum = _mm512_add_epi32(isum, _mm512_set1_epi32(-T::kOff * (a.s[0] + a.s[1])));
            }
            tot[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum),
                                     _mm512_mul_ps(d, _mm512_set1_ps(a.d)), tot[t]);
            if constexpr (T::kFamily == Family::B) {
                const float sa = static_cast<float>(a.s[0] + a.s[1]) * a.d;
                tot[t] = _mm512_fmadd_ps(m, _mm512_set1_ps(sa), tot[t]);
            }
        };
        if constexpr (C == 1 && !HasHighBits<L>) {
            __m512i lo[4], hi[4];
            for (int k = 0; k < 4; ++k) {
                lo[k] = nibbles(q[k], false);
                hi[k] = nibbles(q[k], true);
            }
            const auto& a = tk.act[0][g];
            // Elements 0-15 / 16-31 of an activation byte plane in every 128-bit lane.
            auto bcast16 = [](const int8_t* plane, int half) {
                return _mm512_broadcast_i32x4(
                    _mm_loadu_si128(reinterpret_cast<const __m128i*>(plane + 16 * half)));
            };
            auto products = [&](__m512i acc, int k, const int8_t* plane) {
                return _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(acc, lo[k], bcast16(plane, 0)),
                                           hi[k], bcast16(plane, 1));
            };
            __m512i p[4];
            for (int k = 0; k < 4; ++k) {
                if constexpr (kPlanes) {
                    // 256 * (hi plane's sums) + lo plane's: exact, and one reduction for both.
                    p[k] = _mm512_slli_epi32(products(_mm512_setzero_si512(), k, a.hi), 8);
                    p[k] = products(p[k], k, a.lo);
                } else {
                    p[k] = products(_mm512_setzero_si512(), k, a.qs);
                }
            }
            finish(0, reduce_quads(p));
        } else {
            // lo[j] / hi[j] lane r: elements 4j..4j+3 / 16+4j.. of row r.
            __m512i v[4], lo[4], hi[4];
            transpose_quads(q, v);
            for (int j = 0; j < 4; ++j) {
                lo[j] = nibbles(v[j], false);
                hi[j] = nibbles(v[j], true);
                if constexpr (HasHighBits<L>) {
                    const __m512i b4 = _mm512_set1_epi8(0x10);
                    lo[j] = _mm512_mask_add_epi8(lo[j], high_bits<false>(qh, j), lo[j], b4);
                    hi[j] = _mm512_mask_add_epi8(hi[j], high_bits<true>(qh, j), hi[j], b4);
                }
            }
            // Sum over the group of the rows' codes times one activation byte plane.
            auto plane_sum = [&](const int8_t* qs) {
                __m512i i0 = _mm512_setzero_si512(), i1 = _mm512_setzero_si512();
                for (int j = 0; j < 4; ++j) {
                    i0 = _mm512_dpbusd_epi32(i0, lo[j], act_dword(qs, j));
                    i1 = _mm512_dpbusd_epi32(i1, hi[j], act_dword(qs, 4 + j));
                }
                return _mm512_add_epi32(i0, i1);
            };
            for (int t = 0; t < C; ++t) {
                if constexpr (kPlanes) {
                    const auto& a = tk.act[t][g];
                    finish(t, _mm512_add_epi32(plane_sum(a.lo),
                                               _mm512_slli_epi32(plane_sum(a.hi), 8)));
                } else {
                    finish(t, plane_sum(tk.act[t][g].qs));
                }
            }
        }
    }
    store_tokens<C>(tot, y, ldy, rows);
}

// ---- K-quants: 8 groups of 32 per 256-element super-block
// ----------------------------------------

// Per super-block numbers of the 16 rows, 16 lanes each.
struct KScalesB {  // Q4_K, Q5_K: x = d_s * q + m_s per group s
    __m512 d[8];
    __m512 m[8];
};
struct KScalesC {  // Q6_K: x = d * sc_h * (q - 32) per 16-element half h
    __m512 d;
    __m512i sc0[8];
    __m512i sc1[8];
};

// Q4_K / Q5_K: the 16 bytes d, dmin, scales[12] of 16 rows (v[0..3], one dword per row and
// lane) -> d_s = d * sc_s and m_s = -(dmin * mn_s) of the 8 groups, as q4k_params. Shared by
// this gemv (gathered rows), the panel repacks and the Panels16 kernel (loaded vectors).
inline void q4k_scales(const __m512i v[4], __m512 d_s[8], __m512 m_s[8]) {
    const __m512i dd = v[0];
    const __m512i s0 = v[1];  // scales[0..3]
    const __m512i s1 = v[2];  // scales[4..7]
    const __m512i s2 = v[3];  // scales[8..11]
    const __m512 d = half_lanes<false>(dd), dmin = half_lanes<true>(dd);
    const __m512i m6 = _mm512_set1_epi8(0x3f), m4 = _mm512_set1_epi8(0x0f),
                  top2 = _mm512_set1_epi8(0x30);
    // Bytes i of these hold scale/min i (i < 4) and i + 4.
    const __m512i sc_lo = _mm512_and_si512(s0, m6);
    const __m512i mn_lo = _mm512_and_si512(s1, m6);
    const __m512i sc_hi =
        _mm512_or_si512(_mm512_and_si512(s2, m4), _mm512_and_si512(_mm512_srli_epi32(s0, 2), top2));
    const __m512i mn_hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(s2, 4), m4),
                                          _mm512_and_si512(_mm512_srli_epi32(s1, 2), top2));
    const __m512 neg = _mm512_set1_ps(-0.0f);
    for (int i = 0; i < 8; ++i) {
        const __m512i byte = _mm512_set1_epi32(0xff);
        const __m512i sc =
            _mm512_and_si512(_mm512_srli_epi32(i < 4 ? sc_lo : sc_hi, 8 * (i % 4)), byte);
        const __m512i mn =
            _mm512_and_si512(_mm512_srli_epi32(i < 4 ? mn_lo : mn_hi, 8 * (i % 4)), byte);
        d_s[i] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(sc));
        m_s[i] = _mm512_xor_ps(_mm512_mul_ps(dmin, _mm512_cvtepi32_ps(mn)), neg);
    }
}

inline void q45k_scales(const PanelRows& pr, const uint8_t* blk, KScalesB* s) {
    const __m512i v[4] = {pr.gather(blk, 0), pr.gather(blk, 4), pr.gather(blk, 8),
                          pr.gather(blk, 12)};
    q4k_scales(v, s->d, s->m);
}

struct KQ4 {
    using Block = BlockQ4_K;
    static constexpr Family kFamily = Family::B;
    using Scales = KScalesB;
    static void scales(const PanelRows& pr, const uint8_t* blk, Scales* s) {
        q45k_scales(pr, blk, s);
    }
    // Group s = 2j + h: nibble h of qs[32j ..].
    static __m512i unpack(const uint8_t* lo, const uint8_t* hi, int s) {
        const size_t o = offsetof(BlockQ4_K, qs) + 32 * (s / 2);
        const __m512i x = pair256(lo + o, hi + o);
        return _mm512_and_si512((s & 1) ? _mm512_srli_epi16(x, 4) : x, _mm512_set1_epi8(0x0f));
    }
};

struct KQ5 {
    using Block = BlockQ5_K;
    static constexpr Family kFamily = Family::B;
    using Scales = KScalesB;
    static void scales(const PanelRows& pr, const uint8_t* blk, Scales* s) {
        q45k_scales(pr, blk, s);
    }
    // As Q4_K plus bit s of qh[l] as bit 4.
    static __m512i unpack(const uint8_t* lo, const uint8_t* hi, int s) {
        const size_t o = offsetof(BlockQ5_K, qs) + 32 * (s / 2);
        const size_t oh = offsetof(BlockQ5_K, qh);
        const __m512i x = pair256(lo + o, hi + o);
        const __m512i h = pair256(lo + oh, hi + oh);
        // Bit s of each byte to bit 4 (16-bit shifts: what crosses a byte is masked off).
        const __m512i hb = s <= 4 ? _mm512_slli_epi16(h, 4 - s) : _mm512_srli_epi16(h, s - 4);
        const __m512i n =
            _mm512_and_si512((s & 1) ? _mm512_srli_epi16(x, 4) : x, _mm512_set1_epi8(0x0f));
        return _mm512_or_si512(n, _mm512_and_si512(hb, _mm512_set1_epi8(0x10)));
    }
};

struct KQ6 {
    using Block = BlockQ6_K;
    static constexpr Family kFamily = Family::C;
    static constexpr int kOff = 32;
    using Scales = KScalesC;
    static void scales(const PanelRows& pr, const uint8_t* blk, Scales* s) {
        constexpr size_t so = offsetof(BlockQ6_K, scales);
        static_assert(offsetof(BlockQ6_K, d) == so + 16 && sizeof(BlockQ6_K) == so + 18);
        // d through the dword ending at the block's end (scales[14..15], d): never past it.
        s->d = half_lanes<true>(pr.gather(blk, so + 14));
        for (int q = 0; q < 4; ++q) {
            const __m512i w = pr.gather(blk, so + 4 * q);  // scales 4q .. 4q+3
            for (int e = 0; e < 2; ++e) {                  // group 2q + e: bytes 2e, 2e + 1
                s->sc0[2 * q + e] = _mm512_srai_epi32(_mm512_slli_epi32(w, 24 - 16 * e), 24);
                s->sc1[2 * q + e] = _mm512_srai_epi32(_mm512_slli_epi32(w, 16 - 16 * e), 24);
            }
        }
    }
    // Group s = 4n + k: low nibble (k / 2) of ql[64n + 32(k % 2) + l], high 2 bits = bits 2k
    // of qh[32n + l].
    static __m512i unpack(const uint8_t* lo, const uint8_t* hi, int s) {
        const int n = s / 4, k = s % 4;
        const size_t ol = offsetof(BlockQ6_K, ql) + 64 * n + 32 * (k % 2);
        const size_t oh = offsetof(BlockQ6_K, qh) + 32 * n;
        const __m512i x = pair256(lo + ol, hi + ol);
        const __m512i h = pair256(lo + oh, hi + oh);
        const __m512i l4 =
            _mm512_and_si512(k >= 2 ? _mm512_srli_epi16(x, 4) : x, _mm512_set1_epi8(0x0f));
        // Bits 2k, 2k+1 of each byte to bits 4, 5.
        __m512i h2;
        switch (k) {
            case 0:
                h2 = _mm512_slli_epi16(h, 4);
                break;
            case 1:
                h2 = _mm512_slli_epi16(h, 2);
                break;
            case 2:
                h2 = h;
                break;
            default:
                h2 = _mm512_srli_epi16(h, 2);
                break;
        }
        return _mm512_or_si512(l4, _mm512_and_si512(h2, _mm512_set1_epi8(0x30)));
    }
};

struct KScalesA {  // IQ4_XS, IQ3_S: x = d_s * q per group s
    __m512 d[8];
};

struct KIQ4XS {
    using Block = BlockIQ4_XS;
    static constexpr Family kFamily = Family::A;
    static constexpr int kOff = 128;
    using Scales = KScalesA;
    // As TIQ4_XS::params for 16 rows at once.
    static void scales(const PanelRows& pr, const uint8_t* blk, Scales* s) {
        const __m512i dh = pr.gather(blk, 0);  // d, scales_h
        const __m512i sl = pr.gather(blk, offsetof(BlockIQ4_XS, scales_l));
        const __m512 d = half_lanes<false>(dh);
        for (int i = 0; i < 8; ++i) {
            const __m512i low =
                _mm512_and_si512(_mm512_srli_epi32(sl, 4 * i), _mm512_set1_epi32(15));
            const __m512i high =
                _mm512_and_si512(_mm512_srli_epi32(dh, 16 + 2 * i), _mm512_set1_epi32(3));
            const __m512i ls = _mm512_or_si512(low, _mm512_slli_epi32(high, 4));
            s->d[i] =
                _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_sub_epi32(ls, _mm512_set1_epi32(32))));
        }
    }
    // Group s: 16 nibble bytes per row (low nibbles elements 0-15, high ones 16-31) through the
    // IQ4_NL codebook shifted by +128.
    static __m512i unpack(const uint8_t* lo, const uint8_t* hi, int s) {
        const size_t o = offsetof(BlockIQ4_XS, qs) + 16 * s;
        const __m256i a =
            _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(lo + o)));
        const __m256i b =
            _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(hi + o)));
        __m512i x = _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1);
        // 128-bit lanes 1 and 3 (16-bit lanes 8-15, 24-31) take the high nibbles.
        x = _mm512_mask_srli_epi16(x, 0xff00ff00u, x, 4);
        const __m512i table = _mm512_broadcast_i32x4(_mm_setr_epi8(
            1, 24, 45, 63, 79, 93, 106, 118, static_cast<int8_t>(129), static_cast<int8_t>(141),
            static_cast<int8_t>(153), static_cast<int8_t>(166), static_cast<int8_t>(181),
            static_cast<int8_t>(197), static_cast<int8_t>(217), static_cast<int8_t>(241)));
        return _mm512_shuffle_epi8(table, _mm512_and_si512(x, _mm512_set1_epi8(0x0f)));
    }
};

struct KIQ3S {
    using Block = BlockIQ3_S;
    static constexpr Family kFamily = Family::A;
    static constexpr int kOff = 16;
    using Scales = KScalesA;
    // As TIQ3_S::params for 16 rows at once.
    static void scales(const PanelRows& pr, const uint8_t* blk, Scales* s) {
        const __m512 d = half_lanes<false>(pr.gather(blk, 0));
        // scales[0..3] are the block's last dword.
        static_assert(offsetof(BlockIQ3_S, scales) + 4 == sizeof(BlockIQ3_S));
        const __m512i sc = pr.gather(blk, offsetof(BlockIQ3_S, scales));
        for (int i = 0; i < 8; ++i) {
            const __m512i nib =
                _mm512_and_si512(_mm512_srli_epi32(sc, 4 * i), _mm512_set1_epi32(15));
            const __m512i mult = _mm512_add_epi32(_mm512_slli_epi32(nib, 1), _mm512_set1_epi32(1));
            s->d[i] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(mult));
        }
    }
    // Group s of two rows: 16 grid indices (8 per row) gathered at once, then the signs.
    static __m512i unpack(const uint8_t* lo, const uint8_t* hi, int s) {
        const size_t oq = offsetof(BlockIQ3_S, qs) + 8 * s;
        const size_t oh = offsetof(BlockIQ3_S, qh) + s;
        const size_t os = offsetof(BlockIQ3_S, signs) + 4 * s;
        uint64_t qlo, qhi;
        std::memcpy(&qlo, lo + oq, 8);
        std::memcpy(&qhi, hi + oq, 8);
        __m512i idx = _mm512_cvtepu8_epi32(
            _mm_set_epi64x(static_cast<int64_t>(qhi), static_cast<int64_t>(qlo)));
        // Lane k (k < 8: row lo) takes bit k of qh_lo | qh_hi << 8 as index bit 8.
        const __m512i qh = _mm512_set1_epi32(lo[oh] | hi[oh] << 8);
        const __m512i bit = _mm512_and_si512(
            _mm512_srlv_epi32(
                qh, _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)),
            _mm512_set1_epi32(1));
        idx = _mm512_or_si512(idx, _mm512_slli_epi32(bit, 8));
        const __m512i g = _mm512_i32gather_epi32(idx, kIQ3SGrid, 4);
        const __mmask64 neg = static_cast<__mmask64>(load_u32(lo + os)) |
                              static_cast<__mmask64>(load_u32(hi + os)) << 32;
        const __m512i base = _mm512_set1_epi8(16);
        return _mm512_mask_sub_epi8(_mm512_add_epi8(base, g), neg, base, g);
    }
};

template <class K, int C>
void panel_k(const uint8_t* w, size_t stride, int rows, int64_t n_blocks, const Tokens<C>& tk,
             float* y, int64_t ldy, const uint8_t* next) {
    constexpr size_t B = sizeof(typename K::Block);
    const PanelRows pr(w, stride, rows);
    Prefetcher pf{reinterpret_cast<const char*>(next), stride, B / 8};
    __m512 tot[C];
    for (int t = 0; t < C; ++t) tot[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < n_blocks; ++b) {
        const size_t off = static_cast<size_t>(b) * B;
        typename K::Scales sc;
        K::scales(pr, w + off, &sc);
        // The eight groups unrolled at compile time: each unpack sees a constant group, so its
        // shifts are fixed and the loads groups share (Q6_K's high bits, for one) are made once.
        auto group = [&]<int s>(std::integral_constant<int, s>) {
            pf();
            __m512i u[8];
            for (int i = 0; i < 8; ++i)
                u[i] = K::unpack(pr.row[lo_row(i)] + off, pr.row[hi_row(i)] + off, s);
            __m512 sd;  // the group's d (Q4_K, Q5_K, IQ4_XS, IQ3_S) or the super-block's (Q6_K)
            if constexpr (K::kFamily == Family::A || K::kFamily == Family::B) {
                sd = sc.d[s];
            } else {
                sd = sc.d;
            }
            // The group's exact integer sum(s) of token t -> its float multiply-adds.
            auto finish = [&](int t, __m512i h0, __m512i h1) {
                const BlockQ8_32& a = tk.act[t][8 * b + s];
                const __m512 da = _mm512_set1_ps(a.d);
                if constexpr (K::kFamily == Family::A) {
                    // i = sum u * qa - kOff * (s0 + s1); acc = fma(i, d * da, acc).
                    const __m512i isum = _mm512_add_epi32(
                        _mm512_add_epi32(h0, h1), _mm512_set1_epi32(-K::kOff * (a.s[0] + a.s[1])));
                    tot[t] =
                        _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(sd, da), tot[t]);
                } else if constexpr (K::kFamily == Family::B) {
                    // i = sum u * qa; acc = fma(i, d * da, acc); acc = fma(m, (s0 + s1) * da, acc).
                    tot[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(h0, h1)),
                                             _mm512_mul_ps(sd, da), tot[t]);
                    const float sa = static_cast<float>(a.s[0] + a.s[1]) * a.d;
                    tot[t] = _mm512_fmadd_ps(sc.m[s], _mm512_set1_ps(sa), tot[t]);
                } else {
                    // i_h = sum_h u * qa - kOff * s_h; I = sc0 i_0 + sc1 i_1 (exact).
                    h0 = _mm512_add_epi32(h0, _mm512_set1_epi32(-K::kOff * a.s[0]));
                    h1 = _mm512_add_epi32(h1, _mm512_set1_epi32(-K::kOff * a.s[1]));
                    const __m512i isum = _mm512_add_epi32(_mm512_mullo_epi32(h0, sc.sc0[s]),
                                                          _mm512_mullo_epi32(h1, sc.sc1[s]));
                    tot[t] =
                        _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(sd, da), tot[t]);
                }
            };
            if constexpr (C == 1) {
                const BlockQ8_32& a = tk.act[0][8 * b + s];
                const __m512i av = _mm512_broadcast_i64x4(
                    _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.qs)));
                __m512i p[8];
                for (int i = 0; i < 8; ++i) {
                    p[i] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u[i], av);
                }
                if constexpr (K::kFamily != Family::C) {
                    finish(0, reduce_rows(p), _mm512_setzero_si512());
                } else {
                    __m512i h0, h1;
                    reduce_halves(p, &h0, &h1);
                    finish(0, h0, h1);
                }
            } else {
                __m512i v[8];
                transpose_rows(u, v);
                for (int t = 0; t < C; ++t) {
                    const int8_t* qs = tk.act[t][8 * b + s].qs;
                    // h0: elements 0-15 (dwords 0-3), h1: 16-31.
                    __m512i h0 = _mm512_setzero_si512(), h1 = _mm512_setzero_si512();
                    for (int k = 0; k < 4; ++k) {
                        h0 = _mm512_dpbusd_epi32(h0, v[k], act_dword(qs, k));
                        h1 = _mm512_dpbusd_epi32(h1, v[k + 4], act_dword(qs, k + 4));
                    }
                    finish(t, h0, h1);
                }
            }
        };
        [&]<int... S>(std::integer_sequence<int, S...>) {
            (group(std::integral_constant<int, S>{}), ...);
        }
        (std::make_integer_sequence<int, 8>{});
    }
    store_tokens<C>(tot, y, ldy, rows);
}

// ---- dispatch
// ------------------------------------------------------------------------------------

template <class T>
struct GemvKernel;  // which panel function serves type T
template <>
struct GemvKernel<TQ8_0> {
    template <int C>
    static constexpr auto fn = &panel_a<TQ8_0, C>;
    static constexpr int kGroupsPerUnit = 1;
};
// Every type with a NibbleLayout: Q4_0, IQ4_NL, Q4_1, Q5_0, Q5_1.
template <class T>
requires requires {
    NibbleLayout<T>::kQs;
}
struct GemvKernel<T> {
    template <int C>
    static constexpr auto fn = &panel_nib<T, C>;
    static constexpr int kGroupsPerUnit = 1;
};
template <>
struct GemvKernel<TQ4_K> {
    template <int C>
    static constexpr auto fn = &panel_k<KQ4, C>;
    static constexpr int kGroupsPerUnit = 8;
};
template <>
struct GemvKernel<TQ5_K> {
    template <int C>
    static constexpr auto fn = &panel_k<KQ5, C>;
    static constexpr int kGroupsPerUnit = 8;
};
template <>
struct GemvKernel<TQ6_K> {
    template <int C>
    static constexpr auto fn = &panel_k<KQ6, C>;
    static constexpr int kGroupsPerUnit = 8;
};

template <>
struct GemvKernel<TIQ4_XS> {
    template <int C>
    static constexpr auto fn = &panel_k<KIQ4XS, C>;
    static constexpr int kGroupsPerUnit = 8;
};
template <>
struct GemvKernel<TIQ3_S> {
    template <int C>
    static constexpr auto fn = &panel_k<KIQ3S, C>;
    static constexpr int kGroupsPerUnit = 8;
};

template <class T>
concept HasGemv = requires {
    GemvKernel<T>::kGroupsPerUnit;
};

static_assert(HasGemv<TQ8_0> && HasGemv<TQ4_0> && HasGemv<TIQ4_NL> && HasGemv<TQ4_1> &&
              HasGemv<TQ5_0> && HasGemv<TQ5_1> && HasGemv<TQ4_K> && HasGemv<TQ5_K> &&
              HasGemv<TQ6_K> && HasGemv<TIQ4_XS> && HasGemv<TIQ3_S> && HasGemv<TMXFP4>);

template <class T, int C>
void gemv_c(const GemmArgs& g) {
    using K = GemvKernel<T>;
    const int64_t units = g.cols / (32 * K::kGroupsPerUnit);  // blocks
    const Tokens<C, ActBlock<T>> tk(g.act, g.act_stride);
    for (int64_t r0 = 0; r0 < g.rows; r0 += 16) {
        const int rows = static_cast<int>(g.rows - r0 < 16 ? g.rows - r0 : 16);
        const uint8_t* w = g.w + static_cast<size_t>(r0) * g.w_stride;
        const uint8_t* next = r0 + 16 < g.rows ? w + 16 * g.w_stride : g.w_after;
        K::template fn<C>(w, g.w_stride, rows, units, tk, g.y + r0, g.ldy, next);
    }
}

template <class T, int... Cs>
void gemv_dispatch(const GemmArgs& g, std::integer_sequence<int, Cs...>) {
    using Fn = void (*)(const GemmArgs&);
    static constexpr Fn kFns[] = {&gemv_c<T, Cs + 1>...};
    kFns[g.n_tokens - 1](g);
}

// 1 <= g.n_tokens <= kGemvTokens.
template <class T>
void gemv(const GemmArgs& g) {
    gemv_dispatch<T>(g, std::make_integer_sequence<int, kGemvTokens>{});
}

}  // namespace gemv512
}  // namespace ember::EMBER_SIMD_NS
