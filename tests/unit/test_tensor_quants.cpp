// Scalar reference kernels: dequantization against independent decoders and hand-built blocks,
// dot products against dequantized values, activation quantization, reference quantizers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/tensor/blocks.h"
#include "engine/tensor/traits.h"
#include "engine/tensor/types.h"
#include "tests/unit/test_tensor_ref.h"

namespace ember {
namespace {

using test::float_types;
using test::quant_types;
using test::random_row;
using test::ref_decode_block;
using test::ref_decode_row;

std::string type_name(TensorType t) {
    return std::string(type_info(t).name);
}

std::vector<float> dequant(TensorType t, const std::vector<uint8_t>& row, int64_t n) {
    std::vector<float> out(static_cast<size_t>(n));  // [n]
    scalar_kernels()[t].dequantize_row(row.data(), out.data(), n);
    return out;
}

TEST(TensorKernels, TableCoversExactlyTheSupportedTypes) {
    for (uint32_t raw = 0; raw < kTypeSlots; ++raw) {
        const auto info = type_info(raw);
        const TypeKernels& k = scalar_kernels().types[raw];
        const bool supported = info && info->supported;
        EXPECT_EQ(k.dot != nullptr, supported) << raw;
        EXPECT_EQ(k.dequantize_row != nullptr, supported) << raw;
        if (supported) {
            EXPECT_NE(k.quantize_row, nullptr) << raw;  // every supported type has one
            // Float weights take f32 activations; MXFP4 (39) 16-bit ones, whose rounding is
            // below the fixture references' tolerance; every other type 8-bit ones.
            const bool is_float = raw == 0 || raw == 1 || raw == 30;
            const ActFormat want = is_float    ? ActFormat::F32
                                   : raw == 39 ? ActFormat::Q16_32
                                               : ActFormat::Q8_32;
            EXPECT_EQ(k.act_format, want) << raw;
        }
    }
    EXPECT_NE(active_kernels().quantize_act[static_cast<size_t>(ActFormat::Q8_32)], nullptr);
    EXPECT_EQ(act_row_bytes(ActFormat::Q8_32, 256), 8 * sizeof(BlockQ8_32));
    EXPECT_EQ(act_row_bytes(ActFormat::F32, 10), 40u);
    EXPECT_NE(active_kernels().quantize_act[static_cast<size_t>(ActFormat::Q16_32)], nullptr);
    EXPECT_EQ(act_row_bytes(ActFormat::Q16_32, 256), 8 * sizeof(BlockQ16_32));
}

// ---- dequantization ------------------------------------------------------------------------

// Every element of random blocks equals the independent decoder's double result rounded once
// to float (the engine's products are exact, so only the final add/subtract rounds).
TEST(TensorKernels, DequantizeMatchesIndependentDecoder) {
    std::mt19937 rng(1);
    const int64_t n = 1024;
    for (TensorType t : quant_types()) {
        SCOPED_TRACE(type_name(t));
        for (int rep = 0; rep < 20; ++rep) {
            const auto row = random_row(t, n, rng);
            const auto got = dequant(t, row, n);
            const auto want = ref_decode_row(t, row.data(), n);
            ASSERT_EQ(want.size(), static_cast<size_t>(n));
            for (int64_t i = 0; i < n; ++i) {
                ASSERT_EQ(got[i], static_cast<float>(want[i])) << "element " << i;
            }
        }
    }
    for (TensorType t : float_types()) {
        SCOPED_TRACE(type_name(t));
        const auto row = random_row(t, n, rng);
        const auto got = dequant(t, row, n);
        const auto want = ref_decode_row(t, row.data(), n);
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], static_cast<float>(want[i]));
    }
}

