// The CUDA weight kernels (engine/model/cuda/quant_kernels.cuh) against the CPU's
// dequantize_row: gemv within 1e-5 of a float64 reference (relative to the sum of |w * x|),
// the same bits for a token alone or in a batch, gemv_many equal to separate gemv calls (and its
// two-format decode launch to its batches), dequantize_rows and embed_rows bit-equal to the CPU.
// Skipped where no CUDA device is found.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "engine/model/cuda/layer_kernels.cuh"
#include "engine/model/cuda/quant_kernels.cuh"
#include "engine/tensor/blocks.h"
#include "engine/tensor/matmul.h"
#include "engine/tensor/quantize_scalar.h"
#include "engine/tensor/types.h"
#include "tests/gpu/device_buffer.h"

namespace ember::cuda {
namespace {

// A weight matrix on the host (file layout) and on the device.
struct TestMatrix {
    TensorType type;
    int64_t rows, cols;
    size_t row_stride;
    std::vector<uint8_t> host;
    std::unique_ptr<DeviceBuffer> device;

    MatrixView view() const {
        MatrixView v;
        v.type = type;
        v.data = host.data();
        v.rows = rows;
        v.cols = cols;
        v.row_stride = row_stride;
        return v;
    }
    bool tensor = false;  // DeviceMatrix::tensor_products
    DeviceMatrix device_matrix() const {
        DeviceMatrix m{type, device->ptr, rows, cols, row_stride};
        m.tensor_products = tensor;
        return m;
    }
    std::vector<float> dequantized_row(int64_t r) const {
        std::vector<float> out(static_cast<size_t>(cols));
        dequantize_row(view(), r, out.data());
        return out;
    }
};

using QuantizeFn = void (*)(const float*, void*, int64_t);

QuantizeFn quantizer(TensorType type) {
    switch (type) {
        case TensorType::Q4_0:
            return scalar::quantize_row_q4_0;
        case TensorType::Q8_0:
            return scalar::quantize_row_q8_0;
        case TensorType::Q4_K:
            return scalar::quantize_row_q4_k;
        case TensorType::Q5_K:
            return scalar::quantize_row_q5_k;
        case TensorType::Q6_K:
            return scalar::quantize_row_q6_k;
        case TensorType::MXFP4:
            return scalar::quantize_row_mxfp4;
        default:
            return nullptr;
    }
}

// Random values with a spread of magnitudes across rows and blocks, so that scales differ.
TestMatrix make_matrix(TensorType type, int64_t rows, int64_t cols, std::mt19937& rng) {
    const TypeInfo& info = type_info(type);
    TestMatrix m{type, rows, cols, row_bytes(info, static_cast<uint64_t>(cols)), {}, nullptr};
    m.host.resize(m.row_stride * static_cast<size_t>(rows));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_real_distribution<float> magnitude(0.05f, 2.0f);
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
        float block_magnitude = 1.0f;
        for (int64_t k = 0; k < cols; ++k) {
            if (k % 32 == 0) block_magnitude = magnitude(rng);  // scales differ block to block
            row[k] = normal(rng) * block_magnitude;
        }
        uint8_t* dst = m.host.data() + m.row_stride * static_cast<size_t>(r);
        if (type == TensorType::F32) {
            std::memcpy(dst, row.data(), row.size() * sizeof(float));
        } else if (type == TensorType::F16 || type == TensorType::BF16) {
            for (int64_t k = 0; k < cols; ++k) {
                const uint16_t h =
                    type == TensorType::F16 ? fp32_to_fp16(row[k]) : fp32_to_bf16(row[k]);
                std::memcpy(dst + 2 * k, &h, 2);
            }
        } else {
            quantizer(type)(row.data(), dst, cols);
        }
    }
    m.device = std::make_unique<DeviceBuffer>(m.host.size());
    EXPECT_NE(m.device->ptr, nullptr);
    EXPECT_EQ(cudaMemcpy(m.device->ptr, m.host.data(), m.host.size(), cudaMemcpyHostToDevice),
              cudaSuccess);
    return m;
}

// Normal activations, each token at its own scale (1e-3 .. 1e3) with an outlier every 97
// elements 1000 times larger: the range a product's splitting of activations must keep.
std::vector<float> random_activations(int64_t n, int64_t ld, std::mt19937& rng) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(n * ld));
    for (int64_t t = 0; t < n; ++t) {
        const float scale = std::pow(10.0f, static_cast<float>(t % 7 - 3));
        for (int64_t k = 0; k < ld; ++k) {
            x[t * ld + k] = normal(rng) * scale * (k % 97 == 5 ? 1000.0f : 1.0f);
        }
    }
    return x;
}

