// Entry point and shared layers of the hybrid forward passes (see forward_hybrid.h).
#include "engine/model/forward_hybrid.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "engine/model/attention.h"
#include "engine/model/model.h"
#include "engine/model/ops.h"
#include "engine/model/state.h"
#include "engine/util/thread_pool.h"

namespace ember::hybrid {

void grow(std::vector<float>& v, int64_t n) {
    if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
}

HybridScratch& scratch(const Batch& b) {
    return b.st->hybrid_scratch;
}

void norm_rows(const Batch& b, const float* x, const std::vector<float>& weight, float* out) {
    const ModelConfig& c = b.model->config();
    for (int64_t t = 0; t < b.n; ++t) {
        rms_norm(x + t * c.n_embd, weight.data(), out + t * c.n_embd, c.n_embd,
                 static_cast<float>(c.rms_eps));
    }
}

void causal_conv(const float* in, float* history, const float* taps, int64_t kernel,
                 int64_t channels, int64_t n, float* ext, float* out) {
    const int64_t keep = kernel - 1;
    std::copy(history, history + keep * channels, ext);
    std::copy(in, in + n * channels, ext + keep * channels);
    for (int64_t t = 0; t < n; ++t) {
        const float* window = ext + t * channels;  // rows t..t+K-1 of ext
        float* o = out + t * channels;
        for (int64_t ch = 0; ch < channels; ++ch) {
            const float* w = taps + ch * kernel;
            float sum = 0.0f;
            for (int64_t k = 0; k < kernel; ++k) sum += w[k] * window[k * channels + ch];
            o[ch] = sum;
        }
    }
    // The newest K-1 inputs become the history of the next call.
    std::copy(ext + n * channels, ext + (n + keep) * channels, history);
}

namespace {

float sigmoid(float x) {
    return 1.0f / (1.0f + std::exp(-x));
}

}  // namespace

void attention_layer(const Batch& b, const LayerWeights& L, int64_t layer) {
    const ModelConfig& c = b.model->config();
    HybridScratch& s = scratch(b);
    KvCache& kv = b.st->kv;
    const int64_t slot = c.kv_slot[static_cast<size_t>(layer)];
    const int64_t q_dim = c.n_head * c.head_dim;
    const int64_t k_dim = c.n_head_kv * c.head_dim;
    const int64_t v_dim = c.n_head_kv * c.value_dim;
    // qwen35 projects [query | gate] per head: [n x n_head*2*head_dim] into s.proj.
    const int64_t proj_dim = c.attn_output_gate ? 2 * q_dim : q_dim;
    float* q_out = c.attn_output_gate ? s.proj.data() : s.q.data();
    const MatmulOut qkv[] = {
        {&L.wq, q_out, proj_dim}, {&L.wk, s.k.data(), k_dim}, {&L.wv, s.v.data(), v_dim}};
    matmul_many(*b.pool, qkv, s.xn.data(), b.n, s.mm);
    const float eps = static_cast<float>(c.rms_eps);
    for (int64_t t = 0; t < b.n; ++t) {
        float* q = s.q.data() + t * q_dim;
        float* k = s.k.data() + t * k_dim;
        float* v = s.v.data() + t * v_dim;
        if (c.attn_output_gate) {
            const float* row = s.proj.data() + t * proj_dim;
            float* gate = s.gate.data() + t * q_dim;
            for (int64_t h = 0; h < c.n_head; ++h) {
                const float* src = row + h * 2 * c.head_dim;
                std::copy(src, src + c.head_dim, q + h * c.head_dim);
                std::copy(src + c.head_dim, src + 2 * c.head_dim, gate + h * c.head_dim);
            }
        }
        const float* cs = s.rope_cos.data() + t * c.rope_dims / 2;
        const float* sn = s.rope_sin.data() + t * c.rope_dims / 2;
        const bool halves = c.rope_layout == RopeLayout::Halves;
        for (int64_t h = 0; h < c.n_head; ++h) {
            float* qh = q + h * c.head_dim;
            if (c.qk_norm) rms_norm(qh, L.q_norm.data(), qh, c.head_dim, eps);
            rope(qh, cs, sn, c.rope_dims, halves);
        }
        for (int64_t h = 0; h < c.n_head_kv; ++h) {
            float* kh = k + h * c.head_dim;
            if (c.qk_norm) rms_norm(kh, L.k_norm.data(), kh, c.head_dim, eps);
            rope(kh, cs, sn, c.rope_dims, halves);
        }
        kv.store(slot, b.pos0 + t, k, v);
    }
    AttentionSettings settings;
    settings.cache_layer = slot;
    settings.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    attend_cached(attention_heads(c), settings, kv, *b.pool, s.q.data(), b.pos0, b.n, s.attention,
                  s.attn.data());
    const int64_t attn_dim = c.n_head * c.value_dim;
    if (c.attn_output_gate) {
        for (int64_t i = 0; i < b.n * attn_dim; ++i) s.attn[i] *= sigmoid(s.gate[i]);
    }
    matmul(*b.pool, L.wo, s.attn.data(), b.n, s.xn.data(), c.n_embd, s.mm);
    add_inplace(s.x.data(), s.xn.data(), b.n * c.n_embd);
}

void ffn_layer(const Batch& b, const LayerWeights& L) {
    const ModelConfig& c = b.model->config();
    HybridScratch& s = scratch(b);
    norm_rows(b, s.x.data(), L.ffn_norm, s.xn.data());
    const MatmulOut gate_up[] = {{&L.w_gate, s.ffn_gate.data(), c.n_ff},
                                 {&L.w_up, s.ffn_up.data(), c.n_ff}};
    matmul_many(*b.pool, gate_up, s.xn.data(), b.n, s.mm);
    swiglu_inplace(s.ffn_gate.data(), s.ffn_up.data(), b.n * c.n_ff);
    matmul(*b.pool, L.w_down, s.ffn_gate.data(), b.n, s.xn.data(), c.n_embd, s.mm);
    add_inplace(s.x.data(), s.xn.data(), b.n * c.n_embd);
}

namespace {

void prepare_scratch(const Batch& b) {
    const ModelConfig& c = b.model->config();
    HybridScratch& s = scratch(b);
    const int64_t n = b.n;
    const int64_t q_dim = c.n_head * c.head_dim;
    grow(s.x, n * c.n_embd);
    grow(s.xn, n * c.n_embd);
    grow(s.proj, n * std::max({3 * c.n_embd, c.conv_channels(), 2 * q_dim}));
    grow(s.q, n * q_dim);
    grow(s.gate, n * q_dim);
    grow(s.k, n * c.n_head_kv * c.head_dim);
    grow(s.v, n * c.n_head_kv * c.value_dim);
    grow(s.attn, n * c.n_head * c.value_dim);
    grow(s.ffn_gate, n * c.n_ff);
    grow(s.ffn_up, n * c.n_ff);
    if (c.family == Family::Lfm2) grow(s.conv_in, n * c.conv_channels());  // qwen35 convs s.proj
    grow(s.conv_out, n * c.conv_channels());
    grow(s.conv_ext, (c.conv_kernel - 1 + n) * c.conv_channels());
    if (c.family == Family::Qwen35) qwen35_prepare(b);
}

// One batch: embeddings, the family's layers, logits of rows [first_out, n) into out.
void forward_batch(const Batch& b, std::span<const int32_t> tokens, int64_t first_out, float* out) {
    const Model& model = *b.model;
    const ModelConfig& c = model.config();
    HybridScratch& s = scratch(b);
    b.st->kv.reserve(b.pos0 + b.n);
    prepare_scratch(b);
    grow(s.rope_cos, b.n * c.rope_dims / 2);
    grow(s.rope_sin, b.n * c.rope_dims / 2);
    rope_table(model.rope_inv_freq(), c.rope_freq_scale, b.pos0, b.n, s.rope_cos.data(),
               s.rope_sin.data());
    for (int64_t t = 0; t < b.n; ++t) {
        dequantize_row(model.token_embd(), tokens[static_cast<size_t>(t)],
                       s.x.data() + t * c.n_embd);
    }
    if (c.family == Family::Lfm2) {
        lfm2_layers(b);
    } else {
        qwen35_layers(b);
    }
    const int64_t n_out = b.n - first_out;
    for (int64_t t = first_out; t < b.n; ++t) {
        rms_norm(s.x.data() + t * c.n_embd, model.output_norm().data(),
                 s.xn.data() + (t - first_out) * c.n_embd, c.n_embd, static_cast<float>(c.rms_eps));
    }
    if (n_out > 0) matmul(*b.pool, model.output(), s.xn.data(), n_out, out, c.n_vocab, s.mm);
    b.st->kv.set_length(b.pos0 + b.n);
    b.st->recurrent.set_position(b.pos0 + b.n);
}

}  // namespace
}  // namespace ember::hybrid

