// Deterministic block reductions: a fixed butterfly inside each warp, then the warps' results
// summed in warp order by every thread, so every thread gets the same bits on every run.
#pragma once

#include <cuda_runtime.h>

namespace ember::cuda {

template <class T>
__device__ inline T warp_sum(T v) {
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

template <class T>
__device__ inline T warp_max(T v) {
    for (int offset = 16; offset > 0; offset /= 2)
        v = max(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 32 warps); `partial` holds one value
// per warp. Every thread must call it; it synchronizes the block.
template <class T>
__device__ inline T block_sum(T v, T* partial) {
    v = warp_sum(v);
    const unsigned warp = threadIdx.x / 32;
    if (threadIdx.x % 32 == 0) partial[warp] = v;
    __syncthreads();
    T total = 0;
    for (unsigned w = 0; w < blockDim.x / 32; ++w) total += partial[w];
    __syncthreads();
    return total;
}

}  // namespace ember::cuda
