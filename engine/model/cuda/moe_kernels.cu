// The mixture-of-experts kernels (moe_kernels.cuh). The weight formats' readers are those of
// quant_blocks.cuh; the dot products follow quant_kernels.cu's gemv layout (lanes over units,
// explicit fma in element order, a fixed butterfly), one token per product.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "engine/model/cuda/activations.cuh"
#include "engine/model/cuda/cuda_check.cuh"
#include "engine/model/cuda/launch.cuh"
#include "engine/model/cuda/moe_kernels.cuh"
#include "engine/model/cuda/quant_blocks.cuh"
#include "engine/model/model.h"

namespace ember::cuda {

namespace {

using namespace blocks;

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
// Dot products per warp of the expert products (the activations' loads serve them all): four
// rows of one matrix, or two rows each of a fused gate and up. With two (so twice the blocks,
// each loading half as much) the decode step's down product of gpt-oss-20b ran at 0.66 TB/s
// where the fused gate/up's four reached 1.1 (H200, Nsight Compute).
constexpr int kDotsPerWarp = 4;

// Chunk c of a unit (c a constant once the caller's loop is unrolled; the switch turns it into
// the template argument).
template <class F>
__device__ __forceinline__ void unit_chunk(const typename F::Unit& unit, int c, float (&w)[8]) {
    switch (c) {
        case 0:
            F::template chunk<0>(unit, w);
            break;
        case 1:
            F::template chunk<1 % F::kChunks>(unit, w);
            break;
        case 2:
            F::template chunk<2 % F::kChunks>(unit, w);
            break;
        default:
            F::template chunk<3 % F::kChunks>(unit, w);
            break;
    }
}

// acc[r] = row r · x for R rows of `cols` elements (x 16-byte aligned), every lane ending
// with the same bits. Lane l takes units l, l + 32, ... in that order (the loads of two of them
// issued together, so that a 90-unit row is read in two round trips rather than three); within
// a unit, per 8-element chunk a product chain of its own in element order, then one add: the
// order of every sum is fixed by cols alone.
template <class F, int R>
__device__ __forceinline__ void accumulate_unit(const typename F::Raw (&raw)[R], int u,
                                                const float* x, float (&acc)[R]) {
    const int k = u % F::kUnitsPerBlock;
    typename F::Unit unit[R];
#pragma unroll
    for (int r = 0; r < R; ++r) unit[r] = F::unpack(raw[r], k);
    const int64_t block_elem0 = static_cast<int64_t>(u / F::kUnitsPerBlock) * F::kBlockElems;
#pragma unroll
    for (int c = 0; c < F::kChunks; ++c) {
        const float* xc = x + block_elem0 + F::chunk_pos(k, c);
        const float4 lo = __ldg(reinterpret_cast<const float4*>(xc));
        const float4 hi = __ldg(reinterpret_cast<const float4*>(xc + 4));
        const float xv[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
        for (int r = 0; r < R; ++r) {
            float w[8];
            if constexpr (std::is_same_v<F, FmtMXFP4>) {
                // The codes unscaled and the block's power of two applied to the chunk's sum:
                // the same bits as scaling each weight first (scaling by a power of two commutes
                // with every rounding of the chain, short of subnormals), 7 multiplies fewer
                // per chunk, which the decode step's MXFP4 experts are bound by.
                const uint32_t lo = unit[r].q[4 * (c / 2) + 2 * (c % 2)];
                const uint32_t hi = unit[r].q[4 * (c / 2) + 2 * (c % 2) + 1];
                w[0] = byte_value<0, F::kBias>(lo);
                w[1] = byte_value<1, F::kBias>(lo);
                w[2] = byte_value<2, F::kBias>(lo);
                w[3] = byte_value<3, F::kBias>(lo);
                w[4] = byte_value<0, F::kBias>(hi);
                w[5] = byte_value<1, F::kBias>(hi);
                w[6] = byte_value<2, F::kBias>(hi);
                w[7] = byte_value<3, F::kBias>(hi);
            } else {
                unit_chunk<F>(unit[r], c, w);
            }
            float part = __fmul_rn(w[0], xv[0]);
#pragma unroll
            for (int i = 1; i < 8; ++i) part = __fmaf_rn(w[i], xv[i], part);
            if constexpr (std::is_same_v<F, FmtMXFP4>) part = __fmul_rn(part, unit[r].scale[0]);
            acc[r] = __fadd_rn(acc[r], part);
        }
    }
}

template <class F, int R>
__device__ __forceinline__ void dot_rows(const uint8_t* const (&row)[R], const float* x,
                                         int64_t cols, float (&acc)[R]) {
    constexpr int U = 2;  // units in flight per lane
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] = 0.0f;
    const int units = static_cast<int>(cols / (F::kBlockElems / F::kUnitsPerBlock));
    for (int base = lane; base < units; base += 32 * U) {
        typename F::Raw raw[U][R];
#pragma unroll
        for (int j = 0; j < U; ++j) {
            const int u = min(base + 32 * j, units - 1);  // past the end: a valid unit, unused
            const size_t block_offset = static_cast<size_t>(u / F::kUnitsPerBlock) * F::kBlockBytes;
#pragma unroll
            for (int r = 0; r < R; ++r) {
                raw[j][r] = F::load(row[r] + block_offset, u % F::kUnitsPerBlock);
            }
        }
#pragma unroll
        for (int j = 0; j < U; ++j) {
            const int u = base + 32 * j;
            if (j == 0 || u < units) accumulate_unit<F, R>(raw[j], u, x, acc);
        }
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
        for (int offset = 16; offset > 0; offset >>= 1) {
            acc[r] = __fadd_rn(acc[r], __shfl_xor_sync(0xffffffffu, acc[r], offset));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Routing: one block per token, a thread per expert.

struct RouteArgs {
    const float* logits;  // [n x n_expert]
    const float* bias;    // [n_expert] or null
    int32_t* chosen;      // [n x n_used]
    float* weight;        // [n x n_used]
    int n;
    int n_expert;
    int n_used;
    bool renormalize;
};

// A logit as an unsigned key that orders as the floats do (larger value, larger key), for
// integer comparisons: -0 counts as +0 (they compare equal), NaN below everything (it never
// beats a number).
__device__ __forceinline__ uint32_t order_key(float v) {
    if (isnan(v)) return 0u;
    const uint32_t bits = __float_as_uint(v + 0.0f);  // -0 + 0 = +0
    return (bits & 0x80000000u) ? ~bits : bits | 0x80000000u;
}

// Thread e takes expert e. Its rank among the token's experts (larger biased logit first, ties
// to the lower index) is the number of experts before it in that order, counted over the keys
// in shared memory: the experts of rank below n_used are exactly those cpu/moe.cpp's repeated
// arg-max picks, and a NaN logit ranks after every number, so a token always has n_used distinct
// experts. The chosen are then numbered in ascending expert order (ballots), their weights
// computed by their threads and the denominators added in expert order, as one loop did: the
// same bits. (n_used rounds of warp arg-max by one warp per token took 6.7 us a token on an
// H200 with Qwen3-30B-A3B's 128 experts, Nsight Compute; the counts are independent, so the
// warps run them side by side.)
//
// Shared memory (route_shared_bytes): the exponentials in double [n_expert] and the total
// (rounded up to 16 bytes), the keys [n_expert rounded up to 4], per-warp counts [32], the max.
__host__ __device__ constexpr int route_doubles(int n_expert) {
    return (n_expert + 2) / 2 * 2;
}
__host__ __device__ constexpr int route_padded(int n_expert) {
    return (n_expert + 3) / 4 * 4;
}
constexpr size_t route_shared_bytes(int n_expert) {
    return route_doubles(n_expert) * sizeof(double) +
           (route_padded(n_expert) + 32 + 1) * sizeof(uint32_t);
}

__global__ void __launch_bounds__(kMaxExperts) route_kernel(const RouteArgs a) {
    await_previous_grid();
    extern __shared__ double route_shared[];
    const int padded = route_padded(a.n_expert);
    double* exponentials = route_shared;  // [n_expert]: by slot (renormalize) or by expert
    double* total = route_shared + a.n_expert;
    auto* keys = reinterpret_cast<uint32_t*>(route_shared + route_doubles(a.n_expert));
    uint32_t* warp_chosen = keys + padded;                   // [32]
    auto* top = reinterpret_cast<float*>(warp_chosen + 32);  // the largest logit
    const int e = threadIdx.x;
    const int lane = e & 31;
    const int warp = e >> 5;
    const int64_t token = blockIdx.x;
    const float* logits = a.logits + token * a.n_expert;
    const bool expert = e < a.n_expert;
    // The biased logit of expert e, as the CPU adds it (one f32 add).
    const float logit = expert ? (a.bias ? logits[e] + a.bias[e] : logits[e]) : 0.0f;
    const uint32_t key = order_key(logit);
    if (e < padded) keys[e] = expert ? key : 0u;  // padding: after every expert (index, key)
    __syncthreads();

    int rank = 0;
    for (int o = 0; o < padded; o += 4) {
        const uint4 k = *reinterpret_cast<const uint4*>(keys + o);
        rank += (k.x > key) + (k.x == key && o < e);
        rank += (k.y > key) + (k.y == key && o + 1 < e);
        rank += (k.z > key) + (k.z == key && o + 2 < e);
        rank += (k.w > key) + (k.w == key && o + 3 < e);
    }
    const bool picked = expert && rank < a.n_used;
    if (expert && rank == 0) *top = logit;  // the softmax's max (NaN only when all are)
    const uint32_t ballot = __ballot_sync(0xffffffffu, picked);
    if (lane == 0) warp_chosen[warp] = __popc(ballot);
    __syncthreads();
    int slot = __popc(ballot & ((1u << lane) - 1u));
    for (int w = 0; w < warp; ++w) slot += static_cast<int>(warp_chosen[w]);
    const float max = *top;

    const bool needed = a.renormalize ? picked : expert;
    const double exponential = needed ? exp(static_cast<double>(logit - max)) : 0.0;
    if (needed) exponentials[a.renormalize ? slot : e] = exponential;
    __syncthreads();
    if (!a.renormalize && warp == 0) {
        // The softmax's denominator over every expert: lane l's sum of experts l, l + 32, ...
        // in order, then a fixed butterfly, so the same bits every run.
        double part = 0.0;
        for (int x = lane; x < a.n_expert; x += 32) part += exponentials[x];
        for (int offset = 16; offset > 0; offset >>= 1) {
            part += __shfl_xor_sync(0xffffffffu, part, offset);
        }
        if (lane == 0) *total = part;
    }
    __syncthreads();
    if (!picked) return;
    double denom = 0.0;
    if (a.renormalize) {
        for (int j = 0; j < a.n_used; ++j) denom += exponentials[j];  // ascending expert order
    } else {
        denom = *total;
    }
    a.chosen[token * a.n_used + slot] = e;
    a.weight[token * a.n_used + slot] = static_cast<float>(exponential / denom);
}

// ---------------------------------------------------------------------------------------------
// Expert products.

__device__ __forceinline__ float clamped_swiglu(float gate, float up, float limit, float alpha) {
    // HF GptOssExperts, as cpu/moe.cpp's clamped_swiglu_inplace.
    const float g = fminf(gate, limit);
    const float u = fminf(fmaxf(up, -limit), limit);
    return __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(__fmul_rn(-alpha, g)))), __fadd_rn(u, 1.0f));
}

enum class ExpertEpilogue : uint8_t { Store, Silu, Clamped };

// Rows of one stacked expert matrix for a set of (token, slot) pairs.
struct ExpertArgs {
    const uint8_t* data;  // the stacked matrix [n_expert * rows x cols]
    size_t row_stride;
    int64_t rows;  // of one expert
    int64_t cols;
    const float* bias;  // [n_expert * rows] or null
    const float* x;     // pair p reads row p / x_div of x [.. x cols]
    int x_div;
    const int32_t* chosen;   // [pairs] expert of each pair
    const float* up;         // [pairs x rows] the up products (activations, unfused)
    const uint8_t* up_data;  // the stacked up matrix, same type and layout (fused)
    const float* up_bias;    // [n_expert * rows] or null (fused)
    float* out;              // [pairs x rows]
    float limit, alpha;      // the clamped SwiGLU's
};

// out[p][r] = row r of expert chosen[p] · x_p (+ bias), then, for the gate, the activation
// with up[p][r]. kFused: a warp takes its rows of the gate and the same rows of the up
// matrix (each row's dot as when alone), so the up products never leave registers and a
// decode step's gate and up share one launch. Grid: (row blocks, pairs).
template <bool kFused>
constexpr int kRowsPerWarp = kFused ? kDotsPerWarp / 2 : kDotsPerWarp;

template <class F, ExpertEpilogue E, bool kFused>
__global__ void __launch_bounds__(kThreads) expert_rows_kernel(const ExpertArgs a) {
    await_previous_grid();
    constexpr int kRows = kRowsPerWarp<kFused>;
    constexpr int kDots = kFused ? 2 * kRows : kRows;
    const int lane = threadIdx.x & 31;
    const int64_t pair = blockIdx.y;
    const int64_t row0 =
        static_cast<int64_t>(blockIdx.x) * (kWarps * kRows) + (threadIdx.x >> 5) * kRows;
    if (row0 >= a.rows) return;  // the whole warp
    const int64_t e = a.chosen[pair];
    const uint8_t* row[kDots];
#pragma unroll
    for (int r = 0; r < kDots; ++r) {
        const int64_t rr = min(row0 + r % kRows, a.rows - 1);  // past the end: valid, no store
        const uint8_t* matrix = kFused && r >= kRows ? a.up_data : a.data;
        row[r] = matrix + static_cast<size_t>(e * a.rows + rr) * a.row_stride;
    }
    float acc[kDots];
    dot_rows<F, kDots>(row, a.x + (pair / a.x_div) * a.cols, a.cols, acc);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        if (row0 + r >= a.rows || lane != r) continue;
        float v = acc[r];
        if (a.bias) v = __fadd_rn(v, a.bias[e * a.rows + row0 + r]);
        const int64_t at = pair * a.rows + row0 + r;
        if constexpr (E != ExpertEpilogue::Store) {
            float u = 0.0f;
            if constexpr (kFused) {
                u = acc[kRows + r];
                if (a.up_bias) u = __fadd_rn(u, a.up_bias[e * a.rows + row0 + r]);
            } else {
                u = a.up[at];
            }
            v = E == ExpertEpilogue::Silu ? silu_gated(v, u)
                                          : clamped_swiglu(v, u, a.limit, a.alpha);
        }
        a.out[at] = v;
    }
}

// x + the token's pairs' weighted products, pair p = token * n_used + j for j ascending (slot
// order): sum = fma(weight[p], product(j, p) + bias[chosen[p]][i], sum), the bias added where
// there is one. The one order both combines keep, so that the short batches' fused launch and
// the prefill's combine give a token the same bits.
template <class Product>
__device__ __forceinline__ float add_weighted_pairs(float x, int64_t token, int64_t i, int n_used,
                                                    const int32_t* chosen, const float* weight,
                                                    const float* bias, int64_t n_embd,
                                                    Product product) {
    float sum = x;
    for (int j = 0; j < n_used; ++j) {
        const int64_t pair = token * n_used + j;
        float v = product(j, pair);
        if (bias) v = __fadd_rn(v, bias[chosen[pair] * n_embd + i]);
        sum = __fmaf_rn(weight[pair], v, sum);
    }
    return sum;
}

// x[t][i] += sum over j ascending of weight[p] * (down[row of p][i] + bias[e][i]), p = t*n_used
// + j: each x element has one thread, which adds the token's experts in slot order (ascending
// expert index). `position` maps a pair to its row of `down` (the prefill's expert-sorted
// rows), or is null (row p). Grid: (element blocks, tokens).
struct CombineArgs {
    const float* down;        // [pairs x n_embd] each pair's down product, bias not yet added
    const int32_t* position;  // [pairs] row of each pair in `down`, or null
    const float* bias;        // [n_expert x n_embd] or null
    const int32_t* chosen;    // [n x n_used]
    const float* weight;      // [n x n_used]
    float* x;                 // [n x n_embd]
    int64_t n_embd;
    int n_used;
};

__global__ void __launch_bounds__(kThreads) combine_kernel(const CombineArgs a) {
    await_previous_grid();
    const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
    const int64_t token = blockIdx.y;
    if (i >= a.n_embd) return;
    a.x[token * a.n_embd + i] =
        add_weighted_pairs(a.x[token * a.n_embd + i], token, i, a.n_used, a.chosen, a.weight,
                           a.bias, a.n_embd, [&](int, int64_t pair) {
                               const int64_t row = a.position ? a.position[pair] : pair;
                               return a.down[row * a.n_embd + i];
                           });
}

// The short batches' down products and their weighted sum in one launch: x[t][i] += sum over j
// ascending of weight[p] * (down_e row i · hidden[p] + bias[e][i]), p = t*n_used + j, e =
// chosen[p]. Block (rows i0..i0+3, token) of n_used warps: warp j takes the four rows of pair
// j's expert as expert_rows_kernel does (dot_rows, its loads of hidden[p] shared by the rows),
// then a thread per row adds the pairs' products in slot order as combine_kernel does: x gets the
// bits the two launches gave, and a decode step loses the combine's launch (2.6 us of a
// Qwen3-30B-A3B layer's ~81 on an H200). (A warp per row taking every pair, each pair's input
// loaded for one row, took 16-21 us against the two launches' 13-14.) Grid: (row blocks,
// tokens).
struct DownCombineArgs {
    const uint8_t* data;  // the stacked down matrix [n_expert * n_embd x n_ff]
    size_t row_stride;
    int64_t n_embd;
    int64_t n_ff;
    const float* hidden;    // [n * n_used x n_ff] each pair's act(gate) * up
    const int32_t* chosen;  // [n x n_used]
    const float* weight;    // [n x n_used]
    const float* bias;      // [n_expert x n_embd] or null
    float* x;               // [n x n_embd]
    int n_used;
};

template <class F>
__global__ void __launch_bounds__(32 * kMaxExpertsUsed)
    expert_down_combine_kernel(const DownCombineArgs a) {
    await_previous_grid();
    constexpr int kRows = kDotsPerWarp;
    __shared__ float products[kMaxExpertsUsed][kRows];
    const int lane = threadIdx.x & 31;
    const int slot = threadIdx.x >> 5;
    const int64_t token = blockIdx.y;
    const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kRows;
    const int64_t pair = token * a.n_used + slot;
    const int64_t e = a.chosen[pair];
    const uint8_t* row[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        const int64_t rr = min(row0 + r, a.n_embd - 1);  // past the end: valid, unused
        row[r] = a.data + static_cast<size_t>(e * a.n_embd + rr) * a.row_stride;
    }
    float acc[kRows];
    dot_rows<F, kRows>(row, a.hidden + pair * a.n_ff, a.n_ff, acc);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        if (lane == r) products[slot][r] = acc[r];
    }
    __syncthreads();
    const int r = static_cast<int>(threadIdx.x);
    if (r >= kRows || row0 + r >= a.n_embd) return;
    const int64_t i = row0 + r;
    a.x[token * a.n_embd + i] =
        add_weighted_pairs(a.x[token * a.n_embd + i], token, i, a.n_used, a.chosen, a.weight,
                           a.bias, a.n_embd, [&](int j, int64_t) { return products[j][r]; });
}

