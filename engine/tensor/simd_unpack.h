// Per-type block decoding for the x86 SIMD kernels: each format's bits become 32 unsigned bytes
// per 32-element group plus a few per-group numbers, so every later stage (dot, panel repack,
// dequantize) is written once for all types.
//
// Include only from an engine/tensor/*_avx2.cpp or *_avx512.cpp file, after defining
// EMBER_SIMD_NS: every function here is compiled once per instruction set, and the distinct
// namespace keeps the linker from merging an AVX-512 copy into the AVX2 build (or vice versa).
//
// The decoded form of every quantized type: in group s (32 consecutive elements) element j is
//   u[j] in [0, 255] (unsigned byte), q[j] = u[j] - kOff (the format's integer value),
// and the group's value is one of four families:
//   A: x = d * q                                 (Q8_0, Q4_0, Q5_0, IQ4_NL, MXFP4; IQ4_XS,
//                                                 IQ3_S with d = d * their group scale)
//   B: x = d * q + m                             (Q4_1, Q5_1, Q4_K, Q5_K: d = d*sc, m = -dmin*mn)
//   C: x = d * sc[h] * q,  h = j / 16            (Q3_K, Q6_K: 16-element groups, signed scales)
//   D: x = d * sc[h] * q - dmin * mn[h]          (Q2_K)
// The dot against a Q8_32 activation block (scale da, 8-bit qa, half sums s[0], s[1]) is then
// exact integer work per group plus one or two float multiply-adds, in this canonical order:
//   A: i = sum u*qa - kOff*(s0+s1);             acc = fma(float(i), d*da, acc)
//   B: i = sum u*qa;                            acc = fma(float(i), d*da, acc)
//                                               acc = fma(m, float(s0+s1)*da, acc)
//   C: i_h = sum_h u*qa - kOff*s_h; I = sc0*i_0 + sc1*i_1;   acc = fma(float(I), d*da, acc)
//   D: I as C (kOff = 0); M = mn0*s0 + mn1*s1;  acc = fma(float(I), d*da, acc)
//                                               acc = fma(float(M), -dmin*da, acc)
// Every integer above is exact in int32 and in float (|I| < 2^24), so any kernel that follows
// this order per (row, token) gives bitwise the same result, however it groups rows and tokens.
// A type with kWideAct (MXFP4, and every type wrapped as Wide<T> for Activations::Wide) takes
// Q16_32 activations instead: two byte planes lo, hi of q = 256 * hi + lo, with the sums sx_h
// of q over each half (see BlockQ16_32). Per group (or half h), with P = sum u*lo + 256 * sum u*hi:
//   A16: i = P - kOff*(sx0+sx1);                acc = fma(float(i), d*da, acc)
//   B16: i = P;                                 acc = fma(float(i), d*da, acc)
//                                               acc = fma(m, float(sx0+sx1)*da, acc)
//   C16: i_h = P_h - kOff*sx_h;  F = fma(float(i_1), float(sc1), float(i_0)*float(sc0));
//                                               acc = fma(F, d*da, acc)
//   D16: F as C16 (kOff = 0);  M = fma(float(mn1), float(sx1), float(mn0)*float(sx0));
//                                               acc = fma(F, d*da, acc)
//                                               acc = fma(M, -dmin*da, acc)
// The integers are exact in int32 (|i_h| <= 63 * 32639 * 16 + 32 * 16 * 32639 < 2^31); the scale
// products go through float because sc * i_h would not fit int32 for Q6_K. Every kernel follows
// this order per (row, token), so batches and single tokens agree bit for bit here too.
#pragma once

#ifndef EMBER_SIMD_NS
#error "simd_unpack.h belongs to the *_avx2.cpp / *_avx512.cpp kernels; define EMBER_SIMD_NS"
#endif

#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "engine/tensor/blocks.h"
#include "engine/tensor/iq_grids.h"

