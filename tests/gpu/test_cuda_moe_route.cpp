// The device's expert routing (moe_kernels.cuh: moe_route) against the CPU's (cpu/moe.h:
// route_token): the same experts, in ascending order, for logits full of ties (the lower index
// wins), -0 beside +0, with and without a router bias, renormalized or over every expert, for
// expert counts that do and do not fill a warp; and with NaN logits, n_used distinct valid
// experts, the numbers first. Then the prefill's grouping of the pairs by expert
// (moe_group_pairs) against a counting sort written here.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
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

// A stable counting sort of the pairs by expert and the tiles of each expert's rows, as the
// grouped products expect them (qmma_gemm.cuh), against the device's.
TEST(CudaMoeGroup, SortsPairsStablyAndTilesEachExpert) {
    if (!has_device()) GTEST_SKIP() << "no CUDA device";
    for (const RouteCase c : {RouteCase{128, 8, true, false}, RouteCase{32, 4, true, false}}) {
        for (const int tokens : {18, 256}) {
            const int pairs = tokens * c.n_used;
            std::mt19937 rng(static_cast<uint32_t>(tokens + c.n_expert));
            // Skewed: a few experts take many rows (several tiles), most few or none.
            std::vector<int32_t> chosen(static_cast<size_t>(pairs));
            for (int32_t& e : chosen) {
                e = static_cast<int32_t>(rng() % 4 == 0 ? rng() % c.n_expert : rng() % 3);
            }
            std::vector<int32_t> order(chosen.size()), position(chosen.size());
            std::vector<int64_t> start(static_cast<size_t>(c.n_expert) + 1, 0);
            for (const int32_t e : chosen) ++start[static_cast<size_t>(e) + 1];
            for (int e = 0; e < c.n_expert; ++e) start[e + 1] += start[e];
            std::vector<int64_t> fill(start.begin(), start.end() - 1);
            for (int p = 0; p < pairs; ++p) {
                const int64_t row = fill[static_cast<size_t>(chosen[static_cast<size_t>(p)])]++;
                order[static_cast<size_t>(row)] = p;
                position[static_cast<size_t>(p)] = static_cast<int32_t>(row);
            }
            std::vector<QmmaTile> tiles;
            for (int e = 0; e < c.n_expert; ++e) {
                for (int64_t row = start[e]; row < start[e + 1]; row += kQmmaTileTokens) {
                    tiles.push_back({e, static_cast<int32_t>(row),
                                     static_cast<int32_t>(
                                         std::min<int64_t>(kQmmaTileTokens, start[e + 1] - row)),
                                     0});
                }
            }
            MoeLayer layer;
            layer.n_expert = c.n_expert;
            layer.n_used = c.n_used;
            const int slots = moe_tile_slots(layer, tokens);
            ASSERT_LE(static_cast<int>(tiles.size()), slots);
            DeviceBuffer d_chosen(chosen.size() * sizeof(int32_t));
            DeviceBuffer d_order(chosen.size() * sizeof(int32_t));
            DeviceBuffer d_position(chosen.size() * sizeof(int32_t));
            DeviceBuffer d_tiles(static_cast<size_t>(slots) * sizeof(QmmaTile));
            CUDA_OK(cudaMemcpy(d_chosen.ptr, chosen.data(), chosen.size() * sizeof(int32_t),
                               cudaMemcpyHostToDevice));
            CUDA_OK(cudaMemset(d_tiles.ptr, 0x7f, static_cast<size_t>(slots) * sizeof(QmmaTile)));
            moe_group_pairs(layer, d_chosen.as<int32_t>(), tokens, d_order.as<int32_t>(),
                            d_position.as<int32_t>(), d_tiles.as<QmmaTile>(), nullptr);
            CUDA_OK(cudaDeviceSynchronize());
            std::vector<int32_t> got_order(chosen.size()), got_position(chosen.size());
            std::vector<QmmaTile> got_tiles(static_cast<size_t>(slots));
            CUDA_OK(cudaMemcpy(got_order.data(), d_order.ptr, chosen.size() * sizeof(int32_t),
                               cudaMemcpyDeviceToHost));
            CUDA_OK(cudaMemcpy(got_position.data(), d_position.ptr, chosen.size() * sizeof(int32_t),
                               cudaMemcpyDeviceToHost));
            CUDA_OK(cudaMemcpy(got_tiles.data(), d_tiles.ptr,
                               static_cast<size_t>(slots) * sizeof(QmmaTile),
                               cudaMemcpyDeviceToHost));
            EXPECT_EQ(got_order, order) << c.n_expert << " experts, " << tokens << " tokens";
            EXPECT_EQ(got_position, position) << c.n_expert << " experts, " << tokens << " tokens";
            for (size_t i = 0; i < got_tiles.size(); ++i) {
                const QmmaTile want = i < tiles.size() ? tiles[i] : QmmaTile{};
                EXPECT_EQ(got_tiles[i].expert, want.expert) << "tile " << i;
                EXPECT_EQ(got_tiles[i].row0, want.row0) << "tile " << i;
                EXPECT_EQ(got_tiles[i].count, want.count) << "tile " << i;
            }
        }
    }
}

}  // namespace
}  // namespace ember::cuda
