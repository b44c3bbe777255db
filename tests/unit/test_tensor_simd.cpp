// The SIMD kernels of every level this machine runs (AVX2, AVX-512), each against the scalar
// reference: activation quantization and dequantization bit for bit, dots and matmuls within
// float-summation-order error, on random data and on edge cases (zero blocks, extreme scales,
// extreme quants, odd shapes, many batch sizes and thread counts).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
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
#include "tests/unit/test_tensor_ref.h"

namespace ember {
namespace {

using test::exponent_field_offsets;
using test::float_types;
using test::half_field_offsets;
using test::quant_types;
using test::random_row;

std::string type_name(TensorType t) {
    return std::string(type_info(t).name);
}

std::vector<TensorType> all_types() {
    std::vector<TensorType> types = float_types();
    types.insert(types.end(), quant_types().begin(), quant_types().end());
    return types;
}

using test::simd_levels;
using test::table_for;

// Edge-case rows. Every block of a quantized row gets the same treatment.
enum class Edge { Random, Zero, MaxScale, MinNormalScale, SubnormalScale, MaxQuants, MinQuants };

std::vector<uint8_t> edge_row(TensorType t, int64_t n, Edge e, std::mt19937& rng) {
    std::vector<uint8_t> row = random_row(t, n, rng);
    const TypeInfo& info = type_info(t);
    if (e == Edge::Random || info.block_elems == 1) {
        if (e == Edge::Zero) std::fill(row.begin(), row.end(), 0);
        return row;
    }
    const auto halves = half_field_offsets(t);
    const auto exponents = exponent_field_offsets(t);
    for (int64_t b = 0; b < n / info.block_elems; ++b) {
        uint8_t* blk = row.data() + b * info.block_bytes;
        auto is_scale = [&](size_t i) {
            for (int off : halves) {
                if (i == static_cast<size_t>(off) || i == static_cast<size_t>(off) + 1) return true;
            }
            for (int off : exponents) {
                if (i == static_cast<size_t>(off)) return true;
            }
            return false;
        };
        for (size_t i = 0; i < info.block_bytes; ++i) {
            if (is_scale(i)) continue;
            if (e == Edge::Zero) blk[i] = 0;
            if (e == Edge::MaxQuants) blk[i] = t == TensorType::Q8_0 ? 0x7f : 0xff;
            if (e == Edge::MinQuants) blk[i] = t == TensorType::Q8_0 ? 0x80 : 0x00;
        }
        uint16_t h = 0;
        uint8_t exponent = 0;  // e8m0 scale 2^(exponent - 128)
        switch (e) {
            case Edge::MaxScale:
                h = 0x7bff;      // 65504
                exponent = 144;  // 2^16, about as far as fp16 reaches
                break;
            case Edge::MinNormalScale:
                h = 0x0400;    // 2^-14
                exponent = 2;  // 2^-126, the smallest normal float
                break;
            case Edge::SubnormalScale:
                h = 0x0001;    // 2^-24
                exponent = 0;  // 2^-128, a subnormal float
                break;
            case Edge::Zero:
                h = 0;
                exponent = 0;  // zero codes make the block zero
                break;
            default:
                continue;
        }
        for (int off : halves) std::memcpy(blk + off, &h, 2);
        for (int off : exponents) blk[off] = exponent;
    }
    return row;
}

std::vector<float> random_x(int64_t n, std::mt19937& rng) {
    std::normal_distribution<float> nd;
    std::vector<float> x(static_cast<size_t>(n));
    for (auto& v : x) v = nd(rng);
    return x;
}

// sum_k |w_k * x_k| with w dequantized by the reference: the scale of the rounding differences a
// different summation order may cause.
double magnitude(TensorType t, const uint8_t* w, const float* x, int64_t n) {
    std::vector<float> wf(static_cast<size_t>(n));
    scalar_kernels()[t].dequantize_row(w, wf.data(), n);
    double mag = 0;
    for (int64_t k = 0; k < n; ++k) mag += std::fabs(static_cast<double>(wf[k]) * x[k]);
    return mag;
}

constexpr double kRelTol = 1e-5;

TEST(TensorSimd, CpuFeaturesAndLevels) {
    const CpuFeatures& f = cpu_features();
    EXPECT_LE(kernel_level(), max_kernel_level());
    if (max_kernel_level() >= KernelLevel::Avx2) {
        EXPECT_TRUE(f.avx2 && f.fma && f.f16c && f.os_ymm);
    }
    if (max_kernel_level() >= KernelLevel::Avx512) {
        EXPECT_TRUE(f.avx512vnni && f.os_zmm);
    }
    for (KernelLevel l : {KernelLevel::Scalar, KernelLevel::Avx2, KernelLevel::Avx512}) {
        EXPECT_EQ(parse_kernel_level(kernel_level_name(l)), l);
    }
    EXPECT_FALSE(parse_kernel_level("amx").has_value());
    EXPECT_STREQ(active_kernels().isa, kernel_level_name(kernel_level()));
    if (max_kernel_level() < KernelLevel::Avx512) {
        EXPECT_THROW(make_kernel_table(KernelLevel::Avx512), std::invalid_argument);
    }
    std::printf("kernel levels: max %s, active %s\n", kernel_level_name(max_kernel_level()),
                kernel_level_name(kernel_level()));
}

TEST(TensorSimd, EveryTypeHasSimdEntries) {
    for (KernelLevel l : simd_levels()) {
        const KernelTable& k = table_for(l);
        EXPECT_STREQ(k.isa, kernel_level_name(l));
        for (TensorType t : all_types()) {
            SCOPED_TRACE(type_name(t));
            EXPECT_EQ(k[t].act_format, scalar_kernels()[t].act_format);
            EXPECT_NE(k[t].dot, scalar_kernels()[t].dot);
            EXPECT_NE(k[t].gemm, nullptr);
            EXPECT_NE(k[t].gemm_scratch, nullptr);
        }
    }
}

TEST(TensorSimd, QuantizeActIsBitExact) {
    std::mt19937 rng(31);
    const int64_t n = 32 * 40;
    std::vector<float> x = random_x(n, rng);
    // Block 0 all zero, block 1 huge, block 2 tiny (subnormal), block 3 one outlier, block 4
    // values on rounding ties, block 5 with +-inf.
    for (int j = 0; j < 32; ++j) {
        x[j] = 0.0f;
        x[32 + j] *= 1e30f;
        x[64 + j] *= 1e-40f;
        x[96 + j] = j == 7 ? 1000.0f : x[96 + j];
        x[128 + j] = static_cast<float>(j - 16) * 0.5f;
    }
    x[160] = std::numeric_limits<float>::infinity();
    x[170] = -std::numeric_limits<float>::infinity();
    for (ActFormat f : {ActFormat::Q8_32, ActFormat::Q16_32}) {
        const auto fi = static_cast<size_t>(f);
        SCOPED_TRACE("format " + std::to_string(fi));
        const size_t bytes = act_row_bytes(f, n);
        std::vector<uint8_t> want(bytes), got(bytes);
        scalar_kernels().quantize_act[fi](x.data(), want.data(), n);
        for (KernelLevel l : simd_levels()) {
            SCOPED_TRACE(kernel_level_name(l));
            std::fill(got.begin(), got.end(), 0xcd);
            table_for(l).quantize_act[fi](x.data(), got.data(), n);
            for (size_t i = 0; i < bytes; ++i) ASSERT_EQ(got[i], want[i]) << "byte " << i;
        }
    }
}

TEST(TensorSimd, DequantizeIsBitExact) {
    std::mt19937 rng(32);
    const int64_t n = 512 + 256;
    for (KernelLevel l : simd_levels()) {
        SCOPED_TRACE(kernel_level_name(l));
        for (TensorType t : all_types()) {
            SCOPED_TRACE(type_name(t));
            for (Edge e : {Edge::Random, Edge::Zero, Edge::MaxScale, Edge::SubnormalScale,
                           Edge::MaxQuants, Edge::MinQuants}) {
                const auto row = edge_row(t, n, e, rng);
                std::vector<float> want(n), got(n, -1.0f);
                scalar_kernels()[t].dequantize_row(row.data(), want.data(), n);
                table_for(l)[t].dequantize_row(row.data(), got.data(), n);
                for (int64_t k = 0; k < n; ++k) {
                    ASSERT_EQ(std::memcmp(&got[k], &want[k], 4), 0)
                        << "element " << k << ": " << got[k] << " vs " << want[k];
                }
            }
        }
    }
    // Float rows of a length that is not a multiple of the vector.
    for (KernelLevel l : simd_levels()) {
        for (TensorType t : {TensorType::F16, TensorType::BF16}) {
            const auto row = random_row(t, 37, rng);
            std::vector<float> want(37), got(37);
            scalar_kernels()[t].dequantize_row(row.data(), want.data(), 37);
            table_for(l)[t].dequantize_row(row.data(), got.data(), 37);
            EXPECT_EQ(want, got);
        }
    }
}

TEST(TensorSimd, DotMatchesScalar) {
    std::mt19937 rng(33);
    for (KernelLevel l : simd_levels()) {
        SCOPED_TRACE(kernel_level_name(l));
        for (TensorType t : all_types()) {
            SCOPED_TRACE(type_name(t));
            const TypeKernels& ref = scalar_kernels()[t];
            const TypeKernels& simd = table_for(l)[t];
            const int64_t blk = type_info(t).block_elems == 1 ? 1 : type_info(t).block_elems;
            for (int64_t n :
                 {blk * 1, blk * 3, std::max<int64_t>(blk, 256) * 4, int64_t{1}, int64_t{17}}) {
                if (n % std::max<int64_t>(blk, 1) != 0) continue;
                if (blk > 1 && n % 32 != 0) continue;
                for (Edge e : {Edge::Random, Edge::Zero, Edge::MaxScale, Edge::MinNormalScale,
                               Edge::SubnormalScale, Edge::MaxQuants, Edge::MinQuants}) {
                    const auto w = edge_row(t, n, e, rng);
                    const auto x = random_x(n, rng);
                    std::vector<uint8_t> act(act_row_bytes(ref.act_format, n));
                    const void* a = x.data();
                    if (ref.act_format != ActFormat::F32) {
                        scalar_kernels().quantize_act[static_cast<size_t>(ref.act_format)](
                            x.data(), act.data(), n);
                        a = act.data();
                    }
                    const float want = ref.dot(n, w.data(), a);
                    const float got = simd.dot(n, w.data(), a);
                    const double mag = magnitude(t, w.data(), x.data(), n);
                    ASSERT_NEAR(got, want, kRelTol * mag + 1e-35)
                        << "n=" << n << " edge=" << static_cast<int>(e);
                }
            }
        }
    }
}

// A random weight matrix of `rows` rows (stride = row bytes + pad).
struct Matrix {
    std::vector<uint8_t> bytes;
    MatrixView view;
};

Matrix make_matrix(TensorType t, int64_t rows, int64_t cols, size_t pad, std::mt19937& rng,
                   Edge edge = Edge::Random) {
    Matrix m;
    const size_t rb = row_bytes(type_info(t), cols);
    const size_t stride = rb + pad;
    m.bytes.assign(stride * rows + 64, 0xcd);
    for (int64_t r = 0; r < rows; ++r) {
        // Mix edge rows among random ones so panels hold both.
        const auto row = edge_row(t, cols, r % 3 == 1 ? edge : Edge::Random, rng);
        std::memcpy(m.bytes.data() + r * stride, row.data(), rb);
    }
    m.view = MatrixView{t, m.bytes.data(), rows, cols, stride};
    return m;
}

std::vector<float> run_matmul(ThreadPool& pool, const MatrixView& w, const std::vector<float>& x,
                              int64_t n_tokens, int64_t ldy, const KernelTable& table) {
    MatmulScratch scratch;
    std::vector<float> y(static_cast<size_t>(n_tokens * ldy),
                         std::numeric_limits<float>::quiet_NaN());
    matmul(pool, w, x.data(), n_tokens, y.data(), ldy, scratch, table);
    return y;
}

void expect_close_to_scalar(const Matrix& m, const std::vector<float>& x, int64_t n_tokens,
                            const std::vector<float>& want, const std::vector<float>& got,
                            int64_t ldy) {
    const int64_t cols = m.view.cols;
    for (int64_t t = 0; t < n_tokens; ++t) {
        for (int64_t r = 0; r < m.view.rows; ++r) {
            const double mag = magnitude(
                m.view.type, static_cast<const uint8_t*>(m.view.data) + r * m.view.row_stride,
                x.data() + t * cols, cols);
            ASSERT_NEAR(got[t * ldy + r], want[t * ldy + r], kRelTol * mag + 1e-35)
                << "token " << t << " row " << r;
        }
        for (int64_t r = m.view.rows; r < ldy; ++r) {
            ASSERT_TRUE(std::isnan(got[t * ldy + r])) << "wrote past the row end at " << r;
        }
    }
}

TEST(TensorSimd, MatmulMatchesScalarAcrossShapesBatchesAndThreads) {
    std::mt19937 rng(34);
    ThreadPool pool1(1), pool2(2), pool3(3);
    for (KernelLevel l : simd_levels()) {
        SCOPED_TRACE(kernel_level_name(l));
        const KernelTable& table = table_for(l);
        for (TensorType t : all_types()) {
            SCOPED_TRACE(type_name(t));
            const bool k_quant = type_info(t).block_elems == 256;
            const int64_t cols = type_info(t).block_elems == 1 ? 77 : k_quant ? 512 : 96;
            for (int64_t rows : {1, 7, 33, 67}) {
                const Matrix m = make_matrix(t, rows, cols, rows == 33 ? 2 : 0, rng);
                for (int64_t n_tokens : {1, 2, 3, 5, 17}) {
                    SCOPED_TRACE("rows=" + std::to_string(rows) +
                                 " tokens=" + std::to_string(n_tokens));
                    const auto x = random_x(n_tokens * cols, rng);
                    const int64_t ldy = rows + 3;
                    const auto want = run_matmul(pool1, m.view, x, n_tokens, ldy, scalar_kernels());
                    const auto got = run_matmul(pool2, m.view, x, n_tokens, ldy, table);
                    expect_close_to_scalar(m, x, n_tokens, want, got, ldy);
                    // Other thread counts: bitwise the same.
                    for (ThreadPool* p : {&pool1, &pool3}) {
                        const auto again = run_matmul(*p, m.view, x, n_tokens, ldy, table);
                        for (size_t i = 0; i < got.size(); ++i) {
                            if (!std::isnan(got[i])) {
                                ASSERT_EQ(again[i], got[i]) << i;
                            }
                        }
                    }
                }
            }
        }
    }
}

TEST(TensorSimd, MatmulEdgeCasesAndLargeBatches) {
    std::mt19937 rng(35);
    ThreadPool pool(2);
    for (KernelLevel l : simd_levels()) {
        SCOPED_TRACE(kernel_level_name(l));
        for (TensorType t : all_types()) {
            SCOPED_TRACE(type_name(t));
            const int64_t cols = type_info(t).block_elems == 256 ? 256 : 64;
            for (Edge e : {Edge::Zero, Edge::MaxScale, Edge::MinNormalScale, Edge::SubnormalScale,
                           Edge::MaxQuants, Edge::MinQuants}) {
                SCOPED_TRACE("edge=" + std::to_string(static_cast<int>(e)));
                const Matrix m = make_matrix(t, 50, cols, 0, rng, e);
                for (int64_t n_tokens : {1, 4, 64}) {
                    const auto x = random_x(n_tokens * cols, rng);
                    const auto want = run_matmul(pool, m.view, x, n_tokens, 50, scalar_kernels());
                    const auto got = run_matmul(pool, m.view, x, n_tokens, 50, table_for(l));
                    expect_close_to_scalar(m, x, n_tokens, want, got, 50);
                }
            }
        }
    }
}

// Long rows: decode-sized calls split K into chunks with carried totals (a remainder chunk
// included), larger batches do not; both must agree with the reference and with each other.
TEST(TensorSimd, LongRowsAcrossKChunks) {
    std::mt19937 rng(39);
    ThreadPool pool(2);
    for (KernelLevel l : simd_levels()) {
        SCOPED_TRACE(kernel_level_name(l));
        for (TensorType t : all_types()) {
            SCOPED_TRACE(type_name(t));
            const int64_t cols = type_info(t).block_elems == 256 ? 256 * 5 : 32 * 37;
            const Matrix m = make_matrix(t, 35, cols, 0, rng);
            const auto x = random_x(9 * cols, rng);
            for (int64_t n_tokens : {1, 4, 9}) {
                SCOPED_TRACE("tokens=" + std::to_string(n_tokens));
                const std::vector<float> xt(x.begin(), x.begin() + n_tokens * cols);
                const auto want = run_matmul(pool, m.view, xt, n_tokens, 35, scalar_kernels());
                const auto got = run_matmul(pool, m.view, xt, n_tokens, 35, table_for(l));
                expect_close_to_scalar(m, xt, n_tokens, want, got, 35);
                const auto all = run_matmul(pool, m.view, x, 9, 35, table_for(l));
                for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], all[i]) << i;
            }
        }
    }
}

