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
// Routing: one warp per token.

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

// A logit as an unsigned key that orders as the floats do (larger value, larger key), for the
// warp's integer max reduction: -0 counts as +0 (they compare equal), NaN below everything (it
// never beats a number).
__device__ __forceinline__ uint32_t order_key(float v) {
    if (isnan(v)) return 0u;
    const uint32_t bits = __float_as_uint(v + 0.0f);  // -0 + 0 = +0
    return (bits & 0x80000000u) ? ~bits : bits | 0x80000000u;
}

// One warp per token. The biased logits are read once into shared memory. The chosen experts
// come from n_used rounds of a warp arg-max as cpu/moe.cpp's selection sees it (larger logit,
// ties to the lower index): each lane's best remaining expert, the warp's largest key by one
// integer reduction, the lowest index holding it by another. Their weights are computed by a
// lane each and added in expert order by every lane, as one lane's loop did: the same bits.
// (A version of shuffled pairs per round, the experts sorted in a local array and the
// denominator over every expert in double whether read or not took 9.6-9.9 us a token on an
// H200 with Qwen3-30B-A3B's 128 experts: Nsight Compute, warm caches.)
__global__ void __launch_bounds__(kThreads) route_kernel(const RouteArgs a) {
    extern __shared__ float biased[];  // [kWarps x n_expert]
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int token = blockIdx.x * kWarps + warp;
    if (token >= a.n) return;  // the whole warp
    const float* logits = a.logits + static_cast<int64_t>(token) * a.n_expert;
    float* logit = biased + warp * a.n_expert;
    // The biased logit of expert e, as the CPU adds it (one f32 add).
    for (int e = lane; e < a.n_expert; e += 32)
        logit[e] = a.bias ? logits[e] + a.bias[e] : logits[e];
    __syncwarp();

    float max = -INFINITY;
    for (int e = lane; e < a.n_expert; e += 32) max = fmaxf(max, logit[e]);
    for (int offset = 16; offset > 0; offset >>= 1) {
        max = fmaxf(max, __shfl_xor_sync(0xffffffffu, max, offset));
    }

    // Lane l owns experts l + 32 i (bit i of taken); n_expert <= kMaxExperts = 32 * 32.
    uint32_t taken = 0;
    for (int j = 0; j < a.n_used; ++j) {
        uint32_t best = 0;
        int best_e = 0x7fffffff;
        for (int e = lane, i = 0; e < a.n_expert; e += 32, ++i) {
            if ((taken >> i) & 1u) continue;
            const uint32_t key = order_key(logit[e]) + 1u;  // 0: no candidate
            if (key > best) {  // e ascends: a tie keeps the lower index
                best = key;
                best_e = e;
            }
        }
        const uint32_t top = __reduce_max_sync(0xffffffffu, best);
        const int e = __reduce_min_sync(0xffffffffu, best == top ? best_e : 0x7fffffff);
        if (top != 0 && e % 32 == lane) taken |= 1u << (e / 32);
    }
    // The chosen experts in ascending order: i-major (expert 32 i + lane), lanes ascending.
    // Lane j < n_used finds the j-th.
    int mine = -1;
    int rank = lane;
    for (int i = 0; 32 * i < a.n_expert; ++i) {
        const uint32_t set = __ballot_sync(0xffffffffu, (taken >> i) & 1u);
        const int count = __popc(set);
        if (mine < 0 && rank < count) mine = 32 * i + static_cast<int>(__fns(set, 0, rank + 1));
        if (mine < 0) rank -= count;
    }
    if (lane >= a.n_used) mine = -1;
    const double exponential = mine >= 0 ? exp(static_cast<double>(logit[mine] - max)) : 0.0;
    double denom = 0.0;
    if (a.renormalize) {
        for (int j = 0; j < a.n_used; ++j) denom += __shfl_sync(0xffffffffu, exponential, j);
    } else {
        // The softmax's denominator over every expert, in double; a fixed butterfly, so the
        // same bits every run.
        for (int e = lane; e < a.n_expert; e += 32) {
            denom += exp(static_cast<double>(logit[e] - max));
        }
        for (int offset = 16; offset > 0; offset >>= 1) {
            denom += __shfl_xor_sync(0xffffffffu, denom, offset);
        }
    }
    if (lane < a.n_used) {
        a.chosen[static_cast<int64_t>(token) * a.n_used + lane] = mine;
        a.weight[static_cast<int64_t>(token) * a.n_used + lane] =
            static_cast<float>(exponential / denom);
    }
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
    const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
    const int64_t token = blockIdx.y;
    if (i >= a.n_embd) return;
    float sum = a.x[token * a.n_embd + i];
    for (int j = 0; j < a.n_used; ++j) {
        const int64_t pair = token * a.n_used + j;
        const int64_t row = a.position ? a.position[pair] : pair;
        float v = a.down[row * a.n_embd + i];
        if (a.bias) v = __fadd_rn(v, a.bias[a.chosen[pair] * a.n_embd + i]);
        sum = __fmaf_rn(a.weight[pair], v, sum);
    }
    a.x[token * a.n_embd + i] = sum;
}