// Hand-built blocks with values worked out from the format description, for the bits that a
// random test could get right by symmetry (nibble order, which bit is "high", scale packing).
TEST(TensorKernels, DequantizeHandBuiltBlocks) {
    const uint16_t one = 0x3c00, half = 0x3800, two = 0x4000;
    float y[256];
    {
        BlockQ4_0 b{};
        b.d = half;
        for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | (15 - j) << 4);
        scalar_kernels()[TensorType::Q4_0].dequantize_row(&b, y, 32);
        for (int j = 0; j < 16; ++j) {
            EXPECT_EQ(y[j], 0.5f * (j - 8));
            EXPECT_EQ(y[j + 16], 0.5f * (7 - j));
        }
    }
    {
        BlockQ4_1 b{};
        b.d = two;
        b.m = 0xbc00;  // -1
        b.qs[3] = 0x51;
        scalar_kernels()[TensorType::Q4_1].dequantize_row(&b, y, 32);
        EXPECT_EQ(y[3], 2.0f * 1 - 1);
        EXPECT_EQ(y[19], 2.0f * 5 - 1);
        EXPECT_EQ(y[0], -1.0f);
    }
    {
        BlockQ5_0 b{};
        b.d = one;
        b.qh[0] = 0x01;  // element 0
        b.qh[2] = 0x02;  // element 17
        b.qh[3] = 0x80;  // element 31
        b.qs[0] = 0x3f;  // elements 0 (15) and 16 (3)
        b.qs[1] = 0x02;  // element 1 (2), element 17 (0)
        scalar_kernels()[TensorType::Q5_0].dequantize_row(&b, y, 32);
        EXPECT_EQ(y[0], (15 + 16) - 16.0f);
        EXPECT_EQ(y[16], 3 - 16.0f);
        EXPECT_EQ(y[1], 2 - 16.0f);
        EXPECT_EQ(y[17], 16 - 16.0f);
        EXPECT_EQ(y[31], 16 - 16.0f);
        EXPECT_EQ(y[30], -16.0f);
    }
    {
        BlockQ5_1 b{};
        b.d = half;
        b.m = two;
        b.qh[1] = 0x04;  // element 10
        b.qs[10] = 0x70;
        scalar_kernels()[TensorType::Q5_1].dequantize_row(&b, y, 32);
        EXPECT_EQ(y[10], 0.5f * 16 + 2);
        EXPECT_EQ(y[26], 0.5f * 7 + 2);
    }
    {
        BlockQ8_0 b{};
        b.d = half;
        b.qs[5] = -128;
        b.qs[6] = 127;
        scalar_kernels()[TensorType::Q8_0].dequantize_row(&b, y, 32);
        EXPECT_EQ(y[5], -64.0f);
        EXPECT_EQ(y[6], 63.5f);
    }
    {
        BlockIQ4_NL b{};
        b.d = half;
        b.qs[0] = 0xf0;
        scalar_kernels()[TensorType::IQ4_NL].dequantize_row(&b, y, 32);
        EXPECT_EQ(y[0], -63.5f);
        EXPECT_EQ(y[16], 56.5f);
        EXPECT_EQ(y[1], -63.5f);
    }
    {
        // Q2_K: element 130 = 128*1 + 32*0 + 2 -> bits 0..1 of qs[34]; element 200 =
        // 128 + 32*2 + 8 -> bits 4..5 of qs[40]. Groups 130/16 = 8, 200/16 = 12.
        BlockQ2_K b{};
        b.d = one;
        b.dmin = half;
        b.scales[8] = 0x35;   // scale 5, min 3
        b.scales[12] = 0x2f;  // scale 15, min 2
        b.qs[34] = 0x02;
        b.qs[40] = 0x30;
        scalar_kernels()[TensorType::Q2_K].dequantize_row(&b, y, 256);
        EXPECT_EQ(y[130], 5.0f * 2 - 1.5f);
        EXPECT_EQ(y[131], -1.5f);
        EXPECT_EQ(y[200], 15.0f * 3 - 1.0f);
        EXPECT_EQ(y[0], 0.0f);
    }
    {
        // Q3_K: element 70 = 32*2 + 6 (n=0, j=2): low bits 4..5 of qs[6], high bit 2 of
        // hmask[6]; group 4: low nibble of scales[4], high bits 0..1 of scales[8].
        // Element 250 (n=1, j=3, l=26): bits 6..7 of qs[58], bit 7 of hmask[26]; group 15:
        // high nibble of scales[7], bits 6..7 of scales[11].
        BlockQ3_K b{};
        b.d = half;
        for (int i = 0; i < 8; ++i) b.scales[i] = 0x00;
        b.scales[4] = 0x07;   // group 4 low = 7
        b.scales[8] = 0x02;   // group 0 high bits = 2 (value 32 -> scale 0); group 4 high = 0
        b.scales[8] |= 0x08;  // group 4 high bits = 2 -> 32 + 7 = 39 -> scale 7
        b.scales[7] = 0x90;   // group 15 low = 9
        b.scales[11] = 0x40;  // group 15 high = 1 -> 16 + 9 = 25 -> scale -7
        b.qs[6] = 0x30;       // element 70 q = 3
        b.hmask[6] = 0x04;    // element 70 high bit set -> no -4
        b.qs[58] = 0x40;      // element 250 q = 1, high bit clear -> 1 - 4 = -3
        scalar_kernels()[TensorType::Q3_K].dequantize_row(&b, y, 256);
        EXPECT_EQ(y[70], 0.5f * 7 * 3);
        EXPECT_EQ(y[250], 0.5f * -7 * -3);
        EXPECT_EQ(y[0], 0.0f);              // group 0 scale 32 - 32 = 0
        EXPECT_EQ(y[20], 0.5f * -32 * -4);  // group 1: scale 0 - 32, q 0 - 4
    }
    {
        // Q4_K: sub-block 1 = elements 32..63 (high nibbles of qs[0..31]); sub-block 6 =
        // elements 192..223 (low nibbles of qs[96..127]), scale (scales[10] & 15) |
        // (scales[2] >> 6) << 4, min (scales[10] >> 4) | (scales[6] >> 6) << 4.
        BlockQ4_K b{};
        b.d = one;
        b.dmin = half;
        b.scales[1] = 0x05;   // sub 1 scale 5
        b.scales[5] = 0x03;   // sub 1 min 3
        b.scales[2] = 0x80;   // sub 6 scale high bits = 2
        b.scales[10] = 0x14;  // sub 6 scale low = 4, min low = 1
        b.scales[6] = 0x40;   // sub 6 min high = 1 (and sub 2 min 0)
        b.qs[0] = 0x90;       // element 32 -> 9
        b.qs[96] = 0x0b;      // element 192 -> 11
        scalar_kernels()[TensorType::Q4_K].dequantize_row(&b, y, 256);
        EXPECT_EQ(y[32], 5.0f * 9 - 1.5f);
        EXPECT_EQ(y[192], 36.0f * 11 - 0.5f * 17);
        EXPECT_EQ(y[0], 0.0f);
    }
    {
        // Q5_K: element 100 = 64 + 32 + 4: high nibble of qs[36], fifth bit = bit 3 of qh[4].
        BlockQ5_K b{};
        b.d = two;
        b.dmin = one;
        b.scales[3] = 0x02;  // sub 3 scale 2
        b.scales[7] = 0x01;  // sub 3 min 1
        b.qs[36] = 0x60;
        b.qh[4] = 0x08;
        scalar_kernels()[TensorType::Q5_K].dequantize_row(&b, y, 256);
        EXPECT_EQ(y[100], 4.0f * (6 + 16) - 1.0f);
        EXPECT_EQ(y[110], 4.0f * 0 - 1.0f);  // sub-block 3 too: high nibble of qs[46], qh clear
        EXPECT_EQ(y[68], 0.0f);              // sub-block 2: scale 0, min 0
    }
    {
        // Q6_K: element 200 = 128 + 64 + 8 (n=1, k=2): high nibble of ql[64 + 8], bits 4..5 of
        // qh[32 + 8], scale index 200/16 = 12.
        BlockQ6_K b{};
        b.d = half;
        b.scales[12] = -3;
        b.ql[72] = 0x50;
        b.qh[40] = 0x20;  // high bits 2
        scalar_kernels()[TensorType::Q6_K].dequantize_row(&b, y, 256);
        EXPECT_EQ(y[200], 0.5f * -3 * ((5 | 2 << 4) - 32));
        EXPECT_EQ(y[136], 0.0f);  // scale 0 (group 8)
    }
    {
        // IQ4_XS: sub-block 5's scale: high nibble of scales_l[2] (3), bits 10..11 of scales_h
        // (2) -> 35 - 32 = 3. Element 177 = 160 + 17 is the high nibble of qs[16 * 5 + 1].
        BlockIQ4_XS b{};
        b.d = half;
        b.scales_l[2] = 0x30;
        b.scales_h = 2 << 10;
        b.qs[81] = 0xf0;
        scalar_kernels()[TensorType::IQ4_XS].dequantize_row(&b, y, 256);
        EXPECT_EQ(y[177], 0.5f * 3 * 113);
        EXPECT_EQ(y[161], 0.5f * 3 * -127);
        EXPECT_EQ(y[128], 0.5f * -32 * -127);  // sub-block 4: scale 0 - 32, codebook entry 0
        EXPECT_EQ(y[0], 0.5f * -32 * -127);
    }
    {
        // IQ3_S: element 118 = 32 * 3 + 4 * 5 + 2: grid index qs[8 * 3 + 5] | bit 5 of qh[3]
        // << 8 = 257 (magnitudes 5, 7, 9, 5), sign = bit 22 of signs[12..15] (bit 6 of
        // signs[14]); sub-block 3's scale is the high nibble of scales[1] (2 -> 1 + 2 * 2 = 5).
        BlockIQ3_S b{};
        b.d = one;
        b.scales[1] = 0x20;
        b.qs[29] = 0x01;
        b.qh[3] = 0x20;
        b.signs[14] = 0x40;
        scalar_kernels()[TensorType::IQ3_S].dequantize_row(&b, y, 256);
        EXPECT_EQ(y[116], 5.0f * 5);
        EXPECT_EQ(y[117], 5.0f * 7);
        EXPECT_EQ(y[118], 5.0f * -9);
        EXPECT_EQ(y[119], 5.0f * 5);
        EXPECT_EQ(y[96], 5.0f * 1);  // index 0: magnitudes 1, 1, 1, 1
        EXPECT_EQ(y[0], 1.0f);       // sub-block 0: scale 1 + 2 * 0
    }
    {
        // MXFP4: scale 2^(130 - 128) = 4; nibbles as Q4_0; code 15 = -6 (doubled: -12).
        BlockMXFP4 b[2]{};
        b[0].e = 130;
        b[0].qs[3] = 0x9f;
        b[1].e = 0;  // the smallest scale, 2^-128 (subnormal)
        b[1].qs[0] = 0x07;
        scalar_kernels()[TensorType::MXFP4].dequantize_row(b, y, 64);
        EXPECT_EQ(y[3], 4.0f * -12);
        EXPECT_EQ(y[19], 4.0f * -1);
        EXPECT_EQ(y[0], 0.0f);
        EXPECT_EQ(y[32], 12.0f * 0x1p-128f);
        EXPECT_EQ(y[48], 0.0f);
    }
}

