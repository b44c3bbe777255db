// One readable forward pass for the llama-like families. Differences between families are
// flags in ModelConfig: qkv biases (qwen2), per-head q/k RMS norm (qwen3), RoPE layout, and
// (qwen3moe) a mixture-of-experts FFN in the layers that have a router (moe.h).
#include "engine/model/forward.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "engine/model/attention.h"
#include "engine/model/forward_hybrid.h"
#include "engine/model/gemma3.h"
#include "engine/model/gptoss.h"
#include "engine/model/model.h"
#include "engine/model/moe.h"
#include "engine/model/ops.h"
#include "engine/model/state.h"
#include "engine/util/thread_pool.h"

namespace ember {

namespace {

void grow(std::vector<float>& v, int64_t n) {
    if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
}

void prepare_scratch(const ModelConfig& c, ForwardScratch& s, int64_t batch, bool has_dense_ffn) {
    grow(s.x, batch * c.n_embd);
    grow(s.xn, batch * c.n_embd);
    grow(s.q, batch * c.n_head * c.head_dim);
    grow(s.k, batch * c.n_head_kv * c.head_dim);
    grow(s.v, batch * c.n_head_kv * c.value_dim);
    grow(s.attn, batch * c.n_head * c.value_dim);
    if (has_dense_ffn) {  // a MoE model's experts have their own buffers (MoeScratch)
        grow(s.gate, batch * c.n_ff);
        grow(s.up, batch * c.n_ff);
    }
    grow(s.rope_cos, batch * c.rope_dims / 2);
    grow(s.rope_sin, batch * c.rope_dims / 2);
}

// cos/sin tables for the batch: [batch x rope_dims/2], computed in double so long contexts
// keep their precision.
void rope_tables(const Model& model, int64_t pos0, int64_t n, ForwardScratch& s) {
    const ModelConfig& c = model.config();
    const int64_t half = c.rope_dims / 2;
    const auto& inv_freq = model.rope_inv_freq();
    for (int64_t t = 0; t < n; ++t) {
        const double pos = static_cast<double>(pos0 + t) * c.rope_freq_scale;
        for (int64_t i = 0; i < half; ++i) {
            const double angle = pos * inv_freq[static_cast<size_t>(i)];
            s.rope_cos[static_cast<size_t>(t * half + i)] = static_cast<float>(std::cos(angle));
            s.rope_sin[static_cast<size_t>(t * half + i)] = static_cast<float>(std::sin(angle));
        }
    }
}

void attention_block(const Model& model, const LayerWeights& L, InferenceState& st,
                     ThreadPool& pool, int64_t layer, int64_t pos0, int64_t n) {
    const ModelConfig& c = model.config();
    ForwardScratch& s = st.scratch;
    const int64_t q_dim = c.n_head * c.head_dim;
    const int64_t k_dim = c.n_head_kv * c.head_dim;
    const int64_t v_dim = c.n_head_kv * c.value_dim;

    for (int64_t t = 0; t < n; ++t) {
        rms_norm(s.x.data() + t * c.n_embd, L.attn_norm.data(), s.xn.data() + t * c.n_embd,
                 c.n_embd, static_cast<float>(c.rms_eps));
    }
    const MatmulOut qkv[] = {
        {&L.wq, s.q.data(), q_dim}, {&L.wk, s.k.data(), k_dim}, {&L.wv, s.v.data(), v_dim}};
    matmul_many(pool, qkv, s.xn.data(), n, s.mm);
    for (int64_t t = 0; t < n; ++t) {
        float* q = s.q.data() + t * q_dim;
        float* k = s.k.data() + t * k_dim;
        float* v = s.v.data() + t * v_dim;
        if (c.qkv_bias) {
            add_inplace(q, L.bq.data(), q_dim);
            add_inplace(k, L.bk.data(), k_dim);
            add_inplace(v, L.bv.data(), v_dim);
        }
        const float eps = static_cast<float>(c.rms_eps);
        const float* cs = s.rope_cos.data() + t * c.rope_dims / 2;
        const float* sn = s.rope_sin.data() + t * c.rope_dims / 2;
        for (int64_t h = 0; h < c.n_head; ++h) {
            float* qh = q + h * c.head_dim;
            if (c.qk_norm) rms_norm(qh, L.q_norm.data(), qh, c.head_dim, eps);
            rope(qh, cs, sn, c.rope_dims, c.rope_layout == RopeLayout::Halves);
        }
        for (int64_t h = 0; h < c.n_head_kv; ++h) {
            float* kh = k + h * c.head_dim;
            if (c.qk_norm) rms_norm(kh, L.k_norm.data(), kh, c.head_dim, eps);
            rope(kh, cs, sn, c.rope_dims, c.rope_layout == RopeLayout::Halves);
        }
        st.kv.store(layer, pos0 + t, k, v);
    }
    AttentionSettings settings;
    settings.cache_layer = layer;
    settings.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    attend_cached(attention_heads(c), settings, st.kv, pool, s.q.data(), pos0, n, s.attention,
                  s.attn.data());
    // x += Wo · attn
    matmul(pool, L.wo, s.attn.data(), n, s.xn.data(), c.n_embd, s.mm);
    add_inplace(s.x.data(), s.xn.data(), n * c.n_embd);
}

void ffn_block(const Model& model, const LayerWeights& L, ForwardScratch& s, ThreadPool& pool,
               int64_t n) {
    const ModelConfig& c = model.config();
    for (int64_t t = 0; t < n; ++t) {
        rms_norm(s.x.data() + t * c.n_embd, L.ffn_norm.data(), s.xn.data() + t * c.n_embd, c.n_embd,
                 static_cast<float>(c.rms_eps));
    }
    const MatmulOut gate_up[] = {{&L.w_gate, s.gate.data(), c.n_ff},
                                 {&L.w_up, s.up.data(), c.n_ff}};
    matmul_many(pool, gate_up, s.xn.data(), n, s.mm);
    swiglu_inplace(s.gate.data(), s.up.data(), n * c.n_ff);
    matmul(pool, L.w_down, s.gate.data(), n, s.xn.data(), c.n_embd, s.mm);
    add_inplace(s.x.data(), s.xn.data(), n * c.n_embd);
}

// Runs one batch (n <= kMaxBatch) and writes logits for rows [first_out, n) to out.
void forward_batch(const Model& model, InferenceState& st, ThreadPool& pool,
                   std::span<const int32_t> tokens, int64_t first_out, float* out) {
    const ModelConfig& c = model.config();
    ForwardScratch& s = st.scratch;
    const int64_t n = static_cast<int64_t>(tokens.size());
    const int64_t pos0 = st.kv.length();
    st.kv.reserve(pos0 + n);
    const auto& layers = model.layers();
    prepare_scratch(c, s, n, std::any_of(layers.begin(), layers.end(), [](const LayerWeights& L) {
                        return !L.moe();
                    }));
    rope_tables(model, pos0, n, s);

    for (int64_t t = 0; t < n; ++t) {
        dequantize_row(model.token_embd(), tokens[static_cast<size_t>(t)],
                       s.x.data() + t * c.n_embd);
    }
    for (int64_t l = 0; l < c.n_layer; ++l) {
        const LayerWeights& L = model.layers()[static_cast<size_t>(l)];
        attention_block(model, L, st, pool, l, pos0, n);
        if (L.moe()) {
            moe_ffn_block(model, L, s.x.data(), s.xn.data(), n, pool, s.moe, s.mm);
        } else {
            ffn_block(model, L, s, pool, n);
        }
    }
    const int64_t n_out = n - first_out;
    for (int64_t t = first_out; t < n; ++t) {
        rms_norm(s.x.data() + t * c.n_embd, model.output_norm().data(),
                 s.xn.data() + (t - first_out) * c.n_embd, c.n_embd, static_cast<float>(c.rms_eps));
    }
    if (n_out > 0) matmul(pool, model.output(), s.xn.data(), n_out, out, c.n_vocab, s.mm);
    st.kv.set_length(pos0 + n);
}

}  // namespace

std::span<const float> forward(const Model& model, InferenceState& st, ThreadPool& pool,
                               std::span<const int32_t> tokens, LogitsWanted wanted) {
    const ModelConfig& c = model.config();
    const int64_t n = static_cast<int64_t>(tokens.size());
    if (n == 0) throw std::invalid_argument("forward: no tokens to evaluate");
    const int64_t start = st.kv.length();
    if (start + n > st.kv.capacity()) {
        throw std::length_error("context full: " + std::to_string(start) + " + " +
                                std::to_string(n) + " tokens exceed the context of " +
                                std::to_string(st.kv.capacity()));
    }
    for (int32_t id : tokens) {
        if (id < 0 || id >= c.n_vocab) {
            throw std::out_of_range("token id " + std::to_string(id) +
                                    " is outside the vocabulary (" + std::to_string(c.n_vocab) +
                                    ")");
        }
    }
    // Conv / linear-attention hybrids have their own passes (forward_hybrid.h); the checks
    // above serve both.
    if (is_hybrid(c.family)) return forward_hybrid(model, st, pool, tokens, wanted);
    if (c.family == Family::Gemma3) return forward_gemma3(model, st, pool, tokens, wanted);
    if (c.family == Family::GptOss) return forward_gptoss(model, st, pool, tokens, wanted);
    const int64_t rows = wanted == LogitsWanted::All ? n : wanted == LogitsWanted::Last ? 1 : 0;
    grow(st.scratch.logits, rows * c.n_vocab);
    try {
        for (int64_t b = 0; b < n; b += kMaxBatch) {
            const int64_t len = std::min(kMaxBatch, n - b);
            auto chunk = tokens.subspan(static_cast<size_t>(b), static_cast<size_t>(len));
            if (wanted == LogitsWanted::All) {
                forward_batch(model, st, pool, chunk, 0, st.scratch.logits.data() + b * c.n_vocab);
            } else {
                // Only the final batch produces a logits row (None: not even that).
                const bool last = wanted == LogitsWanted::Last && b + len == n;
                forward_batch(model, st, pool, chunk, last ? len - 1 : len,
                              st.scratch.logits.data());
            }
        }
    } catch (...) {
        st.kv.set_length(start);
        throw;
    }
    return {st.scratch.logits.data(), static_cast<size_t>(rows * c.n_vocab)};
}

}  // namespace ember
