// The CUDA backend's vector kernels: norms, residual adds, activations, head preparation
// (biases, q/k norms, RoPE), KV-cache writes and attention. Each launcher enqueues on `stream`
// and checks the launch. Every sum runs in a fixed order (no atomics): the same input gives
// the same bits run to run, and a token's results do not depend on the batch it came in.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "engine/model/kv_type.h"

namespace ember::cuda {

// out[r] = x[r] * weight / rms(x[r]) for `rows` rows of `width`; out may alias x. The sum of
// squares in f32, in a fixed order.
void rms_norm_rows(const float* x, const float* weight, float* out, int64_t rows, int64_t width,
                   float eps, cudaStream_t stream);
// x[r] += delta[r], then out[r] = rms_norm(x[r]) * weight; out may alias x or delta.
void add_rms_norm_rows(float* x, const float* delta, const float* weight, float* out, int64_t rows,
                       int64_t width, float eps, cudaStream_t stream);
// y[i] += x[i]
void add(float* y, const float* x, int64_t n, cudaStream_t stream);
// y[r * width + i] += bias[i]
void add_bias_rows(float* y, const float* bias, int64_t rows, int64_t width, cudaStream_t stream);
// gate[i] = silu(gate[i]) * up[i]  or  gelu_tanh(gate[i]) * up[i]
void swiglu(float* gate, const float* up, int64_t n, cudaStream_t stream);
void gelu_tanh_gate(float* gate, const float* up, int64_t n, cudaStream_t stream);
// x[i] *= sigmoid(gate[i])
void sigmoid_gate(float* x, const float* gate, int64_t n, cudaStream_t stream);
// [n x n_head x (query | gate)] -> q, gate [n x n_head*head_dim]
void split_query_gate(const float* q_proj, float* q, float* gate, int64_t n, int64_t n_head,
                      int64_t head_dim, cudaStream_t stream);
// x[i] = cap * tanh(x[i] / cap)
void soft_cap(float* x, int64_t n, float cap, cudaStream_t stream);

// Positions come from device memory (`pos0`: the batch's first position, written by the
// backend before the kernels run), so a captured decode step replays at any position.

// The tokens of a batch drawn from several conversations (a server's batched decode step,
// cuda_backend.cu): token t is at position positions[t] of its own KV cache, whose rows of the
// layer in hand start at k[t] and v[t] (the layer view gives their type, widths and slots,
// the same for every conversation). Default (all null): one conversation, token t at
// *pos0 + t in the layer view's rows. The arithmetic is the same either way: a token's bits
// do not depend on which conversations share its batch.
struct TokenRows {
    const int64_t* positions = nullptr;  // device [n]
    uint8_t* const* k = nullptr;         // device [n]
    uint8_t* const* v = nullptr;         // device [n]
    __host__ __device__ bool several() const { return positions != nullptr; }
};

// One layer of the device KV cache: `slots` rows of K and V in the cache's type (a sliding
// layer's ring: position p in slot p % slots; a full layer: slots = capacity).
struct KvLayerView {
    uint8_t* k = nullptr;  // [slots x k_row_bytes]
    uint8_t* v = nullptr;  // [slots x v_row_bytes]
    int64_t slots = 0;
    bool ring = false;
    KvType type = KvType::F16;
    int64_t k_width = 0;  // elements of a row (n_head_kv * head_dim)
    int64_t v_width = 0;
};

// The heads of a batch: per-head RMS norm (weights or null) and RoPE of q [n x n_head x
// head_dim] and k [n x n_head_kv x head_dim], in place. Token t is at position *pos0 + t; the
// angle of pair i is (position * freq_scale) * inv_freq[i], formed in double as the CPU's table.
struct HeadShape {
    int64_t n_head = 0;
    int64_t n_head_kv = 0;
    int64_t head_dim = 0;
    int64_t rope_dims = 0;
    bool rope_halves = false;  // pairs (i, i + dims/2), else (2i, 2i + 1)
    float eps = 1e-6f;
};
// The biases of the heads, added first (one f32 add each, as add_bias_rows): q [n_head *
// head_dim], k [n_head_kv * head_dim], v [n_head_kv * value_dim] added to v_rows [n x
// n_head_kv * value_dim] by blocks of their own. Null where the model has none.
struct HeadBiases {
    const float* q = nullptr;
    const float* k = nullptr;
    const float* v = nullptr;
    float* v_rows = nullptr;
    int64_t value_dim = 0;
};
// `cache` non-null: the launch does store_kv's work too, each K head written to the cache as
// it is rotated and each V head (biases.v_rows, value_dim wide) by a block of its own, a launch
// less per attention layer (2.5 us of a Qwen3-30B-A3B decode layer's ~81 on an H200). Only
// where heads_store_kv() says the row layout allows it.
void norm_rope_heads(const HeadShape& shape, float* q, float* k, const float* q_norm,
                     const float* k_norm, const double* inv_freq, double freq_scale,
                     const int64_t* pos0, int64_t n, cudaStream_t stream,
                     const TokenRows& tokens = {}, const HeadBiases& biases = {},
                     const KvLayerView* cache = nullptr);
// Whether norm_rope_heads can write `layer`'s rows: a head's elements whole q8_0 blocks of the
// row (head and value sizes multiples of 32), or an f32 / f16 cache.
bool heads_store_kv(const KvLayerView& layer, int64_t head_dim, int64_t value_dim);

// Writes the rows of positions pos0.. from f32 k [n x k_width], v [n x v_width], converted as
// the CPU's KvCache::store does (f16 round to nearest even; q8_0 blocks per row).
void store_kv(const KvLayerView& layer, const float* k, const float* v, const int64_t* pos0,
              int64_t n, cudaStream_t stream, const TokenRows& tokens = {});

// Attention of n queries at positions pos0.. over `layer` (rows stored already), causal,
// optionally over the last `window` positions, scores scaled, soft-capped, with sink logits
// per head. q [n x n_head*head_dim], out [n x n_head*value_dim]. `chunks`: chunks of positions
// the launch covers, chunks_through(the batch's last position) or more (a captured step covers
// the whole context; blocks past a query's position return at once); `partials` is scratch of
// attention_partials_floats() floats for that many chunks.
struct AttendShape {
    int64_t n_head = 0;
    int64_t n_head_kv = 0;
    int64_t head_dim = 0;
    int64_t value_dim = 0;
    int64_t window = 0;
    float scale = 1.0f;
    float softcap = 0.0f;
    const float* sinks = nullptr;  // device [n_head], or null
    int64_t chunk = 256;           // positions per partial record: attention_chunk(n)
    // Batches over the exact-batch limit over an f16 cache may run on the tensor cores
    // (flash_attention.cuh); false keeps the f32 kernels (to compare the two).
    bool tensor_cores = true;
    // Batches within the exact-batch limit: device [kExactBatchTokens x n_head] counters, zero
    // between launches, with which the last block of a head's records merges them in the same
    // launch (a launch less per attention layer: the merge took 3.4 us of a Qwen3-30B-A3B decode
    // layer's ~81 on an H200); null: a merge launch of its own.
    unsigned* merge_counters = nullptr;
};
// Positions per partial record for a batch of n tokens (fixed for each side of the exact-batch
// limit, so a token's bits depend only on its position), and the chunks up to a position.
int64_t attention_chunk(int64_t n);
int64_t chunks_through(int64_t last_position, int64_t chunk);
int64_t attention_partials_floats(const AttendShape& shape, int64_t n, int64_t chunks);
// Tokens of several conversations (TokenRows) take the short batches' kernels: n at most
// kExactBatchTokens, `chunks` through the latest position of any of them.
void attend(const AttendShape& shape, const KvLayerView& layer, const float* q, const int64_t* pos0,
            int64_t n, int64_t chunks, float* partials, float* out, cudaStream_t stream,
            const TokenRows& tokens = {});

}  // namespace ember::cuda
