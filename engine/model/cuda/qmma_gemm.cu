// The quantized prefill product (qmma_gemm.cuh says what it computes and why).
//
// Layout. A block of kWarps warps takes kBlockRows weight rows (16 a warp) and a tile of NT x 8
// tokens. For each chunk of the width (a 256-element K-quant block; B MXFP4 blocks), the tile's
// activations are copied to shared memory (cp.async, two stages: the next chunk's while this
// one's multiply), and each warp
// loads its rows' bytes with the lane layout of mma_formats.cuh, dequantizes them to f16 in
// registers (the A fragments of m16n8k16) and multiplies them by every token column of the tile
// (B fragments read from shared memory at the same k-slots), summing into f32.
#include <cuda_fp16.h>

#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <string>

#include "engine/model/cuda/cuda_check.cuh"
#include "engine/model/cuda/launch.cuh"
#include "engine/model/cuda/mma_formats.cuh"
#include "engine/model/cuda/qmma_gemm.cuh"
#include "engine/model/cuda/quant_blocks.cuh"

namespace ember::cuda {

namespace {

using namespace blocks;
using namespace mma;

constexpr int kWarps = 4;
constexpr int kWarpRows = 16;
constexpr int kBlockRows = kWarps * kWarpRows;
constexpr int kThreads = 32 * kWarps;
constexpr int kTileTokens = 8;  // the n of one mma
// Most blocks of the width a short batch's product splits into (each split's sums added in
// order afterwards).
constexpr int kMaxSplits = 8;

// Where a block's tokens and weights are.
struct QmmaParams {
    const uint8_t* data = nullptr;  // expert 0's (or the one matrix's) row 0
    size_t row_stride = 0;
    size_t expert_stride = 0;
    int64_t rows = 0;  // of one expert
    int64_t cols = 0;
    int64_t n = 0;  // tokens of the whole product (dense); rows of the scratch's planes
    const __half* x = nullptr;
    int64_t ldx = 0;
    const int32_t* x_rows = nullptr;  // grouped: row t's activations at x_rows[t] / divisor
    int32_t x_row_divisor = 1;
    float* y = nullptr;
    int64_t ldy = 0;
    const float* alpha = nullptr;
    const QmmaTile* tiles = nullptr;  // grouped; null: dense, tile = blockIdx.y
    float* scratch = nullptr;         // [splits][n][rows] when splits > 1
    int splits = 1;
};

// Bytes between two tokens' kChunk halves in shared memory, padded so that the B loads of one
// phase hit different banks: two k-steps (Q4_K, MXFP4) load 16 bytes and a quarter-warp is 2
// tokens x 4 lanes, so a stride of 64 modulo 128; one (Q6_K) loads 8 and a half-warp is 4 x 4,
// so 32 modulo 128.
template <class L>
__host__ __device__ constexpr int stage_stride() {
    constexpr int kWanted = L::kSteps == 2 ? 64 : 32;
    return 2 * L::kChunk + (kWanted - (2 * L::kChunk) % 128 + 128) % 128;
}

template <class L, int NT>
__host__ __device__ constexpr size_t stage_bytes() {
    return static_cast<size_t>(NT * kTileTokens) * stage_stride<L>();
}

__device__ __forceinline__ void cp_async16(void* shared, const void* global) {
    const auto address = static_cast<unsigned>(__cvta_generic_to_shared(shared));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(address), "l"(global));
}

__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n");
}

__device__ __forceinline__ void cp_async_wait_one() {
    asm volatile("cp.async.wait_group 1;\n");
}

// d += A (16 x 16, row) * B (16 x 8, col), f16 inputs, f32 sums.
__device__ __forceinline__ void mma_f16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                        uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t half_pair_bits(float lo, float hi) {
    const __half2 pair = __floats2half2_rn(lo, hi);
    return static_cast<uint32_t>(__half_as_ushort(pair.x)) |
           static_cast<uint32_t>(__half_as_ushort(pair.y)) << 16;
}

