// Device-side readers of the GGUF weight formats, for the kernels of quant_kernels.cu.
//
// Every format is read in "units": the piece of a row one lane handles at a time. A unit of a
// quantized type is 32 elements in two runs of 16 contiguous elements (each run has one scale
// and one offset); a unit of a float type is 8 contiguous elements. Each unit is read in
// four steps, so that the loads of several units and rows can be in flight together:
//   Raw  = load(block, k)       the unit's bytes, straight from global memory (no use yet)
//   Unit = unpack(raw, k)       quants as bytes, per-run scale and offset (integer work)
//   chunk<C>(unit, w)           8 dequantized f32 weights, elements chunk_pos(k, C) + 0..7
// where k is the unit's index inside its block. The values are those of the CPU's
// dequantize_row bit for bit: every K-quant product d * sc and ds * q is exact in f32, so
// fma(ds, q, -dm) rounds once, like ds * q - dm.
//
// The bytes are those of blocks.h's structs, the host's statement of the layouts: each reader
// takes its offsets and sizes from them, and static_asserts pin what its loads assume besides
// (which fields share a 16-byte load, the alignment a load needs), so the two cannot drift.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "engine/tensor/blocks.h"
#include "engine/tensor/types.h"

namespace ember::cuda::blocks {

// ---------------------------------------------------------------------------------------------
// Loads.

// 16 bytes from a 16-byte aligned address, through the read-only path.
__device__ __forceinline__ uint4 load16(const uint8_t* p) {
    return __ldg(reinterpret_cast<const uint4*>(p));
}

__device__ __forceinline__ uint32_t load_u16(const uint8_t* p) {
    return __ldg(reinterpret_cast<const unsigned short*>(p));
}

// What the loads need of a field at `offset` of a block B, in every block of a row whose start
// check_matrix() has found aligned: 2 bytes for load_u16, 16 for load16. (Windows read any
// address.)
template <class B>
constexpr bool u16_loadable(size_t offset) {
    return offset % 2 == 0 && sizeof(B) % 2 == 0;
}
template <class B>
constexpr bool u128_loadable(size_t offset) {
    return offset % 16 == 0 && sizeof(B) % 16 == 0;
}

// The aligned 16-byte words covering bytes [p, p + 16 * N) of any address: N + 1 words, the
// last one a repeat of word N - 1 when p is aligned (so no word past the data is read).
template <int N>
struct Window {
    uint32_t w[4 * (N + 1)];
    uint32_t shift;  // p % 16
};

// A 16-byte word as words 4i .. 4i + 3 of w.
__device__ __forceinline__ void put_word(uint32_t* w, int i, const uint4& v) {
    w[4 * i + 0] = v.x;
    w[4 * i + 1] = v.y;
    w[4 * i + 2] = v.z;
    w[4 * i + 3] = v.w;
}

template <int N>
__device__ __forceinline__ Window<N> load_window(const uint8_t* p) {
    Window<N> win;
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    const auto* base = reinterpret_cast<const uint4*>(a & ~uintptr_t{15});
    win.shift = static_cast<uint32_t>(a & 15);
#pragma unroll
    for (int i = 0; i <= N; ++i) {
        const int word = (i == N && win.shift == 0) ? N - 1 : i;
        put_word(win.w, i, __ldg(base + word));
    }
    return win;
}

// The 4N words starting at byte `shift` of the window: the word shift (shift / 4) by two
// levels of selects (constant register indices only), the byte shift by funnel shifts.
template <int N>
__device__ __forceinline__ void extract(const Window<N>& win, uint32_t* out) {
    constexpr int kWords = 4 * (N + 1);
    const uint32_t words = win.shift >> 2;
    const uint32_t bits = 8 * (win.shift & 3);
    uint32_t by2[kWords - 2];
#pragma unroll
    for (int i = 0; i < kWords - 2; ++i) by2[i] = (words & 2) ? win.w[i + 2] : win.w[i];
    uint32_t by1[kWords - 3];
#pragma unroll
    for (int i = 0; i < kWords - 3; ++i) by1[i] = (words & 1) ? by2[i + 1] : by2[i];
#pragma unroll
    for (int i = 0; i < 4 * N; ++i) out[i] = __funnelshift_r(by1[i], by1[i + 1], bits);
}

// A whole block of kBytes (scale and quants) in the aligned 16-byte words that hold it, for the
// formats whose blocks are not 16-byte aligned (Q8_0, Q4_0, MXFP4): kWords words cover it at
// every start the format allows (kAlign: 2 for fp16-scaled blocks, 1 for MXFP4), and at each of
// those starts every word holds some of its bytes, so none is read past the block. One load
// per word for the scale and the quants together, where the scale took a load of its own: a
// warp whose lanes read blocks 34 bytes apart touches a sector per lane with each load, and the
// Q8_0 output layer of gpt-oss-20b is bound by the L1's traffic (99% of its peak, DRAM at 27%:
// Nsight Compute on an H200). A load fewer took that layer from 362 to 353 us and the model's
// decode from 324 to 328 tok/s, its prefill from 9,450 to 9,800 (same call, alternating).
template <int kBytes, int kAlign>
constexpr int span_words() {
    return (16 - kAlign + kBytes - 1) / 16 + 1;
}

template <int kWords>
struct Span {
    uint32_t w[4 * kWords];
    uint32_t shift;  // the block's first byte: p % 16
};

template <int kBytes, int kAlign>
__device__ __forceinline__ Span<span_words<kBytes, kAlign>()> load_span(const uint8_t* p) {
    constexpr int kWords = span_words<kBytes, kAlign>();
    static_assert((kBytes - 1) / 16 + 1 == kWords,
                  "a block at an aligned start must need every word, or one is read past it");
    Span<kWords> span;
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    const auto* base = reinterpret_cast<const uint4*>(a & ~uintptr_t{15});
    span.shift = static_cast<uint32_t>(a & 15);
#pragma unroll
    for (int i = 0; i < kWords; ++i) {
        put_word(span.w, i, __ldg(base + i));
    }
    return span;
}

// held[i] = held[i + kStep] where `words` has the bit kStep (a constant step, so that every
// index is one and the array stays in registers).
template <int kStep, int kHeld>
__device__ __forceinline__ void shift_words_by(uint32_t (&held)[kHeld], uint32_t words) {
#pragma unroll
    for (int i = 0; i + kStep < kHeld; ++i) held[i] = (words & kStep) ? held[i + kStep] : held[i];
}

// kOut words from byte `offset` of `in` (offset / 4 at most kMaxWordShift): the word shift by
// selects (constant register indices only), the byte shift by funnel shifts. A word past `in`
// is only ever the high half of a funnel shift by 0 bits, which ignores it.
template <int kMaxWordShift, int kIn, int kOut>
__device__ __forceinline__ void bytes_at(const uint32_t (&in)[kIn], uint32_t offset,
                                         uint32_t (&out)[kOut]) {
    constexpr int kHeld = kMaxWordShift + kOut + 1;
    const uint32_t words = offset >> 2;
    const uint32_t bits = 8 * (offset & 3);
    uint32_t held[kHeld];
#pragma unroll
    for (int i = 0; i < kHeld; ++i) held[i] = in[i < kIn ? i : kIn - 1];
    if constexpr (kMaxWordShift >= 4) shift_words_by<4>(held, words);
    if constexpr (kMaxWordShift >= 2) shift_words_by<2>(held, words);
    shift_words_by<1>(held, words);
#pragma unroll
    for (int i = 0; i < kOut; ++i) out[i] = __funnelshift_r(held[i], held[i + 1], bits);
}

// The u16 at byte `offset` (even) of a span.
template <int kIn>
__device__ __forceinline__ uint32_t u16_at(const uint32_t (&in)[kIn], uint32_t offset) {
    uint32_t word[1];
    bytes_at<3>(in, offset, word);
    return word[0] & 0xffffu;
}

// ---------------------------------------------------------------------------------------------
// Conversions.

// fp16 bits -> f32 exactly as blocks.h's fp16_to_fp32, NaN payloads included (the hardware
// conversion is exact for every other input).
__device__ __forceinline__ float fp16_bits_to_float(uint32_t h) {
    const float f = __half2float(__ushort_as_half(static_cast<unsigned short>(h)));
    if ((h & 0x7fffu) > 0x7c00u) {
        return __uint_as_float(((h & 0x8000u) << 16) | 0x7f800000u | ((h & 0x3ffu) << 13));
    }
    return f;
}

// Byte J of `word` (0..255) as the f32 value byte - kBias, exactly: the byte becomes the low
// mantissa bits of 2^23 (one byte permute) and one subtraction removes 2^23 + kBias. Cheaper
// than an integer-to-float conversion, which runs at a quarter of the FMA rate.
template <int J, int kBias>
__device__ __forceinline__ float byte_value(uint32_t word) {
    const uint32_t magic = __byte_perm(word, 0x4b000000u, 0x7440u + J);
    return __uint_as_float(magic) - (8388608.0f + static_cast<float>(kBias));
}

// ---------------------------------------------------------------------------------------------
// Quantized units: 32 quants as bytes (run 0 in q[0..3], run 1 in q[4..7]) and each run's
// scale and offset: w = fma(scale, q - kBias, -offset).

struct QuantUnit {
    uint32_t q[8];
    float scale[2];
    float offset[2];
};

// Chunk C (0..3) = run C / 2, elements 8 * (C % 2) .. + 7 of the run.
template <int C, int kBias>
__device__ __forceinline__ void quant_chunk(const QuantUnit& u, float* w) {
    constexpr int kRun = C / 2;
    const float scale = u.scale[kRun];
    const float neg_offset = -u.offset[kRun];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const uint32_t word = u.q[4 * kRun + 2 * (C % 2) + half];
        w[4 * half + 0] = __fmaf_rn(scale, byte_value<0, kBias>(word), neg_offset);
        w[4 * half + 1] = __fmaf_rn(scale, byte_value<1, kBias>(word), neg_offset);
        w[4 * half + 2] = __fmaf_rn(scale, byte_value<2, kBias>(word), neg_offset);
        w[4 * half + 3] = __fmaf_rn(scale, byte_value<3, kBias>(word), neg_offset);
    }
}