// xg[i] = xn[order[i] / n_used] for the prefill's expert-sorted pairs. Grid: (element blocks,
// pairs).
__global__ void __launch_bounds__(kThreads)
    gather_kernel(const float* xn, const int32_t* order, int n_used, int64_t n_embd, float* xg) {
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

__global__ void __launch_bounds__(kThreads) sorted_activation_kernel(const SortedActivationArgs a) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
    const int64_t row = blockIdx.y;
    if (i >= a.n_ff) return;
    const int64_t e = a.chosen[a.order[row]];
    float g = a.gate[row * a.n_ff + i];
    float u = a.up[row * a.n_ff + i];
    if (a.gate_bias) g = __fadd_rn(g, a.gate_bias[e * a.n_ff + i]);
    if (a.up_bias) u = __fadd_rn(u, a.up_bias[e * a.n_ff + i]);
    a.gate[row * a.n_ff + i] =
        a.clamped ? clamped_swiglu(g, u, a.limit, a.alpha) : silu_gated(g, u);
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
        expert_rows_kernel<decltype(fmt), E, kFused><<<grid, kThreads, 0, stream>>>(args);
    });
    check_launch("expert_rows_kernel");
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
    max_tiles = static_cast<int64_t>(pairs) / kQmmaTileTokens + c.n_expert;
    const size_t tile_bytes = round(static_cast<size_t>(max_tiles) * sizeof(QmmaTile));
    const size_t total = router_bytes + 4 * pair_bytes + 2 * ff_bytes + 2 * embd_bytes +
                         half_bytes + scale_bytes + tile_bytes;
    const size_t host_ids = round(3 * pairs * sizeof(int32_t));
    const cudaError_t err = cudaMalloc(&block_, total);
    if (err != cudaSuccess || cudaMallocHost(&host_block_, host_ids + tile_bytes) != cudaSuccess) {
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
    host_tiles = reinterpret_cast<QmmaTile*>(static_cast<uint8_t*>(host_block_) + host_ids);
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
    const auto blocks = static_cast<unsigned>((n + kWarps - 1) / kWarps);
    const size_t shared = static_cast<size_t>(kWarps) * l.n_expert * sizeof(float);
    route_kernel<<<blocks, kThreads, shared, stream>>>(args);
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

void moe_expert_down(const MoeLayer& l, const float* hidden, const int32_t* chosen, int64_t n,
                     float* down, cudaStream_t stream) {
    if (n <= 0) return;
    const int64_t pairs = n * l.n_used;
    if (pairs > 65535) fail("too many (token, expert) pairs for one launch");
    ExpertArgs args{};
    args.data = static_cast<const uint8_t*>(l.down.data);
    args.row_stride = l.down.row_stride;
    args.rows = l.n_embd;
    args.cols = l.n_ff;
    args.bias = nullptr;  // added by moe_combine, as in the prefill's path
    args.x = hidden;
    args.x_div = 1;
    args.chosen = chosen;
    args.out = down;
    launch_expert_rows<ExpertEpilogue::Store>(l.down, args, pairs, stream);
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
    combine_kernel<<<grid, kThreads, 0, stream>>>(args);
    check_launch("combine_kernel");
}

void moe_gather(const float* xn, const int32_t* order, int64_t n_used, int64_t rows, int64_t n_embd,
                float* xg, cudaStream_t stream) {
    if (rows <= 0) return;
    if (rows > 65535) fail("too many rows to gather in one launch");
    const dim3 grid(static_cast<unsigned>((n_embd + kThreads - 1) / kThreads),
                    static_cast<unsigned>(rows));
    gather_kernel<<<grid, kThreads, 0, stream>>>(xn, order, static_cast<int>(n_used), n_embd, xg);
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
    const dim3 grid(static_cast<unsigned>((l.n_ff + kThreads - 1) / kThreads),
                    static_cast<unsigned>(rows));
    sorted_activation_kernel<<<grid, kThreads, 0, stream>>>(args);
    check_launch("sorted_activation_kernel");
}

}  // namespace ember::cuda
