// The contract between the model code and the tensor kernels.
//
// The model only ever multiplies a (possibly quantized) weight matrix by f32 activations:
//   y[t][r] = sum_k W[r][k] * x[t][k]
// Kernels decide how activations are prepared (kept f32 for float weights, quantized once
// per row to 8-bit blocks for quantized weights) and which ISA runs the inner loop.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "engine/tensor/types.h"

namespace ember {

class ThreadPool;
struct KernelTable;

// How a matrix's blocks lie in memory.
//   Rows:     row r at data + r * row_stride, its blocks in column order (the GGUF layout).
//   Panels16: rows in panels of 16 (rows % 16 == 0, densely packed); panel p at
//             data + 16 * p * row_stride holds, per block column b, the 16 rows' blocks b
//             interleaved by dwords (see panels16.h). Same bytes in all, so row_stride, sizes
//             and the byte counts of a decode step are those of Rows. Written at load for the
//             types whose one-token kernel reads 16 rows' dwords as one vector (no gathers or
//             transposes per group); only a kernel table with gemm_panels16 multiplies it.
enum class WeightLayout : uint8_t { Rows, Panels16 };

// How a matrix's activations are prepared.
//   Quantized: as its type declares (8-bit blocks for most quantized types, f32 for float
//              weights): the int8 dot products that make prefill fast.
//   Exact:     f32 exactly as given for every type; quantized rows are dequantized first.
//              Float weights are the same either way.
//   Wide:      16-bit blocks (Q16_32) for every quantized type: within ~1e-2 logits of Exact on
//              trained models, at about half the speed of Quantized where the CPU has VNNI.
enum class Activations : uint8_t { Quantized, Exact, Wide };

// A 2-D weight matrix living in the mmap: `rows` rows of `cols` elements each.
struct MatrixView {
    TensorType type = TensorType::F32;
    const void* data = nullptr;
    int64_t rows = 0;
    int64_t cols = 0;
    size_t row_stride = 0;  // bytes between consecutive rows (Panels16: a row's bytes)
    WeightLayout layout = WeightLayout::Rows;
    Activations activations = Activations::Quantized;
};

// Reusable buffers, owned by the caller (per conversation state), so the decode loop does
// not allocate. Grows on demand and never shrinks.
struct MatmulScratch {
    std::vector<uint8_t> act;   // prepared activations: n_tokens rows in the type's act format
    std::vector<uint8_t> gemm;  // per-worker repacked weight panels (GemmArgs::scratch)
    // matmul_grouped(): per group, where its prepared activations start and its row tasks.
    struct GroupPlan {
        size_t act_offset = 0;
        size_t w_stride = 0;
        int64_t first_task = 0;
        int64_t rows_per_task = 0;
    };
    std::vector<GroupPlan> groups;
};

// y: [n_tokens x w.rows] row-major with row stride ldy floats; x: [n_tokens x w.cols].
void matmul(ThreadPool& pool, const MatrixView& w, const float* x, int64_t n_tokens, float* y,
            int64_t ldy, MatmulScratch& scratch);

// The same with an explicit kernel table (tests and benchmarks compare kernel levels).
void matmul(ThreadPool& pool, const MatrixView& w, const float* x, int64_t n_tokens, float* y,
            int64_t ldy, MatmulScratch& scratch, const KernelTable& kernels);

// matmul() on the calling thread alone, for callers already inside a parallel section (one
// attention head per task, say: K-cache rows as an F16 MatrixView times a head's queries). Same
// kernels and bitwise the same results as matmul(); `scratch` must be this thread's own.
void matmul_serial(const MatrixView& w, const float* x, int64_t n_tokens, float* y, int64_t ldy,
                   MatmulScratch& scratch, const KernelTable& kernels);
void matmul_serial(const MatrixView& w, const float* x, int64_t n_tokens, float* y, int64_t ldy,
                   MatmulScratch& scratch);

// One output of matmul_many(): y = w · x, y: [n_tokens x w.rows] with row stride ldy floats.
struct MatmulOut {
    const MatrixView* w = nullptr;
    float* y = nullptr;
    int64_t ldy = 0;
};
inline constexpr int kMaxMatmulOuts = 4;

// Several matrices (at most kMaxMatmulOuts, the same number of columns) times the same
// activations x [n_tokens x cols] in one parallel section: Q/K/V, or gate/up. Decode runs a few
// hundred sections per token, and each ends in a barrier where one thread waits for the other;
// one section for the group saves all but one of those waits. Same results as one matmul() per
// matrix.
void matmul_many(ThreadPool& pool, std::span<const MatmulOut> outs, const float* x,
                 int64_t n_tokens, MatmulScratch& scratch);
void matmul_many(ThreadPool& pool, std::span<const MatmulOut> outs, const float* x,
                 int64_t n_tokens, MatmulScratch& scratch, const KernelTable& kernels);

// One product of matmul_grouped(): y = w · x with its own matrix and its own activations.
// x: [n_tokens x w.cols], y: [n_tokens x w.rows] with row stride ldy floats.
struct MatmulGroup {
    MatrixView w;
    const float* x = nullptr;
    int64_t n_tokens = 0;
    float* y = nullptr;
    int64_t ldy = 0;
};

// Any number of products (the same number of columns) in one parallel section: the experts of
// a mixture-of-experts layer, each with the tokens routed to it. Every group's rows are cut into
// tasks on one shared counter, so the threads split the rows of all groups between them (a
// decode step's few experts are spread over every thread, not one expert per thread). A group
// whose x and n_tokens equal the previous group's reuses its prepared activations (gate and up
// of one expert; every expert of a single token). The same results, bit for bit, as one
// matmul() per group.
void matmul_grouped(ThreadPool& pool, std::span<const MatmulGroup> groups, MatmulScratch& scratch);
void matmul_grouped(ThreadPool& pool, std::span<const MatmulGroup> groups, MatmulScratch& scratch,
                    const KernelTable& kernels);

// Dequantizes row `row` of w into dst[0..w.cols) (embedding lookup, tests).
void dequantize_row(const MatrixView& w, int64_t row, float* dst);

}  // namespace ember
