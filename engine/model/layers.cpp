// The shared layers (layers.h).
#include "engine/model/layers.h"

#include <algorithm>
#include <cmath>

#include "engine/model/backend.h"
#include "engine/model/model.h"

namespace ember {

namespace {

const float* or_null(const std::vector<float>& v) {
    return v.empty() ? nullptr : v.data();
}

// xn = post_attn_norm(Wo · attention(q, k, v of xn) + bo), the residual add left to the
// caller: what is absent from the layer's weights is skipped.
void attention_sublayer(const LayerPass& p, const LayerWeights& L, int64_t layer) {
    const ModelConfig& c = p.model.config();
    Backend& be = p.backend;
    BatchBuffers& b = p.buffers;
    const int64_t q_dim = c.n_head * c.head_dim;
    const bool gated = c.attn_output_gate;  // qwen35: a sigmoid gate per query head
    const MatmulOut qkv[] = {{&L.wq, gated ? b.q_proj : b.q, gated ? 2 * q_dim : q_dim},
                             {&L.wk, b.k, c.n_head_kv * c.head_dim},
                             {&L.wv, b.v, c.n_head_kv * c.value_dim}};
    be.matmul_many(qkv, b.xn, p.n);
    if (gated) be.split_query_gate(b.q_proj, b.q, b.q_gate, p.n);
    const bool sliding = c.is_sliding(layer);
    AttentionSettings settings;
    settings.cache_layer = c.kv_slot.empty() ? layer : c.kv_slot[static_cast<size_t>(layer)];
    settings.window = sliding ? c.sliding_window : 0;
    settings.scale = c.attn_scale > 0 ? static_cast<float>(c.attn_scale)
                                      : 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    settings.sinks = or_null(L.attn_sinks);
    HeadPrep prep;
    prep.q_bias = or_null(L.bq);
    prep.k_bias = or_null(L.bk);
    prep.v_bias = or_null(L.bv);
    prep.q_norm = or_null(L.q_norm);
    prep.k_norm = or_null(L.k_norm);
    prep.local_rope = sliding && !p.model.rope_inv_freq_local().empty();
    prep.cache_layer = settings.cache_layer;
    be.prepare_and_store_heads(prep, b.q, b.k, b.v, p.n);
    be.attend(settings, b.q, p.n, b.attn);
    if (gated) be.sigmoid_gate(b.attn, b.q_gate, p.n * c.n_head * c.value_dim);
    be.matmul(L.wo, b.attn, p.n, b.xn);
    if (!L.bo.empty()) be.add_bias_rows(b.xn, L.bo, p.n);
    if (!L.post_attn_norm.empty()) be.rms_norm_rows(b.xn, L.post_attn_norm, b.xn, p.n);
}

// The sub-blocks' outputs wait in xn for their residual add until the next norm, which takes
// them in the same pass (Backend::add_rms_norm_rows).
class Residual {
public:
    explicit Residual(const LayerPass& p) : p_(p) {}

    // xn = norm(x) * weight, after adding a waiting output to x.
    void norm_into_xn(const std::vector<float>& weight) {
        BatchBuffers& b = p_.buffers;
        if (waiting_) {
            p_.backend.add_rms_norm_rows(b.x, b.xn, weight, b.xn, p_.n);
        } else {
            p_.backend.rms_norm_rows(b.x, weight, b.xn, p_.n);
        }
        waiting_ = false;
    }
    // xn holds a sub-block's output that x has not had yet.
    void output_waits() { waiting_ = true; }
    // Adds a waiting output now (before a block that reads x itself, and at the end).
    void flush() {
        if (!waiting_) return;
        const BatchBuffers& b = p_.buffers;
        p_.backend.add(b.x, b.xn, p_.n * p_.model.config().n_embd);
        waiting_ = false;
    }

private:
    const LayerPass& p_;
    bool waiting_ = false;
};

// x += post_ffn_norm(W_down (act(W_gate h) * W_up h)), h = ffn_norm(x), the add left waiting;
// or the experts.
void ffn_sublayer(const LayerPass& p, const LayerWeights& L, Residual& residual) {
    const ModelConfig& c = p.model.config();
    Backend& be = p.backend;
    BatchBuffers& b = p.buffers;
    residual.norm_into_xn(L.ffn_norm);
    if (L.moe()) return be.moe_ffn(L, b.x, b.xn, p.n);
    be.gated_ffn_input(c.ffn_activation, L.w_gate, L.w_up, b.xn, p.n, b.ffn_gate, b.ffn_up);
    be.matmul(L.w_down, b.ffn_gate, p.n, b.xn);
    if (!L.post_ffn_norm.empty()) be.rms_norm_rows(b.xn, L.post_ffn_norm, b.xn, p.n);
    residual.output_waits();
}

}  // namespace

bool run_layers(const LayerPass& p) {
    const auto& layers = p.model.layers();
    const auto n_layers = static_cast<int64_t>(layers.size());
    const int64_t end = p.end_layer < 0 ? n_layers : std::min(p.end_layer, n_layers);
    Residual residual(p);
    for (int64_t l = p.first_layer; l < end; ++l) {
        if (l > 0 && p.between_layers != nullptr && !(*p.between_layers)(l)) return false;
        const LayerWeights& L = layers[static_cast<size_t>(l)];
        residual.norm_into_xn(L.attn_norm);
        switch (L.kind) {
            case LayerKind::Attention:
                attention_sublayer(p, L, l);
                residual.output_waits();
                break;
            case LayerKind::ShortConv:
                p.backend.short_conv_mixer(L, l, p.n);
                residual.output_waits();
                break;
            case LayerKind::DeltaNet:
                p.backend.delta_net_mixer(L, l, p.n);
                residual.output_waits();
                break;
        }
        ffn_sublayer(p, L, residual);
    }
    residual.flush();
    return true;
}

}  // namespace ember
