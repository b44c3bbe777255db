// What lane t of a warp holds of one 256-element block of a Q4_K or Q6_K row, in the layout of
// mma.sync.m16n8k16's A fragments (mma_gemv.cu's header comment draws it): shared by the
// tensor-core gemv (mma_gemv.cu, quants as bf16 integers) and the quantized prefill product
// (qmma_gemm.cu, weights dequantized to f16 in registers).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "engine/model/cuda/quant_blocks.cuh"

namespace ember::cuda::mma {

using namespace blocks;

constexpr unsigned kFullMask = 0xffffffffu;

// A 32-bit word at a 2-byte aligned address (Q6_K blocks are 210 bytes): one load where the
// block happens to be 4-byte aligned, two halves where not.
__device__ __forceinline__ uint32_t load_u32(const uint8_t* p, bool aligned4) {
    if (aligned4) return __ldg(reinterpret_cast<const unsigned*>(p));
    return load_u16(p) | load_u16(p + 2) << 16;
}

// ---------------------------------------------------------------------------------------------
// Formats: what lane t of a row holds of one 256-element block.
//   Raw              its bytes (load(block, t)) of kChunk elements (kChunkBytes of the row)
//   element(g, h, t) the first of the 4 contiguous elements it puts in k-step h of scale group g
//   quants(raw, g, h) those 4 quants, one byte each (biased by kBias)
//   scale(raw, own_scales(raw, t), g, lane)   the group's f32 scale and offset (element =
//                    scale * (q - kBias) - offset), from what the lanes of the quad unpacked

// Q4_K: 8 groups of 32 elements (scale and min from the 12 packed bytes), two k-steps each.
// Lane t reads qs[32j + 8t .. 32j + 8t + 7] for j = 0..3: the low nibbles are elements
// 64j + 8t + 0..7 (group 2j), the high nibbles 64j + 32 + 8t + 0..7 (group 2j + 1).
struct MmaQ4_K {
    using Block = BlockQ4_K;
    static constexpr int kGroups = 8, kSteps = 2, kBias = 0;
    static constexpr int kChunk = kQK_K;  // elements one Raw covers
    static constexpr size_t kChunkBytes = sizeof(Block);
    static constexpr bool kHasOffset = true;
    struct Raw {
        uint4 head;  // d, dmin, scales[12]
        uint2 qs[4];
    };
    static __device__ __forceinline__ Raw load(const uint8_t* block, int t) {
        Raw raw;
        raw.head = load16(block);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            raw.qs[j] =
                __ldg(reinterpret_cast<const uint2*>(block + offsetof(Block, qs) + 32 * j + 8 * t));
        }
        return raw;
    }
    static __device__ __forceinline__ int element(int group, int h, int t) {
        return 32 * group + 8 * t + 4 * h;
    }
    // The (group, h, t) whose 4 elements start at e (a multiple of 4).
    static __device__ __forceinline__ void locate(int e, int& group, int& h, int& t) {
        group = e >> 5;
        t = (e >> 3) & 3;
        h = (e >> 2) & 1;
    }
    static __device__ __forceinline__ uint32_t quants(const Raw& raw, int group, int h) {
        const uint2 w = raw.qs[group >> 1];
        return ((h == 0 ? w.x : w.y) >> (4 * (group & 1))) & 0x0f0f0f0fu;
    }
    // The 6-bit scales are unpacked once per row and block: lane t does groups 2t and 2t + 1,
    // the lanes of its quad fetch the others from it.
    struct Scales {
        float scale[2], offset[2];
    };
    static __device__ __forceinline__ Scales own_scales(const Raw& raw, int t) {
        Scales s;
        k_scale_min(raw.head, 2 * t, &s.scale[0], &s.offset[0]);
        k_scale_min(raw.head, 2 * t + 1, &s.scale[1], &s.offset[1]);
        return s;
    }
    static __device__ __forceinline__ void scale(const Raw&, const Scales& s, int group, int lane,
                                                 float& scale, float& offset) {
        const int owner = (lane & ~3) | (group >> 1);
        scale = __shfl_sync(kFullMask, s.scale[group & 1], owner);
        offset = __shfl_sync(kFullMask, s.offset[group & 1], owner);
    }
};
static_assert(offsetof(BlockQ4_K, qs) % 8 == 0 && sizeof(BlockQ4_K) % 16 == 0,
              "Q4_K: 8-byte loads of qs in 16-byte aligned blocks");

