// The forward passes of the hybrid families: lfm2 (short gated convolutions + attention) and
// qwen35 (GatedDeltaNet linear attention + gated attention). forward() dispatches here.
//
// Shared pieces (attention over the KV cache, FFN, causal conv, norms) live in
// forward_hybrid.cpp; each family's layer loop and its recurrent mixer live in
// forward_lfm2.cpp and forward_qwen35.cpp.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/model/forward.h"

namespace ember {

class Model;
class ThreadPool;
struct InferenceState;
struct LayerWeights;
struct HybridScratch;

// Called by forward(), which checks the tokens first. Additionally the recurrent state must be at
// the KV cache's length: a cache rolled back to 0 resets it, any other mismatch throws
// std::logic_error (restore a snapshot instead; see recurrent_state.h).
std::span<const float> forward_hybrid(const Model& model, InferenceState& state, ThreadPool& pool,
                                      std::span<const int32_t> tokens, LogitsWanted wanted);

namespace hybrid {

// Largest batch of the hybrid passes. Their scratch per token is about twice the dense
// one's (conv channels, output gates, delta-rule work), so batches are half as long: the
// prefill scratch stays within the memory bound (peak RSS <= file + state + 64 MiB) while
// each weight is still reused by 128 tokens, two delta-rule chunks.
inline constexpr int64_t kMaxBatch = 128;

// One batch of n tokens at positions pos0.. (n <= kMaxBatch).
struct Batch {
    const Model* model;
    InferenceState* st;
    ThreadPool* pool;
    int64_t pos0;
    int64_t n;
};

void grow(std::vector<float>& v, int64_t n);
HybridScratch& scratch(const Batch& b);

// out[t] = rms_norm(x[t]) * weight for the batch's rows ([n x n_embd] each).
void norm_rows(const Batch& b, const float* x, const std::vector<float>& weight, float* out);

// Softmax attention layer (lfm2, qwen35 full-attention layers): reads s.xn, adds its output
// to s.x. q/k RMS norm and (partial) RoPE; qwen35's per-head sigmoid output gate when the
// config has attn_output_gate.
void attention_layer(const Batch& b, const LayerWeights& L, int64_t layer);

// SwiGLU FFN with its pre-norm, added to s.x.
void ffn_layer(const Batch& b, const LayerWeights& L);

// Depthwise causal convolution over time, continuing from `history`:
//   out[t][c] = sum_k taps[c*K + k] * in_ext[t + k][c], in_ext = history rows ++ in rows.
// in: [n x channels], history: [(K-1) x channels] oldest first (updated to the last K-1
// inputs), ext: scratch [(K-1+n) x channels], out: [n x channels].
void causal_conv(const float* in, float* history, const float* taps, int64_t kernel,
                 int64_t channels, int64_t n, float* ext, float* out);

// The layer loops of the families: s.x [n x n_embd] holds the embeddings on entry and the
// last layer's output on return.
void lfm2_layers(const Batch& b);
void qwen35_layers(const Batch& b);

// Scratch the qwen35 layers need beyond the shared buffers (sized before the layer loop).
void qwen35_prepare(const Batch& b);

// The gated delta rule over one v head for n tokens, token by token (decode) or in chunks
// of intra-chunk matrix products (prefill); both give the same result up to rounding.
// q, k: row t at q + t*stride ([k_dim], q already L2-normalized and scaled, k normalized);
// v, out: row t at v + t*stride / out + t*out_stride ([v_dim]); decay (log, <= 0) and beta
// at decay[t*gb_stride], beta[t*gb_stride]; state: [k_dim x v_dim], updated in place.
struct DeltaHead {
    const float* q;
    const float* k;
    const float* v;
    int64_t stride;
    const float* decay;
    const float* beta;
    int64_t gb_stride;
    float* out;
    int64_t out_stride;
    float* state;
    int64_t k_dim;
    int64_t v_dim;
};
// work: at least delta_work_floats(k_dim, v_dim) floats (either path).
void delta_rule_serial(const DeltaHead& h, int64_t n, float* work);
void delta_rule_chunked(const DeltaHead& h, int64_t n, float* work);
int64_t delta_work_floats(int64_t k_dim, int64_t v_dim);
inline constexpr int64_t kDeltaChunk = 64;

}  // namespace hybrid
}  // namespace ember
