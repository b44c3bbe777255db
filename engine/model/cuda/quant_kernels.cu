// The weight kernels of the CUDA backend: gemv over the GGUF formats read in place, and the
// dequantizations for cuBLAS and the embedding lookup. The formats' readers are in
// quant_blocks.cuh.
//
// gemv layout. A block of kWarps warps; each warp owns R consecutive rows. Lane l of a warp
// handles units l, l + 32, l + 64, ... of each of its rows (a unit: 32 elements of a quantized
// type, 8 of a float type), so the loads of a warp are contiguous pieces of a row (coalesced
// 16-byte loads), and the row's weights are read exactly once per launch whatever the number
// of tokens: each unit is dequantized once into registers and multiplied with the activations
// of every token. Per (row, token) a lane's sum runs over its units in order and over each
// unit's elements in order with explicit fma (no contraction left to the compiler), then a
// fixed xor-butterfly over the 32 lanes: the arithmetic of an output depends on neither the
// number of tokens nor R, so a token's bits are the same alone or in a batch of 17.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

#include "engine/model/cuda/activations.cuh"
#include "engine/model/cuda/cuda_check.cuh"
#include "engine/model/cuda/gemv_args.cuh"
#include "engine/model/cuda/launch.cuh"
#include "engine/model/cuda/mma_gemv.cuh"
#include "engine/model/cuda/quant_blocks.cuh"
#include "engine/model/cuda/quant_kernels.cuh"
#include "engine/tensor/types.h"

namespace ember::cuda {

namespace {

using namespace blocks;

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;

// ---------------------------------------------------------------------------------------------
// gemv kernel.

// Adds unit u of R rows (already loaded) times every token's activations to acc: per chunk of
// 8 elements a product chain of its own (short dependency chains), then one add into acc.
template <class F, int kTokens, int R>
__device__ __forceinline__ void accumulate_unit(const typename F::Raw (&raw)[R], int u,
                                                const float* __restrict__ x, int64_t ldx,
                                                float (&acc)[R][kTokens]) {
    const int k = u % F::kUnitsPerBlock;
    const int64_t block_elem0 = static_cast<int64_t>(u / F::kUnitsPerBlock) * F::kBlockElems;
    typename F::Unit unit[R];
#pragma unroll
    for (int r = 0; r < R; ++r) unit[r] = F::unpack(raw[r], k);
#pragma unroll
    for (int c = 0; c < F::kChunks; ++c) {
        float w[R][8];
#pragma unroll
        for (int r = 0; r < R; ++r) {
            // c is a constant after unrolling; the switch turns it into the template argument.
            switch (c) {
                case 0:
                    F::template chunk<0>(unit[r], w[r]);
                    break;
                case 1:
                    F::template chunk<1 % F::kChunks>(unit[r], w[r]);
                    break;
                case 2:
                    F::template chunk<2 % F::kChunks>(unit[r], w[r]);
                    break;
                default:
                    F::template chunk<3 % F::kChunks>(unit[r], w[r]);
                    break;
            }
        }
        const float* xc = x + block_elem0 + F::chunk_pos(k, c);
        // No token guard: every load below is unconditional, so the compiler can issue them
        // all ahead of the arithmetic.
#pragma unroll
        for (int t = 0; t < kTokens; ++t) {
            const float4 lo = __ldg(reinterpret_cast<const float4*>(xc + t * ldx));
            const float4 hi = __ldg(reinterpret_cast<const float4*>(xc + t * ldx + 4));
            const float xv[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
            for (int r = 0; r < R; ++r) {
                float part = __fmul_rn(w[r][0], xv[0]);
#pragma unroll
                for (int i = 1; i < 8; ++i) part = __fmaf_rn(w[r][i], xv[i], part);
                acc[r][t] = __fadd_rn(acc[r][t], part);
            }
        }
    }
}

// The rows a warp reads: R of its matrix, or R of the gate and R of the up matrix.
constexpr int gemv_warp_rows(int R, GemvEpilogue E) {
    return E == GemvEpilogue::Plain ? R : 2 * R;
}

// kTokens: the number of tokens (one instance each, so no loop has a run-time bound);
// R: rows per warp (activations loaded once serve R rows); U: units per lane whose loads are
// issued together (more bytes in flight where R alone gives too few).
// kGate: a gate/up pair (GemvArgs matrix 0 the gate, 1 the up, same type and shape): a warp
// takes R rows of each, kRows = 2R in all, and stores act(gate row, up row) into matrix 0's y.
// split (1, 2 or 4: gemv_split): the warps that share each row. The block's warps form kWarps /
// split groups; member m of a group is "virtual lanes" 32m..32m+31 of its rows, virtual lane v
// taking units v, v + 32 split, ... in that order. Each warp's sums go through the butterfly, then
// the group's members' results are added in member order. gemv_block is one block's share of a
// launch: the body of gemv_kernel (one format, args.split) and of gemv_two_kernel (two, a split
// each); `partial` the members' sums (split > 1), in the kernel's shared memory.
template <class F, int kTokens, int R, int U, GemvEpilogue E>
__device__ __forceinline__ void gemv_block(
    const GemvArgs& args, const int split,
    float (&partial)[kWarps][gemv_warp_rows(R, E)][kTokens]) {
    constexpr bool kGated = E != GemvEpilogue::Plain;
    constexpr int kRows = gemv_warp_rows(R, E);
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int member = warp % split;
    const GemvTarget target = pick_target(args);
    const int64_t row0 =
        (blockIdx.x - target.block_begin) * (kWarps / split * R) + warp / split * R;
    // The whole group (no shuffle is left waiting); with split > 1 every warp goes on to the
    // block's barrier, its rows clamped below and nothing stored.
    if (split == 1 && row0 >= target.rows) return;

    // Rows past the end read the last row (valid memory) and store nothing.
    const uint8_t* row_data[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        const int64_t row = min(row0 + r % R, target.rows - 1);
        const uint8_t* matrix = kGated && r >= R ? args.data[1] : target.data;
        row_data[r] = matrix + static_cast<size_t>(row) * target.row_stride;
    }

    float acc[kRows][kTokens];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
#pragma unroll
        for (int t = 0; t < kTokens; ++t) acc[r][t] = 0.0f;
    }

    const int units = static_cast<int>(args.cols / (F::kBlockElems / F::kUnitsPerBlock));
    const int stride = 32 * split;
    const int64_t chunk0 = static_cast<int64_t>(blockIdx.y) * kTokens;  // first token
    const float* x = args.x + chunk0 * args.ldx;
    for (int base = member * 32 + lane; base < units; base += stride * U) {
        typename F::Raw raw[U][kRows];
#pragma unroll
        for (int j = 0; j < U; ++j) {
            const int u = min(base + stride * j, units - 1);
#pragma unroll
            for (int r = 0; r < kRows; ++r) {
                const uint8_t* block =
                    row_data[r] + static_cast<size_t>(u / F::kUnitsPerBlock) * F::kBlockBytes;
                raw[j][r] = F::load(block, u % F::kUnitsPerBlock);
            }
        }
#pragma unroll
        for (int j = 0; j < U; ++j) {
            const int u = base + stride * j;
            if (j == 0 || u < units) {
                accumulate_unit<F, kTokens, kRows>(raw[j], u, x, args.ldx, acc);
            }
        }
    }

    // Butterfly: every lane ends with the same bits (each step adds the same two values).
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
#pragma unroll
        for (int t = 0; t < kTokens; ++t) {
#pragma unroll
            for (int offset = 16; offset > 0; offset >>= 1) {
                acc[r][t] += __shfl_xor_sync(0xffffffffu, acc[r][t], offset);
            }
        }
    }
    if (split > 1) {
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
#pragma unroll
            for (int t = 0; t < kTokens; ++t) {
                if (lane == (r * kTokens + t) % 32) partial[warp][r][t] = acc[r][t];
            }
        }
        __syncthreads();
        if (member != 0) return;
    }
    // Row r's sum for token t: the warp's own, or its group's members' added in member order.
    const auto sum_of = [&](int r, int t) {
        if (split == 1) return acc[r][t];
        float sum = partial[warp][r][t];
        for (int m = 1; m < split; ++m) sum += partial[warp + m][r][t];
        return sum;
    };
    // Spread the stores over the lanes.
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
        for (int t = 0; t < kTokens; ++t) {
            if (row0 + r < target.rows && lane == (r * kTokens + t) % 32) {
                float value = sum_of(r, t);
                if constexpr (kGated) value = epilogue<E>(value, sum_of(r + R, t));
                target.y[(chunk0 + t) * target.ldy + row0 + r] = value;
            }
        }
    }
}

