// AVX-512 panel repacking per type (see simd_gemm.h for the panel layout).
//
// The generic repack decodes each row into 32 bytes and then transposes 16 rows; here the
// *packed* bytes of 16 rows are transposed first (a 4-bit type moves half the bytes) and the
// bits are then decoded for all 16 rows at once, one vector per 4 columns. The per-row numbers
// (fp16 scales, packed 6-bit scales) are gathered, 16 rows per vector, and decoded with vector
// ops. Results are bit-identical to the generic path: same bytes, same exact products.
//
// Included only by quants_avx512.cpp.
#pragma once

#ifndef EMBER_SIMD_NS
#error "repack_avx512.h belongs to quants_avx512.cpp"
#endif

#include <immintrin.h>

#include <cstdint>

#include "engine/tensor/blocks.h"
#include "engine/tensor/gemv_avx512.h"  // quad128, transpose_quads
#include "engine/tensor/simd_unpack.h"

namespace ember::EMBER_SIMD_NS {
namespace repack512 {

constexpr int kW = 16;

// The 16 rows of a panel; rows past `rows` repeat the last one (their lanes are never stored).
// `next` is the first row of the panel repacked after this one (nullptr: none): while a block
// of this panel is decoded the same block of the next panel is prefetched, so its rows - 16
// short streams the hardware prefetcher picks up late, and gathers that stall on misses -
// arrive from memory one panel ahead.
struct PanelRows {
    const uint8_t* row[kW];
    const uint8_t* base;
    const uint8_t* next;
    size_t stride;
    __m512i offs;  // [16] byte offset of each row from base, for gathers

    PanelRows(const uint8_t* w, size_t row_stride, int rows, const uint8_t* next_panel)
        : base(w), next(next_panel), stride(row_stride) {
        alignas(64) int32_t o[kW];
        for (int r = 0; r < kW; ++r) {
            const int rr = r < rows ? r : rows - 1;
            o[r] = static_cast<int32_t>(static_cast<size_t>(rr) * stride);
            row[r] = w + o[r];
        }
        offs = _mm512_load_si512(o);
    }
    // The 4 bytes at `off` of every row, one lane per row.
    __m512i gather(size_t off) const { return _mm512_i32gather_epi32(offs, base + off, 1); }
    // Bytes [off, off + len) of every row of the next panel.
    void prefetch_next(size_t off, size_t len) const {
        if (next == nullptr) return;
        for (int r = 0; r < kW; ++r) {
            const char* p = reinterpret_cast<const char*>(next + r * stride + off);
            // Into L2 only: L1 prefetches hold one of the few L1 miss buffers each, which caps
            // a core's memory parallelism (T1 was 1.6x faster for the K-quants on Zen 4 and
            // level with T0 on Sapphire Rapids).
            for (size_t o = 0; o < len; o += 64) _mm_prefetch(p + o, _MM_HINT_T1);
        }
    }
};

inline __m512i bytes(int v) {
    return _mm512_set1_epi8(static_cast<char>(v));
}

// Low / high 16 bits of each lane as fp16 -> float.
inline __m512 half_lo(__m512i v) {
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(v));
}
inline __m512 half_hi(__m512i v) {
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(v, 16)));
}

// Byte j of each lane, as an int32 (unsigned / sign-extended).
inline __m512i byte_u(__m512i v, int j) {
    return _mm512_and_si512(_mm512_srli_epi32(v, 8 * j), _mm512_set1_epi32(0xff));
}
inline __m512i byte_s(__m512i v, int j) {
    return _mm512_srai_epi32(_mm512_slli_epi32(v, 24 - 8 * j), 24);
}

