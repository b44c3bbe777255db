// AVX-512 kernels over WeightLayout::Panels16 (panels16.h): a block column of a panel holds
// dword j of the 16 rows' blocks as one 64-byte vector, which is exactly what the row-layout
// kernels build per group with gathers (the scales) and an 8x8 dword transpose (the quants).
// Here both are plain loads, so a one-token product does per 32-column group only the unpack,
// one vpdpbusd per dword and the group's float multiply-adds: on a 2-core Zen 4 the row-layout
// Q4_K decode kernel ran at ~20 GB/s per core with the weights in L2, below what DRAM delivers
// to two cores, so decode of a Q4_K_M file was compute-bound there.
//
// Each (row, group, token) is summed in the canonical order of simd_unpack.h (exact integer sum
// of the group, then the group's float multiply-adds, groups in column order), so the results
// are bitwise those of the row layout's gemv, panels and scalar dot.
//
// Included only by quants_avx512.cpp, after gemv_avx512.h and repack_avx512.h.
#pragma once

#ifndef EMBER_SIMD_NS
#error "panels16_avx512.h belongs to quants_avx512.cpp"
#endif

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "engine/tensor/blocks.h"
#include "engine/tensor/gemv_avx512.h"
#include "engine/tensor/repack_avx512.h"

namespace ember::EMBER_SIMD_NS {

namespace repack512 {

// A panel in Panels16 as the source of the type-specific repacks (the row layout's source is
// PanelRows): `off` is a row-relative byte offset b * B + o, with o a multiple of 4 inside
// block b's dwords.
template <size_t B>
struct X16Rows {
    const uint8_t* base;  // the panel's first byte
    const uint8_t* next;  // the next panel repacked, or nullptr

    static size_t at(size_t off) { return off / B * 16 * B + off % B / 4 * 64; }
    __m512i dword(size_t off) const { return _mm512_loadu_si512(base + at(off)); }
    // Block column off / B of the next panel (len: bytes of each row's block there).
    void prefetch_next(size_t off, size_t len) const {
        if (next == nullptr) return;
        const char* p = reinterpret_cast<const char*>(next + at(off));
        for (size_t o = 0; o < 16 * len; o += 64) _mm_prefetch(p + o, _MM_HINT_T1);
    }
};

template <size_t B>
inline void transpose32(const X16Rows<B>& src, size_t off, __m512i out[8]) {
    for (int k = 0; k < 8; ++k) out[k] = src.dword(off + 4 * k);
}
template <size_t B>
inline void transpose16(const X16Rows<B>& src, size_t off, __m512i out[4]) {
    for (int k = 0; k < 4; ++k) out[k] = src.dword(off + 4 * k);
}

// Q6_K's d: the block's last two bytes, the 16 rows' side by side after the dwords.
inline const uint8_t* q6k_tail(const uint8_t* column) {
    static_assert(sizeof(BlockQ6_K) % 4 == 2 && offsetof(BlockQ6_K, d) == sizeof(BlockQ6_K) - 2);
    return column + sizeof(BlockQ6_K) / 4 * 64;
}
inline __m512 q6k_d(const X16Rows<sizeof(BlockQ6_K)>& src, size_t block_off) {
    const uint8_t* column = src.base + block_off / sizeof(BlockQ6_K) * 16 * sizeof(BlockQ6_K);
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q6k_tail(column))));
}

}  // namespace repack512