// ---- activation quantization ----------------------------------------------------------------

TEST(TensorKernels, ActivationQuantizationQ8_32) {
    std::mt19937 rng(3);
    std::normal_distribution<float> nd;
    const int64_t n = 512;
    std::vector<float> x(n);  // [n]
    for (auto& v : x) v = nd(rng);
    for (int j = 64; j < 96; ++j) x[j] = 0.0f;  // an all-zero block
    x[200] = 40.0f;                             // an outlier only coarsens its own block
    std::vector<BlockQ8_32> a(n / 32);          // [n / 32]
    active_kernels().quantize_act[static_cast<size_t>(ActFormat::Q8_32)](x.data(), a.data(), n);
    for (int64_t b = 0; b < n / 32; ++b) {
        float amax = 0;
        for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
        EXPECT_FLOAT_EQ(a[b].d, amax / 127);
        int sums[2] = {0, 0};
        for (int j = 0; j < 32; ++j) {
            const float err = std::fabs(a[b].d * a[b].qs[j] - x[b * 32 + j]);
            EXPECT_LE(err, a[b].d * 0.5f * 1.0001f + 1e-30f) << b << " " << j;
            EXPECT_LE(std::abs(a[b].qs[j]), 127);
            sums[j / 16] += a[b].qs[j];
        }
        EXPECT_EQ(a[b].s[0], sums[0]);
        EXPECT_EQ(a[b].s[1], sums[1]);
    }
    EXPECT_EQ(a[2].d, 0.0f);
    EXPECT_EQ(a[2].qs[5], 0);
}