// Q6_K: 16 groups of 16 elements (an int8 scale each), one k-step each. Group s is elements
// 128n + 32p + 16u + 0..15 with n = s / 8, p = (s / 2) % 4, u = s % 2; lane t takes 4 of them,
// l = 16u + 4t + 0..3: low bits in nibble p / 2 of ql[64n + 32(p % 2) + l], high bits 2p, 2p + 1
// of qh[32n + l], scale scales[s].
struct MmaQ6_K {
    using Block = BlockQ6_K;
    static constexpr int kGroups = 16, kSteps = 1, kBias = 32;
    static constexpr int kChunk = kQK_K;
    static constexpr size_t kChunkBytes = sizeof(Block);
    static constexpr bool kHasOffset = false;
    struct Raw {
        uint32_t ql[8];  // [n][p % 2][u]
        uint32_t qh[4];  // [n][u]
        uint32_t scales[4];
        uint32_t d;
    };
    static __device__ __forceinline__ Raw load(const uint8_t* block, int t) {
        const bool aligned4 = (reinterpret_cast<uintptr_t>(block) & 3u) == 0;
        Raw raw;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const int n = i >> 2, p2 = (i >> 1) & 1, u = i & 1;
            raw.ql[i] =
                load_u32(block + offsetof(Block, ql) + 64 * n + 32 * p2 + 16 * u + 4 * t, aligned4);
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int n = i >> 1, u = i & 1;
            raw.qh[i] = load_u32(block + offsetof(Block, qh) + 32 * n + 16 * u + 4 * t, aligned4);
            raw.scales[i] = load_u32(block + offsetof(Block, scales) + 4 * i, aligned4);
        }
        raw.d = load_u16(block + offsetof(Block, d));
        return raw;
    }
    static __device__ __forceinline__ int element(int group, int, int t) {
        return 16 * group + 4 * t;
    }
    static __device__ __forceinline__ void locate(int e, int& group, int& h, int& t) {
        group = e >> 4;
        t = (e >> 2) & 3;
        h = 0;
    }
    static __device__ __forceinline__ uint32_t quants(const Raw& raw, int group, int) {
        const int n = group >> 3, p = (group >> 1) & 3, u = group & 1;
        const uint32_t low = raw.ql[4 * n + 2 * (p & 1) + u] >> (4 * (p >> 1));
        const uint32_t high = raw.qh[2 * n + u] >> (2 * p);
        return (low & 0x0f0f0f0fu) | (high & 0x03030303u) << 4;
    }
    struct Scales {};
    static __device__ __forceinline__ Scales own_scales(const Raw&, int) {
        return {};
    }
    static __device__ __forceinline__ void scale(const Raw& raw, const Scales&, int group, int,
                                                 float& scale, float& offset) {
        const auto sc = static_cast<int8_t>((raw.scales[group >> 2] >> (8 * (group & 3))) & 0xffu);
        scale = __fmul_rn(fp16_bits_to_float(raw.d), static_cast<float>(sc));
        offset = 0.0f;
    }
};
static_assert(offsetof(BlockQ6_K, ql) % 4 == 0 && offsetof(BlockQ6_K, qh) % 4 == 0 &&
                  offsetof(BlockQ6_K, scales) % 4 == 0 && offsetof(BlockQ6_K, d) % 2 == 0,
              "Q6_K: word loads at even offsets");

}  // namespace ember::cuda::mma
