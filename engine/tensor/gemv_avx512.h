// AVX-512 decode matrix-vector product (one token) for the family-A types (Q8_0, Q4_0, Q5_0,
// IQ4_NL), straight from the weights' own layout.
//
// The panel path (simd_gemm.h) transposes 16 rows into panels so that int32 lanes are rows; for
// one token that transpose, its stores and reloads cost more than the weights take to arrive.
// Here the rows stay as they are: a zmm holds one group of two rows (256-bit halves), vpdpbusd
// leaves each row's group sum spread over 8 lanes, and a transpose-and-add tree over 8 such
// vectors brings the 16 rows' sums into the 16 lanes. From there on it is the canonical order of
// simd_unpack.h per row (exact integer sum, then fma(float(i), d * da, acc) group by group), so
// the results are bitwise those of the panel path and of the scalar reference.
//
// A 16-row panel is 16 consecutive rows, usually one contiguous stretch of memory: while one
// panel is computed the next one is prefetched front to back, one group's share per group.
//
// Included only by quants_avx512.cpp, after simd_unpack.h.
#pragma once

#ifndef EMBER_SIMD_NS
#error "gemv_avx512.h belongs to quants_avx512.cpp"
#endif

#include <immintrin.h>

#include <cstdint>

#include "engine/tensor/blocks.h"
#include "engine/tensor/simd_unpack.h"
#include "engine/tensor/traits.h"

namespace ember::EMBER_SIMD_NS {
namespace gemv512 {

// p[i] holds row lo(i) in its low 256 bits and row hi(i) in its high ones, each as 8 int32
// partial sums of one group. Rows are placed (i, i+4) for i < 4 and (i+4, i+8) after, so that
// the tree below ends with lane r = row r.
inline int lo_row(int i) {
    return i < 4 ? i : i + 4;
}
inline int hi_row(int i) {
    return lo_row(i) + 4;
}

// Lane r = sum of row r's 8 partial lanes.
inline __m512i reduce_rows(const __m512i p[8]) {
    __m512i t[4];
    for (int j = 0; j < 4; ++j) {  // per 128-bit lane: [2j, 2j+1, 2j, 2j+1] of each half
        t[j] = _mm512_add_epi32(_mm512_unpacklo_epi32(p[2 * j], p[2 * j + 1]),
                                _mm512_unpackhi_epi32(p[2 * j], p[2 * j + 1]));
    }
    __m512i u[2];
    for (int j = 0; j < 2; ++j) {  // per 128-bit lane: slots 4j..4j+3, half of the lanes each
        u[j] = _mm512_add_epi32(_mm512_unpacklo_epi64(t[2 * j], t[2 * j + 1]),
                                _mm512_unpackhi_epi64(t[2 * j], t[2 * j + 1]));
    }
    // u[j]'s 128-bit lanes: (lo rows, part 1) (lo rows, part 2) (hi rows, 1) (hi rows, 2).
    return _mm512_add_epi32(_mm512_shuffle_i32x4(u[0], u[1], _MM_SHUFFLE(2, 0, 2, 0)),
                            _mm512_shuffle_i32x4(u[0], u[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

// rows (<= 16) rows starting at w: y[0..rows) = W . act. `next`: the rows after these (nullptr:
// none), prefetched meanwhile.
template <class T>
void panel_a(const uint8_t* w, size_t stride, int rows, int64_t n_groups,
             const BlockQ8_32* act, float* y, const uint8_t* next) {
    using Block = typename T::Block;
    static_assert(T::kFamily == Family::A && T::kGroups == 1, "one scale per 32-element block");
    constexpr size_t B = sizeof(Block);
    const uint8_t* row[16];  // [16] rows past `rows` repeat the last one (never stored)
    alignas(64) int32_t offs[16];
    for (int r = 0; r < 16; ++r) {
        offs[r] = static_cast<int32_t>(static_cast<size_t>(r < rows ? r : rows - 1) * stride);
        row[r] = w + offs[r];
    }
    const __m512i voffs = _mm512_load_si512(offs);
    // The next panel, front to back: its bytes spread evenly over this panel's groups.
    const size_t pf_step = (16 * B + 63) / 64 * 64;
    const char* pf = reinterpret_cast<const char*>(next);
    __m512 tot = _mm512_setzero_ps();
    for (int64_t g = 0; g < n_groups; ++g) {
        if (pf != nullptr) {
            for (size_t o = 0; o < pf_step; o += 64) _mm_prefetch(pf + o, _MM_HINT_T0);
            pf += pf_step;
        }
        const size_t off = static_cast<size_t>(g) * B;
        const __m512i a = _mm512_broadcast_i64x4(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(act[g].qs)));
        __m512i p[8];
        for (int i = 0; i < 8; ++i) {
            const __m256i lo = T::unpack(reinterpret_cast<const Block*>(row[lo_row(i)] + off), 0);
            const __m256i hi = T::unpack(reinterpret_cast<const Block*>(row[hi_row(i)] + off), 0);
            p[i] = _mm512_dpbusd_epi32(_mm512_setzero_si512(),
                                       _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1), a);
        }
        // i = sum u * qa - kOff * (s0 + s1), exact.
        const __m512i isum = _mm512_add_epi32(
            reduce_rows(p), _mm512_set1_epi32(-T::kOff * (act[g].s[0] + act[g].s[1])));
        // Every family-A block starts with its fp16 scale.
        const __m512 d = _mm512_cvtph_ps(
            _mm512_cvtepi32_epi16(_mm512_i32gather_epi32(voffs, w + off, 1)));
        tot = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum),
                              _mm512_mul_ps(d, _mm512_set1_ps(act[g].d)), tot);
    }
    _mm512_mask_storeu_ps(y, static_cast<__mmask16>(rows >= 16 ? 0xffffu : (1u << rows) - 1u),
                          tot);
}

template <class T>
void gemv_a(const GemmArgs& g) {
    const int64_t n_groups = g.cols / 32;
    const auto* act = reinterpret_cast<const BlockQ8_32*>(g.act);  // [n_groups]
    for (int64_t r0 = 0; r0 < g.rows; r0 += 16) {
        const int rows = static_cast<int>(g.rows - r0 < 16 ? g.rows - r0 : 16);
        const uint8_t* w = g.w + static_cast<size_t>(r0) * g.w_stride;
        const uint8_t* next = r0 + 16 < g.rows ? w + 16 * g.w_stride : nullptr;
        panel_a<T>(w, g.w_stride, rows, n_groups, act, g.y + r0, next);
    }
}

}  // namespace gemv512
}  // namespace ember::EMBER_SIMD_NS
