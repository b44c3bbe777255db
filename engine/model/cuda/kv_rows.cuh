// The device KV cache's rows (layer_kernels.cuh: KvLayerView, TokenRows), as the kernels that
// write and read them see them: where token t's row is, an element of a row, and the writing of
// f32 values into a row in the cache's type (as the CPU's KvCache::store converts them).
#pragma once

#include <cuda_fp16.h>

#include <cstddef>
#include <cstdint>

#include "engine/model/cuda/layer_kernels.cuh"
#include "engine/model/cuda/reduce.cuh"
#include "engine/model/kv_type.h"

namespace ember::cuda {

// Where a q8_0 row's quants start inside each of its blocks (kv_type.h: blocks.h's BlockQ8_0,
// the fp16 scale first).
constexpr int kKvQ8Quants = offsetof(BlockQ8_0, qs);
static_assert(offsetof(BlockQ8_0, d) == 0, "the scale is written at the block's start");

// Element i of a cached row in the cache's type.
template <KvType T>
__device__ inline float row_element(const uint8_t* row, int64_t i) {
    if constexpr (T == KvType::F32) {
        return reinterpret_cast<const float*>(row)[i];
    } else if constexpr (T == KvType::F16) {
        return __half2float(reinterpret_cast<const __half*>(row)[i]);
    } else {
        const uint8_t* block = row + (i / kKvQ8Block) * kKvQ8BlockBytes;  // fp16 d, 32 int8
        const float d = __half2float(*reinterpret_cast<const __half*>(block));
        return d * static_cast<float>(static_cast<int8_t>(block[kKvQ8Quants + i % kKvQ8Block]));
    }
}

__device__ inline int64_t slot_of(const KvLayerView& layer, int64_t pos) {
    return layer.ring ? pos % layer.slots : pos;
}

// Token t's position and the start of its cache's K or V rows (TokenRows).
__device__ inline int64_t position_of(const int64_t* pos0_at, const TokenRows& tokens, int64_t t) {
    return tokens.several() ? tokens.positions[t] : *pos0_at + t;
}
__device__ inline uint8_t* rows_of(const KvLayerView& layer, const TokenRows& tokens, int64_t t,
                                   bool is_v) {
    if (tokens.several()) return is_v ? tokens.v[t] : tokens.k[t];
    return is_v ? layer.v : layer.k;
}

// Elements [first, first + count) of a cache row of `width` elements, from f32 src [count],
// by the block's threads (a multiple of 32). f32 and f16 (round to nearest even): element by
// element. q8_0: one warp per block of 32 elements, `first` a multiple of 32 (count may end the
// row short of a block: the rest zero-padded), the scale the smallest fp16 at least amax / 127
// (as the CPU's quantizer), quants rounded to nearest.
__device__ inline void store_row_elements(KvType type, uint8_t* row, int64_t first,
                                          const float* src, int64_t count, int64_t width) {
    switch (type) {
        case KvType::F32:
            for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
                reinterpret_cast<float*>(row)[first + i] = src[i];
            }
            return;
        case KvType::F16:
            for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
                reinterpret_cast<__half*>(row)[first + i] = __float2half_rn(src[i]);
            }
            return;
        case KvType::Q8_0: {
            const int64_t end = first + count < width ? first + count : width;
            const int64_t blocks = (end - first + kKvQ8Block - 1) / kKvQ8Block;
            const unsigned lane = threadIdx.x % 32;
            for (int64_t b = threadIdx.x / 32; b < blocks; b += blockDim.x / 32) {
                const int64_t i = b * kKvQ8Block + lane;          // of src
                const float x = first + i < end ? src[i] : 0.0f;  // the row's last block padded
                const float amax = warp_max(fabsf(x));
                const __half dh = __float2half_ru(amax / 127.0f);
                const float d = __half2float(dh);
                const int q = d != 0.0f ? max(-127, min(127, __float2int_rn(x / d))) : 0;
                uint8_t* block = row + (first / kKvQ8Block + b) * kKvQ8BlockBytes;
                if (lane == 0) *reinterpret_cast<__half*>(block) = dh;
                block[kKvQ8Quants + lane] = static_cast<uint8_t>(static_cast<int8_t>(q));
            }
            return;
        }
    }
}

}  // namespace ember::cuda
