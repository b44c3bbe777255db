// The tensor-core paths of prefill against float64 references computed here on the host:
// flash attention (flash_attention.cuh) over an f16 cache, across head sizes, GQA groups,
// depths, windows over a ring, sinks and soft-cap, next to the f32 kernels on the same input;
// the scaled f16 activations (half_inputs.cuh): exact powers of two, no overflow, every element
// rounded once; dequantize_rows_half: the f32 dequantization rounded to f16, element for
// element. Skipped where no CUDA device is found.
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "engine/model/cuda/flash_attention.cuh"
#include "engine/model/cuda/half_inputs.cuh"
#include "engine/model/cuda/layer_kernels.cuh"
#include "engine/model/cuda/quant_kernels.cuh"
#include "engine/tensor/matmul.h"
#include "engine/tensor/quantize_scalar.h"
#include "engine/tensor/types.h"
#include "tests/gpu/device_buffer.h"

namespace ember::cuda {
namespace {

size_t row_bytes_of(TensorType type, int64_t cols) {
    return static_cast<size_t>(row_bytes(type_info(type), static_cast<uint64_t>(cols)));
}

struct AttentionCase {
    int64_t head_dim;
    int64_t n_head;
    int64_t n_head_kv;
    int64_t depth;   // positions before the batch
    int64_t n;       // tokens of the batch
    int64_t window;  // 0: causal over everything; else a ring of window + n slots
    bool sinks;
    float softcap;
};

// The case as a test name, e.g. d128_h16_kv8_depth0_n300.
std::string name_of(const AttentionCase& c) {
    std::string name;
    const auto field = [&name](const char* label, int64_t value) {
        name += label;
        name += std::to_string(value);
    };
    field("d", c.head_dim);
    field("_h", c.n_head);
    field("_kv", c.n_head_kv);
    field("_depth", c.depth);
    field("_n", c.n);
    if (c.window > 0) field("_window", c.window);
    if (c.sinks) name += "_sinks";
    if (c.softcap > 0) name += "_softcap";
    return name;
}

// Attention of every (token, head) in float64 from the same f32 queries and f16 rows.
std::vector<double> reference_attention(const AttentionCase& c, const std::vector<float>& q,
                                        const std::vector<__half>& k_rows,
                                        const std::vector<__half>& v_rows, int64_t slots, bool ring,
                                        const std::vector<float>& sinks, float scale) {
    const int64_t d = c.head_dim, width = c.n_head_kv * d, group = c.n_head / c.n_head_kv;
    std::vector<double> out(static_cast<size_t>(c.n * c.n_head * d));
    for (int64_t t = 0; t < c.n; ++t) {
        const int64_t position = c.depth + t;
        const int64_t first = c.window > 0 ? std::max<int64_t>(0, position - c.window + 1) : 0;
        for (int64_t h = 0; h < c.n_head; ++h) {
            const int64_t kv = h / group;
            const float* qh = &q[static_cast<size_t>((t * c.n_head + h) * d)];
            std::vector<double> scores;
            for (int64_t p = first; p <= position; ++p) {
                const int64_t slot = ring ? p % slots : p;
                double dot = 0;
                for (int64_t i = 0; i < d; ++i) {
                    dot += static_cast<double>(qh[i]) *
                           static_cast<double>(__half2float(k_rows[slot * width + kv * d + i]));
                }
                double s = dot * scale;
                if (c.softcap > 0) s = c.softcap * std::tanh(s / c.softcap);
                scores.push_back(s);
            }
            double top = *std::max_element(scores.begin(), scores.end());
            if (c.sinks) top = std::max(top, static_cast<double>(sinks[h]));
            double denominator = c.sinks ? std::exp(sinks[h] - top) : 0.0;
            std::vector<double> acc(static_cast<size_t>(d), 0.0);
            for (int64_t p = first; p <= position; ++p) {
                const int64_t slot = ring ? p % slots : p;
                const double w = std::exp(scores[static_cast<size_t>(p - first)] - top);
                denominator += w;
                for (int64_t i = 0; i < d; ++i) {
                    acc[i] +=
                        w * static_cast<double>(__half2float(v_rows[slot * width + kv * d + i]));
                }
            }
            for (int64_t i = 0; i < d; ++i) {
                out[static_cast<size_t>((t * c.n_head + h) * d + i)] = acc[i] / denominator;
            }
        }
    }
    return out;
}

class FlashAttention : public ::testing::TestWithParam<AttentionCase> {
protected:
    void SetUp() override {
        if (!has_device()) GTEST_SKIP() << "no CUDA device";
    }
};

// Max |out - ref| over max |ref|: the tensor-core path within 2e-3 (f16 weights), whole and
// in chunked records through attend()'s merge (past kFlashChunk positions), the f32 kernels
// within 1e-5, on the same cache and queries.
TEST_P(FlashAttention, MatchesFloat64AndTheF32Kernels) {
    const AttentionCase c = GetParam();
    const int64_t d = c.head_dim, width = c.n_head_kv * d;
    const bool ring = c.window > 0;
    const int64_t slots = ring ? c.window + c.n : c.depth + c.n;
    std::mt19937 rng(static_cast<unsigned>(d * 7919 + c.depth * 31 + c.n));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    // Rows of every slot; positions are written into their slots as a real cache would hold them.
    std::vector<__half> k_rows(static_cast<size_t>(slots * width)), v_rows(k_rows.size());
    for (auto& x : k_rows) x = __float2half(normal(rng));
    for (auto& x : v_rows) x = __float2half(normal(rng));
    // Queries large enough that the softmax is peaked at some positions and flat at others.
    std::vector<float> q(static_cast<size_t>(c.n * c.n_head * d));
    for (auto& x : q) x = 1.5f * normal(rng);
    std::vector<float> sinks(static_cast<size_t>(c.n_head));
    for (auto& x : sinks) x = 2.0f * normal(rng);
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));