// 32 bytes at row[r] + off of the 16 rows -> out[k] = bytes 4k..4k+3 of rows 0..15.
// An 8x8 dword transpose of rows 0-7 (low halves) and 8-15 (high halves) at once.
inline void transpose32(const PanelRows& pr, size_t off, __m512i out[8]) {
    __m512i z[8];
    for (int i = 0; i < 8; ++i) {
        const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pr.row[i] + off));
        const __m256i hi =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pr.row[i + 8] + off));
        z[i] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
    }
    __m512i t[8];
    for (int i = 0; i < 4; ++i) {
        t[2 * i] = _mm512_unpacklo_epi32(z[2 * i], z[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(z[2 * i], z[2 * i + 1]);
    }
    __m512i v[8];
    for (int h = 0; h < 2; ++h) {
        v[4 * h + 0] = _mm512_unpacklo_epi64(t[4 * h + 0], t[4 * h + 2]);
        v[4 * h + 1] = _mm512_unpackhi_epi64(t[4 * h + 0], t[4 * h + 2]);
        v[4 * h + 2] = _mm512_unpacklo_epi64(t[4 * h + 1], t[4 * h + 3]);
        v[4 * h + 3] = _mm512_unpackhi_epi64(t[4 * h + 1], t[4 * h + 3]);
    }
    const __m512i lo = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13);
    const __m512i hi = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
    for (int c = 0; c < 4; ++c) {
        out[c] = _mm512_permutex2var_epi64(v[c], lo, v[4 + c]);
        out[c + 4] = _mm512_permutex2var_epi64(v[c], hi, v[4 + c]);
    }
}

// 16 bytes at row[r] + off -> out[k] = bytes 4k..4k+3 of rows 0..15. Vector a holds rows
// a, a+4, a+8, a+12 in its 128-bit lanes, so a 4x4 transpose inside the lanes lands every row
// in its natural lane.
inline void transpose16(const PanelRows& pr, size_t off, __m512i out[4]) {
    __m512i z[4];
    for (int a = 0; a < 4; ++a) {
        z[a] = gemv512::quad128(pr.row[a] + off, pr.row[a + 4] + off, pr.row[a + 8] + off,
                                pr.row[a + 12] + off);
    }
    gemv512::transpose_quads(z, out);
}

// ---- panel writers ---------------------------------------------------------------------------

// One panel group: q[8] vectors then the parameter slots.
struct GroupOut {
    uint8_t* p;
    void q(int k, __m512i v) const { _mm512_store_si512(p + 64 * k, v); }
    void f(int slot, __m512 v) const { _mm512_store_ps(p + 512 + 64 * slot, v); }
    void i(int slot, __m512i v) const { _mm512_store_si512(p + 512 + 64 * slot, v); }
};

// Q4_0-style nibbles (byte j: element j low, j+16 high) of 16 rows -> u vectors 0..7.
inline void split_nibbles(const __m512i c[4], __m512i u[8]) {
    for (int k = 0; k < 4; ++k) {
        u[k] = _mm512_and_si512(c[k], bytes(0x0f));
        u[k + 4] = _mm512_and_si512(_mm512_srli_epi16(c[k], 4), bytes(0x0f));
    }
}

// Q5_0/Q5_1: bit e of each row's 32-bit qh as 0x10 in the byte of element e. u vectors 2b and
// 2b+1 hold elements 8b..8b+7, i.e. the two nibbles of qh byte b: replicate that byte into its
// dword, then test one bit per byte.
inline void q5_high(__m512i qh, int b, __m512i* even, __m512i* odd) {
    const int rep = b * 0x01010101;
    const __m512i spread = _mm512_shuffle_epi8(
        qh, _mm512_set4_epi32(0x0c0c0c0c + rep, 0x08080808 + rep, 0x04040404 + rep, rep));
    *even = _mm512_maskz_mov_epi8(_mm512_test_epi8_mask(spread, _mm512_set1_epi32(0x08040201)),
                                  bytes(0x10));
    *odd = _mm512_maskz_mov_epi8(
        _mm512_test_epi8_mask(spread, _mm512_set1_epi32(static_cast<int>(0x80402010))),
        bytes(0x10));
}

inline void repack_q8_0(const PanelRows& pr, int64_t n_groups, uint8_t* panel, size_t kG) {
    constexpr size_t B = sizeof(BlockQ8_0);
    for (int64_t g = 0; g < n_groups; ++g) {
        pr.prefetch_next(g * B, B);
        const GroupOut out{panel + g * kG};
        __m512i c[8];
        transpose32(pr, g * B + 2, c);
        for (int k = 0; k < 8; ++k) out.q(k, _mm512_xor_si512(c[k], bytes(0x80)));
        out.f(0, half_lo(pr.gather(g * B)));
    }
}