// What the quantized formats below share: their blocks.h struct B of kElems elements in kUnits
// units, each unit a QuantUnit of four chunks that quant_chunk dequantizes with the format's
// bias. A format adds its Raw, load, unpack and chunk_pos.
template <class B, int kElems, int kUnits, int kQuantBias>
struct QuantFormat {
    using Block = B;
    using Unit = QuantUnit;
    static constexpr int kBlockBytes = sizeof(B), kBlockElems = kElems;
    static constexpr int kUnitsPerBlock = kUnits, kChunks = 4;
    static constexpr int kBias = kQuantBias;
    template <int C>
    static __device__ __forceinline__ void chunk(const Unit& u, float* w) {
        quant_chunk<C, kBias>(u, w);
    }
};

// Q8_0 (34 bytes, 2-byte aligned): one unit per block, runs = elements 0..15 and 16..31; the
// int8 quants are read as byte ^ 0x80 (0..255), hence the bias of 128.
struct FmtQ8_0 : QuantFormat<BlockQ8_0, kQK, 1, 128> {
    struct Raw {
        Span<span_words<sizeof(Block), 2>()> block;
    };
    static __device__ __forceinline__ Raw load(const uint8_t* block, int) {
        return {load_span<sizeof(Block), 2>(block)};
    }
    static __device__ __forceinline__ Unit unpack(const Raw& raw, int) {
        Unit u;
        bytes_at<4>(raw.block.w, raw.block.shift + offsetof(Block, qs), u.q);
#pragma unroll
        for (int i = 0; i < 8; ++i) u.q[i] ^= 0x80808080u;  // signed -> biased unsigned
        u.scale[0] = u.scale[1] =
            fp16_bits_to_float(u16_at(raw.block.w, raw.block.shift + offsetof(Block, d)));
        u.offset[0] = u.offset[1] = 0.0f;
        return u;
    }
    static __device__ __forceinline__ int chunk_pos(int, int c) {
        return 8 * c;
    }
};
static_assert(
    sizeof(BlockQ8_0::qs) == 32 && offsetof(BlockQ8_0, d) == 0 && offsetof(BlockQ8_0, qs) == 2 &&
        sizeof(BlockQ8_0) % 2 == 0,
    "Q8_0: an fp16 scale, then the 32 quants (in a span's words 0..11 at any even start)");

