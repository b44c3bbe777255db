// ISA-generic SIMD kernels: panel repacking and the rows x tokens micro-kernels of the quantized
// types, the float-weight kernels, single-row dots and activation quantization.
//
// Include only from an engine/tensor/*_avx2.cpp or *_avx512.cpp file, after defining
// EMBER_SIMD_NS and the instruction-set policy `Isa` (see quants_avx512.cpp for the members it
// must provide). Everything is instantiated once per instruction set.
//
// Quantized weights (see the canonical dot in simd_unpack.h) are repacked, a panel of Isa::kW
// rows at a time, so that one vector holds the same 4 elements of kW rows:
//   panel group g (32 columns): q[8][kW][4] bytes  (byte 4k+i of row r at q[k][r][i])
//                               then the family's numbers, kW of each:
//                               A: d   B: d, m   C: d, sc0, sc1   D: d, m, sc0, sc1, mn
// A 4-byte broadcast of one token's activations then multiplies kW rows in one vpdpbusd, and the
// int32 lanes are the rows: no horizontal sums, and each row's accumulation is the canonical
// per-group sequence whatever the number of tokens. Decode (one token) uses the same path in
// L1-sized chunks of K, prefetching the rows it repacks next (gemm_q_chunked): the repack costs
// less than the time the weights take to arrive from memory.
//
// Float weights, and quantized ones against f32 activations (Activations::Exact), are in
// simd_gemm_float.h.
#pragma once

#ifndef EMBER_SIMD_NS
#error "simd_gemm.h belongs to the *_avx2.cpp / *_avx512.cpp kernels; define EMBER_SIMD_NS"
#endif

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "engine/tensor/blocks.h"
#include "engine/tensor/simd_gemm_float.h"
#include "engine/tensor/simd_unpack.h"
#include "engine/tensor/traits.h"