namespace ember::EMBER_SIMD_NS {

enum class Family : uint8_t { A, B, C, D };

template <class X>
constexpr X min_of(X a, X b) {
    return a < b ? a : b;
}

// Whether type T is dotted with Q16_32 activations (T::kWideAct) rather than Q8_32.
template <class T>
constexpr bool kWideAct = requires {
    requires T::kWideAct;
};
template <class T>
using ActBlock = std::conditional_t<kWideAct<T>, BlockQ16_32, BlockQ8_32>;

// Type T taking Q16_32 activations (Activations::Wide): the same weights, unpacking and repacks
// (T's members, inherited), with the kernels' A16 paths. kWrappedWide tells the kernels that T's
// own Q8_32-only fast paths (the AVX-512 gemv, say) do not apply.
template <class T>
struct Wide : T {
    static constexpr bool kWideAct = true;
    static constexpr bool kWrappedWide = true;
};
template <class T>
constexpr bool kWrappedWide = requires {
    requires T::kWrappedWide;
};

// Per 32-element group numbers (which ones are meaningful depends on the family).
struct GroupParams {
    float d = 0.0f;   // A, B: the group's scale; C, D: the super-block scale
    float m = 0.0f;   // B: additive offset; D: -dmin
    int32_t sc0 = 0;  // C, D: integer scale of elements 0..15
    int32_t sc1 = 0;  // C, D: integer scale of elements 16..31
    int32_t mn = 0;   // D: mins of the two halves as int16 pair (mn0 | mn1 << 16)
};

inline uint16_t load_u16(const void* p) {
    uint16_t v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

inline uint32_t load_u32(const void* p) {
    uint32_t v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

// fp16 field -> f32 (F16C; exact like blocks.h's fp16_to_fp32, which is not called here so that
// no inline function shared with the baseline build is compiled with these flags).
inline float half_at(const void* p) {
    return _cvtsh_ss(load_u16(p));
}

inline __m256i low_nibbles_mask() {
    return _mm256_set1_epi8(0x0f);
}

// 16 bytes of nibbles laid out as Q4_0 (byte j: element j low, element j+16 high) -> 32 bytes.
inline __m256i unpack_nibbles_32(const uint8_t* qs) {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
    const __m256i v = _mm256_set_m128i(_mm_srli_epi16(x, 4), x);
    return _mm256_and_si256(v, low_nibbles_mask());
}

// Bit j of the 32-bit word qh -> 0x10 in byte j, else 0.
inline __m256i expand_bits_x10(uint32_t qh) {
    const __m256i spread =
        _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int32_t>(qh)),
                            _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2,
                                             2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
    const __m256i bits = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bits), bits);
    return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

// Bit `bit` of each of 32 bytes -> `value` in that byte, else 0.
inline __m256i select_bit(__m256i bytes, int bit, int8_t value) {
    const __m256i m = _mm256_set1_epi8(static_cast<int8_t>(1u << bit));
    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(bytes, m), m);
    return _mm256_and_si256(set, _mm256_set1_epi8(value));
}

// Bits [2k, 2k+1] of each of 32 bytes, as 0..3.
inline __m256i two_bits(__m256i bytes, int k) {
    const __m256i shifted = _mm256_srl_epi16(bytes, _mm_cvtsi32_si128(2 * k));
    return _mm256_and_si256(shifted, _mm256_set1_epi8(3));
}

inline __m256i load32(const uint8_t* p) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// ---- 32-element formats -----------------------------------------------------------------------

struct TQ8_0 {
    using Block = BlockQ8_0;
    static constexpr Family kFamily = Family::A;
    static constexpr int kGroups = 1;  // 32-element groups per block
    static constexpr int kOff = 128;
    static constexpr bool kWide = true;  // u exceeds 127
    static __m256i unpack(const Block* b, int) {
        return _mm256_xor_si256(load32(reinterpret_cast<const uint8_t*>(b->qs)),
                                _mm256_set1_epi8(static_cast<int8_t>(0x80)));
    }
    static void params(const Block* b, GroupParams* p) { p[0].d = half_at(&b->d); }
};

