// The tensor-core gemv (mma_gemv.cuh says why it is exact and batch-invariant).
//
// Layout. One mma.sync.m16n8k16 multiplies a tile of 16 weight rows by 16 elements (A, bf16
// quants) with 8 tokens' activations over the same elements (B, bf16 pieces), summing into f32.
// In a warp, lane = 4g + t holds A's rows g and g + 8 at k-slots {2t, 2t+1, 2t+8, 2t+9}, B's
// token column g at the same k-slots, and D's rows g, g + 8 at token columns 2t, 2t + 1. Which
// element of the row fills which k-slot is free, as long as A and B agree: each format maps the
// slots of lane t onto 4 contiguous elements of one scale group (L::element), so a lane's quants
// are whole bytes of the block and its activations one float4.
//
// A block of kMmaWarps warps takes a tile of 16 rows; warp w takes the 256-element blocks w, w +
// kMmaWarps, ... of every row, so the warps of a block read different bytes, and their sums meet in
// shared memory in warp order. Per scale group a fresh tile sum D = sum over the group's k-steps of
// quants x (lo, mid, hi) pieces, then acc = fma(d * sc, D, acc) and, for the formats with offsets,
// acc = fma(-dmin * m, sum of the group's activations, acc). No step depends on the number of
// tokens.
#include <cuda_bf16.h>

#include <cstddef>
#include <stdexcept>
#include <string>

#include "engine/model/cuda/cuda_check.cuh"
#include "engine/model/cuda/launch.cuh"
#include "engine/model/cuda/mma_formats.cuh"
#include "engine/model/cuda/mma_gemv.cuh"
#include "engine/model/cuda/quant_blocks.cuh"

