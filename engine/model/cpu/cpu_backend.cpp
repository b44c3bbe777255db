// The CPU backend (cpu_backend.h).
#include "engine/model/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>

#include "engine/model/cpu/attention.h"
#include "engine/model/cpu/mixers.h"
#include "engine/model/cpu/moe.h"
#include "engine/model/cpu/ops.h"
#include "engine/model/model.h"
#include "engine/model/state.h"
#include "engine/util/grow.h"
#include "engine/util/thread_pool.h"

namespace ember {

namespace {

// Floats per token of the shared projection buffer (ForwardScratch::proj): gated attention's
// [query | gate] heads, lfm2's conv gates [B | C | x], qwen35's conv input [q | k | v].
int64_t projection_width(const ModelConfig& c) {
    int64_t width = c.attn_output_gate ? 2 * c.n_head * c.head_dim : 0;
    for (LayerKind kind : c.layer_kinds) {
        if (kind == LayerKind::ShortConv) width = std::max(width, 3 * c.n_embd);
        if (kind == LayerKind::DeltaNet) width = std::max(width, c.conv_channels());
    }
    return width;
}

bool has_dense_ffn(const Model& model) {
    const auto& layers = model.layers();
    return std::any_of(layers.begin(), layers.end(),
                       [](const LayerWeights& L) { return !L.moe(); });
}

float sigmoid(float x) {
    return 1.0f / (1.0f + std::exp(-x));
}

}  // namespace

CpuBackend::CpuBackend(const Model& model, InferenceState& state, ThreadPool& pool)
    : model_(model), c_(model.config()), st_(state), pool_(pool) {}

BatchBuffers& CpuBackend::begin_batch(int64_t pos0, int64_t n, int64_t /*logit_rows*/) {
    const ModelConfig& c = c_;
    ForwardScratch& s = st_.scratch;
    pos0_ = pos0;
    st_.kv.reserve(pos0 + n);
    grow(s.x, n * c.n_embd);
    grow(s.xn, n * c.n_embd);
    grow(s.q, n * c.n_head * c.head_dim);
    grow(s.k, n * c.n_head_kv * c.head_dim);
    grow(s.v, n * c.n_head_kv * c.value_dim);
    grow(s.attn, n * c.n_head * c.value_dim);
    grow(s.proj, n * projection_width(c));
    if (c.attn_output_gate) grow(s.q_gate, n * c.n_head * c.head_dim);
    if (has_dense_ffn(model_)) {  // a MoE layer's experts have their own buffers (MoeScratch)
        grow(s.ffn_gate, n * c.n_ff);
        grow(s.ffn_up, n * c.n_ff);
    }
    const int64_t half = c.rope_dims / 2;
    grow(s.rope_cos, n * half);
    grow(s.rope_sin, n * half);
    rope_table(model_.rope_inv_freq(), c.rope_freq_scale, pos0, n, s.rope_cos.data(),
               s.rope_sin.data());
    if (!model_.rope_inv_freq_local().empty()) {  // unscaled, with the local base
        grow(s.rope_cos_local, n * half);
        grow(s.rope_sin_local, n * half);
        rope_table(model_.rope_inv_freq_local(), 1.0, pos0, n, s.rope_cos_local.data(),
                   s.rope_sin_local.data());
    }
    buffers_ = BatchBuffers{s.x.data(),        s.xn.data(),    s.q.data(),    s.k.data(),
                            s.v.data(),        s.attn.data(),  s.proj.data(), s.q_gate.data(),
                            s.ffn_gate.data(), s.ffn_up.data()};
    return buffers_;
}

void CpuBackend::embed(std::span<const int32_t> tokens, float* x) {
    const int64_t width = c_.n_embd;
    // gemma3 scales by sqrt(n_embd); HF rounds it to the weights' dtype (bf16 in the published
    // checkpoints), the float64 references keep it exact, and so does this (to f32's 1e-7).
    const auto scale = static_cast<float>(c_.embedding_scale);
    for (size_t t = 0; t < tokens.size(); ++t) {
        float* row = x + static_cast<int64_t>(t) * width;  // [n_embd]
        dequantize_row(model_.token_embd(), tokens[t], row);
        if (c_.embedding_scale != 1.0) {
            for (int64_t i = 0; i < width; ++i) row[i] *= scale;
        }
    }
}

void CpuBackend::rms_norm_rows(const float* x, const std::vector<float>& weight, float* out,
                               int64_t rows) {
    const auto width = static_cast<int64_t>(weight.size());
    const auto eps = static_cast<float>(c_.rms_eps);
    for (int64_t r = 0; r < rows; ++r) {
        rms_norm(x + r * width, weight.data(), out + r * width, width, eps);
    }
}

void CpuBackend::add(float* y, const float* x, int64_t n) {
    add_inplace(y, x, n);
}

void CpuBackend::add_bias_rows(float* y, const std::vector<float>& bias, int64_t rows) {
    const auto width = static_cast<int64_t>(bias.size());
    for (int64_t r = 0; r < rows; ++r) add_inplace(y + r * width, bias.data(), width);
}

void CpuBackend::matmul(const MatrixView& w, const float* x, int64_t n, float* out) {
    ember::matmul(pool_, w, x, n, out, w.rows, st_.scratch.mm);
}

void CpuBackend::matmul_many(std::span<const MatmulOut> outs, const float* x, int64_t n) {
    ember::matmul_many(pool_, outs, x, n, st_.scratch.mm);
}

void CpuBackend::gated_activation(GatedActivation act, float* gate, const float* up, int64_t n) {
    switch (act) {
        case GatedActivation::Silu:
            return swiglu_inplace(gate, up, n);
        case GatedActivation::GeluTanh:
            return gelu_tanh_gate_inplace(gate, up, n);
    }
}

void CpuBackend::sigmoid_gate(float* x, const float* gate, int64_t n) {
    for (int64_t i = 0; i < n; ++i) x[i] *= sigmoid(gate[i]);
}

void CpuBackend::split_query_gate(const float* q_proj, float* q, float* gate, int64_t n) {
    const int64_t head_dim = c_.head_dim;
    const int64_t q_dim = c_.n_head * head_dim;
    for (int64_t t = 0; t < n; ++t) {
        const float* row = q_proj + t * 2 * q_dim;  // [n_head x (query | gate)]
        for (int64_t h = 0; h < c_.n_head; ++h) {
            const float* src = row + h * 2 * head_dim;
            std::copy(src, src + head_dim, q + t * q_dim + h * head_dim);
            std::copy(src + head_dim, src + 2 * head_dim, gate + t * q_dim + h * head_dim);
        }
    }
}

void CpuBackend::prepare_and_store_heads(const HeadPrep& prep, float* q, float* k, float* v,
                                         int64_t n) {
    const ModelConfig& c = c_;
    const ForwardScratch& s = st_.scratch;
    const int64_t q_dim = c.n_head * c.head_dim;
    const int64_t k_dim = c.n_head_kv * c.head_dim;
    const int64_t v_dim = c.n_head_kv * c.value_dim;
    const int64_t half = c.rope_dims / 2;
    const bool halves = c.rope_layout == RopeLayout::Halves;
    const float eps = static_cast<float>(c.rms_eps);
    const float* cos_table = (prep.local_rope ? s.rope_cos_local : s.rope_cos).data();
    const float* sin_table = (prep.local_rope ? s.rope_sin_local : s.rope_sin).data();
    for (int64_t t = 0; t < n; ++t) {
        float* qt = q + t * q_dim;  // [n_head x head_dim]
        float* kt = k + t * k_dim;  // [n_head_kv x head_dim]
        if (prep.q_bias) add_inplace(qt, prep.q_bias, q_dim);
        if (prep.k_bias) add_inplace(kt, prep.k_bias, k_dim);
        if (prep.v_bias) add_inplace(v + t * v_dim, prep.v_bias, v_dim);
        const float* cs = cos_table + t * half;
        const float* sn = sin_table + t * half;
        for (int64_t h = 0; h < c.n_head; ++h) {
            float* head = qt + h * c.head_dim;
            if (prep.q_norm) rms_norm(head, prep.q_norm, head, c.head_dim, eps);
            rope(head, cs, sn, c.rope_dims, halves);
        }
        for (int64_t h = 0; h < c.n_head_kv; ++h) {
            float* head = kt + h * c.head_dim;
            if (prep.k_norm) rms_norm(head, prep.k_norm, head, c.head_dim, eps);
            rope(head, cs, sn, c.rope_dims, halves);
        }
    }
    for (int64_t t = 0; t < n; ++t) {
        st_.kv.store(prep.cache_layer, pos0_ + t, k + t * k_dim, v + t * v_dim);
    }
}

void CpuBackend::attend(const AttentionSettings& settings, const float* q, int64_t n, float* out) {
    attend_cached(attention_heads(c_), settings, st_.kv, pool_, q, pos0_, n, st_.scratch.attention,
                  out);
}

void CpuBackend::moe_ffn(const LayerWeights& layer, float* x, float* xn, int64_t n) {
    moe_ffn_block(model_, layer, x, xn, n, pool_, st_.scratch.moe, st_.scratch.mm);
}

void CpuBackend::short_conv_mixer(const LayerWeights& layer, int64_t index, int64_t n) {
    cpu::short_conv_mixer({c_, st_, pool_, n}, layer, index);
}

void CpuBackend::delta_net_mixer(const LayerWeights& layer, int64_t index, int64_t n) {
    cpu::delta_net_mixer({c_, st_, pool_, n}, layer, index);
}

void CpuBackend::soft_cap(float* x, int64_t n, float cap) {
    for (int64_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] / cap);
}

}  // namespace ember