// The prefill's pairs grouped by expert on the device, as moe_prefill's host path groups them
// after a sync (a wait per MoE layer): a stable counting sort by expert (pairs ascending within
// an expert, so tokens ascending), then the tiles of at most kQmmaTileTokens rows of each expert
// in expert order, and count-0 tiles in the slots past them. One block: the counts by shared
// atomics (a count does not depend on their order), the experts' first rows and tiles by one
// thread, then warp 0 places the pairs 32 at a time (__match_any_sync groups the lanes of one
// expert; each lane's row is the expert's fill plus the lower lanes of its group, and the
// group's lowest lane moves the fill on). Shared memory: [3 x n_expert + 1] ints.
__global__ void __launch_bounds__(kThreads)
    group_pairs_kernel(const int32_t* chosen, int pairs, int n_expert, int32_t* order,
                       int32_t* position, QmmaTile* tiles, int tile_slots) {
    await_previous_grid();
    extern __shared__ int group_shared[];
    int* count = group_shared;          // [n_expert] rows of each expert
    int* fill = count + n_expert;       // [n_expert] the next row of each
    int* first_tile = fill + n_expert;  // [n_expert + 1]
    for (int e = threadIdx.x; e < n_expert; e += blockDim.x) count[e] = 0;
    __syncthreads();
    for (int p = threadIdx.x; p < pairs; p += blockDim.x) atomicAdd(&count[chosen[p]], 1);
    __syncthreads();
    if (threadIdx.x == 0) {
        int row = 0, tile = 0;
        for (int e = 0; e < n_expert; ++e) {
            fill[e] = row;
            first_tile[e] = tile;
            row += count[e];
            tile += (count[e] + static_cast<int>(kQmmaTileTokens) - 1) /
                    static_cast<int>(kQmmaTileTokens);
        }
        first_tile[n_expert] = tile;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < n_expert; e += blockDim.x) {
        for (int i = 0; i * kQmmaTileTokens < count[e]; ++i) {
            QmmaTile& tile = tiles[first_tile[e] + i];
            tile.expert = e;
            tile.row0 = fill[e] + i * static_cast<int>(kQmmaTileTokens);
            tile.count = min(static_cast<int>(kQmmaTileTokens),
                             count[e] - i * static_cast<int>(kQmmaTileTokens));
            tile.unused = 0;
        }
    }
    for (int slot = first_tile[n_expert] + threadIdx.x; slot < tile_slots; slot += blockDim.x) {
        tiles[slot] = QmmaTile{};
    }
    __syncthreads();  // the tiles read every expert's first row before warp 0 moves it
    if (threadIdx.x >= 32) return;
    const unsigned lane = threadIdx.x;
    for (int base = 0; base < pairs; base += 32) {
        const int p = base + static_cast<int>(lane);
        const unsigned active = __ballot_sync(0xffffffffu, p < pairs);
        if (p < pairs) {
            const int e = chosen[p];
            const unsigned same = __match_any_sync(active, e);
            const int rank = __popc(same & ((1u << lane) - 1u));
            const int row = fill[e] + rank;
            order[row] = p;
            position[p] = row;
            __syncwarp(active);  // every lane has read its expert's fill
            if (rank == 0) fill[e] += __popc(same);
        }
        __syncwarp();
    }
}