// Prepares activations the way matmul does and returns them as doubles ([n]).
std::vector<double> prepared_values(ActFormat f, const std::vector<uint8_t>& act,
                                    const std::vector<float>& x) {
    std::vector<double> out(x.size());
    if (f == ActFormat::F32) {
        for (size_t i = 0; i < x.size(); ++i) out[i] = x[i];
        return out;
    }
    if (f == ActFormat::Q16_32) {  // q = 256 * hi + lo (blocks.h)
        const auto* a = reinterpret_cast<const BlockQ16_32*>(act.data());
        for (size_t i = 0; i < x.size(); ++i) {
            const auto& b = a[i / 32];
            out[i] = static_cast<double>(b.d) * (256.0 * b.hi[i % 32] + b.lo[i % 32]);
        }
        return out;
    }
    const auto* a = reinterpret_cast<const BlockQ8_32*>(act.data());
    for (size_t i = 0; i < x.size(); ++i)
        out[i] = static_cast<double>(a[i / 32].d) * a[i / 32].qs[i % 32];
    return out;
}

// The rounding step of prepared activation i: its block's d (Q8_32, Q16_32).
double act_step(ActFormat f, const std::vector<uint8_t>& act, int64_t i) {
    if (f == ActFormat::Q16_32) return reinterpret_cast<const BlockQ16_32*>(act.data())[i / 32].d;
    return reinterpret_cast<const BlockQ8_32*>(act.data())[i / 32].d;
}