namespace ember::cuda {

namespace {

using namespace blocks;
using namespace mma;

constexpr int kTileRows = 16;
constexpr int kTileTokens = 8;
// Warps of a block, each taking every kMmaWarps-th 256-element block of the rows: a fixed split
// of the sums (it sets their order), measured best at 8 among 4, 8 and 16 on the 8B shape.
constexpr int kMmaWarps = 8;

static_assert(kGemvMaxTokens <= 3 * kTileTokens, "token tiles are instantiated for 1..3");

// ---------------------------------------------------------------------------------------------
// bf16 pairs.

__device__ __forceinline__ uint32_t bits_of(__nv_bfloat162 v) {
    return static_cast<uint32_t>(__bfloat16_as_ushort(v.x)) |
           static_cast<uint32_t>(__bfloat16_as_ushort(v.y)) << 16;
}

__device__ __forceinline__ __nv_bfloat162 pair_of(uint32_t bits) {
    return __halves2bfloat162(__ushort_as_bfloat16(static_cast<unsigned short>(bits & 0xffffu)),
                              __ushort_as_bfloat16(static_cast<unsigned short>(bits >> 16)));
}

// (x0, x1) as P bf16 pairs whose sum is x: each piece the next 8 significand bits of what the
// ones before left (the differences are exact in f32), so three pieces hold x exactly and two
// hold it to 2^-17.
template <int P>
struct SplitPair {
    uint32_t piece[P];  // hi first
};

template <int P>
__device__ __forceinline__ SplitPair<P> split_pair(float x0, float x1) {
    SplitPair<P> out;
#pragma unroll
    for (int k = 0; k < P; ++k) {
        const __nv_bfloat162 piece = __floats2bfloat162_rn(x0, x1);
        out.piece[k] = bits_of(piece);
        if (k + 1 < P) {
            const float2 f = __bfloat1622float2(piece);
            x0 = __fsub_rn(x0, f.x);
            x1 = __fsub_rn(x1, f.y);
        }
    }
    return out;
}

// Quant bytes q0..q3 (each < 128) as the bf16 pairs (q0, q1) and (q2, q3) minus `bias`:
// 0x43 above a byte qq is the bf16 of 128 + qq, and subtracting 128 + bias is exact.
__device__ __forceinline__ void quant_pairs(uint32_t q, __nv_bfloat162 bias128, uint32_t& p01,
                                            uint32_t& p23) {
    p01 = bits_of(__hsub2(pair_of(__byte_perm(q, 0x43434343u, 0x5140)), bias128));
    p23 = bits_of(__hsub2(pair_of(__byte_perm(q, 0x43434343u, 0x5342)), bias128));
}

// d += A (16 x 16, row) * B (16 x 8, col), f32 sums.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// ---------------------------------------------------------------------------------------------
// The kernel. NT: token tiles of 8 (one instance each); W: warps a block (they split each row's
// sums, so W sets their order); P: pieces an activation splits into.

// Four activations of one token as the B halves of a k-step (pairs (x, y) and (z, w), each as
// its P pieces), and their sum added to `part` in order.
template <class L, int P>
__device__ __forceinline__ void split_four(const float4& v, uint32_t (&pieces)[P][2], float& part) {
    const SplitPair<P> p01 = split_pair<P>(v.x, v.y);
    const SplitPair<P> p23 = split_pair<P>(v.z, v.w);
#pragma unroll
    for (int k = 0; k < P; ++k) {
        pieces[k][0] = p01.piece[k];
        pieces[k][1] = p23.piece[k];
    }
    if constexpr (L::kHasOffset) {
        part = __fadd_rn(__fadd_rn(__fadd_rn(__fadd_rn(part, v.x), v.y), v.z), v.w);
    }
}

// The sum of a quad's parts (lanes 4c .. 4c + 3), the same bits in each of its lanes.
__device__ __forceinline__ float quad_sum(float part) {
    part = __fadd_rn(part, __shfl_xor_sync(kFullMask, part, 1));
    return __fadd_rn(part, __shfl_xor_sync(kFullMask, part, 2));
}

// One warp's activations of one 256-element block for up to 8 tokens, split into pieces and
// laid out as B fragments (token, group, piece, lane t, the group's k-steps), each token's
// row padded so that the lanes of one load phase read different banks (8 lanes of two tokens
// for 16-byte fragments, 16 lanes of four tokens for 8-byte ones); and for the formats with
// offsets, each token's sum over each group.
template <class L, int P>
struct StagedX {
    static constexpr int kFragmentWords = 2 * L::kSteps;  // u32 per (group, piece, lane)
    static constexpr int kTokenWords =
        L::kGroups * P * 4 * kFragmentWords + (kFragmentWords == 4 ? 16 : 8);
    static_assert(L::kGroups * P * 4 * kFragmentWords % 32 == 0);
    uint32_t* pieces;  // [n][kTokenWords]
    float* group_sum;  // [n][kGroups]

