// Activations::Wide (matmul.h, KernelTable::wide in traits.h): quantized weight rows times
// activations quantized to 16-bit blocks (Q16_32: two byte planes, exact integer sums per group).
//  * Against a double-precision reference over the scalar-dequantized rows and the activations
//    as given, within the bound that 16-bit rounding implies (each element off by at most half
//    its block's step amax / 32639, plus float summation), on activations with ~1e4 outliers
//    among ~1, where 8-bit blocks lose ~100 times more; on every level, the scalar reference
//    included.
//  * Batches equal single tokens bit for bit where the wide kernels are SIMD (AVX-512 VNNI), on
//    token counts that cross the micro-tiles (4 and 2 tokens) and the one-token chunked path,
//    through matmul_serial and a two-thread matmul; the per-row dot equals the gemm bit for bit.
//  * The SIMD activation quantizer writes the scalar one's blocks byte for byte.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "engine/tensor/blocks.h"
#include "engine/tensor/cpu_features.h"
#include "engine/tensor/matmul.h"
#include "engine/tensor/traits.h"
#include "engine/tensor/types.h"
#include "engine/util/thread_pool.h"
#include "tests/support/kernel_levels.h"
#include "tests/support/quant_matrix.h"
#include "tests/support/random_vectors.h"

namespace ember {
namespace {

// 37 rows: odd, more than two 16-row panels, and split 32 + 5 by the pool's tasks. 512 columns:
// two super-blocks of the K types, sixteen 32-element blocks of the others.
constexpr int64_t kRows = 37;
constexpr int64_t kCols = 512;
// Float summation of 512 products (exact integer group sums, then ~16-32 float steps): well
// within 1e-5 of sum |w * x|.
constexpr double kFloatRelTol = 1e-5;

using test::activations_with_outliers;
using test::QMatrix;
using test::single_token_results;
using test::type_name;

std::vector<TensorType> quantized_types() {
    return test::quantized_test_types();
}

using test::simd_levels;
using test::table_for;

// The SIMD levels whose wide entries are SIMD kernels (their batch contract is tested).
std::vector<KernelLevel> wide_levels() {
    std::vector<KernelLevel> out;
    for (KernelLevel l : simd_levels()) {
        if (table_for(l).wide_simd) out.push_back(l);
    }
    return out;
}

QMatrix make_matrix(TensorType t, int64_t rows, int64_t cols, size_t pad, uint32_t seed) {
    return test::make_quant_matrix(t, rows, cols, pad, seed, Activations::Wide);
}

std::vector<float> activations(int64_t n_tokens, int64_t cols, uint32_t seed) {
    return activations_with_outliers(n_tokens, cols, seed);
}

// The double product over the dequantized row and the activations as given, and the bound the
// wide path must meet: half a 16-bit step of each element's block times |w|, plus float
// summation error.
struct Expected {
    double value;
    double bound;
};
Expected expected(const QMatrix& m, const float* xt, int64_t r) {
    const int64_t cols = m.view.cols;
    const float* w = m.deq.data() + r * cols;
    Expected e{0.0, 0.0};
    double magnitude = 0.0;
    for (int64_t b = 0; b < cols / 32; ++b) {
        double amax = 0.0;
        for (int64_t j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(double{xt[b * 32 + j]}));
        const double half_step = 0.5 * amax / kQ16Max * (1.0 + 1e-6);
        for (int64_t j = 0; j < 32; ++j) {
            const int64_t k = b * 32 + j;
            const double p = double{w[k]} * double{xt[k]};
            e.value += p;
            magnitude += std::fabs(p);
            e.bound += std::fabs(double{w[k]}) * half_step;
        }
    }
    e.bound += kFloatRelTol * magnitude + 1e-30;
    return e;
}

// Worst |error| / bound over y [n_tokens x ldy] on the tokens `pick` accepts.
template <class Pick>
double worst_ratio(const QMatrix& m, const std::vector<float>& x, int64_t n_tokens,
                   const std::vector<float>& y, int64_t ldy, Pick pick) {
    double worst = 0.0;
    for (int64_t t = 0; t < n_tokens; ++t) {
        if (!pick(t)) continue;
        for (int64_t r = 0; r < m.view.rows; ++r) {
            const Expected e = expected(m, x.data() + t * m.view.cols, r);
            const double err = std::fabs(double{y[static_cast<size_t>(t * ldy + r)]} - e.value);
            worst = std::max(worst, err / e.bound);
        }
    }
    return worst;
}

bool same_bits(float a, float b) {
    return std::memcmp(&a, &b, sizeof a) == 0;
}

// 1. Within the 16-bit bound on every level (one-token calls and one 8-token call), where the
// same matrix with 8-bit blocks misses it by far on the outlier tokens.
TEST(WideActivations, WithinSixteenBitBoundWhereEightBitBlocksFail) {
    constexpr int64_t kTokens = 8;
    std::vector<KernelLevel> levels = {KernelLevel::Scalar};
    for (KernelLevel l : simd_levels()) levels.push_back(l);
    const std::vector<float> x = activations(kTokens, kCols, 701);
    uint32_t seed = 800;
    auto all = [](int64_t) { return true; };
    auto outliers = [](int64_t t) { return t % 2 == 1; };
    for (TensorType t : quantized_types()) {
        SCOPED_TRACE(type_name(t));
        const QMatrix m = make_matrix(t, kRows, kCols, 0, seed++);
        for (KernelLevel level : levels) {
            SCOPED_TRACE(kernel_level_name(level));
            const KernelTable& table = table_for(level);
            ASSERT_EQ(table.wide_for(t).act_format, ActFormat::Q16_32);
            MatmulScratch scratch;
            std::vector<float> y(static_cast<size_t>(kTokens * kRows));
            for (int64_t tok = 0; tok < kTokens; ++tok) {
                matmul_serial(m.view, x.data() + tok * kCols, 1, y.data() + tok * kRows, kRows,
                              scratch, table);
            }
            EXPECT_LE(worst_ratio(m, x, kTokens, y, kRows, all), 1.0) << "one token at a time";
            matmul_serial(m.view, x.data(), kTokens, y.data(), kRows, scratch, table);
            const double wide = worst_ratio(m, x, kTokens, y, kRows, all);
            EXPECT_LE(wide, 1.0) << "8 tokens";

            if (t == TensorType::MXFP4) continue;  // its own activations are these 16-bit ones
            MatrixView quantized = m.view;
            quantized.activations = Activations::Quantized;
            std::vector<float> yq(static_cast<size_t>(kTokens * kRows));
            matmul_serial(quantized, x.data(), kTokens, yq.data(), kRows, scratch, table);
            const double eight = worst_ratio(m, x, kTokens, yq, kRows, outliers);
            // An 8-bit block next to a ~1e4 outlier rounds its ~1-sized values to zero (error
            // ~1 each), a 16-bit one to steps of ~0.3 (error ~0.08): beyond the bound, ~10x.
            EXPECT_GT(eight, 1.5) << "8-bit blocks stayed within the 16-bit bound";
            EXPECT_GT(eight, 5.0 * wide) << "8-bit blocks were not measurably worse";
            if (level == levels.back()) {
                std::printf("%-7s %-7s worst error / 16-bit bound: wide %.3f, 8-bit %.1f\n",
                            type_name(t).c_str(), kernel_level_name(level), wide, eight);
            }
        }
    }
}

// 2. Every (row, token) of a batch equals that token alone, bit for bit; padding untouched.
TEST(WideActivations, BatchesEqualSingleTokensBitForBit) {
    const std::vector<KernelLevel> levels = wide_levels();
    if (levels.empty()) GTEST_SKIP() << "no SIMD wide kernels on this CPU (AVX-512 VNNI)";
    constexpr int64_t kMaxTokens = 33;
    const std::vector<float> x = activations(kMaxTokens, kCols, 702);
    ThreadPool pool(2);
    const int64_t ldy = kRows + 3;
    const float sentinel = -12345.0f;
    uint32_t seed = 900;
    for (TensorType t : quantized_types()) {
        SCOPED_TRACE(type_name(t));
        const QMatrix m = make_matrix(t, kRows, kCols, 4, seed++);
        for (KernelLevel level : levels) {
            SCOPED_TRACE(kernel_level_name(level));
            const KernelTable& table = table_for(level);
            const std::vector<float> single = single_token_results(m, x, kMaxTokens, table);
            MatmulScratch scratch;
            for (int64_t n : {1, 2, 3, 4, 5, 7, 9, 16, 33}) {
                for (bool threaded : {false, true}) {
                    SCOPED_TRACE("n_tokens " + std::to_string(n) +
                                 (threaded ? " matmul(2 threads)" : " matmul_serial"));
                    std::vector<float> y(static_cast<size_t>(n * ldy), sentinel);
                    if (threaded) {
                        matmul(pool, m.view, x.data(), n, y.data(), ldy, scratch, table);
                    } else {
                        matmul_serial(m.view, x.data(), n, y.data(), ldy, scratch, table);
                    }
                    for (int64_t tok = 0; tok < n; ++tok) {
                        for (int64_t r = 0; r < kRows; ++r) {
                            const float got = y[static_cast<size_t>(tok * ldy + r)];
                            const float want = single[static_cast<size_t>(tok * kRows + r)];
                            ASSERT_TRUE(same_bits(got, want))
                                << "token " << tok << " row " << r << ": " << got << " vs " << want
                                << " alone";
                        }
                        for (int64_t r = kRows; r < ldy; ++r) {
                            ASSERT_TRUE(same_bits(y[static_cast<size_t>(tok * ldy + r)], sentinel))
                                << "wrote past the row end: token " << tok << " at " << r;
                        }
                    }
                }
            }
        }
    }
}

// 3. The wide entry's dot (one row, one token) equals the gemm's one-token result bit for bit.
TEST(WideActivations, DotEqualsGemmBitForBit) {
    const std::vector<KernelLevel> levels = wide_levels();
    if (levels.empty()) GTEST_SKIP() << "no SIMD wide kernels on this CPU (AVX-512 VNNI)";
    constexpr int64_t kTokens = 4;
    const std::vector<float> x = activations(kTokens, kCols, 703);
    uint32_t seed = 1000;
    for (TensorType t : quantized_types()) {
        SCOPED_TRACE(type_name(t));
        const QMatrix m = make_matrix(t, kRows, kCols, 0, seed++);
        for (KernelLevel level : levels) {
            SCOPED_TRACE(kernel_level_name(level));
            const KernelTable& table = table_for(level);
            const TypeKernels& k = table.wide_for(t);
            ASSERT_NE(k.gemm, nullptr) << "the SIMD wide entry should have a gemm";
            const std::vector<float> single = single_token_results(m, x, kTokens, table);
            std::vector<uint8_t> act(act_row_bytes(ActFormat::Q16_32, kCols));
            for (int64_t tok = 0; tok < kTokens; ++tok) {
                table.quantize_act[static_cast<size_t>(ActFormat::Q16_32)](x.data() + tok * kCols,
                                                                           act.data(), kCols);
                for (int64_t r = 0; r < kRows; ++r) {
                    const float d =
                        k.dot(kCols, m.bytes.data() + r * m.view.row_stride, act.data());
                    const float g = single[static_cast<size_t>(tok * kRows + r)];
                    ASSERT_TRUE(same_bits(d, g))
                        << "token " << tok << " row " << r << ": dot " << d << ", gemm " << g;
                }
            }
        }
    }
}

// 4. The SIMD quantizer writes the scalar reference's blocks byte for byte: random values,
// outliers, all-zero blocks, NaN, and values at the rounding boundary of the largest code.
TEST(WideActivations, SimdQuantizerMatchesScalarByteForByte) {
    const std::vector<KernelLevel> levels = simd_levels();
    if (levels.empty()) GTEST_SKIP() << "no SIMD level on this CPU";
    constexpr int64_t kN = 32 * 12;
    std::vector<float> x = activations(1, kN, 704);
    std::vector<float> outliers = activations(2, kN, 705);
    x.insert(x.end(), outliers.begin() + kN, outliers.end());
    for (int j = 0; j < 32; ++j) x[static_cast<size_t>(64 + j)] = 0.0f;  // an all-zero block
    x[100] = std::numeric_limits<float>::quiet_NaN();
    for (int j = 0; j < 32; ++j)
        x[static_cast<size_t>(160 + j)] = (j % 2 ? 1.0f : -1.0f) * (j + 0.5f);
    const int64_t n = static_cast<int64_t>(x.size());
    const auto fmt = static_cast<size_t>(ActFormat::Q16_32);
    std::vector<uint8_t> want(act_row_bytes(ActFormat::Q16_32, n));
    scalar_kernels().quantize_act[fmt](x.data(), want.data(), n);
    for (KernelLevel level : levels) {
        SCOPED_TRACE(kernel_level_name(level));
        std::vector<uint8_t> got(want.size(), 0x5a);
        table_for(level).quantize_act[fmt](x.data(), got.data(), n);
        for (size_t b = 0; b < want.size() / sizeof(BlockQ16_32); ++b) {
            ASSERT_EQ(std::memcmp(got.data() + b * sizeof(BlockQ16_32),
                                  want.data() + b * sizeof(BlockQ16_32), sizeof(BlockQ16_32)),
                      0)
                << "block " << b;
        }
    }
}

}  // namespace
}  // namespace ember
