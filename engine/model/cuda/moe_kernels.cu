// The mixture-of-experts kernels (moe_kernels.cuh). The weight formats' readers are those of
// quant_blocks.cuh; the dot products follow quant_kernels.cu's gemv layout (lanes over units,
// explicit fma in element order, a fixed butterfly), one token per product.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

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
// Rows per warp of the expert products: the activations' loads serve both.
constexpr int kRows = 2;
constexpr int kRowsPerBlock = kWarps * kRows;

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
// with the same bits. Lane l takes units l, l + 32, ...; within a unit, per 8-element chunk a
// product chain of its own in element order, then one add: the order of every sum is fixed by
// cols alone.
template <class F, int R>
__device__ __forceinline__ void dot_rows(const uint8_t* const (&row)[R], const float* x,
                                         int64_t cols, float (&acc)[R]) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] = 0.0f;
    const int units = static_cast<int>(cols / (F::kBlockElems / F::kUnitsPerBlock));
    for (int u = lane; u < units; u += 32) {
        const int k = u % F::kUnitsPerBlock;
        const size_t block_offset = static_cast<size_t>(u / F::kUnitsPerBlock) * F::kBlockBytes;
        typename F::Raw raw[R];
#pragma unroll
        for (int r = 0; r < R; ++r) raw[r] = F::load(row[r] + block_offset, k);
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
                unit_chunk<F>(unit[r], c, w);
                float part = __fmul_rn(w[0], xv[0]);
#pragma unroll
                for (int i = 1; i < 8; ++i) part = __fmaf_rn(w[i], xv[i], part);
                acc[r] = __fadd_rn(acc[r], part);
            }
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

// Whether (value b, index ib) beats (a, ia) as cpu/moe.cpp's selection sees it: larger, or
// equal with the lower index; index -1 is "none yet".
__device__ __forceinline__ bool beats(float b, int ib, float a, int ia) {
    if (ib < 0) return false;
    if (ia < 0) return true;
    return b > a || (b == a && ib < ia);
}

__global__ void __launch_bounds__(kThreads) route_kernel(const RouteArgs a) {
    const int lane = threadIdx.x & 31;
    const int token = blockIdx.x * kWarps + (threadIdx.x >> 5);
    if (token >= a.n) return;  // the whole warp
    const float* logits = a.logits + static_cast<int64_t>(token) * a.n_expert;
    // The biased logit of expert e, as the CPU adds it (one f32 add).
    const auto logit = [&](int e) { return a.bias ? logits[e] + a.bias[e] : logits[e]; };

    float max = -INFINITY;
    for (int e = lane; e < a.n_expert; e += 32) max = fmaxf(max, logit(e));
    for (int offset = 16; offset > 0; offset >>= 1) {
        max = fmaxf(max, __shfl_xor_sync(0xffffffffu, max, offset));
    }
    // The softmax's denominator over every expert, in double (only read without
    // renormalization); a fixed butterfly, so the same bits every run.
    double total = 0.0;
    for (int e = lane; e < a.n_expert; e += 32) total += exp(static_cast<double>(logit(e) - max));
    for (int offset = 16; offset > 0; offset >>= 1) {
        total += __shfl_xor_sync(0xffffffffu, total, offset);
    }

    // Repeated arg-max, ties to the lower index; lane l owns experts l + 32 i (bit i of taken).
    uint32_t taken = 0;
    int chosen[kMaxExpertsUsed];
    for (int j = 0; j < a.n_used; ++j) {
        float best = 0.0f;
        int best_e = -1;
        for (int e = lane, i = 0; e < a.n_expert; e += 32, ++i) {
            if ((taken >> i) & 1u) continue;
            const float v = logit(e);
            if (beats(v, e, best, best_e)) {
                best = v;
                best_e = e;
            }
        }
        for (int offset = 16; offset > 0; offset >>= 1) {
            const float other = __shfl_xor_sync(0xffffffffu, best, offset);
            const int other_e = __shfl_xor_sync(0xffffffffu, best_e, offset);
            if (beats(other, other_e, best, best_e)) {
                best = other;
                best_e = other_e;
            }
        }
        chosen[j] = best_e;  // the same on every lane
        if (best_e >= 0 && best_e % 32 == lane) taken |= 1u << (best_e / 32);
    }
    if (lane != 0) return;
    // Ascending expert order (insertion sort of a handful), then the weights in that order.
    for (int j = 1; j < a.n_used; ++j) {
        const int v = chosen[j];
        int i = j - 1;
        for (; i >= 0 && chosen[i] > v; --i) chosen[i + 1] = chosen[i];
        chosen[i + 1] = v;
    }
    double chosen_sum = 0.0;
    for (int j = 0; j < a.n_used; ++j)
        chosen_sum += exp(static_cast<double>(logit(chosen[j]) - max));
    const double denom = a.renormalize ? chosen_sum : total;
    int32_t* out_e = a.chosen + static_cast<int64_t>(token) * a.n_used;
    float* out_w = a.weight + static_cast<int64_t>(token) * a.n_used;
    for (int j = 0; j < a.n_used; ++j) {
        out_e[j] = chosen[j];
        out_w[j] = static_cast<float>(exp(static_cast<double>(logit(chosen[j]) - max)) / denom);
    }
}