// Quant bytes q0..q3 of `word` as the f16 pairs (w0, w1) and (w2, w3), each weight
// fma(scale, q - bias, -offset) in f32 rounded to f16: dequantize_half_kernel's values.
template <int kBias>
__device__ __forceinline__ void dequantize_four(uint32_t word, float scale, float neg_offset,
                                                uint32_t& p01, uint32_t& p23) {
    p01 = half_pair_bits(__fmaf_rn(scale, byte_value<0, kBias>(word), neg_offset),
                         __fmaf_rn(scale, byte_value<1, kBias>(word), neg_offset));
    p23 = half_pair_bits(__fmaf_rn(scale, byte_value<2, kBias>(word), neg_offset),
                         __fmaf_rn(scale, byte_value<3, kBias>(word), neg_offset));
}

// MXFP4 (17-byte blocks of 32 elements at any alignment; gpt-oss's experts): B blocks a chunk
// (widths of 2,880 are 90 blocks, not whole 256s), one scale group each, two k-steps. Lane t
// takes elements 8t .. 8t + 7 of a block (element(g, h, t) as Q4_K's): the low nibbles (t < 2)
// or the high ones (t >= 2) of qs[8 (t % 2) .. + 7].
//
// The weights go to f16 without f32 arithmetic (half_fragments): an e2m1 code's bits, placed in
// an f16's exponent and mantissa, are that f16 times 2^14 exactly (e2m1_as_half), so one f16
// multiply by 2^(e - 113) gives code * 2^(e - 127), rounded once as IEEE rounds: the value
// dequantize_rows_half rounds from f32 (scale 2^(e - 128) times the doubled code, exact in f32).
// That needs 2^(e - 113) to be an f16 (normal or subnormal), e in [89, 128], where trained
// weights' scales lie; a row's block outside it takes the f32 path (dequantize_four). Per four
// weights: ~11 integer and f16 instructions, against ~28 for codes, f32 values and rounding.
// Alone that moved gpt-oss-20b's prefill little on an H200 (8,284 -> 8,401 tok/s): the warps
// were waiting on their loads (Loaded, below says why), which took it to 9,400.
template <int B>
struct QmmaMXFP4 {
    static constexpr int kGroups = B, kSteps = 2, kBias = 12;
    static constexpr int kChunk = 32 * B;
    static constexpr size_t kChunkBytes = sizeof(BlockMXFP4) * B;
    static constexpr bool kHalfFragments = true;
    struct Scales {};  // none held apart: half_fragments reads e from Raw
    struct Raw {
        uint32_t qs[B][2];  // [block][k-step]: the 4 bytes holding its 4 elements' nibbles
        uint32_t e[B];
    };
    // A chunk's bytes as loaded: lane t's 8 bytes of block j are bytes 4 (j + shift) % 4 .. of
    // the aligned words w[j][0..2] (no word past them: w[j][2] is not read where the 8 bytes end
    // on a word). The bytes are put in place (finish) only after the chunk before multiplies:
    // shifting them where they are loaded made each warp wait for the loads right there (ptxas
    // placed the funnel shifts beside the loads), and the next chunk's loads no longer
    // overlapped this one's products (Nsight Compute: 2.0 of the 5.4 cycles between a warp's
    // instructions waiting on global loads, on an H200).
    struct Loaded {
        uint32_t w[B][3];
        uint32_t e[B];
        uint32_t shift;  // block 0's byte offset in its first word
    };
    static __device__ __forceinline__ Loaded fetch(const uint8_t* chunk, int t) {
        static_assert(sizeof(BlockMXFP4) % 4 == 1, "MXFP4: block j's bytes move j bytes a word");
        Loaded loaded;
        const uintptr_t first =
            reinterpret_cast<uintptr_t>(chunk + offsetof(BlockMXFP4, qs) + 8 * (t & 1));
        loaded.shift = static_cast<uint32_t>(first & 3);
#pragma unroll
        for (int j = 0; j < B; ++j) {
            const uint8_t* block = chunk + sizeof(BlockMXFP4) * j;
            loaded.e[j] = __ldg(block + offsetof(BlockMXFP4, e));
            const uintptr_t a = first + sizeof(BlockMXFP4) * j;
            const auto* word = reinterpret_cast<const uint32_t*>(a & ~uintptr_t{3});
            loaded.w[j][0] = __ldg(word);
            loaded.w[j][1] = __ldg(word + 1);
            loaded.w[j][2] = (a & 3) == 0 ? 0u : __ldg(word + 2);
        }
        return loaded;
    }
    static __device__ __forceinline__ Raw finish(const Loaded& loaded) {
        Raw raw;
#pragma unroll
        for (int j = 0; j < B; ++j) {
            const uint32_t bits = 8 * ((loaded.shift + j) & 3);
            raw.qs[j][0] = __funnelshift_r(loaded.w[j][0], loaded.w[j][1], bits);
            raw.qs[j][1] = __funnelshift_r(loaded.w[j][1], loaded.w[j][2], bits);
            raw.e[j] = loaded.e[j];
        }
        return raw;
    }
    static __device__ __forceinline__ int element(int group, int h, int t) {
        return 32 * group + 8 * t + 4 * h;
    }
    // Four nibbles (one per byte) as the high bytes of their f16s times 2^14: magnitude bits
    // e1 e0 m to the exponent's low two bits and the mantissa's top bit (byte bits 3..1), the
    // sign to bit 7 unless the magnitude is 0 (the code -0 is +0.0, as kMXFP4Values has it:
    // magnitude + 0x7f carries into bit 7 exactly when the magnitude is not 0).
    static __device__ __forceinline__ uint32_t e2m1_as_half(uint32_t nibbles) {
        static_assert(kMXFP4Values[8] == 0 && kMXFP4Values[1] == 1 && kMXFP4Values[7] == 12,
                      "MXFP4: e2m1 codes, doubled");
        const uint32_t magnitude = (nibbles << 1) & 0x0e0e0e0eu;
        const uint32_t sign = (nibbles << 4) & 0x80808080u;
        return magnitude | (sign & (magnitude + 0x7f7f7f7fu));
    }
    // Lane t's k-step halves of block `group` of one row: f16 pairs (w0, w1), (w2, w3) of each
    // step, as dequantize_rows_half rounds them.
    static __device__ __forceinline__ void half_fragments(const Raw& raw, int group, int t,
                                                          uint32_t (&p01)[kSteps],
                                                          uint32_t (&p23)[kSteps]) {
        const uint32_t e = raw.e[group];
        const int nibble = 4 * (t >> 1);
        if (e - 89u <= 39u) {
            // 2^(e - 113) as f16 bits: normal from e = 99 (exponent field e - 98), else subnormal.
            const uint32_t bits = e >= 99 ? (e - 98) << 10 : 1u << (e - 89);
            const __half2 scale =
                __halves2half2(__ushort_as_half(static_cast<unsigned short>(bits)),
                               __ushort_as_half(static_cast<unsigned short>(bits)));
#pragma unroll
            for (int h = 0; h < kSteps; ++h) {
                const uint32_t high = e2m1_as_half(raw.qs[group][h] >> nibble);
                const uint32_t pairs[2] = {__byte_perm(high, 0u, 0x1404u),
                                           __byte_perm(high, 0u, 0x3424u)};
                uint32_t products[2];
#pragma unroll
                for (int i = 0; i < 2; ++i) {
                    const __half2 value =
                        __hmul2(*reinterpret_cast<const __half2*>(&pairs[i]), scale);
                    products[i] = *reinterpret_cast<const uint32_t*>(&value);
                }
                p01[h] = products[0];
                p23[h] = products[1];
            }
        } else {
            const float scale = FmtMXFP4::scale(e);
#pragma unroll
            for (int h = 0; h < kSteps; ++h) {
                const uint32_t codes = FmtMXFP4::codes((raw.qs[group][h] >> nibble) & 0x0f0f0f0fu);
                dequantize_four<kBias>(codes, scale, -0.0f, p01[h], p23[h]);
            }
        }
    }
};

