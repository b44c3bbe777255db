// The tensor-core gemv: products of Q4_K and Q6_K matrices with 1..kGemvMaxTokens tokens of
// f32 activations on the tensor cores (mma.sync, bf16 inputs, f32 sums), used for every token
// count of those types so that a token's bits are the same alone or in a batch.
//
// Why it is exact enough to replace the CUDA-core gemv: each activation is split into three
// bf16 pieces whose sum is the f32 value exactly (8 + 8 + 8 significand bits), each weight's
// quant is a small integer (exact in bf16), so every product the tensor core forms is exact;
// the sub-block scales and offsets are applied to the f32 sums afterwards. What differs from
// the f32 FMA chain is only the order and rounding of the sums.
//
// Why it is batch-invariant: tokens are the n columns of the product (8 per tile), and the
// tensor core computes each output element from its own row and column alone, in an order that
// does not depend on the other columns; the kernel's loops over the weights do not depend on
// the number of tokens either.
#pragma once

#include <cuda_runtime.h>

#include "engine/model/cuda/gemv_args.cuh"
#include "engine/tensor/types.h"

namespace ember::cuda {

// Q4_K and Q6_K (the bulk of a Q4_K_M file).
bool mma_gemv_supports(TensorType type);

// The products of `args` (block_begin filled here) for `type`. (No gated epilogue: a gate/up
// pair on the tensor cores goes as two products and the element-wise activation.)
void launch_mma_gemv(TensorType type, GemvArgs& args, cudaStream_t stream);

}  // namespace ember::cuda