template <class F, int kTokens, int R, int U, GemvEpilogue E = GemvEpilogue::Plain>
__global__ void __launch_bounds__(kThreads) gemv_kernel(const GemvArgs args) {
    await_previous_grid();
    __shared__ float partial[kWarps][gemv_warp_rows(R, E)][kTokens];
    gemv_block<F, kTokens, R, U, E>(args, args.split, partial);
}

// Decode's products of two formats in one launch: the Q4_K or Q5_K Q and K of a K-quant file's
// attention beside its Q6_K V (gemv_many), a launch fewer in half the layers (V's own launch took
// ~4.5 us of Qwen3-30B-A3B's decode on an H200, mostly the launch's floor). Blocks below
// args.second_format_block serve the First targets, the others the Second ones, each with its
// format's split (args.split, args.second_split): a row's arithmetic is that of gemv_kernel of
// its format with that split. A block's threads all take one branch, so gemv_block's barrier
// (split > 1) is reached by the whole block.
template <class First, class Second, int R, int U>
__global__ void __launch_bounds__(kThreads) gemv_two_kernel(const GemvArgs args) {
    await_previous_grid();
    // One token, plain products: the sums to share are shaped alike for both formats.
    __shared__ float partial[kWarps][gemv_warp_rows(R, GemvEpilogue::Plain)][1];
    if (static_cast<int64_t>(blockIdx.x) < args.second_format_block) {
        gemv_block<First, 1, R, U, GemvEpilogue::Plain>(args, args.split, partial);
    } else {
        gemv_block<Second, 1, R, U, GemvEpilogue::Plain>(args, args.second_split, partial);
    }
}

// ---------------------------------------------------------------------------------------------
// Helpers of the kernels that read whole units (dequantization, the load-time range check).