// ---- dot products ---------------------------------------------------------------------------

// dot(w, prepared x) equals the double sum of dequantized weights times the prepared
// (dequantized) activations, up to float rounding of the accumulation.
TEST(TensorKernels, DotEqualsDequantizedProduct) {
    std::mt19937 rng(5);
    std::normal_distribution<float> nd;
    std::vector<TensorType> types = quant_types();
    types.insert(types.end(), float_types().begin(), float_types().end());
    for (TensorType t : types) {
        SCOPED_TRACE(type_name(t));
        const TypeKernels& k = scalar_kernels()[t];
        for (int64_t n : {256, 768, 4096}) {
            for (int rep = 0; rep < 10; ++rep) {
                const auto row = random_row(t, n, rng);
                std::vector<float> x(n);
                for (auto& v : x) v = nd(rng) * (rep % 3 == 0 ? 100.0f : 1.0f);
                std::vector<uint8_t> act(act_row_bytes(k.act_format, n));
                scalar_kernels().quantize_act[static_cast<size_t>(k.act_format)](x.data(),
                                                                                 act.data(), n);
                const auto a = prepared_values(k.act_format, act, x);
                const auto w = ref_decode_row(t, row.data(), n);
                double want = 0, mag = 0;
                for (int64_t i = 0; i < n; ++i) {
                    want += w[i] * a[i];
                    mag += std::fabs(w[i] * a[i]);
                }
                const float got = k.dot(n, row.data(), act.data());
                EXPECT_NEAR(got, want, 2e-6 * mag) << "n=" << n << " rep=" << rep;
                // And against the unrounded activations: the activation rounding error is at
                // most half a step (d/2) per element.
                if (k.act_format != ActFormat::F32) {
                    double exact = 0, bound = 0;
                    for (int64_t i = 0; i < n; ++i) {
                        exact += w[i] * x[i];
                        bound += std::fabs(w[i]) * act_step(k.act_format, act, i) * 0.5;
                    }
                    EXPECT_NEAR(got, exact, bound * 1.001 + 2e-6 * mag);
                } else {
                    EXPECT_NEAR(got, want, 1e-6 * mag);
                }
            }
        }
    }
}

// ---- reference quantizers -------------------------------------------------------------------

struct QuantCase {
    std::string name;
    std::vector<float> x;
};

std::vector<QuantCase> quant_cases(int64_t n) {
    std::mt19937 rng(11);
    std::normal_distribution<float> nd;
    std::uniform_real_distribution<float> ud(0.5f, 2.0f);
    std::vector<QuantCase> cases;
    auto make = [&](const std::string& name, auto fn) {
        QuantCase c{name, std::vector<float>(static_cast<size_t>(n))};
        for (int64_t i = 0; i < n; ++i) c.x[i] = fn(i);
        cases.push_back(std::move(c));
    };
    make("gaussian", [&](int64_t) { return nd(rng); });
    make("positive", [&](int64_t) { return ud(rng); });
    make("negative", [&](int64_t) { return -ud(rng); });
    make("outliers", [&](int64_t i) { return i % 97 == 3 ? 60.0f * nd(rng) : nd(rng); });
    make("zeros", [&](int64_t) { return 0.0f; });
    make("tiny", [&](int64_t) { return 1e-6f * nd(rng); });
    make("sparse", [&](int64_t i) { return i % 37 == 0 ? nd(rng) : 0.0f; });
    make("large", [&](int64_t) { return 300.0f * nd(rng); });
    return cases;
}