    // A warp's share of shared memory for n tokens (a multiple of 16 bytes).
    static __host__ __device__ size_t warp_bytes(int n) {
        return (static_cast<size_t>(n) * (kTokenWords + L::kGroups) * 4 + 15) / 16 * 16;
    }
    __device__ StagedX(unsigned char* shared, int warp, int n) {
        pieces = reinterpret_cast<uint32_t*>(shared + warp * warp_bytes(n));
        group_sum = reinterpret_cast<float*>(pieces + n * kTokenWords);
    }
    __device__ uint32_t* fragment(int u, int group, int k, int t) const {
        return pieces + u * kTokenWords + ((group * P + k) * 4 + t) * kFragmentWords;
    }
};

// Splits block b of the first n (<= 8) tokens into `staged`: lane L takes elements
// 8L .. 8L + 7 of each token (one lane of one group for Q4_K: the same sums, in the same order,
// as the lanes of split_fragments below).
template <class L, int P>
__device__ __forceinline__ void stage_x(const GemvArgs& args, int64_t x0, int lane,
                                        const StagedX<L, P>& staged) {
    for (int u = 0; u < args.n_tokens; ++u) {
        const float* x = args.x + static_cast<int64_t>(u) * args.ldx + x0 + 8 * lane;
        float part = 0.0f;
#pragma unroll
        for (int c = 0; c < 2; ++c) {
            int group, h, t;
            L::locate(8 * lane + 4 * c, group, h, t);
            uint32_t pieces[P][2];
            split_four<L, P>(__ldg(reinterpret_cast<const float4*>(x + 4 * c)), pieces, part);
#pragma unroll
            for (int k = 0; k < P; ++k) {
                uint32_t* fragment = staged.fragment(u, group, k, t);
                fragment[2 * h] = pieces[k][0];
                fragment[2 * h + 1] = pieces[k][1];
            }
        }
        if constexpr (L::kHasOffset) {
            part = quad_sum(part);
            if ((lane & 3) == 0) staged.group_sum[u * L::kGroups + (lane >> 2)] = part;
        }
    }
}

// The B fragments of `group` (one token tile) from `staged`, and the group sums of this lane's
// D columns 2t, 2t + 1.
template <class L, int P>
__device__ __forceinline__ void load_staged(const StagedX<L, P>& staged, int n_tokens, int group,
                                            int g, int t, uint32_t (&bx)[1][L::kSteps][P][2],
                                            float (&xsum)[1][2]) {
    constexpr int kWords = StagedX<L, P>::kFragmentWords;
#pragma unroll
    for (int k = 0; k < P; ++k) {
        uint32_t words[kWords] = {};
        if (g < n_tokens) {
            const uint32_t* fragment = staged.fragment(g, group, k, t);
            if constexpr (kWords == 4) {
                const uint4 v = *reinterpret_cast<const uint4*>(fragment);
                words[0] = v.x, words[1] = v.y, words[2] = v.z, words[3] = v.w;
            } else {
                const uint2 v = *reinterpret_cast<const uint2*>(fragment);
                words[0] = v.x, words[1] = v.y;
            }
        }
#pragma unroll
        for (int h = 0; h < L::kSteps; ++h) {
            bx[0][h][k][0] = words[2 * h];
            bx[0][h][k][1] = words[2 * h + 1];
        }
    }
    if constexpr (L::kHasOffset) {
        const float* sums = staged.group_sum + group;
        xsum[0][0] = 2 * t < n_tokens ? sums[2 * t * L::kGroups] : 0.0f;
        xsum[0][1] = 2 * t + 1 < n_tokens ? sums[(2 * t + 1) * L::kGroups] : 0.0f;
    }
}

// The B fragments of `group` for each token tile, split by the lane that holds them (every
// lane of the warp, so with n <= 8 most lanes split zeros: stage_x does that work once).
template <class L, int NT, int P>
__device__ __forceinline__ void split_fragments(const float* const (&x_col)[NT],
                                                const bool (&has_col)[NT], int64_t x0, int group,
                                                int t, uint32_t (&bx)[NT][L::kSteps][P][2],
                                                float (&xsum)[NT][2]) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        float part = 0.0f;
#pragma unroll
        for (int h = 0; h < L::kSteps; ++h) {
            float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (has_col[nt]) {
                v = __ldg(
                    reinterpret_cast<const float4*>(x_col[nt] + x0 + L::element(group, h, t)));
            }
            split_four<L, P>(v, bx[nt][h], part);
        }
        if constexpr (L::kHasOffset) {
            part = quad_sum(part);
            // Lanes 4c .. 4c + 3 hold token column c's sum; D's columns here: 2t, 2t + 1.
            xsum[nt][0] = __shfl_sync(kFullMask, part, 8 * t);
            xsum[nt][1] = __shfl_sync(kFullMask, part, 8 * t + 4);
        }
    }
}