// Unit u of `row` (counted from the row's start), unpacked.
template <class F>
__device__ __forceinline__ typename F::Unit load_unit(const uint8_t* data, size_t row_stride,
                                                      int64_t row, int64_t u) {
    const int k = static_cast<int>(u % F::kUnitsPerBlock);
    const uint8_t* block = data + static_cast<size_t>(row) * row_stride +
                           static_cast<size_t>(u / F::kUnitsPerBlock) * F::kBlockBytes;
    return F::unpack(F::load(block, k), k);
}

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

// ---------------------------------------------------------------------------------------------
// Dequantization kernel: one thread per unit of an output row.

// Output row i is source row ids[i] (embedding) or row0 + i; times scale when ids is given.
// `out`: [n x cols] floats (dequantize_kernel) or halves (dequantize_half_kernel).
struct DequantArgs {
    const uint8_t* data;
    size_t row_stride;
    int64_t rows;  // of the matrix, to check ids
    int64_t cols;
    int64_t row0;
    const int32_t* ids;
    int64_t n;  // output rows
    float scale;
    void* out;
};

// Eight dequantized weights to the output row: two 16-byte stores in f32, one in f16 (rounded
// to nearest even, as the tensor cores' inputs).
__device__ __forceinline__ void store8(float* o, const float (&w)[8]) {
    auto* v = reinterpret_cast<float4*>(o);
    v[0] = make_float4(w[0], w[1], w[2], w[3]);
    v[1] = make_float4(w[4], w[5], w[6], w[7]);
}

__device__ __forceinline__ void store8(__half* o, const float (&w)[8]) {
    __half2 h[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) h[e] = __floats2half2_rn(w[2 * e], w[2 * e + 1]);
    *reinterpret_cast<uint4*>(o) = *reinterpret_cast<const uint4*>(h);
}

template <class F>
__global__ void __launch_bounds__(kThreads) dequantize_kernel(const DequantArgs a) {
    await_previous_grid();
    const int64_t units = a.cols / (F::kBlockElems / F::kUnitsPerBlock);
    const int64_t index = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
    if (index >= a.n * units) return;
    const int64_t i = index / units;
    const int u = static_cast<int>(index % units);
    float* out_row = static_cast<float*>(a.out) + i * a.cols;
    const int k = u % F::kUnitsPerBlock;
    const int64_t block_elem0 = static_cast<int64_t>(u / F::kUnitsPerBlock) * F::kBlockElems;

    int64_t row = a.row0 + i;
    if (a.ids != nullptr) {
        row = a.ids[i];
        if (row < 0 || row >= a.rows) {  // a bad id shows as NaN rather than reading out of bounds
#pragma unroll
            for (int c = 0; c < F::kChunks; ++c) {
                float* o = out_row + block_elem0 + F::chunk_pos(k, c);
                for (int e = 0; e < 8; ++e) o[e] = __int_as_float(0x7fffffff);
            }
            return;
        }
    }
    const typename F::Unit unit = load_unit<F>(a.data, a.row_stride, row, u);
#pragma unroll
    for (int c = 0; c < F::kChunks; ++c) {
        float w[8];
        unit_chunk<F>(unit, c, w);
        if (a.ids != nullptr) {
#pragma unroll
            for (int e = 0; e < 8; ++e) w[e] = __fmul_rn(w[e], a.scale);
        }
        store8(out_row + block_elem0 + F::chunk_pos(k, c), w);
    }
}

// f16 dequantization for the tensor-core products. Thread = unit, as dequantize_kernel, but the
// block's 128 units (whole blocks of the format, and consecutive in the output) are put
// together in shared memory first and leave as 16-byte stores of consecutive addresses. Written
// straight from the units, each store instruction of a warp wrote 32 pieces of 16 bytes spread
// over 2 KB (0.5 TB/s of f16 on an H200); a thread per 8-element chunk repeated each unit's
// unpacking four times (1.1 TB/s).
template <class F>
__global__ void __launch_bounds__(kThreads) dequantize_half_kernel(const DequantArgs a) {
    await_previous_grid();
    constexpr int kUnitElems = F::kBlockElems / F::kUnitsPerBlock;
    static_assert(kThreads % F::kUnitsPerBlock == 0, "a launch block holds whole blocks");
    __shared__ uint4 tile_raw[kThreads * kUnitElems / 8];
    auto* tile = reinterpret_cast<__half*>(tile_raw);  // [kThreads * kUnitElems]
    const int64_t units_per_row = a.cols / kUnitElems;
    const int64_t total = a.n * units_per_row;
    const int64_t tile0 = static_cast<int64_t>(blockIdx.x) * kThreads;  // first unit
    const int64_t index = tile0 + threadIdx.x;
    if (index < total) {
        const int64_t i = index / units_per_row;
        const int64_t u = index % units_per_row;
        const int k = static_cast<int>(u % F::kUnitsPerBlock);
        const typename F::Unit unit = load_unit<F>(a.data, a.row_stride, a.row0 + i, u);
        __half* dst = tile + (threadIdx.x / F::kUnitsPerBlock) * F::kBlockElems;
#pragma unroll
        for (int c = 0; c < F::kChunks; ++c) {
            float w[8];
            unit_chunk<F>(unit, c, w);
            store8(dst + F::chunk_pos(k, c), w);
        }
    }
    __syncthreads();
    // The tile's elements are output elements tile0 * kUnitElems + 0.. (rows are whole blocks
    // and the output [n x cols] has no padding).
    const int64_t elems = min(static_cast<int64_t>(kThreads), total - tile0) * kUnitElems;
    __half* out = static_cast<__half*>(a.out) + tile0 * kUnitElems;
    for (int64_t e = static_cast<int64_t>(threadIdx.x) * 8; e < elems; e += kThreads * 8) {
        *reinterpret_cast<uint4*>(out + e) = *reinterpret_cast<const uint4*>(tile + e);
    }
}