struct TQ4_0 {
    using Block = BlockQ4_0;
    static constexpr Family kFamily = Family::A;
    static constexpr int kGroups = 1;
    static constexpr int kOff = 8;
    static constexpr bool kWide = false;
    static __m256i unpack(const Block* b, int) { return unpack_nibbles_32(b->qs); }
    static void params(const Block* b, GroupParams* p) { p[0].d = half_at(&b->d); }
};

struct TQ4_1 {
    using Block = BlockQ4_1;
    static constexpr Family kFamily = Family::B;
    static constexpr int kGroups = 1;
    static constexpr int kOff = 0;
    static constexpr bool kWide = false;
    static __m256i unpack(const Block* b, int) { return unpack_nibbles_32(b->qs); }
    static void params(const Block* b, GroupParams* p) {
        p[0].d = half_at(&b->d);
        p[0].m = half_at(&b->m);
    }
};

struct TQ5_0 {
    using Block = BlockQ5_0;
    static constexpr Family kFamily = Family::A;
    static constexpr int kGroups = 1;
    static constexpr int kOff = 16;
    static constexpr bool kWide = false;
    static __m256i unpack(const Block* b, int) {
        return _mm256_or_si256(unpack_nibbles_32(b->qs), expand_bits_x10(load_u32(b->qh)));
    }
    static void params(const Block* b, GroupParams* p) { p[0].d = half_at(&b->d); }
};

struct TQ5_1 {
    using Block = BlockQ5_1;
    static constexpr Family kFamily = Family::B;
    static constexpr int kGroups = 1;
    static constexpr int kOff = 0;
    static constexpr bool kWide = false;
    static __m256i unpack(const Block* b, int) {
        return _mm256_or_si256(unpack_nibbles_32(b->qs), expand_bits_x10(load_u32(b->qh)));
    }
    static void params(const Block* b, GroupParams* p) {
        p[0].d = half_at(&b->d);
        p[0].m = half_at(&b->m);
    }
};

// 16 bytes of nibbles laid out as Q4_0 through the IQ4_NL codebook shifted by +128 (so that it is
// unsigned): u = value + 128.
inline __m256i iq4nl_codes(const uint8_t* qs) {
    const __m256i table = _mm256_setr_epi8(
        1, 24, 45, 63, 79, 93, 106, 118, static_cast<int8_t>(129), static_cast<int8_t>(141),
        static_cast<int8_t>(153), static_cast<int8_t>(166), static_cast<int8_t>(181),
        static_cast<int8_t>(197), static_cast<int8_t>(217), static_cast<int8_t>(241), 1, 24, 45, 63,
        79, 93, 106, 118, static_cast<int8_t>(129), static_cast<int8_t>(141),
        static_cast<int8_t>(153), static_cast<int8_t>(166), static_cast<int8_t>(181),
        static_cast<int8_t>(197), static_cast<int8_t>(217), static_cast<int8_t>(241));
    return _mm256_shuffle_epi8(table, unpack_nibbles_32(qs));
}

struct TIQ4_NL {
    using Block = BlockIQ4_NL;
    static constexpr Family kFamily = Family::A;
    static constexpr int kGroups = 1;
    static constexpr int kOff = 128;
    static constexpr bool kWide = true;
    static __m256i unpack(const Block* b, int) { return iq4nl_codes(b->qs); }
    static void params(const Block* b, GroupParams* p) { p[0].d = half_at(&b->d); }
};
static_assert(kIQ4NLValues[0] + 128 == 1 && kIQ4NLValues[15] + 128 == 241);

// 2^(e - 128) for an e8m0 byte, exactly (e = 0, 1 are the subnormals 2^-128, 2^-127).
inline float e8m0_half_scale(uint8_t e) {
    const uint32_t bits = e >= 2 ? static_cast<uint32_t>(e - 1) << 23 : 0x00200000u << e;
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
}

