// The CUDA backend's vector kernels (layer_kernels.cuh): norms, adds, activations, heads.
// Attention and the KV writes are in attention_kernels.cu.
#include <cuda_fp16.h>

#include <cmath>

#include "engine/model/cuda/cuda_check.cuh"
#include "engine/model/cuda/layer_kernels.cuh"
#include "engine/model/cuda/reduce.cuh"

namespace ember::cuda {

namespace {

constexpr int kRowThreads = 256;     // one block per row of a norm
constexpr int kHeadThreads = 128;    // one block per head
constexpr int kMaxHeadDim = 512;     // shared memory of a head
constexpr int kElementThreads = 256;

unsigned blocks_for(int64_t n, int threads) {
    return static_cast<unsigned>((n + threads - 1) / threads);
}

__global__ void rms_norm_rows_kernel(const float* x, const float* weight, float* out,
                                     int64_t width, float eps) {
    const float* row = x + blockIdx.x * width;  // [width]
    float* dst = out + blockIdx.x * width;
    double sum = 0.0;
    for (int64_t i = threadIdx.x; i < width; i += blockDim.x) {
        const double v = row[i];
        sum += v * v;
    }
    __shared__ double partial[kRowThreads / 32];
    sum = block_sum(sum, partial);
    const auto inv = static_cast<float>(1.0 / sqrt(sum / static_cast<double>(width) + eps));
    for (int64_t i = threadIdx.x; i < width; i += blockDim.x) dst[i] = row[i] * inv * weight[i];
}

__global__ void add_kernel(float* y, const float* x, int64_t n) {
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i < n) y[i] += x[i];
}

__global__ void add_bias_rows_kernel(float* y, const float* bias, int64_t n, int64_t width) {
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i < n) y[i] += bias[i % width];
}

__global__ void swiglu_kernel(float* gate, const float* up, int64_t n) {
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i < n) {
        const float g = gate[i];
        gate[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

__global__ void gelu_tanh_gate_kernel(float* gate, const float* up, int64_t n) {
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i < n) {
        const float k = 0.7978845608028654f;  // sqrt(2/pi)
        const float x = gate[i];
        gate[i] = 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x))) * up[i];
    }
}

__global__ void sigmoid_gate_kernel(float* x, const float* gate, int64_t n) {
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i < n) x[i] *= 1.0f / (1.0f + expf(-gate[i]));
}

__global__ void split_query_gate_kernel(const float* q_proj, float* q, float* gate, int64_t n,
                                        int64_t head_dim) {
    // i indexes q [n x n_head*head_dim]; its source is head h of token t's [query | gate] pair.
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i >= n) return;
    const int64_t head = i / head_dim;
    const int64_t d = i % head_dim;
    q[i] = q_proj[head * 2 * head_dim + d];
    gate[i] = q_proj[head * 2 * head_dim + head_dim + d];
}

__global__ void soft_cap_kernel(float* x, int64_t n, float cap) {
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i < n) x[i] = cap * tanhf(x[i] / cap);
}

// Block (head, token): the head's RMS norm, then RoPE over its first rope_dims elements.
__global__ void norm_rope_heads_kernel(HeadShape shape, float* q, float* k, const float* q_norm,
                                       const float* k_norm, const double* inv_freq,
                                       double freq_scale, const int64_t* pos0_at) {
    const int64_t pos0 = *pos0_at;
    const int64_t t = blockIdx.y;
    const bool is_query = blockIdx.x < shape.n_head;
    const int64_t head = is_query ? blockIdx.x : blockIdx.x - shape.n_head;
    const int64_t heads = is_query ? shape.n_head : shape.n_head_kv;
    float* x = (is_query ? q : k) + (t * heads + head) * shape.head_dim;  // [head_dim]
    const float* norm = is_query ? q_norm : k_norm;
    __shared__ float h[kMaxHeadDim];
    __shared__ double partial[kHeadThreads / 32];
    const int64_t dim = shape.head_dim;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) h[i] = x[i];
    __syncthreads();
    if (norm) {
        double sum = 0.0;
        for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) sum += double(h[i]) * h[i];
        sum = block_sum(sum, partial);
        const auto inv = static_cast<float>(1.0 / sqrt(sum / static_cast<double>(dim) + shape.eps));
        __syncthreads();
        for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) h[i] = h[i] * inv * norm[i];
        __syncthreads();
    }
    const int64_t half = shape.rope_dims / 2;
    const double position = static_cast<double>(pos0 + t) * freq_scale;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
        float value = h[i];
        if (i < shape.rope_dims) {
            // Pair (a, b) of element i, and which of the two it is.
            const int64_t pair = shape.rope_halves ? i % half : i / 2;
            const bool first = shape.rope_halves ? i < half : i % 2 == 0;
            const int64_t a = shape.rope_halves ? pair : 2 * pair;
            const int64_t b = shape.rope_halves ? pair + half : 2 * pair + 1;
            const double angle = position * inv_freq[pair];
            const auto c = static_cast<float>(cos(angle));
            const auto s = static_cast<float>(sin(angle));
            value = first ? h[a] * c - h[b] * s : h[a] * s + h[b] * c;
        }
        x[i] = value;
    }
}

