// The gpt-oss forward pass (gptoss.h): biased attention with sinks over sliding and full
// layers (gemma3's windowed attention and ring cache), YaRN RoPE, and the MoE FFN (moe.h).
#include <algorithm>
#include <cmath>

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

// cos/sin of the batch's positions: [n x rope_dims/2], computed in double so long contexts keep
// their precision. YaRN's attention factor is not in them: it scales the scores (c.attn_scale).
void rope_tables(const Model& model, int64_t pos0, int64_t n, ForwardScratch& s) {
    const auto& inv_freq = model.rope_inv_freq();
    const int64_t half = static_cast<int64_t>(inv_freq.size());
    grow(s.rope_cos, n * half);
    grow(s.rope_sin, n * half);
    for (int64_t t = 0; t < n; ++t) {
        const double pos = static_cast<double>(pos0 + t);
        for (int64_t i = 0; i < half; ++i) {
            const double angle = pos * inv_freq[static_cast<size_t>(i)];
            s.rope_cos[static_cast<size_t>(t * half + i)] = static_cast<float>(std::cos(angle));
            s.rope_sin[static_cast<size_t>(t * half + i)] = static_cast<float>(std::sin(angle));
        }
    }
}

// Attention sub-block: s.x += Wo · attention(attn_norm(s.x)) + bo.
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
        float* q = s.q.data() + t * q_dim;  // [n_head x head_dim]
        float* k = s.k.data() + t * k_dim;  // [n_head_kv x head_dim]
        float* v = s.v.data() + t * v_dim;  // [n_head_kv x value_dim]
        add_inplace(q, L.bq.data(), q_dim);
        add_inplace(k, L.bk.data(), k_dim);
        add_inplace(v, L.bv.data(), v_dim);
        const float* cs = s.rope_cos.data() + t * c.rope_dims / 2;
        const float* sn = s.rope_sin.data() + t * c.rope_dims / 2;
        for (int64_t h = 0; h < c.n_head; ++h) rope(q + h * c.head_dim, cs, sn, c.rope_dims, true);
        for (int64_t h = 0; h < c.n_head_kv; ++h) {
            rope(k + h * c.head_dim, cs, sn, c.rope_dims, true);
        }
        st.kv.store(layer, pos0 + t, k, v);
    }
    windowed_attention(c, st, pool, layer, pos0, n, L.attn_sinks.data());
    matmul(pool, L.wo, s.attn.data(), n, s.xn.data(), c.n_embd, s.mm);  // [n x n_embd]
    for (int64_t t = 0; t < n; ++t) add_inplace(s.xn.data() + t * c.n_embd, L.bo.data(), c.n_embd);
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
    rope_tables(model, pos0, n, s);
    for (int64_t t = 0; t < n; ++t) {
        dequantize_row(model.token_embd(), tokens[static_cast<size_t>(t)],
                       s.x.data() + t * c.n_embd);
    }
    for (int64_t l = 0; l < c.n_layer; ++l) {
        const LayerWeights& L = model.layers()[static_cast<size_t>(l)];
        attention_block(model, L, st, pool, l, pos0, n);
        // x += moe(post_attention_norm(x)): moe_ffn_block norms with L.ffn_norm, bound to it.
        moe_ffn_block(model, L, s.x.data(), s.xn.data(), n, pool, s.moe, s.mm);
    }
    const int64_t n_out = n - first_out;
    for (int64_t t = 0; t < n_out; ++t) {
        rms_norm(s.x.data() + (first_out + t) * c.n_embd, model.output_norm().data(),
                 s.xn.data() + t * c.n_embd, c.n_embd, static_cast<float>(c.rms_eps));
    }
    if (n_out > 0) matmul(pool, model.output(), s.xn.data(), n_out, out, c.n_vocab, s.mm);
    st.kv.set_length(pos0 + n);
}

}  // namespace

std::span<const float> forward_gptoss(const Model& model, InferenceState& st, ThreadPool& pool,
                                      std::span<const int32_t> tokens, LogitsWanted wanted) {
    return forward_windowed(model, st, pool, tokens, wanted, forward_batch);
}

}  // namespace ember
