// The seam between the layer math of the families and the kernels that run it.
//
// A layer (layers.cpp, the family files in families/) is written as calls to these blocks on
// the batch's buffers: it never reads or writes the numbers itself and names no instruction
// set. A backend owns those buffers (host memory for the CPU; a GPU backend keeps them, the
// KV cache and the recurrent state in device memory) and runs each block with its kernels.
// The CPU backend (cpu/cpu_backend.h) is the engine's kernels: engine/tensor's matmuls and
// cpu/ops.h's vector operations, dispatched at run time from what the CPU allows.
//
// One backend object serves one forward() call on one conversation's state.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "engine/model/gated_activation.h"
#include "engine/tensor/matmul.h"

namespace ember {

struct LayerWeights;

// The buffers of a batch of n tokens, in the backend's memory. Null where the model has no use
// for one (q_proj / q_gate without gated attention, the FFN's without dense FFN layers).
struct BatchBuffers {
    float* x = nullptr;         // [n x n_embd] residual stream
    float* xn = nullptr;        // [n x n_embd] normed input, then a sub-block's output
    float* q = nullptr;         // [n x n_head*head_dim]
    float* k = nullptr;         // [n x n_head_kv*head_dim]
    float* v = nullptr;         // [n x n_head_kv*value_dim]
    float* attn = nullptr;      // [n x n_head*value_dim]
    float* q_proj = nullptr;    // [n x n_head*2*head_dim] gated attention: [query | gate] per head
    float* q_gate = nullptr;    // [n x n_head*head_dim] gated attention's output gates
    float* ffn_gate = nullptr;  // [n x n_ff]
    float* ffn_up = nullptr;    // [n x n_ff]
};

// The heads of one attention layer.
struct AttentionHeads {
    int64_t n_head = 0;
    int64_t n_head_kv = 0;  // divides n_head: query heads h read KV head h / (n_head / n_head_kv)
    int64_t head_dim = 0;   // query / key length
    int64_t value_dim = 0;
};

// What differs between the attention layers of the families (Backend::attend).
struct AttentionSettings {
    int64_t cache_layer = 0;       // layer of the KV cache (a hybrid's attention slot)
    int64_t window = 0;            // 0: every earlier position; W: the last W, itself included
    float scale = 1.0f;            // query scale (scores = scale * q . k)
    float softcap = 0.0f;          // > 0: scores = softcap * tanh(scores / softcap)
    const float* sinks = nullptr;  // [n_head] logits joining each softmax's denominator, or null
};

// What happens to a batch's projected heads before they are attended: biases, per-head RMS
// norms of q and k, RoPE (the model's layout and rotated dimensions), then K and V stored.
struct HeadPrep {
    const float* q_bias = nullptr;  // [n_head*head_dim], or null
    const float* k_bias = nullptr;  // [n_head_kv*head_dim], or null
    const float* v_bias = nullptr;  // [n_head_kv*value_dim], or null
    const float* q_norm = nullptr;  // [head_dim], or null
    const float* k_norm = nullptr;  // [head_dim], or null
    bool local_rope = false;        // the sliding layers' own RoPE frequencies (gemma3)
    int64_t cache_layer = 0;        // layer of the KV cache the rows go to
};

class Backend {
public:
    virtual ~Backend() = default;

    // Sizes the buffers for n tokens at positions pos0.. (n <= the family's batch limit) and
    // computes their RoPE tables; the batch ends in `logit_rows` rows of logits (0: none).
    virtual BatchBuffers& begin_batch(int64_t pos0, int64_t n, int64_t logit_rows) = 0;

