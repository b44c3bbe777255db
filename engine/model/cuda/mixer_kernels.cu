// The hybrid families' mixer kernels (mixer_kernels.cuh).
#include <cmath>
#include <stdexcept>
#include <string>

#include "engine/model/cuda/cuda_check.cuh"
#include "engine/model/cuda/mixer_kernels.cuh"
#include "engine/model/cuda/reduce.cuh"

namespace ember::cuda {

namespace {

constexpr int kElementThreads = 256;
constexpr int kWarp = 32;

unsigned blocks_for(int64_t n, int threads) {
    return static_cast<unsigned>((n + threads - 1) / threads);
}

__device__ inline float sigmoid(float x) {
    return 1.0f / (1.0f + expf(-x));
}

__device__ inline float silu(float x) {
    return x * sigmoid(x);
}

// log(1 + e^x), linear past 20 as torch's softplus (and the CPU's).
__device__ inline float softplus(float x) {
    return x > 20.0f ? x : log1pf(expf(x));
}

__global__ void conv_input_product_kernel(const float* proj, int64_t n, int64_t width, float* out) {
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i >= n * width) return;
    const int64_t t = i / width, c = i % width;
    const float* row = proj + t * 3 * width;  // [B | C | x]
    out[i] = row[c] * row[2 * width + c];
}

// Row r of the extended input: the history's rows first, then the batch's.
__device__ inline float conv_ext(const CausalConv& conv, int64_t r, int64_t c) {
    const int64_t keep = conv.kernel - 1;
    return r < keep ? conv.history[r * conv.channels + c]
                    : conv.in[(r - keep) * conv.in_stride + c];
}

// Thread per (token, channel): the taps in order k = 0..kernel-1, as the CPU sums them.
__global__ void causal_conv_kernel(CausalConv conv, int64_t n, float* out) {
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i >= n * conv.channels) return;
    const int64_t t = i / conv.channels, c = i % conv.channels;
    const float* w = conv.taps + c * conv.kernel;
    float sum = 0.0f;
    for (int64_t k = 0; k < conv.kernel; ++k) sum += w[k] * conv_ext(conv, t + k, c);
    out[i] = conv.silu ? silu(sum) : sum;
}

// Thread per channel, after causal_conv_kernel read the old history: the last kernel-1 rows of
// the extended input become the history. Row r takes ext row n + r; where that is still a
// history row it lies above r, so ascending r reads it before any write reaches it.
__global__ void conv_history_kernel(CausalConv conv, int64_t n) {
    const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (c >= conv.channels) return;
    for (int64_t r = 0; r < conv.kernel - 1; ++r) {
        conv.history[r * conv.channels + c] = conv_ext(conv, n + r, c);
    }
}

__global__ void multiply_by_gate_kernel(float* y, int64_t width, const float* gate,
                                        int64_t gate_stride, int64_t n) {
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i >= n * width) return;
    y[i] *= gate[(i / width) * gate_stride + i % width];
}

// Warp per (token, q or k head): x / sqrt(sum x^2 + 1e-6) * scale. The block y index picks the
// head: q heads first (scaled by 1/sqrt(k_dim)), then k heads.
__global__ void l2_normalize_heads_kernel(DeltaShape shape, float* qkv) {
    const int64_t t = blockIdx.x;
    const int64_t head = blockIdx.y;  // < 2 * n_k_heads
    float* x = qkv + t * shape.channels() + head * shape.k_dim;
    float sum = 0.0f;
    for (int64_t i = threadIdx.x; i < shape.k_dim; i += kWarp) sum = __fmaf_rn(x[i], x[i], sum);
    sum = warp_sum(sum);
    const float scale = head < shape.n_k_heads ? rsqrtf(static_cast<float>(shape.k_dim)) : 1.0f;
    const float factor = scale / sqrtf(sum + 1e-6f);
    for (int64_t i = threadIdx.x; i < shape.k_dim; i += kWarp) x[i] *= factor;
}

__global__ void delta_gates_kernel(int64_t n_v, float* decay, float* beta, const float* a,
                                   const float* dt_bias, int64_t n) {
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i >= n * n_v) return;
    const int64_t h = i % n_v;
    decay[i] = a[h] * softplus(decay[i] + dt_bias[h]);
    beta[i] = sigmoid(beta[i]);
}