// The largest |w| of rows [a.row0, a.row0 + a.n), into *amax (whose bits, as a non-negative
// float's, order as integers: an atomic max is exact in any order). NaN counts as infinite.
template <class F>
__global__ void __launch_bounds__(kThreads) max_abs_kernel(const DequantArgs a, unsigned* amax) {
    await_previous_grid();
    const int64_t units = a.cols / (F::kBlockElems / F::kUnitsPerBlock);
    const int64_t index = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
    float top = 0.0f;
    if (index < a.n * units) {
        const typename F::Unit unit =
            load_unit<F>(a.data, a.row_stride, a.row0 + index / units, index % units);
#pragma unroll
        for (int c = 0; c < F::kChunks; ++c) {
            float w[8];
            unit_chunk<F>(unit, c, w);
#pragma unroll
            for (int e = 0; e < 8; ++e) top = fmaxf(top, isnan(w[e]) ? INFINITY : fabsf(w[e]));
        }
    }
    for (int offset = 16; offset > 0; offset >>= 1) {
        top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, offset));
    }
    if ((threadIdx.x & 31) == 0) atomicMax(amax, __float_as_uint(top));
}

// ---------------------------------------------------------------------------------------------
// Host side.

[[noreturn]] void fail(const std::string& what) {
    throw std::invalid_argument("cuda quant kernels: " + what);
}

bool aligned(const void* p, size_t to) {
    return reinterpret_cast<uintptr_t>(p) % to == 0;
}

// The requirements of the readers: whole blocks (8 elements for the float types), rows at
// least a row's bytes apart; 16-byte aligned rows for the formats read with aligned 16-byte
// loads, 2-byte aligned ones for those read through windows (Q4_0, Q8_0, Q6_K: fp16 scales),
// any for MXFP4 (17-byte blocks: a byte exponent and a window).
void check_matrix(const DeviceMatrix& w) {
    bool ok = false;
    int block_elems = 0, block_bytes = 0;
    with_format(w.type, [&](auto fmt) {
        using F = decltype(fmt);
        ok = true;
        block_elems = F::kBlockElems;
        block_bytes = F::kBlockBytes;
    });
    if (!ok) fail("unsupported weight type " + std::to_string(static_cast<unsigned>(w.type)));
    if (w.rows < 0 || w.cols <= 0 || w.cols % block_elems != 0) {
        fail("matrix width " + std::to_string(w.cols) + " is not a positive multiple of " +
             std::to_string(block_elems));
    }
    if (w.row_stride < static_cast<size_t>(w.cols / block_elems * block_bytes)) {
        fail("row_stride shorter than a row");
    }
    const bool windowed =
        w.type == TensorType::Q4_0 || w.type == TensorType::Q8_0 || w.type == TensorType::Q6_K;
    const size_t alignment = w.type == TensorType::MXFP4 ? 1 : (windowed ? 2 : 16);
    if (!aligned(w.data, alignment) || w.row_stride % alignment != 0) {
        fail("matrix data or row_stride not " + std::to_string(alignment) + "-byte aligned");
    }
}

void check_tokens(int64_t n_tokens) {
    if (n_tokens < 1 || n_tokens > kGemvMaxTokens) {
        fail("n_tokens " + std::to_string(n_tokens) + " outside 1.." +
             std::to_string(kGemvMaxTokens));
    }
}

void check_activations(const float* x, int64_t ldx, int64_t cols, int64_t n_tokens) {
    if (!aligned(x, 16) || ldx % 4 != 0 || (n_tokens > 1 && ldx < cols)) {
        fail("activations must be 16-byte aligned with ldx a multiple of 4, at least cols");
    }
}

// Rows per warp (measured on an H100): two for one or two tokens (activation loads shared by
// two rows: 1.2-1.6 TB/s on the 8B shapes where one row per warp gave 0.9), four from three
// tokens (each activation load feeds four rows' FMAs; at 16-17 tokens the K-quants spill a
// little, still 2-3x faster than two rows per warp). A gated pair (gate and up rows in each
// warp) takes one row per matrix fewer than a plain product, so that a warp's loads stay as many.
constexpr int gemv_rows_per_warp(int tokens, bool gated) {
    return tokens <= 2 ? (gated ? 1 : 2) : (gated ? 2 : 4);
}

// Units per lane in flight. Decode: two units of each row, so a 2048-wide row (64 units) is
// read in one round trip. A step's matrices are a few MiB: the warps are few, and each waiting
// on memory twice left the H100 at a quarter of its bandwidth (Nsight: 23-41% warps active).
constexpr int gemv_units_in_flight(int tokens) {
    return tokens <= 2 ? 2 : 1;
}

