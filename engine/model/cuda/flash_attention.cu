// Prefill attention on the tensor cores (flash_attention.cuh).
//
// Block (query tile, KV head) of kWarps warps. The tile's rows are (token, head of the KV head's
// group) pairs, token-major, so a group's heads share every K/V tile the block loads; warp w
// owns rows 16w .. 16w + 15. Positions go through in tiles of kTileN rows of K and V, copied
// into shared memory by cp.async two stages deep (the next tile's copy runs while this one is
// multiplied). Per tile and warp: S = Q K^T (m16n8k16 f16 products, f32 sums), the scale
// folded into Q beforehand, soft-cap, the causal and window masks, one online-softmax step in
// f32 per row (a quad of lanes holds a row), P rounded to f16 and O += P V. Registers hold S
// and O, shared memory the block's Q; the fragment layouts are PTX's for mma.m16n8k16 (a row of
// S's accumulator is the A operand of the P V product as it stands).
//
// Numerics: K and V are the cache's f16, read as they are. Q (times the scale) is split into
// two f16 terms, hi + lo, and S = hi K^T + lo K^T: a score carries Q's f32 value to ~2^-22, not
// f16's 2^-11 (an error of 2^-11 in a score of 20 moves its softmax weight by 1%; one f16 Q
// put the fixtures' whole, one-by-one and uneven feeds 2.2e-3 apart, where f32 kernels keep
// them within 2.4e-4). P is rounded to f16 (in [0, 1], relative 2^-11 per weight); every sum in
// f32. The order of the sums differs from the f32 kernels', as cuBLAS's from gemv's: prefill
// rounds differently from decode, within f16's noise.
#include <cuda_fp16.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include "engine/model/cuda/cuda_check.cuh"
#include "engine/model/cuda/flash_attention.cuh"
#include "engine/model/cuda/launch.cuh"

namespace ember::cuda {

namespace {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kRowsPerWarp = 16;
constexpr int kTileM = kWarps * kRowsPerWarp;  // query rows of a block
constexpr int kTileN = 64;                     // positions of a K/V tile
constexpr int kStages = 2;

// Shared-memory row of a K or V tile: D halves and 8 of padding, so the 8 rows an ldmatrix
// reads start in 8 different 16-byte bank groups.
template <int D>
constexpr int row_halves() {
    return D + 8;
}

// Two stages of K and V tiles, then the block's Q as hi and lo terms ([kTileM x D] each).
template <int D>
constexpr size_t shared_bytes() {
    return (static_cast<size_t>(kStages) * 2 * kTileN + 2 * kTileM) * row_halves<D>() *
           sizeof(__half);
}

struct FlashArgs {
    KvLayerView layer;
    int64_t k_row_bytes;
    int64_t v_row_bytes;
    const float* q;  // [n x n_head x D]
    const int64_t* pos0;
    int64_t n;
    int64_t n_head;
    int64_t group;  // query heads per KV head
    int64_t window;
    float scale;
    float softcap;
    const float* sinks;  // [n_head] or null
    float* out;          // [n x n_head x D], or null: records into partials
    // Records: block z takes positions [z * chunk, (z + 1) * chunk) and writes each row's
    // unnormalized record [m, l, O (D)] as attend()'s merge reads them, at
    // partials + ((t * n_head + head) * chunks + z) * (2 + D).
    int64_t chunk;
    int64_t chunks;
    float* partials;
};

__device__ __forceinline__ uint32_t shared_address(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, asynchronously; zeros where !valid (nothing is read then).
__device__ __forceinline__ void copy16(void* dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(dst)),
                 "l"(src), "r"(valid ? 16 : 0));
}

__device__ __forceinline__ void copy_commit() {
    asm volatile("cp.async.commit_group;\n" ::);
}

template <int kPending>
__device__ __forceinline__ void copy_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

__device__ __forceinline__ void load_matrices(uint32_t (&r)[4], const __half* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(shared_address(p)));
}

__device__ __forceinline__ void load_matrices_transposed(uint32_t (&r)[4], const __half* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(shared_address(p)));
}

// d += a (16x16, row) * b (16x8, column), f16 inputs, f32 sums.
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
}

__device__ __forceinline__ int64_t first_visible(int64_t position, int64_t window) {
    return window > 0 && position - window + 1 > 0 ? position - window + 1 : 0;
}