uint32_t bits(float f) {
    uint32_t b;
    std::memcpy(&b, &f, 4);
    return b;
}

// Runs gemv for n tokens of x (device, row stride ldx) and returns y [n x rows] (ldy = rows),
// poisoned with NaN before the launch.
std::vector<float> run_gemv(const TestMatrix& m, const float* x_dev, int64_t ldx, int64_t n) {
    DeviceBuffer y(static_cast<size_t>(n * m.rows) * sizeof(float));
    EXPECT_EQ(cudaMemset(y.ptr, 0xff, static_cast<size_t>(n * m.rows) * sizeof(float)),
              cudaSuccess);
    gemv(m.device_matrix(), x_dev, ldx, n, y.as<float>(), m.rows, nullptr);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    std::vector<float> out(static_cast<size_t>(n * m.rows));
    EXPECT_EQ(cudaMemcpy(out.data(), y.ptr, out.size() * sizeof(float), cudaMemcpyDeviceToHost),
              cudaSuccess);
    return out;
}

// Asserts that y[t][r] (r < m.rows) is within 1e-5 of the float64 dot product of the CPU's
// dequantized row r with token t of x (x[t * ldx ..]), relative to the sum of |w * x|.
void expect_near_reference(const TestMatrix& m, const std::vector<float>& x, int64_t ldx,
                           const std::vector<std::vector<float>>& y) {
    const auto tokens = static_cast<int64_t>(y.size());
    for (int64_t r = 0; r < m.rows; ++r) {
        const std::vector<float> w = m.dequantized_row(r);
        for (int64_t t = 0; t < tokens; ++t) {
            double sum = 0.0, abs_sum = 0.0;
            for (int64_t k = 0; k < m.cols; ++k) {
                const double p = static_cast<double>(w[k]) * x[t * ldx + k];
                sum += p;
                abs_sum += std::fabs(p);
            }
            const float got = y[t][r];
            ASSERT_FALSE(std::isnan(got)) << "row " << r << " token " << t << " not written";
            ASSERT_LE(std::fabs(got - sum), 1e-5 * abs_sum + 1e-30)
                << "row " << r << " token " << t << ": " << got << " vs " << sum;
        }
    }
}

// Runs gemv_many for n tokens of x (device, row stride ldx) over mats and returns each matrix's
// y [n x rows] (ldy = rows), poisoned with NaN before the launch.
std::vector<std::vector<float>> run_gemv_many(const std::vector<TestMatrix>& mats,
                                              const float* x_dev, int64_t ldx, int64_t n) {
    std::vector<std::unique_ptr<DeviceBuffer>> ys;
    std::vector<GemvOut> outs;
    for (const TestMatrix& m : mats) {
        const size_t bytes = static_cast<size_t>(n * m.rows) * sizeof(float);
        ys.push_back(std::make_unique<DeviceBuffer>(bytes));
        EXPECT_EQ(cudaMemset(ys.back()->ptr, 0xff, bytes), cudaSuccess);
        GemvOut o;
        o.w = m.device_matrix();
        o.y = ys.back()->as<float>();
        o.ldy = m.rows;
        outs.push_back(o);
    }
    gemv_many(outs.data(), static_cast<int>(outs.size()), x_dev, ldx, n, nullptr);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    std::vector<std::vector<float>> got;
    for (size_t i = 0; i < mats.size(); ++i) {
        got.emplace_back(static_cast<size_t>(n * mats[i].rows));
        EXPECT_EQ(cudaMemcpy(got[i].data(), ys[i]->ptr, got[i].size() * sizeof(float),
                             cudaMemcpyDeviceToHost),
                  cudaSuccess);
    }
    return got;
}

