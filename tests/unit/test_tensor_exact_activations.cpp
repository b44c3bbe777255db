// Activations::Exact (matmul.h, KernelTable::exact in traits.h): quantized weight rows times
// f32 activations exactly as given.
//  * Against a double-precision reference built from the scalar table's dequantize_row, within
//    float summation error only, on activations with outliers (~1e4 among ~1) where the 8-bit
//    (and MXFP4's 16-bit) activation blocks of the Quantized path lose orders of magnitude more.
//  * Batches equal single tokens bit for bit on every SIMD level: the AVX2/AVX-512 kernels
//    decode weights in registers for up to 4 tokens and dequantize tiles beyond, so the token
//    counts below cross that boundary, through matmul_serial and a two-thread matmul.
//  * The per-row dot equals the gemm result bit for bit; an Exact matrix is never written in
//    Panels16 (whose kernels only take quantized activations).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/tensor/cpu_features.h"
#include "engine/tensor/matmul.h"
#include "engine/tensor/panels16.h"
#include "engine/tensor/traits.h"
#include "engine/tensor/types.h"
#include "engine/util/thread_pool.h"
#include "tests/support/kernel_levels.h"
#include "tests/support/quant_matrix.h"
#include "tests/support/random_vectors.h"

namespace ember {
namespace {

// 37 rows: odd, so the two-row micro-kernel leaves a one-row tail, and more than one 16-row tile
// and one 32-row task of the pool (so its second task starts mid-matrix). 512 columns: two
// super-blocks of the K types, sixteen 32-element blocks of the others.
constexpr int64_t kRows = 37;
constexpr int64_t kCols = 512;

// Float accumulation of 512 products in 16 (or 8) lanes of 32 (or 64) terms plus the final
// reduction rounds at most ~40 times, each by at most 2^-24 of the magnitude: 1e-5 of
// sum |w * x| is a worst-case bound with margin, and far below any activation rounding.
constexpr double kExactRelTol = 1e-5;

using test::activations_with_outliers;
using test::has_outliers;
using test::QMatrix;
using test::single_token_results;
using test::type_name;

std::vector<TensorType> exact_types() {
    return test::quantized_test_types();
}

using test::simd_levels;
using test::table_for;

QMatrix make_matrix(TensorType t, int64_t rows, int64_t cols, size_t pad, uint32_t seed) {
    return test::make_quant_matrix(t, rows, cols, pad, seed, Activations::Exact);
}

std::vector<float> activations(int64_t n_tokens, int64_t cols, uint32_t seed) {
    return activations_with_outliers(n_tokens, cols, seed);
}

// sum_k w[r][k] * x[t][k] in double over the scalar-dequantized row, and sum_k |w * x|.
struct RefValue {
    double value;
    double magnitude;
};
RefValue reference(const QMatrix& m, const float* xt, int64_t r) {
    const int64_t cols = m.view.cols;
    const float* w = m.deq.data() + r * cols;
    RefValue v{0.0, 0.0};
    for (int64_t k = 0; k < cols; ++k) {
        const double p = static_cast<double>(w[k]) * static_cast<double>(xt[k]);
        v.value += p;
        v.magnitude += std::fabs(p);
    }
    return v;
}

// Worst error of y [n_tokens x ldy] against the reference, in units of the exact tolerance,
// over the tokens `pick` accepts; fails the test at the first element beyond the tolerance when
// `require_exact`.
template <class Pick>
double worst_error(const QMatrix& m, const std::vector<float>& x, int64_t n_tokens,
                   const std::vector<float>& y, int64_t ldy, bool require_exact, Pick pick) {
    double worst = 0.0;
    for (int64_t t = 0; t < n_tokens; ++t) {
        if (!pick(t)) continue;
        for (int64_t r = 0; r < m.view.rows; ++r) {
            const RefValue want = reference(m, x.data() + t * m.view.cols, r);
            const double got = y[static_cast<size_t>(t * ldy + r)];
            const double tol = kExactRelTol * want.magnitude + 1e-30;
            const double err = std::fabs(got - want.value);
            if (require_exact) {
                EXPECT_LE(err, tol)
                    << "token " << t << " row " << r << ": got " << got << ", want " << want.value;
                if (err > tol) return err / tol;
            }
            worst = std::max(worst, err / tol);
        }
    }
    return worst;
}

bool same_bits(float a, float b) {
    return std::memcmp(&a, &b, sizeof a) == 0;
}

// 1. Against the double reference on every level (scalar included), through one-token calls
// (the SIMD kernels' in-register path) and one 8-token call (their tiled path); and the
// Quantized path's error on the outlier tokens, which must be far beyond that tolerance.
TEST(ExactActivations, MatchesDoubleReferenceWhereQuantizedActivationsFail) {
    constexpr int64_t kTokens = 8;
    std::vector<KernelLevel> levels = {KernelLevel::Scalar};
    for (KernelLevel l : simd_levels()) levels.push_back(l);
    const std::vector<float> x = activations(kTokens, kCols, 101);
    uint32_t seed = 200;
    for (TensorType t : exact_types()) {
        SCOPED_TRACE(type_name(t));
        const QMatrix m = make_matrix(t, kRows, kCols, 0, seed++);
        for (KernelLevel level : levels) {
            SCOPED_TRACE(kernel_level_name(level));
            const KernelTable& table = table_for(level);
            MatmulScratch scratch;
            std::vector<float> y(static_cast<size_t>(kTokens * kRows));
            auto all = [](int64_t) { return true; };

            for (int64_t tok = 0; tok < kTokens; ++tok) {
                matmul_serial(m.view, x.data() + tok * kCols, 1, y.data() + tok * kRows, kRows,
                              scratch, table);
            }
            worst_error(m, x, kTokens, y, kRows, true, all);

            matmul_serial(m.view, x.data(), kTokens, y.data(), kRows, scratch, table);
            const double exact_worst = worst_error(m, x, kTokens, y, kRows, true, all);

            // The same matrix with its type's own activation blocks, on the outlier tokens.
            MatrixView quantized = m.view;
            quantized.activations = Activations::Quantized;
            std::vector<float> yq(static_cast<size_t>(kTokens * kRows));
            matmul_serial(quantized, x.data(), kTokens, yq.data(), kRows, scratch, table);
            const double quantized_worst =
                worst_error(m, x, kTokens, yq, kRows, false, has_outliers);
            // 8-bit blocks lose the outliers' ~1-sized neighbours outright (~100x the exact
            // tolerance); MXFP4's 16-bit blocks round them to ~0.3 (~10x). Exact stays within it.
            EXPECT_GT(quantized_worst, 5.0) << "quantized activations were not measurably worse";
            EXPECT_GT(quantized_worst, 20.0 * std::max(exact_worst, 0.01));
            if (level == levels.back()) {
                std::printf("%-7s %-7s worst error / (1e-5 sum|wx|): exact %.4f, quantized %.1f\n",
                            type_name(t).c_str(), kernel_level_name(level), exact_worst,
                            quantized_worst);
            }
        }
    }
}

// 2. Every (row, token) of a batch of n tokens equals that token alone, bit for bit, on each
// SIMD level, through matmul_serial and through matmul with two threads (whose 32-row tasks
// split the 37 rows 32 + 5). Rows are padded (stride > row bytes) and y has a padded row stride
// whose padding must stay untouched.
TEST(ExactActivations, BatchesEqualSingleTokensBitForBit) {
    const std::vector<KernelLevel> levels = simd_levels();
    if (levels.empty()) GTEST_SKIP() << "no SIMD level on this CPU";
    constexpr int64_t kMaxTokens = 33;
    const std::vector<float> x = activations(kMaxTokens, kCols, 102);
    ThreadPool pool(2);
    const int64_t ldy = kRows + 3;
    const float sentinel = -12345.0f;
    uint32_t seed = 300;
    for (TensorType t : exact_types()) {
        SCOPED_TRACE(type_name(t));
        const QMatrix m = make_matrix(t, kRows, kCols, 4, seed++);
        for (KernelLevel level : levels) {
            SCOPED_TRACE(kernel_level_name(level));
            const KernelTable& table = table_for(level);
            const std::vector<float> single = single_token_results(m, x, kMaxTokens, table);
            MatmulScratch scratch;
            for (int64_t n : {1, 2, 3, 4, 5, 7, 16, 33}) {
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

// 3. The exact entry's dot (one row, one token) equals the gemm path's one-token result bit for
// bit on each SIMD level; and the scalar dot equals dot_f32's own order over the scalar
// dequantized row, as quants_scalar.cpp promises.
TEST(ExactActivations, DotEqualsGemmBitForBit) {
    constexpr int64_t kTokens = 4;
    const std::vector<float> x = activations(kTokens, kCols, 103);
    uint32_t seed = 400;
    for (TensorType t : exact_types()) {
        SCOPED_TRACE(type_name(t));
        const QMatrix m = make_matrix(t, kRows, kCols, 0, seed++);
        for (KernelLevel level : simd_levels()) {
            SCOPED_TRACE(kernel_level_name(level));
            const KernelTable& table = table_for(level);
            const TypeKernels& k = table.exact_for(t);
            ASSERT_NE(k.dot, nullptr);
            ASSERT_NE(k.gemm, nullptr) << "the SIMD exact entry should have a gemm";
            const std::vector<float> single = single_token_results(m, x, kTokens, table);
            for (int64_t tok = 0; tok < kTokens; ++tok) {
                for (int64_t r = 0; r < kRows; ++r) {
                    const float d = k.dot(kCols, m.bytes.data() + r * m.view.row_stride,
                                          x.data() + tok * kCols);
                    const float g = single[static_cast<size_t>(tok * kRows + r)];
                    ASSERT_TRUE(same_bits(d, g))
                        << "token " << tok << " row " << r << ": dot " << d << ", gemm " << g;
                }
            }
        }
        const TypeKernels& scalar_exact = scalar_kernels().exact_for(t);
        const TypeKernels& scalar_f32 = scalar_kernels()[TensorType::F32];
        ASSERT_EQ(scalar_exact.act_format, ActFormat::F32);
        for (int64_t tok = 0; tok < kTokens; ++tok) {
            for (int64_t r = 0; r < kRows; ++r) {
                const float* xt = x.data() + tok * kCols;
                const float d = scalar_exact.dot(kCols, m.bytes.data() + r * m.view.row_stride, xt);
                const float f = scalar_f32.dot(kCols, m.deq.data() + r * kCols, xt);
                ASSERT_TRUE(same_bits(d, f)) << "scalar: token " << tok << " row " << r;
            }
        }
    }
}

// The SIMD kernels document that each (row, token) accumulates as their float kernel does over
// the weights exactly as dequantize_row writes them: so the exact product equals, bit for bit,
// the same level's F32 product over the scalar-dequantized matrix, in register-decoded (1, 3
// tokens) and tiled (6 tokens) paths alike. A single rounding difference in the in-register
// decode would show here.
TEST(ExactActivations, EqualsFloatKernelOverDequantizedRows) {
    const std::vector<KernelLevel> levels = simd_levels();
    if (levels.empty()) GTEST_SKIP() << "no SIMD level on this CPU";
    constexpr int64_t kTokens = 6;
    const std::vector<float> x = activations(kTokens, kCols, 104);
    uint32_t seed = 500;
    for (TensorType t : exact_types()) {
        SCOPED_TRACE(type_name(t));
        const QMatrix m = make_matrix(t, kRows, kCols, 0, seed++);
        const MatrixView f32{TensorType::F32, m.deq.data(), kRows, kCols,
                             static_cast<size_t>(kCols) * sizeof(float)};
        for (KernelLevel level : levels) {
            SCOPED_TRACE(kernel_level_name(level));
            const KernelTable& table = table_for(level);
            MatmulScratch scratch;
            for (int64_t n : {1, 3, 6}) {
                std::vector<float> ye(static_cast<size_t>(n * kRows));
                std::vector<float> yf(static_cast<size_t>(n * kRows));
                matmul_serial(m.view, x.data(), n, ye.data(), kRows, scratch, table);
                matmul_serial(f32, x.data(), n, yf.data(), kRows, scratch, table);
                for (size_t i = 0; i < ye.size(); ++i) {
                    ASSERT_TRUE(same_bits(ye[i], yf[i]))
                        << "n_tokens " << n << " token " << i / kRows << " row " << i % kRows
                        << ": exact " << ye[i] << ", f32 " << yf[i];
                }
            }
        }
    }
}

// 4. Panels16 kernels read quantized activations only, so a Q4_K / Q6_K matrix marked Exact is
// never eligible for the rewrite, although the same matrix with Quantized activations is (on a
// table that has those kernels); and a Panels16 matrix marked Exact is refused, not multiplied
// by a kernel that cannot read it.
TEST(ExactActivations, NeverRewrittenIntoPanels16) {
    constexpr int64_t kPanelMatrixRows = 2 * kPanelRows;
    uint32_t seed = 600;
    for (TensorType t : {TensorType::Q4_K, TensorType::Q6_K}) {
        SCOPED_TRACE(type_name(t));
        const QMatrix m = make_matrix(t, kPanelMatrixRows, kCols, 0, seed++);
        MatrixView quantized = m.view;
        quantized.activations = Activations::Quantized;

        EXPECT_FALSE(can_use_panels16(m.view, active_kernels()));
        if (active_kernels()[t].gemm_panels16 != nullptr) {
            // The control: only the activations keep this matrix out of panels.
            EXPECT_TRUE(can_use_panels16(quantized, active_kernels()));
        }
        std::vector<KernelLevel> levels = {KernelLevel::Scalar};
        for (KernelLevel l : simd_levels()) levels.push_back(l);
        for (KernelLevel level : levels) {
            SCOPED_TRACE(kernel_level_name(level));
            const KernelTable& table = table_for(level);
            EXPECT_FALSE(can_use_panels16(m.view, table));
            EXPECT_EQ(table.exact_for(t).gemm_panels16, nullptr);

            MatrixView panels = m.view;
            panels.layout = WeightLayout::Panels16;
            std::vector<float> x(kCols, 1.0f), y(kPanelMatrixRows);
            MatmulScratch scratch;
            EXPECT_THROW(
                matmul_serial(panels, x.data(), 1, y.data(), kPanelMatrixRows, scratch, table),
                std::invalid_argument);
        }
    }
}

}  // namespace
}  // namespace ember