// ---------------------------------------------------------------------------------------------
// Expert products.

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
    const int32_t* chosen;  // [pairs] expert of each pair
    const float* up;        // [pairs x rows] the up products (Silu, Clamped epilogues)
    float* out;             // [pairs x rows]
    float limit, alpha;     // the clamped SwiGLU's
};

// out[p][r] = row r of expert chosen[p] · x_p (+ bias), then, for the gate, the activation
// with up[p][r]. Grid: (row blocks, pairs).
template <class F, ExpertEpilogue E>
__global__ void __launch_bounds__(kThreads) expert_rows_kernel(const ExpertArgs a) {
    const int lane = threadIdx.x & 31;
    const int64_t pair = blockIdx.y;
    const int64_t row0 =
        static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5) * kRows;
    if (row0 >= a.rows) return;  // the whole warp
    const int64_t e = a.chosen[pair];
    const uint8_t* row[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        const int64_t rr = min(row0 + r, a.rows - 1);  // past the end: a valid row, no store
        row[r] = a.data + static_cast<size_t>(e * a.rows + rr) * a.row_stride;
    }
    float acc[kRows];
    dot_rows<F, kRows>(row, a.x + (pair / a.x_div) * a.cols, a.cols, acc);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        if (row0 + r >= a.rows || lane != r) continue;
        float v = acc[r];
        if (a.bias) v = __fadd_rn(v, a.bias[e * a.rows + row0 + r]);
        const int64_t at = pair * a.rows + row0 + r;
        if constexpr (E == ExpertEpilogue::Silu) {
            v = silu_gated(v, a.up[at]);
        } else if constexpr (E == ExpertEpilogue::Clamped) {
            // HF GptOssExperts, as cpu/moe.cpp's clamped_swiglu_inplace.
            const float g = fminf(v, a.limit);
            const float u = fminf(fmaxf(a.up[at], -a.limit), a.limit);
            v = __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(__fmul_rn(-a.alpha, g)))),
                          __fadd_rn(u, 1.0f));
        }
        a.out[at] = v;
    }
}

// The down product of every slot of a token and their weighted sum into x: warp w of a block
// owns output rows row0 .. row0 + kRows - 1 of one token, so each x element has one writer
// and adds its experts in slot order (ascending expert index). Grid: (row blocks, tokens).
struct DownArgs {
    const uint8_t* data;  // [n_expert * n_embd x n_ff]
    size_t row_stride;
    int64_t rows;           // n_embd
    int64_t cols;           // n_ff
    const float* bias;      // [n_expert * n_embd] or null
    const float* hidden;    // [n * n_used x n_ff]
    const int32_t* chosen;  // [n x n_used]
    const float* weight;    // [n x n_used]
    float* x;               // [n x n_embd]
    int n_used;
};

template <class F>
__global__ void __launch_bounds__(kThreads) down_add_kernel(const DownArgs a) {
    const int lane = threadIdx.x & 31;
    const int64_t token = blockIdx.y;
    const int64_t row0 =
        static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5) * kRows;
    if (row0 >= a.rows) return;
    float sum[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) sum[r] = a.x[token * a.rows + min(row0 + r, a.rows - 1)];
    for (int j = 0; j < a.n_used; ++j) {
        const int64_t pair = token * a.n_used + j;
        const int64_t e = a.chosen[pair];
        const uint8_t* row[kRows];
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
            const int64_t rr = min(row0 + r, a.rows - 1);
            row[r] = a.data + static_cast<size_t>(e * a.rows + rr) * a.row_stride;
        }
        float acc[kRows];
        dot_rows<F, kRows>(row, a.hidden + pair * a.cols, a.cols, acc);
        const float w = a.weight[pair];
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
            float v = acc[r];
            if (a.bias) v = __fadd_rn(v, a.bias[e * a.rows + min(row0 + r, a.rows - 1)]);
            sum[r] = __fmaf_rn(w, v, sum[r]);
        }
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        if (row0 + r < a.rows && lane == r) a.x[token * a.rows + row0 + r] = sum[r];
    }
}