// xg[i] = xn[order[i] / n_used] for the prefill's expert-sorted pairs. Grid: (element blocks,
// pairs).
__global__ void __launch_bounds__(kThreads)
    gather_kernel(const float* xn, const int32_t* order, int n_used, int64_t n_embd, float* xg) {
    await_previous_grid();
    const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
    const int64_t row = blockIdx.y;
    if (i >= n_embd) return;
    xg[row * n_embd + i] = xn[static_cast<int64_t>(order[row] / n_used) * n_embd + i];
}

// The prefill's activation over expert-sorted rows: gate[i] = act(gate + bias, up + bias),
// with the expert of row i chosen[order[i]]. Grid: (element blocks, rows).
struct SortedActivationArgs {
    float* gate;             // [rows x n_ff]
    const float* up;         // [rows x n_ff]
    const int32_t* order;    // [rows] pair of each row
    const int32_t* chosen;   // [pairs]
    const float* gate_bias;  // [n_expert x n_ff] or null
    const float* up_bias;    // [n_expert x n_ff] or null
    int64_t n_ff;
    bool clamped;
    float limit, alpha;
};

// A thread takes kWidth consecutive elements (4: 16-byte loads and stores, where n_ff and every
// pointer allow them; gpt-oss-20b's 1,024 x 2,880 took 30 us an element a thread on an H200).
template <int kWidth>
__global__ void __launch_bounds__(kThreads) sorted_activation_kernel(const SortedActivationArgs a) {
    await_previous_grid();
    using Vector = std::conditional_t<kWidth == 4, float4, float>;
    const int64_t i = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) * kWidth;
    const int64_t row = blockIdx.y;
    if (i >= a.n_ff) return;
    const int64_t e = a.chosen[a.order[row]];
    Vector g = *reinterpret_cast<const Vector*>(a.gate + row * a.n_ff + i);
    Vector u = *reinterpret_cast<const Vector*>(a.up + row * a.n_ff + i);
    Vector gate_bias{}, up_bias{};
    if (a.gate_bias) gate_bias = *reinterpret_cast<const Vector*>(a.gate_bias + e * a.n_ff + i);
    if (a.up_bias) up_bias = *reinterpret_cast<const Vector*>(a.up_bias + e * a.n_ff + i);
    float* gs = reinterpret_cast<float*>(&g);
    const float* us = reinterpret_cast<const float*>(&u);
    const float* gb = reinterpret_cast<const float*>(&gate_bias);
    const float* ub = reinterpret_cast<const float*>(&up_bias);