// The K and V rows of positions [tile, tile + kTileN) into one stage (rows outside [lo, hi)
// zero: they are masked, and a zero V row keeps 0 * garbage from making NaN).
template <int D>
__device__ __forceinline__ void load_tile(const FlashArgs& a, int64_t kv_head, int64_t tile,
                                          int64_t lo, int64_t hi, __half* k_stage,
                                          __half* v_stage) {
    constexpr int kVectors = D / 8;  // 16-byte pieces of a row
    for (int i = threadIdx.x; i < kTileN * kVectors; i += kThreads) {
        const int r = i / kVectors;
        const int c = i % kVectors;
        const int64_t pos = tile + r;
        const bool valid = pos >= lo && pos < hi;
        const int64_t slot = !valid ? 0 : a.layer.ring ? pos % a.layer.slots : pos;
        const uint8_t* k_src = a.layer.k + slot * a.k_row_bytes + (kv_head * D + c * 8) * 2;
        const uint8_t* v_src = a.layer.v + slot * a.v_row_bytes + (kv_head * D + c * 8) * 2;
        copy16(k_stage + r * row_halves<D>() + c * 8, k_src, valid);
        copy16(v_stage + r * row_halves<D>() + c * 8, v_src, valid);
    }
}

template <int D>
__global__ void __launch_bounds__(kThreads) flash_prefill_kernel(const FlashArgs a) {
    await_previous_grid();
    extern __shared__ uint4 shared_raw[];
    auto* shared = reinterpret_cast<__half*>(shared_raw);
    constexpr int kStageHalves = kTileN * row_halves<D>();
    const int warp = threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    const int quad_row = lane / 4;  // the row (and row + 8) of the warp's 16 this lane holds
    const int quad_col = lane % 4;  // its pair of columns in every 8-column piece
    const int64_t kv_head = blockIdx.y;
    const int64_t pos0 = *a.pos0;
    const int64_t rows_total = a.n * a.group;
    const int64_t block_row0 = static_cast<int64_t>(blockIdx.x) * kTileM;

    // This lane's two rows: token, head and position.
    int64_t token[2], head[2], position[2], first[2];
    bool row_valid[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        const int64_t row = block_row0 + warp * kRowsPerWarp + quad_row + 8 * i;
        row_valid[i] = row < rows_total;
        const int64_t r = row_valid[i] ? row : rows_total - 1;
        token[i] = r / a.group;
        head[i] = kv_head * a.group + r % a.group;
        position[i] = pos0 + token[i];
        first[i] = first_visible(position[i], a.window);
    }

    // The warp's 16 rows of Q times the scale, as f16 hi + lo, into its part of shared memory
    // (read back as A fragments by ldmatrix; only this warp reads them).
    __half* q_hi = shared + kStages * 2 * kStageHalves + warp * kRowsPerWarp * row_halves<D>();
    __half* q_lo = q_hi + kTileM * row_halves<D>();
    for (int i = lane; i < kRowsPerWarp * D / 2; i += 32) {
        const int r = i / (D / 2);
        const int c = 2 * (i % (D / 2));
        const int64_t row = min(rows_total - 1, block_row0 + warp * kRowsPerWarp + r);
        const float* q_row =
            a.q + ((row / a.group) * a.n_head + kv_head * a.group + row % a.group) * D;
        const float2 v = *reinterpret_cast<const float2*>(q_row + c);
        const float x0 = v.x * a.scale;
        const float x1 = v.y * a.scale;
        const __half2 hi = __floats2half2_rn(x0, x1);
        const __half2 lo = __floats2half2_rn(x0 - __low2float(hi), x1 - __high2float(hi));
        *reinterpret_cast<__half2*>(q_hi + r * row_halves<D>() + c) = hi;
        *reinterpret_cast<__half2*>(q_lo + r * row_halves<D>() + c) = lo;
    }
    __syncwarp();

    // The block's positions: from the first token's first visible one to the last token's own.
    const int64_t first_token = block_row0 / a.group;
    const int64_t last_token = min(rows_total - 1, block_row0 + kTileM - 1) / a.group;
    int64_t lo = first_visible(pos0 + first_token, a.window);
    int64_t hi = pos0 + last_token + 1;
    if (a.partials != nullptr) {  // this block's chunk of the positions only
        lo = max(lo, static_cast<int64_t>(blockIdx.z) * a.chunk);
        hi = min(hi, static_cast<int64_t>(blockIdx.z + 1) * a.chunk);
        if (lo >= hi) return;  // uniform across the block; the merge reads no record here
    }
    const int64_t tile0 = lo / kTileN * kTileN;
    const int tiles = static_cast<int>((hi - tile0 + kTileN - 1) / kTileN);
    // The warp's own span, to skip tiles none of its rows sees.
    const int64_t warp_first_row = min(rows_total - 1, block_row0 + warp * kRowsPerWarp);
    const int64_t warp_last_row = min(rows_total - 1, block_row0 + warp * kRowsPerWarp + 15);
    const int64_t warp_lo = max(lo, first_visible(pos0 + warp_first_row / a.group, a.window));
    const int64_t warp_hi = min(hi, pos0 + warp_last_row / a.group + 1);

    float o[D / 8][4] = {};
    float m[2] = {-INFINITY, -INFINITY};
    float l[2] = {0.0f, 0.0f};  // this lane's part of each row's sum (its quad's lanes add up)

    load_tile<D>(a, kv_head, tile0, lo, hi, shared, shared + kStageHalves);
    copy_commit();
    for (int it = 0; it < tiles; ++it) {
        const int64_t tile = tile0 + static_cast<int64_t>(it) * kTileN;
        if (it + 1 < tiles) {
            __half* next = shared + ((it + 1) % kStages) * 2 * kStageHalves;
            load_tile<D>(a, kv_head, tile + kTileN, lo, hi, next, next + kStageHalves);
            copy_commit();
            copy_wait<1>();
        } else {
            copy_wait<0>();
        }
        __syncthreads();
        const __half* k_tile = shared + (it % kStages) * 2 * kStageHalves;  // [kTileN x D]
        const __half* v_tile = k_tile + kStageHalves;                       // [kTileN x D]
        if (tile < warp_hi && tile + kTileN > warp_lo) {
            // S = (Q scale) K^T: 16 rows x kTileN positions, 8 positions an accumulator.
            float s[kTileN / 8][4] = {};
#pragma unroll
            for (int kk = 0; kk < D / 16; ++kk) {
                // Matrices (lane / 8): rows 0-7 and 8-15 of elements kk*16 + 0..7, then + 8..15.
                const int q_offset =
                    ((lane / 8) % 2 * 8 + lane % 8) * row_halves<D>() + kk * 16 + (lane / 16) * 8;
                uint32_t a_hi[4], a_lo[4];
                load_matrices(a_hi, q_hi + q_offset);
                load_matrices(a_lo, q_lo + q_offset);
#pragma unroll
                for (int nt = 0; nt < kTileN / 8; nt += 2) {
                    // Matrices (lane / 8): positions nt (elements kk*16 + 0..7, + 8..15), nt + 1.
                    const int piece = lane / 8;
                    const int row = (nt + piece / 2) * 8 + lane % 8;
                    uint32_t b[4];
                    load_matrices(b, k_tile + row * row_halves<D>() + kk * 16 + (piece % 2) * 8);
                    mma(s[nt], a_hi, b[0], b[1]);
                    mma(s[nt + 1], a_hi, b[2], b[3]);
                    mma(s[nt], a_lo, b[0], b[1]);
                    mma(s[nt + 1], a_lo, b[2], b[3]);
                }
            }
            // Soft-cap, masks, and one online-softmax step per row.
            float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
            for (int nt = 0; nt < kTileN / 8; ++nt) {
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int i = e / 2;
                    const int64_t pos = tile + nt * 8 + 2 * quad_col + e % 2;
                    float score = s[nt][e];
                    if (a.softcap > 0.0f) score = a.softcap * tanhf(score / a.softcap);
                    const bool visible = row_valid[i] && pos >= first[i] && pos <= position[i];
                    s[nt][e] = visible ? score : -INFINITY;
                    tile_max[i] = fmaxf(tile_max[i], s[nt][e]);
                }
            }
            float correction[2];
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                tile_max[i] = fmaxf(tile_max[i], __shfl_xor_sync(0xffffffffu, tile_max[i], 1));
                tile_max[i] = fmaxf(tile_max[i], __shfl_xor_sync(0xffffffffu, tile_max[i], 2));
                const float m_new = fmaxf(m[i], tile_max[i]);
                correction[i] = m_new == -INFINITY ? 1.0f : __expf(m[i] - m_new);
                m[i] = m_new;
                l[i] *= correction[i];
            }
#pragma unroll
            for (int nt = 0; nt < kTileN / 8; ++nt) {
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int i = e / 2;
                    const float p = s[nt][e] == -INFINITY ? 0.0f : __expf(s[nt][e] - m[i]);
                    s[nt][e] = p;
                    l[i] += p;
                }
            }