struct Shape {
    int64_t rows, cols;
};

class CudaQuant : public ::testing::TestWithParam<TensorType> {
protected:
    void SetUp() override {
        if (!has_device()) GTEST_SKIP() << "no CUDA device";
    }
    static std::vector<Shape> shapes(TensorType type) {
        // 2048 x 2048 and 300 x 4096: rows that 2 and 4 warps share (gemv_split), on a card of
        // 66 SMs or more.
        std::vector<Shape> s = {{333, 768}, {2048, 2048}, {77, 1536}, {1, 256}, {300, 4096}};
        if (type_info(type).block_elems == 32 || type_info(type).block_elems == 1) {
            s.push_back({45, 96});  // a width that is no multiple of 256
        }
        return s;
    }
};

// Each type through the CUDA cores, and the types the tensor-core gemv reads through it too.
TEST_P(CudaQuant, GemvMatchesReferenceAndIsBatchInvariant) {
    std::mt19937 rng(1234 + static_cast<int>(GetParam()));
    for (const Shape& shape : shapes(GetParam())) {
        for (const bool tensor : {false, true}) {
            TestMatrix m = make_matrix(GetParam(), shape.rows, shape.cols, rng);
            m.tensor = tensor;
            if (tensor && !on_tensor_cores(m.device_matrix())) continue;
            SCOPED_TRACE("shape " + std::to_string(shape.rows) + "x" + std::to_string(shape.cols) +
                         (tensor ? " on the tensor cores" : ""));
            const int64_t ldx = shape.cols + 4;  // a padded activation row
            const std::vector<float> x = random_activations(kGemvMaxTokens, ldx, rng);
            DeviceBuffer x_dev(x.size() * sizeof(float));
            CUDA_OK(
                cudaMemcpy(x_dev.ptr, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice));

            // Each token alone: the bits every batch must reproduce.
            std::vector<std::vector<float>> alone(kGemvMaxTokens);
            for (int64_t t = 0; t < kGemvMaxTokens; ++t) {
                alone[t] = run_gemv(m, x_dev.as<float>() + t * ldx, ldx, 1);
            }

            // Reference: float64 dot products of the CPU's dequantized rows.
            ASSERT_NO_FATAL_FAILURE(expect_near_reference(m, x, ldx, alone));

            for (int64_t n = 2; n <= kGemvMaxTokens; ++n) {
                const std::vector<float> y = run_gemv(m, x_dev.as<float>(), ldx, n);
                for (int64_t t = 0; t < n; ++t) {
                    for (int64_t r = 0; r < shape.rows; ++r) {
                        ASSERT_EQ(bits(y[t * shape.rows + r]), bits(alone[t][r]))
                            << "n " << n << " token " << t << " row " << r;
                    }
                }
            }
        }
    }
}

TEST_P(CudaQuant, DequantizeRowsIsBitExact) {
    std::mt19937 rng(99 + static_cast<int>(GetParam()));
    const TestMatrix m = make_matrix(GetParam(), 333, 768, rng);
    const int64_t row0 = 17, rows = 300;
    DeviceBuffer out(static_cast<size_t>(rows * m.cols) * sizeof(float));
    CUDA_OK(cudaMemset(out.ptr, 0xff, static_cast<size_t>(rows * m.cols) * sizeof(float)));
    dequantize_rows(m.device_matrix(), row0, rows, out.as<float>(), nullptr);
    CUDA_OK(cudaGetLastError());
    std::vector<float> got(static_cast<size_t>(rows * m.cols));
    CUDA_OK(cudaMemcpy(got.data(), out.ptr, got.size() * sizeof(float), cudaMemcpyDeviceToHost));
    for (int64_t i = 0; i < rows; ++i) {
        const std::vector<float> want = m.dequantized_row(row0 + i);
        for (int64_t k = 0; k < m.cols; ++k) {
            ASSERT_EQ(bits(got[i * m.cols + k]), bits(want[k]))
                << "row " << row0 + i << " col " << k;
        }
    }
}