namespace ember::EMBER_SIMD_NS {

// ---- panel layout ------------------------------------------------------------------------------

constexpr int params_of(Family f) {
    switch (f) {
        case Family::A:
            return 1;
        case Family::B:
            return 2;
        case Family::C:
            return 3;
        case Family::D:
            return 5;
    }
    return 0;
}

// Bytes of one 32-column group of a panel.
template <class Isa, Family F>
constexpr size_t kGroupBytes = static_cast<size_t>(32 * Isa::kW + 4 * Isa::kW * params_of(F));

// Stores group numbers of row r into the group's parameter arrays (slot order as documented).
template <class Isa, Family F>
inline void store_params(uint8_t* base, int r, const GroupParams& p) {
    constexpr size_t kSlot = 4 * Isa::kW;
    auto put_f = [&](int slot, float v) { std::memcpy(base + slot * kSlot + 4 * r, &v, 4); };
    auto put_i = [&](int slot, int32_t v) { std::memcpy(base + slot * kSlot + 4 * r, &v, 4); };
    put_f(0, p.d);
    if constexpr (F == Family::B) put_f(1, p.m);
    if constexpr (F == Family::C) {
        put_i(1, p.sc0);
        put_i(2, p.sc1);
    }
    if constexpr (F == Family::D) {
        put_f(1, p.m);
        put_i(2, p.sc0);
        put_i(3, p.sc1);
        put_i(4, p.mn);
    }
}

// Whether the panel holds q = u - 128 (signed) instead of u: without VNNI the u8 x s8 multiply
// (vpmaddubsw) saturates its int16 pair sums once u exceeds 128, so those types go through
// |q| and sign(a, q) instead. Same exact integers either way.
template <class Isa, class T>
constexpr bool kSignedPanel = T::kWide && !Isa::kVnni;

// Repacks `rows` (<= kW; missing rows repeat the last one and are never stored) rows of
// n_groups groups each into a panel: decode each row's group to 32 bytes, then transpose.
template <class Isa, class T>
void repack_generic(const uint8_t* w, size_t stride, int rows, int64_t n_groups, uint8_t* panel,
                    const uint8_t* next) {
    using Block = typename T::Block;
    constexpr int W = Isa::kW;
    constexpr size_t kG = kGroupBytes<Isa, T::kFamily>;
    const Block* row[W];
    for (int r = 0; r < W; ++r) {
        row[r] =
            reinterpret_cast<const Block*>(w + static_cast<size_t>(min_of(r, rows - 1)) * stride);
    }
    const int64_t n_blocks = n_groups / T::kGroups;
    for (int64_t b = 0; b < n_blocks; ++b) {
        if (next != nullptr) {
            // The same block of the next panel's rows (see repack_avx512.h's PanelRows).
            for (int r = 0; r < W; ++r) {
                const char* p =
                    reinterpret_cast<const char*>(next + r * stride + b * sizeof(Block));
                for (size_t o = 0; o < sizeof(Block); o += 64) _mm_prefetch(p + o, _MM_HINT_T1);
            }
        }
        uint8_t* pb = panel + static_cast<size_t>(b) * T::kGroups * kG;  // this block's groups
        for (int r = 0; r < W; ++r) {
            GroupParams p[T::kGroups];
            T::params(row[r] + b, p);
            for (int s = 0; s < T::kGroups; ++s) {
                store_params<Isa, T::kFamily>(pb + s * kG + 32 * W, r, p[s]);
            }
        }
        for (int s = 0; s < T::kGroups; ++s) {
            __m256i u[W];
            for (int r = 0; r < W; ++r) {
                u[r] = T::unpack(row[r] + b, s);
                if constexpr (kSignedPanel<Isa, T>) {
                    u[r] = _mm256_xor_si256(u[r], _mm256_set1_epi8(static_cast<int8_t>(0x80)));
                }
            }
            Isa::transpose_store(u, pb + s * kG);
        }
    }
}

// An ISA may provide a faster type-specific repack (same bytes); the generic one otherwise.
// `next`: the first row of the panel repacked next (prefetched meanwhile), or nullptr.
template <class Isa, class T>
void repack_panel(const uint8_t* w, size_t stride, int rows, int64_t n_groups, uint8_t* panel,
                  const uint8_t* next) {
    if constexpr (requires { Isa::repack(T{}, w, stride, rows, n_groups, panel, next); }) {
        Isa::repack(T{}, w, stride, rows, n_groups, panel, next);
    } else {
        repack_generic<Isa, T>(w, stride, rows, n_groups, panel, next);
    }
}

// ---- quantized micro-kernel: P panels x C tokens ------------------------------------------------

struct MicroArgs {
    const uint8_t* panels;  // P panels, panel_bytes apart
    size_t panel_bytes;
    int64_t n_groups;    // 32-column groups per row
    const uint8_t* act;  // C Q8_32 rows, act_stride bytes apart
    size_t act_stride;
    float* y;  // [C x ldy] at the panels' first row
    int64_t ldy;
    int rows;  // valid rows over the P panels
    // Running totals when K is split into chunks ([P x C x kW], nullptr when it is not): the
    // first chunk starts from zero, the last one stores y, the others pass the totals on.
    float* carry = nullptr;
    bool first = true;
    bool last = true;
};

// Signed int16 pair (lo, hi) as the int32 vpmaddwd multiplies a broadcast s[0], s[1] with.
constexpr int32_t pair16(int lo, int hi) {
    return static_cast<int32_t>((static_cast<uint32_t>(hi) << 16) |
                                (static_cast<uint32_t>(lo) & 0xffffu));
}

// The micro-kernel for Q16_32 activations (kWideAct types: MXFP4, Wide<T>): every product pass
// once per byte plane, then the A16..D16 steps of simd_unpack.h per (row, token).
template <class Isa, class T, int P, int C>
void micro_wide(const MicroArgs& m) {
    using VI = typename Isa::VI;
    using VF = typename Isa::VF;
    constexpr int W = Isa::kW;
    constexpr Family F = T::kFamily;
    constexpr size_t kG = kGroupBytes<Isa, F>;
    static_assert(!kSignedPanel<Isa, T>, "byte planes need unsigned panels (VNNI)");
    constexpr bool kHalves = F == Family::C || F == Family::D;
    constexpr int kH = kHalves ? 2 : 1;  // int sums per plane and group
    constexpr size_t kSlot = 4 * W;

    const BlockQ16_32* act[C];
    for (int t = 0; t < C; ++t) {
        act[t] =
            reinterpret_cast<const BlockQ16_32*>(m.act + static_cast<size_t>(t) * m.act_stride);
    }
    VF tot[P][C];
    for (int p = 0; p < P; ++p) {
        for (int t = 0; t < C; ++t) {
            tot[p][t] = m.carry != nullptr && !m.first ? Isa::load_f(m.carry + (p * C + t) * W)
                                                       : Isa::zero_f();
        }
    }
    for (int64_t g = 0; g < m.n_groups; ++g) {
        const uint8_t* pg[P];  // this group of each panel
        for (int p = 0; p < P; ++p) {
            pg[p] = m.panels + p * m.panel_bytes + static_cast<size_t>(g) * kG;
        }
        VI lo[P][C][kH];  // sum u * lo per half
        VI hi[P][C][kH];  // sum u * hi per half
        for (int p = 0; p < P; ++p) {
            for (int t = 0; t < C; ++t) {
                for (int h = 0; h < kH; ++h) {
                    lo[p][t][h] = Isa::zero_i();
                    hi[p][t][h] = Isa::zero_i();
                }
            }
        }
#pragma GCC unroll 8
        for (int k = 0; k < 8; ++k) {
            const int h = kHalves ? k / 4 : 0;
            VI wv[P];
            for (int p = 0; p < P; ++p) wv[p] = Isa::load_i(pg[p] + k * 4 * W);
            for (int t = 0; t < C; ++t) {
                const VI alo = Isa::bcast_i32(act[t][g].lo + 4 * k);
                const VI ahi = Isa::bcast_i32(act[t][g].hi + 4 * k);
                for (int p = 0; p < P; ++p) {
                    lo[p][t][h] = Isa::dot4(lo[p][t][h], wv[p], alo);
                    hi[p][t][h] = Isa::dot4(hi[p][t][h], wv[p], ahi);
                }
            }
        }
        for (int p = 0; p < P; ++p) {
            const uint8_t* prm = pg[p] + 32 * W;  // the group's numbers
            const VF d = Isa::load_f(prm);
            for (int t = 0; t < C; ++t) {
                const BlockQ16_32& a = act[t][g];
                const VF dda = Isa::mul(d, Isa::set1_f(a.d));
                VI i[kH];
                for (int h = 0; h < kH; ++h) i[h] = Isa::add_i(lo[p][t][h], Isa::shl8(hi[p][t][h]));
                if constexpr (F == Family::A) {
                    i[0] = Isa::add_i(i[0], Isa::set1_i(-T::kOff * (a.sx[0] + a.sx[1])));
                    tot[p][t] = Isa::fma(Isa::cvt(i[0]), dda, tot[p][t]);
                } else if constexpr (F == Family::B) {
                    tot[p][t] = Isa::fma(Isa::cvt(i[0]), dda, tot[p][t]);
                    const float sa = static_cast<float>(a.sx[0] + a.sx[1]) * a.d;
                    tot[p][t] = Isa::fma(Isa::load_f(prm + kSlot), Isa::set1_f(sa), tot[p][t]);
                } else {
                    if constexpr (T::kOff != 0) {
                        for (int h = 0; h < 2; ++h) {
                            i[h] = Isa::add_i(i[h], Isa::set1_i(-T::kOff * a.sx[h]));
                        }
                    }
                    constexpr int sc_slot = F == Family::C ? 1 : 2;
                    const VF sc0 = Isa::cvt(Isa::load_i(prm + sc_slot * kSlot));
                    const VF sc1 = Isa::cvt(Isa::load_i(prm + (sc_slot + 1) * kSlot));
                    const VF f = Isa::fma(Isa::cvt(i[1]), sc1, Isa::mul(Isa::cvt(i[0]), sc0));
                    tot[p][t] = Isa::fma(f, dda, tot[p][t]);
                    if constexpr (F == Family::D) {
                        const VI mn = Isa::load_i(prm + 4 * kSlot);
                        const VF mins = Isa::fma(
                            Isa::cvt(Isa::hi16(mn)), Isa::set1_f(static_cast<float>(a.sx[1])),
                            Isa::mul(Isa::cvt(Isa::lo16(mn)),
                                     Isa::set1_f(static_cast<float>(a.sx[0]))));
                        tot[p][t] = Isa::fma(
                            mins, Isa::mul(Isa::load_f(prm + kSlot), Isa::set1_f(a.d)), tot[p][t]);
                    }
                }
            }
        }
    }
    if (m.carry != nullptr && !m.last) {
        for (int p = 0; p < P; ++p) {
            for (int t = 0; t < C; ++t) Isa::store_f(m.carry + (p * C + t) * W, tot[p][t]);
        }
        return;
    }
    for (int p = 0; p < P; ++p) {
        const int n = min_of(W, m.rows - p * W);
        if (n <= 0) continue;
        for (int t = 0; t < C; ++t) Isa::store_lanes(m.y + t * m.ldy + p * W, tot[p][t], n);
    }
}

template <class Isa, class T, int P, int C>
void micro_q8(const MicroArgs& m) {
    using VI = typename Isa::VI;
    using VF = typename Isa::VF;
    constexpr int W = Isa::kW;
    constexpr Family F = T::kFamily;
    constexpr size_t kG = kGroupBytes<Isa, F>;
    constexpr bool kSigned = kSignedPanel<Isa, T>;
    constexpr bool kHalves = F == Family::C || F == Family::D;  // two int sums per group
    static_assert(!kWideAct<T>, "Q16_32 activations go through micro_wide");
    constexpr int kAcc = kHalves ? 2 : 1;
    constexpr size_t kSlot = 4 * W;
    using Act = BlockQ8_32;

    const Act* act[C];
    for (int t = 0; t < C; ++t) {
        act[t] = reinterpret_cast<const Act*>(m.act + static_cast<size_t>(t) * m.act_stride);
    }
    VF tot[P][C];
    for (int p = 0; p < P; ++p) {
        for (int t = 0; t < C; ++t) {
            tot[p][t] = m.carry != nullptr && !m.first ? Isa::load_f(m.carry + (p * C + t) * W)
                                                       : Isa::zero_f();
        }
    }
    // Offset corrections: vpmaddwd of the broadcast (s0, s1) with these pairs gives
    // -kOff * (s0 + s1) (A), or -kOff * s0 / -kOff * s1 (C) in every lane.
    const VI off_both = Isa::set1_i(pair16(-T::kOff, -T::kOff));
    const VI off_lo = Isa::set1_i(pair16(-T::kOff, 0));
    const VI off_hi = Isa::set1_i(pair16(0, -T::kOff));

    for (int64_t g = 0; g < m.n_groups; ++g) {
        const uint8_t* pg[P];  // this group of each panel
        for (int p = 0; p < P; ++p) {
            pg[p] = m.panels + p * m.panel_bytes + static_cast<size_t>(g) * kG;
        }
        VI acc[P][C][kAcc];
        for (int t = 0; t < C; ++t) {
            const VI s = Isa::bcast_i32(act[t][g].s);
            for (int p = 0; p < P; ++p) {
                if constexpr (F == Family::A && !kSigned) {
                    acc[p][t][0] = Isa::madd16(s, off_both);
                } else if constexpr (F == Family::C) {
                    acc[p][t][0] = Isa::madd16(s, off_lo);
                    acc[p][t][1] = Isa::madd16(s, off_hi);
                } else {
                    for (int h = 0; h < kAcc; ++h) acc[p][t][h] = Isa::zero_i();
                }
            }
        }
#pragma GCC unroll 8
        for (int k = 0; k < 8; ++k) {
            const int h = kHalves ? k / 4 : 0;
            VI wv[P];
            VI wabs[P];
            for (int p = 0; p < P; ++p) {
                wv[p] = Isa::load_i(pg[p] + k * 4 * W);
                if constexpr (kSigned) wabs[p] = Isa::abs8(wv[p]);
            }
            for (int t = 0; t < C; ++t) {
                const VI a = Isa::bcast_i32(act[t][g].qs + 4 * k);
                for (int p = 0; p < P; ++p) {
                    if constexpr (kSigned) {
                        acc[p][t][h] = Isa::dot4_signed(acc[p][t][h], wabs[p], wv[p], a);
                    } else {
                        acc[p][t][h] = Isa::dot4(acc[p][t][h], wv[p], a);
                    }
                }
            }
        }
        for (int p = 0; p < P; ++p) {
            const uint8_t* prm = pg[p] + 32 * W;  // the group's numbers
            const VF d = Isa::load_f(prm);
            for (int t = 0; t < C; ++t) {
                const VF da = Isa::set1_f(act[t][g].d);
                VI isum = acc[p][t][0];
                if constexpr (kHalves) {
                    const int sc_slot = F == Family::C ? 1 : 2;
                    isum = Isa::add_i(
                        Isa::mullo(acc[p][t][0], Isa::load_i(prm + sc_slot * kSlot)),
                        Isa::mullo(acc[p][t][1], Isa::load_i(prm + (sc_slot + 1) * kSlot)));
                }
                tot[p][t] = Isa::fma(Isa::cvt(isum), Isa::mul(d, da), tot[p][t]);
                if constexpr (F == Family::B) {
                    const float sa =
                        static_cast<float>(act[t][g].s[0] + act[t][g].s[1]) * act[t][g].d;
                    tot[p][t] = Isa::fma(Isa::load_f(prm + kSlot), Isa::set1_f(sa), tot[p][t]);
                }
                if constexpr (F == Family::D) {
                    const VI mins =
                        Isa::madd16(Isa::load_i(prm + 4 * kSlot), Isa::bcast_i32(act[t][g].s));
                    tot[p][t] =
                        Isa::fma(Isa::cvt(mins), Isa::mul(Isa::load_f(prm + kSlot), da), tot[p][t]);
                }
            }
        }
    }
    if (m.carry != nullptr && !m.last) {
        for (int p = 0; p < P; ++p) {
            for (int t = 0; t < C; ++t) Isa::store_f(m.carry + (p * C + t) * W, tot[p][t]);
        }
        return;
    }
    for (int p = 0; p < P; ++p) {
        const int n = min_of(W, m.rows - p * W);
        if (n <= 0) continue;
        for (int t = 0; t < C; ++t) Isa::store_lanes(m.y + t * m.ldy + p * W, tot[p][t], n);
    }
}

// The micro-kernel of a type's own activation format.
template <class Isa, class T, int P, int C>
void micro(const MicroArgs& m) {
    if constexpr (kWideAct<T>) {
        micro_wide<Isa, T, P, C>(m);
    } else {
        micro_q8<Isa, T, P, C>(m);
    }
}

template <class Isa, class T, int P, int... Cs>
void run_tokens(MicroArgs m, int64_t n_tokens, std::integer_sequence<int, Cs...>) {
    using Fn = void (*)(const MicroArgs&);
    static constexpr Fn kFns[] = {&micro<Isa, T, P, Cs + 1>...};
    constexpr int64_t kMax = sizeof...(Cs);
    for (int64_t t0 = 0; t0 < n_tokens; t0 += kMax) {
        const int64_t c = min_of(kMax, n_tokens - t0);
        MicroArgs mt = m;
        mt.act += static_cast<size_t>(t0) * m.act_stride;
        mt.y += t0 * m.ldy;
        kFns[c - 1](mt);
    }
}

// Tokens per micro-tile: two int accumulators per (panel, token) - the halves of families C
// and D, or the byte planes of Q16_32 activations - take the smaller tile of C and D; four (byte
// planes of the halves) half of that.
template <class Isa, class T>
constexpr int kTileTokens = !kWideAct<T> ? Isa::template kTokens<T::kFamily>
                            : (T::kFamily == Family::C || T::kFamily == Family::D)
                                ? (Isa::template kTokens<Family::C> + 1) / 2
                                : Isa::template kTokens<Family::C>;

// Decode-sized calls (all tokens in one micro-tile) split K into chunks of this many groups: two
// panels of a chunk (~20 KB) stay in L1 between repacking and use. A multiple of 8 (K-quants).
constexpr int64_t kChunkGroups = 16;

template <class Isa, class T>
size_t gemm_scratch_q(int64_t cols) {
    const int64_t groups = cols / 32 > kChunkGroups ? cols / 32 : kChunkGroups;
    return 2 * static_cast<size_t>(groups) * kGroupBytes<Isa, T::kFamily>;
}

template <class Isa, class T, int P, int... Cs>
void run_micro(const MicroArgs& m, int64_t n_tokens, std::integer_sequence<int, Cs...>) {
    using Fn = void (*)(const MicroArgs&);
    static constexpr Fn kFns[] = {&micro<Isa, T, P, Cs + 1>...};
    kFns[n_tokens - 1](m);
}

// Few tokens: each panel pair goes over K in chunks, the totals carried in a small buffer. While a
// panel's chunk is repacked, the chunk repacked after it is prefetched into L2 (measured against
// no software prefetch, prefetching the next pair in address order, and two chunks ahead).
// A panel's chunk from a matrix in WeightLayout::Rows (kPanels16 false: the 16 rows at
// stride `stride`, block column g0 at block_off(g0) of each) or in Panels16 (the panel's first
// byte; block column g0 at W * block_off(g0)).
template <class Isa, class T, bool kPanels16>
void repack_any(const uint8_t* w, size_t stride, int rows, int64_t n_groups, uint8_t* panel,
                const uint8_t* next) {
    if constexpr (kPanels16) {
        Isa::repack_panels16(T{}, w, n_groups, panel, next);
    } else {
        repack_panel<Isa, T>(w, stride, rows, n_groups, panel, next);
    }
}

template <class Isa, class T, bool kPanels16 = false>
void gemm_q_chunked(const GemmArgs& g) {
    constexpr int W = Isa::kW;
    constexpr int kTok = kTileTokens<Isa, T>;
    constexpr size_t kG = kGroupBytes<Isa, T::kFamily>;
    const int64_t n_groups = g.cols / 32;
    const size_t panel_bytes = static_cast<size_t>(kChunkGroups) * kG;
    auto block_off = [](int64_t group) {
        return static_cast<size_t>(group / T::kGroups) * sizeof(typename T::Block) *
               (kPanels16 ? W : 1);
    };
    auto row_ptr = [&](int64_t r) { return g.w + static_cast<size_t>(r) * g.w_stride; };
    alignas(64) float carry[2 * kTok * W];
    for (int64_t r0 = 0; r0 < g.rows; r0 += 2 * W) {
        const int rows = static_cast<int>(min_of<int64_t>(2 * W, g.rows - r0));
        const int n_panels = rows > W ? 2 : 1;
        for (int64_t g0 = 0; g0 < n_groups; g0 += kChunkGroups) {
            const int64_t ng = min_of(kChunkGroups, n_groups - g0);
            for (int p = 0; p < n_panels; ++p) {
                // What is repacked after this: the other panel's chunk, the next chunk, or the
                // next pair's first chunk.
                const uint8_t* next = nullptr;
                if (p + 1 < n_panels) {
                    next = row_ptr(r0 + (p + 1) * W) + block_off(g0);
                } else if (g0 + ng < n_groups) {
                    next = row_ptr(r0) + block_off(g0 + ng);
                } else if (r0 + 2 * W < g.rows) {
                    next = row_ptr(r0 + 2 * W);
                }
                repack_any<Isa, T, kPanels16>(row_ptr(r0 + p * W) + block_off(g0), g.w_stride,
                                              min_of(W, rows - p * W), ng,
                                              g.scratch + p * panel_bytes, next);
            }
            MicroArgs m{g.scratch,    panel_bytes, ng,    g.act + g0 * sizeof(ActBlock<T>),
                        g.act_stride, g.y + r0,    g.ldy, rows};
            m.carry = carry;
            m.first = g0 == 0;
            m.last = g0 + ng == n_groups;
            if (n_panels == 2) {
                run_micro<Isa, T, 2>(m, g.n_tokens, std::make_integer_sequence<int, kTok>{});
            } else {
                run_micro<Isa, T, 1>(m, g.n_tokens, std::make_integer_sequence<int, kTok>{});
            }
        }
    }
}

// Two panels at a time: repack them, then every token passes over them while they are hot.
// kPanels16: g.w is in WeightLayout::Panels16 (g.rows a multiple of W, g.w at a panel).
template <class Isa, class T, bool kPanels16 = false>
void gemm_q(const GemmArgs& g) {
    constexpr int W = Isa::kW;
    constexpr int kTok = kTileTokens<Isa, T>;
    // An ISA may have a kernel for one token (decode) or a few that needs no panels; its
    // results are bitwise the panels' (the canonical order), so the choice is speed alone.
    // (Their Q8_32 kernels do not read the Q16_32 activations of a Wide<T>.)
    if constexpr (kWrappedWide<T>) {
    } else if constexpr (kPanels16) {
        if (g.n_tokens <= Isa::gemv_max_tokens()) {
            Isa::gemv_panels16(T{}, g);
            return;
        }
    } else if constexpr (requires { Isa::gemv(T{}, g); }) {
        if (g.n_tokens <= Isa::gemv_max_tokens()) {
            Isa::gemv(T{}, g);
            return;
        }
    }
    if (g.n_tokens <= kTok) {
        gemm_q_chunked<Isa, T, kPanels16>(g);
        return;
    }
    const int64_t n_groups = g.cols / 32;
    const size_t panel_bytes = static_cast<size_t>(n_groups) * kGroupBytes<Isa, T::kFamily>;
    for (int64_t r0 = 0; r0 < g.rows; r0 += 2 * W) {
        const int rows = static_cast<int>(min_of<int64_t>(2 * W, g.rows - r0));
        const int n_panels = rows > W ? 2 : 1;
        for (int p = 0; p < n_panels; ++p) {
            const int64_t next_row = r0 + (p + 1) * W;
            const uint8_t* next =
                next_row < g.rows ? g.w + static_cast<size_t>(next_row) * g.w_stride : nullptr;
            repack_any<Isa, T, kPanels16>(g.w + static_cast<size_t>(r0 + p * W) * g.w_stride,
                                          g.w_stride, min_of(W, rows - p * W), n_groups,
                                          g.scratch + p * panel_bytes, next);
        }
        const MicroArgs m{g.scratch,    panel_bytes, n_groups, g.act,
                          g.act_stride, g.y + r0,    g.ldy,    rows};
        if (n_panels == 2) {
            run_tokens<Isa, T, 2>(m, g.n_tokens, std::make_integer_sequence<int, kTok>{});
        } else {
            run_tokens<Isa, T, 1>(m, g.n_tokens, std::make_integer_sequence<int, kTok>{});
        }
    }
}

// ---- quantized single-row dot ------------------------------------------------------------------

inline int hsum8_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

// The same sums as the canonical order. Families B-D keep the group's 8 int32 lanes apart until
// the end (one row has no neighbours to fill the lanes with); family A reduces them per group.
template <class Isa, class T>
float dot_q(int64_t n, const void* w, const void* act_row) {
    using Block = typename T::Block;
    constexpr Family F = T::kFamily;
    const auto* blocks = static_cast<const Block*>(w);           // [n / (32 * kGroups)]
    const auto* act = static_cast<const ActBlock<T>*>(act_row);  // [n / 32]
    __m256 acc = _mm256_setzero_ps();
    float acc_min = 0.0f;   // min/offset terms of families B and D
    float acc_wide = 0.0f;  // Q16_32 activations: the kernels' one lane, in their order
    for (int64_t b = 0; b < n / (32 * T::kGroups); ++b) {
        GroupParams prm[T::kGroups];
        T::params(blocks + b, prm);
        for (int s = 0; s < T::kGroups; ++s) {
            const GroupParams& p = prm[s];
            const auto& a = act[b * T::kGroups + s];
            if constexpr (kWideAct<T>) {
                static_assert(!kSignedPanel<Isa, T>);
                // The A16..D16 steps: each half's exact plane sums, then the float steps.
                const __m256i u = T::unpack(blocks + b, s);
                const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.lo));
                const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.hi));
                const __m256i v =
                    _mm256_add_epi32(Isa::template dot32<false>(u, lo),
                                     _mm256_slli_epi32(Isa::template dot32<false>(u, hi), 8));
                // Lanes 0-3 hold the first 16 elements, lanes 4-7 the second.
                const int32_t i0 = hsum8_i32(_mm256_blend_epi32(v, _mm256_setzero_si256(), 0xf0));
                const int32_t i1 = hsum8_i32(_mm256_blend_epi32(v, _mm256_setzero_si256(), 0x0f));
                const float dda = p.d * a.d;
                if constexpr (F == Family::A) {
                    acc_wide = std::fma(static_cast<float>(i0 + i1 - T::kOff * (a.sx[0] + a.sx[1])),
                                        dda, acc_wide);
                } else if constexpr (F == Family::B) {
                    acc_wide = std::fma(static_cast<float>(i0 + i1), dda, acc_wide);
                    acc_wide = std::fma(p.m, static_cast<float>(a.sx[0] + a.sx[1]) * a.d, acc_wide);
                } else {
                    const float f0 = static_cast<float>(i0 - T::kOff * a.sx[0]);
                    const float f1 = static_cast<float>(i1 - T::kOff * a.sx[1]);
                    const float f =
                        std::fma(f1, static_cast<float>(p.sc1), f0 * static_cast<float>(p.sc0));
                    acc_wide = std::fma(f, dda, acc_wide);
                    if constexpr (F == Family::D) {
                        const float mins =
                            std::fma(static_cast<float>(p.mn >> 16), static_cast<float>(a.sx[1]),
                                     static_cast<float>(static_cast<int16_t>(p.mn & 0xffff)) *
                                         static_cast<float>(a.sx[0]));
                        acc_wide = std::fma(mins, p.m * a.d, acc_wide);
                    }
                }
            } else {
                const __m256i qa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.qs));
                __m256i v = Isa::template dot32<kSignedPanel<Isa, T>>(T::unpack(blocks + b, s), qa);
                if constexpr (F == Family::A) {
                    // The group's exact integer in lane 0 (the canonical order): a block of zero
                    // codes then adds exactly zero whatever kOff is (MXFP4's 0 is u = 16).
                    int32_t i = hsum8_i32(v);
                    if constexpr (!kSignedPanel<Isa, T>) i -= T::kOff * (a.s[0] + a.s[1]);
                    v = _mm256_setr_epi32(i, 0, 0, 0, 0, 0, 0, 0);
                } else if constexpr (F == Family::C || F == Family::D) {
                    // Lanes 0-3 hold the first 16 elements, lanes 4-7 the second.
                    v = _mm256_add_epi32(v, _mm256_setr_epi32(-T::kOff * a.s[0], 0, 0, 0,
                                                              -T::kOff * a.s[1], 0, 0, 0));
                    v = _mm256_mullo_epi32(v, _mm256_setr_epi32(p.sc0, p.sc0, p.sc0, p.sc0, p.sc1,
                                                                p.sc1, p.sc1, p.sc1));
                }
                acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(v), _mm256_set1_ps(p.d * a.d), acc);
                if constexpr (F == Family::B) {
                    acc_min += p.m * (static_cast<float>(a.s[0] + a.s[1]) * a.d);
                }
                if constexpr (F == Family::D) {
                    const int mins = (p.mn & 0xffff) * a.s[0] + (p.mn >> 16) * a.s[1];
                    acc_min += static_cast<float>(mins) * (p.m * a.d);
                }
            }
        }
    }
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    if constexpr (kWideAct<T>) return acc_wide;
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1))) + acc_min;
}

