// Shared by the GPU tests: skipping without a GPU, loading a fixture onto GPU 0, greedy decoding.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "engine/model/forward.h"
#include "engine/model/gpu.h"
#include "engine/model/model.h"
#include "engine/model/state.h"
#include "engine/util/thread_pool.h"
#include "tests/support/reference_logits.h"

// GPU tests skip on machines without one (CI has none; scripts/gpu_test.sh runs them on one).
#define EMBER_REQUIRE_GPU()                                           \
    do {                                                              \
        if (::ember::gpu_count() == 0) GTEST_SKIP() << "no CUDA GPU"; \
    } while (0)

namespace ember::test {

// The model in the row layout the GPU reads, its weights on GPU 0 (or on the CPU: on_gpu false).
inline std::unique_ptr<Model> load_fixture_model(const std::string& path, bool on_gpu) {
    LoadOptions options;
    options.weight_panels = !on_gpu;
    auto model = Model::load(path, options);
    if (on_gpu) {
        const GpuPlacement placed = place_model(*model, {GpuRequest::Mode::Index, 0}, 0);
        EXPECT_TRUE(placed.on_gpu) << path;
    }
    return model;
}

inline int32_t argmax(std::span<const float> logits) {
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

// Top-1 minus top-2 logit.
inline double margin(std::span<const float> logits) {
    std::vector<float> v(logits.begin(), logits.end());
    std::partial_sort(v.begin(), v.begin() + 2, v.end(), std::greater<>());
    return static_cast<double>(v[0]) - v[1];
}

struct GreedyRun {
    std::vector<int32_t> tokens;
    std::vector<double> margins;             // of each chosen token
    std::vector<std::vector<float>> logits;  // [steps][n_vocab]
};

// `steps` greedy tokens continuing `state` (whose last logits are `first`).
inline GreedyRun greedy_from(const Model& model, InferenceState& state, ThreadPool& pool,
                             std::span<const float> first, int steps) {
    GreedyRun run;
    std::vector<float> logits(first.begin(), first.end());
    for (int i = 0; i < steps; ++i) {
        const int32_t token = argmax(logits);
        run.tokens.push_back(token);
        run.margins.push_back(margin(logits));
        run.logits.push_back(logits);
        const auto next =
            forward(model, state, pool, std::span<const int32_t>(&token, 1), LogitsWanted::Last);
        logits.assign(next.begin(), next.end());
    }
    return run;
}

// Greedy runs equal bit for bit: the same tokens, and every step's logits.
inline void expect_same_bits(const GreedyRun& got, const GreedyRun& want) {
    EXPECT_EQ(got.tokens, want.tokens);
    for (size_t i = 0; i < want.logits.size() && i < got.logits.size(); ++i) {
        EXPECT_EQ(0, std::memcmp(got.logits[i].data(), want.logits[i].data(),
                                 want.logits[i].size() * sizeof(float)))
            << "step " << i;
    }
}

// The tokens agree up to the first place where `a` chose differently with a margin over
// `min_margin` (ambiguous choices may go either way; past one, the runs are not comparable).
inline void expect_same_where_clear(const GreedyRun& a, const GreedyRun& b, double min_margin,
                                    const std::string& what) {
    for (size_t i = 0; i < a.tokens.size() && i < b.tokens.size(); ++i) {
        if (a.tokens[i] == b.tokens[i]) continue;
        EXPECT_LE(a.margins[i], min_margin)
            << what << ": token " << i << " is " << b.tokens[i] << ", expected " << a.tokens[i]
            << " (margin " << a.margins[i] << ")";
        return;
    }
}

// `ids` fed whole (batches of 256) twice, one by one and in uneven batches, with a `kv_type`
// cache: the two whole runs bit for bit, the other feeds within 2e-3 of them and choosing the
// same token wherever the whole run's margin is over 1e-2. Prints a "[gpu] ... feeds" line.
inline void check_feeds_agree(const Model& model, ThreadPool& pool, const std::vector<int32_t>& ids,
                              KvType kv_type, const std::string& what) {
    const auto n_vocab = static_cast<size_t>(model.config().n_vocab);
    const auto whole = logits_in_batches(model, pool, ids, {256}, kv_type);
    const auto again = logits_in_batches(model, pool, ids, {256}, kv_type);
    EXPECT_EQ(0, std::memcmp(whole.data(), again.data(), whole.size() * sizeof(float)))
        << what << ": two runs of the same input differ";
    const auto ones = logits_in_batches(model, pool, ids, {1}, kv_type);
    const auto uneven = logits_in_batches(model, pool, ids, {7, 100, 3, 64, 29}, kv_type);
    double worst = 0;
    for (size_t p = 0; p < ids.size(); ++p) {
        const std::span<const float> w(whole.data() + p * n_vocab, n_vocab);
        for (const auto* other : {&ones, &uneven}) {
            const std::span<const float> o(other->data() + p * n_vocab, n_vocab);
            for (size_t i = 0; i < n_vocab; ++i) {
                worst = std::max(worst, static_cast<double>(std::fabs(w[i] - o[i])));
            }
            if (margin(w) > 1e-2) {
                EXPECT_EQ(argmax(w), argmax(o)) << what << ": feeds choose differently at " << p;
            }
        }
    }
    EXPECT_LE(worst, 2e-3) << what << ": whole, one-by-one and uneven feeds";
    std::printf("[gpu] %s feeds: max |dlogit| %.2e over %zu positions\n", what.c_str(), worst,
                ids.size());
}

// Greedy decoding after the reference sequence `seq` (f32 cache) gives its greedy_ids up to
// the first difference, which may come only where the reference's margin is at most 1e-2.
inline void check_greedy_where_clear(const Model& model, ThreadPool& pool,
                                     const nlohmann::json& seq, const std::string& what) {
    ASSERT_TRUE(seq.contains("greedy_ids"));
    const std::vector<int32_t> ids = ids_of(seq);
    const auto expected = ids_of(seq, "greedy_ids");
    auto state = make_state(model.config(), static_cast<int64_t>(ids.size() + expected.size()) + 8,
                            KvType::F32);
    const auto first = forward(model, *state, pool, ids, LogitsWanted::Last);
    const GreedyRun run =
        greedy_from(model, *state, pool, first, static_cast<int>(expected.size()));
    for (size_t i = 0; i < expected.size(); ++i) {
        if (run.tokens[i] == expected[i]) continue;
        EXPECT_LE(seq["greedy_margins"][i].get<double>(), 1e-2)
            << what << ": greedy token " << i << " is " << run.tokens[i] << ", reference "
            << expected[i];
        break;
    }
}

}  // namespace ember::test
