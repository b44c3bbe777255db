// The attention scheduler (see attention.h for how the work is cut and why).
#include "engine/model/cpu/attention.h"

#include <algorithm>
#include <cmath>

#include "engine/model/cpu/ops.h"
#include "engine/model/state.h"
#include "engine/util/grow.h"
#include "engine/util/thread_pool.h"

namespace ember {

namespace {

constexpr int64_t kRun = kAttnRunPositions;
static_assert(KvCache::kChunkPositions % kRun == 0, "a run must lie inside one cache chunk");
// Batches of fewer tokens split each (token, head group) into one task per run.
constexpr int64_t kSplitBelowTokens = 4;
// Tokens per task of an unsplit batch: up to kTokenBlock, as long as the batch still makes
// kTasksPerThread tasks per thread (tasks are blocks times head groups, of equal work)...
constexpr int64_t kTokenBlock = 32;
constexpr int64_t kTasksPerThread = 4;
// ...and at most this many floats of partial records per task (long contexts have many runs).
constexpr int64_t kBlockRecordFloats = int64_t{1} << 20;

// Positions [first, end) a query sees.
struct Visible {
    int64_t first;
    int64_t end;
    int64_t first_run() const { return first / kRun; }
    int64_t last_run() const { return (end - 1) / kRun; }
    int64_t runs() const { return last_run() - first_run() + 1; }
};

// What the tasks share; the task lambdas capture one pointer to it, so std::function keeps it
// in its small buffer and a layer does not allocate.
struct Job {
    const AttentionHeads* heads;
    const AttentionSettings* settings;
    const KvCache* kv;
    const float* q;  // [n x n_head*head_dim]
    float* out;      // [n x n_head*value_dim]
    AttentionScratch* scratch;
    AttnShape shape;  // one GQA group
    int64_t pos0 = 0, n = 0;
    int64_t rec_stride = 0;     // floats of one partial record
    int64_t run_floats = 0;     // attend_run scratch of one run of one token's group
    int64_t span = 0;           // runs of records kept per head (a block's or a split token's)
    int64_t block = 1;          // tokens per task (unsplit)
    int64_t worker_floats = 0;  // per-worker scratch, cache-line rounded