// ---- activation quantization (bit-exact with the scalar reference) ---------------------------

inline float hmax8(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
}

inline void quantize_act_q8_32(const float* x, void* dst, int64_t n) {
    auto* out = static_cast<BlockQ8_32*>(dst);  // [n / 32]
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t b = 0; b < n / 32; ++b) {
        __m256 v[4];
        // NaN lanes are skipped as std::max skips them in the reference (vmaxps returns its
        // second operand when either is NaN).
        __m256 amax = _mm256_setzero_ps();
        for (int i = 0; i < 4; ++i) {
            v[i] = _mm256_loadu_ps(x + 32 * b + 8 * i);
            amax = _mm256_max_ps(_mm256_andnot_ps(sign, v[i]), amax);
        }
        const float m = hmax8(amax);
        const float id = m > 0.0f ? 127.0f / m : 0.0f;
        __m256i q[4];
        for (int i = 0; i < 4; ++i) {
            const __m256 s = _mm256_mul_ps(v[i], _mm256_set1_ps(id));
            // Round to nearest even (the default MXCSR mode), clamp; NaN products give 0.
            __m256i r = _mm256_cvtps_epi32(s);
            r = _mm256_min_epi32(_mm256_max_epi32(r, _mm256_set1_epi32(-127)),
                                 _mm256_set1_epi32(127));
            q[i] = _mm256_andnot_si256(_mm256_castps_si256(_mm256_cmp_ps(s, s, _CMP_UNORD_Q)), r);
        }
        BlockQ8_32& o = out[b];
        o.d = m / 127.0f;
        o.s[0] = static_cast<int16_t>(hsum8_i32(_mm256_add_epi32(q[0], q[1])));
        o.s[1] = static_cast<int16_t>(hsum8_i32(_mm256_add_epi32(q[2], q[3])));
        // packs work per 128-bit lane: the result holds 4-element runs in the order
        // q0 q1 q2 q3 (low lane) q0 q1 q2 q3 (high lane); the permute restores element order.
        const __m256i p01 = _mm256_packs_epi32(q[0], q[1]);
        const __m256i p23 = _mm256_packs_epi32(q[2], q[3]);
        const __m256i bytes = _mm256_permutevar8x32_epi32(
            _mm256_packs_epi16(p01, p23), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(o.qs), bytes);
    }
}