// Targets [begin, end) of args take blocks of rows_per_block rows from block `block` on; the
// entries of block_begin after them, to kMaxGemvOuts, the block that follows (returned).
int64_t assign_blocks(GemvArgs& args, int begin, int end, int64_t rows_per_block, int64_t block) {
    for (int m = begin; m < end; ++m) {
        args.block_begin[m] = block;
        block += (args.rows[m] + rows_per_block - 1) / rows_per_block;
    }
    for (int m = end; m <= kMaxGemvOuts; ++m) args.block_begin[m] = block;
    return block;
}

// One instance per token count.
template <class F, int kTokens, GemvEpilogue E>
void launch_gemv_tokens(GemvArgs& args, cudaStream_t stream) {
    constexpr bool kGated = E != GemvEpilogue::Plain;
    constexpr int R = gemv_rows_per_warp(kTokens, kGated);
    constexpr int U = gemv_units_in_flight(kTokens);
    const int targets = kGated ? 1 : args.count;  // a pair's blocks walk the gate's rows
    const int64_t blocks = assign_blocks(args, 0, targets, kWarps / args.split * R, 0);
    if (blocks == 0) return;
    const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(args.token_chunks));
    launch_kernel(gemv_kernel<F, kTokens, R, U, E>, grid, kThreads, 0, stream, args);
}

// The current device's SM count, asked once per launch (the split and the chunk both need it);
// 0 where the runtime cannot say (the launch then takes the shapes that need no count).
int current_sm_count() {
    int device = 0, sms = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return sms;
}

// Warps per row: a row of 128 units or more (4096 elements of the quantized types) may be
// shared by 4 warps, of 64 or more by 2, while the launch's blocks still fit the card at once
// (`rows` the launch's rows in all, 8 a block at one warp per row; 4 blocks an SM). One warp per
// row left the card short of loads in flight on a step's matrices of few rows: an H200 read
// Qwen3.5-0.8B's 1024 x 3584 Q6_K down projection at 0.37 TB/s in 128 blocks (Nsight Compute),
// and the split took its decode from 559 to 595-625 tok/s. Split past one wave of blocks, the
// larger matrices slowed instead (Qwen3-30B-A3B's 5120 x 2048 QKV from 7.4 to 9.3 us). From the
// width and the launch's rows alone, so that a row's sums are added in the same order for any
// number of tokens. EMBER_CUDA_GEMV_SPLIT caps it (1: a warp per row), to measure the trade.
// sms: current_sm_count(); 0 (unknown) keeps a warp per row.
template <class F>
int gemv_split(int64_t cols, int64_t rows, int sms) {
    static const int cap = [] {
        const char* env = std::getenv("EMBER_CUDA_GEMV_SPLIT");
        return env ? std::clamp(std::atoi(env), 1, 4) : 4;
    }();
    if (sms <= 0) return 1;
    const int64_t units = cols / (F::kBlockElems / F::kUnitsPerBlock);
    int split = units >= 128 ? 4 : units >= 64 ? 2 : 1;
    while (split > cap) split /= 2;
    while (split > 1 && rows * split > int64_t{8} * 4 * sms) split /= 2;
    return split;
}

template <class F, GemvEpilogue E, int... kCounts>
void launch_gemv_for(GemvArgs& args, cudaStream_t stream, std::integer_sequence<int, kCounts...>) {
    ((args.n_tokens == kCounts + 1 ? launch_gemv_tokens<F, kCounts + 1, E>(args, stream) : void()),
     ...);
}

// The rows of a launch's matrices (a gated pair's blocks hold gate and up rows).
int64_t launch_rows(const GemvArgs& args) {
    int64_t rows = 0;
    for (int m = 0; m < args.count; ++m) rows += args.rows[m];
    return rows;
}

// split_rows: the rows that set the split (gemv_split), launch_rows(args) but where the matrices
// share a two-format launch at n_tokens == 1 (gemv_many).
template <GemvEpilogue E = GemvEpilogue::Plain>
void launch_gemv(TensorType type, GemvArgs& args, int64_t split_rows, cudaStream_t stream) {
    constexpr int kCounts = E == GemvEpilogue::Plain ? kGemvMaxTokens : kGemvGatedMaxTokens;
    with_format(type, [&](auto fmt) {
        args.split = gemv_split<decltype(fmt)>(args.cols, split_rows, current_sm_count());
        launch_gemv_for<decltype(fmt), E>(args, stream, std::make_integer_sequence<int, kCounts>{});
    });
}

// The types whose matrices share a launch with Q6_K ones at n_tokens == 1 (gemv_two_kernel):
// the Q and K beside the Q6_K V of half the layers of a Q4_K_M or Q5_K_M file. Other pairs take
// a launch per type (each pair is a kernel more to compile).
bool pairs_with_q6_k(TensorType type) {
    return type == TensorType::Q4_K || type == TensorType::Q5_K;
}