// Q4_0 (18 bytes, 2-byte aligned): one unit per block; run 0 = low nibbles = elements 0..15,
// run 1 = high nibbles = elements 16..31.
struct FmtQ4_0 : QuantFormat<BlockQ4_0, kQK, 1, 8> {
    struct Raw {
        Span<span_words<sizeof(Block), 2>()> block;
    };
    static __device__ __forceinline__ Raw load(const uint8_t* block, int) {
        return {load_span<sizeof(Block), 2>(block)};
    }
    static __device__ __forceinline__ Unit unpack(const Raw& raw, int) {
        Unit u;
        uint32_t qs[4];
        bytes_at<4>(raw.block.w, raw.block.shift + offsetof(Block, qs), qs);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            u.q[i] = qs[i] & 0x0f0f0f0fu;
            u.q[4 + i] = (qs[i] >> 4) & 0x0f0f0f0fu;
        }
        u.scale[0] = u.scale[1] =
            fp16_bits_to_float(u16_at(raw.block.w, raw.block.shift + offsetof(Block, d)));
        u.offset[0] = u.offset[1] = 0.0f;
        return u;
    }
    static __device__ __forceinline__ int chunk_pos(int, int c) {
        return 8 * c;
    }
};
static_assert(
    sizeof(BlockQ4_0::qs) == 16 && offsetof(BlockQ4_0, d) == 0 && offsetof(BlockQ4_0, qs) == 2 &&
        sizeof(BlockQ4_0) % 2 == 0,
    "Q4_0: an fp16 scale, then the 16 nibble bytes (a span's words 0..7 at any even start)");