// Q16_32: q = nearest(x * 32639 / amax) as in quantize_act_q8_32, split into hi = (q + 128) >> 8
// and lo = q - 256 * hi (bit-exact with the scalar quantize_act_q16_32).
inline void quantize_act_q16_32(const float* x, void* dst, int64_t n) {
    auto* out = static_cast<BlockQ16_32*>(dst);  // [n / 32]
    const __m256 sign = _mm256_set1_ps(-0.0f);
    constexpr auto kMax = static_cast<float>(kQ16Max);
    for (int64_t b = 0; b < n / 32; ++b) {
        __m256 v[4];
        __m256 amax = _mm256_setzero_ps();
        for (int i = 0; i < 4; ++i) {
            v[i] = _mm256_loadu_ps(x + 32 * b + 8 * i);
            amax = _mm256_max_ps(_mm256_andnot_ps(sign, v[i]), amax);
        }
        const float m = hmax8(amax);
        const float id = m > 0.0f ? kMax / m : 0.0f;
        __m256i lo[4];
        __m256i hi[4];
        __m256i q[4];
        for (int i = 0; i < 4; ++i) {
            const __m256 s = _mm256_mul_ps(v[i], _mm256_set1_ps(id));
            __m256i r = _mm256_cvtps_epi32(s);
            r = _mm256_min_epi32(_mm256_max_epi32(r, _mm256_set1_epi32(-kQ16Max)),
                                 _mm256_set1_epi32(kQ16Max));
            q[i] = _mm256_andnot_si256(_mm256_castps_si256(_mm256_cmp_ps(s, s, _CMP_UNORD_Q)), r);
            hi[i] = _mm256_srai_epi32(_mm256_add_epi32(q[i], _mm256_set1_epi32(128)), 8);
            lo[i] = _mm256_sub_epi32(q[i], _mm256_slli_epi32(hi[i], 8));
        }
        BlockQ16_32& o = out[b];
        o.d = m / kMax;
        o.sx[0] = hsum8_i32(_mm256_add_epi32(q[0], q[1]));
        o.sx[1] = hsum8_i32(_mm256_add_epi32(q[2], q[3]));
        // As in quantize_act_q8_32: packs work per 128-bit lane, the permute restores the order.
        const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        const __m256i lo_bytes = _mm256_permutevar8x32_epi32(
            _mm256_packs_epi16(_mm256_packs_epi32(lo[0], lo[1]), _mm256_packs_epi32(lo[2], lo[3])),
            order);
        const __m256i hi_bytes = _mm256_permutevar8x32_epi32(
            _mm256_packs_epi16(_mm256_packs_epi32(hi[0], hi[1]), _mm256_packs_epi32(hi[2], hi[3])),
            order);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(o.lo), lo_bytes);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(o.hi), hi_bytes);
    }
}