#pragma unroll
    for (int j = 0; j < kWidth; ++j) {
        const float gj = a.gate_bias ? __fadd_rn(gs[j], gb[j]) : gs[j];
        const float uj = a.up_bias ? __fadd_rn(us[j], ub[j]) : us[j];
        gs[j] = a.clamped ? clamped_swiglu(gj, uj, a.limit, a.alpha) : silu_gated(gj, uj);
    }
    *reinterpret_cast<Vector*>(a.gate + row * a.n_ff + i) = g;
}

// ---------------------------------------------------------------------------------------------
// Host side.

[[noreturn]] void fail(const std::string& what) {
    throw std::invalid_argument(std::string("cuda moe kernels: ") + what);
}

// Whether the expert slices of a stacked matrix are what the readers take: whole blocks, and
// each row as aligned as its format's loads need (the float types' 16-byte loads).
bool readable(const DeviceMatrix& m, int64_t n_expert) {
    bool known = false;
    int block_elems = 0;
    with_format(m.type, [&](auto fmt) {
        known = true;
        block_elems = decltype(fmt)::kBlockElems;
    });
    if (!known || m.cols % block_elems != 0 || m.cols % 8 != 0 || m.rows % n_expert != 0) {
        return false;
    }
    const bool windowed = m.type == TensorType::Q4_0 || m.type == TensorType::Q8_0 ||
                          m.type == TensorType::Q6_K || m.type == TensorType::MXFP4;
    const size_t alignment = windowed ? 2 : 16;
    return m.type == TensorType::MXFP4 ||
           (reinterpret_cast<uintptr_t>(m.data) % alignment == 0 && m.row_stride % alignment == 0);
}