// Adds group `group` of a 256-element block to acc: the quants of rows g and g + 8 as A
// fragments, one tile sum per token tile, then the rows' scale and offset.
template <class L, int NT, int P>
__device__ __forceinline__ void multiply_group(const typename L::Raw (&raw)[2],
                                               const typename L::Scales (&scales)[2], int group,
                                               int lane, __nv_bfloat162 bias128,
                                               const uint32_t (&bx)[NT][L::kSteps][P][2],
                                               const float (&xsum)[NT][2], float (&acc)[NT][4]) {
    uint32_t a[L::kSteps][4];
#pragma unroll
    for (int h = 0; h < L::kSteps; ++h) {
        quant_pairs(L::quants(raw[0], group, h), bias128, a[h][0], a[h][2]);
        quant_pairs(L::quants(raw[1], group, h), bias128, a[h][1], a[h][3]);
    }
    float scale[2], offset[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        L::scale(raw[half], scales[half], group, lane, scale[half], offset[half]);
    }
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        // One sum per piece (short chains: one chain of all six measured 10% slower at 16
        // tokens), then the pieces smallest first.
        float d[P][4];
#pragma unroll
        for (int k = 0; k < P; ++k) {
#pragma unroll
            for (int i = 0; i < 4; ++i) d[k][i] = 0.0f;
#pragma unroll
            for (int h = 0; h < L::kSteps; ++h) {
                mma_bf16(d[k], a[h], bx[nt][h][k][0], bx[nt][h][k][1]);
            }
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            float sum = d[P - 1][i];
#pragma unroll
            for (int k = P - 2; k >= 0; --k) sum = __fadd_rn(sum, d[k][i]);
            const int half = i >> 1;
            acc[nt][i] = __fmaf_rn(scale[half], sum, acc[nt][i]);
            if constexpr (L::kHasOffset) {
                acc[nt][i] = __fmaf_rn(-offset[half], xsum[nt][i & 1], acc[nt][i]);
            }
        }
    }
}

// The sums of a block's warps in warp order, stored by warp 0: D element i of token tile nt is
// row row0 + g + 8 (i / 2), token 8 nt + 2t + i % 2.
template <int NT, int W>
__device__ __forceinline__ void store_sums(float (&acc)[NT][4], const GemvTarget& target,
                                           int64_t row0, int n_tokens, int warp, int lane) {
    const int g = lane >> 2, t = lane & 3;
    __shared__ float partial[W][NT][4][32];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
        for (int i = 0; i < 4; ++i) partial[warp][nt][i][lane] = acc[nt][i];
    }
    __syncthreads();
    if (warp != 0) return;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            float sum = partial[0][nt][i][lane];
#pragma unroll
            for (int w = 1; w < W; ++w) sum = __fadd_rn(sum, partial[w][nt][i][lane]);
            const int token = nt * kTileTokens + 2 * t + (i & 1);
            const int64_t row = row0 + 8 * (i >> 1) + g;
            if (token < n_tokens && row < target.rows) {
                target.y[static_cast<int64_t>(token) * target.ldy + row] = sum;
            }
        }
    }
}

// Adds 256-element block b of the tile's rows (its bytes in `raw`) to acc.
template <class L, int NT, int P>
__device__ __forceinline__ void multiply_block(const GemvArgs& args,
                                               const typename L::Raw (&raw)[2], int b, int lane,
                                               __nv_bfloat162 bias128, const StagedX<L, P>& staged,
                                               const float* const (&x_col)[NT],
                                               const bool (&has_col)[NT], float (&acc)[NT][4]) {
    constexpr bool kStaged = NT == 1;
    const int g = lane >> 2, t = lane & 3;
    typename L::Scales scales[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) scales[half] = L::own_scales(raw[half], t);
    const int64_t x0 = static_cast<int64_t>(b) * kQK_K;
    if constexpr (kStaged) {
        __syncwarp();  // the previous block's fragments are read
        stage_x<L, P>(args, x0, lane, staged);
        __syncwarp();
    }
#pragma unroll
    for (int group = 0; group < L::kGroups; ++group) {
        uint32_t bx[NT][L::kSteps][P][2];
        float xsum[NT][2];
        if constexpr (kStaged) {
            load_staged<L, P>(staged, args.n_tokens, group, g, t, bx, xsum);
        } else {
            split_fragments<L, NT, P>(x_col, has_col, x0, group, t, bx, xsum);
        }
        multiply_group<L, NT, P>(raw, scales, group, lane, bias128, bx, xsum, acc);
    }
}

