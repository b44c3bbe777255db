// The quantized prefill product: y [n x rows] = x [n x cols] · W^T * alpha on the tensor cores,
// with a Q4_K or Q6_K weight (or, grouped, an MXFP4 one) read in place. The activations are the
// prefill's f16 inputs, scaled by one power of two (half_inputs.cuh); each weight is
// dequantized in registers to f32 exactly as dequantize_rows_half does it and rounded to f16,
// so the operands are bit for bit those of the dequantize-to-f16-and-cuBLAS path, and only the
// order of the f32 sums differs.
//
// Why: that path writes every weight out as f16 (3.5 bytes of traffic for each 0.56-byte Q4_K
// weight) and pays a dequantization launch and a cuBLAS call per 16 MiB slice, ~19 ms a pass of
// an 8B model whatever the batch; here the weights are read once per tile of 64 tokens.
//
// Which token a sum belongs to never changes its order: a token is one column of the mma, the
// loops over the weights do not depend on the batch. The split of the width across blocks
// (short batches, to fill the card) does depend on the batch size.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "engine/model/cuda/quant_kernels.cuh"
#include "engine/tensor/types.h"

namespace ember::cuda {

// Whether the kernel reads w: Q4_K or Q6_K, its width a multiple of 256.
bool qmma_supports(const DeviceMatrix& w);
// Whether the grouped kernel reads w: as qmma_supports, and MXFP4 of any width of whole blocks.
bool qmma_grouped_supports(const DeviceMatrix& w);

// The activations and where the product goes. x: row t at x + t * ldx (16-byte aligned rows);
// y: row t at y + t * ldy; alpha: device pointer to the one factor every sum is multiplied by
// (2^-e from to_scaled_half). Grouped products only: with x_rows, row t's activations are x's
// row x_rows[t] / x_row_divisor (a MoE's sorted pairs reading their tokens' rows, order[t] /
// n_used, without a gathered copy of them).
struct QmmaOperands {
    const __half* x = nullptr;
    int64_t ldx = 0;
    const int32_t* x_rows = nullptr;
    int32_t x_row_divisor = 1;
    float* y = nullptr;
    int64_t ldy = 0;
    const float* alpha = nullptr;
};

// Floats of scratch qmma_gemm needs for n tokens on a card of sm_count SMs (0: none).
int64_t qmma_scratch_floats(const DeviceMatrix& w, int64_t n, int sm_count);
// The most it needs for any batch of up to max_n tokens (a buffer sized once for all of them,
// so that no later batch reallocates it).
int64_t qmma_scratch_floats_upto(const DeviceMatrix& w, int64_t max_n, int sm_count);

// The product of n (>= 1) tokens. scratch: qmma_scratch_floats(w, n, sm_count) floats.
void qmma_gemm(const DeviceMatrix& w, const QmmaOperands& op, int64_t n, float* scratch,
               int sm_count, cudaStream_t stream);

// One tile of a grouped product: rows row0 .. row0 + count - 1 of x and y (count <= 64) times
// expert `expert`'s matrix.
struct QmmaTile {
    int32_t expert = 0;
    int32_t row0 = 0;
    int32_t count = 0;
    int32_t unused = 0;
};

// Tokens a grouped tile holds at most.
inline constexpr int kQmmaTileTokens = 64;

// The products of a mixture of experts' sorted rows: `expert0` is expert 0's matrix (rows and
// cols of one expert), expert e's rows start e * expert_stride bytes later; `tiles` (device
// memory, n_tiles of them) say which rows go through which expert (a tile of count 0: none).
void qmma_gemm_grouped(const DeviceMatrix& expert0, size_t expert_stride, const QmmaOperands& op,
                       const QmmaTile* tiles, int n_tiles, cudaStream_t stream);

}  // namespace ember::cuda