// A token's outputs must not depend on the batch it came in (nor on its place in it), so the
// KV cache is the same however a prompt is split.
TEST(TensorSimd, BatchResultsEqualSingleTokenResults) {
    std::mt19937 rng(36);
    ThreadPool pool(2);
    for (KernelLevel l : simd_levels()) {
        SCOPED_TRACE(kernel_level_name(l));
        for (TensorType t : all_types()) {
            SCOPED_TRACE(type_name(t));
            const int64_t cols = type_info(t).block_elems == 256 ? 256 : 160;
            const int64_t rows = 45, n_tokens = 13;
            const Matrix m = make_matrix(t, rows, cols, 0, rng);
            const auto x = random_x(n_tokens * cols, rng);
            const auto all = run_matmul(pool, m.view, x, n_tokens, rows, table_for(l));
            for (int64_t tok = 0; tok < n_tokens; ++tok) {
                const std::vector<float> xt(x.begin() + tok * cols, x.begin() + (tok + 1) * cols);
                const auto one = run_matmul(pool, m.view, xt, 1, rows, table_for(l));
                for (int64_t r = 0; r < rows; ++r)
                    ASSERT_EQ(one[r], all[tok * rows + r]) << tok << "," << r;
            }
        }
    }
}

// matmul_serial runs inside a parallel section (one task per matrix here, each with its own
// scratch) and gives bitwise matmul()'s results, e.g. for attention over a strided F16 K cache.
TEST(TensorSimd, SerialMatmulInsideParallelTasks) {
    std::mt19937 rng(40);
    ThreadPool pool(2);
    const std::vector<TensorType> types = all_types();
    std::vector<Matrix> ms;
    std::vector<std::vector<float>> xs, want;
    for (TensorType t : types) {
        const int64_t cols = type_info(t).block_elems == 256 ? 256 : 64;
        // Rows 2 * cols bytes apart: every other row of a wider matrix, as K-cache heads are.
        Matrix m = make_matrix(t, 42, cols, row_bytes(type_info(t), cols), rng);
        xs.push_back(random_x(3 * cols, rng));
        want.push_back(run_matmul(pool, m.view, xs.back(), 3, 42, active_kernels()));
        ms.push_back(std::move(m));
    }
    std::vector<std::vector<float>> got(types.size(), std::vector<float>(3 * 42));
    std::vector<MatmulScratch> scratch(types.size());
    pool.parallel_for(static_cast<int64_t>(types.size()), [&](int64_t i, int) {
        matmul_serial(ms[i].view, xs[i].data(), 3, got[i].data(), 42, scratch[i]);
    });
    for (size_t i = 0; i < types.size(); ++i) {
        SCOPED_TRACE(type_name(types[i]));
        for (size_t k = 0; k < got[i].size(); ++k) ASSERT_EQ(got[i][k], want[i][k]) << k;
    }
}

