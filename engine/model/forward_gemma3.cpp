// The gemma3 forward pass (gemma3.h): sandwich norms, GELU-tanh MLP, and sliding-window
// attention over ring-buffered KV rows next to global layers.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

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

// Positions per attention run. Runs start at multiples of kAttnRun (a window's first run
// starts inside one), so how a context is cut into runs, and with it the rounding of the
// merged result, depends only on the query's position, never on the batch it came in.
constexpr int64_t kAttnRun = 128;
static_assert(KvCache::kChunkPositions % kAttnRun == 0, "a run must lie inside one cache chunk");
// Batches of fewer tokens split each (token, head group) into one task per run (decode has
// too few groups to keep the threads busy); the records and their merge are the same.
constexpr int64_t kSplitBelowTokens = 4;

// Positions [first, end) the token at `pos` attends to in `layer`.
struct Visible {
    int64_t first;
    int64_t end;
    int64_t first_run() const { return first / kAttnRun; }
    int64_t runs() const { return (end + kAttnRun - 1) / kAttnRun - first_run(); }
};

Visible visible(const ModelConfig& c, int64_t layer, int64_t pos) {
    const int64_t first =
        c.is_sliding(layer) ? std::max<int64_t>(0, pos - c.sliding_window + 1) : 0;
    return {first, pos + 1};
}

struct AttentionJob {
    const ModelConfig* c;
    InferenceState* st;
    AttnShape shape;  // one GQA group
    int64_t layer, pos0;
    int64_t max_runs;       // runs of the widest visible range in the batch
    int64_t rec_stride;     // floats of one partial record
    int64_t run_floats;     // per-worker floats of one run's scores
    int64_t worker_floats;  // per-worker scratch: run scores, then (unsplit) the records
    const float* sinks;     // [n_head] gpt-oss sink logits, or null
};

// attend_merge, with head h's sink logit joining the denominator when the job has sinks:
// out = sum_p exp(s_p - m) v_p / (exp(sink - m) + sum_p exp(s_p - m)), m the largest of all.
void merge_head(const AttentionJob& job, int64_t h, const float* records, int64_t n_runs,
                float* out) {
    const int64_t stride = job.rec_stride;
    const int64_t value_dim = job.c->value_dim;
    if (job.sinks == nullptr) return attend_merge(records, n_runs, stride, value_dim, out);
    const float sink = job.sinks[h];
    float m = sink;
    for (int64_t r = 0; r < n_runs; ++r) m = std::max(m, records[r * stride]);
    float l = std::exp(sink - m);
    std::fill(out, out + value_dim, 0.0f);
    for (int64_t r = 0; r < n_runs; ++r) {
        const float* rec = records + r * stride;
        const float w = std::exp(rec[0] - m);  // the run's numerators, to the common maximum
        l += w * rec[1];
        for (int64_t i = 0; i < value_dim; ++i) out[i] += w * rec[2 + i];
    }
    const float inv = 1.0f / l;
    for (int64_t i = 0; i < value_dim; ++i) out[i] *= inv;
}

// Token t, head group kvh, run i of its visible range: the group's partial records at
// `records` (head g's at records + g * heads_stride).
void attend_group_run(const AttentionJob& job, int64_t t, int64_t kvh, int64_t i, float* scratch,
                      float* records, int64_t heads_stride) {
    const ModelConfig& c = *job.c;
    KvCache& kv = job.st->kv;
    const Visible vis = visible(c, job.layer, job.pos0 + t);
    const int64_t run_start = (vis.first_run() + i) * kAttnRun;
    const int64_t p0 = std::max(run_start, vis.first);
    // A run lies inside one chunk, whose rows are contiguous (a ring is whole chunks).
    const KvRun run = kv.run(job.layer, p0, std::min(run_start + kAttnRun, vis.end) - p0,
                             kvh * c.head_dim, kvh * c.value_dim);
    const float* q = job.st->scratch.q.data() + t * c.n_head * c.head_dim +
                     kvh * job.shape.n_q * c.head_dim;  // [n_q x head_dim]
    attend_run(job.shape, q, run, scratch, records, heads_stride);
}

}  // namespace