// MXFP4 (17 bytes, any alignment): one unit per block, laid out as Q4_0 after the exponent
// byte: run 0 = low nibbles = elements 0..15, run 1 = high nibbles = elements 16..31. A nibble
// is a code of kMXFP4Values (the e2m1 values doubled, so integers in [-12, 12]) and the scale
// is 2^(e - 128). The unpacked bytes hold code + 12 (0..24), hence the bias of 12: scale * (byte
// - 12) is the CPU's value exactly (a small integer times a power of two).
struct FmtMXFP4 : QuantFormat<BlockMXFP4, kQK, 1, 12> {
    struct Raw {
        Span<span_words<sizeof(Block), 1>()> block;
    };
    static __device__ __forceinline__ Raw load(const uint8_t* block, int) {
        return {load_span<sizeof(Block), 1>(block)};
    }
    // Four nibbles (one per byte, 0..15) to their codes + 12: the magnitude of the low three
    // bits looked up with one byte permute (the eight magnitudes fit two words), the sign bit
    // choosing 12 + magnitude or 12 - magnitude per byte (neither carries out of its byte).
    static __device__ __forceinline__ uint32_t codes(uint32_t nibbles) {
        constexpr uint32_t kMagLo = 0x03020100u;  // magnitudes of codes 0..3: 0, 1, 2, 3
        constexpr uint32_t kMagHi = 0x0c080604u;  // codes 4..7: 4, 6, 8, 12
        static_assert(kMXFP4Values[1] == 1 && kMXFP4Values[4] == 4 && kMXFP4Values[5] == 6 &&
                          kMXFP4Values[6] == 8 && kMXFP4Values[7] == 12 && kMXFP4Values[15] == -12,
                      "MXFP4: the codebook the byte tables hold");
        const uint32_t m = nibbles & 0x07070707u;
        const uint32_t select =
            (m & 0xffu) | ((m >> 4) & 0xf0u) | ((m >> 8) & 0xf00u) | ((m >> 12) & 0xf000u);
        const uint32_t magnitude = __byte_perm(kMagLo, kMagHi, select);
        const uint32_t negative = ((nibbles >> 3) & 0x01010101u) * 0xffu;
        return ((0x0c0c0c0cu + magnitude) & ~negative) | ((0x0c0c0c0cu - magnitude) & negative);
    }
    // 2^(e - 128): a normal float from e = 2 (exponent field e - 1), subnormal below.
    static __device__ __forceinline__ float scale(uint32_t e) {
        return e >= 2 ? __uint_as_float((e - 1) << 23) : __uint_as_float(0x00200000u << e);
    }
    static __device__ __forceinline__ Unit unpack(const Raw& raw, int) {
        Unit u;
        uint32_t qs[4];
        bytes_at<4>(raw.block.w, raw.block.shift + offsetof(Block, qs), qs);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            u.q[i] = codes(qs[i] & 0x0f0f0f0fu);
            u.q[4 + i] = codes((qs[i] >> 4) & 0x0f0f0f0fu);
        }
        uint32_t e[1];
        bytes_at<3>(raw.block.w, raw.block.shift + offsetof(Block, e), e);
        u.scale[0] = u.scale[1] = scale(e[0] & 0xffu);
        u.offset[0] = u.offset[1] = 0.0f;
        return u;
    }
    static __device__ __forceinline__ int chunk_pos(int, int c) {
        return 8 * c;
    }
};
static_assert(sizeof(BlockMXFP4::qs) == 16 && offsetof(BlockMXFP4, e) == 0 &&
                  offsetof(BlockMXFP4, qs) == 1,
              "MXFP4: the exponent byte, then the nibbles (a span's words 0..7 at any start)");