struct TMXFP4 {
    using Block = BlockMXFP4;
    static constexpr Family kFamily = Family::A;
    static constexpr int kGroups = 1;
    static constexpr int kOff = 16;
    static constexpr bool kWide = false;
    static constexpr bool kWideAct = true;  // see BlockQ16_32
    // The doubled e2m1 code points shifted by +16: u = value + 16, in [4, 28].
    static __m256i table() {
        return _mm256_broadcastsi128_si256(
            _mm_setr_epi8(16, 17, 18, 19, 20, 22, 24, 28, 16, 15, 14, 13, 12, 10, 8, 4));
    }
    static __m256i unpack(const Block* b, int) {
        return _mm256_shuffle_epi8(table(), unpack_nibbles_32(b->qs));
    }
    static void params(const Block* b, GroupParams* p) { p[0].d = e8m0_half_scale(b->e); }
};
static_assert(kMXFP4Values[7] + 16 == 28 && kMXFP4Values[15] + 16 == 4);

// ---- K-quants: 8 groups of 32 per 256-element super-block --------------------------------------

// Q4_K/Q5_K: 6-bit scale and min of 32-element sub-block i.
inline void q4k_scale_min(const uint8_t* scales, int i, int* sc, int* mn) {
    if (i < 4) {
        *sc = scales[i] & 63;
        *mn = scales[i + 4] & 63;
    } else {
        *sc = (scales[i + 4] & 0x0f) | (scales[i - 4] >> 6) << 4;
        *mn = (scales[i + 4] >> 4) | (scales[i] >> 6) << 4;
    }
}

inline void q4k_params(const uint8_t* dd, const uint8_t* scales, GroupParams* p) {
    const float d = half_at(dd), dmin = half_at(dd + 2);
    for (int i = 0; i < 8; ++i) {
        int sc = 0, mn = 0;
        q4k_scale_min(scales, i, &sc, &mn);
        // Both products are exact in f32 (11-bit mantissa times a 6-bit integer).
        p[i].d = d * static_cast<float>(sc);
        p[i].m = -(dmin * static_cast<float>(mn));
    }
}

struct TQ4_K {
    using Block = BlockQ4_K;
    static constexpr Family kFamily = Family::B;
    static constexpr int kGroups = 8;
    static constexpr int kOff = 0;
    static constexpr bool kWide = false;
    // Group s = 2j + h: nibble h of qs[32j .. 32j+31].
    static __m256i unpack(const Block* b, int s) {
        const __m256i x = load32(b->qs + 32 * (s / 2));
        const __m256i v = (s & 1) ? _mm256_srli_epi16(x, 4) : x;
        return _mm256_and_si256(v, low_nibbles_mask());
    }
    static void params(const Block* b, GroupParams* p) {
        q4k_params(reinterpret_cast<const uint8_t*>(&b->d), b->scales, p);
    }
};

struct TQ5_K {
    using Block = BlockQ5_K;
    static constexpr Family kFamily = Family::B;
    static constexpr int kGroups = 8;
    static constexpr int kOff = 0;
    static constexpr bool kWide = false;
    // As Q4_K plus bit s of qh[l] as bit 4.
    static __m256i unpack(const Block* b, int s) {
        const __m256i x = load32(b->qs + 32 * (s / 2));
        const __m256i v = (s & 1) ? _mm256_srli_epi16(x, 4) : x;
        return _mm256_or_si256(_mm256_and_si256(v, low_nibbles_mask()),
                               select_bit(load32(b->qh), s, 0x10));
    }
    static void params(const Block* b, GroupParams* p) {
        q4k_params(reinterpret_cast<const uint8_t*>(&b->d), b->scales, p);
    }
};

struct TQ6_K {
    using Block = BlockQ6_K;
    static constexpr Family kFamily = Family::C;
    static constexpr int kGroups = 8;
    static constexpr int kOff = 32;
    static constexpr bool kWide = false;
    // Group s = 4n + k: low nibble (k / 2) of ql[64n + 32(k % 2) + l], high 2 bits = bits 2k of
    // qh[32n + l].
    static __m256i unpack(const Block* b, int s) {
        const int n = s / 4, k = s % 4;
        const __m256i x = load32(b->ql + 64 * n + 32 * (k % 2));
        const __m256i lo =
            _mm256_and_si256(k >= 2 ? _mm256_srli_epi16(x, 4) : x, low_nibbles_mask());
        const __m256i hi = _mm256_slli_epi16(two_bits(load32(b->qh + 32 * n), k), 4);
        return _mm256_or_si256(lo, hi);
    }
    static void params(const Block* b, GroupParams* p) {
        const float d = half_at(&b->d);
        for (int s = 0; s < 8; ++s) {
            p[s].d = d;
            p[s].sc0 = b->scales[2 * s];
            p[s].sc1 = b->scales[2 * s + 1];
        }
    }
};

