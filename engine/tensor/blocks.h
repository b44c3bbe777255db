// Packed block layouts of the GGUF tensor types, and exact fp16/bf16 <-> fp32 conversions.
//
// Every struct matches the file format byte for byte (the weights are used straight from the
// mmap), so none may gain padding: each has a static_assert on its size. Half-precision fields
// are kept as raw uint16_t bits because the format stores IEEE binary16 / bfloat16 and C++20
// has no portable 16-bit float type.
//
// Element order inside a block is what the kernels must get right; each struct documents it.
#pragma once

#include <bit>
#include <cstdint>

namespace ember {

// ---------------------------------------------------------------------------------------------
// Half-precision conversions (scalar, exact, round-to-nearest-even, mode independent).

// IEEE binary16 -> binary32. Exact for every input: subnormals become normal floats, inf stays
// inf, NaN keeps its sign and payload (shifted into the top of the f32 mantissa).
constexpr float fp16_to_fp32(uint16_t h) {
    // Written with masks instead of branches so that row conversions vectorize.
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t em = h & 0x7fffu;  // exponent and mantissa
    // Normal numbers: rebias the exponent from 15 to 127 (add 112). Inf/NaN (exponent 31) get
    // a second 112 so their exponent becomes 255 with the payload kept.
    const uint32_t inf_nan = 0u - static_cast<uint32_t>(em >= 0x7c00u);  // all ones or zero
    const uint32_t normal = (em << 13) + (112u << 23) + (inf_nan & (112u << 23));
    // Subnormals and zero: em * 2^-24, exact in f32 (at most 10 significant bits).
    const uint32_t subnormal =
        std::bit_cast<uint32_t>(static_cast<float>(static_cast<int32_t>(em)) * 0x1p-24f);
    const uint32_t is_sub = 0u - static_cast<uint32_t>(em < 0x0400u);
    return std::bit_cast<float>(sign | (subnormal & is_sub) | (normal & ~is_sub));
}

// IEEE binary32 -> binary16 with round-to-nearest-even; overflow gives inf, NaN stays a
// (quiet) NaN. Integer arithmetic only, so the FPU rounding mode and FTZ/DAZ do not matter.
constexpr uint16_t fp32_to_fp16(float f) {
    const uint32_t x = std::bit_cast<uint32_t>(f);
    const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
    const uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) {
        // NaN: keep the top payload bits and force the quiet bit so it cannot become inf.
        return static_cast<uint16_t>(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    }
    // 65520 is the midpoint between 65504 (largest f16) and 2^16; ties go to even = inf.
    if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
    if (ax >= 0x38800000u) {
        // Normal f16 range (>= 2^-14). Rounding may carry into the exponent, which is right.
        const uint32_t rebased = ax - 0x38000000u;  // exponent 127 -> 15
        const uint32_t rounded = rebased + 0xfffu + ((rebased >> 13) & 1u);
        return static_cast<uint16_t>(sign | (rounded >> 13));
    }
    // Subnormal f16 (or zero): value = m * 2^(e-150); in units of 2^-24 that is
    // m * 2^(e-126), i.e. m >> (126 - e) with round-to-nearest-even on the dropped bits.
    const uint32_t e = ax >> 23;
    if (e < 101) return sign;  // below 2^-26: rounds to zero (less than half of 2^-24)
    const uint32_t m = (ax & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - e;  // 14..25
    uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return static_cast<uint16_t>(sign | q);
}

// bfloat16 is the top half of a binary32: widening is exact.
constexpr float bf16_to_fp32(uint16_t b) {
    return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

// binary32 -> bfloat16, round-to-nearest-even; NaN stays a quiet NaN.
constexpr uint16_t fp32_to_bf16(float f) {
    const uint32_t x = std::bit_cast<uint32_t>(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);
    const uint32_t rounded = x + 0x7fffu + ((x >> 16) & 1u);
    return static_cast<uint16_t>(rounded >> 16);
}

// ---------------------------------------------------------------------------------------------
// Block sizes.

inline constexpr int kQK = 32;     // elements per block of the 32-element formats
inline constexpr int kQK_K = 256;  // elements per K-quant super-block

// ---------------------------------------------------------------------------------------------
// 32-element formats. Unless noted, byte qs[j] holds element j in its low nibble and element
// j+16 in its high nibble.

// Q8_0: x[j] = d * qs[j].
struct BlockQ8_0 {
    uint16_t d;      // fp16 scale
    int8_t qs[kQK];  // [32] quants, in element order
};
static_assert(sizeof(BlockQ8_0) == 34);

// Q8_1: x[j] = d * qs[j]; s = d * sum(qs) (only used as an activation format by ggml).
struct BlockQ8_1 {
    uint16_t d;      // fp16 scale
    uint16_t s;      // fp16 d * sum(qs)
    int8_t qs[kQK];  // [32] quants
};
static_assert(sizeof(BlockQ8_1) == 36);

// Q4_0: x = d * (q - 8), q in [0, 15].
struct BlockQ4_0 {
    uint16_t d;           // fp16 scale
    uint8_t qs[kQK / 2];  // [16] nibbles: low = element j, high = element j+16
};
static_assert(sizeof(BlockQ4_0) == 18);

// Q4_1: x = d * q + m, q in [0, 15].
struct BlockQ4_1 {
    uint16_t d;           // fp16 scale
    uint16_t m;           // fp16 offset (the block minimum)
    uint8_t qs[kQK / 2];  // [16] nibbles, as Q4_0
};
static_assert(sizeof(BlockQ4_1) == 20);

// Q5_0: x = d * (q - 16), q = nibble | (bit j of qh) << 4, q in [0, 31].
struct BlockQ5_0 {
    uint16_t d;           // fp16 scale
    uint8_t qh[4];        // 32 high bits as a little-endian uint32: bit j belongs to element j
    uint8_t qs[kQK / 2];  // [16] low nibbles, as Q4_0
};
static_assert(sizeof(BlockQ5_0) == 22);

// Q5_1: x = d * q + m, q as Q5_0.
struct BlockQ5_1 {
    uint16_t d;           // fp16 scale
    uint16_t m;           // fp16 offset
    uint8_t qh[4];        // high bits, as Q5_0
    uint8_t qs[kQK / 2];  // [16] low nibbles, as Q4_0
};
static_assert(sizeof(BlockQ5_1) == 24);

// IQ4_NL: x = d * kIQ4NLValues[q], q a nibble laid out as Q4_0.
struct BlockIQ4_NL {
    uint16_t d;           // fp16 scale
    uint8_t qs[kQK / 2];  // [16] nibbles, as Q4_0
};
static_assert(sizeof(BlockIQ4_NL) == 18);

// The non-linear IQ4_NL codebook (fixed by the format).
inline constexpr int8_t kIQ4NLValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

// MXFP4 (OCP microscaling FP4): x = 2^(e - 128) * kMXFP4Values[q], q a nibble laid out as Q4_0.
// The codebook holds the e2m1 values doubled (so they are integers), hence the exponent bias of
// 128 where the format's e8m0 scale is 2^(e - 127). Every e, 255 included, is a power of two here
// (the reference CPU engine reads it the same way).
struct BlockMXFP4 {
    uint8_t e;            // e8m0 shared exponent
    uint8_t qs[kQK / 2];  // [16] nibbles, as Q4_0
};
static_assert(sizeof(BlockMXFP4) == 17);

// The e2m1 code points 0, 0.5, 1, 1.5, 2, 3, 4, 6 (and their negatives, bit 3 = sign), doubled.
inline constexpr int8_t kMXFP4Values[16] = {0, 1,  2,  3,  4,  6,  8,  12,
                                            0, -1, -2, -3, -4, -6, -8, -12};

// ---------------------------------------------------------------------------------------------
// K-quants: 256-element super-blocks. In all of them the scale of element e (for the types
// with 16-element sub-blocks) is scale index e / 16; the bit positions differ per type.

// Q2_K: x = d * (sc & 15) * q - dmin * (sc >> 4), q in [0, 3], sc = scales[e / 16].
// Element e = 128*n + 32*j + l (n in 0..1, j in 0..3, l in 0..31) is bits 2j..2j+1 of
// qs[32*n + l].
struct BlockQ2_K {
    uint8_t scales[kQK_K / 16];  // [16] low nibble: scale, high nibble: min
    uint8_t qs[kQK_K / 4];       // [64] 2-bit quants
    uint16_t d;                  // fp16 super-block scale of the scales
    uint16_t dmin;               // fp16 super-block scale of the mins
};
static_assert(sizeof(BlockQ2_K) == 84);

// Q3_K: x = d * (s - 32) * (q - (hbit ? 0 : 4)), q in [0, 3], s a 6-bit scale for e / 16.
// Element e = 128*n + 32*j + l: q = bits 2j..2j+1 of qs[32*n + l]; hbit = bit (4n + j) of
// hmask[l]. Scale i: low 4 bits = i < 8 ? scales[i] & 15 : scales[i-8] >> 4; high 2 bits =
// (scales[8 + i%4] >> (2 * (i/4))) & 3.
struct BlockQ3_K {
    uint8_t hmask[kQK_K / 8];  // [32] high bits
    uint8_t qs[kQK_K / 4];     // [64] low 2 bits
    uint8_t scales[12];        // 16 packed 6-bit scales
    uint16_t d;                // fp16 super-block scale
};
static_assert(sizeof(BlockQ3_K) == 110);

// Q4_K: x = d * sc * q - dmin * m, q in [0, 15], (sc, m) 6-bit for sub-block e / 32.
// Element e = 64*j + 32*h + l (j in 0..3, h in 0..1): q = nibble h of qs[32*j + l].
// Sub-block i: i < 4: sc = scales[i] & 63, m = scales[i+4] & 63; i >= 4:
// sc = (scales[i+4] & 15) | (scales[i-4] >> 6) << 4, m = (scales[i+4] >> 4) | (scales[i] >> 6)
// << 4.
struct BlockQ4_K {
    uint16_t d;             // fp16 super-block scale of the scales
    uint16_t dmin;          // fp16 super-block scale of the mins
    uint8_t scales[12];     // 8 scales and 8 mins, 6 bits each, packed
    uint8_t qs[kQK_K / 2];  // [128] nibbles
};
static_assert(sizeof(BlockQ4_K) == 144);

// Q5_K: as Q4_K with a fifth bit: q = nibble | (bit (e / 32) of qh[e % 32]) << 4, q in [0, 31].
struct BlockQ5_K {
    uint16_t d;             // fp16 super-block scale of the scales
    uint16_t dmin;          // fp16 super-block scale of the mins
    uint8_t scales[12];     // packed as Q4_K
    uint8_t qh[kQK_K / 8];  // [32] high bits
    uint8_t qs[kQK_K / 2];  // [128] low nibbles, laid out as Q4_K
};
static_assert(sizeof(BlockQ5_K) == 176);

// Q6_K: x = d * scales[e / 16] * (q - 32), q in [0, 63].
// Element e = 128*n + 32*k + l (k in 0..3): low 4 bits = nibble (k / 2) of ql[64*n + 32*(k%2)
// + l]; high 2 bits = bits 2k..2k+1 of qh[32*n + l].
struct BlockQ6_K {
    uint8_t ql[kQK_K / 2];      // [128] low 4 bits
    uint8_t qh[kQK_K / 4];      // [64] high 2 bits
    int8_t scales[kQK_K / 16];  // [16] signed 8-bit scales
    uint16_t d;                 // fp16 super-block scale
};
static_assert(sizeof(BlockQ6_K) == 210);

// ---------------------------------------------------------------------------------------------
// IQ quants with 256-element super-blocks of eight 32-element sub-blocks (sub-block i = elements
// 32i .. 32i+31).

// IQ4_XS: x = d * (ls - 32) * kIQ4NLValues[q], ls the 6-bit scale of sub-block i: low 4 bits =
// nibble (i % 2) of scales_l[i / 2], high 2 bits = bits 2i..2i+1 of scales_h. Sub-block i's
// nibbles are qs[16i .. 16i+15], laid out as Q4_0 (low nibble = element j, high = element j+16).
struct BlockIQ4_XS {
    uint16_t d;             // fp16 super-block scale
    uint16_t scales_h;      // high 2 bits of the 8 sub-block scales
    uint8_t scales_l[4];    // low 4 bits of the 8 sub-block scales
    uint8_t qs[kQK_K / 2];  // [128] nibbles
};
static_assert(sizeof(BlockIQ4_XS) == 136);

// IQ3_S: x = d * (1 + 2 * s) * g * (sign ? -1 : 1). Sub-block i has the 4-bit s = nibble (i % 2)
// of scales[i / 2]; its elements 4k .. 4k+3 (k in 0..7) take the magnitudes g of grid entry
// kIQ3SGrid[qs[8i + k] | (bit k of qh[i]) << 8] (iq_grids.h), and element e of the sub-block is
// negative when bit e of the little-endian 32-bit word signs[4i .. 4i+3] is set.
struct BlockIQ3_S {
    uint16_t d;                  // fp16 super-block scale
    uint8_t qs[kQK_K / 4];       // [64] low 8 bits of the grid indices
    uint8_t qh[kQK_K / 32];      // [8] bit 8 of the grid indices, one byte per sub-block
    uint8_t signs[kQK_K / 8];    // [32] one sign bit per element
    uint8_t scales[kQK_K / 64];  // [4] 4-bit sub-block scales
};
static_assert(sizeof(BlockIQ3_S) == 110);

// Q8_K: x = d * qs[e]; bsums[i] = sum of qs[16i .. 16i+15]. (ggml's K-quant activation format;
// listed for completeness, not used by this engine.)
struct BlockQ8_K {
    float d;                    // f32 scale
    int8_t qs[kQK_K];           // [256] quants
    int16_t bsums[kQK_K / 16];  // [16] sums of groups of 16
};
static_assert(sizeof(BlockQ8_K) == 292);

// ---------------------------------------------------------------------------------------------
// Engine-internal activation format (never stored in files).

// Q8_32: activations quantized per 32 elements: x[j] ~= d * qs[j]. s[h] = sum of
// qs[16h .. 16h+15] lets types with mins/offsets (Q4_1, Q5_1, Q2_K, Q4_K, Q5_K) apply them once
// per group instead of per element; 16-element halves cover Q2_K's 16-element sub-blocks.
// Blocks of 32 (not 256) keep the activation rounding error small: one outlier only coarsens
// its own 32 neighbours. d is f32 for the same reason.
struct BlockQ8_32 {
    float d;         // f32 scale
    int16_t s[2];    // sums of qs over each 16-element half
    int8_t qs[kQK];  // [32] quants, in element order
};
static_assert(sizeof(BlockQ8_32) == 40);

// Q16_32: activations quantized per 32 elements to 16 bits, x[j] ~= d * (256 * hi[j] + lo[j]).
// MXFP4 always takes them (its weights are accurate enough that 8-bit activations would
// dominate its error: 0.078 max logit error with Q8_32 on the qfix fixture, 0.023 with these),
// and every quantized type takes them under Activations::Wide: trained models whose residual
// stream carries outliers (Gemma, SmolLM2) lose ~1-2 logits to 8-bit blocks and ~1e-2 to these.
// Split into two signed bytes so the kernels keep vpdpbusd (one pass per byte plane) instead of
// widening the weights to int16. The integer q = 256 * hi + lo stays within +-32639 = 127 * 257
// so that hi fits a signed byte with lo in [-128, 127]. sx[h] = sum of q over the 16-element
// half h (offset and min terms; int32, as 16 * 32639 does not fit int16).
struct BlockQ16_32 {
    float d;         // f32 scale
    int32_t sx[2];   // sums of q = 256 * hi + lo over each 16-element half
    int8_t lo[kQK];  // [32] low bytes, in element order
    int8_t hi[kQK];  // [32] high bytes, in element order
};
static_assert(sizeof(BlockQ16_32) == 76);
inline constexpr int kQ16Max = 127 * 257;  // largest |256 * hi + lo|

}  // namespace ember