// Block per (v head, 32 columns of its state), kDeltaWarps warps: lane j owns column j of S
// [k_dim x v_dim], warp w its rows [w*R, (w+1)*R), held in registers for the whole batch. A
// column's update needs only that column (k^T S and q^T S are per column), so the warps meet
// only to add their four partial sums, in warp order (fixed: the same bits for a token whatever
// batch it came in). Per token: the q and k heads into shared memory, then
//   s *= e^decay, partial k.s;  sum;  u = beta (v - k^T S);  s += k u, partial q.s;  sum.
// A token costs three barriers and two chains of R multiply-adds; one warp walking all k_dim
// rows through shared memory took 5.6 us a token on an H200 (721 us per 128-token batch).
constexpr int kDeltaWarps = 4;

template <int R>
__global__ void __launch_bounds__(kDeltaWarps* kWarp)
    delta_rule_kernel(DeltaShape shape, const float* qkv, const float* decay, const float* beta,
                      float* state, float* out, int64_t n) {
    extern __shared__ float shared[];
    const int64_t dk = shape.k_dim, dv = shape.v_dim, nv = shape.n_v_heads;
    float* q = shared;                                // [dk] the token's q head
    float* k = q + dk;                                // [dk] and k head
    float* kv_part = k + dk;                          // [kDeltaWarps x 32] partial k^T S
    float* out_part = kv_part + kDeltaWarps * kWarp;  // [kDeltaWarps x 32] partial q^T S
    const int64_t h = blockIdx.x;
    const int lane = static_cast<int>(threadIdx.x % kWarp);
    const int warp = static_cast<int>(threadIdx.x / kWarp);
    const int64_t j = blockIdx.y * static_cast<int64_t>(kWarp) + lane;
    const bool live = j < dv;
    const int64_t kh = h % shape.n_k_heads;
    const int64_t row0 = static_cast<int64_t>(warp) * R;
    const int64_t channels = shape.channels();
    float* s = state + h * dk * dv;  // [dk x dv]
    float column[R];                 // S[row0 + r][j]
#pragma unroll
    for (int r = 0; r < R; ++r) {
        column[r] = live && row0 + r < dk ? s[(row0 + r) * dv + j] : 0.0f;
    }
    for (int64_t t = 0; t < n; ++t) {
        const float* row = qkv + t * channels;
        for (int64_t i = threadIdx.x; i < dk; i += blockDim.x) {
            q[i] = row[kh * dk + i];
            k[i] = row[shape.n_k_heads * dk + kh * dk + i];
        }
        const float v = live ? row[2 * shape.n_k_heads * dk + h * dv + j] : 0.0f;
        const float d = expf(decay[t * nv + h]);
        const float b = beta[t * nv + h];
        __syncthreads();  // q and k are in
        float kv = 0.0f;
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const int64_t i = row0 + r;
            column[r] *= d;
            if (i < dk) kv += k[i] * column[r];
        }
        kv_part[warp * kWarp + lane] = kv;
        __syncthreads();  // every partial k^T S is in
        kv = 0.0f;
        for (int w = 0; w < kDeltaWarps; ++w) kv += kv_part[w * kWarp + lane];
        const float update = b * (v - kv);
        float o = 0.0f;
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const int64_t i = row0 + r;
            if (i < dk) {
                column[r] += k[i] * update;
                o += q[i] * column[r];
            }
        }
        out_part[warp * kWarp + lane] = o;
        __syncthreads();  // every partial q^T S is in, and q, k are read
        if (warp == 0 && live) {
            o = 0.0f;
            for (int w = 0; w < kDeltaWarps; ++w) o += out_part[w * kWarp + lane];
            out[t * nv * dv + h * dv + j] = o;
        }
    }
    if (live) {
#pragma unroll
        for (int r = 0; r < R; ++r) {
            if (row0 + r < dk) s[(row0 + r) * dv + j] = column[r];
        }
    }
}

// Warp per row: the sum of squares in f32 in a fixed order, then x * inv * weight * silu(z).
__global__ void gated_rms_norm_kernel(float* out, const float* z, const float* weight,
                                      int64_t width, float eps) {
    float* x = out + blockIdx.x * width;
    const float* gate = z + blockIdx.x * width;
    float sum = 0.0f;
    for (int64_t i = threadIdx.x; i < width; i += kWarp) sum = __fmaf_rn(x[i], x[i], sum);
    sum = warp_sum(sum);
    const float inv = rsqrtf(sum / static_cast<float>(width) + eps);
    for (int64_t i = threadIdx.x; i < width; i += kWarp) {
        x[i] = x[i] * inv * weight[i] * silu(gate[i]);
    }
}

}  // namespace