namespace ember {

std::span<const float> forward_hybrid(const Model& model, InferenceState& st, ThreadPool& pool,
                                      std::span<const int32_t> tokens, LogitsWanted wanted) {
    const ModelConfig& c = model.config();
    // forward() has checked the tokens: not empty, in the vocabulary, within the context.
    const int64_t n = static_cast<int64_t>(tokens.size());
    const int64_t start = st.kv.length();
    if (st.recurrent.n_layer() != c.n_layer) st.recurrent.init(c);  // a state not from make_state
    // A cache emptied by rollback starts over: the state before any token is all zeros.
    if (start == 0) st.recurrent.reset();
    if (st.recurrent.position() != start) {
        throw std::logic_error("hybrid forward: recurrent state is at position " +
                               std::to_string(st.recurrent.position()) + " but the KV cache at " +
                               std::to_string(start) +
                               "; recurrent state cannot be truncated, restore a snapshot");
    }
    HybridScratch& s = st.hybrid_scratch;
    const int64_t rows = wanted == LogitsWanted::All ? n : wanted == LogitsWanted::Last ? 1 : 0;
    hybrid::grow(s.logits, rows * c.n_vocab);
    try {
        for (int64_t b0 = 0; b0 < n; b0 += hybrid::kMaxBatch) {
            const int64_t len = std::min(hybrid::kMaxBatch, n - b0);
            auto chunk = tokens.subspan(static_cast<size_t>(b0), static_cast<size_t>(len));
            const hybrid::Batch batch{&model, &st, &pool, start + b0, len};
            if (wanted == LogitsWanted::All) {
                hybrid::forward_batch(batch, chunk, 0, s.logits.data() + b0 * c.n_vocab);
            } else {
                // Only the final batch yields a row (None: not even that).
                const bool last = wanted == LogitsWanted::Last && b0 + len == n;
                hybrid::forward_batch(batch, chunk, last ? len - 1 : len, s.logits.data());
            }
        }
    } catch (...) {
        // The KV rows are rolled back; the recurrent state has folded in part of the batch,
        // so its position stays behind and the next call refuses it unless restored.
        st.kv.set_length(start);
        throw;
    }
    return {s.logits.data(), static_cast<size_t>(rows * c.n_vocab)};
}

}  // namespace ember