#pragma unroll
            for (int dt = 0; dt < D / 8; ++dt) {
                o[dt][0] *= correction[0];
                o[dt][1] *= correction[0];
                o[dt][2] *= correction[1];
                o[dt][3] *= correction[1];
            }
            // O += P V, 16 positions a step: S's accumulators of positions 2j and 2j + 1 are
            // the A fragment as they lie.
#pragma unroll
            for (int j = 0; j < kTileN / 16; ++j) {
                const uint32_t p_frag[4] = {pack_half2(s[2 * j][0], s[2 * j][1]),
                                            pack_half2(s[2 * j][2], s[2 * j][3]),
                                            pack_half2(s[2 * j + 1][0], s[2 * j + 1][1]),
                                            pack_half2(s[2 * j + 1][2], s[2 * j + 1][3])};
#pragma unroll
                for (int dt = 0; dt < D / 8; dt += 2) {
                    // Matrices (lane / 8): positions 16j + 0..7, 16j + 8..15 of value columns
                    // dt, then of dt + 1; transposed into the B operand.
                    const int piece = lane / 8;
                    const int row = j * 16 + (piece % 2) * 8 + lane % 8;
                    uint32_t b[4];
                    load_matrices_transposed(b,
                                             v_tile + row * row_halves<D>() + (dt + piece / 2) * 8);
                    mma(o[dt], p_frag, b[0], b[1]);
                    mma(o[dt + 1], p_frag, b[2], b[3]);
                }
            }
        }
        __syncthreads();  // the stage is read; the next iteration's copy may overwrite it
    }

    // Each row's sum over its quad, the sink in the denominator, and the rows out.
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
        l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
        if (!row_valid[i]) continue;
        if (a.partials != nullptr) {
            float* record =
                a.partials + ((token[i] * a.n_head + head[i]) * a.chunks + blockIdx.z) * (2 + D);
            if (quad_col == 0) {
                record[0] = m[i];
                record[1] = l[i];
            }
#pragma unroll
            for (int dt = 0; dt < D / 8; ++dt) {
                const int c = dt * 8 + 2 * quad_col;
                record[2 + c] = o[dt][2 * i];
                record[3 + c] = o[dt][2 * i + 1];
            }
            continue;
        }
        float weight = 1.0f;  // exp(m - top)
        float denominator = l[i];
        if (a.sinks != nullptr) {
            const float sink = a.sinks[head[i]];
            const float top = fmaxf(m[i], sink);
            weight = __expf(m[i] - top);
            denominator = l[i] * weight + __expf(sink - top);
        }
        const float factor = weight / denominator;
        float* dst = a.out + (token[i] * a.n_head + head[i]) * D;  // [D]
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt) {
            const int c = dt * 8 + 2 * quad_col;
            *reinterpret_cast<float2*>(dst + c) =
                make_float2(o[dt][2 * i] * factor, o[dt][2 * i + 1] * factor);
        }
    }
}

