// The CUDA backend's vector kernels (layer_kernels.cuh): norms, adds, activations, heads.
// Attention and the KV writes are in attention_kernels.cu.
#include <cuda_fp16.h>

#include <cmath>

#include "engine/model/cuda/activations.cuh"
#include "engine/model/cuda/cuda_check.cuh"
#include "engine/model/cuda/kv_rows.cuh"
#include "engine/model/cuda/launch.cuh"
#include "engine/model/cuda/layer_kernels.cuh"
#include "engine/model/cuda/reduce.cuh"

namespace ember::cuda {

namespace {

constexpr int kRowThreads = 256;   // one block per row of a norm
constexpr int kHeadThreads = 128;  // one block per head
constexpr int kMaxHeadDim = 512;   // shared memory of a head
constexpr int kElementThreads = 256;

unsigned blocks_for(int64_t n, int threads) {
    return static_cast<unsigned>((n + threads - 1) / threads);
}

// Block per row: optionally x += delta first (the residual add of the sub-block before), then
// out = x * weight / rms(x). Each thread owns the elements threadIdx.x + k * blockDim.x in both
// passes, so out may alias x or delta: a thread reads an element before it writes it, and no
// other thread touches it. The sum of squares in f32 per thread, then the fixed-order block sum:
// f32 is plenty against the 2e-3 bound (double ran at 1/64 of the f32 rate on the cards most
// users own).
__global__ void add_rms_norm_rows_kernel(float* x, const float* delta, const float* weight,
                                         float* out, int64_t width, float eps) {
    await_previous_grid();
    float* row = x + blockIdx.x * width;  // [width]
    const float* add = delta ? delta + blockIdx.x * width : nullptr;
    float* dst = out + blockIdx.x * width;
    float sum = 0.0f;
    for (int64_t i = threadIdx.x; i < width; i += blockDim.x) {
        float v = row[i];
        if (add) {
            v += add[i];
            row[i] = v;
        }
        sum = __fmaf_rn(v, v, sum);
    }
    __shared__ float partial[kRowThreads / 32];
    sum = block_sum(sum, partial);
    const float inv = rsqrtf(sum / static_cast<float>(width) + eps);
    for (int64_t i = threadIdx.x; i < width; i += blockDim.x) dst[i] = row[i] * inv * weight[i];
}

// The same with the row held in registers, for rows up to kHeldThreads * kPerThread wide: one
// round of loads (x, delta and the weight together) instead of a second pass over memory, and
// 1024 threads in flight on the single row of a decode step (256 threads and two passes took
// 7 us of a step's 2.5 ms per norm on an H100).
constexpr int kHeldThreads = 1024;

template <int kPerThread>
__global__ void __launch_bounds__(kHeldThreads)
    add_rms_norm_held_kernel(float* x, const float* delta, const float* weight, float* out,
                             int64_t width, float eps) {
    await_previous_grid();
    float* row = x + blockIdx.x * width;  // [width]
    const float* add = delta ? delta + blockIdx.x * width : nullptr;
    float v[kPerThread];
    float w[kPerThread];
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
        const int64_t i = threadIdx.x + static_cast<int64_t>(k) * kHeldThreads;
        v[k] = i < width ? row[i] : 0.0f;
        w[k] = i < width ? weight[i] : 0.0f;
        if (add && i < width) v[k] += add[i];
    }
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
        const int64_t i = threadIdx.x + static_cast<int64_t>(k) * kHeldThreads;
        if (add && i < width) row[i] = v[k];
        sum = __fmaf_rn(v[k], v[k], sum);
    }
    __shared__ float partial[kHeldThreads / 32];
    sum = block_sum(sum, partial);
    const float inv = rsqrtf(sum / static_cast<float>(width) + eps);
    float* dst = out + blockIdx.x * width;
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
        const int64_t i = threadIdx.x + static_cast<int64_t>(k) * kHeldThreads;
        if (i < width) dst[i] = v[k] * inv * w[k];
    }
}

__global__ void add_kernel(float* y, const float* x, int64_t n) {
    await_previous_grid();
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i < n) y[i] += x[i];
}

__global__ void add_bias_rows_kernel(float* y, const float* bias, int64_t n, int64_t width) {
    await_previous_grid();
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i < n) y[i] += bias[i % width];
}

template <GatedActivation A>
__global__ void gated_activation_kernel(float* gate, const float* up, int64_t n) {
    await_previous_grid();
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i < n) gate[i] = gate_activation<A>(gate[i], up[i]);
}

__global__ void sigmoid_gate_kernel(float* x, const float* gate, int64_t n) {
    await_previous_grid();
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i < n) x[i] *= 1.0f / (1.0f + expf(-gate[i]));
}