// Whether a layout makes its f16 A fragments itself (QmmaMXFP4) rather than through per-group
// f32 scales (the K-quants of mma_formats.cuh).
template <class L>
__host__ __device__ constexpr bool has_half_fragments() {
    if constexpr (requires { L::kHalfFragments; }) {
        return L::kHalfFragments;
    } else {
        return false;
    }
}

// How a layout's rows are loaded for the next chunk: straight into its Raw (load), or, where it
// has a Loaded form (QmmaMXFP4), as loaded words put in place after the chunk before multiplies.
template <class L>
struct RowFetch {
    using Type = typename L::Raw;
    static __device__ __forceinline__ Type load(const uint8_t* chunk, int t) {
        return L::load(chunk, t);
    }
    static __device__ __forceinline__ const typename L::Raw& finish(const Type& raw) { return raw; }
};
template <class L>
requires requires {
    typename L::Loaded;
}
struct RowFetch<L> {
    using Type = typename L::Loaded;
    static __device__ __forceinline__ Type load(const uint8_t* chunk, int t) {
        return L::fetch(chunk, t);
    }
    static __device__ __forceinline__ typename L::Raw finish(const Type& loaded) {
        return L::finish(loaded);
    }
};

// Copies chunk `block` (L::kChunk elements) of the tile's tokens into `stage` from their rows
// of x (x_row: each tile row's first element in x; rows past the tile's last token repeat it,
// their sums are not stored).
template <class L, int NT>
__device__ __forceinline__ void stage_x(unsigned char* stage, const QmmaParams& p,
                                        const int64_t* x_row, int block) {
    constexpr int kRowCopies = 2 * L::kChunk / 16;  // 16 bytes each
    constexpr int kCopies = NT * kTileTokens * kRowCopies;
    for (int c = static_cast<int>(threadIdx.x); c < kCopies; c += kThreads) {
        const int row = c / kRowCopies, copy = c % kRowCopies;
        const __half* src = p.x + x_row[row] + static_cast<int64_t>(block) * L::kChunk + 8 * copy;
        cp_async16(stage + row * stage_stride<L>() + 16 * copy, src);
    }
}

