// Type table, block sizes, and the fp16/bf16 conversions (exhaustive where the domain allows).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>

#include "engine/tensor/blocks.h"
#include "engine/tensor/types.h"
#include "tests/unit/test_tensor_ref.h"

namespace ember {
namespace {

using test::ref_half;

TEST(TensorTypes, BlockStructSizesMatchTheFileFormat) {
    EXPECT_EQ(sizeof(BlockQ8_0), 34u);
    EXPECT_EQ(sizeof(BlockQ8_1), 36u);
    EXPECT_EQ(sizeof(BlockQ4_0), 18u);
    EXPECT_EQ(sizeof(BlockQ4_1), 20u);
    EXPECT_EQ(sizeof(BlockQ5_0), 22u);
    EXPECT_EQ(sizeof(BlockQ5_1), 24u);
    EXPECT_EQ(sizeof(BlockIQ4_NL), 18u);
    EXPECT_EQ(sizeof(BlockQ2_K), 84u);
    EXPECT_EQ(sizeof(BlockQ3_K), 110u);
    EXPECT_EQ(sizeof(BlockQ4_K), 144u);
    EXPECT_EQ(sizeof(BlockQ5_K), 176u);
    EXPECT_EQ(sizeof(BlockQ6_K), 210u);
    EXPECT_EQ(sizeof(BlockQ8_K), 292u);
    EXPECT_EQ(sizeof(BlockQ8_32), 40u);
    EXPECT_EQ(sizeof(BlockIQ4_XS), 136u);
    EXPECT_EQ(sizeof(BlockIQ3_S), 110u);
    EXPECT_EQ(sizeof(BlockMXFP4), 17u);
    // Field offsets the kernels (and SIMD code) rely on.
    EXPECT_EQ(offsetof(BlockQ5_0, qs), 6u);
    EXPECT_EQ(offsetof(BlockQ5_1, qs), 8u);
    EXPECT_EQ(offsetof(BlockQ2_K, d), 80u);
    EXPECT_EQ(offsetof(BlockQ3_K, scales), 96u);
    EXPECT_EQ(offsetof(BlockQ3_K, d), 108u);
    EXPECT_EQ(offsetof(BlockQ4_K, qs), 16u);
    EXPECT_EQ(offsetof(BlockQ5_K, qh), 16u);
    EXPECT_EQ(offsetof(BlockQ5_K, qs), 48u);
    EXPECT_EQ(offsetof(BlockQ6_K, qh), 128u);
    EXPECT_EQ(offsetof(BlockQ6_K, scales), 192u);
    EXPECT_EQ(offsetof(BlockQ6_K, d), 208u);
    EXPECT_EQ(offsetof(BlockQ8_32, qs), 8u);
    EXPECT_EQ(offsetof(BlockIQ4_XS, scales_l), 4u);
    EXPECT_EQ(offsetof(BlockIQ4_XS, qs), 8u);
    EXPECT_EQ(offsetof(BlockIQ3_S, qh), 66u);
    EXPECT_EQ(offsetof(BlockIQ3_S, signs), 74u);
    EXPECT_EQ(offsetof(BlockIQ3_S, scales), 106u);
    EXPECT_EQ(offsetof(BlockMXFP4, qs), 1u);
}

TEST(TensorTypes, TypeInfoTable) {
    struct Expect {
        uint32_t raw;
        const char* name;
        uint32_t elems, bytes;
        bool supported;
    };
    const Expect table[] = {
        {0, "f32", 1, 4, true},        {1, "f16", 1, 2, true},
        {2, "q4_0", 32, 18, true},     {3, "q4_1", 32, 20, true},
        {6, "q5_0", 32, 22, true},     {7, "q5_1", 32, 24, true},
        {8, "q8_0", 32, 34, true},     {9, "q8_1", 32, 36, false},
        {10, "q2_K", 256, 84, true},   {11, "q3_K", 256, 110, true},
        {12, "q4_K", 256, 144, true},  {13, "q5_K", 256, 176, true},
        {14, "q6_K", 256, 210, true},  {15, "q8_K", 256, 292, false},
        {20, "iq4_nl", 32, 18, true},  {24, "i8", 1, 1, false},
        {25, "i16", 1, 2, false},      {26, "i32", 1, 4, false},
        {28, "f64", 1, 8, false},      {30, "bf16", 1, 2, true},
        {21, "iq3_s", 256, 110, true}, {23, "iq4_xs", 256, 136, true},
        {39, "mxfp4", 32, 17, true},
    };
    for (const Expect& e : table) {
        SCOPED_TRACE(e.name);
        const auto info = type_info(e.raw);
        ASSERT_TRUE(info.has_value());
        EXPECT_EQ(static_cast<uint32_t>(info->type), e.raw);
        EXPECT_EQ(info->name, e.name);
        EXPECT_EQ(info->block_elems, e.elems);
        EXPECT_EQ(info->block_bytes, e.bytes);
        EXPECT_EQ(info->supported, e.supported);
        EXPECT_EQ(&type_info(info->type), &type_info(info->type));  // stable reference
        EXPECT_EQ(type_info(info->type).name, e.name);
        const auto by_name = type_from_name(e.name);
        ASSERT_TRUE(by_name.has_value());
        EXPECT_EQ(*by_name, info->type);
    }
    for (uint32_t raw : {4u, 5u, 16u, 17u, 19u, 22u, 27u, 29u, 31u, 38u, 40u, 1000u, 0xffffffffu}) {
        EXPECT_FALSE(type_info(raw).has_value()) << raw;
    }
    EXPECT_EQ(type_from_name("Q4_K"), TensorType::Q4_K);
    EXPECT_EQ(type_from_name("BF16"), TensorType::BF16);
    EXPECT_EQ(type_from_name("IQ4_NL"), TensorType::IQ4_NL);
    EXPECT_FALSE(type_from_name("q4_k_m").has_value());
    EXPECT_FALSE(type_from_name("").has_value());
    EXPECT_THROW(type_info(static_cast<TensorType>(4)), std::invalid_argument);
}

TEST(TensorTypes, RowBytes) {
    EXPECT_EQ(row_bytes(type_info(TensorType::F32), 7), 28u);
    EXPECT_EQ(row_bytes(type_info(TensorType::BF16), 4096), 8192u);
    EXPECT_EQ(row_bytes(type_info(TensorType::Q4_0), 4096), 4096u / 32 * 18);
    EXPECT_EQ(row_bytes(type_info(TensorType::Q6_K), 4096), 4096u / 256 * 210);
}

// Bitwise equality, treating every NaN as equal to every NaN of the same sign.
void expect_same_float(float got, double want, uint32_t tag) {
    if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << std::hex << tag;
        EXPECT_EQ(std::signbit(got), std::signbit(want)) << std::hex << tag;
        return;
    }
    EXPECT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(static_cast<float>(want)))
        << std::hex << tag << " got " << got << " want " << want;
}