// The 16 bytes of a Q4_K/Q5_K block read as one `head` (below): d in the low half of word 0,
// dmin in its high half, the 12 scale bytes in words 1..3.
template <class B>
constexpr bool k_head_layout() {
    return offsetof(B, d) == 0 && offsetof(B, dmin) == 2 && offsetof(B, scales) == 4 &&
           sizeof(B::scales) == 12 && u128_loadable<B>(0);
}

// Byte i (0..11) of the 12 scale bytes of Q4_K/Q5_K, held in words 1..3 of the header.
__device__ __forceinline__ uint32_t scale_byte(const uint4& head, int i) {
    const uint32_t word = i < 4 ? head.y : (i < 8 ? head.z : head.w);
    return (word >> (8 * (i & 3))) & 0xffu;
}

// Q4_K/Q5_K sub-block i's (scale, min) as f32 products with the super-block scales: exact.
__device__ __forceinline__ void k_scale_min(const uint4& head, int i, float* scale, float* offset) {
    uint32_t sc, mn;
    if (i < 4) {
        sc = scale_byte(head, i) & 63u;
        mn = scale_byte(head, i + 4) & 63u;
    } else {
        sc = (scale_byte(head, i + 4) & 0x0fu) | (scale_byte(head, i - 4) >> 6) << 4;
        mn = (scale_byte(head, i + 4) >> 4) | (scale_byte(head, i) >> 6) << 4;
    }
    const float d = fp16_bits_to_float(head.x & 0xffffu);
    const float dmin = fp16_bits_to_float(head.x >> 16);
    *scale = __fmul_rn(d, static_cast<float>(sc));
    *offset = __fmul_rn(dmin, static_cast<float>(mn));
}

// Q4_K (144 bytes, always 16-byte aligned given an aligned row start): unit k (0..7) is
// qs[16k .. 16k+15]; with j = k / 2, h = k % 2: run 0 = low nibbles = elements 64j + 16h + l
// (sub-block 2j), run 1 = high nibbles = elements 64j + 32 + 16h + l (sub-block 2j + 1).
struct FmtQ4_K : QuantFormat<BlockQ4_K, kQK_K, 8, 0> {
    struct Raw {
        uint4 head;  // d, dmin, scales[12]
        uint4 qs;
    };
    static __device__ __forceinline__ Raw load(const uint8_t* block, int k) {
        return {load16(block), load16(block + offsetof(Block, qs) + 16 * k)};
    }
    static __device__ __forceinline__ Unit unpack(const Raw& raw, int k) {
        Unit u;
        const uint32_t qs[4] = {raw.qs.x, raw.qs.y, raw.qs.z, raw.qs.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            u.q[i] = qs[i] & 0x0f0f0f0fu;
            u.q[4 + i] = (qs[i] >> 4) & 0x0f0f0f0fu;
        }
        const int j = k >> 1;
        k_scale_min(raw.head, 2 * j, &u.scale[0], &u.offset[0]);
        k_scale_min(raw.head, 2 * j + 1, &u.scale[1], &u.offset[1]);
        return u;
    }
    static __device__ __forceinline__ int chunk_pos(int k, int c) {
        return 64 * (k >> 1) + 16 * (k & 1) + 32 * (c >> 1) + 8 * (c & 1);
    }
};
static_assert(k_head_layout<BlockQ4_K>());
static_assert(u128_loadable<BlockQ4_K>(offsetof(BlockQ4_K, qs)) &&
                  sizeof(BlockQ4_K::qs) == 16 * FmtQ4_K::kUnitsPerBlock,
              "Q4_K: unit k is the k-th 16 bytes of qs");