// Adds one chunk of the warp's 16 rows (raw) times every token of the staged tile.
// tiles: the token tiles holding tokens (a grouped tile of an expert with few rows skips the
// others; the test is the same for the whole warp).
template <class L, int NT>
__device__ __forceinline__ void multiply_block(const typename L::Raw (&raw)[2],
                                               const unsigned char* stage, int lane, int tiles,
                                               float (&acc)[NT][4]) {
    const int g = lane >> 2, t = lane & 3;
    typename L::Scales scales[2];
    if constexpr (!has_half_fragments<L>()) {
#pragma unroll
        for (int half = 0; half < 2; ++half) scales[half] = L::own_scales(raw[half], t);
    }
#pragma unroll
    for (int group = 0; group < L::kGroups; ++group) {
        uint32_t a[L::kSteps][4];
        if constexpr (has_half_fragments<L>()) {
            uint32_t p01[2][L::kSteps], p23[2][L::kSteps];
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                L::half_fragments(raw[half], group, t, p01[half], p23[half]);
            }
#pragma unroll
            for (int h = 0; h < L::kSteps; ++h) {
                a[h][0] = p01[0][h], a[h][2] = p23[0][h];
                a[h][1] = p01[1][h], a[h][3] = p23[1][h];
            }
        } else {
            float scale[2], offset[2];
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                L::scale(raw[half], scales[half], group, lane, scale[half], offset[half]);
            }
#pragma unroll
            for (int h = 0; h < L::kSteps; ++h) {
                dequantize_four<L::kBias>(L::quants(raw[0], group, h), scale[0], -offset[0],
                                          a[h][0], a[h][2]);
                dequantize_four<L::kBias>(L::quants(raw[1], group, h), scale[1], -offset[1],
                                          a[h][1], a[h][3]);
            }
        }
        // Lane (g, t)'s B: token column g, the 4 (Q6_K) or 8 (Q4_K, both k-steps) elements from
        // L::element(group, 0, t). The B fragments of up to 8 token tiles first, then the
        // k-steps in turn, so that consecutive mmas add into different token tiles (more tiles
        // go 4 at a time: all their fragments at once would not fit the registers).
        const unsigned char* column = stage + g * stage_stride<L>() + 2 * L::element(group, 0, t);
        constexpr int kAtOnce = NT > 8 ? 4 : NT;