template <ExpertEpilogue E, bool kFused = false>
void launch_expert_rows(const DeviceMatrix& m, const ExpertArgs& args, int64_t pairs,
                        cudaStream_t stream) {
    constexpr int64_t kRowsPerBlock = kWarps * kRowsPerWarp<kFused>;
    const dim3 grid(static_cast<unsigned>((args.rows + kRowsPerBlock - 1) / kRowsPerBlock),
                    static_cast<unsigned>(pairs));
    with_format(m.type, [&](auto fmt) {
        launch_kernel(expert_rows_kernel<decltype(fmt), E, kFused>, grid, kThreads, 0, stream,
                      args);
    });
    check_launch("expert_rows_kernel");
}

// The bound of moe_tile_slots and MoeBuffers::max_tiles: the whole tiles of the pairs, plus at
// most one partly filled tile for each expert.
int64_t tile_slots_for(int64_t pairs, int64_t n_expert) {
    return pairs / kQmmaTileTokens + n_expert;
}

}  // namespace

MoeBuffers::~MoeBuffers() {
    if (block_) cudaFree(block_);
    if (host_block_) cudaFreeHost(host_block_);
}

void MoeBuffers::reserve(const ModelConfig& c, int64_t tokens) {
    if (c.n_expert == 0 || block_) return;
    if (c.n_expert_used < 1 || c.n_expert_used > kMaxExpertsUsed || c.n_expert > kMaxExperts) {
        throw std::runtime_error("CUDA: " + std::to_string(c.n_expert) + " experts, " +
                                 std::to_string(c.n_expert_used) +
                                 " per token: more than the GPU's MoE kernels take");
    }
    // Each buffer starts 256-byte aligned (the float4 loads need 16, cuBLAS likes 256).
    const auto round = [](size_t bytes) { return (bytes + 255) / 256 * 256; };
    const size_t pairs = static_cast<size_t>(tokens * c.n_expert_used);
    const size_t router_bytes = round(static_cast<size_t>(tokens * c.n_expert) * sizeof(float));
    const size_t pair_bytes = round(pairs * sizeof(float));  // chosen, weight, order, position
    const size_t ff_bytes = round(pairs * static_cast<size_t>(c.n_ff_exp) * sizeof(float));
    const size_t embd_bytes = round(pairs * static_cast<size_t>(c.n_embd) * sizeof(float));
    const size_t half_bytes =
        round(pairs * static_cast<size_t>(std::max(c.n_embd, c.n_ff_exp)) * sizeof(__half));
    const size_t scale_bytes = round((pairs + 1) * sizeof(float));
    max_tiles = tile_slots_for(static_cast<int64_t>(pairs), c.n_expert);
    const size_t tile_bytes = round(static_cast<size_t>(max_tiles) * sizeof(QmmaTile));
    const size_t total = router_bytes + 4 * pair_bytes + 2 * ff_bytes + 2 * embd_bytes +
                         half_bytes + scale_bytes + tile_bytes;
    const size_t host_ids = round(3 * pairs * sizeof(int32_t));
    const cudaError_t err = cudaMalloc(&block_, total);
    if (err != cudaSuccess || cudaMallocHost(&host_block_, host_ids) != cudaSuccess) {
        if (block_) cudaFree(block_);
        block_ = nullptr;
        host_block_ = nullptr;
        throw std::runtime_error("CUDA: out of memory allocating the MoE buffers (" +
                                 std::to_string(total >> 20) + " MiB)");
    }
    auto* p = static_cast<uint8_t*>(block_);
    const auto take = [&](size_t bytes) {
        uint8_t* at = p;
        p += bytes;
        return at;
    };
    router = reinterpret_cast<float*>(take(router_bytes));
    chosen = reinterpret_cast<int32_t*>(take(pair_bytes));
    weight = reinterpret_cast<float*>(take(pair_bytes));
    order = reinterpret_cast<int32_t*>(take(pair_bytes));
    position = reinterpret_cast<int32_t*>(take(pair_bytes));
    static_assert(sizeof(int32_t) == sizeof(float));
    up = reinterpret_cast<float*>(take(ff_bytes));
    hidden = reinterpret_cast<float*>(take(ff_bytes));
    down = reinterpret_cast<float*>(take(embd_bytes));
    xg = reinterpret_cast<float*>(take(embd_bytes));
    half_rows = reinterpret_cast<__half*>(take(half_bytes));
    half_scale = reinterpret_cast<float*>(take(scale_bytes));
    tiles = reinterpret_cast<QmmaTile*>(take(tile_bytes));
    host = static_cast<int32_t*>(host_block_);
}