void conv_input_product(const float* proj, int64_t n, int64_t width, float* out,
                        cudaStream_t stream) {
    conv_input_product_kernel<<<blocks_for(n * width, kElementThreads), kElementThreads, 0,
                                stream>>>(proj, n, width, out);
    check_launch("conv_input_product");
}

void causal_conv(const CausalConv& conv, int64_t n, float* out, cudaStream_t stream) {
    causal_conv_kernel<<<blocks_for(n * conv.channels, kElementThreads), kElementThreads, 0,
                         stream>>>(conv, n, out);
    check_launch("causal_conv");
    conv_history_kernel<<<blocks_for(conv.channels, kElementThreads), kElementThreads, 0, stream>>>(
        conv, n);
    check_launch("conv_history");
}

void multiply_by_gate(float* y, int64_t width, const float* gate, int64_t gate_stride, int64_t n,
                      cudaStream_t stream) {
    multiply_by_gate_kernel<<<blocks_for(n * width, kElementThreads), kElementThreads, 0, stream>>>(
        y, width, gate, gate_stride, n);
    check_launch("multiply_by_gate");
}

void delta_prepare(const DeltaShape& shape, float* qkv, float* decay, float* beta, const float* a,
                   const float* dt_bias, int64_t n, cudaStream_t stream) {
    const dim3 heads(static_cast<unsigned>(n), static_cast<unsigned>(2 * shape.n_k_heads));
    l2_normalize_heads_kernel<<<heads, kWarp, 0, stream>>>(shape, qkv);
    check_launch("l2_normalize_heads");
    delta_gates_kernel<<<blocks_for(n * shape.n_v_heads, kElementThreads), kElementThreads, 0,
                         stream>>>(shape.n_v_heads, decay, beta, a, dt_bias, n);
    check_launch("delta_gates");
}

void delta_rule(const DeltaShape& shape, const float* qkv, const float* decay, const float* beta,
                float* state, float* out, int64_t n, cudaStream_t stream) {
    const size_t shared =
        static_cast<size_t>(2 * shape.k_dim + 2 * kDeltaWarps * kWarp) * sizeof(float);
    const dim3 blocks(static_cast<unsigned>(shape.n_v_heads),
                      static_cast<unsigned>((shape.v_dim + kWarp - 1) / kWarp));
    const dim3 threads(kDeltaWarps * kWarp);
    // Rows per warp, rounded up to the next size compiled: k_dim 128 (Qwen3.5) holds 32.
    const int64_t rows = (shape.k_dim + kDeltaWarps - 1) / kDeltaWarps;
    if (rows <= 4) {
        delta_rule_kernel<4>
            <<<blocks, threads, shared, stream>>>(shape, qkv, decay, beta, state, out, n);
    } else if (rows <= 8) {
        delta_rule_kernel<8>
            <<<blocks, threads, shared, stream>>>(shape, qkv, decay, beta, state, out, n);
    } else if (rows <= 16) {
        delta_rule_kernel<16>
            <<<blocks, threads, shared, stream>>>(shape, qkv, decay, beta, state, out, n);
    } else if (rows <= 32) {
        delta_rule_kernel<32>
            <<<blocks, threads, shared, stream>>>(shape, qkv, decay, beta, state, out, n);
    } else if (rows <= 64) {
        delta_rule_kernel<64>
            <<<blocks, threads, shared, stream>>>(shape, qkv, decay, beta, state, out, n);
    } else {
        throw std::runtime_error("CUDA delta rule: k_dim " + std::to_string(shape.k_dim) +
                                 " is over the 256 the kernel holds in registers");
    }
    check_launch("delta_rule");
}

void gated_rms_norm(float* out, const float* z, const float* weight, int64_t rows, int64_t width,
                    float eps, cudaStream_t stream) {
    gated_rms_norm_kernel<<<static_cast<unsigned>(rows), kWarp, 0, stream>>>(out, z, weight, width,
                                                                             eps);
    check_launch("gated_rms_norm");
}

}  // namespace ember::cuda