void windowed_attention(const ModelConfig& c, InferenceState& st, ThreadPool& pool, int64_t layer,
                        int64_t pos0, int64_t n, const float* sinks) {
    ForwardScratch& s = st.scratch;
    AttentionJob job{};
    job.c = &c;
    job.st = &st;
    job.sinks = sinks;
    job.shape.n_q = c.n_head / c.n_head_kv;
    job.shape.head_dim = c.head_dim;
    job.shape.value_dim = c.value_dim;
    job.shape.q_stride = c.head_dim;
    job.shape.scale = static_cast<float>(c.attn_scale);
    job.layer = layer;
    job.pos0 = pos0;
    for (int64_t t = 0; t < n; ++t) {
        job.max_runs = std::max(job.max_runs, visible(c, layer, pos0 + t).runs());
    }
    job.rec_stride = attn_record_floats(c.value_dim);
    job.run_floats = attn_run_scratch_floats(job.shape, kAttnRun);
    const bool split = n < kSplitBelowTokens;
    const int64_t head_records = job.max_runs * job.rec_stride;
    // Cache-line rounded, so workers never share one.
    job.worker_floats =
        (job.run_floats + (split ? 0 : job.shape.n_q * head_records) + 15) / 16 * 16;
    grow(s.scores, pool.size() * job.worker_floats);
    const AttentionJob* jp = &job;  // one pointer: the std::function does not allocate
    if (!split) {
        pool.parallel_for(n * c.n_head_kv, [jp, head_records](int64_t task, int worker) {
            const AttentionJob& j = *jp;
            const ModelConfig& cfg = *j.c;
            const int64_t t = task / cfg.n_head_kv;
            const int64_t kvh = task % cfg.n_head_kv;
            float* work = j.st->scratch.scores.data() + worker * j.worker_floats;
            float* records = work + j.run_floats;  // [n_q x max_runs x record]
            const int64_t runs = visible(cfg, j.layer, j.pos0 + t).runs();
            for (int64_t i = 0; i < runs; ++i) {
                attend_group_run(j, t, kvh, i, work, records + i * j.rec_stride, head_records);
            }
            for (int64_t g = 0; g < j.shape.n_q; ++g) {
                const int64_t h = kvh * j.shape.n_q + g;
                merge_head(j, h, records + g * head_records, runs,
                           j.st->scratch.attn.data() + (t * cfg.n_head + h) * cfg.value_dim);
            }
        });
        return;
    }
    // Split: one task per (token, group, run); records [n x n_head x max_runs x record].
    grow(s.attn_runs, n * c.n_head * head_records);
    pool.parallel_for(n * c.n_head_kv * job.max_runs, [jp, head_records](int64_t task, int worker) {
        const AttentionJob& j = *jp;
        const int64_t i = task % j.max_runs;
        const int64_t kvh = task / j.max_runs % j.c->n_head_kv;
        const int64_t t = task / j.max_runs / j.c->n_head_kv;
        if (i >= visible(*j.c, j.layer, j.pos0 + t).runs()) return;  // past this token's range
        float* records = j.st->scratch.attn_runs.data() +
                         (t * j.c->n_head + kvh * j.shape.n_q) * head_records + i * j.rec_stride;
        attend_group_run(j, t, kvh, i, j.st->scratch.scores.data() + worker * j.worker_floats,
                         records, head_records);
    });
    for (int64_t t = 0; t < n; ++t) {
        const int64_t runs = visible(c, layer, pos0 + t).runs();
        for (int64_t h = 0; h < c.n_head; ++h) {
            merge_head(job, h, s.attn_runs.data() + (t * c.n_head + h) * head_records, runs,
                       s.attn.data() + (t * c.n_head + h) * c.value_dim);
        }
    }
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
