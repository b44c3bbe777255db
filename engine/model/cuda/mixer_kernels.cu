// The hybrid families' mixer kernels (mixer_kernels.cuh).
#include <cmath>

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

__global__ void conv_input_product_kernel(const float* proj, int64_t n, int64_t width,
                                          float* out) {
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

// Block per (v head, 32 columns of its state), one warp: lane j owns column j of S [k_dim x
// v_dim], in shared memory for the whole batch. The column's update needs only that column
// (k^T S and q^T S are per column), so the lanes never wait on each other but to share the
// token's q and k. The sums over i run in ascending order, as the CPU's.
__global__ void delta_rule_kernel(DeltaShape shape, const float* qkv, const float* decay,
                                  const float* beta, float* state, float* out, int64_t n) {
    extern __shared__ float shared[];
    const int64_t dk = shape.k_dim, dv = shape.v_dim, nv = shape.n_v_heads;
    float* column = shared;        // [dk x 32]: S[i][j] at i * 32 + lane
    float* q = column + dk * kWarp;  // [dk] the token's q head
    float* k = q + dk;               // [dk] and k head
    const int64_t h = blockIdx.x;
    const int lane = static_cast<int>(threadIdx.x);
    const int64_t j = blockIdx.y * static_cast<int64_t>(kWarp) + lane;
    const bool live = j < dv;
    const int64_t kh = h % shape.n_k_heads;
    const int64_t channels = shape.channels();
    float* s = state + h * dk * dv;  // [dk x dv]
    for (int64_t i = 0; i < dk; ++i) column[i * kWarp + lane] = live ? s[i * dv + j] : 0.0f;
    for (int64_t t = 0; t < n; ++t) {
        const float* row = qkv + t * channels;
        __syncwarp();  // the last token's q and k are read
        for (int64_t i = lane; i < dk; i += kWarp) {
            q[i] = row[kh * dk + i];
            k[i] = row[shape.n_k_heads * dk + kh * dk + i];
        }
        __syncwarp();
        const float d = expf(decay[t * nv + h]);
        float kv = 0.0f;
        for (int64_t i = 0; i < dk; ++i) {
            const float v = column[i * kWarp + lane] * d;
            column[i * kWarp + lane] = v;
            kv += k[i] * v;
        }
        const float v = live ? row[2 * shape.n_k_heads * dk + h * dv + j] : 0.0f;
        const float update = beta[t * nv + h] * (v - kv);
        float o = 0.0f;
        for (int64_t i = 0; i < dk; ++i) {
            const float next = column[i * kWarp + lane] + k[i] * update;
            column[i * kWarp + lane] = next;
            o += q[i] * next;
        }
        if (live) out[t * nv * dv + h * dv + j] = o;
    }
    if (live) {
        for (int64_t i = 0; i < dk; ++i) s[i * dv + j] = column[i * kWarp + lane];
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
    conv_history_kernel<<<blocks_for(conv.channels, kElementThreads), kElementThreads, 0,
                          stream>>>(conv, n);
    check_launch("conv_history");
}

void multiply_by_gate(float* y, int64_t width, const float* gate, int64_t gate_stride, int64_t n,
                      cudaStream_t stream) {
    multiply_by_gate_kernel<<<blocks_for(n * width, kElementThreads), kElementThreads, 0,
                              stream>>>(y, width, gate, gate_stride, n);
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
    const size_t shared = static_cast<size_t>(shape.k_dim * (kWarp + 2)) * sizeof(float);
    // Past the default 48 KiB (k_dim over 350) a kernel must ask for more; none of the
    // families' heads come near it, the attribute only keeps a larger one working.
    if (shared > (48u << 10)) {
        EMBER_CUDA_CHECK(cudaFuncSetAttribute(delta_rule_kernel,
                                              cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              static_cast<int>(shared)));
    }
    const dim3 blocks(static_cast<unsigned>(shape.n_v_heads),
                      static_cast<unsigned>((shape.v_dim + kWarp - 1) / kWarp));
    delta_rule_kernel<<<blocks, kWarp, shared, stream>>>(shape, qkv, decay, beta, state, out, n);
    check_launch("delta_rule");
}

void gated_rms_norm(float* out, const float* z, const float* weight, int64_t rows, int64_t width,
                    float eps, cudaStream_t stream) {
    gated_rms_norm_kernel<<<static_cast<unsigned>(rows), kWarp, 0, stream>>>(out, z, weight,
                                                                            width, eps);
    check_launch("gated_rms_norm");
}

}  // namespace ember::cuda