const char* moe_layer_unsupported(const MoeLayer& l) {
    if (l.n_used < 1 || l.n_used > kMaxExpertsUsed || l.n_expert > kMaxExperts ||
        l.n_used > l.n_expert) {
        return "more experts than the GPU's MoE kernels take";
    }
    if (!readable(l.gate, l.n_expert) || !readable(l.up, l.n_expert) ||
        !readable(l.down, l.n_expert)) {
        return "expert matrices of a type or layout the GPU's MoE kernels do not read";
    }
    if (l.gate.rows != l.n_expert * l.n_ff || l.up.rows != l.gate.rows ||
        l.down.rows != l.n_expert * l.n_embd || l.gate.cols != l.n_embd || l.down.cols != l.n_ff ||
        l.router.rows != l.n_expert) {
        return "expert matrices of an unexpected shape";
    }
    return "";
}

void moe_route(const MoeLayer& l, const float* logits, int64_t n, int32_t* chosen, float* weight,
               cudaStream_t stream) {
    if (n <= 0) return;
    RouteArgs args{logits,
                   l.router_bias,
                   chosen,
                   weight,
                   static_cast<int>(n),
                   static_cast<int>(l.n_expert),
                   static_cast<int>(l.n_used),
                   l.renormalize};
    if (n > 0x7fffffff) fail("too many tokens for one launch");
    const auto threads = static_cast<unsigned>((l.n_expert + 31) / 32 * 32);
    const size_t shared = route_shared_bytes(static_cast<int>(l.n_expert));
    launch_kernel(route_kernel, static_cast<unsigned>(n), threads, shared, stream, args);
    check_launch("route_kernel");
}