TEST(Fp16, ToFp32IsExactForAllBitPatterns) {
    for (uint32_t h = 0; h < 65536; ++h) {
        const float got = fp16_to_fp32(static_cast<uint16_t>(h));
        expect_same_float(got, ref_half(static_cast<uint16_t>(h)), h);
        if (std::isnan(got)) {
            // The payload moves to the top of the f32 mantissa, so it survives the round trip.
            EXPECT_EQ((std::bit_cast<uint32_t>(got) >> 13) & 0x3ffu, h & 0x3ffu);
        }
    }
    static_assert(fp16_to_fp32(0x3c00) == 1.0f);
    static_assert(fp16_to_fp32(0x0001) == 0x1p-24f);
}

TEST(Fp16, RoundTripAllBitPatterns) {
    for (uint32_t h = 0; h < 65536; ++h) {
        const uint16_t back = fp32_to_fp16(fp16_to_fp32(static_cast<uint16_t>(h)));
        const bool is_nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
        if (is_nan) {
            EXPECT_EQ(back & 0x7c00, 0x7c00) << std::hex << h;
            EXPECT_NE(back & 0x3ff, 0) << std::hex << h;
            EXPECT_EQ(back & 0x8000, h & 0x8000) << std::hex << h;
        } else {
            EXPECT_EQ(back, h) << std::hex << h;
        }
    }
}

// Every midpoint between adjacent f16 values (and the values just either side) must round to
// nearest, ties to even. Midpoints of f16 values are exact in f32.
TEST(Fp16, FromFp32RoundsToNearestEvenEverywhere) {
    for (uint32_t h = 0; h < 0x7c00; ++h) {
        const double lo = ref_half(static_cast<uint16_t>(h));
        const double hi = h == 0x7bff ? 65536.0 : ref_half(static_cast<uint16_t>(h + 1));
        const uint16_t up = static_cast<uint16_t>(h + 1);  // 0x7c00 (inf) above 65504
        const float mid = static_cast<float>((lo + hi) / 2);
        ASSERT_EQ(static_cast<double>(mid), (lo + hi) / 2);
        const uint16_t even = (h & 1) ? up : static_cast<uint16_t>(h);
        for (int sign = 0; sign < 2; ++sign) {
            const float s = sign ? -1.0f : 1.0f;
            const uint16_t sbit = sign ? 0x8000 : 0;
            EXPECT_EQ(fp32_to_fp16(s * mid), even | sbit) << std::hex << h;
            EXPECT_EQ(fp32_to_fp16(s * std::nextafter(mid, 0.0f)), h | sbit) << std::hex << h;
            EXPECT_EQ(fp32_to_fp16(s * std::nextafter(mid, INFINITY)), up | sbit) << std::hex << h;
            EXPECT_EQ(fp32_to_fp16(s * static_cast<float>(lo)), h | sbit) << std::hex << h;
        }
    }
}

