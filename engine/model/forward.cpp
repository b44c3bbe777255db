// One readable forward pass for the llama-like families. Differences between families are
// flags in ModelConfig: qkv biases (qwen2), per-head q/k RMS norm (qwen3), RoPE layout, and
// (qwen3moe) a mixture-of-experts FFN in the layers that have a router (moe.h).
#include "engine/model/forward.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

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

// Positions per attention run. Runs never straddle a cache chunk (whose rows are contiguous),
// and are long enough that a run's per-call work dwarfs its setup.
constexpr int64_t kAttnRun = 128;
static_assert(KvCache::kChunkPositions % kAttnRun == 0, "a run must lie inside one cache chunk");
// Batches of fewer tokens split each head group's context into one task per run: decode has
// only n_head_kv (token, group) tasks, too few and too uneven for the threads. Bigger batches
// have plenty and keep a group's runs in one task. The runs and their merge are the same
// either way, so the split changes nothing in the results.
constexpr int64_t kSplitBelowTokens = 4;

int64_t runs_for(int64_t positions) {
    return (positions + kAttnRun - 1) / kAttnRun;
}

// What one attention task needs; the task lambda captures a pointer to it so the
// std::function stays in its small buffer (no allocation per layer).
struct AttentionJob {
    const ModelConfig* c;
    InferenceState* st;
    AttnShape shape;  // one GQA group
    int64_t layer, pos0, n;
    int64_t max_runs;       // runs of the longest visible context of the batch
    int64_t rec_stride;     // floats of one partial record
    int64_t worker_floats;  // per-worker scratch: run scores, then (unsplit) the records
    bool split;
};

// Head group `kvh` of token t over run r of its visible context: partial records of the
// group's heads at `records` (head g's at records + g * heads_stride).
void attend_group_run(const AttentionJob& job, int64_t t, int64_t kvh, int64_t r, float* scratch,
                      float* records, int64_t heads_stride) {
    const ModelConfig& c = *job.c;
    KvCache& kv = job.st->kv;
    const int64_t p0 = r * kAttnRun;
    const int64_t visible = job.pos0 + t + 1;  // causal: itself and everything before
    const KvRun run = kv.run(job.layer, p0, std::min(kAttnRun, visible - p0), kvh * c.head_dim,
                             kvh * c.value_dim);
    const float* q = job.st->scratch.q.data() + t * c.n_head * c.head_dim +
                     kvh * job.shape.n_q * c.head_dim;  // [n_q x head_dim]
    attend_run(job.shape, q, run, scratch, records, heads_stride);
}

// Tokens per task of an unsplit batch: a task runs each run of the group's context for all
// its tokens in turn, so the run's K/V rows (kAttnRun x head, 32 KiB at f16 and head 128)
// come from L1/L2 for all but the first token instead of from memory for every token. A
// prompt after a long conversation otherwise reads the whole cache once per new token.
// Up to kAttnTokenBlock tokens, as long as the batch still makes kAttnTasksPerThread tasks
// per thread (tasks are blocks times head groups, of equal work): a short prompt after a long
// conversation then reads the cache once or twice rather than once per 8 tokens.
constexpr int64_t kAttnTokenBlock = 32;
constexpr int64_t kAttnTasksPerThread = 4;
// ...but at most this many floats of partial records per task (long contexts have many runs).
constexpr int64_t kAttnBlockRecordFloats = int64_t{1} << 20;

int64_t attn_tokens_per_task(const AttentionJob& job, int64_t threads) {
    const int64_t per_token = job.shape.n_q * job.max_runs * job.rec_stride;
    const int64_t wanted_blocks = (threads * kAttnTasksPerThread + job.c->n_head_kv - 1) /
                                  job.c->n_head_kv;  // blocks for enough tasks
    const int64_t for_tasks = std::max<int64_t>(8, job.n / std::max<int64_t>(1, wanted_blocks));
    return std::clamp<int64_t>(
        std::min(for_tasks, kAttnBlockRecordFloats / std::max<int64_t>(1, per_token)), 1,
        kAttnTokenBlock);
}