// Up to 128 registers, two blocks (16 warps) an SM. Measured on the 8B shape against the
// alternatives (ms a step at 1 / 4 / 8 tokens): three blocks at 80 registers 5.02 / 6.85 /
// 9.68, two 4.99 / 6.79 / 9.40, four at 64 registers (spilling) 5.49 / 7.86 / 11.0, and each
// warp loading two 256-element blocks before multiplying the first 5.24 / 7.12 / 10.0.
template <class L, int NT, int W, int P>
__global__ void __launch_bounds__(32 * W, 2) mma_gemv_kernel(const GemvArgs args) {
    await_previous_grid();
    constexpr bool kStaged = NT == 1;
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const GemvTarget target = pick_target(args);
    const int64_t row0 = (blockIdx.x - target.block_begin) * kTileRows;
    if (row0 >= target.rows) return;  // the whole block

    // Rows g and g + 8; rows past the end read the last row and store nothing.
    const uint8_t* row_data[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int64_t row = min(row0 + half * 8 + g, target.rows - 1);
        row_data[half] = target.data + static_cast<size_t>(row) * target.row_stride;
    }
    // This lane's B column in token tile nt: token 8 nt + g (zeros past the last token).
    const float* x_col[NT];
    bool has_col[NT];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        const int token = nt * kTileTokens + g;
        has_col[nt] = token < args.n_tokens;
        x_col[nt] = args.x + static_cast<int64_t>(has_col[nt] ? token : 0) * args.ldx;
    }
    const __nv_bfloat162 bias128 =
        __floats2bfloat162_rn(128.0f + L::kBias, 128.0f + L::kBias);  // exact
    extern __shared__ __align__(16) unsigned char staged_bytes[];
    const StagedX<L, P> staged(staged_bytes, warp, kStaged ? args.n_tokens : 0);

    float acc[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[nt][i] = 0.0f;
    }

    const int blocks_per_row = static_cast<int>(args.cols / kQK_K);
    for (int b = warp; b < blocks_per_row; b += W) {
        typename L::Raw raw[2];
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            raw[half] =
                L::load(row_data[half] + static_cast<size_t>(b) * sizeof(typename L::Block), t);
        }
        multiply_block<L, NT, P>(args, raw, b, lane, bias128, staged, x_col, has_col, acc);
    }
    store_sums<NT, W>(acc, target, row0, args.n_tokens, warp, lane);
}

template <class L, int NT>
void launch_tiles(GemvArgs& args, cudaStream_t stream) {
    constexpr int kPieces = 3;
    int64_t blocks = 0;
    for (int m = 0; m < args.count; ++m) {
        args.block_begin[m] = blocks;
        blocks += (args.rows[m] + kTileRows - 1) / kTileRows;
    }
    for (int m = args.count; m <= kMaxGemvOuts; ++m) args.block_begin[m] = blocks;
    if (blocks == 0) return;
    auto* kernel = mma_gemv_kernel<L, NT, kMmaWarps, kPieces>;
    // One token tile stages its activations per warp (StagedX); more tiles split in registers.
    const size_t staged_bytes =
        NT == 1 ? kMmaWarps * StagedX<L, kPieces>::warp_bytes(args.n_tokens) : 0;
    if (staged_bytes > 48 * 1024) {
        EMBER_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              static_cast<int>(staged_bytes)));
    }
    launch_kernel(kernel, static_cast<unsigned>(blocks), 32 * kMmaWarps, staged_bytes, stream,
                  args);
}

template <class L>
void launch_format(GemvArgs& args, cudaStream_t stream) {
    switch ((args.n_tokens + kTileTokens - 1) / kTileTokens) {
        case 1:
            return launch_tiles<L, 1>(args, stream);
        case 2:
            return launch_tiles<L, 2>(args, stream);
        case 3:
            return launch_tiles<L, 3>(args, stream);
        default:
            throw std::invalid_argument("mma gemv: " + std::to_string(args.n_tokens) +
                                        " tokens is more than 24");
    }
}

}  // namespace

bool mma_gemv_supports(TensorType type) {
    return type == TensorType::Q4_K || type == TensorType::Q6_K;
}

void launch_mma_gemv(TensorType type, GemvArgs& args, cudaStream_t stream) {
    if (args.cols % kQK_K != 0)
        throw std::invalid_argument("mma gemv: width not a multiple of 256");
    switch (type) {
        case TensorType::Q4_K:
            return launch_format<MmaQ4_K>(args, stream);
        case TensorType::Q6_K:
            return launch_format<MmaQ6_K>(args, stream);
        default:
            throw std::invalid_argument("mma gemv: unsupported type");
    }
}

}  // namespace ember::cuda