// One token of the first_targets matrices of args, of type `first` (pairs_with_q6_k), and of the
// Q6_K ones after them, in one launch. Each format's split is set by the rows of all, as
// gemv_many sets it when it launches them apart (other token counts).
void launch_gemv_two(TensorType first, GemvArgs& args, int first_targets, cudaStream_t stream) {
    const auto launch = [&](auto first_format) {
        using First = decltype(first_format);
        constexpr int R = gemv_rows_per_warp(1, false);
        constexpr int U = gemv_units_in_flight(1);
        const int64_t rows = launch_rows(args);
        const int sms = current_sm_count();
        args.split = gemv_split<First>(args.cols, rows, sms);
        args.second_split = gemv_split<FmtQ6_K>(args.cols, rows, sms);
        args.second_format_block =
            assign_blocks(args, 0, first_targets, kWarps / args.split * R, 0);
        const int64_t blocks =
            assign_blocks(args, first_targets, args.count, kWarps / args.second_split * R,
                          args.second_format_block);
        if (blocks == 0) return;
        launch_kernel(gemv_two_kernel<First, FmtQ6_K, R, U>, static_cast<unsigned>(blocks),
                      kThreads, 0, stream, args);
    };
    if (first == TensorType::Q4_K) {
        launch(FmtQ4_K{});
    } else {
        launch(FmtQ5_K{});
    }
}

void launch_dequantize(const DeviceMatrix& w, DequantArgs args, cudaStream_t stream) {
    check_matrix(w);
    if (!aligned(args.out, 16)) fail("dequantization output not 16-byte aligned");
    if (args.n <= 0) return;
    with_format(w.type, [&](auto fmt) {
        using F = decltype(fmt);
        const int64_t units = w.cols / (F::kBlockElems / F::kUnitsPerBlock);
        const int64_t blocks = (args.n * units + kThreads - 1) / kThreads;
        launch_kernel(dequantize_kernel<F>, static_cast<unsigned>(blocks), kThreads, 0, stream,
                      args);
    });
}

}  // namespace

bool on_tensor_cores(const DeviceMatrix& w) {
    return w.tensor_products && mma_gemv_supports(w.type);
}

bool gemv_supports(TensorType type) {
    return with_format(type, [](auto) {});
}

void gemv(const DeviceMatrix& w, const float* x, int64_t ldx, int64_t n_tokens, float* y,
          int64_t ldy, cudaStream_t stream) {
    GemvOut out;
    out.w = w;
    out.y = y;
    out.ldy = ldy;
    gemv_many(&out, 1, x, ldx, n_tokens, stream);
}

// Matrices of one type share a launch (one per type of a group of mixed types), and at
// n_tokens == 1 Q4_K or Q5_K ones share one with Q6_K ones (pairs_with_q6_k). A row's arithmetic
// is set by its type and split, and the split by the width and the rows of the matrices that
// share its launch at n_tokens == 1, at every token count: a token's bits are the same alone or
// in a batch. (They are those of gemv() on the matrix alone where its split is the same.)
void gemv_many(const GemvOut* outs, int count, const float* x, int64_t ldx, int64_t n_tokens,
               cudaStream_t stream) {
    if (count < 1 || count > kMaxGemvOuts)
        fail("gemv_many takes 1.." + std::to_string(kMaxGemvOuts));
    check_tokens(n_tokens);
    for (int i = 0; i < count; ++i) {
        check_matrix(outs[i].w);
        if (outs[i].w.cols != outs[0].w.cols) fail("gemv_many matrices differ in width");
        if (n_tokens > 1 && outs[i].ldy < outs[i].w.rows) fail("ldy shorter than the rows");
    }
    check_activations(x, ldx, outs[0].w.cols, n_tokens);

    // The matrices by type and gemv (CUDA or tensor cores): group_of[i] numbers outs[i]'s group
    // in the order of the groups' first matrices, group_first[g] the first matrix of group g.
    int group_of[kMaxGemvOuts] = {};
    int group_first[kMaxGemvOuts] = {};
    int groups = 0;
    for (int i = 0; i < count; ++i) {
        group_of[i] = groups;
        for (int g = 0; g < groups; ++g) {
            const DeviceMatrix& first = outs[group_first[g]].w;
            if (first.type == outs[i].w.type &&
                on_tensor_cores(first) == on_tensor_cores(outs[i].w)) {
                group_of[i] = g;
                break;
            }
        }
        if (group_of[i] == groups) group_first[groups++] = i;
    }
    GemvArgs common{};  // what every launch here takes; add_group adds the matrices
    common.cols = outs[0].w.cols;
    common.x = x;
    common.ldx = ldx;
    common.n_tokens = static_cast<int>(n_tokens);
    const auto add_group = [&](int g, GemvArgs& args) {
        for (int i = 0; i < count; ++i) {
            if (group_of[i] != g) continue;
            const int m = args.count++;
            args.data[m] = static_cast<const uint8_t*>(outs[i].w.data);
            args.row_stride[m] = outs[i].w.row_stride;
            args.rows[m] = outs[i].w.rows;
            args.y[m] = outs[i].y;
            args.ldy[m] = outs[i].ldy;
        }
    };

    // The CUDA-core groups of Q4_K (or Q5_K) and of Q6_K matrices, if both are here: one launch at
    // n_tokens == 1, and their splits set by the rows of both at every token count.
    int paired_k = -1, paired_q6_k = -1;
    for (int g = 0; g < groups; ++g) {
        const DeviceMatrix& first = outs[group_first[g]].w;
        if (on_tensor_cores(first)) continue;
        if (paired_k < 0 && pairs_with_q6_k(first.type)) paired_k = g;
        if (first.type == TensorType::Q6_K) paired_q6_k = g;
    }
    const bool paired = paired_k >= 0 && paired_q6_k >= 0;
    GemvArgs pair = common;
    int pair_first_targets = 0;
    if (paired) {
        add_group(paired_k, pair);
        pair_first_targets = pair.count;
        add_group(paired_q6_k, pair);
    }
    if (paired && n_tokens == 1) {
        launch_gemv_two(outs[group_first[paired_k]].w.type, pair, pair_first_targets, stream);
    }
    for (int g = 0; g < groups; ++g) {
        const bool in_pair = paired && (g == paired_k || g == paired_q6_k);
        if (in_pair && n_tokens == 1) continue;
        GemvArgs args = common;
        add_group(g, args);
        const DeviceMatrix& first = outs[group_first[g]].w;
        if (on_tensor_cores(first)) {
            launch_mma_gemv(first.type, args, stream);
        } else {
            launch_gemv(first.type, args, in_pair ? launch_rows(pair) : launch_rows(args), stream);
        }
    }
}

