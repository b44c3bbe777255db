// The device's expert routing (moe_kernels.cuh: moe_route) against the CPU's (cpu/moe.h:
// route_token): the same experts, in ascending order, for logits full of ties (the lower index
// wins), -0 beside +0, with and without a router bias, renormalized or over every expert, for
// expert counts that do and do not fill a warp; and with NaN logits, n_used distinct valid
// experts, the numbers first.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <set>
#include <vector>

#include "engine/model/cpu/moe.h"
#include "engine/model/cuda/moe_kernels.cuh"
#include "tests/gpu/device_buffer.h"

namespace ember::cuda {
namespace {

struct RouteCase {
    int n_expert;
    int n_used;
    bool renormalize;
    bool bias;
};

struct Routed {
    std::vector<int32_t> chosen;
    std::vector<float> weight;
};

// moe_route over `tokens` rows of logits [tokens x n_expert].
Routed route_on_device(const RouteCase& c, const std::vector<float>& logits,
                       const std::vector<float>& bias, int tokens) {
    DeviceBuffer d_logits(logits.size() * sizeof(float));
    DeviceBuffer d_bias(bias.size() * sizeof(float));
    DeviceBuffer d_chosen(static_cast<size_t>(tokens * c.n_used) * sizeof(int32_t));
    DeviceBuffer d_weight(static_cast<size_t>(tokens * c.n_used) * sizeof(float));
    Routed out{std::vector<int32_t>(static_cast<size_t>(tokens * c.n_used), -2),
               std::vector<float>(static_cast<size_t>(tokens * c.n_used))};
    if (cudaMemcpy(d_logits.ptr, logits.data(), logits.size() * sizeof(float),
                   cudaMemcpyHostToDevice) != cudaSuccess ||
        (!bias.empty() && cudaMemcpy(d_bias.ptr, bias.data(), bias.size() * sizeof(float),
                                     cudaMemcpyHostToDevice) != cudaSuccess)) {
        ADD_FAILURE() << "upload";
        return out;
    }
    MoeLayer layer;
    layer.n_expert = c.n_expert;
    layer.n_used = c.n_used;
    layer.renormalize = c.renormalize;
    layer.router_bias = bias.empty() ? nullptr : d_bias.as<float>();
    moe_route(layer, d_logits.as<float>(), tokens, d_chosen.as<int32_t>(), d_weight.as<float>(),
              nullptr);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(out.chosen.data(), d_chosen.ptr, out.chosen.size() * sizeof(int32_t),
                         cudaMemcpyDeviceToHost),
              cudaSuccess);
    EXPECT_EQ(cudaMemcpy(out.weight.data(), d_weight.ptr, out.weight.size() * sizeof(float),
                         cudaMemcpyDeviceToHost),
              cudaSuccess);
    return out;
}

class CudaMoeRoute : public ::testing::TestWithParam<RouteCase> {};

TEST_P(CudaMoeRoute, PicksWhatTheCpuPicks) {
    if (!has_device()) GTEST_SKIP() << "no CUDA device";
    const RouteCase c = GetParam();
    constexpr int kTokens = 37;
    std::mt19937 rng(static_cast<uint32_t>(c.n_expert * 31 + c.n_used));
    // Few distinct values, so that most tokens have ties across the n_used boundary; -0 and +0
    // among them.
    std::uniform_int_distribution<int> level(-6, 6);
    std::vector<float> logits(static_cast<size_t>(kTokens * c.n_expert));
    for (float& v : logits) {
        const int l = level(rng);
        v = l == 0 ? (rng() % 2 ? -0.0f : 0.0f) : 0.25f * static_cast<float>(l);
    }
    std::vector<float> bias;
    if (c.bias) {
        bias.resize(static_cast<size_t>(c.n_expert));
        for (float& b : bias) b = 0.125f * static_cast<float>(level(rng));
    }
    const Routed gpu = route_on_device(c, logits, bias, kTokens);
    for (int t = 0; t < kTokens; ++t) {
        std::vector<float> row(logits.begin() + t * c.n_expert,
                               logits.begin() + (t + 1) * c.n_expert);
        for (size_t e = 0; e < bias.size(); ++e) row[e] = row[e] + bias[e];  // as the CPU adds it
        std::vector<int32_t> chosen(static_cast<size_t>(c.n_used));
        std::vector<float> weight(static_cast<size_t>(c.n_used));
        route_token(row.data(), c.n_expert, c.n_used, c.renormalize, chosen.data(), weight.data());
        for (int j = 0; j < c.n_used; ++j) {
            const size_t at = static_cast<size_t>(t * c.n_used + j);
            ASSERT_EQ(gpu.chosen[at], chosen[static_cast<size_t>(j)])
                << "token " << t << " slot " << j;
            // Both in double from one exp each; the libraries' exp may differ in the last bit of
            // a double, which rounding to float almost never shows.
            EXPECT_NEAR(gpu.weight[at], weight[static_cast<size_t>(j)],
                        2e-7 * std::fabs(weight[static_cast<size_t>(j)]))
                << "token " << t << " slot " << j;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaMoeRoute,
                         ::testing::Values(RouteCase{128, 8, true, false},  // Qwen3-30B-A3B
                                           RouteCase{32, 4, true, true},    // gpt-oss-20b
                                           RouteCase{60, 4, false, false},  // not a multiple of 4
                                           RouteCase{1000, 16, false, true},
                                           RouteCase{8, 1, true, false}));

TEST(CudaMoeRouteNan, ChoosesDistinctExpertsNumbersFirst) {
    if (!has_device()) GTEST_SKIP() << "no CUDA device";
    const RouteCase c{16, 8, true, false};
    std::vector<float> logits(16, std::nanf(""));
    logits[3] = 1.0f;
    logits[9] = -2.0f;
    logits[12] = 0.5f;
    const Routed gpu = route_on_device(c, logits, {}, 1);
    std::set<int32_t> seen(gpu.chosen.begin(), gpu.chosen.end());
    EXPECT_EQ(seen.size(), 8u) << "distinct experts";
    for (size_t j = 0; j < gpu.chosen.size(); ++j) {
        EXPECT_GE(gpu.chosen[j], 0);
        EXPECT_LT(gpu.chosen[j], 16);
        if (j > 0) {
            EXPECT_LT(gpu.chosen[j - 1], gpu.chosen[j]) << "ascending";
        }
    }
    EXPECT_TRUE(seen.count(3) && seen.count(9) && seen.count(12)) << "the numbers first";
}

}  // namespace
}  // namespace ember::cuda