// Q4_0, IQ4_NL (with a codebook lookup) and Q4_1 (with the offset m).
template <class Block, bool kCodebook, bool kMin>
void repack_q4(const PanelRows& pr, int64_t n_groups, uint8_t* panel, size_t kG) {
    constexpr size_t B = sizeof(Block);
    constexpr size_t kQs = kMin ? 4 : 2;
    const __m512i table = _mm512_broadcast_i32x4(_mm_setr_epi8(
        1, 24, 45, 63, 79, 93, 106, 118, static_cast<char>(129), static_cast<char>(141),
        static_cast<char>(153), static_cast<char>(166), static_cast<char>(181),
        static_cast<char>(197), static_cast<char>(217), static_cast<char>(241)));
    for (int64_t g = 0; g < n_groups; ++g) {
        pr.prefetch_next(g * B, B);
        const GroupOut out{panel + g * kG};
        __m512i c[4], u[8];
        transpose16(pr, g * B + kQs, c);
        split_nibbles(c, u);
        for (int k = 0; k < 8; ++k) {
            out.q(k, kCodebook ? _mm512_shuffle_epi8(table, u[k]) : u[k]);
        }
        const __m512i dm = pr.gather(g * B);
        out.f(0, half_lo(dm));
        if constexpr (kMin) out.f(1, half_hi(dm));
    }
}

// Q5_0 (d, qh, qs) and Q5_1 (d, m, qh, qs).
template <class Block, bool kMin>
void repack_q5(const PanelRows& pr, int64_t n_groups, uint8_t* panel, size_t kG) {
    constexpr size_t B = sizeof(Block);
    constexpr size_t kQh = kMin ? 4 : 2;
    for (int64_t g = 0; g < n_groups; ++g) {
        pr.prefetch_next(g * B, B);
        const GroupOut out{panel + g * kG};
        __m512i c[4], u[8];
        transpose16(pr, g * B + kQh + 4, c);
        split_nibbles(c, u);
        const __m512i qh = pr.gather(g * B + kQh);
        for (int b = 0; b < 4; ++b) {
            __m512i even, odd;
            q5_high(qh, b, &even, &odd);
            out.q(2 * b, _mm512_or_si512(u[2 * b], even));
            out.q(2 * b + 1, _mm512_or_si512(u[2 * b + 1], odd));
        }
        const __m512i dm = pr.gather(g * B);
        out.f(0, half_lo(dm));
        if constexpr (kMin) out.f(1, half_hi(dm));
    }
}

// Q4_K/Q5_K: d, dmin and the 8 (scale, min) pairs of 6 bits of 16 rows.
template <class Src>
inline void q4k_params(const Src& pr, size_t off, uint8_t* panel, size_t kG) {
    // The 16 bytes d, dmin, scales[12] of every row, one dword per vector.
    __m512i v[4];
    transpose16(pr, off, v);
    __m512 d_s[8], m_s[8];
    gemv512::q4k_scales(v, d_s, m_s);
    for (int i = 0; i < 8; ++i) {
        const GroupOut out{panel + i * kG};
        out.f(0, d_s[i]);
        out.f(1, m_s[i]);
    }
}