// ---- table installation ----------------------------------------------------------------------

template <class Isa, class T>
void install_quant(TypeKernels& k) {
    k.act_format = kWideAct<T> ? ActFormat::Q16_32 : ActFormat::Q8_32;
    k.dequantize_row = dequantize_row<T>;
    k.dot = dot_q<Isa, T>;
    k.gemm = gemm_q<Isa, T>;
    k.gemm_scratch = gemm_scratch_q<Isa, T>;
}

template <class Isa, class T>
void install_quant_exact(TypeKernels& k) {
    k.act_format = ActFormat::F32;
    k.dequantize_row = dequantize_row<T>;
    k.dot = dot_qx<Isa, T>;
    k.gemm = gemm_qx<Isa, T>;
    k.gemm_scratch = gemm_scratch_f;
    k.gemm_panels16 = nullptr;
}

// A quantized type against Q16_32 activations (Activations::Wide): its panels and repacks with
// the byte-plane micro-kernel; no Panels16 layout (its one-token kernels read Q8_32 only).
template <class Isa, class T>
void install_quant_wide(TypeKernels& k) {
    k.act_format = ActFormat::Q16_32;
    k.dequantize_row = dequantize_row<T>;
    k.dot = dot_q<Isa, Wide<T>>;
    k.gemm = gemm_q<Isa, Wide<T>>;
    k.gemm_scratch = gemm_scratch_q<Isa, Wide<T>>;
    k.gemm_panels16 = nullptr;
}

