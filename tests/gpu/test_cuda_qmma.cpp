// The quantized prefill product (qmma_gemm.cuh) against float64 sums computed here on the host
// from the same operands: the CPU's dequantization of each weight rounded to f16, and the
// activations as to_scaled_half left them. Dense products of every batch shape the kernel
// takes (one tile of 32, 64 or 96, tiles of 64 and a ragged last one; split across the width
// or not), and
// the grouped product of a mixture of experts' sorted rows (Q4_K, Q6_K and MXFP4). Skipped where no
// CUDA device is found.
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "engine/model/cuda/half_inputs.cuh"
#include "engine/model/cuda/qmma_gemm.cuh"
#include "engine/model/cuda/quant_kernels.cuh"
#include "engine/tensor/matmul.h"
#include "engine/tensor/quantize_scalar.h"
#include "engine/tensor/types.h"
#include "tests/gpu/device_buffer.h"

namespace ember::cuda {
namespace {

// A quantized matrix on the host and the device, and its weights as f16 would hold them.
struct QuantMatrix {
    TensorType type;
    int64_t rows, cols;
    size_t row_bytes;
    std::vector<uint8_t> packed;
    std::vector<double> half_weights;  // [rows x cols]
};

// row_scales: row r's weights are multiplied by row_scales[r % size] (none: all by 1).
QuantMatrix make_matrix(TensorType type, int64_t rows, int64_t cols, uint32_t seed,
                        const std::vector<float>& row_scales = {}) {
    QuantMatrix m{type, rows, cols, static_cast<size_t>(row_bytes(type_info(type), cols)), {}, {}};
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 0.05f);
    std::vector<float> w(static_cast<size_t>(rows * cols));
    for (size_t i = 0; i < w.size(); ++i) {
        const float factor = row_scales.empty()
                                 ? 1.0f
                                 : row_scales[static_cast<size_t>(i / cols) % row_scales.size()];
        w[i] = normal(rng) * factor;
    }
    m.packed.resize(rows * m.row_bytes);
    for (int64_t r = 0; r < rows; ++r) {
        uint8_t* dst = m.packed.data() + r * m.row_bytes;
        const float* src = &w[static_cast<size_t>(r * cols)];
        switch (type) {
            case TensorType::Q4_K:
                scalar::quantize_row_q4_k(src, dst, cols);
                break;
            case TensorType::Q6_K:
                scalar::quantize_row_q6_k(src, dst, cols);
                break;
            default:
                scalar::quantize_row_mxfp4(src, dst, cols);
                break;
        }
    }
    MatrixView view;
    view.type = type;
    view.data = m.packed.data();
    view.rows = rows;
    view.cols = cols;
    view.row_stride = m.row_bytes;
    std::vector<float> exact(static_cast<size_t>(cols));
    m.half_weights.resize(static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r) {
        dequantize_row(view, r, exact.data());
        for (int64_t k = 0; k < cols; ++k) {
            m.half_weights[static_cast<size_t>(r * cols + k)] =
                __half2float(__float2half(exact[static_cast<size_t>(k)]));
        }
    }
    return m;
}

// Activations as the prefill feeds them: f32 rows to scaled f16 on the device.
struct HalfActivations {
    int64_t n, cols;
    DeviceBuffer half, unscale, row_max;
    std::vector<double> values;  // [n x cols] the f16 values times the unscale
    float unscale_value = 0;
};

void make_activations(HalfActivations& a, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 3.0f);
    std::vector<float> x(static_cast<size_t>(a.n * a.cols));
    for (auto& v : x) v = normal(rng);
    DeviceBuffer x_dev(x.size() * sizeof(float));
    CUDA_OK(cudaMemcpy(x_dev.ptr, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice));
    to_scaled_half(x_dev.as<float>(), a.n, a.cols, a.cols, a.half.as<__half>(),
                   a.row_max.as<float>(), a.unscale.as<float>(), nullptr);
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<__half> h(x.size());
    CUDA_OK(cudaMemcpy(h.data(), a.half.ptr, h.size() * sizeof(__half), cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(&a.unscale_value, a.unscale.ptr, sizeof(float), cudaMemcpyDeviceToHost));
    a.values.resize(h.size());
    for (size_t i = 0; i < h.size(); ++i) {
        a.values[i] = static_cast<double>(__half2float(h[i])) * a.unscale_value;
    }
}

// Checks y [count x rows] (rows ldy apart) against the float64 sums of x rows x0.. and the
// matrix's weights from row w0: each within 2^-18 of the sum of its terms' magnitudes (f32 sums
// over at most a few thousand terms stay far inside that; one wrong term does not).
void expect_products(const std::vector<float>& y, int64_t ldy, const HalfActivations& a, int64_t x0,
                     const QuantMatrix& m, int64_t w0, int64_t rows, int64_t count,
                     const std::string& what) {
    for (int64_t t = 0; t < count; ++t) {
        for (int64_t r = 0; r < rows; ++r) {
            double sum = 0, magnitude = 0;
            for (int64_t k = 0; k < m.cols; ++k) {
                const double term = a.values[static_cast<size_t>((x0 + t) * a.cols + k)] *
                                    m.half_weights[static_cast<size_t>((w0 + r) * m.cols + k)];
                sum += term;
                magnitude += std::abs(term);
            }
            const double got = y[static_cast<size_t>(t * ldy + r)];
            ASSERT_NEAR(got, sum, std::ldexp(magnitude, -18) + 1e-30)
                << what << ": token " << t << " row " << r;
        }
    }
}

struct DenseCase {
    TensorType type;
    int64_t rows, cols, n;
    int sm_count;  // 1: never split; 132: an H200's split
};

class QmmaDense : public testing::TestWithParam<DenseCase> {
protected:
    void SetUp() override {
        if (!has_device()) GTEST_SKIP() << "no CUDA device";
    }
};

TEST_P(QmmaDense, MatchesFloat64OfTheRoundedOperands) {
    const DenseCase c = GetParam();
    const QuantMatrix m = make_matrix(c.type, c.rows, c.cols, 7);
    HalfActivations a{c.n,
                      c.cols,
                      DeviceBuffer(static_cast<size_t>(c.n * c.cols) * sizeof(__half)),
                      DeviceBuffer(sizeof(float)),
                      DeviceBuffer(static_cast<size_t>(c.n) * sizeof(float)),
                      {},
                      0};
    make_activations(a, 3);
    DeviceBuffer data(m.packed.size());
    CUDA_OK(cudaMemcpy(data.ptr, m.packed.data(), m.packed.size(), cudaMemcpyHostToDevice));
    const DeviceMatrix w{c.type, data.ptr, c.rows, c.cols, m.row_bytes};
    ASSERT_TRUE(qmma_supports(w));
    DeviceBuffer y(static_cast<size_t>(c.n * c.rows) * sizeof(float));
    DeviceBuffer scratch(static_cast<size_t>(qmma_scratch_floats(w, c.n, c.sm_count)) *
                         sizeof(float));
    QmmaOperands op;
    op.x = a.half.as<__half>();
    op.ldx = c.cols;
    op.y = y.as<float>();
    op.ldy = c.rows;
    op.alpha = a.unscale.as<float>();
    qmma_gemm(w, op, c.n, scratch.as<float>(), c.sm_count, nullptr);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<float> out(static_cast<size_t>(c.n * c.rows));
    CUDA_OK(cudaMemcpy(out.data(), y.ptr, out.size() * sizeof(float), cudaMemcpyDeviceToHost));
    expect_products(out, c.rows, a, 0, m, 0, c.rows, c.n, "dense");
}

std::string dense_name(const testing::TestParamInfo<DenseCase>& info) {
    const DenseCase& c = info.param;
    return std::string(type_info(c.type).name) + "_r" + std::to_string(c.rows) + "_c" +
           std::to_string(c.cols) + "_n" + std::to_string(c.n) + "_sm" + std::to_string(c.sm_count);
}

INSTANTIATE_TEST_SUITE_P(Shapes, QmmaDense,
                         testing::Values(DenseCase{TensorType::Q4_K, 200, 1024, 18, 132},
                                         DenseCase{TensorType::Q4_K, 200, 1024, 18, 1},
                                         DenseCase{TensorType::Q4_K, 136, 512, 100, 132},
                                         DenseCase{TensorType::Q4_K, 200, 1024, 90, 132},
                                         DenseCase{TensorType::Q4_K, 200, 1024, 80, 132},
                                         DenseCase{TensorType::Q4_K, 96, 512, 96, 1},
                                         DenseCase{TensorType::Q4_K, 64, 2048, 300, 1},
                                         DenseCase{TensorType::Q6_K, 200, 1024, 32, 132},
                                         DenseCase{TensorType::Q6_K, 72, 768, 65, 132},
                                         DenseCase{TensorType::Q6_K, 130, 512, 129, 1}),
                         dense_name);

// The grouped product of op over n_tiles tiles (device memory); its y copied back into out.
void run_grouped(const DeviceMatrix& expert0, size_t expert_stride, const QmmaOperands& op,
                 const QmmaTile* tiles, int n_tiles, std::vector<float>& out) {
    qmma_gemm_grouped(expert0, expert_stride, op, tiles, n_tiles, nullptr);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(out.data(), op.y, out.size() * sizeof(float), cudaMemcpyDeviceToHost));
}