template <class Kernel, class... Args>
void launch_elements(Kernel kernel, const char* name, int64_t n, cudaStream_t stream,
                     Args... args) {
    if (n <= 0) return;
    kernel<<<blocks_for(n, kElementThreads), kElementThreads, 0, stream>>>(args...);
    check_launch(name);
}

}  // namespace

void rms_norm_rows(const float* x, const float* weight, float* out, int64_t rows, int64_t width,
                   float eps, cudaStream_t stream) {
    if (rows <= 0) return;
    rms_norm_rows_kernel<<<static_cast<unsigned>(rows), kRowThreads, 0, stream>>>(x, weight, out,
                                                                                 width, eps);
    check_launch("rms_norm_rows");
}

void add(float* y, const float* x, int64_t n, cudaStream_t stream) {
    launch_elements(add_kernel, "add", n, stream, y, x, n);
}

void add_bias_rows(float* y, const float* bias, int64_t rows, int64_t width,
                   cudaStream_t stream) {
    launch_elements(add_bias_rows_kernel, "add_bias_rows", rows * width, stream, y, bias,
                    rows * width, width);
}

void swiglu(float* gate, const float* up, int64_t n, cudaStream_t stream) {
    launch_elements(swiglu_kernel, "swiglu", n, stream, gate, up, n);
}

void gelu_tanh_gate(float* gate, const float* up, int64_t n, cudaStream_t stream) {
    launch_elements(gelu_tanh_gate_kernel, "gelu_tanh_gate", n, stream, gate, up, n);
}

void sigmoid_gate(float* x, const float* gate, int64_t n, cudaStream_t stream) {
    launch_elements(sigmoid_gate_kernel, "sigmoid_gate", n, stream, x, gate, n);
}

void split_query_gate(const float* q_proj, float* q, float* gate, int64_t n, int64_t n_head,
                      int64_t head_dim, cudaStream_t stream) {
    const int64_t elems = n * n_head * head_dim;
    launch_elements(split_query_gate_kernel, "split_query_gate", elems, stream, q_proj, q, gate,
                    elems, head_dim);
}

void soft_cap(float* x, int64_t n, float cap, cudaStream_t stream) {
    launch_elements(soft_cap_kernel, "soft_cap", n, stream, x, n, cap);
}

void norm_rope_heads(const HeadShape& shape, float* q, float* k, const float* q_norm,
                     const float* k_norm, const double* inv_freq, double freq_scale,
                     const int64_t* pos0, int64_t n, cudaStream_t stream) {
    if (n <= 0) return;
    if (shape.head_dim > kMaxHeadDim) {
        throw std::invalid_argument("CUDA backend: head size " + std::to_string(shape.head_dim) +
                                    " is over " + std::to_string(kMaxHeadDim));
    }
    const dim3 grid(static_cast<unsigned>(shape.n_head + shape.n_head_kv),
                    static_cast<unsigned>(n));
    norm_rope_heads_kernel<<<grid, kHeadThreads, 0, stream>>>(shape, q, k, q_norm, k_norm,
                                                              inv_freq, freq_scale, pos0);
    check_launch("norm_rope_heads");
}

}  // namespace ember::cuda