void moe_expert_ffn(const MoeLayer& l, const float* xn, const int32_t* chosen, int64_t n, float* up,
                    float* hidden, cudaStream_t stream) {
    if (n <= 0) return;
    const int64_t pairs = n * l.n_used;
    if (pairs > 65535) fail("too many (token, expert) pairs for one launch");
    ExpertArgs args{};
    args.rows = l.n_ff;
    args.cols = l.n_embd;
    args.x = xn;
    args.x_div = static_cast<int>(l.n_used);
    args.chosen = chosen;
    args.limit = l.swiglu_limit;
    args.alpha = l.swiglu_alpha;
    if (l.gate.type == l.up.type && l.gate.row_stride == l.up.row_stride) {
        // Gate and up rows side by side in each warp, the activation in registers.
        args.data = static_cast<const uint8_t*>(l.gate.data);
        args.row_stride = l.gate.row_stride;
        args.bias = l.gate_bias;
        args.up_data = static_cast<const uint8_t*>(l.up.data);
        args.up_bias = l.up_bias;
        args.out = hidden;
        if (l.clamped_swiglu) {
            launch_expert_rows<ExpertEpilogue::Clamped, true>(l.gate, args, pairs, stream);
        } else {
            launch_expert_rows<ExpertEpilogue::Silu, true>(l.gate, args, pairs, stream);
        }
        return;
    }
    // Types that differ: the up products first, then the gate's, whose epilogue applies the
    // activation.
    args.data = static_cast<const uint8_t*>(l.up.data);
    args.row_stride = l.up.row_stride;
    args.bias = l.up_bias;
    args.out = up;
    launch_expert_rows<ExpertEpilogue::Store>(l.up, args, pairs, stream);
    args.data = static_cast<const uint8_t*>(l.gate.data);
    args.row_stride = l.gate.row_stride;
    args.bias = l.gate_bias;
    args.up = up;
    args.out = hidden;
    if (l.clamped_swiglu) {
        launch_expert_rows<ExpertEpilogue::Clamped>(l.gate, args, pairs, stream);
    } else {
        launch_expert_rows<ExpertEpilogue::Silu>(l.gate, args, pairs, stream);
    }
}