struct GroupedCase {
    TensorType type;
    int64_t cols;
};

class QmmaGrouped : public testing::TestWithParam<GroupedCase> {
protected:
    void SetUp() override {
        if (!has_device()) GTEST_SKIP() << "no CUDA device";
    }
};

// Three experts' matrices stacked; sorted rows of 0, 70 and 9 tokens in tiles of at most 64.
TEST_P(QmmaGrouped, EachTileGoesThroughItsExpert) {
    const TensorType type = GetParam().type;
    const int64_t rows = 96, cols = GetParam().cols, experts = 3;
    const QuantMatrix m = make_matrix(type, rows * experts, cols, 13);
    const std::vector<int64_t> tokens = {0, 70, 9};
    const int64_t n = 79;
    HalfActivations a{n,
                      cols,
                      DeviceBuffer(static_cast<size_t>(n * cols) * sizeof(__half)),
                      DeviceBuffer(sizeof(float)),
                      DeviceBuffer(static_cast<size_t>(n) * sizeof(float)),
                      {},
                      0};
    make_activations(a, 21);
    std::vector<QmmaTile> tiles;
    int32_t row0 = 0;
    for (int64_t e = 0; e < experts; ++e) {
        for (int64_t done = 0; done < tokens[e]; done += kQmmaTileTokens) {
            QmmaTile tile;
            tile.expert = static_cast<int32_t>(e);
            tile.row0 = row0 + static_cast<int32_t>(done);
            tile.count = static_cast<int32_t>(std::min<int64_t>(kQmmaTileTokens, tokens[e] - done));
            tiles.push_back(tile);
        }
        row0 += static_cast<int32_t>(tokens[e]);
    }
    DeviceBuffer data(m.packed.size()), tiles_dev(tiles.size() * sizeof(QmmaTile));
    DeviceBuffer y(static_cast<size_t>(n * rows) * sizeof(float));
    CUDA_OK(cudaMemcpy(data.ptr, m.packed.data(), m.packed.size(), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(tiles_dev.ptr, tiles.data(), tiles.size() * sizeof(QmmaTile),
                       cudaMemcpyHostToDevice));
    const DeviceMatrix expert0{type, data.ptr, rows, cols, m.row_bytes};
    ASSERT_TRUE(qmma_grouped_supports(expert0));
    const QmmaOperands op{.x = a.half.as<__half>(),
                          .ldx = cols,
                          .y = y.as<float>(),
                          .ldy = rows,
                          .alpha = a.unscale.as<float>()};
    std::vector<float> out(static_cast<size_t>(n * rows));
    ASSERT_NO_FATAL_FAILURE(run_grouped(expert0, rows * m.row_bytes, op, tiles_dev.as<QmmaTile>(),
                                        static_cast<int>(tiles.size()), out));
    int64_t first = 0;
    for (int64_t e = 0; e < experts; ++e) {
        const std::vector<float> part(out.begin() + first * rows,
                                      out.begin() + (first + tokens[e]) * rows);
        expect_products(part, rows, a, first, m, e * rows, rows, tokens[e],
                        "expert " + std::to_string(e));
        first += tokens[e];
    }

    // The same tiles reading their rows through an index (x_rows / x_row_divisor, as a MoE's
    // sorted pairs read their tokens' rows): within each expert's rows the order is reversed, so
    // sorted row t reads x's row mirror(t), and its sums are, bit for bit, those row mirror(t) got
    // above (a token's sums do not depend on its place in the tile). The index holds 3 row + 1,
    // read with a divisor of 3.
    std::vector<int64_t> mirror(static_cast<size_t>(n));
    for (int64_t e = 0, begin = 0; e < experts; begin += tokens[e], ++e) {
        for (int64_t i = 0; i < tokens[e]; ++i) {
            mirror[static_cast<size_t>(begin + i)] = begin + tokens[e] - 1 - i;
        }
    }
    std::vector<int32_t> index(static_cast<size_t>(n));
    for (int64_t t = 0; t < n; ++t) {
        index[static_cast<size_t>(t)] =
            static_cast<int32_t>(3 * mirror[static_cast<size_t>(t)] + 1);
    }
    DeviceBuffer index_dev(index.size() * sizeof(int32_t));
    DeviceBuffer y2(static_cast<size_t>(n * rows) * sizeof(float));
    CUDA_OK(cudaMemcpy(index_dev.ptr, index.data(), index.size() * sizeof(int32_t),
                       cudaMemcpyHostToDevice));
    QmmaOperands indexed = op;
    indexed.x_rows = index_dev.as<int32_t>();
    indexed.x_row_divisor = 3;
    indexed.y = y2.as<float>();
    std::vector<float> out2(out.size());
    ASSERT_NO_FATAL_FAILURE(run_grouped(expert0, rows * m.row_bytes, indexed,
                                        tiles_dev.as<QmmaTile>(), static_cast<int>(tiles.size()),
                                        out2));
    for (int64_t t = 0; t < n; ++t) {
        for (int64_t r = 0; r < rows; ++r) {
            ASSERT_EQ(out2[static_cast<size_t>(t * rows + r)],
                      out[static_cast<size_t>(mirror[static_cast<size_t>(t)] * rows + r)])
                << "indexed: sorted row " << t << ", output " << r;
        }
    }
}

// Each MXFP4 weight reaches the tensor cores as the CPU's dequantization rounded to f16, bit for
// bit: token t is the unit vector of column t, so y[t][r] is weight (r, t) times 1, exactly. The
// rows' scales span both ends of the kernel's f16 scaling (block exponents 89..128) and past
// them (its f32 path): 2^-16 gives f16 subnormal weights, 2^-30 subnormal f16 scales (weights
// that round to zero), 2^-36 exponents below 89, 2^6 the largest f16 scale (2^15), 2^7 and 2^9
// exponents above 128.
TEST(QmmaGroupedMXFP4, WeightsAreTheCpusRoundedToHalf) {
    if (!has_device()) GTEST_SKIP() << "no CUDA device";
    for (const int64_t cols : {int64_t{96}, int64_t{384}, int64_t{2880}}) {
        const int64_t rows = 70;
        const std::vector<float> row_scales = {1.0f,
                                               std::ldexp(1.0f, -16),
                                               std::ldexp(1.0f, -30),
                                               std::ldexp(1.0f, -36),
                                               std::ldexp(1.0f, 6),
                                               std::ldexp(1.0f, 7),
                                               std::ldexp(1.0f, 9)};
        const QuantMatrix m = make_matrix(TensorType::MXFP4, rows, cols, 31, row_scales);
        const int64_t n = cols;
        std::vector<float> one_hot(static_cast<size_t>(n * cols), 0.0f);
        for (int64_t t = 0; t < n; ++t) one_hot[static_cast<size_t>(t * cols + t)] = 1.0f;
        DeviceBuffer x(one_hot.size() * sizeof(float)), half(one_hot.size() * sizeof(__half));
        DeviceBuffer unscale(sizeof(float)), row_max(static_cast<size_t>(n) * sizeof(float));
        CUDA_OK(cudaMemcpy(x.ptr, one_hot.data(), one_hot.size() * sizeof(float),
                           cudaMemcpyHostToDevice));
        to_scaled_half(x.as<float>(), n, cols, cols, half.as<__half>(), row_max.as<float>(),
                       unscale.as<float>(), nullptr);
        std::vector<QmmaTile> tiles;
        for (int64_t t = 0; t < n; t += kQmmaTileTokens) {
            tiles.push_back(
                QmmaTile{0, static_cast<int32_t>(t),
                         static_cast<int32_t>(std::min<int64_t>(kQmmaTileTokens, n - t)), 0});
        }
        DeviceBuffer data(m.packed.size()), tiles_dev(tiles.size() * sizeof(QmmaTile));
        DeviceBuffer y(static_cast<size_t>(n * rows) * sizeof(float));
        CUDA_OK(cudaMemcpy(data.ptr, m.packed.data(), m.packed.size(), cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(tiles_dev.ptr, tiles.data(), tiles.size() * sizeof(QmmaTile),
                           cudaMemcpyHostToDevice));
        const DeviceMatrix expert0{TensorType::MXFP4, data.ptr, rows, cols, m.row_bytes};
        const QmmaOperands op{.x = half.as<__half>(),
                              .ldx = cols,
                              .y = y.as<float>(),
                              .ldy = rows,
                              .alpha = unscale.as<float>()};
        std::vector<float> out(static_cast<size_t>(n * rows));
        ASSERT_NO_FATAL_FAILURE(run_grouped(expert0, rows * m.row_bytes, op,
                                            tiles_dev.as<QmmaTile>(),
                                            static_cast<int>(tiles.size()), out));
        int64_t tiny_nonzero = 0, large = 0;
        for (int64_t t = 0; t < n; ++t) {
            for (int64_t r = 0; r < rows; ++r) {
                const double want = m.half_weights[static_cast<size_t>(r * cols + t)];
                ASSERT_EQ(static_cast<double>(out[static_cast<size_t>(t * rows + r)]), want)
                    << cols << " wide: row " << r << " (scale " << row_scales[r % row_scales.size()]
                    << "), column " << t;
                if (want != 0 && std::abs(want) < std::ldexp(1.0, -14)) ++tiny_nonzero;
                if (std::abs(want) > 64) ++large;
            }
        }
        // The extremes were reached: f16 subnormal weights and weights past 2^6.
        EXPECT_GT(tiny_nonzero, 0) << cols;
        EXPECT_GT(large, 0) << cols;
    }
}

std::string grouped_name(const testing::TestParamInfo<GroupedCase>& info) {
    return std::string(type_info(info.param.type).name) + "_c" + std::to_string(info.param.cols);
}

// MXFP4 at gpt-oss's width (90 blocks: chunks of 5), a multiple of 128 (chunks of 4) and 3
// blocks (chunks of 1); the blocks are 17 bytes, so every alignment of a lane's 8 bytes occurs.
INSTANTIATE_TEST_SUITE_P(Types, QmmaGrouped,
                         testing::Values(GroupedCase{TensorType::Q4_K, 512},
                                         GroupedCase{TensorType::Q6_K, 512},
                                         GroupedCase{TensorType::MXFP4, 2880},
                                         GroupedCase{TensorType::MXFP4, 384},
                                         GroupedCase{TensorType::MXFP4, 96}),
                         grouped_name);

}  // namespace
}  // namespace ember::cuda