TEST_P(CudaQuant, EmbedRowsScalesTheRows) {
    std::mt19937 rng(7 + static_cast<int>(GetParam()));
    const TestMatrix m = make_matrix(GetParam(), 1000, 512, rng);
    const std::vector<int32_t> ids = {5, 999, 0, 5, 123, 640, 1, 998};
    const float scale = 3.7f;
    DeviceBuffer ids_dev(ids.size() * sizeof(int32_t));
    CUDA_OK(
        cudaMemcpy(ids_dev.ptr, ids.data(), ids.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
    const size_t count = ids.size() * static_cast<size_t>(m.cols);
    DeviceBuffer out(count * sizeof(float));
    CUDA_OK(cudaMemset(out.ptr, 0xff, count * sizeof(float)));
    embed_rows(m.device_matrix(), ids_dev.as<int32_t>(), static_cast<int64_t>(ids.size()), scale,
               out.as<float>(), nullptr);
    CUDA_OK(cudaGetLastError());
    std::vector<float> got(count);
    CUDA_OK(cudaMemcpy(got.data(), out.ptr, count * sizeof(float), cudaMemcpyDeviceToHost));
    for (size_t t = 0; t < ids.size(); ++t) {
        const std::vector<float> want = m.dequantized_row(ids[t]);
        for (int64_t k = 0; k < m.cols; ++k) {
            ASSERT_EQ(bits(got[t * m.cols + k]), bits(want[k] * scale))
                << "id " << ids[t] << " col " << k;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Types, CudaQuant,
                         ::testing::Values(TensorType::F32, TensorType::F16, TensorType::BF16,
                                           TensorType::Q4_0, TensorType::Q8_0, TensorType::Q4_K,
                                           TensorType::Q5_K, TensorType::Q6_K, TensorType::MXFP4),
                         [](const ::testing::TestParamInfo<TensorType>& param_info) {
                             return std::string(type_info(param_info.param).name);
                         });

TEST(CudaQuantMany, GemvManyEqualsSeparateGemv) {
    if (!has_device()) GTEST_SKIP() << "no CUDA device";
    std::mt19937 rng(42);
    const int64_t cols = 1024;
    // Q/K/V of a Q4_K_M file: two Q4_K and a Q6_K, rows no multiple of a block's. At n = 1 the
    // Q4_K and Q6_K matrices share a launch (two formats); at this width every split is 1 (a
    // warp per row, gemv_split), in gemv_many as in gemv() alone.
    std::vector<TestMatrix> mats;
    mats.push_back(make_matrix(TensorType::Q4_K, 1000, cols, rng));
    mats.push_back(make_matrix(TensorType::Q4_K, 250, cols, rng));
    mats.push_back(make_matrix(TensorType::Q6_K, 259, cols, rng));
    mats.push_back(make_matrix(TensorType::Q8_0, 64, cols, rng));
    const std::vector<float> x = random_activations(kGemvMaxTokens, cols, rng);
    DeviceBuffer x_dev(x.size() * sizeof(float));
    CUDA_OK(cudaMemcpy(x_dev.ptr, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice));

    for (int64_t n : {int64_t{1}, int64_t{2}, int64_t{5}, int64_t{17}, int64_t{-1}, int64_t{-2},
                      int64_t{-5}, int64_t{-17}}) {
        // Negative: the same n with the K-quants on the tensor cores.
        for (TestMatrix& m : mats) m.tensor = n < 0;
        n = std::abs(n);
        const std::vector<std::vector<float>> got = run_gemv_many(mats, x_dev.as<float>(), cols, n);
        for (size_t i = 0; i < mats.size(); ++i) {
            const std::vector<float> separate = run_gemv(mats[i], x_dev.as<float>(), cols, n);
            const std::vector<float>& many = got[i];
            for (size_t e = 0; e < many.size(); ++e) {
                ASSERT_EQ(bits(many[e]), bits(separate[e]))
                    << "n " << n << " matrix " << i << " at " << e;
                ASSERT_FALSE(std::isnan(many[e]));
            }
        }
    }
}

// Decode's Q/K/V of a K-quant file at widths whose rows several warps share: at n = 1 gemv_many
// runs the Q4_K or Q5_K matrices and the Q6_K ones in one launch, each format's split (warps per
// row) set by the rows of all, and at other token counts launches them apart at those splits.
// So: each token's outputs near the float64 reference, the same bits again and in a batch of the
// same matrices, and, where the split is the widest the width allows for all of them together
// (then also for each alone), the bits of gemv() on each matrix alone.
TEST(CudaQuantMany, TwoFormatDecodeIsBatchInvariant) {
    if (!has_device()) GTEST_SKIP() << "no CUDA device";
    int device = 0, sms = 0;
    CUDA_OK(cudaGetDevice(&device));
    CUDA_OK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    struct Case {
        int64_t cols;
        std::vector<std::pair<TensorType, int64_t>> mats;  // type, rows
    };
    const std::vector<Case> cases = {
        // 4096 wide: 4 warps a row where rows x 4 fit the card's 32 rows an SM.
        {4096, {{TensorType::Q4_K, 300}, {TensorType::Q4_K, 77}, {TensorType::Q6_K, 129}}},
        // V first, a Q8_0 matrix beside (a launch of its own), 2 warps a row.
        {2048,
         {{TensorType::Q6_K, 259},
          {TensorType::Q5_K, 250},
          {TensorType::Q8_0, 64},
          {TensorType::Q5_K, 1000}}},
        // Qwen3-30B-A3B's: 5120 rows together take a warp each on an H200, where V alone (512)
        // would take 2.
        {2048, {{TensorType::Q4_K, 4096}, {TensorType::Q4_K, 512}, {TensorType::Q6_K, 512}}},
    };
    std::mt19937 rng(4242);
    for (const Case& c : cases) {
        std::vector<TestMatrix> mats;
        int64_t total_rows = 0;
        for (const auto& [type, rows] : c.mats) {
            mats.push_back(make_matrix(type, rows, c.cols, rng));
            total_rows += rows;
        }
        SCOPED_TRACE("width " + std::to_string(c.cols) + ", " + std::to_string(total_rows) +
                     " rows");
        const int64_t ldx = c.cols + 4;  // a padded activation row
        const std::vector<float> x = random_activations(kGemvMaxTokens, ldx, rng);
        DeviceBuffer x_dev(x.size() * sizeof(float));
        CUDA_OK(cudaMemcpy(x_dev.ptr, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice));

        // decode[t][i]: matrix i's outputs for token t alone.
        std::vector<std::vector<std::vector<float>>> decode;
        for (int64_t t = 0; t < kGemvMaxTokens; ++t) {
            decode.push_back(run_gemv_many(mats, x_dev.as<float>() + t * ldx, ldx, 1));
        }
        for (size_t i = 0; i < mats.size(); ++i) {
            SCOPED_TRACE("matrix " + std::to_string(i));
            std::vector<std::vector<float>> per_token;
            for (const auto& outputs : decode) per_token.push_back(outputs[i]);
            ASSERT_NO_FATAL_FAILURE(expect_near_reference(mats[i], x, ldx, per_token));
        }

        const std::vector<std::vector<float>> again =
            run_gemv_many(mats, x_dev.as<float>(), ldx, 1);
        for (size_t i = 0; i < mats.size(); ++i) {
            for (int64_t r = 0; r < mats[i].rows; ++r) {
                ASSERT_EQ(bits(again[i][r]), bits(decode[0][i][r]))
                    << "matrix " << i << " row " << r;
            }
        }
        for (const int64_t n : {int64_t{2}, int64_t{5}, kGemvMaxTokens}) {
            const std::vector<std::vector<float>> batch =
                run_gemv_many(mats, x_dev.as<float>(), ldx, n);
            for (size_t i = 0; i < mats.size(); ++i) {
                for (int64_t t = 0; t < n; ++t) {
                    for (int64_t r = 0; r < mats[i].rows; ++r) {
                        ASSERT_EQ(bits(batch[i][t * mats[i].rows + r]), bits(decode[t][i][r]))
                            << "n " << n << " matrix " << i << " token " << t << " row " << r;
                    }
                }
            }
        }

        // gemv_split: 4 warps a row from 128 units (32 elements each), 2 from 64, while rows x
        // split stay within 32 an SM; the widest split kept for all the rows is kept for each.
        const int64_t units = c.cols / 32;
        const int64_t widest = units >= 128 ? 4 : units >= 64 ? 2 : 1;
        if (widest * total_rows > int64_t{32} * sms) continue;
        for (size_t i = 0; i < mats.size(); ++i) {
            for (int64_t t = 0; t < kGemvMaxTokens; ++t) {
                const std::vector<float> alone =
                    run_gemv(mats[i], x_dev.as<float>() + t * ldx, ldx, 1);
                for (int64_t r = 0; r < mats[i].rows; ++r) {
                    ASSERT_EQ(bits(decode[t][i][r]), bits(alone[r]))
                        << "matrix " << i << " token " << t << " row " << r;
                }
            }
        }
    }
}

// gemv_chunks over 40 tokens (two whole chunks of kGemvMaxTokens and 6 more, one launch each)
// and over fewer than a chunk: the bits of gemv() on each chunk. A MoE router (F32, few rows)
// and a wide Q4_K matrix.
TEST(CudaQuantChunks, GemvChunksEqualsGemvPerChunk) {
    if (!has_device()) GTEST_SKIP() << "no CUDA device";
    std::mt19937 rng(77);
    for (const auto& [type, rows, cols] :
         {std::tuple{TensorType::F32, int64_t{128}, int64_t{2048}},
          std::tuple{TensorType::Q4_K, int64_t{200}, int64_t{4096}}}) {
        const TestMatrix m = make_matrix(type, rows, cols, rng);
        const int64_t ldx = cols + 4;
        const std::vector<float> x = random_activations(40, ldx, rng);
        DeviceBuffer x_dev(x.size() * sizeof(float));
        CUDA_OK(cudaMemcpy(x_dev.ptr, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice));
        for (const int64_t n : {int64_t{40}, int64_t{34}, int64_t{5}}) {
            SCOPED_TRACE(std::string(type_info(type).name) + " n " + std::to_string(n));
            const int64_t ldy = rows + 3;
            DeviceBuffer y(static_cast<size_t>(n * ldy) * sizeof(float));
            CUDA_OK(cudaMemset(y.ptr, 0xff, static_cast<size_t>(n * ldy) * sizeof(float)));
            gemv_chunks(m.device_matrix(), x_dev.as<float>(), ldx, n, y.as<float>(), ldy, nullptr);
            CUDA_OK(cudaGetLastError());
            std::vector<float> got(static_cast<size_t>(n * ldy));
            CUDA_OK(
                cudaMemcpy(got.data(), y.ptr, got.size() * sizeof(float), cudaMemcpyDeviceToHost));
            for (int64_t t0 = 0; t0 < n; t0 += kGemvMaxTokens) {
                const int64_t len = std::min(kGemvMaxTokens, n - t0);
                const std::vector<float> want = run_gemv(m, x_dev.as<float>() + t0 * ldx, ldx, len);
                for (int64_t t = 0; t < len; ++t) {
                    for (int64_t r = 0; r < rows; ++r) {
                        ASSERT_EQ(bits(got[(t0 + t) * ldy + r]), bits(want[t * rows + r]))
                            << "token " << t0 + t << " row " << r;
                    }
                }
            }
        }
    }
}

// The fused gate/up product of decode against its two products and the element-wise activation
// (what longer batches run): the same bits. Not offered on the tensor cores.
TEST(CudaQuantGated, GatedProductEqualsProductsThenActivation) {
    if (!has_device()) GTEST_SKIP() << "no CUDA device";
    std::mt19937 rng(7);
    const int64_t rows = 300, cols = 1536;
    for (TensorType type : {TensorType::Q4_K, TensorType::Q6_K, TensorType::Q8_0}) {
        for (const bool tensor : {false, true}) {
            SCOPED_TRACE(std::string(type_info(type).name) +
                         (tensor ? " on the tensor cores" : ""));
            TestMatrix gate = make_matrix(type, rows, cols, rng);
            TestMatrix up = make_matrix(type, rows, cols, rng);
            gate.tensor = up.tensor = tensor;
            if (on_tensor_cores(gate.device_matrix())) {
                // Two products and the element-wise activation there (what the backend runs).
                EXPECT_FALSE(gemv_gated_supports(gate.device_matrix(), up.device_matrix()));
                continue;
            }
            const std::vector<float> x = random_activations(kGemvGatedMaxTokens, cols, rng);
            DeviceBuffer x_dev(x.size() * sizeof(float));
            CUDA_OK(
                cudaMemcpy(x_dev.ptr, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice));
            for (GatedActivation act : {GatedActivation::Silu, GatedActivation::GeluTanh}) {
                for (int64_t n = 1; n <= kGemvGatedMaxTokens; ++n) {
                    const size_t bytes = static_cast<size_t>(n * rows) * sizeof(float);
                    DeviceBuffer fused(bytes), g(bytes), u(bytes);
                    gemv_gated(gate.device_matrix(), up.device_matrix(), act, x_dev.as<float>(),
                               cols, n, fused.as<float>(), rows, nullptr);
                    gemv(gate.device_matrix(), x_dev.as<float>(), cols, n, g.as<float>(), rows,
                         nullptr);
                    gemv(up.device_matrix(), x_dev.as<float>(), cols, n, u.as<float>(), rows,
                         nullptr);
                    if (act == GatedActivation::Silu) {
                        swiglu(g.as<float>(), u.as<float>(), n * rows, nullptr);
                    } else {
                        gelu_tanh_gate(g.as<float>(), u.as<float>(), n * rows, nullptr);
                    }
                    std::vector<float> a(static_cast<size_t>(n * rows)), b(a.size());
                    CUDA_OK(cudaMemcpy(a.data(), fused.ptr, bytes, cudaMemcpyDeviceToHost));
                    CUDA_OK(cudaMemcpy(b.data(), g.ptr, bytes, cudaMemcpyDeviceToHost));
                    for (size_t e = 0; e < a.size(); ++e) {
                        ASSERT_FALSE(std::isnan(a[e])) << "n " << n << " at " << e;
                        ASSERT_EQ(bits(a[e]), bits(b[e])) << "n " << n << " at " << e;
                    }
                }
            }
        }
    }
}

TEST(CudaQuantErrors, RejectsUnsupportedTypesAndTokenCounts) {
    EXPECT_TRUE(gemv_supports(TensorType::Q4_K));
    EXPECT_TRUE(gemv_supports(TensorType::BF16));
    EXPECT_FALSE(gemv_supports(TensorType::Q2_K));
    EXPECT_FALSE(gemv_supports(TensorType::IQ4_XS));
    if (!has_device()) GTEST_SKIP() << "no CUDA device";
    DeviceBuffer buf(1 << 20);
    DeviceMatrix w{TensorType::Q4_K, buf.ptr, 4, 256, 144};
    float* f = buf.as<float>();
    EXPECT_THROW(gemv(w, f, 256, 0, f, 4, nullptr), std::invalid_argument);
    EXPECT_THROW(gemv(w, f, 256, kGemvMaxTokens + 1, f, 4, nullptr), std::invalid_argument);
    w.type = TensorType::Q2_K;
    EXPECT_THROW(gemv(w, f, 256, 1, f, 4, nullptr), std::invalid_argument);
    EXPECT_THROW(dequantize_rows(w, 0, 1, f, nullptr), std::invalid_argument);
}

}  // namespace
}  // namespace ember::cuda