#pragma unroll
        for (int nt0 = 0; nt0 < NT; nt0 += kAtOnce) {
            uint32_t bx[kAtOnce][2 * L::kSteps];
#pragma unroll
            for (int i = 0; i < kAtOnce; ++i) {
                if (nt0 + i >= tiles) break;
                const unsigned char* b = column + (nt0 + i) * kTileTokens * stage_stride<L>();
                if constexpr (L::kSteps == 2) {
                    const uint4 v = *reinterpret_cast<const uint4*>(b);
                    bx[i][0] = v.x, bx[i][1] = v.y, bx[i][2] = v.z, bx[i][3] = v.w;
                } else {
                    const uint2 v = *reinterpret_cast<const uint2*>(b);
                    bx[i][0] = v.x, bx[i][1] = v.y;
                }
            }
#pragma unroll
            for (int h = 0; h < L::kSteps; ++h) {
#pragma unroll
                for (int i = 0; i < kAtOnce; ++i) {
                    if (nt0 + i < tiles) {
                        mma_f16(acc[nt0 + i], a[h], bx[i][2 * h], bx[i][2 * h + 1]);
                    }
                }
            }
        }
    }
}

// Three blocks an SM (their two stages of 64 tokens take 72 KiB of shared memory each); two for
// tiles of 80 or 96 tokens, whose stages take 90 or 108 KiB, so their registers may grow.
template <class L, int NT>
__global__ void __launch_bounds__(kThreads, NT > 8 ? 2 : 3) qmma_kernel(const QmmaParams p) {
    await_previous_grid();
    extern __shared__ __align__(16) unsigned char stages[];  // [2][NT * 8][stage_stride]
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;

    int64_t tok0;
    int count;
    const uint8_t* matrix = p.data;
    if (p.tiles != nullptr) {
        const QmmaTile tile = p.tiles[blockIdx.y];
        if (tile.count <= 0) return;  // a slot past the batch's tiles (moe_group_pairs)
        tok0 = tile.row0;
        count = tile.count;
        matrix += static_cast<size_t>(tile.expert) * p.expert_stride;
    } else {
        tok0 = static_cast<int64_t>(blockIdx.y) * NT * kTileTokens;
        count = static_cast<int>(min(static_cast<int64_t>(NT * kTileTokens), p.n - tok0));
    }
    const int tiles = (count + kTileTokens - 1) / kTileTokens;
    // Where each tile row's activations start in x, read once here for every chunk's copies.
    __shared__ int64_t x_row[NT * kTileTokens];
    for (int row = static_cast<int>(threadIdx.x); row < NT * kTileTokens; row += kThreads) {
        const int64_t t = tok0 + min(row, count - 1);
        x_row[row] = (p.x_rows ? p.x_rows[t] / p.x_row_divisor : t) * p.ldx;
    }
    __syncthreads();
    const int blocks = static_cast<int>(p.cols / L::kChunk);
    const int first = static_cast<int>(static_cast<int64_t>(blockIdx.z) * blocks / p.splits);
    const int end = static_cast<int>(static_cast<int64_t>(blockIdx.z + 1) * blocks / p.splits);

    // Rows g and g + 8 of the warp's 16; rows past the end read the last row and store nothing.
    const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kBlockRows + warp * kWarpRows;
    const uint8_t* row_data[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int64_t row = min(row0 + half * 8 + g, static_cast<int64_t>(p.rows - 1));
        row_data[half] = matrix + static_cast<size_t>(row) * p.row_stride;
    }

    float acc[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[nt][i] = 0.0f;
    }

    // The rows' bytes of the next chunk (256 elements; MXFP4's 32 B elements) are loaded into
    // registers while this one multiplies, as its activations are into the other stage.
    constexpr size_t kStage = stage_bytes<L, NT>();
    using Fetched = RowFetch<L>;
    typename L::Raw raw[2];
    const auto load_rows = [&](typename Fetched::Type(&into)[2], int b) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            into[half] = Fetched::load(row_data[half] + static_cast<size_t>(b) * L::kChunkBytes, t);
        }
    };
    if (first < end) {
        stage_x<L, NT>(stages, p, x_row, first);
        typename Fetched::Type loaded[2];
        load_rows(loaded, first);
#pragma unroll
        for (int half = 0; half < 2; ++half) raw[half] = Fetched::finish(loaded[half]);
    }
    cp_async_commit();
    for (int b = first; b < end; ++b) {
        const int s = (b - first) & 1;
        if (b + 1 < end) stage_x<L, NT>(stages + (s ^ 1) * kStage, p, x_row, b + 1);
        cp_async_commit();
        typename Fetched::Type next[2];
        if (b + 1 < end) load_rows(next, b + 1);
        cp_async_wait_one();
        __syncthreads();
        multiply_block<L, NT>(raw, stages + s * kStage, lane, tiles, acc);
        __syncthreads();  // the stage is read before the next iteration refills it
#pragma unroll
        for (int half = 0; half < 2; ++half) raw[half] = Fetched::finish(next[half]);
    }

    // D element i of token tile nt: row row0 + g + 8 (i / 2), token 8 nt + 2t + i % 2.
    const float alpha = p.splits == 1 ? __ldg(p.alpha) : 1.0f;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int token = nt * kTileTokens + 2 * t + (i & 1);
            const int64_t row = row0 + 8 * (i >> 1) + g;
            if (token >= count || row >= p.rows) continue;
            if (p.splits == 1) {
                p.y[(tok0 + token) * p.ldy + row] = __fmul_rn(acc[nt][i], alpha);
            } else {
                p.scratch[(static_cast<int64_t>(blockIdx.z) * p.n + tok0 + token) * p.rows + row] =
                    acc[nt][i];
            }
        }
    }
}