// Tokens a chunk of gemv_chunks takes: kGemvMaxTokens (each row's weights read the fewest times)
// where the launch still has two blocks an SM, else fewer (4 at least: rows per warp stay 4). A
// MoE router has few rows (32 of gpt-oss-20b: 8 blocks a chunk), so 17-token chunks left 120
// blocks of long sums for a 256-token batch, 32.5 us of an H200's 1.2 ms layer. A token's sums
// do not depend on the chunk (nor does the split: gemv_split), so neither do its bits.
int64_t chunk_tokens(const DeviceMatrix& w, int64_t n_tokens) {
    const int sms = current_sm_count();
    if (sms <= 0) return kGemvMaxTokens;
    constexpr int kRowsPerWarp = gemv_rows_per_warp(4, false);
    static_assert(gemv_rows_per_warp(kGemvMaxTokens, false) == kRowsPerWarp);
    int split = 1;
    with_format(w.type, [&](auto fmt) { split = gemv_split<decltype(fmt)>(w.cols, w.rows, sms); });
    const int64_t blocks_per_chunk =
        (w.rows + kWarps / split * kRowsPerWarp - 1) / (kWarps / split * kRowsPerWarp);
    int64_t chunk = kGemvMaxTokens;
    while (chunk > 4 && (n_tokens / chunk) * blocks_per_chunk < 2 * int64_t{sms}) chunk /= 2;
    return std::max<int64_t>(chunk, 4);
}

void gemv_chunks(const DeviceMatrix& w, const float* x, int64_t ldx, int64_t n_tokens, float* y,
                 int64_t ldy, cudaStream_t stream) {
    if (n_tokens < 1) fail("gemv_chunks: no tokens");
    check_matrix(w);
    if (on_tensor_cores(w)) fail("gemv_chunks reads the CUDA-core formats");
    if (n_tokens > 1 && (ldy < w.rows || ldx < w.cols)) fail("gemv_chunks: ldx or ldy too short");
    const int64_t chunk = chunk_tokens(w, n_tokens);
    check_activations(x, ldx, w.cols, std::min(n_tokens, chunk));
    const int64_t whole = n_tokens / chunk;
    if (whole > 65535) fail("gemv_chunks: too many tokens for one launch");
    GemvArgs args{};
    args.count = 1;
    args.cols = w.cols;
    args.ldx = ldx;
    args.data[0] = static_cast<const uint8_t*>(w.data);
    args.row_stride[0] = w.row_stride;
    args.rows[0] = w.rows;
    args.ldy[0] = ldy;
    if (whole > 0) {  // whole chunks: one launch
        args.x = x;
        args.y[0] = y;
        args.n_tokens = static_cast<int>(chunk);
        args.token_chunks = static_cast<int>(whole);
        launch_gemv(w.type, args, launch_rows(args), stream);
    }
    const int64_t rest = n_tokens - whole * chunk;
    if (rest > 0) {
        args.x = x + whole * chunk * ldx;
        args.y[0] = y + whole * chunk * ldy;
        args.n_tokens = static_cast<int>(rest);
        args.token_chunks = 1;
        launch_gemv(w.type, args, launch_rows(args), stream);
    }
}

bool gemv_gated_supports(const DeviceMatrix& gate, const DeviceMatrix& up) {
    // On the tensor cores the pair's two tiles per warp halve the blocks an SM holds (150
    // registers): the two products and the element-wise activation measured faster.
    if (on_tensor_cores(gate) || on_tensor_cores(up)) return false;
    return gemv_supports(gate.type) && gate.type == up.type && gate.rows == up.rows &&
           gate.cols == up.cols && gate.row_stride == up.row_stride;
}