// Q5_K (176 bytes, 16-byte aligned): as Q4_K, qs at 48; the fifth bits of unit k are
// qh[16h .. 16h+15] (h = k % 2), bit 2j for run 0 and bit 2j + 1 for run 1.
struct FmtQ5_K : QuantFormat<BlockQ5_K, kQK_K, 8, 0> {
    struct Raw {
        uint4 head;
        uint4 qh;
        uint4 qs;
    };
    static __device__ __forceinline__ Raw load(const uint8_t* block, int k) {
        return {load16(block), load16(block + offsetof(Block, qh) + 16 * (k & 1)),
                load16(block + offsetof(Block, qs) + 16 * k)};
    }
    static __device__ __forceinline__ Unit unpack(const Raw& raw, int k) {
        Unit u;
        const uint32_t qs[4] = {raw.qs.x, raw.qs.y, raw.qs.z, raw.qs.w};
        const uint32_t qh[4] = {raw.qh.x, raw.qh.y, raw.qh.z, raw.qh.w};
        const int j = k >> 1;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            u.q[i] = (qs[i] & 0x0f0f0f0fu) | ((qh[i] >> (2 * j)) & 0x01010101u) << 4;
            u.q[4 + i] = ((qs[i] >> 4) & 0x0f0f0f0fu) | ((qh[i] >> (2 * j + 1)) & 0x01010101u) << 4;
        }
        k_scale_min(raw.head, 2 * j, &u.scale[0], &u.offset[0]);
        k_scale_min(raw.head, 2 * j + 1, &u.scale[1], &u.offset[1]);
        return u;
    }
    static __device__ __forceinline__ int chunk_pos(int k, int c) {
        return FmtQ4_K::chunk_pos(k, c);
    }
};
static_assert(k_head_layout<BlockQ5_K>());
static_assert(u128_loadable<BlockQ5_K>(offsetof(BlockQ5_K, qh)) && sizeof(BlockQ5_K::qh) == 2 * 16,
              "Q5_K: the fifth bits are two 16-byte halves");
static_assert(u128_loadable<BlockQ5_K>(offsetof(BlockQ5_K, qs)) &&
                  sizeof(BlockQ5_K::qs) == 16 * FmtQ5_K::kUnitsPerBlock,
              "Q5_K: unit k is the k-th 16 bytes of qs");

// Q6_K (210 bytes, 2-byte aligned): unit k (0..7) is ql[16k .. 16k+15]; with n = k / 4,
// p = (k / 2) % 2, l0 = 16 (k % 2): run 0 = low nibbles = elements 128n + 32p + l0 + l,
// run 1 = high nibbles = elements 128n + 32(p + 2) + l0 + l; their high bits are bits 2p and
// 2(p + 2) of qh[32n + l0 + l]; their scales are scales[8n + 2p + k % 2] and the one 4 later.
struct FmtQ6_K : QuantFormat<BlockQ6_K, kQK_K, 8, 32> {
    struct Raw {
        Window<1> ql;
        Window<1> qh;
        int32_t scale0, scale1;
        uint32_t d;
    };
    static __device__ __forceinline__ int group0(int k) {
        return 8 * (k >> 2) + 2 * ((k >> 1) & 1) + (k & 1);
    }
    static __device__ __forceinline__ Raw load(const uint8_t* block, int k) {
        const auto* scales = reinterpret_cast<const int8_t*>(block + offsetof(Block, scales));
        return {load_window<1>(block + offsetof(Block, ql) + 16 * k),
                load_window<1>(block + offsetof(Block, qh) + 32 * (k >> 2) + 16 * (k & 1)),
                __ldg(scales + group0(k)), __ldg(scales + group0(k) + 4),
                load_u16(block + offsetof(Block, d))};
    }
    static __device__ __forceinline__ Unit unpack(const Raw& raw, int k) {
        Unit u;
        uint32_t ql[4], qh[4];
        extract<1>(raw.ql, ql);
        extract<1>(raw.qh, qh);
        const int p = (k >> 1) & 1;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            u.q[i] = (ql[i] & 0x0f0f0f0fu) | ((qh[i] >> (2 * p)) & 0x03030303u) << 4;
            u.q[4 + i] = ((ql[i] >> 4) & 0x0f0f0f0fu) | ((qh[i] >> (2 * p + 4)) & 0x03030303u) << 4;
        }
        const float d = fp16_bits_to_float(raw.d);
        u.scale[0] = __fmul_rn(d, static_cast<float>(raw.scale0));
        u.scale[1] = __fmul_rn(d, static_cast<float>(raw.scale1));
        u.offset[0] = u.offset[1] = 0.0f;
        return u;
    }
    static __device__ __forceinline__ int chunk_pos(int k, int c) {
        return 128 * (k >> 2) + 32 * ((k >> 1) & 1) + 16 * (k & 1) + 64 * (c >> 1) + 8 * (c & 1);
    }
};
static_assert(sizeof(BlockQ6_K::ql) == 16 * FmtQ6_K::kUnitsPerBlock,
              "Q6_K: unit k's low bits are the k-th 16 bytes of ql");