TEST(Fp16, FromFp32SpecialValues) {
    EXPECT_EQ(fp32_to_fp16(0.0f), 0x0000);
    EXPECT_EQ(fp32_to_fp16(-0.0f), 0x8000);
    EXPECT_EQ(fp32_to_fp16(INFINITY), 0x7c00);
    EXPECT_EQ(fp32_to_fp16(-INFINITY), 0xfc00);
    EXPECT_EQ(fp32_to_fp16(1e10f), 0x7c00);
    EXPECT_EQ(fp32_to_fp16(65519.996f), 0x7bff);
    EXPECT_EQ(fp32_to_fp16(65520.0f), 0x7c00);
    EXPECT_EQ(fp32_to_fp16(0x1p-25f), 0x0000);  // tie between 0 and the smallest subnormal
    EXPECT_EQ(fp32_to_fp16(std::nextafter(0x1p-25f, 1.0f)), 0x0001);
    EXPECT_EQ(fp32_to_fp16(0x1p-30f), 0x0000);
    EXPECT_EQ(fp32_to_fp16(std::bit_cast<float>(0x00000001u)), 0x0000);  // f32 subnormal
    const uint16_t nan =
        fp32_to_fp16(std::bit_cast<float>(0x7f800001u));  // signalling, tiny payload
    EXPECT_EQ(nan & 0x7c00, 0x7c00);
    EXPECT_NE(nan & 0x3ff, 0);
    EXPECT_TRUE(std::isnan(fp16_to_fp32(fp32_to_fp16(-NAN))));
}

TEST(Bf16, ToFp32IsExactForAllBitPatterns) {
    for (uint32_t b = 0; b < 65536; ++b) {
        const int sign = b >> 15, exp = (b >> 7) & 0xff, mant = b & 0x7f;
        double want;
        if (exp == 0) {
            want = std::ldexp(static_cast<double>(mant), -133);
        } else if (exp == 255) {
            want = mant ? NAN : INFINITY;
        } else {
            want = std::ldexp(static_cast<double>(128 + mant), exp - 134);
        }
        if (sign) want = -want;
        expect_same_float(bf16_to_fp32(static_cast<uint16_t>(b)), want, b);
        if (!(exp == 255 && mant)) {
            EXPECT_EQ(fp32_to_bf16(bf16_to_fp32(static_cast<uint16_t>(b))), b) << std::hex << b;
        }
    }
}

// Reference bf16 rounding: pick the nearer of the two neighbours in double, ties to even.
uint16_t ref_to_bf16(float f) {
    const uint32_t x = std::bit_cast<uint32_t>(f);
    const uint32_t down = x & 0xffff0000u;  // toward zero
    const uint32_t up = down + 0x10000u;    // away from zero (may become inf)
    const double df = std::fabs(static_cast<double>(f));
    const double dd = std::fabs(static_cast<double>(std::bit_cast<float>(down)));
    // Rounding happens with an unbounded exponent: past the largest finite value the upper
    // neighbour is 2^128, and choosing it means overflow to inf.
    const bool up_is_inf = (up & 0x7fffffffu) == 0x7f800000u;
    const double du =
        up_is_inf ? std::ldexp(1.0, 128) : std::fabs(static_cast<double>(std::bit_cast<float>(up)));
    const double err_down = df - dd, err_up = du - df;
    if (err_down < err_up) return static_cast<uint16_t>(down >> 16);
    if (err_up < err_down) return static_cast<uint16_t>(up >> 16);
    return static_cast<uint16_t>(((down >> 16) & 1) ? up >> 16 : down >> 16);
}

TEST(Bf16, FromFp32RoundsToNearestEven) {
    std::mt19937 rng(7);
    std::uniform_int_distribution<uint32_t> bits;
    for (int i = 0; i < 2000000; ++i) {
        uint32_t x = bits(rng);
        if (i % 4 == 1) x = (x & 0xffff0000u) | 0x8000u;  // exact ties
        if (i % 4 == 2) x = (x & 0xffff0000u) | 0x7fffu;  // just below ties
        const float f = std::bit_cast<float>(x);
        if (std::isnan(f)) {
            EXPECT_TRUE(std::isnan(bf16_to_fp32(fp32_to_bf16(f))));
            continue;
        }
        ASSERT_EQ(fp32_to_bf16(f), ref_to_bf16(f)) << std::hex << x;
    }
    EXPECT_EQ(fp32_to_bf16(std::bit_cast<float>(0x7f7fffffu)), 0x7f80);  // FLT_MAX -> inf
    EXPECT_EQ(fp32_to_bf16(1.0f), 0x3f80);
}

}  // namespace
}  // namespace ember