namespace gemv512 {

// Prefetches the next panel's block column in `steps` equal parts, one per call.
struct ColumnPrefetcher {
    const char* next;  // the next panel's block column, or nullptr
    size_t bytes;      // of the block column
    int steps;
    int done = 0;
    // Block column b (`bytes` each) of the panel at next_panel (nullptr: none).
    ColumnPrefetcher(const uint8_t* next_panel, int64_t b, size_t column_bytes, int n_steps)
        : next(next_panel != nullptr ? reinterpret_cast<const char*>(next_panel) +
                                           static_cast<size_t>(b) * column_bytes
                                     : nullptr),
          bytes(column_bytes),
          steps(n_steps) {}
    void operator()() {
        if (next == nullptr) return;
        const size_t from = bytes * static_cast<size_t>(done) / static_cast<size_t>(steps);
        const size_t to = bytes * static_cast<size_t>(done + 1) / static_cast<size_t>(steps);
        for (size_t o = from / 64 * 64; o < to; o += 64) _mm_prefetch(next + o, _MM_HINT_T1);
        ++done;
    }
};

// One Q4_K panel (16 rows) x C tokens. Block column layout (dwords of the block): 0 d|dmin,
// 1-3 scales, 4 + 8j + k: qs bytes 32j + 4k .. +3 (group 2j in the low nibbles, 2j+1 high).
template <int C>
void panel16_q4k(const uint8_t* w, int64_t n_blocks, const Tokens<C>& tk, float* y, int64_t ldy,
                 const uint8_t* next) {
    constexpr size_t kColumn = 16 * sizeof(BlockQ4_K);
    __m512 tot[C];
    for (int t = 0; t < C; ++t) tot[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < n_blocks; ++b) {
        const uint8_t* col = w + static_cast<size_t>(b) * kColumn;
        ColumnPrefetcher pf(next, b, kColumn, 4);
        __m512i hdr[4];
        for (int i = 0; i < 4; ++i) hdr[i] = _mm512_loadu_si512(col + 64 * i);
        __m512 d_s[8], m_s[8];
        q4k_scales(hdr, d_s, m_s);
        for (int j = 0; j < 4; ++j) {
            pf();
            __m512i c[8];
            for (int k = 0; k < 8; ++k) c[k] = _mm512_loadu_si512(col + 64 * (4 + 8 * j + k));
            for (int nib = 0; nib < 2; ++nib) {
                const int s = 2 * j + nib;
                __m512i u[8];
                for (int k = 0; k < 8; ++k) {
                    u[k] = _mm512_and_si512(nib ? _mm512_srli_epi16(c[k], 4) : c[k],
                                            _mm512_set1_epi8(0x0f));
                }
                for (int t = 0; t < C; ++t) {
                    const BlockQ8_32& a = tk.act[t][8 * b + s];
                    __m512i h0 = _mm512_setzero_si512(), h1 = _mm512_setzero_si512();
                    for (int k = 0; k < 4; ++k) {
                        h0 = _mm512_dpbusd_epi32(h0, u[k], act_dword(a.qs, k));
                        h1 = _mm512_dpbusd_epi32(h1, u[k + 4], act_dword(a.qs, k + 4));
                    }
                    // As panel_k's family B: fma(i, d_s * da), then fma(m_s, (s0 + s1) * da).
                    tot[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(h0, h1)),
                                             _mm512_mul_ps(d_s[s], _mm512_set1_ps(a.d)), tot[t]);
                    const float sa = static_cast<float>(a.s[0] + a.s[1]) * a.d;
                    tot[t] = _mm512_fmadd_ps(m_s[s], _mm512_set1_ps(sa), tot[t]);
                }
            }
        }
    }
    store_tokens<C>(tot, y, ldy, 16);
}

