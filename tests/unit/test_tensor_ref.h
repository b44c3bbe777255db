// Independent reference decoders for the tensor tests.
//
// Written from the GGUF/ggml format definitions, deliberately in a different style from the
// engine (byte offsets into raw blocks instead of the packed structs, the formats' own loop
// nests instead of per-element index formulas, ldexp instead of bit tricks, double precision),
// so that a layout mistake in the engine cannot be repeated here by sharing code.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "engine/tensor/iq_grids.h"
#include "engine/tensor/types.h"

namespace ember::test {

// IEEE binary16 bits -> value, via ldexp.
inline double ref_half(uint16_t h) {
    const int sign = h >> 15;
    const int exp = (h >> 10) & 0x1f;
    const int mant = h & 0x3ff;
    double v;
    if (exp == 0) {
        v = std::ldexp(static_cast<double>(mant), -24);
    } else if (exp == 31) {
        v = mant == 0 ? INFINITY : NAN;
    } else {
        v = std::ldexp(static_cast<double>(1024 + mant), exp - 25);
    }
    return sign ? -v : v;
}

inline double ref_half_at(const uint8_t* p) {
    return ref_half(static_cast<uint16_t>(p[0] | p[1] << 8));
}

inline const int8_t kRefIQ4NL[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                     1,    13,   25,  38,  53,  69,  89,  113};

// The e2m1 code points doubled, in nibble order (bit 3 is the sign).
inline const double kRefMXFP4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// A decoded block: value of each element, and the quantization step that applies to it (the
// distance between adjacent representable values; for IQ4_NL the largest codebook gap).
struct RefDecoded {
    std::vector<double> value;
    std::vector<double> step;
};

// Decodes one block of `type` starting at p; returns block_elems values.
inline RefDecoded ref_decode_block(TensorType type, const uint8_t* p) {
    RefDecoded out;
    auto put = [&](double v, double step) {
        out.value.push_back(v);
        out.step.push_back(std::fabs(step));
    };
    switch (type) {
        case TensorType::Q8_0: {
            const double d = ref_half_at(p);
            for (int j = 0; j < 32; ++j) put(d * static_cast<int8_t>(p[2 + j]), d);
            break;
        }
        case TensorType::Q4_0:
        case TensorType::Q4_1:
        case TensorType::IQ4_NL: {
            const bool has_m = type == TensorType::Q4_1;
            const double d = ref_half_at(p);
            const double m = has_m ? ref_half_at(p + 2) : 0.0;
            const uint8_t* qs = p + (has_m ? 4 : 2);
            std::vector<double> v(32), s(32);
            for (int j = 0; j < 16; ++j) {
                const int lo = qs[j] & 0x0f, hi = qs[j] >> 4;
                if (type == TensorType::Q4_0) {
                    v[j] = d * (lo - 8);
                    v[j + 16] = d * (hi - 8);
                    s[j] = s[j + 16] = d;
                } else if (type == TensorType::Q4_1) {
                    v[j] = d * lo + m;
                    v[j + 16] = d * hi + m;
                    s[j] = s[j + 16] = d;
                } else {
                    v[j] = d * kRefIQ4NL[lo];
                    v[j + 16] = d * kRefIQ4NL[hi];
                    // Half this "step" bounds the error: 14 * d past the +113 end, plus fp16
                    // rounding of d.
                    s[j] = s[j + 16] = 28.5 * d;
                }
            }
            for (int j = 0; j < 32; ++j) put(v[j], s[j]);
            break;
        }
        case TensorType::Q5_0:
        case TensorType::Q5_1: {
            const bool has_m = type == TensorType::Q5_1;
            const double d = ref_half_at(p);
            const double m = has_m ? ref_half_at(p + 2) : 0.0;
            uint32_t qh;
            std::memcpy(&qh, p + (has_m ? 4 : 2), 4);  // little-endian host
            const uint8_t* qs = p + (has_m ? 8 : 6);
            std::vector<double> v(32);
            for (int j = 0; j < 16; ++j) {
                const int xh0 = ((qh >> j) << 4) & 0x10;
                const int xh1 = (qh >> (j + 12)) & 0x10;
                const int x0 = (qs[j] & 0x0f) | xh0;
                const int x1 = (qs[j] >> 4) | xh1;
                v[j] = has_m ? d * x0 + m : d * (x0 - 16);
                v[j + 16] = has_m ? d * x1 + m : d * (x1 - 16);
            }
            for (int j = 0; j < 32; ++j) put(v[j], d);
            break;
        }
        case TensorType::Q2_K: {
            const uint8_t* scales = p;
            const uint8_t* q = p + 16;
            const double d = ref_half_at(p + 80), dmin = ref_half_at(p + 82);
            int is = 0;
            for (int n = 0; n < 256; n += 128) {
                int shift = 0;
                for (int j = 0; j < 4; ++j) {
                    for (int half = 0; half < 2; ++half) {
                        const uint8_t sc = scales[is++];
                        const double dl = d * (sc & 0x0f), ml = dmin * (sc >> 4);
                        for (int l = 0; l < 16; ++l)
                            put(dl * ((q[l + 16 * half] >> shift) & 3) - ml, dl);
                    }
                    shift += 2;
                }
                q += 32;
            }
            break;
        }
        case TensorType::Q3_K: {
            const uint8_t* hm = p;
            const uint8_t* q = p + 32;
            const double d = ref_half_at(p + 108);
            // The packed 6-bit scales, unpacked through 32-bit words as the format describes.
            uint32_t aux[4];
            std::memcpy(aux, p + 96, 12);
            const uint32_t kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f;
            const uint32_t tmp = aux[2];
            aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
            aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
            aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
            aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
            int8_t sc[16];
            std::memcpy(sc, aux, 16);
            int is = 0;
            uint8_t m = 1;
            for (int n = 0; n < 256; n += 128) {
                int shift = 0;
                for (int j = 0; j < 4; ++j) {
                    for (int half = 0; half < 2; ++half) {
                        const double dl = d * (sc[is++] - 32);
                        for (int l = 16 * half; l < 16 * half + 16; ++l) {
                            put(dl * (((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4)), dl);
                        }
                    }
                    shift += 2;
                    m = static_cast<uint8_t>(m << 1);
                }
                q += 32;
            }
            break;
        }
        case TensorType::Q4_K:
        case TensorType::Q5_K: {
            const bool five = type == TensorType::Q5_K;
            const double d = ref_half_at(p), dmin = ref_half_at(p + 2);
            const uint8_t* scales = p + 4;
            const uint8_t* qh = p + 16;
            const uint8_t* ql = p + (five ? 48 : 16);
            auto scale_min = [&](int j, int* s, int* mn) {
                if (j < 4) {
                    *s = scales[j] & 63;
                    *mn = scales[j + 4] & 63;
                } else {
                    *s = (scales[j + 4] & 0xf) | ((scales[j - 4] >> 6) << 4);
                    *mn = (scales[j + 4] >> 4) | ((scales[j - 0] >> 6) << 4);
                }
            };
            int is = 0;
            uint8_t u1 = 1, u2 = 2;
            for (int j = 0; j < 256; j += 64) {
                int s, mn;
                scale_min(is + 0, &s, &mn);
                const double d1 = d * s, m1 = dmin * mn;
                scale_min(is + 1, &s, &mn);
                const double d2 = d * s, m2 = dmin * mn;
                for (int l = 0; l < 32; ++l) {
                    put(d1 * ((ql[l] & 0xf) + (five && (qh[l] & u1) ? 16 : 0)) - m1, d1);
                }
                for (int l = 0; l < 32; ++l) {
                    put(d2 * ((ql[l] >> 4) + (five && (qh[l] & u2) ? 16 : 0)) - m2, d2);
                }
                ql += 32;
                is += 2;
                u1 = static_cast<uint8_t>(u1 << 2);
                u2 = static_cast<uint8_t>(u2 << 2);
            }
            break;
        }
        case TensorType::Q6_K: {
            const uint8_t* ql = p;
            const uint8_t* qh = p + 128;
            const int8_t* sc = reinterpret_cast<const int8_t*>(p + 192);
            const double d = ref_half_at(p + 208);
            std::vector<double> y(256), st(256);
            for (int n = 0; n < 256; n += 128) {
                for (int l = 0; l < 32; ++l) {
                    const int is = l / 16;
                    const int q1 = ((ql[l + 0] & 0xf) | (((qh[l] >> 0) & 3) << 4)) - 32;
                    const int q2 = ((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32;
                    const int q3 = ((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                    const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                    y[n + l + 0] = d * sc[is + 0] * q1;
                    y[n + l + 32] = d * sc[is + 2] * q2;
                    y[n + l + 64] = d * sc[is + 4] * q3;
                    y[n + l + 96] = d * sc[is + 6] * q4;
                    st[n + l + 0] = d * sc[is + 0];
                    st[n + l + 32] = d * sc[is + 2];
                    st[n + l + 64] = d * sc[is + 4];
                    st[n + l + 96] = d * sc[is + 6];
                }
                ql += 64;
                qh += 32;
                sc += 8;
            }
            for (int e = 0; e < 256; ++e) put(y[e], st[e]);
            break;
        }
        case TensorType::MXFP4: {
            // One e8m0 exponent byte, then 16 bytes of nibbles: low = element j, high = j + 16.
            const double d = std::ldexp(1.0, p[0] - 128);
            for (int half = 0; half < 2; ++half) {
                for (int j = 0; j < 16; ++j) {
                    const int nib = half == 0 ? p[1 + j] & 0x0f : p[1 + j] >> 4;
                    // The largest gap between code points is 4 (8 -> 12).
                    put(d * kRefMXFP4[nib], 4 * d);
                }
            }
            break;
        }
        case TensorType::IQ4_XS: {
            const double d = ref_half_at(p);
            const int scales_h = p[2] | p[3] << 8;
            const uint8_t* scales_l = p + 4;
            const uint8_t* qs = p + 8;
            for (int ib = 0; ib < 8; ++ib) {
                const int ls =
                    ((scales_l[ib / 2] >> 4 * (ib % 2)) & 0xf) | (((scales_h >> 2 * ib) & 3) << 4);
                const double dl = d * (ls - 32);
                for (int j = 0; j < 16; ++j) put(dl * kRefIQ4NL[qs[j] & 0xf], 28.5 * dl);
                for (int j = 0; j < 16; ++j) put(dl * kRefIQ4NL[qs[j] >> 4], 28.5 * dl);
                qs += 16;
            }
            break;
        }
        case TensorType::IQ3_S: {
            // d at 0, qs[64] at 2, qh[8] at 66, signs[32] at 74, scales[4] at 106. Each byte of
            // qs (plus one qh bit) picks 4 magnitudes from the grid; each signs byte covers 8
            // elements.
            const double d = ref_half_at(p);
            const uint8_t* qs = p + 2;
            const uint8_t* qh = p + 66;
            const uint8_t* signs = p + 74;
            const uint8_t* scales = p + 106;
            for (int ib32 = 0; ib32 < 8; ++ib32) {
                const double db = d * (1 + 2 * ((scales[ib32 / 2] >> 4 * (ib32 % 2)) & 0xf));
                for (int l = 0; l < 4; ++l) {
                    for (int half = 0; half < 2; ++half) {
                        const int k = 2 * l + half;
                        const int index = qs[k] | (((qh[ib32] >> k) & 1) << 8);
                        const uint32_t grid = kIQ3SGrid[index];
                        for (int j = 0; j < 4; ++j) {
                            const int g = static_cast<int>((grid >> (8 * j)) & 0xff);
                            const bool neg = (signs[l] >> (4 * half + j)) & 1;
                            // The grid is sparse: a run can land up to 7 magnitude units away
                            // (a rounding step plus the distance to the nearest grid entry).
                            put(neg ? -db * g : db * g, 14 * db);
                        }
                    }
                }
                qs += 8;
                signs += 4;
            }
            break;
        }
        default:
            break;
    }
    return out;
}

// Decodes a whole row of n elements (any supported type, float types included).
inline std::vector<double> ref_decode_row(TensorType type, const uint8_t* p, int64_t n) {
    std::vector<double> out;
    out.reserve(static_cast<size_t>(n));
    switch (type) {
        case TensorType::F32:
            for (int64_t i = 0; i < n; ++i) {
                float f;
                std::memcpy(&f, p + 4 * i, 4);
                out.push_back(f);
            }
            return out;
        case TensorType::F16:
            for (int64_t i = 0; i < n; ++i) out.push_back(ref_half_at(p + 2 * i));
            return out;
        case TensorType::BF16:
            for (int64_t i = 0; i < n; ++i) {
                const uint32_t bits = static_cast<uint32_t>(p[2 * i] | p[2 * i + 1] << 8) << 16;
                float f;
                std::memcpy(&f, &bits, 4);
                out.push_back(f);
            }
            return out;
        default:
            break;
    }
    const TypeInfo& info = type_info(type);
    for (int64_t b = 0; b < n / info.block_elems; ++b) {
        const RefDecoded blk = ref_decode_block(type, p + b * info.block_bytes);
        out.insert(out.end(), blk.value.begin(), blk.value.end());
    }
    return out;
}

// The quantized types with 32- or 256-element blocks this engine supports.
inline const std::vector<TensorType>& quant_types() {
    static const std::vector<TensorType> types = {
        TensorType::Q8_0,  TensorType::Q4_0,   TensorType::Q4_1, TensorType::Q5_0,
        TensorType::Q5_1,  TensorType::IQ4_NL, TensorType::Q2_K, TensorType::Q3_K,
        TensorType::Q4_K,  TensorType::Q5_K,   TensorType::Q6_K, TensorType::IQ4_XS,
        TensorType::IQ3_S, TensorType::MXFP4};
    return types;
}

inline const std::vector<TensorType>& float_types() {
    static const std::vector<TensorType> types = {TensorType::F32, TensorType::F16,
                                                  TensorType::BF16};
    return types;
}

// Byte offsets of the fp16 scale fields of each block type (the rest of a block can hold any
// bit pattern and still be a valid block).
inline std::vector<int> half_field_offsets(TensorType type) {
    switch (type) {
        case TensorType::Q8_0:
        case TensorType::Q4_0:
        case TensorType::Q5_0:
        case TensorType::IQ4_NL:
        case TensorType::IQ4_XS:
        case TensorType::IQ3_S:
            return {0};
        case TensorType::Q4_1:
        case TensorType::Q5_1:
        case TensorType::Q4_K:
        case TensorType::Q5_K:
            return {0, 2};
        case TensorType::Q2_K:
            return {80, 82};
        case TensorType::Q3_K:
            return {108};
        case TensorType::Q6_K:
            return {208};
        default:
            return {};
    }
}

// Byte offsets of the e8m0 exponent fields (scale 2^(e - 128)) of each block type.
inline std::vector<int> exponent_field_offsets(TensorType type) {
    return type == TensorType::MXFP4 ? std::vector<int>{0} : std::vector<int>{};
}

// A random fp16 of moderate magnitude (2^-12 .. 2^-2, random sign when `allow_negative`), so
// that products and differences stay exact in double.
inline uint16_t random_half(std::mt19937& rng, bool allow_negative) {
    std::uniform_int_distribution<int> exp_dist(3, 13);  // biased exponent
    std::uniform_int_distribution<int> mant_dist(0, 1023);
    std::uniform_int_distribution<int> sign_dist(0, 1);
    uint16_t h = static_cast<uint16_t>(exp_dist(rng) << 10 | mant_dist(rng));
    if (allow_negative && sign_dist(rng)) h |= 0x8000;
    return h;
}

// A row of `n` elements of `type` made of random bytes with sane fp16 scale fields.
inline std::vector<uint8_t> random_row(TensorType type, int64_t n, std::mt19937& rng) {
    const TypeInfo& info = type_info(type);
    std::vector<uint8_t> row(static_cast<size_t>(n / info.block_elems * info.block_bytes));
    std::uniform_int_distribution<int> byte(0, 255);
    if (type == TensorType::F32) {
        std::normal_distribution<float> nd;
        for (int64_t i = 0; i < n; ++i) {
            const float f = nd(rng);
            std::memcpy(row.data() + 4 * i, &f, 4);
        }
        return row;
    }
    if (type == TensorType::F16 || type == TensorType::BF16) {
        for (int64_t i = 0; i < n; ++i) {
            uint16_t h;
            if (type == TensorType::F16) {
                h = random_half(rng, true);
                h = static_cast<uint16_t>(h + (6 << 10));  // magnitudes 2^-6 .. 2^4
            } else {
                // bf16 with exponent 120..130.
                std::uniform_int_distribution<int> e(120, 130);
                h = static_cast<uint16_t>(e(rng) << 7 | byte(rng) >> 1 | (byte(rng) & 1) << 15);
            }
            std::memcpy(row.data() + 2 * i, &h, 2);
        }
        return row;
    }
    for (auto& b : row) b = static_cast<uint8_t>(byte(rng));
    const bool signed_scale = type == TensorType::Q8_0 || type == TensorType::Q4_0 ||
                              type == TensorType::Q5_0 || type == TensorType::IQ4_NL ||
                              type == TensorType::Q4_1 || type == TensorType::Q5_1 ||
                              type == TensorType::IQ4_XS || type == TensorType::IQ3_S;
    std::uniform_int_distribution<int> exponent(118, 130);  // scales 2^-10 .. 2^2
    for (int64_t b = 0; b < n / info.block_elems; ++b) {
        for (int off : half_field_offsets(type)) {
            const uint16_t h = random_half(rng, signed_scale);
            std::memcpy(row.data() + b * info.block_bytes + off, &h, 2);
        }
        for (int off : exponent_field_offsets(type)) {
            row[static_cast<size_t>(b * info.block_bytes + off)] =
                static_cast<uint8_t>(exponent(rng));
        }
    }
    return row;
}

}  // namespace ember::test