// y[t][r] = alpha * (the splits' sums of (t, r), added in split order).
__global__ void add_splits_kernel(const QmmaParams p) {
    await_previous_grid();
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= p.n * p.rows) return;
    const int64_t token = i / p.rows, row = i % p.rows;
    float sum = p.scratch[i];
    for (int s = 1; s < p.splits; ++s) sum = __fadd_rn(sum, p.scratch[s * p.n * p.rows + i]);
    p.y[token * p.ldy + row] = __fmul_rn(sum, __ldg(p.alpha));
}

template <class L, int NT>
void launch(const QmmaParams& p, int64_t tiles, cudaStream_t stream) {
    auto* kernel = qmma_kernel<L, NT>;
    const size_t shared = 2 * stage_bytes<L, NT>();
    if (shared > 48 * 1024) {
        EMBER_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              static_cast<int>(shared)));
    }
    const dim3 grid(static_cast<unsigned>((p.rows + kBlockRows - 1) / kBlockRows),
                    static_cast<unsigned>(tiles), static_cast<unsigned>(p.splits));
    launch_kernel(kernel, grid, kThreads, shared, stream, p);
}

// Tiles a dense batch of n tokens takes: one of 32, 64, 80 or 96 tokens for a batch that fits
// one (the weights are read and dequantized once a tile, so 65 tokens in tiles of 64 would cost
// nearly twice 64; a tile's mma work grows with its width, so 65 to 80 tokens take 80, not 96:
// the 8B's 64-token prompt took 12.0 ms to its first token, 65 tokens in a tile of 96 17.8, on
// an H200), else tiles of 64.
int64_t dense_tiles(int64_t n) {
    return n <= 12 * kTileTokens ? 1 : (n + kQmmaTileTokens - 1) / kQmmaTileTokens;
}

template <class L>
void launch_dense(const QmmaParams& p, cudaStream_t stream) {
    const int64_t tiles = dense_tiles(p.n);
    if (tiles > 1) return launch<L, 8>(p, tiles, stream);
    if (p.n <= 4 * kTileTokens) return launch<L, 4>(p, 1, stream);
    if (p.n <= 8 * kTileTokens) return launch<L, 8>(p, 1, stream);
    if (p.n <= 10 * kTileTokens) return launch<L, 10>(p, 1, stream);
    launch<L, 12>(p, 1, stream);
}

// Elements of one MXFP4 chunk for a width: 5 blocks where they divide it (2,880), else 4
// (every multiple of 128), else 1.
int64_t mxfp4_chunk_blocks(int64_t cols) {
    const int64_t blocks = cols / 32;
    return blocks % 5 == 0 ? 5 : (blocks % 4 == 0 ? 4 : 1);
}

bool k_quant_product(const DeviceMatrix& w) {
    return (w.type == TensorType::Q4_K || w.type == TensorType::Q6_K) && w.cols % kQK_K == 0;
}

QmmaParams params_of(const DeviceMatrix& w, const QmmaOperands& op) {
    QmmaParams p;
    p.data = static_cast<const uint8_t*>(w.data);
    p.row_stride = w.row_stride;
    p.rows = w.rows;
    p.cols = w.cols;
    p.x = op.x;
    p.ldx = op.ldx;
    p.x_rows = op.x_rows;
    p.x_row_divisor = op.x_row_divisor;
    p.y = op.y;
    p.ldy = op.ldy;
    p.alpha = op.alpha;
    return p;
}