// One Q6_K panel x C tokens. Block column (dwords): 16n + 8h + v: ql bytes 64n + 32h + 4v
// (groups 4n + h low nibbles, 4n + h + 2 high); 32 + 8n + v: qh bytes 32n + 4v (bits 2k, 2k+1
// of group 4n + k); 48-51: the 16 signed scales; then the 16 rows' d.
template <int C>
void panel16_q6k(const uint8_t* w, int64_t n_blocks, const Tokens<C>& tk, float* y, int64_t ldy,
                 const uint8_t* next) {
    constexpr size_t kColumn = 16 * sizeof(BlockQ6_K);
    __m512 tot[C];
    for (int t = 0; t < C; ++t) tot[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < n_blocks; ++b) {
        const uint8_t* col = w + static_cast<size_t>(b) * kColumn;
        ColumnPrefetcher pf(next, b, kColumn, 8);
        const __m512 d = _mm512_cvtph_ps(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(repack512::q6k_tail(col))));
        __m512i sc0[8], sc1[8];  // group s's two 16-element scales, sign-extended
        for (int q = 0; q < 4; ++q) {
            const __m512i sw = _mm512_loadu_si512(col + 64 * (48 + q));
            for (int e = 0; e < 2; ++e) {
                sc0[2 * q + e] = _mm512_srai_epi32(_mm512_slli_epi32(sw, 24 - 16 * e), 24);
                sc1[2 * q + e] = _mm512_srai_epi32(_mm512_slli_epi32(sw, 16 - 16 * e), 24);
            }
        }
        auto group = [&]<int s>(std::integral_constant<int, s>) {
            pf();
            constexpr int n = s / 4, k = s % 4;
            __m512i u[8];
            for (int v = 0; v < 8; ++v) {
                const __m512i ql = _mm512_loadu_si512(col + 64 * (16 * n + 8 * (k % 2) + v));
                const __m512i qh = _mm512_loadu_si512(col + 64 * (32 + 8 * n + v));
                const __m512i lo = _mm512_and_si512(k >= 2 ? _mm512_srli_epi16(ql, 4) : ql,
                                                    _mm512_set1_epi8(0x0f));
                // Bits 2k, 2k+1 of each qh byte to bits 4, 5.
                __m512i hs;
                if constexpr (k == 0) {
                    hs = _mm512_slli_epi16(qh, 4);
                } else if constexpr (k == 1) {
                    hs = _mm512_slli_epi16(qh, 2);
                } else if constexpr (k == 2) {
                    hs = qh;
                } else {
                    hs = _mm512_srli_epi16(qh, 2);
                }
                u[v] = _mm512_or_si512(lo, _mm512_and_si512(hs, _mm512_set1_epi8(0x30)));
            }
            for (int t = 0; t < C; ++t) {
                const BlockQ8_32& a = tk.act[t][8 * b + s];
                __m512i h0 = _mm512_set1_epi32(-32 * a.s[0]);
                __m512i h1 = _mm512_set1_epi32(-32 * a.s[1]);
                for (int v = 0; v < 4; ++v) {
                    h0 = _mm512_dpbusd_epi32(h0, u[v], act_dword(a.qs, v));
                    h1 = _mm512_dpbusd_epi32(h1, u[v + 4], act_dword(a.qs, v + 4));
                }
                // As panel_k's family C: I = sc0 (i0 - 32 s0) + sc1 (i1 - 32 s1), exact.
                const __m512i isum = _mm512_add_epi32(_mm512_mullo_epi32(h0, sc0[s]),
                                                      _mm512_mullo_epi32(h1, sc1[s]));
                tot[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum),
                                         _mm512_mul_ps(d, _mm512_set1_ps(a.d)), tot[t]);
            }
        };
        [&]<int... S>(std::integer_sequence<int, S...>) {
            (group(std::integral_constant<int, S>{}), ...);
        }
        (std::make_integer_sequence<int, 8>{});
    }
    store_tokens<C>(tot, y, ldy, 16);
}

template <class T>
struct Panel16Kernel;  // which Panels16 gemv serves type T
template <>
struct Panel16Kernel<TQ4_K> {
    template <int C>
    static constexpr auto fn = &panel16_q4k<C>;
};
template <>
struct Panel16Kernel<TQ6_K> {
    template <int C>
    static constexpr auto fn = &panel16_q6k<C>;
};
template <class T>
concept HasPanel16 = requires {
    Panel16Kernel<T>::template fn<1>;
};

template <class T, int C>
void gemv16_c(const GemmArgs& g) {
    const int64_t n_blocks = g.cols / 256;
    const Tokens<C> tk(g.act, g.act_stride);
    for (int64_t r0 = 0; r0 < g.rows; r0 += 16) {
        const uint8_t* w = g.w + static_cast<size_t>(r0) * g.w_stride;
        const uint8_t* next = r0 + 16 < g.rows ? w + 16 * g.w_stride : g.w_after;
        Panel16Kernel<T>::template fn<C>(w, n_blocks, tk, g.y + r0, g.ldy, next);
    }
}

template <class T, int... Cs>
void gemv16_dispatch(const GemmArgs& g, std::integer_sequence<int, Cs...>) {
    using Fn = void (*)(const GemmArgs&);
    static constexpr Fn kFns[] = {&gemv16_c<T, Cs + 1>...};
    kFns[g.n_tokens - 1](g);
}

// 1 <= g.n_tokens <= kGemvTokens; g.rows a multiple of 16, g.w at a panel's first row.
template <class T>
void gemv16(const GemmArgs& g) {
    gemv16_dispatch<T>(g, std::make_integer_sequence<int, kGemvTokens>{});
}

}  // namespace gemv512
}  // namespace ember::EMBER_SIMD_NS