struct TQ3_K {
    using Block = BlockQ3_K;
    static constexpr Family kFamily = Family::C;
    static constexpr int kGroups = 8;
    static constexpr int kOff = 4;
    static constexpr bool kWide = false;
    // Group s = 4n + j: bits 2j of qs[32n + l], plus 4 when bit (4n + j) of hmask[l] is set.
    static __m256i unpack(const Block* b, int s) {
        const int n = s / 4, j = s % 4;
        return _mm256_or_si256(two_bits(load32(b->qs + 32 * n), j),
                               select_bit(load32(b->hmask), s, 4));
    }
    static int scale(const uint8_t* scales, int i) {
        const int lo = i < 8 ? scales[i] & 0x0f : scales[i - 8] >> 4;
        const int hi = (scales[8 + i % 4] >> (2 * (i / 4))) & 3;
        return (lo | hi << 4) - 32;
    }
    static void params(const Block* b, GroupParams* p) {
        const float d = half_at(&b->d);
        for (int s = 0; s < 8; ++s) {
            p[s].d = d;
            p[s].sc0 = scale(b->scales, 2 * s);
            p[s].sc1 = scale(b->scales, 2 * s + 1);
        }
    }
};

struct TQ2_K {
    using Block = BlockQ2_K;
    static constexpr Family kFamily = Family::D;
    static constexpr int kGroups = 8;
    static constexpr int kOff = 0;
    static constexpr bool kWide = false;
    // Group s = 4n + j: bits 2j of qs[32n + l].
    static __m256i unpack(const Block* b, int s) {
        return two_bits(load32(b->qs + 32 * (s / 4)), s % 4);
    }
    static void params(const Block* b, GroupParams* p) {
        const float d = half_at(&b->d), dmin = half_at(&b->dmin);
        for (int s = 0; s < 8; ++s) {
            const uint8_t s0 = b->scales[2 * s], s1 = b->scales[2 * s + 1];
            p[s].d = d;
            p[s].m = -dmin;
            p[s].sc0 = s0 & 0x0f;
            p[s].sc1 = s1 & 0x0f;
            p[s].mn = (s0 >> 4) | (s1 >> 4) << 16;
        }
    }
};

// ---- IQ quants: 8 groups of 32 per 256-element super-block, one scale per group -----------------

struct TIQ4_XS {
    using Block = BlockIQ4_XS;
    static constexpr Family kFamily = Family::A;
    static constexpr int kGroups = 8;
    static constexpr int kOff = 128;
    static constexpr bool kWide = true;
    // Group s: the nibbles qs[16s .. 16s+15], laid out as Q4_0, through the IQ4_NL codebook.
    static __m256i unpack(const Block* b, int s) { return iq4nl_codes(b->qs + 16 * s); }
    static void params(const Block* b, GroupParams* p) {
        const float d = half_at(&b->d);
        for (int s = 0; s < 8; ++s) {
            const int low = (b->scales_l[s / 2] >> (4 * (s % 2))) & 0x0f;
            const int high = (b->scales_h >> (2 * s)) & 3;
            // Exact in f32 (11-bit mantissa times a 6-bit integer).
            p[s].d = d * static_cast<float>((low | high << 4) - 32);
        }
    }
};

// Group s's 8 grid indices (qs[8s + k] | bit k of qh[s] << 8) as 8 int32 lanes.
inline __m256i iq3s_indices(const BlockIQ3_S* b, int s) {
    uint64_t q8;
    std::memcpy(&q8, b->qs + 8 * s, 8);
    const __m256i low = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<int64_t>(q8)));
    const __m256i bit = _mm256_and_si256(
        _mm256_srlv_epi32(_mm256_set1_epi32(b->qh[s]), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)),
        _mm256_set1_epi32(1));
    return _mm256_or_si256(low, _mm256_slli_epi32(bit, 8));
}

