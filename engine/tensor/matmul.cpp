#include "engine/tensor/matmul.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "engine/tensor/traits.h"
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

const TypeKernels& checked_kernels(const KernelTable& table, const TypeInfo& info) {
    const TypeKernels& k = table[info.type];
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

struct GemmJob {
    GemmFn gemm;
    GemmArgs all;           // every row; scratch unset
    int64_t rows_per_task;  // a multiple of kGemmRowAlign
    uint8_t* scratch;       // [workers x scratch_stride], 64-byte aligned
    size_t scratch_stride;
};

void run_gemm_task(const GemmJob& job, int64_t task, int worker) {
    GemmArgs a = job.all;
    const int64_t r0 = task * job.rows_per_task;
    a.rows = std::min(job.rows_per_task, job.all.rows - r0);
    a.w += static_cast<size_t>(r0) * a.w_stride;
    a.y += r0;
    a.scratch = job.scratch + static_cast<size_t>(worker) * job.scratch_stride;
    job.gemm(a);
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
    if (scratch.act.size() < need) scratch.act.resize(need);
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

// 64-byte aligned per-worker gemm scratch; returns the stride between workers' regions.
uint8_t* gemm_scratch(const TypeKernels& kernels, int64_t cols, int64_t workers,
                      MatmulScratch& scratch, size_t* stride) {
    const size_t per_worker = kernels.gemm_scratch(cols);
    *stride = (per_worker + kScratchAlign - 1) / kScratchAlign * kScratchAlign;
    const size_t need = *stride * static_cast<size_t>(workers) + kScratchAlign;
    if (scratch.gemm.size() < need) scratch.gemm.resize(need);
    const auto base = reinterpret_cast<uintptr_t>(scratch.gemm.data());
    return scratch.gemm.data() + ((kScratchAlign - base % kScratchAlign) % kScratchAlign);
}

void matmul_gemm(ThreadPool& pool, const TypeKernels& kernels, const GemmArgs& all,
                 MatmulScratch& scratch) {
    GemmJob job{};
    job.gemm = kernels.gemm;
    job.all = all;
    const int64_t workers = pool.size();
    const int64_t per_task =
        (all.rows + workers * kGemmTasksPerWorker - 1) / (workers * kGemmTasksPerWorker);
    job.rows_per_task =
        std::max(kGemmRowAlign, (per_task + kGemmRowAlign - 1) / kGemmRowAlign * kGemmRowAlign);
    job.scratch = gemm_scratch(kernels, all.cols, workers, scratch, &job.scratch_stride);

    const int64_t n_tasks = (all.rows + job.rows_per_task - 1) / job.rows_per_task;
    const GemmJob* jp = &job;
    pool.parallel_for(n_tasks,
                      [jp](int64_t task, int worker) { run_gemm_task(*jp, task, worker); });
}

// pool == nullptr: everything on the calling thread.
void matmul_impl(ThreadPool* pool, const MatrixView& w, const float* x, int64_t n_tokens, float* y,
                 int64_t ldy, MatmulScratch& scratch, const KernelTable& table) {
    if (n_tokens <= 0 || w.rows <= 0) return;
    const TypeInfo& info = type_info(w.type);
    const TypeKernels& kernels = checked_kernels(table, info);
    const size_t w_stride = checked_row_stride(w, info);
    const size_t act_stride = act_row_bytes(kernels.act_format, w.cols);
    const uint8_t* act =
        prepare_activations(pool, table, kernels, x, n_tokens, w.cols, act_stride, scratch);

    if (kernels.gemm != nullptr) {
        GemmArgs all;
        all.cols = w.cols;
        all.w = static_cast<const uint8_t*>(w.data);
        all.w_stride = w_stride;
        all.rows = w.rows;
        all.act = act;
        all.act_stride = act_stride;
        all.n_tokens = n_tokens;
        all.y = y;
        all.ldy = ldy;
        if (pool != nullptr) {
            matmul_gemm(*pool, kernels, all, scratch);
        } else {
            size_t stride = 0;
            all.scratch = gemm_scratch(kernels, w.cols, 1, scratch, &stride);
            kernels.gemm(all);
        }
        return;
    }

    MatmulJob job{};
    job.dot = kernels.dot;
    job.w = static_cast<const uint8_t*>(w.data);
    job.w_stride = w_stride;
    job.cols = w.cols;
    job.rows_per_tile =
        std::max<int64_t>(1, static_cast<int64_t>(kTileBytes / std::max<size_t>(1, w_stride)));
    job.act = act;
    job.act_stride = act_stride;
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
    kernels.dequantize_row(static_cast<const uint8_t*>(w.data) + static_cast<size_t>(row) * stride,
                           dst, w.cols);
}

}  // namespace ember
