// ISA-generic float kernels: float weights (F32, F16, BF16) and quantized weights against f32
// activations exactly as given (KernelTable::exact), for simd_gemm.h's tables.
//
// Float weights keep their own layout: 16 float lanes per (row, token), lane i accumulating the
// columns k = i (mod 16) by fma in column order, then the fixed tree of reduce16(). F16/BF16
// rows are widened to f32 (exact) once per tile when several tokens share them; quantized rows
// are decoded in registers (few tokens) or dequantized into a tile (many), to the same values.
//
// Include only through simd_gemm.h (an engine/tensor/*_avx2.cpp or *_avx512.cpp file with
// EMBER_SIMD_NS defined and the instruction-set policy `Isa` as quants_avx512.cpp describes).
#pragma once

#ifndef EMBER_SIMD_NS
#error "simd_gemm_float.h belongs to the *_avx2.cpp / *_avx512.cpp kernels; define EMBER_SIMD_NS"
#endif

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "engine/tensor/simd_unpack.h"
#include "engine/tensor/traits.h"

namespace ember::EMBER_SIMD_NS {

// ---- float weights -----------------------------------------------------------------------------

// Weight loaders: 16 consecutive weights as the Isa's 16-lane float vector.
struct WF32 {
    using Elem = float;
    template <class Isa>
    static typename Isa::V16 load(const Elem* p) {
        return Isa::load16_f32(p);
    }
};
struct WF16 {
    using Elem = uint16_t;
    template <class Isa>
    static typename Isa::V16 load(const Elem* p) {
        return Isa::load16_f16(p);
    }
};
struct WBF16 {
    using Elem = uint16_t;
    template <class Isa>
    static typename Isa::V16 load(const Elem* p) {
        return Isa::load16_bf16(p);
    }
};

struct FloatArgs {
    const uint8_t* w;  // R rows, w_stride bytes apart
    size_t w_stride;
    const float* x;  // C token rows, x_stride floats apart
    int64_t x_stride;
    int64_t cols;
    float* y;  // [C x ldy] at the first row
    int64_t ldy;
};

template <class Isa, class WT, int R, int C>
void fmicro(const FloatArgs& m) {
    using V = typename Isa::V16;
    using E = typename WT::Elem;
    const E* w[R];
    for (int r = 0; r < R; ++r) w[r] = reinterpret_cast<const E*>(m.w + r * m.w_stride);
    V acc[R][C];
    for (int r = 0; r < R; ++r) {
        for (int t = 0; t < C; ++t) acc[r][t] = Isa::zero16();
    }
    const int64_t main = m.cols & ~int64_t{15};
    for (int64_t k = 0; k < main; k += 16) {
        V wv[R];
        for (int r = 0; r < R; ++r) wv[r] = WT::template load<Isa>(w[r] + k);
        for (int t = 0; t < C; ++t) {
            const V xv = Isa::load16_f32(m.x + t * m.x_stride + k);
            for (int r = 0; r < R; ++r) acc[r][t] = Isa::fma16(wv[r], xv, acc[r][t]);
        }
    }
    if (const int64_t rem = m.cols - main; rem > 0) {
        // The tail through zero-padded copies: the padding lanes add 0 * 0.
        alignas(64) E wt[16] = {};
        alignas(64) float xt[16] = {};
        for (int r = 0; r < R; ++r) {
            std::memcpy(wt, w[r] + main, static_cast<size_t>(rem) * sizeof(E));
            const V wv = WT::template load<Isa>(wt);
            for (int t = 0; t < C; ++t) {
                std::memcpy(xt, m.x + t * m.x_stride + main,
                            static_cast<size_t>(rem) * sizeof(float));
                acc[r][t] = Isa::fma16(wv, Isa::load16_f32(xt), acc[r][t]);
            }
        }
    }
    for (int t = 0; t < C; ++t) {
        for (int r = 0; r < R; ++r) m.y[t * m.ldy + r] = Isa::reduce16(acc[r][t]);
    }
}

template <class Isa, class WT, int R, int... Cs>
void frun_tokens(FloatArgs m, int64_t n_tokens, std::integer_sequence<int, Cs...>) {
    using Fn = void (*)(const FloatArgs&);
    static constexpr Fn kFns[] = {&fmicro<Isa, WT, R, Cs + 1>...};
    constexpr int64_t kMax = sizeof...(Cs);
    for (int64_t t0 = 0; t0 < n_tokens; t0 += kMax) {
        const int64_t c = min_of(kMax, n_tokens - t0);
        FloatArgs mt = m;
        mt.x += t0 * m.x_stride;
        mt.y += t0 * m.ldy;
        kFns[c - 1](mt);
    }
}

// rows x all tokens from row-major weights of loader WT.
template <class Isa, class WT>
void frun_rows(FloatArgs m, int64_t rows, int64_t n_tokens) {
    constexpr int R = Isa::kFloatRows;
    constexpr int kTok = Isa::kFloatTokens;
    int64_t r = 0;
    for (; r + R <= rows; r += R) {
        FloatArgs mr = m;
        mr.w += r * m.w_stride;
        mr.y += r;
        frun_tokens<Isa, WT, R>(mr, n_tokens, std::make_integer_sequence<int, kTok>{});
    }
    for (; r < rows; ++r) {
        FloatArgs mr = m;
        mr.w += r * m.w_stride;
        mr.y += r;
        frun_tokens<Isa, WT, 1>(mr, n_tokens, std::make_integer_sequence<int, kTok>{});
    }
}

// rows x all tokens with the loops the other way round from frun_rows: C tokens at a time, and
// every R-row group of the (L2-resident) rows passes over those tokens' activations while they
// sit in L1. frun_rows would stream every token's activations from L2 or L3 once per row group
// (1-3 MB a group for a 512-token prefill). The same fmicro calls on the same (row, token)
// pairs, so the results are bitwise those of frun_rows.
template <class Isa, class WT>
void frun_tiles(const FloatArgs& m, int64_t rows, int64_t n_tokens) {
    constexpr int R = Isa::kFloatRows;
    constexpr int C = Isa::kFloatTokens;
    using Fn = void (*)(const FloatArgs&);
    auto run_rows = [&](const FloatArgs& mt, Fn full, Fn single) {
        int64_t r = 0;
        for (; r + R <= rows; r += R) {
            FloatArgs mr = mt;
            mr.w += r * m.w_stride;
            mr.y += r;
            full(mr);
        }
        for (; r < rows; ++r) {
            FloatArgs mr = mt;
            mr.w += r * m.w_stride;
            mr.y += r;
            single(mr);
        }
    };
    int64_t t0 = 0;
    for (; t0 + C <= n_tokens; t0 += C) {
        FloatArgs mt = m;
        mt.x += t0 * m.x_stride;
        mt.y += t0 * m.ldy;
        run_rows(mt, &fmicro<Isa, WT, R, C>, &fmicro<Isa, WT, 1, C>);
    }
    if (t0 < n_tokens) {
        // The last few tokens: the row-major order over what is left.
        FloatArgs mt = m;
        mt.x += t0 * m.x_stride;
        mt.y += t0 * m.ldy;
        frun_rows<Isa, WT>(mt, rows, n_tokens - t0);
    }
}

// Half-precision rows widened through the same loaders (exact, like the reference).
template <class Isa, class WT>
void dequantize_f(const void* src, float* dst, int64_t n) {
    const auto* h = static_cast<const typename WT::Elem*>(src);  // [n]
    int64_t k = 0;
    for (; k + 16 <= n; k += 16) Isa::store16_f32(dst + k, WT::template load<Isa>(h + k));
    if (k < n) {
        alignas(64) typename WT::Elem in[16] = {};
        alignas(64) float out[16];
        std::memcpy(in, h + k, static_cast<size_t>(n - k) * sizeof(in[0]));
        Isa::store16_f32(out, WT::template load<Isa>(in));
        std::memcpy(dst + k, out, static_cast<size_t>(n - k) * sizeof(float));
    }
}

// Rows widened to f32 per tile when several tokens share them.
constexpr int64_t kFloatTileRows = 16;

inline size_t gemm_scratch_f(int64_t cols) {
    return static_cast<size_t>(kFloatTileRows * cols) * sizeof(float);
}

template <class Isa, class WT>
void gemm_f(const GemmArgs& g) {
    FloatArgs m{g.w,
                g.w_stride,
                reinterpret_cast<const float*>(g.act),
                static_cast<int64_t>(g.act_stride / sizeof(float)),
                g.cols,
                g.y,
                g.ldy};
    constexpr bool kWiden = !std::is_same_v<WT, WF32>;
    if (!kWiden || g.n_tokens <= 2) {
        // F32 tiles are used in place; so is a half-precision row read by few tokens.
        for (int64_t r0 = 0; r0 < g.rows; r0 += kFloatTileRows) {
            FloatArgs mt = m;
            mt.w += r0 * g.w_stride;
            mt.y += r0;
            frun_tiles<Isa, WT>(mt, min_of(kFloatTileRows, g.rows - r0), g.n_tokens);
        }
        return;
    }
    auto* tile = reinterpret_cast<float*>(g.scratch);  // [kFloatTileRows x cols]
    for (int64_t r0 = 0; r0 < g.rows; r0 += kFloatTileRows) {
        const int64_t rows = min_of(kFloatTileRows, g.rows - r0);
        for (int64_t r = 0; r < rows; ++r) {
            const auto* src =
                reinterpret_cast<const typename WT::Elem*>(g.w + (r0 + r) * g.w_stride);
            float* dst = tile + r * g.cols;
            int64_t k = 0;
            for (; k + 16 <= g.cols; k += 16)
                Isa::store16_f32(dst + k, WT::template load<Isa>(src + k));
            if (k < g.cols) dequantize_f<Isa, WT>(src + k, dst + k, g.cols - k);
        }
        FloatArgs mt = m;
        mt.w = reinterpret_cast<const uint8_t*>(tile);
        mt.w_stride = static_cast<size_t>(g.cols) * sizeof(float);
        mt.y += r0;
        frun_tiles<Isa, WF32>(mt, rows, g.n_tokens);
    }
}

template <class Isa, class WT>
float dot_f(int64_t n, const void* w, const void* x) {
    float y = 0.0f;
    const FloatArgs m{static_cast<const uint8_t*>(w), 0, static_cast<const float*>(x), 0, n, &y, 0};
    fmicro<Isa, WT, 1, 1>(m);
    return y;
}

// ---- quantized weights against f32 activations (KernelTable::exact) --------------------------
//
// Every (row, token) accumulates as the float kernels do (lane i: the columns k = i mod 16 by fma
// in column order, then reduce16), with the weights exactly as dequantize_row<T> writes them. So
// the fused path (weights decoded in registers, few tokens) and the tiled path (rows dequantized
// into scratch once, many tokens) agree bit for bit, as batches and single tokens must.

// Group s's 32 weights as two 16-lane vectors, the same arithmetic as dequantize_row<T>.
template <class Isa, class T>
inline void group_weights(__m256i u, const GroupParams& p, typename Isa::V16 out[2]) {
    for (int h = 0; h < 2; ++h) {
        const __m128i bytes = h == 0 ? _mm256_castsi256_si128(u) : _mm256_extracti128_si256(u, 1);
        const typename Isa::V16 q = Isa::bytes16_to_float(bytes, T::kOff);
        if constexpr (T::kFamily == Family::A) {
            out[h] = Isa::mul16(Isa::set16(p.d), q);
        } else if constexpr (T::kFamily == Family::B) {
            out[h] = Isa::add16(Isa::mul16(Isa::set16(p.d), q), Isa::set16(p.m));
        } else {
            const int sc = h == 0 ? p.sc0 : p.sc1;
            out[h] = Isa::mul16(Isa::set16(p.d * static_cast<float>(sc)), q);
            if constexpr (T::kFamily == Family::D) {
                const int mn = h == 0 ? (p.mn & 0xffff) : (p.mn >> 16);
                out[h] = Isa::sub16(out[h], Isa::set16(-p.m * static_cast<float>(mn)));
            }
        }
    }
}

// Bytes ahead of the rows being read that qx_micro prefetches: the rows stream from memory, and
// on these VMs the hardware prefetchers alone left the fused kernel at ~3 GB/s.
constexpr size_t kExactPrefetchBytes = 8192;

// R rows (w_stride apart) times C tokens, weights decoded in registers. `ahead`: the bytes
// [ahead, ahead + R * w_stride) are read next (prefetched as these rows go; nullptr: none).
template <class Isa, class T, int R, int C>
void qx_micro(const uint8_t* w, size_t w_stride, const float* x, int64_t x_stride, int64_t cols,
              float* y, int64_t ldy, const uint8_t* ahead = nullptr) {
    using V = typename Isa::V16;
    using Block = typename T::Block;
    constexpr int64_t kElems = 32 * T::kGroups;
    V acc[R][C];
    for (int r = 0; r < R; ++r) {
        for (int t = 0; t < C; ++t) acc[r][t] = Isa::zero16();
    }
    for (int64_t b = 0; b < cols / kElems; ++b) {
        if (ahead != nullptr) {
            // This block step's share of the next bytes: R blocks' worth per step.
            const uint8_t* pf = ahead + static_cast<size_t>(b) * R * sizeof(Block);
            for (size_t line = 0; line < R * sizeof(Block); line += 64) {
                _mm_prefetch(reinterpret_cast<const char*>(pf + line), _MM_HINT_T0);
            }
        }
        GroupParams p[R][T::kGroups];
        const Block* blk[R];
        for (int r = 0; r < R; ++r) {
            blk[r] = reinterpret_cast<const Block*>(w + r * w_stride) + b;
            T::params(blk[r], p[r]);
        }
        for (int s = 0; s < T::kGroups; ++s) {
            const int64_t k = b * kElems + 32 * s;
            V wv[R][2];
            for (int r = 0; r < R; ++r) group_weights<Isa, T>(T::unpack(blk[r], s), p[r][s], wv[r]);
            for (int t = 0; t < C; ++t) {
                const V x0 = Isa::load16_f32(x + t * x_stride + k);
                const V x1 = Isa::load16_f32(x + t * x_stride + k + 16);
                for (int r = 0; r < R; ++r) {
                    acc[r][t] = Isa::fma16(wv[r][0], x0, acc[r][t]);
                    acc[r][t] = Isa::fma16(wv[r][1], x1, acc[r][t]);
                }
            }
        }
    }
    for (int t = 0; t < C; ++t) {
        for (int r = 0; r < R; ++r) y[t * ldy + r] = Isa::reduce16(acc[r][t]);
    }
}

// Tokens up to which the weights are decoded in registers, once for all of them (a decode step,
// a speculative verification); beyond, a tile of rows is dequantized once into scratch and every
// token reuses it (prefill).
constexpr int64_t kFusedExactTokens = 8;

// Every row of the share times C tokens, R rows per micro-kernel call.
template <class Isa, class T, int R, int C>
void qx_rows(const GemmArgs& g, const float* x, int64_t x_stride) {
    // Prefetch whole row groups this far ahead (within the share, then the next share's rows).
    const int64_t groups_ahead = std::max<int64_t>(
        1, static_cast<int64_t>(kExactPrefetchBytes / std::max<size_t>(1, R * g.w_stride)));
    int64_t r = 0;
    for (; r + R <= g.rows; r += R) {
        const int64_t next = r + R * groups_ahead;
        const uint8_t* ahead = next + R <= g.rows ? g.w + next * g.w_stride
                               : g.w_after != nullptr
                                   ? g.w_after + (next - g.rows) * static_cast<int64_t>(g.w_stride)
                                   : nullptr;
        qx_micro<Isa, T, R, C>(g.w + r * g.w_stride, g.w_stride, x, x_stride, g.cols, g.y + r,
                               g.ldy, ahead);
    }
    for (; r < g.rows; ++r) {
        qx_micro<Isa, T, 1, C>(g.w + r * g.w_stride, g.w_stride, x, x_stride, g.cols, g.y + r,
                               g.ldy);
    }
}

// 1-2 tokens: two rows per call, so two rows' fma chains hide the fma latency; 3-8 tokens: one
// row per call, its decoded weights shared by every token's chain.
template <class Isa, class T, int... Cs>
void qx_fused(const GemmArgs& g, const float* x, int64_t x_stride,
              std::integer_sequence<int, Cs...>) {
    using Fn = void (*)(const GemmArgs&, const float*, int64_t);
    static constexpr Fn kFns[] = {
        (Cs + 1 <= 2 ? &qx_rows<Isa, T, 2, Cs + 1> : &qx_rows<Isa, T, 1, Cs + 1>)...};
    kFns[g.n_tokens - 1](g, x, x_stride);
}

template <class Isa, class T>
void gemm_qx(const GemmArgs& g) {
    const auto* x = reinterpret_cast<const float*>(g.act);  // [n_tokens x x_stride]
    const auto x_stride = static_cast<int64_t>(g.act_stride / sizeof(float));
    if (g.n_tokens <= kFusedExactTokens) {
        qx_fused<Isa, T>(g, x, x_stride, std::make_integer_sequence<int, kFusedExactTokens>{});
        return;
    }
    auto* tile = reinterpret_cast<float*>(g.scratch);  // [kFloatTileRows x cols]
    FloatArgs m{reinterpret_cast<const uint8_t*>(tile),
                static_cast<size_t>(g.cols) * sizeof(float),
                x,
                x_stride,
                g.cols,
                g.y,
                g.ldy};
    for (int64_t r0 = 0; r0 < g.rows; r0 += kFloatTileRows) {
        const int64_t rows = min_of(kFloatTileRows, g.rows - r0);
        for (int64_t r = 0; r < rows; ++r) {
            dequantize_row<T>(g.w + (r0 + r) * g.w_stride, tile + r * g.cols, g.cols);
        }
        FloatArgs mt = m;
        mt.y = g.y + r0;
        frun_tiles<Isa, WF32>(mt, rows, g.n_tokens);
    }
}

template <class Isa, class T>
float dot_qx(int64_t n, const void* w, const void* act_row) {
    float y = 0.0f;
    qx_micro<Isa, T, 1, 1>(static_cast<const uint8_t*>(w), 0, static_cast<const float*>(act_row), 0,
                           n, &y, 0);
    return y;
}

}  // namespace ember::EMBER_SIMD_NS