static_assert(sizeof(BlockQ6_K::qh) == 64 && sizeof(BlockQ6_K::scales) == 16,
              "Q6_K: qh and scales as load() indexes them");
static_assert(u16_loadable<BlockQ6_K>(offsetof(BlockQ6_K, d)));

// ---------------------------------------------------------------------------------------------
// Float types: "blocks" of 8 elements, one unit each, read with aligned 16-byte loads.

struct FloatUnit {
    float w[8];
};

struct FmtF32 {
    static constexpr int kBlockBytes = 32, kBlockElems = 8, kUnitsPerBlock = 1, kChunks = 1;
    struct Raw {
        uint4 lo, hi;
    };
    using Unit = FloatUnit;
    static __device__ __forceinline__ Raw load(const uint8_t* block, int) {
        return {load16(block), load16(block + 16)};
    }
    static __device__ __forceinline__ Unit unpack(const Raw& raw, int) {
        return {{__uint_as_float(raw.lo.x), __uint_as_float(raw.lo.y), __uint_as_float(raw.lo.z),
                 __uint_as_float(raw.lo.w), __uint_as_float(raw.hi.x), __uint_as_float(raw.hi.y),
                 __uint_as_float(raw.hi.z), __uint_as_float(raw.hi.w)}};
    }
    static __device__ __forceinline__ int chunk_pos(int, int) { return 0; }
    template <int C>
    static __device__ __forceinline__ void chunk(const Unit& u, float* w) {
#pragma unroll
        for (int i = 0; i < 8; ++i) w[i] = u.w[i];
    }
};

// F16 and BF16: 8 half-precision values in one 16-byte load.
template <bool kBf16>
struct FmtHalf {
    static constexpr int kBlockBytes = 16, kBlockElems = 8, kUnitsPerBlock = 1, kChunks = 1;
    using Raw = uint4;
    using Unit = uint4;  // converted per chunk: the conversion is cheap, the registers are not
    static __device__ __forceinline__ Raw load(const uint8_t* block, int) { return load16(block); }
    static __device__ __forceinline__ Unit unpack(const Raw& raw, int) { return raw; }
    static __device__ __forceinline__ int chunk_pos(int, int) { return 0; }
    static __device__ __forceinline__ float widen(uint32_t bits) {
        return kBf16 ? __uint_as_float(bits << 16) : fp16_bits_to_float(bits);
    }
    template <int C>
    static __device__ __forceinline__ void chunk(const Unit& u, float* w) {
        const uint32_t words[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            w[2 * i] = widen(words[i] & 0xffffu);
            w[2 * i + 1] = widen(words[i] >> 16);
        }
    }
};
using FmtF16 = FmtHalf<false>;
using FmtBF16 = FmtHalf<true>;

// Calls fn(Fmt{}) with the format struct of `type`, host side (the kernels' dispatch); false
// when the kernels read no such type.
template <class Fn>
bool with_format(TensorType type, Fn&& fn) {
    switch (type) {
        case TensorType::F32:
            fn(FmtF32{});
            return true;
        case TensorType::F16:
            fn(FmtF16{});
            return true;
        case TensorType::BF16:
            fn(FmtBF16{});
            return true;
        case TensorType::Q4_0:
            fn(FmtQ4_0{});
            return true;
        case TensorType::Q8_0:
            fn(FmtQ8_0{});
            return true;
        case TensorType::Q4_K:
            fn(FmtQ4_K{});
            return true;
        case TensorType::Q5_K:
            fn(FmtQ5_K{});
            return true;
        case TensorType::Q6_K:
            fn(FmtQ6_K{});
            return true;
        case TensorType::MXFP4:
            fn(FmtMXFP4{});
            return true;
        default:
            return false;
    }
}

}  // namespace ember::cuda::blocks