__global__ void split_query_gate_kernel(const float* q_proj, float* q, float* gate, int64_t n,
                                        int64_t head_dim) {
    await_previous_grid();
    // i indexes q [n x n_head*head_dim]; its source is head h of token t's [query | gate] pair.
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i >= n) return;
    const int64_t head = i / head_dim;
    const int64_t d = i % head_dim;
    q[i] = q_proj[head * 2 * head_dim + d];
    gate[i] = q_proj[head * 2 * head_dim + head_dim + d];
}

__global__ void soft_cap_kernel(float* x, int64_t n, float cap) {
    await_previous_grid();
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i < n) x[i] = cap * tanhf(x[i] / cap);
}

// Block (head, token): the head's RMS norm, then RoPE over its first rope_dims elements, one
// thread per rotated pair. The angle is formed and reduced to [-pi, pi] in double (positions
// times frequencies reach 1e5 radians, where f32 would keep three digits), then sin/cos in f32.
// Blocks past the query and key heads (as many as KV heads, with biases.v or a cache) add the
// value heads' bias and return: the biases of a step take no launches of their own. With a
// cache (cache.layer.k non-null), the key heads and value heads are written into it too, as
// store_kv writes them.
struct HeadCache {
    KvLayerView layer;  // layer.k null: no store
    int64_t k_row_bytes = 0;
    int64_t v_row_bytes = 0;
};

__global__ void norm_rope_heads_kernel(HeadShape shape, float* q, float* k, const float* q_norm,
                                       const float* k_norm, const double* inv_freq,
                                       double freq_scale, const int64_t* pos0_at, TokenRows tokens,
                                       HeadBiases biases, HeadCache cache) {
    await_previous_grid();
    const int64_t t = blockIdx.y;
    const int64_t token_position = position_of(pos0_at, tokens, t);
    const bool storing = cache.layer.k != nullptr;
    const int64_t slot = storing ? slot_of(cache.layer, token_position) : 0;
    if (blockIdx.x >= shape.n_head + shape.n_head_kv) {
        const int64_t head = blockIdx.x - shape.n_head - shape.n_head_kv;
        float* v = biases.v_rows + (t * shape.n_head_kv + head) * biases.value_dim;
        if (biases.v) {
            const float* bias = biases.v + head * biases.value_dim;
            for (int64_t i = threadIdx.x; i < biases.value_dim; i += blockDim.x) {
                v[i] = v[i] + bias[i];
            }
            if (storing) __syncthreads();  // the store's q8_0 warps read other threads' sums
        }
        if (storing) {
            uint8_t* row = rows_of(cache.layer, tokens, t, true) + slot * cache.v_row_bytes;
            store_row_elements(cache.layer.type, row, head * biases.value_dim, v, biases.value_dim,
                               cache.layer.v_width);
        }
        return;
    }
    const bool is_query = blockIdx.x < shape.n_head;
    const int64_t head = is_query ? blockIdx.x : blockIdx.x - shape.n_head;
    const int64_t heads = is_query ? shape.n_head : shape.n_head_kv;
    float* x = (is_query ? q : k) + (t * heads + head) * shape.head_dim;  // [head_dim]
    const float* norm = is_query ? q_norm : k_norm;
    const float* bias = is_query ? biases.q : biases.k;
    if (bias) bias += head * shape.head_dim;
    __shared__ float h[kMaxHeadDim];
    __shared__ float partial[kHeadThreads / 32];
    const int64_t dim = shape.head_dim;
    float sum = 0.0f;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
        h[i] = bias ? x[i] + bias[i] : x[i];
        sum = __fmaf_rn(h[i], h[i], sum);
    }
    __syncthreads();
    if (norm) {
        sum = block_sum(sum, partial);
        const float inv = rsqrtf(sum / static_cast<float>(dim) + shape.eps);
        for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) h[i] = h[i] * inv * norm[i];
        __syncthreads();
    }
    const int64_t half = shape.rope_dims / 2;
    const double position = static_cast<double>(token_position) * freq_scale;
    constexpr double kTwoPi = 6.283185307179586476925286766559;
    for (int64_t pair = threadIdx.x; pair < half; pair += blockDim.x) {
        const int64_t a = shape.rope_halves ? pair : 2 * pair;
        const int64_t b = shape.rope_halves ? pair + half : 2 * pair + 1;
        const double angle = position * inv_freq[pair];
        const auto reduced = static_cast<float>(angle - kTwoPi * rint(angle / kTwoPi));
        float s, c;
        sincosf(reduced, &s, &c);
        const float rotated_a = h[a] * c - h[b] * s;
        const float rotated_b = h[a] * s + h[b] * c;
        x[a] = rotated_a;
        x[b] = rotated_b;
        h[a] = rotated_a;  // the pair is this thread's alone
        h[b] = rotated_b;
    }
    for (int64_t i = shape.rope_dims + threadIdx.x; i < dim; i += blockDim.x) x[i] = h[i];
    if (is_query || !storing) return;
    __syncthreads();
    uint8_t* row = rows_of(cache.layer, tokens, t, false) + slot * cache.k_row_bytes;
    store_row_elements(cache.layer.type, row, head * dim, h, dim, cache.layer.k_width);
}