    Visible visible(int64_t t) const {
        const int64_t pos = pos0 + t;
        const int64_t first =
            settings->window > 0 ? std::max<int64_t>(0, pos - settings->window + 1) : 0;
        return {first, pos + 1};
    }
    const float* group_queries(int64_t t, int64_t kvh) const {  // [n_q x head_dim]
        return q + (t * heads->n_head + kvh * shape.n_q) * heads->head_dim;
    }
    float* head_out(int64_t t, int64_t h) const {  // [value_dim]
        return out + (t * heads->n_head + h) * heads->value_dim;
    }
};

// Run r of token t's visible range for head group kvh (the part of it the token sees): the
// group's partial records at `records`, head g's at records + g * heads_stride.
void attend_partial(const Job& job, int64_t t, int64_t kvh, int64_t r, float* work, float* records,
                    int64_t heads_stride) {
    const Visible vis = job.visible(t);
    const int64_t p0 = std::max(r * kRun, vis.first);
    const int64_t end = std::min((r + 1) * kRun, vis.end);
    const KvRun run = job.kv->run(job.settings->cache_layer, p0, end - p0,
                                  kvh * job.heads->head_dim, kvh * job.heads->value_dim);
    attend_run(job.shape, job.group_queries(t, kvh), run, work, records, heads_stride);
}

// out[value_dim] of head h from its records [n_runs x rec_stride]; a sink logit joins the
// denominator with no value: out = sum exp(s_p - m) v_p / (exp(sink - m) + sum exp(s_p - m)).
void merge_head(const Job& job, int64_t h, const float* records, int64_t n_runs, float* out) {
    const int64_t stride = job.rec_stride;
    const int64_t value_dim = job.heads->value_dim;
    if (job.settings->sinks == nullptr)
        return attend_merge(records, n_runs, stride, value_dim, out);
    const float sink = job.settings->sinks[h];
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

// Tokens [t0, t1) of head group kvh over all their runs, merged into the output. A run that
// several tokens see whole goes through attend_run once for all their heads: each head's
// scores, softmax and values are computed exactly as alone, but the run's keys are widened
// once for all of them. Records are kept per run counted from the block's first run.
void attend_block(const Job& job, int64_t t0, int64_t t1, int64_t kvh, int worker) {
    const int64_t n_q = job.shape.n_q;
    const int64_t head_dim = job.heads->head_dim;
    const int64_t window = job.settings->window;
    float* work = job.scratch->work.data() + worker * job.worker_floats;
    float* queries = work + job.run_floats * (t1 - t0);     // [(t1 - t0) x n_q x head_dim]
    float* records = queries + (t1 - t0) * n_q * head_dim;  // [(t1 - t0) x n_q x span x record]
    const int64_t heads_stride = job.span * job.rec_stride;
    const int64_t token_stride = n_q * heads_stride;
    for (int64_t t = t0; t < t1; ++t) {
        const float* q = job.group_queries(t, kvh);
        std::copy(q, q + n_q * head_dim, queries + (t - t0) * n_q * head_dim);
    }
    const int64_t r_first = job.visible(t0).first_run();  // windows only move forward
    const int64_t r_last = job.visible(t1 - 1).last_run();
    for (int64_t r = r_first; r <= r_last; ++r) {
        const int64_t p0 = r * kRun;
        float* run_records = records + (r - r_first) * job.rec_stride;
        // Tokens [whole_begin, whole_end) see all of run r: they reach its last position and
        // (in a window) still see its first.
        const int64_t whole_begin = std::clamp(p0 + kRun - 1 - job.pos0, t0, t1);
        const int64_t whole_end =
            window > 0 ? std::clamp(p0 + window - job.pos0, whole_begin, t1) : t1;
        if (whole_begin < whole_end) {
            AttnShape shape = job.shape;
            shape.n_q = (whole_end - whole_begin) * n_q;
            const KvRun run = job.kv->run(job.settings->cache_layer, p0, kRun, kvh * head_dim,
                                          kvh * job.heads->value_dim);
            attend_run(shape, queries + (whole_begin - t0) * n_q * head_dim, run, work,
                       run_records + (whole_begin - t0) * token_stride, heads_stride);
        }
        for (int64_t t = t0; t < t1; ++t) {
            if (t == whole_begin) t = whole_end;
            if (t >= t1) break;
            const Visible vis = job.visible(t);
            if (r < vis.first_run() || r > vis.last_run()) continue;
            attend_partial(job, t, kvh, r, work, run_records + (t - t0) * token_stride,
                           heads_stride);
        }
    }
    for (int64_t t = t0; t < t1; ++t) {
        const Visible vis = job.visible(t);
        const float* token_records =
            records + (t - t0) * token_stride + (vis.first_run() - r_first) * job.rec_stride;
        for (int64_t g = 0; g < n_q; ++g) {
            const int64_t h = kvh * n_q + g;
            merge_head(job, h, token_records + g * heads_stride, vis.runs(), job.head_out(t, h));
        }
    }
}

// Runs kept per head by a block of `tokens` tokens (an upper bound).
int64_t span_bound(const Job& job, int64_t tokens) {
    const int64_t all = (job.pos0 + job.n + kRun - 1) / kRun;
    const int64_t window = job.settings->window;
    if (window <= 0) return all;
    // From the block's first token's first position to its last token's position.
    return std::min(all, (tokens + window - 2) / kRun + 2);
}

int64_t tokens_per_task(const Job& job, int64_t threads) {
    const int64_t n_head_kv = job.heads->n_head_kv;
    const int64_t per_token = job.shape.n_q * span_bound(job, kTokenBlock) * job.rec_stride;
    const int64_t wanted_blocks = (threads * kTasksPerThread + n_head_kv - 1) / n_head_kv;
    const int64_t for_tasks = std::max<int64_t>(8, job.n / std::max<int64_t>(1, wanted_blocks));
    return std::clamp<int64_t>(
        std::min(for_tasks, kBlockRecordFloats / std::max<int64_t>(1, per_token)), 1, kTokenBlock);
}

void attend_blocks(const Job& job, ThreadPool& pool) {
    const Job* jp = &job;
    const int64_t blocks = (job.n + job.block - 1) / job.block;
    pool.parallel_for(blocks * job.heads->n_head_kv, [jp](int64_t task, int worker) {
        const int64_t n_head_kv = jp->heads->n_head_kv;
        const int64_t t0 = task / n_head_kv * jp->block;
        attend_block(*jp, t0, std::min(jp->n, t0 + jp->block), task % n_head_kv, worker);
    });
}

// One task per (token, group, run); records [n x n_head x span x record], merged afterwards.
void attend_split(const Job& job, ThreadPool& pool) {
    const AttentionHeads& heads = *job.heads;
    const int64_t head_records = job.span * job.rec_stride;
    grow(job.scratch->split_records, job.n * heads.n_head * head_records);
    const Job* jp = &job;
    pool.parallel_for(job.n * heads.n_head_kv * job.span, [jp, head_records](int64_t task,
                                                                             int worker) {
        const Job& j = *jp;
        const int64_t i = task % j.span;
        const int64_t kvh = task / j.span % j.heads->n_head_kv;
        const int64_t t = task / j.span / j.heads->n_head_kv;
        const Visible vis = j.visible(t);
        if (i >= vis.runs()) return;  // past this token's range
        float* records = j.scratch->split_records.data() +
                         (t * j.heads->n_head + kvh * j.shape.n_q) * head_records +
                         i * j.rec_stride;
        attend_partial(j, t, kvh, vis.first_run() + i,
                       j.scratch->work.data() + worker * j.worker_floats, records, head_records);
    });
    for (int64_t t = 0; t < job.n; ++t) {
        const int64_t runs = job.visible(t).runs();
        for (int64_t h = 0; h < heads.n_head; ++h) {
            merge_head(job, h,
                       job.scratch->split_records.data() + (t * heads.n_head + h) * head_records,
                       runs, job.head_out(t, h));
        }
    }
}

}  // namespace

void attend_cached(const AttentionHeads& heads, const AttentionSettings& settings,
                   const KvCache& kv, ThreadPool& pool, const float* q, int64_t pos0, int64_t n,
                   AttentionScratch& scratch, float* out) {
    if (n <= 0) return;
    Job job{};
    job.heads = &heads;
    job.settings = &settings;
    job.kv = &kv;
    job.q = q;
    job.out = out;
    job.scratch = &scratch;
    job.shape.n_q = heads.n_head / heads.n_head_kv;
    job.shape.head_dim = heads.head_dim;
    job.shape.value_dim = heads.value_dim;
    job.shape.q_stride = heads.head_dim;
    job.shape.scale = settings.scale;
    job.shape.softcap = settings.softcap;
    job.pos0 = pos0;
    job.n = n;
    job.rec_stride = attn_record_floats(heads.value_dim);
    job.run_floats = attn_run_scratch_floats(job.shape, kRun);
    const int64_t threads = pool.size();
    if (n < kSplitBelowTokens) {
        for (int64_t t = 0; t < n; ++t) job.span = std::max(job.span, job.visible(t).runs());
        job.worker_floats = (job.run_floats + 15) / 16 * 16;
        grow(scratch.work, threads * job.worker_floats);
        return attend_split(job, pool);
    }
    job.block = tokens_per_task(job, threads);
    job.span = span_bound(job, job.block);
    // Run scratch for the block's heads together, their queries, their records.
    job.worker_floats = (job.run_floats * job.block + job.block * job.shape.n_q * heads.head_dim +
                         job.block * job.shape.n_q * job.span * job.rec_stride + 15) /
                        16 * 16;
    grow(scratch.work, threads * job.worker_floats);
    attend_blocks(job, pool);
}

}  // namespace ember