// ---------------------------------------------------------------------------------------------
// Host side.

// Calls fn(Fmt{}) with the format struct of `type`; false when the kernels read no such type.
template <class Fn>
bool with_format(TensorType type, Fn&& fn) {
    switch (type) {
        case TensorType::F32:
            fn(FmtF32{});
            return true;
        case TensorType::F16:
            fn(FmtF16{});
            return true;
        case TensorType::BF16:
            fn(FmtBF16{});
            return true;
        case TensorType::Q4_0:
            fn(FmtQ4_0{});
            return true;
        case TensorType::Q8_0:
            fn(FmtQ8_0{});
            return true;
        case TensorType::Q4_K:
            fn(FmtQ4_K{});
            return true;
        case TensorType::Q5_K:
            fn(FmtQ5_K{});
            return true;
        case TensorType::Q6_K:
            fn(FmtQ6_K{});
            return true;
        case TensorType::MXFP4:
            fn(FmtMXFP4{});
            return true;
        default:
            return false;
    }
}

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

unsigned blocks_for(int64_t rows) {
    return static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
}

template <ExpertEpilogue E>
void launch_expert_rows(const DeviceMatrix& m, const ExpertArgs& args, int64_t pairs,
                        cudaStream_t stream) {
    const dim3 grid(blocks_for(args.rows), static_cast<unsigned>(pairs));
    with_format(m.type, [&](auto fmt) {
        expert_rows_kernel<decltype(fmt), E><<<grid, kThreads, 0, stream>>>(args);
    });
    check_launch("expert_rows_kernel");
}

}  // namespace

MoeBuffers::~MoeBuffers() {
    if (block_) cudaFree(block_);
}

void MoeBuffers::reserve(const ModelConfig& c, int64_t tokens) {
    if (c.n_expert == 0 || block_) return;
    if (c.n_expert_used < 1 || c.n_expert_used > kMaxExpertsUsed || c.n_expert > kMaxExperts) {
        throw std::runtime_error("CUDA: " + std::to_string(c.n_expert) + " experts, " +
                                 std::to_string(c.n_expert_used) +
                                 " per token: more than the GPU's MoE kernels take");
    }
    // Each buffer starts 256-byte aligned (the float4 loads need 16).
    const auto round = [](size_t bytes) { return (bytes + 255) / 256 * 256; };
    const size_t pairs = static_cast<size_t>(tokens * c.n_expert_used);
    const size_t router_bytes = round(static_cast<size_t>(tokens * c.n_expert) * sizeof(float));
    const size_t pair_bytes = round(pairs * sizeof(float));  // chosen, weight
    const size_t ff_bytes = round(pairs * static_cast<size_t>(c.n_ff_exp) * sizeof(float));
    const size_t total = router_bytes + 2 * pair_bytes + 2 * ff_bytes;
    const cudaError_t err = cudaMalloc(&block_, total);
    if (err != cudaSuccess) {
        block_ = nullptr;
        throw std::runtime_error("CUDA: out of GPU memory allocating the MoE buffers (" +
                                 std::to_string(total >> 20) + " MiB)");
    }
    auto* p = static_cast<uint8_t*>(block_);
    router = reinterpret_cast<float*>(p);
    chosen = reinterpret_cast<int32_t*>(p += router_bytes);
    weight = reinterpret_cast<float*>(p += pair_bytes);
    up = reinterpret_cast<float*>(p += pair_bytes);
    hidden = reinterpret_cast<float*>(p + ff_bytes);
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
    route_kernel<<<blocks, kThreads, 0, stream>>>(args);
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
    // The up products first, then the gate's, whose epilogue applies the activation.
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

void moe_down_add(const MoeLayer& l, const float* hidden, const int32_t* chosen,
                  const float* weight, int64_t n, float* x, cudaStream_t stream) {
    if (n <= 0) return;
    if (n > 65535) fail("too many tokens for one launch");
    DownArgs args{};
    args.data = static_cast<const uint8_t*>(l.down.data);
    args.row_stride = l.down.row_stride;
    args.rows = l.n_embd;
    args.cols = l.n_ff;
    args.bias = l.down_bias;
    args.hidden = hidden;
    args.chosen = chosen;
    args.weight = weight;
    args.x = x;
    args.n_used = static_cast<int>(l.n_used);
    const dim3 grid(blocks_for(l.n_embd), static_cast<unsigned>(n));
    with_format(l.down.type, [&](auto fmt) {
        down_add_kernel<decltype(fmt)><<<grid, kThreads, 0, stream>>>(args);
    });
    check_launch("down_add_kernel");
}

}  // namespace ember::cuda