    DeviceBuffer k_dev(k_rows.size() * sizeof(__half)), v_dev(v_rows.size() * sizeof(__half));
    DeviceBuffer q_dev(q.size() * sizeof(float)), sinks_dev(sinks.size() * sizeof(float));
    DeviceBuffer pos0_dev(sizeof(int64_t));
    const size_t out_bytes = static_cast<size_t>(c.n * c.n_head * d) * sizeof(float);
    DeviceBuffer flash_out(out_bytes), chunked_out(out_bytes), f32_out(out_bytes);
    CUDA_OK(cudaMemcpy(k_dev.ptr, k_rows.data(), k_rows.size() * sizeof(__half),
                       cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(v_dev.ptr, v_rows.data(), v_rows.size() * sizeof(__half),
                       cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(q_dev.ptr, q.data(), q.size() * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(sinks_dev.ptr, sinks.data(), sinks.size() * sizeof(float),
                       cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(pos0_dev.ptr, &c.depth, sizeof(int64_t), cudaMemcpyHostToDevice));
    // Poisoned outputs: every element must be written.
    CUDA_OK(cudaMemset(flash_out.ptr, 0xff, out_bytes));
    CUDA_OK(cudaMemset(chunked_out.ptr, 0xff, out_bytes));
    CUDA_OK(cudaMemset(f32_out.ptr, 0xff, out_bytes));

    KvLayerView layer;
    layer.k = k_dev.as<uint8_t>();
    layer.v = v_dev.as<uint8_t>();
    layer.slots = slots;
    layer.ring = ring;
    layer.type = KvType::F16;
    layer.k_width = width;
    layer.v_width = width;
    AttendShape shape;
    shape.n_head = c.n_head;
    shape.n_head_kv = c.n_head_kv;
    shape.head_dim = d;
    shape.value_dim = d;
    shape.window = c.window;
    shape.scale = scale;
    shape.softcap = c.softcap;
    shape.sinks = c.sinks ? sinks_dev.as<float>() : nullptr;
    shape.chunk = attention_chunk(c.n);
    ASSERT_TRUE(flash_attend_supports(shape, layer));
    const int64_t chunks = chunks_through(c.depth + c.n - 1, shape.chunk);
    DeviceBuffer partials(static_cast<size_t>(attention_partials_floats(shape, c.n, chunks)) *
                          sizeof(float));
    // Whole: one pass over every position.
    flash_attend(shape, layer, q_dev.as<float>(), pos0_dev.as<int64_t>(), c.n, 1, nullptr,
                 flash_out.as<float>(), nullptr);
    // As a prefill batch runs: in records of kFlashChunk positions where the context is longer.
    attend(shape, layer, q_dev.as<float>(), pos0_dev.as<int64_t>(), c.n, chunks,
           partials.as<float>(), chunked_out.as<float>(), nullptr);
    shape.tensor_cores = false;
    attend(shape, layer, q_dev.as<float>(), pos0_dev.as<int64_t>(), c.n, chunks,
           partials.as<float>(), f32_out.as<float>(), nullptr);
    CUDA_OK(cudaDeviceSynchronize());

    std::vector<float> flash(q.size()), chunked(q.size()), f32(q.size());
    CUDA_OK(cudaMemcpy(flash.data(), flash_out.ptr, out_bytes, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(chunked.data(), chunked_out.ptr, out_bytes, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(f32.data(), f32_out.ptr, out_bytes, cudaMemcpyDeviceToHost));
    const std::vector<double> ref =
        reference_attention(c, q, k_rows, v_rows, slots, ring, sinks, scale);
    double ref_max = 0, flash_err = 0, chunked_err = 0, f32_err = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
        ASSERT_TRUE(std::isfinite(flash[i])) << "element " << i << " unwritten or not finite";
        ASSERT_TRUE(std::isfinite(chunked[i])) << "element " << i << " unwritten or not finite";
        ref_max = std::max(ref_max, std::abs(ref[i]));
        flash_err = std::max(flash_err, std::abs(flash[i] - ref[i]));
        chunked_err = std::max(chunked_err, std::abs(chunked[i] - ref[i]));
        f32_err = std::max(f32_err, std::abs(f32[i] - ref[i]));
    }
    ASSERT_GT(ref_max, 0.1);
    EXPECT_LE(flash_err / ref_max, 2e-3) << name_of(c);
    EXPECT_LE(chunked_err / ref_max, 2e-3) << name_of(c) << " (chunked)";
    EXPECT_LE(f32_err / ref_max, 1e-5) << name_of(c);
    std::printf("[flash] %s: relative error %.2e, chunked %.2e (f32 kernels %.2e)\n",
                name_of(c).c_str(), flash_err / ref_max, chunked_err / ref_max, f32_err / ref_max);
}

INSTANTIATE_TEST_SUITE_P(Shapes, FlashAttention,
                         ::testing::Values(AttentionCase{128, 16, 8, 0, 300, 0, false, 0.0f},
                                           AttentionCase{128, 32, 8, 1000, 100, 0, false, 0.0f},
                                           AttentionCase{64, 8, 8, 70, 18, 0, true, 0.0f},
                                           AttentionCase{64, 12, 4, 500, 129, 96, false, 0.0f},
                                           AttentionCase{32, 4, 2, 33, 257, 0, false, 30.0f},
                                           AttentionCase{16, 4, 1, 5, 40, 16, true, 0.0f},
                                           AttentionCase{128, 8, 1, 2100, 65, 0, true, 50.0f}),
                         [](const ::testing::TestParamInfo<AttentionCase>& param) {
                             return name_of(param.param);
                         });

// Rows spanning 2^-20 .. 2^20 of magnitude, one past f16's range: scaled by one power of two,
// every element is its f32 value times the scale rounded once to f16, the largest lands in
// [2^14, 2^15), and the unscale is exactly the inverse.
TEST(HalfInputs, ScaledByOnePowerOfTwoWithoutOverflow) {
    if (!has_device()) GTEST_SKIP() << "no CUDA device";
    const int64_t n = 37, cols = 520, ldx = 528;
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> exponent(-20.0f, 20.0f);
    std::vector<float> x(static_cast<size_t>(n * ldx), 0.0f);
    for (int64_t r = 0; r < n; ++r) {
        for (int64_t k = 0; k < cols; ++k) {
            x[r * ldx + k] = ((rng() & 1) ? -1.0f : 1.0f) * std::exp2(exponent(rng));
        }
    }
    x[5 * ldx + 17] = 70000.0f;  // past 65504
    DeviceBuffer x_dev(x.size() * sizeof(float)),
        out(static_cast<size_t>(n * cols) * sizeof(__half));
    DeviceBuffer row_max(static_cast<size_t>(n) * sizeof(float)), unscale(sizeof(float));
    CUDA_OK(cudaMemcpy(x_dev.ptr, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice));
    to_scaled_half(x_dev.as<float>(), n, cols, ldx, out.as<__half>(), row_max.as<float>(),
                   unscale.as<float>(), nullptr);
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<__half> h(static_cast<size_t>(n * cols));
    float inverse = 0;
    CUDA_OK(cudaMemcpy(h.data(), out.ptr, h.size() * sizeof(__half), cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(&inverse, unscale.ptr, sizeof(float), cudaMemcpyDeviceToHost));
    int e = 0;
    const float mantissa = std::frexp(inverse, &e);
    EXPECT_EQ(mantissa, 0.5f) << "the unscale " << inverse << " is not a power of two";
    const float scale = 1.0f / inverse;
    float largest = 0;
    for (int64_t r = 0; r < n; ++r) {
        for (int64_t k = 0; k < cols; ++k) {
            const float got = __half2float(h[static_cast<size_t>(r * cols + k)]);
            const float want = __half2float(__float2half(x[r * ldx + k] * scale));
            ASSERT_EQ(got, want) << "row " << r << " column " << k;
            largest = std::max(largest, std::abs(got));
        }
    }
    EXPECT_GE(largest, 16384.0f);
    EXPECT_LT(largest, 32768.0f);
}

// Q4_K rows rounded to f16 on the device are the CPU's f32 dequantization rounded to f16.
TEST(HalfWeights, DequantizeRowsHalfRoundsTheExactWeights) {
    if (!has_device()) GTEST_SKIP() << "no CUDA device";
    const int64_t rows = 48, cols = 512;
    std::mt19937 rng(5);
    std::normal_distribution<float> normal(0.0f, 0.05f);
    std::vector<float> w(static_cast<size_t>(rows * cols));
    for (auto& x : w) x = normal(rng);
    const size_t row_bytes = row_bytes_of(TensorType::Q4_K, cols);
    std::vector<uint8_t> packed(rows * row_bytes);
    for (int64_t r = 0; r < rows; ++r) {
        scalar::quantize_row_q4_k(&w[static_cast<size_t>(r * cols)], packed.data() + r * row_bytes,
                                  cols);
    }
    MatrixView view;
    view.type = TensorType::Q4_K;
    view.data = packed.data();
    view.rows = rows;
    view.cols = cols;
    view.row_stride = row_bytes;
    DeviceBuffer data(packed.size()), out(static_cast<size_t>(rows * cols) * sizeof(__half));
    CUDA_OK(cudaMemcpy(data.ptr, packed.data(), packed.size(), cudaMemcpyHostToDevice));
    DeviceMatrix m{TensorType::Q4_K, data.ptr, rows, cols, row_bytes};
    dequantize_rows_half(m, 0, rows, out.as<__half>(), nullptr);
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<__half> h(static_cast<size_t>(rows * cols));
    CUDA_OK(cudaMemcpy(h.data(), out.ptr, h.size() * sizeof(__half), cudaMemcpyDeviceToHost));
    std::vector<float> exact(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
        dequantize_row(view, r, exact.data());
        for (int64_t k = 0; k < cols; ++k) {
            ASSERT_EQ(__half2float(h[static_cast<size_t>(r * cols + k)]),
                      __half2float(__float2half(exact[static_cast<size_t>(k)])))
                << "row " << r << " column " << k;
        }
    }
    EXPECT_LT(max_abs_weight(m, nullptr), 1.0f);
    EXPECT_GT(max_abs_weight(m, nullptr), 0.1f);
}

}  // namespace
}  // namespace ember::cuda