template <class Isa, class WT>
void install_float(TypeKernels& k) {
    k.act_format = ActFormat::F32;
    if constexpr (!std::is_same_v<WT, WF32>) k.dequantize_row = dequantize_f<Isa, WT>;
    k.dot = dot_f<Isa, WT>;
    k.gemm = gemm_f<Isa, WT>;
    k.gemm_scratch = gemm_scratch_f;
}

// Both entries of a quantized type: its own activations and the exact ones.
// Every entry of a quantized type: its own activations, the exact ones and (with VNNI, where
// the byte planes cost two vpdpbusd; without it the scalar reference stays) the 16-bit ones.
template <class Isa, class T>
void install_quant_both(KernelTable& table, TensorType type) {
    install_quant<Isa, T>(table[type]);
    install_quant_exact<Isa, T>(table.exact_for(type));
    if constexpr (kWideAct<T>) {
        table.wide_for(type) = table[type];
    } else if constexpr (Isa::kVnni) {
        install_quant_wide<Isa, T>(table.wide_for(type));
    }
}
template <class Isa, class WT>
void install_float_both(KernelTable& table, TensorType type) {
    install_float<Isa, WT>(table[type]);
    table.exact_for(type) = table[type];
    table.wide_for(type) = table[type];
}

template <class Isa>
void install_all(KernelTable& table, const char* name) {
    table.isa = name;
    table.quantize_act[static_cast<size_t>(ActFormat::Q8_32)] = quantize_act_q8_32;
    table.quantize_act[static_cast<size_t>(ActFormat::Q16_32)] = quantize_act_q16_32;
    table.wide_simd = Isa::kVnni;
    install_float_both<Isa, WF32>(table, TensorType::F32);
    install_float_both<Isa, WF16>(table, TensorType::F16);
    install_float_both<Isa, WBF16>(table, TensorType::BF16);
    install_quant_both<Isa, TQ8_0>(table, TensorType::Q8_0);
    install_quant_both<Isa, TQ4_0>(table, TensorType::Q4_0);
    install_quant_both<Isa, TQ4_1>(table, TensorType::Q4_1);
    install_quant_both<Isa, TQ5_0>(table, TensorType::Q5_0);
    install_quant_both<Isa, TQ5_1>(table, TensorType::Q5_1);
    install_quant_both<Isa, TIQ4_NL>(table, TensorType::IQ4_NL);
    install_quant_both<Isa, TQ2_K>(table, TensorType::Q2_K);
    install_quant_both<Isa, TQ3_K>(table, TensorType::Q3_K);
    install_quant_both<Isa, TQ4_K>(table, TensorType::Q4_K);
    install_quant_both<Isa, TQ5_K>(table, TensorType::Q5_K);
    install_quant_both<Isa, TQ6_K>(table, TensorType::Q6_K);
    install_quant_both<Isa, TIQ4_XS>(table, TensorType::IQ4_XS);
    install_quant_both<Isa, TIQ3_S>(table, TensorType::IQ3_S);
    install_quant_both<Isa, TMXFP4>(table, TensorType::MXFP4);
}

}  // namespace ember::EMBER_SIMD_NS
