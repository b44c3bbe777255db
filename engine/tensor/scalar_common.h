// Small numeric helpers shared by the scalar reference kernels (quants_scalar.cpp) and the
// reference quantizers (quantize_scalar.cpp): rounding, clamping, fp16 scales that cover their
// data, the e8m0 scale of MXFP4.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

#include "engine/tensor/blocks.h"

namespace ember::scalar {

// Round to nearest, ties to even (the default FP environment).
inline int nearest_int(float v) {
    return static_cast<int>(std::nearbyint(v));
}

// The same for |v| < 2^22 without a libm call (activation quantization runs once per token per
// matmul): adding 1.5 * 2^23 pushes the fraction out of the mantissa, and the FPU rounds it to
// nearest-even; the low mantissa bits are then the integer, offset by 2^22.
inline int nearest_int_small(float v) {
    const float shifted = v + 12582912.0f;
    return static_cast<int>(std::bit_cast<uint32_t>(shifted) & 0x007fffffu) - 0x00400000;
}

inline int clamp_int(int v, int lo, int hi) {
    return std::min(hi, std::max(lo, v));
}

// Smallest non-negative fp16 h with value(h) * levels >= v, so that a scale stored in fp16 still
// covers the data after rounding (quantizers then never have to clip). 0 for v <= 0.
inline uint16_t fp16_at_least(float v, int levels) {
    if (!(v > 0.0f)) return 0;
    uint16_t h = fp32_to_fp16(v / static_cast<float>(levels));
    while (h < 0x7c00u && fp16_to_fp32(h) * static_cast<float>(levels) < v) ++h;
    return h;
}

// Largest fp16 whose value is <= v (v finite).
inline uint16_t fp16_at_most(float v) {
    const uint16_t h = fp32_to_fp16(v);
    if (fp16_to_fp32(h) <= v) return h;
    if (h & 0x8000u) return static_cast<uint16_t>(h + 1u);  // more negative
    if (h == 0) return 0x8001u;                             // +0 > v: smallest negative
    return static_cast<uint16_t>(h - 1u);
}

// Sum over the first `count` elements of a * b.
inline int32_t dot_i8(const int8_t* a, const int8_t* b, int count) {
    int32_t sum = 0;
    for (int i = 0; i < count; ++i) sum += static_cast<int32_t>(a[i]) * static_cast<int32_t>(b[i]);
    return sum;
}

inline void store_u32_le(uint8_t* p, uint32_t v) {
    for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

// 2^(e - 128), exactly, for every e8m0 byte (e = 0 and 1 are the subnormals 2^-128, 2^-127).
inline float mxfp4_scale(uint8_t e) {
    return e >= 2 ? std::bit_cast<float>(static_cast<uint32_t>(e - 1) << 23)
                  : std::bit_cast<float>(0x00200000u << e);
}

}  // namespace ember::scalar
