// Constrained sampling: a filter gives exactly the tokens (and the distribution) that masking
// the logits to -inf gives, whether the sampler settles it from its best candidates or asks
// for the whole mask.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "engine/sampling/sampler.h"

using namespace ember;

namespace {

// Allows the ids with allowed[id] set; counts how it was asked.
class SetFilter : public TokenFilter {
public:
    explicit SetFilter(std::vector<uint8_t> allowed) : allowed_(std::move(allowed)) {}
    bool allows(int32_t id) override {
        ++single_checks;
        return allowed_[static_cast<size_t>(id)] != 0;
    }
    void mask(std::span<float> logits) override {
        ++masks;
        for (size_t i = 0; i < logits.size(); ++i) {
            if (!allowed_[i]) logits[i] = -std::numeric_limits<float>::infinity();
        }
    }
    int single_checks = 0;
    int masks = 0;

private:
    std::vector<uint8_t> allowed_;
};

struct Case {
    const char* name;
    SamplingParams params;
    double density;  // share of the vocabulary the filter allows
    bool expect_full_mask;
};

}  // namespace

TEST(ConstrainedSampling, FilterEqualsMaskedLogitsForEveryChain) {
    constexpr size_t kVocab = 5000;
    SamplingParams greedy;
    greedy.temperature = 0.0f;
    SamplingParams top_k;
    top_k.temperature = 1.5f;
    top_k.top_k = 40;
    SamplingParams nucleus;  // top-k off: needs the whole allowed set
    nucleus.temperature = 1.0f;
    nucleus.top_k = 0;
    nucleus.top_p = 0.9f;
    nucleus.min_p = 0.02f;
    SamplingParams penalized = top_k;
    penalized.repeat_penalty = 1.3f;
    penalized.presence_penalty = 0.5f;
    const std::vector<Case> cases = {
        {"greedy dense", greedy, 0.5, false},  {"greedy sparse", greedy, 0.001, true},
        {"top-k dense", top_k, 0.9, false},    {"top-k sparse", top_k, 0.002, true},
        {"nucleus dense", nucleus, 0.5, true}, {"penalized top-k", penalized, 0.7, false}};
    std::mt19937 rng(5);
    std::normal_distribution<float> normal(0.0f, 3.0f);
    for (const Case& c : cases) {
        int trials_masked = 0;  // trials that needed the whole mask
        for (int trial = 0; trial < 30; ++trial) {
            std::vector<float> logits(kVocab);
            for (float& x : logits) x = normal(rng);
            std::vector<uint8_t> allowed(kVocab);
            std::bernoulli_distribution keep(c.density);
            for (auto& a : allowed) a = keep(rng);
            allowed[static_cast<size_t>(trial)] = 1;  // never empty
            std::vector<float> masked = logits;
            for (size_t i = 0; i < kVocab; ++i) {
                if (!allowed[i]) masked[i] = -std::numeric_limits<float>::infinity();
            }
            SamplingParams p = c.params;
            p.seed = 100 + static_cast<uint64_t>(trial);
            Sampler with_filter(p), with_mask(p);
            const std::vector<int32_t> history = {1, 2, 3, 2, static_cast<int32_t>(trial)};
            with_filter.accept(history);
            with_mask.accept(history);
            SetFilter filter(allowed);
            const int32_t a = with_filter.sample(logits, &filter);
            const int32_t b = with_mask.sample(masked);
            ASSERT_EQ(a, b) << c.name << " trial " << trial;
            ASSERT_TRUE(allowed[static_cast<size_t>(a)]);
            trials_masked += filter.masks > 0;
            if (!c.expect_full_mask) {
                EXPECT_EQ(filter.masks, 0) << c.name;
                EXPECT_LE(filter.single_checks, 160) << c.name;  // at most the 4x40 best
            }
            // The distributions agree too, probability for probability.
            SetFilter again(allowed);
            const auto da = with_filter.distribution(logits, &again);
            const std::vector<TokenProb> copy(da.begin(), da.end());
            const auto db = with_mask.distribution(masked);
            ASSERT_EQ(copy.size(), db.size()) << c.name;
            for (size_t i = 0; i < db.size(); ++i) {
                ASSERT_EQ(copy[i].id, db[i].id);
                ASSERT_NEAR(copy[i].p, db[i].p, 1e-6);
            }
        }
        // Sparse: the best candidates rarely hold enough allowed tokens.
        if (c.expect_full_mask) {
            EXPECT_GE(trials_masked, 25) << c.name;
        }
    }
}

TEST(ConstrainedSampling, ARefusedDraftIsNeverAccepted) {
    constexpr size_t kVocab = 300;
    std::vector<float> logits(kVocab, 0.0f);
    logits[7] = 20.0f;  // the model all but insists on token 7
    std::vector<uint8_t> allowed(kVocab, 1);
    allowed[7] = 0;
    for (const float temperature : {0.0f, 1.5f}) {
        SamplingParams p;
        p.temperature = temperature;
        Sampler s(p);
        for (int i = 0; i < 50; ++i) {
            SetFilter filter(allowed);
            bool accepted = true;
            const int32_t got = s.sample_draft(logits, 7, accepted, &filter);
            EXPECT_FALSE(accepted);
            EXPECT_NE(got, 7);
        }
    }
}
