// engine/model/cpu/attention.h against attention computed directly in float64 from the same
// queries, keys and values: causal, sliding windows (the cache's ring included), sink logits,
// soft-capped scores and GQA, with batches of every size the scheduler treats differently
// (single tokens and short batches split per run, longer ones in token blocks).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "engine/model/cpu/attention.h"
#include "engine/model/state.h"
#include "engine/util/thread_pool.h"

namespace ember::test {
namespace {

constexpr int64_t kHeads = 8, kKvHeads = 2, kHeadDim = 64, kValueDim = 64;
constexpr int64_t kPositions = 600;

struct Case {
    const char* name;
    int64_t window;
    bool sinks;
    float softcap;
};

// out [value_dim] of query head h at position pos, in double.
std::vector<double> reference(const Case& c, const std::vector<float>& q,
                              const std::vector<float>& k, const std::vector<float>& v,
                              const std::vector<float>& sinks, float scale, int64_t pos,
                              int64_t h) {
    const int64_t kvh = h / (kHeads / kKvHeads);
    const int64_t first = c.window > 0 ? std::max<int64_t>(0, pos - c.window + 1) : 0;
    std::vector<double> scores;
    for (int64_t p = first; p <= pos; ++p) {
        double dot = 0;
        for (int64_t i = 0; i < kHeadDim; ++i) {
            dot += static_cast<double>(q[(pos * kHeads + h) * kHeadDim + i]) *
                   k[(p * kKvHeads + kvh) * kHeadDim + i];
        }
        double s = scale * dot;
        if (c.softcap > 0) s = c.softcap * std::tanh(s / c.softcap);
        scores.push_back(s);
    }
    double m = *std::max_element(scores.begin(), scores.end());
    if (c.sinks) m = std::max(m, static_cast<double>(sinks[h]));
    double l = c.sinks ? std::exp(sinks[h] - m) : 0.0;
    std::vector<double> out(kValueDim, 0.0);
    for (size_t j = 0; j < scores.size(); ++j) {
        const double w = std::exp(scores[j] - m);
        l += w;
        const int64_t p = first + static_cast<int64_t>(j);
        for (int64_t i = 0; i < kValueDim; ++i)
            out[i] += w * v[(p * kKvHeads + kvh) * kValueDim + i];
    }
    for (double& o : out) o /= l;
    return out;
}

class AttentionReference : public ::testing::TestWithParam<Case> {};

TEST_P(AttentionReference, EveryBatchShapeMatchesFloat64) {
    const Case c = GetParam();
    std::mt19937 rng(20261127);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    auto fill = [&](std::vector<float>& x, size_t n) {
        x.resize(n);
        for (float& f : x) f = u(rng);
    };
    std::vector<float> q, k, v, sinks;
    fill(q, kPositions * kHeads * kHeadDim);
    fill(k, kPositions * kKvHeads * kHeadDim);
    fill(v, kPositions * kKvHeads * kValueDim);
    fill(sinks, kHeads);
    for (float& s : sinks) s = 1.5f * s + 0.5f;  // [-1, 2]
    const float scale = 0.5f;                    // scores of a few units, so a cap of 2 bites

    KvCache kv;
    KvWindow window;
    if (c.window > 0) window = KvWindow{c.window, {true}};
    kv.init(1, kKvHeads * kHeadDim, kKvHeads * kValueDim, kPositions, KvType::F32, window);
    ThreadPool pool(2);
    AttentionScratch scratch;
    const AttentionHeads heads{kHeads, kKvHeads, kHeadDim, kValueDim};
    AttentionSettings settings;
    settings.window = c.window;
    settings.scale = scale;
    settings.softcap = c.softcap;
    settings.sinks = c.sinks ? sinks.data() : nullptr;

    // Single tokens, short split batches and token blocks, past the window and several runs.
    const std::vector<int64_t> batches = {1, 1, 3, 2, 64, 1, 130, 3, 200, 1, 17, 177};
    int64_t pos0 = 0;
    double worst = 0;
    for (int64_t n : batches) {
        ASSERT_LE(pos0 + n, kPositions);
        kv.reserve(pos0 + n);
        for (int64_t t = pos0; t < pos0 + n; ++t) {
            kv.store(0, t, k.data() + t * kKvHeads * kHeadDim, v.data() + t * kKvHeads * kValueDim);
        }
        std::vector<float> out(static_cast<size_t>(n * kHeads * kValueDim), -7.0f);
        attend_cached(heads, settings, kv, pool, q.data() + pos0 * kHeads * kHeadDim, pos0, n,
                      scratch, out.data());
        for (int64_t t = 0; t < n; ++t) {
            for (int64_t h = 0; h < kHeads; ++h) {
                const auto ref = reference(c, q, k, v, sinks, scale, pos0 + t, h);
                for (int64_t i = 0; i < kValueDim; ++i) {
                    const double got = out[static_cast<size_t>((t * kHeads + h) * kValueDim + i)];
                    worst = std::max(worst, std::abs(got - ref[static_cast<size_t>(i)]));
                }
            }
        }
        kv.set_length(pos0 + n);
        pos0 += n;
    }
    EXPECT_EQ(pos0, kPositions);
    EXPECT_LT(worst, 2e-6) << c.name;
}

INSTANTIATE_TEST_SUITE_P(Settings, AttentionReference,
                         ::testing::Values(Case{"causal", 0, false, 0.0f},
                                           Case{"window", 150, false, 0.0f},
                                           Case{"window_sinks", 200, true, 0.0f},
                                           Case{"softcap", 0, false, 2.0f},
                                           Case{"window_sinks_softcap", 150, true, 2.0f}),
                         [](const auto& param_info) { return std::string(param_info.param.name); });

}  // namespace
}  // namespace ember::test