void moe_expert_down_combine(const MoeLayer& l, const float* hidden, const int32_t* chosen,
                             const float* weight, int64_t n, float* x, cudaStream_t stream) {
    if (n <= 0) return;
    if (n > 65535) fail("too many tokens for one launch");
    const DownCombineArgs args{static_cast<const uint8_t*>(l.down.data),
                               l.down.row_stride,
                               l.n_embd,
                               l.n_ff,
                               hidden,
                               chosen,
                               weight,
                               l.down_bias,
                               x,
                               static_cast<int>(l.n_used)};
    const dim3 grid(static_cast<unsigned>((l.n_embd + kDotsPerWarp - 1) / kDotsPerWarp),
                    static_cast<unsigned>(n));
    const auto threads = static_cast<unsigned>(32 * l.n_used);
    with_format(l.down.type, [&](auto fmt) {
        launch_kernel(expert_down_combine_kernel<decltype(fmt)>, grid, threads, 0, stream, args);
    });
    check_launch("expert_down_combine_kernel");
}

void moe_combine(const MoeLayer& l, const float* down, const int32_t* position,
                 const int32_t* chosen, const float* weight, int64_t n, float* x,
                 cudaStream_t stream) {
    if (n <= 0) return;
    if (n > 65535) fail("too many tokens for one launch");
    const CombineArgs args{down,   position, l.down_bias, chosen,
                           weight, x,        l.n_embd,    static_cast<int>(l.n_used)};
    const dim3 grid(static_cast<unsigned>((l.n_embd + kThreads - 1) / kThreads),
                    static_cast<unsigned>(n));
    launch_kernel(combine_kernel, grid, kThreads, 0, stream, args);
    check_launch("combine_kernel");
}

int moe_tile_slots(const MoeLayer& l, int64_t n) {
    return static_cast<int>(tile_slots_for(n * l.n_used, l.n_expert));
}

void moe_group_pairs(const MoeLayer& l, const int32_t* chosen, int64_t n, int32_t* order,
                     int32_t* position, QmmaTile* tiles, cudaStream_t stream) {
    if (n <= 0) return;
    const int64_t pairs = n * l.n_used;
    if (pairs > 0x7fffffff) fail("too many pairs to group in one launch");
    const size_t shared = static_cast<size_t>(3 * l.n_expert + 1) * sizeof(int);
    launch_kernel(group_pairs_kernel, 1, kThreads, shared, stream, chosen, static_cast<int>(pairs),
                  static_cast<int>(l.n_expert), order, position, tiles, moe_tile_slots(l, n));
    check_launch("group_pairs_kernel");
}

void moe_gather(const float* xn, const int32_t* order, int64_t n_used, int64_t rows, int64_t n_embd,
                float* xg, cudaStream_t stream) {
    if (rows <= 0) return;
    if (rows > 65535) fail("too many rows to gather in one launch");
    const dim3 grid(static_cast<unsigned>((n_embd + kThreads - 1) / kThreads),
                    static_cast<unsigned>(rows));
    launch_kernel(gather_kernel, grid, kThreads, 0, stream, xn, order, static_cast<int>(n_used),
                  n_embd, xg);
    check_launch("gather_kernel");
}

void moe_sorted_activation(const MoeLayer& l, float* gate, const float* up, const int32_t* order,
                           const int32_t* chosen, int64_t rows, cudaStream_t stream) {
    if (rows <= 0) return;
    if (rows > 65535) fail("too many rows for one launch");
    SortedActivationArgs args{gate,           up,
                              order,          chosen,
                              l.gate_bias,    l.up_bias,
                              l.n_ff,         l.clamped_swiglu,
                              l.swiglu_limit, l.swiglu_alpha};
    const auto aligned = [](const float* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
    const bool vectors = l.n_ff % 4 == 0 && aligned(gate) && aligned(up) &&
                         (!l.gate_bias || aligned(l.gate_bias)) &&
                         (!l.up_bias || aligned(l.up_bias));
    const int64_t width = vectors ? 4 : 1;
    const int64_t per_block = kThreads * width;
    const dim3 grid(static_cast<unsigned>((l.n_ff + per_block - 1) / per_block),
                    static_cast<unsigned>(rows));
    launch_kernel(vectors ? sorted_activation_kernel<4> : sorted_activation_kernel<1>, grid,
                  kThreads, 0, stream, args);
    check_launch("sorted_activation_kernel");
}

}  // namespace ember::cuda