// The kernels follow one canonical summation order per (row, token), so the levels agree bit
// for bit as well (a kernel that drifts from the order shows up here first).
TEST(TensorSimd, LevelsAgreeBitForBit) {
    if (max_kernel_level() < KernelLevel::Avx512) GTEST_SKIP() << "needs AVX-512";
    std::mt19937 rng(37);
    ThreadPool pool(2);
    for (TensorType t : all_types()) {
        SCOPED_TRACE(type_name(t));
        const int64_t cols = type_info(t).block_elems == 256 ? 512 : 224;
        const Matrix m = make_matrix(t, 40, cols, 0, rng);
        const auto x = random_x(6 * cols, rng);
        const auto a = run_matmul(pool, m.view, x, 6, 40, table_for(KernelLevel::Avx2));
        const auto b = run_matmul(pool, m.view, x, 6, 40, table_for(KernelLevel::Avx512));
        for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << i;
    }
}

TEST(TensorSimd, ActiveTableMatmulMatchesScalarOnAWideMatrix) {
    // A shape of the real models (576 columns, 1536 rows) on the active table, 64 tokens.
    std::mt19937 rng(38);
    ThreadPool pool(2);
    for (TensorType t : {TensorType::Q8_0, TensorType::Q4_0, TensorType::Q4_K, TensorType::Q6_K,
                         TensorType::F16}) {
        SCOPED_TRACE(type_name(t));
        const int64_t cols = t == TensorType::Q4_K || t == TensorType::Q6_K ? 768 : 576;
        const Matrix m = make_matrix(t, 160, cols, 0, rng);
        const auto x = random_x(64 * cols, rng);
        const auto want = run_matmul(pool, m.view, x, 64, 160, scalar_kernels());
        const auto got = run_matmul(pool, m.view, x, 64, 160, active_kernels());
        expect_close_to_scalar(m, x, 64, want, got, 160);
    }
}

}  // namespace
}  // namespace ember
