// The hybrid families' mixer kernels (mixer_kernels.cuh).
#include <cmath>
#include <stdexcept>
#include <string>

#include "engine/model/cuda/cuda_check.cuh"
#include "engine/model/cuda/launch.cuh"
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
    await_previous_grid();
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
    await_previous_grid();
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
    await_previous_grid();
    const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (c >= conv.channels) return;
    for (int64_t r = 0; r < conv.kernel - 1; ++r) {
        conv.history[r * conv.channels + c] = conv_ext(conv, n + r, c);
    }
}

__global__ void multiply_by_gate_kernel(float* y, int64_t width, const float* gate,
                                        int64_t gate_stride, int64_t n) {
    await_previous_grid();
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i >= n * width) return;
    y[i] *= gate[(i / width) * gate_stride + i % width];
}

// Warp per (token, q or k head): x / sqrt(sum x^2 + 1e-6) * scale. The block y index picks the
// head: q heads first (scaled by 1/sqrt(k_dim)), then k heads.
__global__ void l2_normalize_heads_kernel(DeltaShape shape, float* qkv) {
    await_previous_grid();
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
    await_previous_grid();
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
// A token costs two barriers and two chains of R multiply-adds (one warp walking all k_dim rows
// through shared memory took 5.6 us a token on an H200, 721 us per 128-token batch). The next
// token's inputs are loaded into registers while this one's math runs: waiting for them at each
// token's start, with a third barrier, held a 256-token batch of Qwen3.5-0.8B at 305 us a layer
// (Nsight Compute), half its prefill's kernel time; the prefetch alone made it 255.
constexpr int kDeltaWarps = 4;
constexpr int kParts = kDeltaWarps * kWarp;  // partial sums of a block: a warp's per column

// The kernel's shared memory: two slots each of q, k, and the partial sums.
int64_t delta_rule_shared_floats(int64_t k_dim) {
    return 2 * (2 * k_dim + 2 * kParts);
}

template <int R>
__global__ void __launch_bounds__(kDeltaWarps* kWarp)
    delta_rule_kernel(DeltaShape shape, const float* qkv, const float* decay, const float* beta,
                      float* state, float* out, int64_t n) {
    await_previous_grid();
    extern __shared__ float shared[];
    const int64_t dk = shape.k_dim, dv = shape.v_dim, nv = shape.n_v_heads;
    // Two of each, by token parity (delta_rule_shared_floats), so that a token's writes never
    // meet the last token's reads: two barriers a token rather than three.
    float* q_slots = shared;                   // [2][dk] the token's q head
    float* k_slots = q_slots + 2 * dk;         // [2][dk] and k head
    float* kv_slots = k_slots + 2 * dk;        // [2][kDeltaWarps x 32] partial k^T S
    float* out_slots = kv_slots + 2 * kParts;  // [2][kDeltaWarps x 32] partial q^T S
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
    // Token t's inputs: this thread's elements threadIdx.x + u * blockDim.x of the q and k
    // heads, its column's v, the head's decay and beta.
    constexpr int kHeld = R > kWarp ? R / kWarp : 1;  // k_dim <= R * kDeltaWarps
    float next_q[kHeld], next_k[kHeld], next_v = 0.0f, next_decay = 0.0f, next_beta = 0.0f;
    const auto fetch = [&](int64_t t) {
        const float* row = qkv + t * channels;
#pragma unroll
        for (int u = 0; u < kHeld; ++u) {
            const int64_t i = threadIdx.x + static_cast<int64_t>(u) * blockDim.x;
            next_q[u] = i < dk ? row[kh * dk + i] : 0.0f;
            next_k[u] = i < dk ? row[shape.n_k_heads * dk + kh * dk + i] : 0.0f;
        }
        next_v = live ? row[2 * shape.n_k_heads * dk + h * dv + j] : 0.0f;
        next_decay = decay[t * nv + h];
        next_beta = beta[t * nv + h];
    };
    // Warp 0 adds token t's partial q^T S once every warp has written them (the next token's
    // first barrier, or the one after the loop).
    const auto store_out = [&](int64_t t) {
        if (warp != 0 || !live) return;
        const float* out_part = out_slots + (t & 1) * kParts;
        float o = 0.0f;
        for (int w = 0; w < kDeltaWarps; ++w) o += out_part[w * kWarp + lane];
        out[t * nv * dv + h * dv + j] = o;
    };
    if (n > 0) fetch(0);
    for (int64_t t = 0; t < n; ++t) {
        float* q = q_slots + (t & 1) * dk;
        float* k = k_slots + (t & 1) * dk;
        float* kv_part = kv_slots + (t & 1) * kParts;
        float* out_part = out_slots + (t & 1) * kParts;
#pragma unroll
        for (int u = 0; u < kHeld; ++u) {
            const int64_t i = threadIdx.x + static_cast<int64_t>(u) * blockDim.x;
            if (i < dk) {
                q[i] = next_q[u];
                k[i] = next_k[u];
            }
        }
        const float v = next_v;
        const float d = expf(next_decay);
        const float b = next_beta;
        if (t + 1 < n) fetch(t + 1);  // in flight while this token's math runs
        __syncthreads();              // q and k are in, and the last token's partial q^T S
        if (t > 0) store_out(t - 1);
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
    }
    __syncthreads();  // the last token's partial q^T S
    if (n > 0) store_out(n - 1);
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
    await_previous_grid();
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
    launch_kernel(conv_input_product_kernel, blocks_for(n * width, kElementThreads),
                  kElementThreads, 0, stream, proj, n, width, out);
    check_launch("conv_input_product");
}

void causal_conv(const CausalConv& conv, int64_t n, float* out, cudaStream_t stream) {
    launch_kernel(causal_conv_kernel, blocks_for(n * conv.channels, kElementThreads),
                  kElementThreads, 0, stream, conv, n, out);
    check_launch("causal_conv");
    launch_kernel(conv_history_kernel, blocks_for(conv.channels, kElementThreads), kElementThreads,
                  0, stream, conv, n);
    check_launch("conv_history");
}

void multiply_by_gate(float* y, int64_t width, const float* gate, int64_t gate_stride, int64_t n,
                      cudaStream_t stream) {
    launch_kernel(multiply_by_gate_kernel, blocks_for(n * width, kElementThreads), kElementThreads,
                  0, stream, y, width, gate, gate_stride, n);
    check_launch("multiply_by_gate");
}

void delta_prepare(const DeltaShape& shape, float* qkv, float* decay, float* beta, const float* a,
                   const float* dt_bias, int64_t n, cudaStream_t stream) {
    const dim3 heads(static_cast<unsigned>(n), static_cast<unsigned>(2 * shape.n_k_heads));
    launch_kernel(l2_normalize_heads_kernel, heads, kWarp, 0, stream, shape, qkv);
    check_launch("l2_normalize_heads");
    launch_kernel(delta_gates_kernel, blocks_for(n * shape.n_v_heads, kElementThreads),
                  kElementThreads, 0, stream, shape.n_v_heads, decay, beta, a, dt_bias, n);
    check_launch("delta_gates");
}

void delta_rule(const DeltaShape& shape, const float* qkv, const float* decay, const float* beta,
                float* state, float* out, int64_t n, cudaStream_t stream) {
    const auto shared = static_cast<size_t>(delta_rule_shared_floats(shape.k_dim)) * sizeof(float);
    const dim3 blocks(static_cast<unsigned>(shape.n_v_heads),
                      static_cast<unsigned>((shape.v_dim + kWarp - 1) / kWarp));
    const dim3 threads(kDeltaWarps * kWarp);
    // Rows per warp, rounded up to the next size compiled: k_dim 128 (Qwen3.5) holds 32.
    const int64_t rows = (shape.k_dim + kDeltaWarps - 1) / kDeltaWarps;
    if (rows <= 4) {
        launch_kernel(delta_rule_kernel<4>, blocks, threads, shared, stream, shape, qkv, decay,
                      beta, state, out, n);
    } else if (rows <= 8) {
        launch_kernel(delta_rule_kernel<8>, blocks, threads, shared, stream, shape, qkv, decay,
                      beta, state, out, n);
    } else if (rows <= 16) {
        launch_kernel(delta_rule_kernel<16>, blocks, threads, shared, stream, shape, qkv, decay,
                      beta, state, out, n);
    } else if (rows <= 32) {
        launch_kernel(delta_rule_kernel<32>, blocks, threads, shared, stream, shape, qkv, decay,
                      beta, state, out, n);
    } else if (rows <= 64) {
        launch_kernel(delta_rule_kernel<64>, blocks, threads, shared, stream, shape, qkv, decay,
                      beta, state, out, n);
    } else {
        throw std::runtime_error("CUDA delta rule: k_dim " + std::to_string(shape.k_dim) +
                                 " is over the 256 the kernel holds in registers");
    }
    check_launch("delta_rule");
}

void gated_rms_norm(float* out, const float* z, const float* weight, int64_t rows, int64_t width,
                    float eps, cudaStream_t stream) {
    launch_kernel(gated_rms_norm_kernel, static_cast<unsigned>(rows), kWarp, 0, stream, out, z,
                  weight, width, eps);
    check_launch("gated_rms_norm");
}

}  // namespace ember::cuda