template <bool kFive, class Src>
void repack_q45k(const Src& pr, int64_t n_groups, uint8_t* panel, size_t kG) {
    constexpr size_t B = kFive ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K);
    constexpr size_t kQs = kFive ? 48 : 16;
    for (int64_t b = 0; b < n_groups / 8; ++b) {
        pr.prefetch_next(b * B, B);
        uint8_t* pb = panel + b * 8 * kG;
        q4k_params(pr, b * B, pb, kG);
        __m512i h[8];
        if constexpr (kFive) transpose32(pr, b * B + 16, h);
        for (int j = 0; j < 4; ++j) {
            __m512i c[8];
            transpose32(pr, b * B + kQs + 32 * j, c);
            for (int nib = 0; nib < 2; ++nib) {
                const int s = 2 * j + nib;
                const GroupOut out{pb + s * kG};
                for (int k = 0; k < 8; ++k) {
                    __m512i u =
                        _mm512_and_si512(nib ? _mm512_srli_epi16(c[k], 4) : c[k], bytes(0x0f));
                    if constexpr (kFive) {
                        // Bit s of each qh byte to bit 4 (16-bit shifts keep it inside its byte).
                        const __m512i hb =
                            s < 4 ? _mm512_slli_epi16(h[k], 4 - s) : _mm512_srli_epi16(h[k], s - 4);
                        u = _mm512_or_si512(u, _mm512_and_si512(hb, bytes(0x10)));
                    }
                    out.q(k, u);
                }
            }
        }
    }
}

// Q6_K's d of 16 rows: the high half of the dword at 206 of each block (it ends the block).
inline __m512 q6k_d(const PanelRows& pr, size_t block_off) {
    return half_hi(pr.gather(block_off + 206));
}

template <class Src>
void repack_q6k(const Src& pr, int64_t n_groups, uint8_t* panel, size_t kG) {
    constexpr size_t B = sizeof(BlockQ6_K);
    for (int64_t b = 0; b < n_groups / 8; ++b) {
        pr.prefetch_next(b * B, B);
        uint8_t* pb = panel + b * 8 * kG;
        // Scales: 16 signed bytes at 192; d: the high half of the dword at 206.
        __m512i sc[4];
        transpose16(pr, b * B + 192, sc);
        const __m512 d = q6k_d(pr, b * B);
        for (int s = 0; s < 8; ++s) {
            const GroupOut out{pb + s * kG};
            out.f(0, d);
            out.i(1, byte_s(sc[s / 2], (2 * s) % 4));
            out.i(2, byte_s(sc[s / 2], (2 * s) % 4 + 1));
        }
        for (int n = 0; n < 2; ++n) {
            __m512i hq[8];
            transpose32(pr, b * B + 128 + 32 * n, hq);
            for (int half = 0; half < 2; ++half) {  // ql[64n + 32 half]: groups k = half, half + 2
                __m512i c[8];
                transpose32(pr, b * B + 64 * n + 32 * half, c);
                for (int k = half; k < 4; k += 2) {
                    const GroupOut out{pb + (4 * n + k) * kG};
                    for (int v = 0; v < 8; ++v) {
                        const __m512i lo = _mm512_and_si512(
                            k >= 2 ? _mm512_srli_epi16(c[v], 4) : c[v], bytes(0x0f));
                        // Bits 2k, 2k+1 of qh to bits 4, 5.
                        const __m512i hs = k == 0   ? _mm512_slli_epi16(hq[v], 4)
                                           : k == 1 ? _mm512_slli_epi16(hq[v], 2)
                                           : k == 2 ? hq[v]
                                                    : _mm512_srli_epi16(hq[v], 2);
                        out.q(v, _mm512_or_si512(lo, _mm512_and_si512(hs, bytes(0x30))));
                    }
                }
            }
        }
    }
}

