#include "engine/tensor/matmul.h"

#include <algorithm>
#include <array>
#include <stdexcept>
#include <string>

#include "engine/tensor/panels16.h"
#include "engine/tensor/traits.h"
#include "engine/util/grow.h"
#include "engine/util/thread_pool.h"

namespace ember {

namespace {

// Weight bytes one worker keeps hot while it runs every token over them: the tile stays in L2
// so a batch streams each weight row from memory once, and each activation row once per tile.
constexpr size_t kTileBytes = 64 * 1024;
// Rows handed to a worker are multiples of this, so no two workers write the same cache line
// of y (16 floats = 64 bytes).
constexpr int64_t kRowAlign = 16;
// Rows of a gemm task are multiples of this: two 16-row panels, the AVX-512 micro-tile.
constexpr int64_t kGemmRowAlign = 32;
// Gemm tasks per worker: enough that a worker slowed by a neighbour on the shared cores hands
// rows to the other, few enough that claiming a task stays negligible.
constexpr int64_t kGemmTasksPerWorker = 4;
// Below this many tokens quantizing the activations is cheaper than waking the pool.
constexpr int64_t kParallelActTokens = 4;
// Calls of at most this many tokens are decode-sized: they stream the weights from memory.
constexpr int64_t kDecodeTokens = 8;
// Weight bytes of one decode task (see gemm_rows_per_task). A task's first panel is
// prefetched by the worker's previous task (GemmArgs::w_after), as long as the workers keep
// pace; tasks must still be several panels long: 48 KiB (two Qwen3 panels) decoded 15-20%
// slower than 192 KiB here; with the in-order L2 prefetch, 384 KiB decoded SmolLM2 / Qwen3
// Q8_0 2-8% faster than 192 (Q4_K_M level), 768 no better.
// Several tokens (a speculative check) take more compute per byte, so a worker's last task
// keeps the other waiting longer: there 384 KiB verified ~15% slower than 192 (SmolLM2 Q8_0).
constexpr size_t kDecodeTaskBytes = 384 * 1024;
constexpr size_t kVerifyTaskBytes = 192 * 1024;
constexpr size_t kScratchAlign = 64;

size_t checked_row_stride(const MatrixView& w, const TypeInfo& info) {
    if (w.cols % info.block_elems != 0) {
        throw std::invalid_argument("matrix of type " + std::string(info.name) + " has " +
                                    std::to_string(w.cols) + " columns, not a multiple of " +
                                    std::to_string(info.block_elems));
    }
    // A zero stride means densely packed rows.
    return w.row_stride != 0 ? w.row_stride : static_cast<size_t>(row_bytes(info, w.cols));
}

const TypeKernels& checked_kernels(const KernelTable& table, const TypeInfo& info,
                                   Activations activations) {
    const TypeKernels& k = activations == Activations::Exact  ? table.exact_for(info.type)
                           : activations == Activations::Wide ? table.wide_for(info.type)
                                                              : table[info.type];
    if (k.dot == nullptr || k.dequantize_row == nullptr) {
        throw std::invalid_argument("tensor type " + std::string(info.name) +
                                    " is not supported for matrix multiplication");
    }
    return k;
}

// Everything a worker needs, so the task lambdas capture one pointer (keeps std::function
// within its small-object buffer: no allocation per call).
struct MatmulJob {
    DotFn dot;
    const uint8_t* w;  // [rows x row_stride bytes]
    size_t w_stride;   // bytes between weight rows
    int64_t cols;
    int64_t rows_per_tile;
    const uint8_t* act;  // [n_tokens x act_stride bytes] prepared activations
    size_t act_stride;   // bytes between activation rows
    int64_t n_tokens;
    float* y;  // [n_tokens x ldy]
    int64_t ldy;
};

void run_rows(const MatmulJob& job, int64_t begin, int64_t end) {
    for (int64_t r0 = begin; r0 < end; r0 += job.rows_per_tile) {
        const int64_t r1 = std::min(end, r0 + job.rows_per_tile);
        for (int64_t t = 0; t < job.n_tokens; ++t) {
            const void* a = job.act + static_cast<size_t>(t) * job.act_stride;
            float* yt = job.y + t * job.ldy;  // [rows] outputs of token t
            for (int64_t r = r0; r < r1; ++r) {
                yt[r] = job.dot(job.cols, job.w + static_cast<size_t>(r) * job.w_stride, a);
            }
        }
    }
}

// One matrix of a parallel section: its rows are cut into tasks first_task.. of rows_per_task.
struct GemmPart {
    GemmFn gemm;
    GemmArgs all;           // every row; scratch unset
    int64_t rows_per_task;  // a multiple of kGemmRowAlign
    int64_t first_task;
};

// Every matrix of a section shares one task counter, so the section ends with one barrier and
// a worker done with one matrix's rows moves on to the next matrix's.
struct GemmJob {
    GemmPart parts[kMaxMatmulOuts];
    int n_parts = 0;
    uint8_t* scratch;  // [workers x scratch_stride], 64-byte aligned
    size_t scratch_stride;
    int64_t workers = 1;
};

// GemmArgs::w_after for a one-token share: the first row of task `next` of a matrix of `rows`
// rows split into tasks of `rows_per_task`, or nullptr past its end. Tasks are handed out in
// order, so while the workers keep pace a worker's next task is its current one plus the
// number of workers: its first panel is then not waited for.
const uint8_t* likely_next_share(const uint8_t* w, size_t w_stride, int64_t rows, int64_t n_tokens,
                                 int64_t rows_per_task, int64_t next) {
    const int64_t r0 = next * rows_per_task;
    if (n_tokens != 1 || r0 >= rows) return nullptr;
    return w + static_cast<size_t>(r0) * w_stride;
}

void run_gemm_task(const GemmJob& job, int64_t task, int worker) {
    int p = 0;
    while (p + 1 < job.n_parts && task >= job.parts[p + 1].first_task) ++p;
    const GemmPart& part = job.parts[p];
    GemmArgs a = part.all;
    const int64_t r0 = (task - part.first_task) * part.rows_per_task;
    a.rows = std::min(part.rows_per_task, part.all.rows - r0);
    a.w += static_cast<size_t>(r0) * a.w_stride;
    a.y += r0;
    a.scratch = job.scratch + static_cast<size_t>(worker) * job.scratch_stride;
    a.w_after = likely_next_share(part.all.w, a.w_stride, part.all.rows, a.n_tokens,
                                  part.rows_per_task, task + job.workers - part.first_task);
    part.gemm(a);
}

// Prepares the activations in the type's format; returns them (x itself for F32).
// pool == nullptr: on the calling thread.
const uint8_t* prepare_activations(ThreadPool* pool, const KernelTable& table,
                                   const TypeKernels& kernels, const float* x, int64_t n_tokens,
                                   int64_t cols, size_t act_stride, MatmulScratch& scratch) {
    if (kernels.act_format == ActFormat::F32) {
        // Float weights take the activations exactly as given: nothing to prepare.
        return reinterpret_cast<const uint8_t*>(x);
    }
    const size_t need = act_stride * static_cast<size_t>(n_tokens);
    grow(scratch.act, need);
    uint8_t* act = scratch.act.data();  // [n_tokens x act_stride bytes]
    struct ActJob {
        QuantizeActFn quantize;
        const float* x;  // [n_tokens x cols]
        int64_t cols;
        uint8_t* act;
        size_t stride;
    } aj{table.quantize_act[static_cast<size_t>(kernels.act_format)], x, cols, act, act_stride};
    if (pool == nullptr || n_tokens < kParallelActTokens || pool->size() == 1) {
        for (int64_t t = 0; t < n_tokens; ++t) {
            aj.quantize(x + t * cols, act + static_cast<size_t>(t) * aj.stride, cols);
        }
    } else {
        const ActJob* ajp = &aj;
        pool->parallel_for(n_tokens, [ajp](int64_t t, int) {
            ajp->quantize(ajp->x + t * ajp->cols, ajp->act + static_cast<size_t>(t) * ajp->stride,
                          ajp->cols);
        });
    }
    return act;
}

// 64-byte aligned per-worker gemm scratch of per_worker bytes; returns the stride between
// workers' regions.
uint8_t* gemm_scratch(size_t per_worker, int64_t workers, MatmulScratch& scratch, size_t* stride) {
    *stride = (per_worker + kScratchAlign - 1) / kScratchAlign * kScratchAlign;
    const size_t need = *stride * static_cast<size_t>(workers) + kScratchAlign;
    grow(scratch.gemm, need);
    const auto base = reinterpret_cast<uintptr_t>(scratch.gemm.data());
    return scratch.gemm.data() + ((kScratchAlign - base % kScratchAlign) % kScratchAlign);
}

// Rows per task: a few tasks per worker so a worker slowed by a neighbour hands rows to the
// other; for decode (a token or two) also at most ~kDecodeTaskBytes of weights, so the section's
// last task - the time one worker may wait for the other at the barrier - stays short.
int64_t gemm_rows_per_task(const GemmArgs& all, int64_t workers) {
    int64_t per_task =
        (all.rows + workers * kGemmTasksPerWorker - 1) / (workers * kGemmTasksPerWorker);
    if (all.n_tokens <= kDecodeTokens) {
        per_task = std::min<int64_t>(
            per_task,
            static_cast<int64_t>((all.n_tokens == 1 ? kDecodeTaskBytes : kVerifyTaskBytes) /
                                 std::max<size_t>(1, all.w_stride)));
    }
    return std::max(kGemmRowAlign, (per_task + kGemmRowAlign - 1) / kGemmRowAlign * kGemmRowAlign);
}

// What one output of a section needs after validation.
struct Prepared {
    const TypeKernels* kernels;
    size_t w_stride;
    size_t act_stride;
    GemmFn gemm;  // for the matrix's layout; nullptr: dot per row and token (Rows only)
};

Prepared prepare_out(const MatrixView& w, const KernelTable& table) {
    const TypeInfo& info = type_info(w.type);
    const TypeKernels& kernels = checked_kernels(table, info, w.activations);
    GemmFn gemm = kernels.gemm;
    if (w.layout == WeightLayout::Panels16) {
        gemm = kernels.gemm_panels16;
        if (gemm == nullptr || w.rows % kPanelRows != 0) {
            throw std::invalid_argument(
                "a " + std::string(info.name) + " matrix of " + std::to_string(w.rows) +
                " rows in 16-row panels cannot be multiplied by the " + table.isa + " kernels");
        }
    }
    return {&kernels, checked_row_stride(w, info), act_row_bytes(kernels.act_format, w.cols), gemm};
}

GemmArgs gemm_args(const MatmulOut& o, const Prepared& p, const uint8_t* act, int64_t n_tokens) {
    GemmArgs all;
    all.cols = o.w->cols;
    all.w = static_cast<const uint8_t*>(o.w->data);
    all.w_stride = p.w_stride;
    all.rows = o.w->rows;
    all.act = act;
    all.act_stride = p.act_stride;
    all.n_tokens = n_tokens;
    all.y = o.y;
    all.ldy = o.ldy;
    return all;
}

// pool == nullptr: everything on the calling thread.
void matmul_impl(ThreadPool* pool, const MatrixView& w, const float* x, int64_t n_tokens, float* y,
                 int64_t ldy, MatmulScratch& scratch, const KernelTable& table) {
    if (n_tokens <= 0 || w.rows <= 0) return;
    const MatmulOut out{&w, y, ldy};
    const Prepared p = prepare_out(w, table);
    const TypeKernels& kernels = *p.kernels;
    if (pool != nullptr && p.gemm != nullptr) {
        matmul_many(*pool, std::span<const MatmulOut>(&out, 1), x, n_tokens, scratch, table);
        return;
    }
    const uint8_t* act =
        prepare_activations(pool, table, kernels, x, n_tokens, w.cols, p.act_stride, scratch);
    if (p.gemm != nullptr) {
        GemmArgs all = gemm_args(out, p, act, n_tokens);
        size_t stride = 0;
        all.scratch = gemm_scratch(kernels.gemm_scratch(w.cols), 1, scratch, &stride);
        p.gemm(all);
        return;
    }

    MatmulJob job{};
    job.dot = kernels.dot;
    job.w = static_cast<const uint8_t*>(w.data);
    job.w_stride = p.w_stride;
    job.cols = w.cols;
    job.rows_per_tile =
        std::max<int64_t>(1, static_cast<int64_t>(kTileBytes / std::max<size_t>(1, p.w_stride)));
    job.act = act;
    job.act_stride = p.act_stride;
    job.n_tokens = n_tokens;
    job.y = y;
    job.ldy = ldy;
    if (pool == nullptr) {
        run_rows(job, 0, w.rows);
        return;
    }
    const MatmulJob* jp = &job;
    pool->parallel_ranges(w.rows, kRowAlign,
                          [jp](int64_t begin, int64_t end, int) { run_rows(*jp, begin, end); });
}

}  // namespace

void matmul(ThreadPool& pool, const MatrixView& w, const float* x, int64_t n_tokens, float* y,
            int64_t ldy, MatmulScratch& scratch) {
    matmul_impl(&pool, w, x, n_tokens, y, ldy, scratch, active_kernels());
}

void matmul(ThreadPool& pool, const MatrixView& w, const float* x, int64_t n_tokens, float* y,
            int64_t ldy, MatmulScratch& scratch, const KernelTable& kernels) {
    matmul_impl(&pool, w, x, n_tokens, y, ldy, scratch, kernels);
}

void matmul_serial(const MatrixView& w, const float* x, int64_t n_tokens, float* y, int64_t ldy,
                   MatmulScratch& scratch, const KernelTable& kernels) {
    matmul_impl(nullptr, w, x, n_tokens, y, ldy, scratch, kernels);
}

void matmul_serial(const MatrixView& w, const float* x, int64_t n_tokens, float* y, int64_t ldy,
                   MatmulScratch& scratch) {
    matmul_impl(nullptr, w, x, n_tokens, y, ldy, scratch, active_kernels());
}

void matmul_many(ThreadPool& pool, std::span<const MatmulOut> outs, const float* x,
                 int64_t n_tokens, MatmulScratch& scratch) {
    matmul_many(pool, outs, x, n_tokens, scratch, active_kernels());
}

void matmul_many(ThreadPool& pool, std::span<const MatmulOut> outs, const float* x,
                 int64_t n_tokens, MatmulScratch& scratch, const KernelTable& table) {
    if (outs.size() > static_cast<size_t>(kMaxMatmulOuts)) {
        throw std::invalid_argument("matmul_many: more than " + std::to_string(kMaxMatmulOuts) +
                                    " outputs");
    }
    if (n_tokens <= 0 || outs.empty()) return;
    Prepared prep[kMaxMatmulOuts];
    bool fused = true;
    for (size_t i = 0; i < outs.size(); ++i) {
        prep[i] = prepare_out(*outs[i].w, table);
        if (outs[i].w->cols != outs[0].w->cols) {
            throw std::invalid_argument("matmul_many: the matrices differ in columns");
        }
        // One prepared activation buffer serves the section: every type must share its format.
        fused = fused && prep[i].gemm != nullptr &&
                prep[i].kernels->act_format == prep[0].kernels->act_format;
    }
    if (!fused) {
        for (const MatmulOut& o : outs) {
            matmul_impl(&pool, *o.w, x, n_tokens, o.y, o.ldy, scratch, table);
        }
        return;
    }
    const int64_t cols = outs[0].w->cols;
    const uint8_t* act = prepare_activations(&pool, table, *prep[0].kernels, x, n_tokens, cols,
                                             prep[0].act_stride, scratch);
    GemmJob job{};
    const int64_t workers = pool.size();
    size_t per_worker = 0;
    int64_t n_tasks = 0;
    for (size_t i = 0; i < outs.size(); ++i) {
        if (outs[i].w->rows <= 0) continue;
        GemmPart& part = job.parts[job.n_parts++];
        part.gemm = prep[i].gemm;
        part.all = gemm_args(outs[i], prep[i], act, n_tokens);
        part.rows_per_task = gemm_rows_per_task(part.all, workers);
        part.first_task = n_tasks;
        n_tasks += (part.all.rows + part.rows_per_task - 1) / part.rows_per_task;
        per_worker = std::max(per_worker, prep[i].kernels->gemm_scratch(cols));
    }
    job.scratch = gemm_scratch(per_worker, workers, scratch, &job.scratch_stride);
    job.workers = workers;
    const GemmJob* jp = &job;
    pool.parallel_for(n_tasks,
                      [jp](int64_t task, int worker) { run_gemm_task(*jp, task, worker); });
}

void matmul_grouped(ThreadPool& pool, std::span<const MatmulGroup> groups, MatmulScratch& scratch) {
    matmul_grouped(pool, groups, scratch, active_kernels());
}

namespace {

// What the tasks of matmul_grouped() share; captured by pointer.
struct GroupedJob {
    std::span<const MatmulGroup> groups;
    const MatmulScratch::GroupPlan* plans;  // [groups.size()]
    const Prepared* prep;                   // the first group's (every group has its format)
    const uint8_t* act;                     // prepared activations, or nullptr for F32
    uint8_t* scratch;                       // [workers x scratch_stride]
    size_t scratch_stride;
    int64_t workers;
    int64_t n_tasks = 0;  // of every group together
};

// Whether group i takes the previous group's prepared activations.
bool shares_input(std::span<const MatmulGroup> groups, size_t i) {
    return i > 0 && groups[i].x == groups[i - 1].x && groups[i].n_tokens == groups[i - 1].n_tokens;
}

// The group of task `task`: the last whose first task is <= task.
size_t group_of_task(const GroupedJob& job, int64_t task) {
    const MatmulScratch::GroupPlan* plans = job.plans;
    return static_cast<size_t>(std::upper_bound(plans, plans + job.groups.size(), task,
                                                [](int64_t t, const MatmulScratch::GroupPlan& p) {
                                                    return t < p.first_task;
                                                }) -
                               plans - 1);
}

void run_grouped_task(const GroupedJob& job, int64_t task, int worker) {
    const MatmulScratch::GroupPlan* plans = job.plans;
    const size_t g = group_of_task(job, task);
    const MatmulGroup& grp = job.groups[g];
    const Prepared& p = job.prep[0];
    const uint8_t* act = job.act != nullptr ? job.act + plans[g].act_offset
                                            : reinterpret_cast<const uint8_t*>(grp.x);
    const MatmulOut out{&grp.w, grp.y, grp.ldy};
    GemmArgs a = gemm_args(out, Prepared{p.kernels, plans[g].w_stride, p.act_stride, p.gemm}, act,
                           grp.n_tokens);
    const int64_t r0 = (task - plans[g].first_task) * plans[g].rows_per_task;
    a.rows = std::min(plans[g].rows_per_task, grp.w.rows - r0);
    a.w += static_cast<size_t>(r0) * a.w_stride;
    a.y += r0;
    a.scratch = job.scratch + static_cast<size_t>(worker) * job.scratch_stride;
    // The worker's likely next task may lie in a later group (a decode step's experts are
    // groups of a few tasks each): its first panel is fetched all the same. Every group of a
    // fused call has the same type and layout, so the kernel's prefetch pattern fits it.
    const int64_t next = task + job.workers;
    if (next < job.n_tasks) {
        const size_t ng = group_of_task(job, next);
        const MatmulGroup& next_grp = job.groups[ng];
        a.w_after = next_grp.n_tokens == grp.n_tokens
                        ? likely_next_share(static_cast<const uint8_t*>(next_grp.w.data),
                                            plans[ng].w_stride, next_grp.w.rows, a.n_tokens,
                                            plans[ng].rows_per_task, next - plans[ng].first_task)
                        : nullptr;
    }
    p.gemm(a);
}

}  // namespace

void matmul_grouped(ThreadPool& pool, std::span<const MatmulGroup> groups, MatmulScratch& scratch,
                    const KernelTable& table) {
    if (groups.empty()) return;
    const int64_t cols = groups[0].w.cols;
    const Prepared first = prepare_out(groups[0].w, table);
    bool fused = first.gemm != nullptr;
    for (const MatmulGroup& g : groups) {
        if (g.w.cols != cols) {
            throw std::invalid_argument("matmul_grouped: the matrices differ in columns");
        }
        prepare_out(g.w, table);  // checks the type is supported and the columns fit its blocks
        // One task loop calls one gemm: every group must have the first one's type and layout.
        fused = fused && g.w.type == groups[0].w.type && g.w.layout == groups[0].w.layout &&
                g.w.activations == groups[0].w.activations;
    }
    if (!fused) {
        for (const MatmulGroup& g : groups) {
            matmul_impl(&pool, g.w, g.x, g.n_tokens, g.y, g.ldy, scratch, table);
        }
        return;
    }
    // Activations: each distinct (x, n_tokens) once, at its group's offset.
    auto& plans = scratch.groups;
    plans.resize(groups.size());
    const bool quantized = first.kernels->act_format != ActFormat::F32;
    size_t act_bytes = 0;
    int64_t act_rows = 0;
    for (size_t i = 0; i < groups.size(); ++i) {
        const bool same = shares_input(groups, i);
        plans[i].act_offset = same ? plans[i - 1].act_offset : act_bytes;
        if (!same) {
            act_bytes +=
                first.act_stride * static_cast<size_t>(std::max<int64_t>(0, groups[i].n_tokens));
            act_rows += groups[i].n_tokens;
        }
    }
    const uint8_t* act = nullptr;
    if (quantized) {
        grow(scratch.act, act_bytes);
        struct ActJob {
            QuantizeActFn quantize;
            std::span<const MatmulGroup> groups;
            const MatmulScratch::GroupPlan* plans;
            uint8_t* act;
            size_t stride;
            int64_t cols;
        } aj{table.quantize_act[static_cast<size_t>(first.kernels->act_format)],
             groups,
             plans.data(),
             scratch.act.data(),
             first.act_stride,
             cols};
        auto quantize_group = [](const ActJob& j, size_t i) {
            if (shares_input(j.groups, i)) return;
            const MatmulGroup& g = j.groups[i];
            for (int64_t t = 0; t < g.n_tokens; ++t) {
                j.quantize(g.x + t * j.cols,
                           j.act + j.plans[i].act_offset + static_cast<size_t>(t) * j.stride,
                           j.cols);
            }
        };
        if (act_rows < kParallelActTokens || pool.size() == 1) {
            for (size_t i = 0; i < groups.size(); ++i) quantize_group(aj, i);
        } else {
            const ActJob* ajp = &aj;
            pool.parallel_for(static_cast<int64_t>(groups.size()),
                              [ajp, quantize_group](int64_t i, int) {
                                  quantize_group(*ajp, static_cast<size_t>(i));
                              });
        }
        act = scratch.act.data();
    }
    // Row tasks of every group on one counter.
    const int64_t workers = pool.size();
    int64_t n_tasks = 0;
    for (size_t i = 0; i < groups.size(); ++i) {
        const MatmulGroup& g = groups[i];
        plans[i].first_task = n_tasks;
        plans[i].w_stride = 0;
        if (g.n_tokens <= 0 || g.w.rows <= 0) {
            plans[i].rows_per_task = 1;
            continue;
        }
        plans[i].w_stride = checked_row_stride(g.w, type_info(g.w.type));
        GemmArgs all;
        all.rows = g.w.rows;
        all.n_tokens = g.n_tokens;
        all.w_stride = plans[i].w_stride;
        plans[i].rows_per_task = gemm_rows_per_task(all, workers);
        n_tasks += (g.w.rows + plans[i].rows_per_task - 1) / plans[i].rows_per_task;
    }
    GroupedJob job{groups, plans.data(), &first, act, nullptr, 0, workers, n_tasks};
    job.scratch =
        gemm_scratch(first.kernels->gemm_scratch(cols), workers, scratch, &job.scratch_stride);
    const GroupedJob* jp = &job;
    pool.parallel_for(n_tasks,
                      [jp](int64_t task, int worker) { run_grouped_task(*jp, task, worker); });
}

void dequantize_row(const MatrixView& w, int64_t row, float* dst) {
    const TypeInfo& info = type_info(w.type);
    const TypeKernels& kernels = type_kernels(w.type);
    if (kernels.dequantize_row == nullptr) {
        throw std::invalid_argument("tensor type " + std::string(info.name) +
                                    " cannot be dequantized");
    }
    if (row < 0 || row >= w.rows) {
        throw std::out_of_range("row " + std::to_string(row) + " outside a matrix of " +
                                std::to_string(w.rows) + " rows");
    }
    const size_t stride = checked_row_stride(w, info);
    if (w.layout == WeightLayout::Panels16) {
        // A block at a time, gathered back into the row layout on the stack: an embedding
        // lookup per token allocates nothing.
        std::array<uint8_t, 512> block{};  // [info.block_bytes] one block in the row layout
        if (info.block_bytes > block.size()) {
            throw std::invalid_argument("dequantize_row: " + std::string(info.name) +
                                        " blocks are too large for a panel row read");
        }
        const int64_t n_blocks = w.cols / static_cast<int64_t>(info.block_elems);
        for (int64_t b = 0; b < n_blocks; ++b) {
            read_panels16_block(w, row, b, block.data());
            kernels.dequantize_row(block.data(), dst + b * static_cast<int64_t>(info.block_elems),
                                   static_cast<int64_t>(info.block_elems));
        }
        return;
    }
    kernels.dequantize_row(static_cast<const uint8_t*>(w.data) + static_cast<size_t>(row) * stride,
                           dst, w.cols);
}

}  // namespace ember