void gemv_gated(const DeviceMatrix& gate, const DeviceMatrix& up, GatedActivation act,
                const float* x, int64_t ldx, int64_t n_tokens, float* y, int64_t ldy,
                cudaStream_t stream) {
    if (!gemv_gated_supports(gate, up)) fail("gemv_gated takes two matrices of one type and shape");
    check_tokens(n_tokens);
    if (n_tokens > kGemvGatedMaxTokens) {
        fail("gemv_gated takes at most " + std::to_string(kGemvGatedMaxTokens) + " tokens");
    }
    check_matrix(gate);
    check_matrix(up);
    if (n_tokens > 1 && ldy < gate.rows) fail("ldy shorter than the rows");
    check_activations(x, ldx, gate.cols, n_tokens);
    GemvArgs args{};
    args.cols = gate.cols;
    args.x = x;
    args.ldx = ldx;
    args.n_tokens = static_cast<int>(n_tokens);
    args.count = 2;
    for (int m = 0; m < 2; ++m) {
        const DeviceMatrix& w = m == 0 ? gate : up;
        args.data[m] = static_cast<const uint8_t*>(w.data);
        args.row_stride[m] = w.row_stride;
        args.rows[m] = w.rows;
        args.y[m] = y;
        args.ldy[m] = ldy;
    }
    switch (act) {
        case GatedActivation::Silu:
            return launch_gemv<GemvEpilogue::Silu>(gate.type, args, launch_rows(args), stream);
        case GatedActivation::GeluTanh:
            return launch_gemv<GemvEpilogue::GeluTanh>(gate.type, args, launch_rows(args), stream);
    }
}

namespace {

// Rows [row0, row0 + rows) of w into `out`, unscaled (DequantArgs of the products' inputs).
DequantArgs rows_args(const DeviceMatrix& w, int64_t row0, int64_t rows, void* out,
                      const char* what) {
    if (row0 < 0 || rows < 0 || row0 + rows > w.rows)
        fail(std::string(what) + ": rows out of range");
    DequantArgs args{};
    args.data = static_cast<const uint8_t*>(w.data);
    args.row_stride = w.row_stride;
    args.rows = w.rows;
    args.cols = w.cols;
    args.row0 = row0;
    args.ids = nullptr;
    args.n = rows;
    args.scale = 1.0f;
    args.out = out;
    return args;
}

}  // namespace

void dequantize_rows(const DeviceMatrix& w, int64_t row0, int64_t rows, float* out,
                     cudaStream_t stream) {
    launch_dequantize(w, rows_args(w, row0, rows, out, "dequantize_rows"), stream);
}

void dequantize_rows_half(const DeviceMatrix& w, int64_t row0, int64_t rows, __half* out,
                          cudaStream_t stream) {
    const DequantArgs args = rows_args(w, row0, rows, out, "dequantize_rows_half");
    check_matrix(w);
    if (!aligned(out, 16)) fail("dequantization output not 16-byte aligned");
    if (rows <= 0) return;
    with_format(w.type, [&](auto fmt) {
        using F = decltype(fmt);
        const int64_t units = rows * (w.cols / (F::kBlockElems / F::kUnitsPerBlock));
        const int64_t blocks = (units + kThreads - 1) / kThreads;
        launch_kernel(dequantize_half_kernel<F>, static_cast<unsigned>(blocks), kThreads, 0, stream,
                      args);
    });
}

float max_abs_weight(const DeviceMatrix& w, cudaStream_t stream) {
    check_matrix(w);
    unsigned* amax = nullptr;
    check_cuda(cudaMallocAsync(reinterpret_cast<void**>(&amax), sizeof(unsigned), stream),
               "max_abs_weight");
    check_cuda(cudaMemsetAsync(amax, 0, sizeof(unsigned), stream), "max_abs_weight");
    const DequantArgs args = rows_args(w, 0, w.rows, nullptr, "max_abs_weight");
    with_format(w.type, [&](auto fmt) {
        using F = decltype(fmt);
        const int64_t units = w.cols / (F::kBlockElems / F::kUnitsPerBlock);
        const int64_t blocks = (args.n * units + kThreads - 1) / kThreads;
        if (blocks > 0)
            launch_kernel(max_abs_kernel<F>, static_cast<unsigned>(blocks), kThreads, 0, stream,
                          args, amax);
    });
    check_launch("max_abs_kernel");
    unsigned bits = 0;
    check_cuda(cudaMemcpyAsync(&bits, amax, sizeof(unsigned), cudaMemcpyDeviceToHost, stream),
               "max_abs_weight");
    check_cuda(cudaFreeAsync(amax, stream), "max_abs_weight");
    check_cuda(cudaStreamSynchronize(stream), "max_abs_weight");
    float value = 0.0f;
    std::memcpy(&value, &bits, sizeof(value));
    return value;
}

void embed_rows(const DeviceMatrix& w, const int32_t* ids, int64_t n, float scale, float* out,
                cudaStream_t stream) {
    if (n < 0) fail("embed_rows: negative count");
    if (n > 0 && ids == nullptr) fail("embed_rows: no ids");
    DequantArgs args{};
    args.data = static_cast<const uint8_t*>(w.data);
    args.row_stride = w.row_stride;
    args.rows = w.rows;
    args.cols = w.cols;
    args.row0 = 0;
    args.ids = ids;
    args.n = n;
    args.scale = scale;
    args.out = out;
    launch_dequantize(w, args, stream);
}

}  // namespace ember::cuda