template <int D>
void launch(const FlashArgs& args, cudaStream_t stream) {
    const auto kernel = flash_prefill_kernel<D>;
    constexpr size_t bytes = shared_bytes<D>();
    if constexpr (bytes > 48 * 1024) {
        check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(bytes)),
                   "flash attention shared memory");
    }
    const int64_t rows = args.n * args.group;
    const dim3 grid(static_cast<unsigned>((rows + kTileM - 1) / kTileM),
                    static_cast<unsigned>(args.layer.k_width / D),
                    static_cast<unsigned>(args.partials != nullptr ? args.chunks : 1));
    launch_kernel(kernel, grid, kThreads, bytes, stream, args);
    check_launch("flash_prefill_kernel");
}

}  // namespace

bool flash_attend_supports(const AttendShape& shape, const KvLayerView& layer) {
    const int64_t d = shape.head_dim;
    return layer.type == KvType::F16 && shape.value_dim == d &&
           (d == 16 || d == 32 || d == 64 || d == 128) && shape.n_head_kv > 0 &&
           shape.n_head % shape.n_head_kv == 0 && layer.k_width == shape.n_head_kv * d &&
           layer.v_width == shape.n_head_kv * d;
}

void flash_attend(const AttendShape& shape, const KvLayerView& layer, const float* q,
                  const int64_t* pos0, int64_t n, int64_t chunks, float* partials, float* out,
                  cudaStream_t stream) {
    if (n <= 0) return;
    if ((partials == nullptr) == (out == nullptr) || (partials != nullptr && chunks < 1)) {
        throw std::invalid_argument("flash attention: either records (chunks >= 1) or the output");
    }
    if (!flash_attend_supports(shape, layer)) {
        throw std::invalid_argument("flash attention: heads of " + std::to_string(shape.head_dim) +
                                    " / " + std::to_string(shape.value_dim) +
                                    " elements over this cache are not supported");
    }
    FlashArgs args{};
    args.layer = layer;
    args.k_row_bytes = kv_row_bytes(layer.type, layer.k_width);
    args.v_row_bytes = kv_row_bytes(layer.type, layer.v_width);
    args.q = q;
    args.pos0 = pos0;
    args.n = n;
    args.n_head = shape.n_head;
    args.group = shape.n_head / shape.n_head_kv;
    args.window = shape.window;
    args.scale = shape.scale;
    args.softcap = shape.softcap;
    args.sinks = shape.sinks;
    args.out = out;
    args.chunk = shape.chunk;
    args.chunks = chunks;
    args.partials = partials;
    switch (shape.head_dim) {
        case 16:
            return launch<16>(args, stream);
        case 32:
            return launch<32>(args, stream);
        case 64:
            return launch<64>(args, stream);
        default:
            return launch<128>(args, stream);
    }
}

}  // namespace ember::cuda
