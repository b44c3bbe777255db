// The gemma3 forward pass (gemma3.h): sandwich norms, GELU-tanh MLP, and sliding-window
// attention over ring-buffered KV rows next to global layers.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "engine/model/attention.h"
#include "engine/model/gemma3.h"
#include "engine/model/model.h"
#include "engine/model/ops.h"
#include "engine/model/state.h"
#include "engine/util/thread_pool.h"

namespace ember {

namespace {

void grow(std::vector<float>& v, int64_t n) {
    if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
}

}  // namespace

void windowed_attention(const ModelConfig& c, InferenceState& st, ThreadPool& pool, int64_t layer,
                        int64_t pos0, int64_t n, const float* sinks) {
    AttentionSettings settings;
    settings.cache_layer = layer;
    settings.window = c.is_sliding(layer) ? c.sliding_window : 0;
    settings.scale = static_cast<float>(c.attn_scale);
    settings.sinks = sinks;
    attend_cached(attention_heads(c), settings, st.kv, pool, st.scratch.q.data(), pos0, n,
                  st.scratch.attention, st.scratch.attn.data());
}

namespace {

// cos/sin of the batch's positions for one set of frequencies: [n x rope_dims/2], computed in
// double so long contexts keep their precision.
void rope_table(const std::vector<double>& inv_freq, double freq_scale, int64_t pos0, int64_t n,
                std::vector<float>& cos_out, std::vector<float>& sin_out) {
    const int64_t half = static_cast<int64_t>(inv_freq.size());
    grow(cos_out, n * half);
    grow(sin_out, n * half);
    for (int64_t t = 0; t < n; ++t) {
        const double pos = static_cast<double>(pos0 + t) * freq_scale;
        for (int64_t i = 0; i < half; ++i) {
            const double angle = pos * inv_freq[static_cast<size_t>(i)];
            cos_out[static_cast<size_t>(t * half + i)] = static_cast<float>(std::cos(angle));
            sin_out[static_cast<size_t>(t * half + i)] = static_cast<float>(std::sin(angle));
        }
    }
}

// x[t] (+)= rms_norm(y[t]) * weight for n rows of n_embd.
void norm_rows(const ModelConfig& c, const float* y, const std::vector<float>& weight, float* out,
               int64_t n) {
    for (int64_t t = 0; t < n; ++t) {
        rms_norm(y + t * c.n_embd, weight.data(), out + t * c.n_embd, c.n_embd,
                 static_cast<float>(c.rms_eps));
    }
}

// Attention sub-block: s.x += post_attention_norm(Wo · attention(attn_norm(s.x))).
void attention_block(const Model& model, const LayerWeights& L, InferenceState& st,
                     ThreadPool& pool, int64_t layer, int64_t pos0, int64_t n) {
    const ModelConfig& c = model.config();
    ForwardScratch& s = st.scratch;
    const int64_t q_dim = c.n_head * c.head_dim;
    const int64_t k_dim = c.n_head_kv * c.head_dim;
    const int64_t v_dim = c.n_head_kv * c.value_dim;
    norm_rows(c, s.x.data(), L.attn_norm, s.xn.data(), n);
    const MatmulOut qkv[] = {
        {&L.wq, s.q.data(), q_dim}, {&L.wk, s.k.data(), k_dim}, {&L.wv, s.v.data(), v_dim}};
    matmul_many(pool, qkv, s.xn.data(), n, s.mm);
    const bool local = c.is_sliding(layer);
    const std::vector<float>& cos_table = local ? s.rope_cos_local : s.rope_cos;
    const std::vector<float>& sin_table = local ? s.rope_sin_local : s.rope_sin;
    const float eps = static_cast<float>(c.rms_eps);
    for (int64_t t = 0; t < n; ++t) {
        float* q = s.q.data() + t * q_dim;  // [n_head x head_dim]
        float* k = s.k.data() + t * k_dim;  // [n_head_kv x head_dim]
        const float* v = s.v.data() + t * v_dim;
        const float* cs = cos_table.data() + t * c.rope_dims / 2;
        const float* sn = sin_table.data() + t * c.rope_dims / 2;
        for (int64_t h = 0; h < c.n_head; ++h) {
            float* qh = q + h * c.head_dim;
            rms_norm(qh, L.q_norm.data(), qh, c.head_dim, eps);
            rope(qh, cs, sn, c.rope_dims, true);
        }
        for (int64_t h = 0; h < c.n_head_kv; ++h) {
            float* kh = k + h * c.head_dim;
            rms_norm(kh, L.k_norm.data(), kh, c.head_dim, eps);
            rope(kh, cs, sn, c.rope_dims, true);
        }
        st.kv.store(layer, pos0 + t, k, v);
    }
    windowed_attention(c, st, pool, layer, pos0, n);
    matmul(pool, L.wo, s.attn.data(), n, s.xn.data(), c.n_embd, s.mm);  // [n x n_embd]
    norm_rows(c, s.xn.data(), L.post_attn_norm, s.xn.data(), n);
    add_inplace(s.x.data(), s.xn.data(), n * c.n_embd);
}

// MLP sub-block: s.x += post_ffw_norm(W_down (gelu_tanh(W_gate h) * W_up h)), h = ffn_norm(s.x).
void mlp_block(const Model& model, const LayerWeights& L, ForwardScratch& s, ThreadPool& pool,
               int64_t n) {
    const ModelConfig& c = model.config();
    norm_rows(c, s.x.data(), L.ffn_norm, s.xn.data(), n);
    const MatmulOut gate_up[] = {{&L.w_gate, s.gate.data(), c.n_ff},
                                 {&L.w_up, s.up.data(), c.n_ff}};
    matmul_many(pool, gate_up, s.xn.data(), n, s.mm);
    gelu_tanh_gate_inplace(s.gate.data(), s.up.data(), n * c.n_ff);
    matmul(pool, L.w_down, s.gate.data(), n, s.xn.data(), c.n_embd, s.mm);
    norm_rows(c, s.xn.data(), L.post_ffn_norm, s.xn.data(), n);
    add_inplace(s.x.data(), s.xn.data(), n * c.n_embd);
}

// One batch (n <= kMaxBatch <= KvCache::kRingSlack, so its rows never overwrite a row one of
// its tokens attends to); logits of rows [first_out, n) into out.
void forward_batch(const Model& model, InferenceState& st, ThreadPool& pool,
                   std::span<const int32_t> tokens, int64_t first_out, float* out) {
    const ModelConfig& c = model.config();
    ForwardScratch& s = st.scratch;
    const int64_t n = static_cast<int64_t>(tokens.size());
    const int64_t pos0 = st.kv.length();
    st.kv.reserve(pos0 + n);
    grow(s.x, n * c.n_embd);
    grow(s.xn, n * c.n_embd);
    grow(s.q, n * c.n_head * c.head_dim);
    grow(s.k, n * c.n_head_kv * c.head_dim);
    grow(s.v, n * c.n_head_kv * c.value_dim);
    grow(s.attn, n * c.n_head * c.value_dim);
    grow(s.gate, n * c.n_ff);
    grow(s.up, n * c.n_ff);
    rope_table(model.rope_inv_freq(), c.rope_freq_scale, pos0, n, s.rope_cos, s.rope_sin);
    if (c.sliding_window > 0) {
        rope_table(model.rope_inv_freq_local(), 1.0, pos0, n, s.rope_cos_local, s.rope_sin_local);
    }
    // HF rounds sqrt(n_embd) to the weights' dtype (bf16 in the published checkpoints); the
    // float64 references keep it exact, and so does this (to f32's 1e-7).
    const float embed_scale = static_cast<float>(std::sqrt(static_cast<double>(c.n_embd)));
    for (int64_t t = 0; t < n; ++t) {
        float* x = s.x.data() + t * c.n_embd;  // [n_embd]
        dequantize_row(model.token_embd(), tokens[static_cast<size_t>(t)], x);
        for (int64_t i = 0; i < c.n_embd; ++i) x[i] *= embed_scale;
    }
    for (int64_t l = 0; l < c.n_layer; ++l) {
        const LayerWeights& L = model.layers()[static_cast<size_t>(l)];
        attention_block(model, L, st, pool, l, pos0, n);
        mlp_block(model, L, s, pool, n);
    }
    const int64_t n_out = n - first_out;
    norm_rows(c, s.x.data() + first_out * c.n_embd, model.output_norm(), s.xn.data(), n_out);
    if (n_out > 0) {
        matmul(pool, model.output(), s.xn.data(), n_out, out, c.n_vocab, s.mm);
        if (c.final_logit_softcap > 0) {
            const float cap = static_cast<float>(c.final_logit_softcap);
            for (int64_t i = 0; i < n_out * c.n_vocab; ++i) out[i] = cap * std::tanh(out[i] / cap);
        }
    }
    st.kv.set_length(pos0 + n);
}

}  // namespace

std::span<const float> forward_gemma3(const Model& model, InferenceState& st, ThreadPool& pool,
                                      std::span<const int32_t> tokens, LogitsWanted wanted) {
    return forward_windowed(model, st, pool, tokens, wanted, forward_batch);
}

std::span<const float> forward_windowed(const Model& model, InferenceState& st, ThreadPool& pool,
                                        std::span<const int32_t> tokens, LogitsWanted wanted,
                                        WindowedBatchFn batch_fn) {
    const ModelConfig& c = model.config();
    const int64_t n = static_cast<int64_t>(tokens.size());
    const int64_t start = st.kv.length();
    if (!st.kv.can_resume_at(start)) {
        throw std::logic_error(
            std::string(family_name(c.family)) + " forward: the KV cache was cut back to " +
            std::to_string(start) +
            " tokens, behind what the sliding layers' rings still hold (from position " +
            std::to_string(st.kv.ring_begin()) + "); restore a stored prefix or start over");
    }
    static_assert(kMaxBatch <= KvCache::kRingSlack, "a batch must fit the ring's slack");
    const int64_t rows = wanted == LogitsWanted::All ? n : wanted == LogitsWanted::Last ? 1 : 0;
    grow(st.scratch.logits, rows * c.n_vocab);
    try {
        for (int64_t b = 0; b < n; b += kMaxBatch) {
            const int64_t len = std::min(kMaxBatch, n - b);
            auto chunk = tokens.subspan(static_cast<size_t>(b), static_cast<size_t>(len));
            if (wanted == LogitsWanted::All) {
                batch_fn(model, st, pool, chunk, 0, st.scratch.logits.data() + b * c.n_vocab);
            } else {
                const bool last = wanted == LogitsWanted::Last && b + len == n;
                batch_fn(model, st, pool, chunk, last ? len - 1 : len, st.scratch.logits.data());
            }
        }
    } catch (...) {
        // The failed batch wrote rows over ring slots it had not committed; batches already
        // committed may have overwritten ring rows the start needs: then only an empty cache
        // is a state to continue from.
        if (st.kv.ring_positions() > 0) {
            st.kv.forget_ring_rows_before(st.kv.length() + kMaxBatch - st.kv.ring_positions());
        }
        st.kv.set_length(st.kv.can_resume_at(start) ? start : 0);
        throw;
    }
    return {st.scratch.logits.data(), static_cast<size_t>(rows * c.n_vocab)};
}

}  // namespace ember
