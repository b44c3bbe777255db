// The recurrent mixers of the hybrid families on the GPU (Backend::short_conv_mixer,
// Backend::delta_net_mixer): the kernels between their projections (which go through the
// backend's matmuls), and the buffers a batch needs. The arithmetic follows the CPU's
// (cpu/short_conv.cpp, cpu/delta_net.cpp) step for step, in the same order, so the two agree
// to rounding; every sum runs in a fixed order (no atomics), so a token's results do not depend
// on the batch it came in, and the delta rule runs token by token for every batch length.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace ember::cuda {

// out [n x width] = proj[t][0..width) * proj[t][2*width..3*width): lfm2's B*x, from its
// in-projection [n x 3*width] laid out [B | C | x].
void conv_input_product(const float* proj, int64_t n, int64_t width, float* out,
                        cudaStream_t stream);

// Depthwise causal convolution over time continuing from `history`, as cpu::causal_conv:
//   out[t][c] = sum_k taps[c*kernel + k] * ext[t + k][c],  ext = history rows ++ in rows,
// then silu(out) when `silu`. in: row t at in + t*in_stride ([channels]); history
// [(kernel-1) x channels], oldest first, becomes the last kernel-1 rows of ext; out
// [n x channels].
struct CausalConv {
    const float* in = nullptr;
    int64_t in_stride = 0;
    float* history = nullptr;
    const float* taps = nullptr;  // [channels x kernel]
    int64_t kernel = 0;
    int64_t channels = 0;
    bool silu = false;
};
void causal_conv(const CausalConv& conv, int64_t n, float* out, cudaStream_t stream);

// y[t][i] *= gate[t * gate_stride + i] for i < width (lfm2's C gate on the conv output).
void multiply_by_gate(float* y, int64_t width, const float* gate, int64_t gate_stride, int64_t n,
                      cudaStream_t stream);

// The shape of a GatedDeltaNet layer: n_k_heads q/k heads of k_dim, n_v_heads v heads of v_dim
// (v head h reads q/k head h % n_k_heads). Its conv output rows are [q | k | v]:
// [n_k*k_dim | n_k*k_dim | n_v*v_dim] (`channels` wide).
struct DeltaShape {
    int64_t n_k_heads = 0;
    int64_t n_v_heads = 0;
    int64_t k_dim = 0;
    int64_t v_dim = 0;
    __host__ __device__ int64_t channels() const {
        return 2 * n_k_heads * k_dim + n_v_heads * v_dim;
    }
};

// In place over a batch of n tokens: q and k heads of `qkv` [n x channels] L2-normalized (q
// also scaled by 1/sqrt(k_dim)); decay [n x n_v] = a * softplus(decay + dt_bias) (the log decay,
// <= 0); beta [n x n_v] = sigmoid(beta).
void delta_prepare(const DeltaShape& shape, float* qkv, float* decay, float* beta, const float* a,
                   const float* dt_bias, int64_t n, cudaStream_t stream);

// The gated delta rule token by token, per v head with state S [k_dim x v_dim]:
//   S = e^decay S;  S += k (beta (v - k^T S))^T;  out = q^T S
// state [n_v x k_dim x v_dim] updated in place; out [n x n_v*v_dim].
void delta_rule(const DeltaShape& shape, const float* qkv, const float* decay, const float* beta,
                float* state, float* out, int64_t n, cudaStream_t stream);

// out[r] = rms_norm(out[r]) * weight * silu(z[r]) for `rows` rows of `width` (the delta net's
// gated norm per v head: rows = n * n_v, width = v_dim).
void gated_rms_norm(float* out, const float* z, const float* weight, int64_t rows, int64_t width,
                    float eps, cudaStream_t stream);

// A batch's buffers for the mixers, [tokens x width] each, sized for kMaxBatch tokens of the
// model's mixers (empty for the other families).
struct MixerBuffers {
    float* proj = nullptr;      // [b x max(3*n_embd, channels)] the in-projection
    float* z = nullptr;         // [b x n_v*v_dim] the delta net's output gate
    float* decay = nullptr;     // [b x n_v]
    float* beta = nullptr;      // [b x n_v]
    float* conv_in = nullptr;   // [b x n_embd] lfm2's B*x
    float* conv_out = nullptr;  // [b x max(n_embd, channels)]
    float* core = nullptr;      // [b x n_v*v_dim] the delta rule's output
};

}  // namespace ember::cuda