template <class Kernel, class... Args>
void launch_elements(Kernel kernel, const char* name, int64_t n, cudaStream_t stream,
                     Args... args) {
    if (n <= 0) return;
    launch_kernel(kernel, blocks_for(n, kElementThreads), kElementThreads, 0, stream, args...);
    check_launch(name);
}

}  // namespace

void add_rms_norm_rows(float* x, const float* delta, const float* weight, float* out, int64_t rows,
                       int64_t width, float eps, cudaStream_t stream) {
    if (rows <= 0) return;
    const auto grid = static_cast<unsigned>(rows);
    const int64_t per_thread = (width + kHeldThreads - 1) / kHeldThreads;
    if (per_thread <= 1) {
        launch_kernel(add_rms_norm_held_kernel<1>, grid, kHeldThreads, 0, stream, x, delta, weight,
                      out, width, eps);
    } else if (per_thread <= 2) {
        launch_kernel(add_rms_norm_held_kernel<2>, grid, kHeldThreads, 0, stream, x, delta, weight,
                      out, width, eps);
    } else if (per_thread <= 4) {
        launch_kernel(add_rms_norm_held_kernel<4>, grid, kHeldThreads, 0, stream, x, delta, weight,
                      out, width, eps);
    } else if (per_thread <= 8) {
        launch_kernel(add_rms_norm_held_kernel<8>, grid, kHeldThreads, 0, stream, x, delta, weight,
                      out, width, eps);
    } else {
        launch_kernel(add_rms_norm_rows_kernel, grid, kRowThreads, 0, stream, x, delta, weight, out,
                      width, eps);
    }
    check_launch("add_rms_norm_rows");
}

void rms_norm_rows(const float* x, const float* weight, float* out, int64_t rows, int64_t width,
                   float eps, cudaStream_t stream) {
    // Without a delta the kernels only read x.
    add_rms_norm_rows(const_cast<float*>(x), nullptr, weight, out, rows, width, eps, stream);
}

void add(float* y, const float* x, int64_t n, cudaStream_t stream) {
    launch_elements(add_kernel, "add", n, stream, y, x, n);
}

void add_bias_rows(float* y, const float* bias, int64_t rows, int64_t width, cudaStream_t stream) {
    launch_elements(add_bias_rows_kernel, "add_bias_rows", rows * width, stream, y, bias,
                    rows * width, width);
}

void swiglu(float* gate, const float* up, int64_t n, cudaStream_t stream) {
    launch_elements(gated_activation_kernel<GatedActivation::Silu>, "swiglu", n, stream, gate, up,
                    n);
}

void gelu_tanh_gate(float* gate, const float* up, int64_t n, cudaStream_t stream) {
    launch_elements(gated_activation_kernel<GatedActivation::GeluTanh>, "gelu_tanh_gate", n, stream,
                    gate, up, n);
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

bool heads_store_kv(const KvLayerView& layer, int64_t head_dim, int64_t value_dim) {
    return layer.type != KvType::Q8_0 ||
           (head_dim % kKvQ8Block == 0 && value_dim % kKvQ8Block == 0);
}

void norm_rope_heads(const HeadShape& shape, float* q, float* k, const float* q_norm,
                     const float* k_norm, const double* inv_freq, double freq_scale,
                     const int64_t* pos0, int64_t n, cudaStream_t stream, const TokenRows& tokens,
                     const HeadBiases& biases, const KvLayerView* cache) {
    if (n <= 0) return;
    if (shape.head_dim > kMaxHeadDim) {
        throw std::invalid_argument("CUDA backend: head size " + std::to_string(shape.head_dim) +
                                    " is over " + std::to_string(kMaxHeadDim));
    }
    HeadCache store;
    if (cache) {
        if (!heads_store_kv(*cache, shape.head_dim, biases.value_dim) || !biases.v_rows) {
            throw std::invalid_argument("CUDA backend: heads of this size cannot be stored here");
        }
        store.layer = *cache;
        store.k_row_bytes = kv_row_bytes(cache->type, cache->k_width);
        store.v_row_bytes = kv_row_bytes(cache->type, cache->v_width);
    }
    const int64_t v_blocks = biases.v || cache ? shape.n_head_kv : 0;
    const dim3 grid(static_cast<unsigned>(shape.n_head + shape.n_head_kv + v_blocks),
                    static_cast<unsigned>(n));
    launch_kernel(norm_rope_heads_kernel, grid, kHeadThreads, 0, stream, shape, q, k, q_norm,
                  k_norm, inv_freq, freq_scale, pos0, tokens, biases, store);
    check_launch("norm_rope_heads");
}

}  // namespace ember::cuda
