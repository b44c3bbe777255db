// The arguments every gemv kernel takes (quant_kernels.cu's CUDA-core gemv, mma_gemv.cu's
// tensor-core one): up to kMaxGemvOuts matrices of one type and width times the same
// activations, and the gated epilogue of a gate/up pair.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "engine/model/cuda/activations.cuh"
#include "engine/model/cuda/quant_kernels.cuh"

namespace ember::cuda {

// Up to kMaxGemvOuts matrices of one type and width (or of two types: second_format_block);
// block b serves matrix m for block_begin[m] <= b < block_begin[m + 1].
struct GemvArgs {
    const uint8_t* data[kMaxGemvOuts];
    size_t row_stride[kMaxGemvOuts];
    int64_t rows[kMaxGemvOuts];
    float* y[kMaxGemvOuts];
    int64_t ldy[kMaxGemvOuts];
    int64_t block_begin[kMaxGemvOuts + 1];
    int count;
    int64_t cols;
    const float* x;
    int64_t ldx;
    int n_tokens;
    int split = 1;  // warps per row (quant_kernels.cu: gemv_split); the tensor-core gemv's is 1
    // CUDA-core gemv: blocks with blockIdx.y = c take tokens c * n_tokens.. (x and every y
    // moved by as many rows): one launch for many chunks of n_tokens (gemv_chunks).
    int token_chunks = 1;
    // CUDA-core gemv of two formats (quant_kernels.cu: gemv_two_kernel): the matrices of the
    // second format come after those of the first, and blocks from second_format_block on, which
    // serve them, share each row among second_split warps.
    int64_t second_format_block = 0;
    int second_split = 1;
};

// One matrix of GemvArgs, picked with constant indices only (a run-time index into the
// kernel's parameters would copy them to local memory).
struct GemvTarget {
    const uint8_t* data;
    size_t row_stride;
    int64_t rows;
    float* y;
    int64_t ldy;
    int64_t block_begin;
};

__device__ __forceinline__ GemvTarget pick_target(const GemvArgs& a) {
    GemvTarget t{a.data[0], a.row_stride[0], a.rows[0], a.y[0], a.ldy[0], a.block_begin[0]};
    const int64_t block = blockIdx.x;
#pragma unroll
    for (int m = 1; m < kMaxGemvOuts; ++m) {
        if (m < a.count && block >= a.block_begin[m]) {
            t = {a.data[m], a.row_stride[m], a.rows[m], a.y[m], a.ldy[m], a.block_begin[m]};
        }
    }
    return t;
}

enum class GemvEpilogue : uint8_t { Plain, Silu, GeluTanh };

template <GemvEpilogue E>
__device__ __forceinline__ float epilogue(float gate, float up) {
    if constexpr (E == GemvEpilogue::Silu) {
        return gate_activation<GatedActivation::Silu>(gate, up);
    } else {
        return gate_activation<GatedActivation::GeluTanh>(gate, up);
    }
}

}  // namespace ember::cuda
