// The pieces of the mixture-of-experts FFN that do not need a model file: matmul_grouped() over
// the experts of a stacked tensor, for every weight type the dense path multiplies (bit for bit
// what one matmul() per expert gives, however the tokens are grouped), and the router's choice
// and weights.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/model/cpu/moe.h"
#include "engine/tensor/matmul.h"
#include "engine/tensor/traits.h"
#include "engine/util/thread_pool.h"
#include "tests/unit/test_tensor_ref.h"

namespace ember {
namespace {

std::vector<TensorType> all_supported() {
    std::vector<TensorType> types = test::float_types();
    types.insert(types.end(), test::quant_types().begin(), test::quant_types().end());
    return types;
}

// Experts stacked as one tensor: expert e's `rows` rows follow expert e-1's.
struct Stacked {
    std::vector<uint8_t> bytes;  // [n_expert*rows x row bytes]
    MatrixView view;
};

Stacked make_stacked(TensorType t, int64_t n_expert, int64_t rows, int64_t cols,
                     std::mt19937& rng) {
    Stacked s;
    const size_t rb = row_bytes(type_info(t), static_cast<uint64_t>(cols));
    s.bytes.resize(rb * static_cast<size_t>(n_expert * rows));
    for (int64_t r = 0; r < n_expert * rows; ++r) {
        const auto row = test::random_row(t, cols, rng);
        std::memcpy(s.bytes.data() + static_cast<size_t>(r) * rb, row.data(), rb);
    }
    s.view = MatrixView{t, s.bytes.data(), n_expert * rows, cols, rb};
    return s;
}

// Every supported type: experts of several tokens each, single-token experts sharing one input
// row (a decode step), and gate/up pairs sharing their inputs, all in one grouped call.
TEST(MatmulGrouped, EqualsOneMatmulPerExpertForEveryType) {
    constexpr int64_t kExperts = 5, kRows = 48, kCols = 256;
    ThreadPool pool(2);
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (TensorType t : all_supported()) {
        SCOPED_TRACE(std::string(type_info(t).name));
        const Stacked gate = make_stacked(t, kExperts, kRows, kCols, rng);
        const Stacked up = make_stacked(t, kExperts, kRows, kCols, rng);
        // Tokens per expert: 3, 1, 0, 7, 1 (the two single-token experts share their row; the empty
        // expert's prepared activations take no room, so its neighbours' must not be skipped).
        const int64_t tokens[kExperts] = {3, 1, 0, 7, 1};
        std::vector<std::vector<float>> x(kExperts);
        std::vector<float> shared(kCols);
        for (float& v : shared) v = normal(rng);
        std::vector<MatmulGroup> groups;
        std::vector<std::vector<float>> y(2 * kExperts);
        for (int64_t e = 0; e < kExperts; ++e) {
            x[e].resize(static_cast<size_t>(tokens[e] * kCols));
            for (float& v : x[e]) v = normal(rng);
            const float* in = tokens[e] == 1 ? shared.data() : x[e].data();
            y[2 * e].assign(static_cast<size_t>(tokens[e] * kRows), NAN);
            y[2 * e + 1].assign(static_cast<size_t>(tokens[e] * kRows), NAN);
            groups.push_back(
                {expert_rows(gate.view, kExperts, e), in, tokens[e], y[2 * e].data(), kRows});
            groups.push_back(
                {expert_rows(up.view, kExperts, e), in, tokens[e], y[2 * e + 1].data(), kRows});
        }
        MatmulScratch scratch;
        matmul_grouped(pool, groups, scratch);
        for (size_t g = 0; g < groups.size(); ++g) {
            const MatmulGroup& grp = groups[g];
            if (grp.n_tokens == 0) continue;
            // Each token alone, as a decode step computes it.
            for (int64_t tok = 0; tok < grp.n_tokens; ++tok) {
                std::vector<float> want(kRows);
                matmul(pool, grp.w, grp.x + tok * kCols, 1, want.data(), kRows, scratch);
                EXPECT_EQ(
                    std::memcmp(want.data(), y[g].data() + tok * kRows, kRows * sizeof(float)), 0)
                    << "group " << g << " token " << tok;
            }
        }
    }
}

TEST(MatmulGrouped, RefusesMatricesOfDifferentWidths) {
    ThreadPool pool(1);
    std::vector<float> w1(32 * 4, 0.0f), w2(64 * 4, 0.0f), x(64, 1.0f), y(8);
    const MatmulGroup groups[] = {
        {MatrixView{TensorType::F32, w1.data(), 4, 32, 32 * 4}, x.data(), 1, y.data(), 4},
        {MatrixView{TensorType::F32, w2.data(), 4, 64, 64 * 4}, x.data(), 1, y.data() + 4, 4}};
    MatmulScratch scratch;
    EXPECT_THROW(matmul_grouped(pool, groups, scratch), std::invalid_argument);
}

TEST(RouteToken, PicksTheLargestAndRenormalises) {
    // Expert 5 and 2 lead; 1 and 6 tie for third (the lower index wins).
    const float logits[8] = {0.1f, 1.0f, 2.5f, -3.0f, 0.0f, 3.0f, 1.0f, 0.5f};
    int32_t chosen[3];
    float weight[3];
    route_token(logits, 8, 3, true, chosen, weight);
    EXPECT_EQ(chosen[0], 1);  // ascending expert order
    EXPECT_EQ(chosen[1], 2);
    EXPECT_EQ(chosen[2], 5);
    const double e1 = std::exp(1.0), e2 = std::exp(2.5), e5 = std::exp(3.0);
    EXPECT_NEAR(weight[0], e1 / (e1 + e2 + e5), 1e-7);
    EXPECT_NEAR(weight[1], e2 / (e1 + e2 + e5), 1e-7);
    EXPECT_NEAR(weight[2], e5 / (e1 + e2 + e5), 1e-7);

    // Without renormalisation the weights are the softmax over every expert.
    route_token(logits, 8, 3, false, chosen, weight);
    double total = 0;
    for (float l : logits) total += std::exp(static_cast<double>(l));
    EXPECT_NEAR(weight[2], e5 / total, 1e-7);
    EXPECT_NEAR(weight[0] + weight[1] + weight[2], (e1 + e2 + e5) / total, 1e-6);
}

}  // namespace
}  // namespace ember
