// matmul() and dequantize_row(): against a double-precision reference, across thread counts
// and batch sizes, and on the real quantized tensors of the fixture GGUFs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "engine/gguf/gguf.h"
#include "engine/tensor/blocks.h"
#include "engine/tensor/matmul.h"
#include "engine/tensor/traits.h"
#include "engine/tensor/types.h"
#include "engine/util/thread_pool.h"
#include "tests/support/fixtures.h"
#include "tests/unit/test_tensor_ref.h"

namespace ember {
namespace {

using test::float_types;
using test::quant_types;
using test::random_row;
using test::ref_decode_row;

std::string type_name(TensorType t) {
    return std::string(type_info(t).name);
}

std::vector<TensorType> all_supported() {
    std::vector<TensorType> types = float_types();
    types.insert(types.end(), quant_types().begin(), quant_types().end());
    return types;
}

// A weight matrix of random rows, each row `stride` bytes apart (stride >= the row's size).
struct TestMatrix {
    std::vector<uint8_t> bytes;          // [rows x stride]
    std::vector<std::vector<double>> w;  // [rows][cols] decoded independently
    MatrixView view;
};

TestMatrix make_matrix(TensorType t, int64_t rows, int64_t cols, size_t pad, std::mt19937& rng) {
    TestMatrix m;
    const size_t rb = row_bytes(type_info(t), cols);
    const size_t stride = rb + pad;
    m.bytes.assign(stride * rows, 0xcd);
    for (int64_t r = 0; r < rows; ++r) {
        const auto row = random_row(t, cols, rng);
        std::memcpy(m.bytes.data() + r * stride, row.data(), rb);
        m.w.push_back(ref_decode_row(t, row.data(), cols));
    }
    m.view = MatrixView{t, m.bytes.data(), rows, cols, stride};
    return m;
}

// Largest activation integer of the type's activation format (0: f32, not rounded).
double act_levels(TensorType t) {
    switch (type_kernels(t).act_format) {
        case ActFormat::Q8_32:
            return 127.0;
        case ActFormat::Q16_32:
            return kQ16Max;
        case ActFormat::F32:
            break;
    }
    return 0.0;
}

// Checks y against sum_k w[r][k] * x[t][k] in double. For quantized weights the activations
// are rounded to 8 (or 16) bits per 32-element block: each contributes at most |w| * d / 2.
void check_against_reference(const TestMatrix& m, const std::vector<float>& x, int64_t n_tokens,
                             const std::vector<float>& y, int64_t ldy) {
    const int64_t rows = m.view.rows, cols = m.view.cols;
    const double levels = act_levels(m.view.type);
    for (int64_t t = 0; t < n_tokens; ++t) {
        const float* xt = x.data() + t * cols;  // [cols]
        std::vector<double> half_step(cols, 0.0);
        if (levels > 0) {
            for (int64_t b = 0; b < cols / 32; ++b) {
                float amax = 0;
                for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(xt[b * 32 + j]));
                for (int j = 0; j < 32; ++j) half_step[b * 32 + j] = amax / levels / 2;
            }
        }
        for (int64_t r = 0; r < rows; ++r) {
            double want = 0, mag = 0, bound = 0;
            for (int64_t k = 0; k < cols; ++k) {
                want += m.w[r][k] * xt[k];
                mag += std::fabs(m.w[r][k] * xt[k]);
                bound += std::fabs(m.w[r][k]) * half_step[k];
            }
            ASSERT_NEAR(y[t * ldy + r], want, bound * 1.001 + 4e-6 * mag + 1e-30)
                << "token " << t << " row " << r;
        }
        for (int64_t r = rows; r < ldy; ++r) {
            ASSERT_TRUE(std::isnan(y[t * ldy + r])) << "wrote past the row end at " << r;
        }
    }
}

TEST(Matmul, MatchesDoubleReferenceForEveryTypeThreadCountAndBatch) {
    std::mt19937 rng(21);
    std::normal_distribution<float> nd;
    const int64_t rows = 67, cols = 512;  // rows not a multiple of the 16-row split
    for (TensorType t : all_supported()) {
        SCOPED_TRACE(type_name(t));
        const TestMatrix m = make_matrix(t, rows, cols, t == TensorType::Q4_K ? 6 : 0, rng);
        for (int64_t n_tokens : {1, 3, 17}) {
            std::vector<float> x(n_tokens * cols);  // [n_tokens x cols]
            for (auto& v : x) v = nd(rng);
            const int64_t ldy = rows + 5;
            std::vector<float> first;  // the 1-thread result, for determinism
            for (int threads : {1, 2, 3, 4}) {
                SCOPED_TRACE("threads=" + std::to_string(threads) +
                             " tokens=" + std::to_string(n_tokens));
                ThreadPool pool(threads);
                MatmulScratch scratch;
                std::vector<float> y(n_tokens * ldy, std::numeric_limits<float>::quiet_NaN());
                matmul(pool, m.view, x.data(), n_tokens, y.data(), ldy, scratch);
                check_against_reference(m, x, n_tokens, y, ldy);
                if (threads == 1) {
                    first = y;
                } else {
                    for (size_t i = 0; i < y.size(); ++i) {
                        if (!std::isnan(first[i])) {
                            ASSERT_EQ(y[i], first[i]) << i;
                        }
                    }
                }
            }
        }
    }
}

TEST(Matmul, BatchRowsEqualSingleTokenResults) {
    std::mt19937 rng(22);
    std::normal_distribution<float> nd;
    const int64_t rows = 40, cols = 256, n_tokens = 9;
    ThreadPool pool(3);
    for (TensorType t : {TensorType::Q4_K, TensorType::F16, TensorType::Q8_0}) {
        SCOPED_TRACE(type_name(t));
        const TestMatrix m = make_matrix(t, rows, cols, 0, rng);
        std::vector<float> x(n_tokens * cols);
        for (auto& v : x) v = nd(rng);
        MatmulScratch scratch;
        std::vector<float> y(n_tokens * rows);
        matmul(pool, m.view, x.data(), n_tokens, y.data(), rows, scratch);
        for (int64_t tok = 0; tok < n_tokens; ++tok) {
            std::vector<float> y1(rows);
            matmul(pool, m.view, x.data() + tok * cols, 1, y1.data(), rows, scratch);
            for (int64_t r = 0; r < rows; ++r) ASSERT_EQ(y1[r], y[tok * rows + r]);
        }
    }
}

TEST(Matmul, ScratchGrowsOnlyAndIsReused) {
    std::mt19937 rng(23);
    const int64_t rows = 16, cols = 1024;
    const TestMatrix m = make_matrix(TensorType::Q4_0, rows, cols, 0, rng);
    ThreadPool pool(2);
    MatmulScratch scratch;
    std::vector<float> x(8 * cols, 0.25f), y(8 * rows);
    matmul(pool, m.view, x.data(), 8, y.data(), rows, scratch);
    const size_t size8 = scratch.act.size();
    const uint8_t* data8 = scratch.act.data();
    EXPECT_GE(size8, 8 * act_row_bytes(ActFormat::Q8_32, cols));
    matmul(pool, m.view, x.data(), 1, y.data(), rows, scratch);
    EXPECT_EQ(scratch.act.size(), size8);  // never shrinks
    EXPECT_EQ(scratch.act.data(), data8);  // and no reallocation when big enough
    matmul(pool, m.view, x.data(), 8, y.data(), rows, scratch);
    EXPECT_EQ(scratch.act.data(), data8);

    // Float weights need no scratch at all.
    const TestMatrix f = make_matrix(TensorType::F32, rows, cols, 0, rng);
    MatmulScratch unused;
    matmul(pool, f.view, x.data(), 8, y.data(), rows, unused);
    EXPECT_TRUE(unused.act.empty());
}

TEST(Matmul, DequantizeRowAndArgumentErrors) {
    std::mt19937 rng(24);
    const int64_t rows = 5, cols = 512;
    for (TensorType t : all_supported()) {
        SCOPED_TRACE(type_name(t));
        const TestMatrix m = make_matrix(t, rows, cols, 2, rng);
        std::vector<float> out(cols);
        for (int64_t r = 0; r < rows; ++r) {
            dequantize_row(m.view, r, out.data());
            for (int64_t k = 0; k < cols; ++k) ASSERT_EQ(out[k], static_cast<float>(m.w[r][k]));
        }
        EXPECT_THROW(dequantize_row(m.view, rows, out.data()), std::out_of_range);
        EXPECT_THROW(dequantize_row(m.view, -1, out.data()), std::out_of_range);
    }
    ThreadPool pool(1);
    MatmulScratch scratch;
    std::vector<uint8_t> bytes(4096);
    std::vector<float> x(512), y(4);
    MatrixView q8k{TensorType::Q8_K, bytes.data(), 1, 256, 292};
    EXPECT_THROW(matmul(pool, q8k, x.data(), 1, y.data(), 1, scratch), std::invalid_argument);
    MatrixView ragged{TensorType::Q4_0, bytes.data(), 1, 48, 0};
    EXPECT_THROW(matmul(pool, ragged, x.data(), 1, y.data(), 1, scratch), std::invalid_argument);
    // Zero tokens or rows: nothing to do, nothing touched.
    matmul(pool, ragged, x.data(), 0, y.data(), 1, scratch);
}

// ---- real tensors from the fixtures -----------------------------------------------------------

// Relative rmse bound of each quantized type against the F32 original of the same model.
double rel_rmse_bound(TensorType t) {
    switch (t) {
        case TensorType::F16:
            return 1e-3;
        case TensorType::BF16:
            return 6e-3;
        case TensorType::Q8_0:
            return 0.01;
        case TensorType::Q6_K:
            return 0.03;
        case TensorType::Q5_0:
        case TensorType::Q5_1:
        case TensorType::Q5_K:
            return 0.06;
        case TensorType::Q4_0:
        case TensorType::Q4_1:
        case TensorType::Q4_K:
        case TensorType::IQ4_NL:
        case TensorType::IQ4_XS:
            return 0.13;
        case TensorType::MXFP4:
            return 0.15;
        case TensorType::Q3_K:
        case TensorType::IQ3_S:
            return 0.25;
        case TensorType::Q2_K:
            return 0.5;
        default:
            return 0.0;
    }
}

// Every quantized tensor of the fixture models dequantizes (a) exactly as the independent
// decoder says and (b) close to the F32 original of the same model, which a wrong bit layout
// could not manage. Each file mixes types, so this covers the types the model tests meet.
TEST(Matmul, FixtureTensorsDequantizeCloseToTheF32Originals) {
    EMBER_REQUIRE_FIXTURE("quant/qfix-F32.gguf");
    const auto f32 = GgufFile::open(test::fixture_path("quant/qfix-F32.gguf"));
    const char* files[] = {"F16",    "BF16",   "Q8_0",   "Q4_0",   "Q4_1",   "Q5_0",
                           "Q5_1",   "Q2_K",   "Q3_K_M", "Q4_K_M", "Q5_K_M", "Q6_K",
                           "IQ4_NL", "IQ4_XS", "IQ3_S",  "IQ3_M",  "MXFP4"};
    std::vector<bool> seen(kTypeSlots, false);
    ThreadPool pool(2);
    MatmulScratch scratch;
    std::mt19937 rng(25);
    std::normal_distribution<float> nd;
    for (const char* name : files) {
        const std::string rel = std::string("quant/qfix-") + name + ".gguf";
        if (!test::fixture_exists(rel)) continue;
        SCOPED_TRACE(rel);
        const auto q = GgufFile::open(test::fixture_path(rel));
        for (const GgufTensorInfo& ti : q->tensors()) {
            if (ti.type == TensorType::F32 || ti.dims.size() != 2) continue;
            SCOPED_TRACE(ti.name + " " + type_name(ti.type));
            ASSERT_TRUE(type_info(ti.type).supported);
            seen[static_cast<uint32_t>(ti.type)] = true;
            const GgufTensorInfo* orig = f32->find_tensor(ti.name);
            ASSERT_NE(orig, nullptr);
            ASSERT_EQ(orig->type, TensorType::F32);
            ASSERT_EQ(orig->dims, ti.dims);
            const int64_t cols = ti.dims[0], rows = ti.dims[1];
            const MatrixView w{ti.type, ti.data, rows, cols, row_bytes(type_info(ti.type), cols)};
            std::vector<float> row(cols);  // [cols]
            double err2 = 0, sum2 = 0;
            for (int64_t r = 0; r < rows; ++r) {
                dequantize_row(w, r, row.data());
                const auto want = ref_decode_row(
                    ti.type, static_cast<const uint8_t*>(ti.data) + r * w.row_stride, cols);
                const float* o = reinterpret_cast<const float*>(orig->data) + r * cols;
                for (int64_t k = 0; k < cols; ++k) {
                    ASSERT_EQ(row[k], static_cast<float>(want[k])) << r << "," << k;
                    err2 += (row[k] - static_cast<double>(o[k])) * (row[k] - o[k]);
                    sum2 += static_cast<double>(o[k]) * o[k];
                }
            }
            const double rel_rmse = std::sqrt(err2 / sum2);
            EXPECT_LT(rel_rmse, rel_rmse_bound(ti.type));

            // matmul on the real tensor for a few tokens, against the decoded weights.
            const int64_t n_tokens = 3;
            std::vector<float> x(n_tokens * cols), y(n_tokens * rows);
            for (auto& v : x) v = nd(rng);
            matmul(pool, w, x.data(), n_tokens, y.data(), rows, scratch);
            const double levels = act_levels(ti.type);
            for (int64_t r = 0; r < rows; r += 7) {
                const auto wr = ref_decode_row(
                    ti.type, static_cast<const uint8_t*>(ti.data) + r * w.row_stride, cols);
                for (int64_t t = 0; t < n_tokens; ++t) {
                    double want = 0, mag = 0, bound = 0;
                    for (int64_t k = 0; k < cols; ++k) {
                        want += wr[k] * x[t * cols + k];
                        mag += std::fabs(wr[k] * x[t * cols + k]);
                    }
                    if (levels > 0) {
                        for (int64_t b = 0; b < cols / 32; ++b) {
                            float amax = 0;
                            for (int j = 0; j < 32; ++j) {
                                amax = std::max(amax, std::fabs(x[t * cols + b * 32 + j]));
                            }
                            for (int j = 0; j < 32; ++j)
                                bound += std::fabs(wr[b * 32 + j]) * amax / (2 * levels);
                        }
                    }
                    ASSERT_NEAR(y[t * rows + r], want, bound * 1.001 + 4e-6 * mag);
                }
            }
        }
    }
    for (TensorType t : all_supported()) {
        if (t == TensorType::F32) continue;
        EXPECT_TRUE(seen[static_cast<uint32_t>(t)]) << "no fixture tensor of type " << type_name(t);
    }
}

}  // namespace
}  // namespace ember