inline void repack_q3k(const PanelRows& pr, int64_t n_groups, uint8_t* panel, size_t kG) {
    constexpr size_t B = sizeof(BlockQ3_K);
    for (int64_t b = 0; b < n_groups / 8; ++b) {
        pr.prefetch_next(b * B, B);
        uint8_t* pb = panel + b * 8 * kG;
        // 16 6-bit scales in 12 bytes at 96 (dwords a0, a1, a2) and d at 108: the 16 bytes at 94
        // (which end with the block) hold them two bytes off the dword grid.
        __m512i t[4];
        transpose16(pr, b * B + 94, t);
        auto realign = [](__m512i lo, __m512i hi) {
            return _mm512_or_si512(_mm512_srli_epi32(lo, 16), _mm512_slli_epi32(hi, 16));
        };
        const __m512i a0 = realign(t[0], t[1]), a1 = realign(t[1], t[2]);
        const __m512i a2 = realign(t[2], t[3]);
        const __m512 d = half_hi(t[3]);
        const __m512i m4 = bytes(0x0f), m2 = bytes(0x03);
        // Byte i of q-th vector: scale 4q + i. Low 4 bits from a0/a1 (low or high nibble),
        // high 2 bits from a2 (bits 2q).
        __m512i sq[4];
        for (int q = 0; q < 4; ++q) {
            const __m512i src = q % 2 ? a1 : a0;
            const __m512i lo = _mm512_and_si512(q >= 2 ? _mm512_srli_epi32(src, 4) : src, m4);
            const __m512i hi = _mm512_and_si512(_mm512_srli_epi32(a2, 2 * q), m2);
            sq[q] = _mm512_or_si512(lo, _mm512_slli_epi32(hi, 4));
        }
        const __m512i bias = _mm512_set1_epi32(32);
        for (int s = 0; s < 8; ++s) {
            const GroupOut out{pb + s * kG};
            out.f(0, d);
            out.i(1, _mm512_sub_epi32(byte_u(sq[s / 2], (2 * s) % 4), bias));
            out.i(2, _mm512_sub_epi32(byte_u(sq[s / 2], (2 * s) % 4 + 1), bias));
        }
        __m512i hm[8];
        transpose32(pr, b * B, hm);
        for (int n = 0; n < 2; ++n) {
            __m512i c[8];
            transpose32(pr, b * B + 32 + 32 * n, c);
            for (int j = 0; j < 4; ++j) {
                const int s = 4 * n + j;
                const GroupOut out{pb + s * kG};
                for (int v = 0; v < 8; ++v) {
                    const __m512i lo = _mm512_and_si512(_mm512_srli_epi16(c[v], 2 * j), bytes(3));
                    // Bit s of hmask to bit 2.
                    const __m512i hs =
                        s < 2 ? _mm512_slli_epi16(hm[v], 2 - s) : _mm512_srli_epi16(hm[v], s - 2);
                    out.q(v, _mm512_or_si512(lo, _mm512_and_si512(hs, bytes(4))));
                }
            }
        }
    }
}

inline void repack_q2k(const PanelRows& pr, int64_t n_groups, uint8_t* panel, size_t kG) {
    constexpr size_t B = sizeof(BlockQ2_K);
    for (int64_t b = 0; b < n_groups / 8; ++b) {
        pr.prefetch_next(b * B, B);
        uint8_t* pb = panel + b * 8 * kG;
        __m512i sc[4];
        transpose16(pr, b * B, sc);  // scales[16]
        const __m512i dd = pr.gather(b * B + 80);
        const __m512 d = half_lo(dd);
        const __m512 neg_dmin = _mm512_xor_ps(half_hi(dd), _mm512_set1_ps(-0.0f));
        const __m512i m4 = _mm512_set1_epi32(0x0f);
        for (int s = 0; s < 8; ++s) {
            const GroupOut out{pb + s * kG};
            const __m512i b0 = byte_u(sc[s / 2], (2 * s) % 4);
            const __m512i b1 = byte_u(sc[s / 2], (2 * s) % 4 + 1);
            out.f(0, d);
            out.f(1, neg_dmin);
            out.i(2, _mm512_and_si512(b0, m4));
            out.i(3, _mm512_and_si512(b1, m4));
            out.i(4, _mm512_or_si512(_mm512_srli_epi32(b0, 4),
                                     _mm512_slli_epi32(_mm512_srli_epi32(b1, 4), 16)));
        }
        for (int n = 0; n < 2; ++n) {
            __m512i c[8];
            transpose32(pr, b * B + 16 + 32 * n, c);
            for (int j = 0; j < 4; ++j) {
                const GroupOut out{pb + (4 * n + j) * kG};
                for (int v = 0; v < 8; ++v) {
                    out.q(v, _mm512_and_si512(_mm512_srli_epi16(c[v], 2 * j), bytes(3)));
                }
            }
        }
    }
}

}  // namespace repack512
}  // namespace ember::EMBER_SIMD_NS