    // x [tokens x n_embd] = rows of the embedding table, times the model's embedding scale.
    virtual void embed(std::span<const int32_t> tokens, float* x) = 0;
    // out[r] = rms_norm(x[r]) * weight for `rows` rows of weight.size(); out may alias x.
    virtual void rms_norm_rows(const float* x, const std::vector<float>& weight, float* out,
                               int64_t rows) = 0;
    // y[0..n) += x[0..n)
    virtual void add(float* y, const float* x, int64_t n) = 0;
    // The residual add of a sub-block's output and the next norm: x += delta, then out =
    // rms_norm(x) * weight, for `rows` rows; out may alias delta. One pass where a backend
    // fuses them (a launch less per sub-block on a GPU); the CPU's keeps the two steps.
    virtual void add_rms_norm_rows(float* x, const float* delta, const std::vector<float>& weight,
                                   float* out, int64_t rows) {
        add(x, delta, rows * static_cast<int64_t>(weight.size()));
        rms_norm_rows(x, weight, out, rows);
    }
    // Each of `rows` rows of y (bias.size() wide) += bias.
    virtual void add_bias_rows(float* y, const std::vector<float>& bias, int64_t rows) = 0;
    // out [n x w.rows] = x [n x w.cols] · w^T
    virtual void matmul(const MatrixView& w, const float* x, int64_t n, float* out) = 0;
    // Several matrices of the same width times the same x, in one pass (Q/K/V, gate/up).
    virtual void matmul_many(std::span<const MatmulOut> outs, const float* x, int64_t n) = 0;
    // gate[0..n) = act(gate) * up
    virtual void gated_activation(GatedActivation act, float* gate, const float* up, int64_t n) = 0;
    // The input of a dense FFN's down projection: gate [n x w_gate.rows] = act(x · W_gate^T) *
    // (x · W_up^T), `up` [n x w_up.rows] scratch. One pass where a backend fuses the two
    // products and the activation (the GPU's decode); the CPU's keeps the steps.
    virtual void gated_ffn_input(GatedActivation act, const MatrixView& w_gate,
                                 const MatrixView& w_up, const float* x, int64_t n, float* gate,
                                 float* up) {
        const MatmulOut outs[] = {{&w_gate, gate, w_gate.rows}, {&w_up, up, w_up.rows}};
        matmul_many(outs, x, n);
        gated_activation(act, gate, up, n * w_gate.rows);
    }
    // x[0..n) *= sigmoid(gate)
    virtual void sigmoid_gate(float* x, const float* gate, int64_t n) = 0;
    // Gated attention's projection [n x n_head x (query | gate)] into q and gate [n x n_head*hd].
    virtual void split_query_gate(const float* q_proj, float* q, float* gate, int64_t n) = 0;
    // Biases, q/k norms and RoPE of the batch's heads (positions of begin_batch), in place, then
    // the batch's K/V rows written into the cache layer prep.cache_layer at those positions.
    // One pass where a backend fuses them (the GPU's writes each key head as it rotates it, a
    // launch less per attention layer); the CPU's keeps the two steps.
    virtual void prepare_and_store_heads(const HeadPrep& prep, float* q, float* k, float* v,
                                         int64_t n) = 0;
    // Attention of the batch's queries over the cache (the CPU's: cpu/attention.h);
    // out [n x n_head*value_dim].
    virtual void attend(const AttentionSettings& settings, const float* q, int64_t n,
                        float* out) = 0;
    // x += moe(xn) for a mixture-of-experts layer, xn = ffn_norm(x) already (the norm that
    // takes a waiting residual add in the same pass); xn is scratch after (cpu/moe.h).
    virtual void moe_ffn(const LayerWeights& layer, float* x, float* xn, int64_t n) = 0;
    // The recurrent mixers of the hybrids: read xn (the normed input), leave their output in xn
    // (its residual add waits for the next norm, as an attention block's does: a launch less per
    // layer on a GPU), carry the layer's recurrent state forward.
    virtual void short_conv_mixer(const LayerWeights& layer, int64_t index, int64_t n) = 0;
    virtual void delta_net_mixer(const LayerWeights& layer, int64_t index, int64_t n) = 0;
    // x[0..n) = cap * tanh(x / cap)
    virtual void soft_cap(float* x, int64_t n, float cap) = 0;

    // Whether the batch begin_batch() started is recorded whole already (a GPU's captured decode
    // step, replayed as one graph): its blocks' work is done by publish_logits(), so forward()
    // calls embed() (which hands over the token ids) and the logits pair, and no block between.
    virtual bool batch_recorded() const { return false; }

    // Where forward() keeps `floats` logits on the host (the span it returns, valid until the
    // state's next forward): the backend's own buffer, page-locked for a GPU's copies (1 MiB of
    // Qwen3.5's 248k logits took ~0.16 ms into pageable memory on the H200's host, ~0.03 into
    // locked), or null for the state's scratch.
    virtual float* host_logits(int64_t /*floats*/) { return nullptr; }

    // Where `rows` rows of logits are computed: host_out itself, or the backend's own memory,
    // from which publish_logits() copies `count` floats to host_out.
    virtual float* logits_buffer(float* host_out, int64_t /*rows*/) { return host_out; }
    virtual void publish_logits(const float* /*logits*/, float* /*host_out*/, int64_t /*count*/) {}

    // A model split between a device and the CPU (gpu_plan.h): the residual stream after this
    // backend's layers, `count` floats at x, copied to host_x where the CPU's layers continue (a
    // recorded batch's work is done first, as publish_logits does it). Once per batch.
    virtual void hand_over(const float* x, float* host_x, int64_t count) {
        if (x != host_x) std::copy(x, x + count, host_x);  // host backends may share the buffer
    }
};

}  // namespace ember