// How many parts the width splits into: enough blocks for two a SM, at least two 256-element
// blocks a part.
int splits_for(const DeviceMatrix& w, int64_t n, int sm_count) {
    const int64_t blocks = (w.rows + kBlockRows - 1) / kBlockRows * dense_tiles(n);
    const int64_t wanted = (2 * static_cast<int64_t>(sm_count) + blocks - 1) / blocks;
    const int64_t most = std::max<int64_t>(1, w.cols / kQK_K / 2);  // Q4_K, Q6_K
    return static_cast<int>(std::clamp<int64_t>(wanted, 1, std::min<int64_t>(kMaxSplits, most)));
}

}  // namespace

bool qmma_supports(const DeviceMatrix& w) {
    return k_quant_product(w);
}

bool qmma_grouped_supports(const DeviceMatrix& w) {
    return k_quant_product(w) || (w.type == TensorType::MXFP4 && w.cols % 32 == 0);
}

int64_t qmma_scratch_floats(const DeviceMatrix& w, int64_t n, int sm_count) {
    const int splits = splits_for(w, n, sm_count);
    return splits > 1 ? splits * n * w.rows : 0;
}

int64_t qmma_scratch_floats_upto(const DeviceMatrix& w, int64_t max_n, int sm_count) {
    int64_t most = 0;
    for (int64_t n = 1; n <= max_n; ++n) most = std::max(most, qmma_scratch_floats(w, n, sm_count));
    return most;
}

void qmma_gemm(const DeviceMatrix& w, const QmmaOperands& op, int64_t n, float* scratch,
               int sm_count, cudaStream_t stream) {
    if (!qmma_supports(w)) {
        throw std::invalid_argument("qmma: no kernel for a " + std::string(type_info(w.type).name) +
                                    " matrix " + std::to_string(w.cols) + " wide");
    }
    if (op.x_rows != nullptr) throw std::invalid_argument("qmma: rows by index are grouped only");
    if (n <= 0) return;
    QmmaParams p = params_of(w, op);
    p.n = n;
    p.splits = splits_for(w, n, sm_count);
    p.scratch = scratch;
    if (p.splits > 1 && scratch == nullptr) throw std::invalid_argument("qmma: no scratch");
    if (w.type == TensorType::Q4_K) {
        launch_dense<MmaQ4_K>(p, stream);
    } else {
        launch_dense<MmaQ6_K>(p, stream);
    }
    if (p.splits > 1) {
        constexpr int kAddThreads = 256;
        const int64_t outputs = n * w.rows;
        launch_kernel(add_splits_kernel,
                      static_cast<unsigned>((outputs + kAddThreads - 1) / kAddThreads), kAddThreads,
                      0, stream, p);
    }
}

void qmma_gemm_grouped(const DeviceMatrix& expert0, size_t expert_stride, const QmmaOperands& op,
                       const QmmaTile* tiles, int n_tiles, cudaStream_t stream) {
    if (!qmma_grouped_supports(expert0)) {
        throw std::invalid_argument("qmma: no grouped kernel for a " +
                                    std::string(type_info(expert0.type).name) + " matrix " +
                                    std::to_string(expert0.cols) + " wide");
    }
    if (op.x_row_divisor < 1) throw std::invalid_argument("qmma: a row divisor below 1");
    if (n_tiles <= 0) return;
    QmmaParams p = params_of(expert0, op);
    p.expert_stride = expert_stride;
    p.tiles = tiles;
    switch (expert0.type) {
        case TensorType::Q4_K:
            return launch<MmaQ4_K, 8>(p, n_tiles, stream);
        case TensorType::Q6_K:
            return launch<MmaQ6_K, 8>(p, n_tiles, stream);
        default:  // MXFP4
            switch (mxfp4_chunk_blocks(expert0.cols)) {
                case 5:
                    return launch<QmmaMXFP4<5>, 8>(p, n_tiles, stream);
                case 4:
                    return launch<QmmaMXFP4<4>, 8>(p, n_tiles, stream);
                default:
                    return launch<QmmaMXFP4<1>, 8>(p, n_tiles, stream);
            }
    }
}

}  // namespace ember::cuda