// Quantize -> dequantize: every element within half a quantization step of its input (the
// quantizers round scales up, so nothing is clipped), and the typical error is small.
TEST(TensorKernels, ReferenceQuantizersRoundTrip) {
    const int64_t n = 1024;
    struct Bound {
        TensorType type;
        double max_rel_rmse;  // rmse / rms on gaussian data
    };
    const Bound bounds[] = {
        {TensorType::Q8_0, 0.006}, {TensorType::Q4_0, 0.12},  {TensorType::Q4_1, 0.10},
        {TensorType::Q5_0, 0.06},  {TensorType::Q5_1, 0.05},  {TensorType::IQ4_NL, 0.12},
        {TensorType::Q2_K, 0.45},  {TensorType::Q3_K, 0.25},  {TensorType::Q4_K, 0.12},
        {TensorType::Q5_K, 0.06},  {TensorType::Q6_K, 0.03},  {TensorType::IQ4_XS, 0.12},
        {TensorType::IQ3_S, 0.30}, {TensorType::MXFP4, 0.15},
    };
    for (const Bound& bound : bounds) {
        const TensorType t = bound.type;
        SCOPED_TRACE(type_name(t));
        const TypeInfo& info = type_info(t);
        const TypeKernels& k = scalar_kernels()[t];
        ASSERT_NE(k.quantize_row, nullptr);
        for (const QuantCase& c : quant_cases(n)) {
            SCOPED_TRACE(c.name);
            std::vector<uint8_t> row(row_bytes(info, n));
            k.quantize_row(c.x.data(), row.data(), n);
            const auto y = dequant(t, row, n);
            double err2 = 0, sum2 = 0;
            for (int64_t b = 0; b < n / info.block_elems; ++b) {
                const auto ref = ref_decode_block(t, row.data() + b * info.block_bytes);
                float amax = 0;
                for (uint32_t j = 0; j < info.block_elems; ++j) {
                    amax = std::max(amax, std::fabs(c.x[b * info.block_elems + j]));
                }
                for (uint32_t j = 0; j < info.block_elems; ++j) {
                    const int64_t i = b * info.block_elems + j;
                    ASSERT_EQ(y[i], static_cast<float>(ref.value[j]));
                    const double err = std::fabs(static_cast<double>(y[i]) - c.x[i]);
                    const double tol = 0.5 * ref.step[j] * (1 + 1e-4) + 1e-6 * amax;
                    ASSERT_LE(err, tol) << "element " << i << " x=" << c.x[i] << " y=" << y[i];
                    err2 += err * err;
                    sum2 += static_cast<double>(c.x[i]) * c.x[i];
                }
            }
            if (c.name == "gaussian") {
                const double rel = std::sqrt(err2 / sum2);
                EXPECT_LT(rel, bound.max_rel_rmse);
                RecordProperty(type_name(t) + "_rel_rmse", std::to_string(rel));
            }
            if (c.name == "zeros") {
                for (float v : y) EXPECT_EQ(v, 0.0f);
            }
        }
    }
}

TEST(TensorKernels, FloatQuantizersRoundTrip) {
    std::mt19937 rng(13);
    std::normal_distribution<float> nd;
    const int64_t n = 300;
    std::vector<float> x(n);
    for (auto& v : x) v = nd(rng);
    for (TensorType t : float_types()) {
        SCOPED_TRACE(type_name(t));
        std::vector<uint8_t> row(row_bytes(type_info(t), n));
        scalar_kernels()[t].quantize_row(x.data(), row.data(), n);
        const auto y = dequant(t, row, n);
        for (int64_t i = 0; i < n; ++i) {
            const float rel = t == TensorType::F32   ? 0.0f
                              : t == TensorType::F16 ? 0x1p-11f
                                                     : 0x1p-8f;
            EXPECT_LE(std::fabs(y[i] - x[i]), rel * std::fabs(x[i]));
        }
    }
}

}  // namespace
}  // namespace ember
