// Shared by the GPU tests: skipping without a GPU, loading a fixture onto GPU 0, greedy decoding.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/model/forward.h"
#include "engine/model/gpu.h"
#include "engine/model/model.h"
#include "engine/model/state.h"
#include "engine/util/thread_pool.h"

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

}  // namespace ember::test