struct TIQ3_S {
    using Block = BlockIQ3_S;
    static constexpr Family kFamily = Family::A;
    static constexpr int kGroups = 8;
    static constexpr int kOff = 16;
    static constexpr bool kWide = false;
    // u = 16 + g or 16 - g (sign bit set), g the grid magnitudes (odd, 1..15): u in [1, 31].
    static __m256i unpack(const Block* b, int s) {
        const __m256i g =
            _mm256_i32gather_epi32(reinterpret_cast<const int*>(kIQ3SGrid), iq3s_indices(b, s), 4);
        const __m256i neg =
            _mm256_cmpeq_epi8(expand_bits_x10(load_u32(b->signs + 4 * s)), _mm256_set1_epi8(0x10));
        const __m256i base = _mm256_set1_epi8(16);
        return _mm256_blendv_epi8(_mm256_add_epi8(base, g), _mm256_sub_epi8(base, g), neg);
    }
    static void params(const Block* b, GroupParams* p) {
        const float d = half_at(&b->d);
        for (int s = 0; s < 8; ++s) {
            const int sc = (b->scales[s / 2] >> (4 * (s % 2))) & 0x0f;
            p[s].d = d * static_cast<float>(1 + 2 * sc);  // exact
        }
    }
};

// ---- dequantization (bit-exact with the scalar reference) --------------------------------------

// 8 unsigned bytes -> 8 floats of (u - off).
inline __m256 bytes_to_float(__m128i u8, int off) {
    return _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_cvtepu8_epi32(u8), _mm256_set1_epi32(off)));
}

template <class T>
void dequantize_row(const void* src, float* dst, int64_t n) {
    using Block = typename T::Block;
    const auto* blocks = static_cast<const Block*>(src);  // [n / (32 * kGroups)]
    constexpr int kElems = 32 * T::kGroups;
    for (int64_t b = 0; b < n / kElems; ++b) {
        GroupParams p[T::kGroups];
        T::params(blocks + b, p);
        for (int s = 0; s < T::kGroups; ++s) {
            alignas(32) uint8_t u[32];  // [32] decoded bytes of group s
            _mm256_store_si256(reinterpret_cast<__m256i*>(u), T::unpack(blocks + b, s));
            float* y = dst + b * kElems + 32 * s;  // [32]
            for (int c = 0; c < 4; ++c) {
                const __m256 q =
                    bytes_to_float(_mm_loadl_epi64(reinterpret_cast<__m128i*>(u + 8 * c)), T::kOff);
                __m256 v;
                if constexpr (T::kFamily == Family::A) {
                    v = _mm256_mul_ps(_mm256_set1_ps(p[s].d), q);
                } else if constexpr (T::kFamily == Family::B) {
                    v = _mm256_add_ps(_mm256_mul_ps(_mm256_set1_ps(p[s].d), q),
                                      _mm256_set1_ps(p[s].m));
                } else {
                    // 16-element halves: c = 0, 1 use sc0/mn0, c = 2, 3 sc1/mn1. d * sc and
                    // dmin * mn are exact, as is their product with q, so only the final
                    // subtraction rounds, as in the reference.
                    const int sc = c < 2 ? p[s].sc0 : p[s].sc1;
                    v = _mm256_mul_ps(_mm256_set1_ps(p[s].d * static_cast<float>(sc)), q);
                    if constexpr (T::kFamily == Family::D) {
                        const int mn = c < 2 ? (p[s].mn & 0xffff) : (p[s].mn >> 16);
                        v = _mm256_sub_ps(v, _mm256_set1_ps(-p[s].m * static_cast<float>(mn)));
                    }
                }
                _mm256_storeu_ps(y + 8 * c, v);
            }
        }
    }
}

}  // namespace ember::EMBER_SIMD_NS