// Tokens [t0, t1) of head group `kvh` over all their runs, merged into s.attn. The records
// of each (token, run) are the ones a task per token would compute, merged in the same order.
// Where a run is whole for several tokens (every run but the last few of each token), their
// heads go through attend_run as one group: each head's scores, softmax and values are
// computed exactly as alone, but the run's keys are widened once for all of them and each
// value row is loaded once per four heads.
void attend_group_tokens(const AttentionJob& job, int64_t t0, int64_t t1, int64_t kvh, int worker) {
    const ModelConfig& c = *job.c;
    const int64_t n_q = job.shape.n_q;
    float* scratch = job.st->scratch.scores.data() + worker * job.worker_floats;
    // [(t1 - t0) x n_q x head_dim] the tokens' queries of this group, side by side
    float* queries = scratch + attn_run_scratch_floats(job.shape, kAttnRun) * (t1 - t0);
    // [t1 - t0 x n_q x max_runs x record]
    float* records = queries + (t1 - t0) * n_q * c.head_dim;
    const int64_t heads_stride = job.max_runs * job.rec_stride;
    const int64_t token_stride = n_q * heads_stride;
    for (int64_t t = t0; t < t1; ++t) {
        const float* q = job.st->scratch.q.data() + t * c.n_head * c.head_dim +
                         kvh * n_q * c.head_dim;  // [n_q x head_dim]
        std::copy(q, q + n_q * c.head_dim, queries + (t - t0) * n_q * c.head_dim);
    }
    KvCache& kv = job.st->kv;
    const int64_t runs = runs_for(job.pos0 + t1);  // the last token sees the most
    for (int64_t r = 0; r < runs; ++r) {
        const int64_t p0 = r * kAttnRun;
        // Tokens [whole, t1) see all of run r (later tokens see more).
        const int64_t whole = std::clamp(p0 + kAttnRun - 1 - job.pos0, t0, t1);
        if (whole < t1) {
            AttnShape shape = job.shape;
            shape.n_q = (t1 - whole) * n_q;
            const KvRun run = kv.run(job.layer, p0, kAttnRun, kvh * c.head_dim, kvh * c.value_dim);
            attend_run(shape, queries + (whole - t0) * n_q * c.head_dim, run, scratch,
                       records + (whole - t0) * token_stride + r * job.rec_stride, heads_stride);
        }
        for (int64_t t = t0; t < whole; ++t) {
            if (r >= runs_for(job.pos0 + t + 1)) continue;  // past its causal horizon
            attend_group_run(job, t, kvh, r, scratch,
                             records + (t - t0) * token_stride + r * job.rec_stride, heads_stride);
        }
    }
    for (int64_t t = t0; t < t1; ++t) {
        for (int64_t g = 0; g < n_q; ++g) {
            const int64_t h = kvh * n_q + g;
            attend_merge(
                records + (t - t0) * token_stride + g * heads_stride, runs_for(job.pos0 + t + 1),
                job.rec_stride, c.value_dim,
                job.st->scratch.attn.data() + t * c.n_head * c.value_dim + h * c.value_dim);
        }
    }
}

// Causal attention of `n` new tokens (positions pos0..pos0+n-1) over the cache of `layer`.
// q: [n x n_head*head_dim], out: s.attn [n x n_head*value_dim].
void attention(const ModelConfig& c, InferenceState& st, ThreadPool& pool, int64_t layer,
               int64_t pos0, int64_t n) {
    ForwardScratch& s = st.scratch;
    AttentionJob job{};
    job.c = &c;
    job.st = &st;
    job.shape.n_q = c.n_head / c.n_head_kv;
    job.shape.head_dim = c.head_dim;
    job.shape.value_dim = c.value_dim;
    job.shape.q_stride = c.head_dim;
    job.shape.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    job.layer = layer;
    job.pos0 = pos0;
    job.n = n;
    job.max_runs = runs_for(pos0 + n);
    job.rec_stride = attn_record_floats(c.value_dim);
    job.split = n < kSplitBelowTokens;
    const int64_t block = job.split ? 1 : attn_tokens_per_task(job, pool.size());
    // Per-worker floats rounded to a cache line so workers never share one: run scratch for
    // the block's heads together, their queries, their records.
    job.worker_floats =
        (attn_run_scratch_floats(job.shape, kAttnRun) * block + block * job.shape.n_q * c.head_dim +
         block * job.shape.n_q * job.max_runs * job.rec_stride + 15) /
        16 * 16;
    grow(s.scores, pool.size() * job.worker_floats);
    const AttentionJob* jp = &job;
    if (!job.split) {
        const int64_t blocks = (n + block - 1) / block;
        pool.parallel_for(blocks * c.n_head_kv, [jp, block](int64_t task, int worker) {
            const int64_t t0 = task / jp->c->n_head_kv * block;
            attend_group_tokens(*jp, t0, std::min(jp->n, t0 + block), task % jp->c->n_head_kv,
                                worker);
        });
        return;
    }
    // Split: one task per (token, group, run); records [n x n_head x max_runs x record].
    const int64_t head_records = job.max_runs * job.rec_stride;
    grow(s.attn_runs, n * c.n_head * head_records);
    pool.parallel_for(n * c.n_head_kv * job.max_runs, [jp, head_records](int64_t task, int worker) {
        const AttentionJob& j = *jp;
        const int64_t r = task % j.max_runs;
        const int64_t kvh = task / j.max_runs % j.c->n_head_kv;
        const int64_t t = task / j.max_runs / j.c->n_head_kv;
        if (r >= runs_for(j.pos0 + t + 1)) return;  // past this token's causal horizon
        float* records = j.st->scratch.attn_runs.data() +
                         (t * j.c->n_head + kvh * j.shape.n_q) * head_records + r * j.rec_stride;
        attend_group_run(j, t, kvh, r, j.st->scratch.scores.data() + worker * j.worker_floats,
                         records, head_records);
    });
    for (int64_t t = 0; t < n; ++t) {
        for (int64_t h = 0; h < c.n_head; ++h) {
            attend_merge(s.attn_runs.data() + (t * c.n_head + h) * head_records,
                         runs_for(pos0 + t + 1), job.rec_stride, c.value_dim,
                         s.attn.data() + t * c.n_head * c.value_dim + h * c.value_dim);
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
    attention(c, st, pool, layer, pos0, n);
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
