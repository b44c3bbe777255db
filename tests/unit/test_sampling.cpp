// Sampling chain: parameter validation, the generator's reference vectors, exact
// distributions against an independent reference chain, and the empirical distribution of
// actual draws (chi-square / binomial bounds), penalties, determinism and state round trips.
//
// Every random input comes from a fixed seed, so the suite is deterministic; the statistical
// bounds are set at about a 1e-6 false-alarm rate so that a failure means a real bias.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>
#include <map>
#include <numbers>
#include <numeric>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "engine/sampling/kernels.h"
#include "engine/sampling/rng.h"
#include "engine/sampling/sampler.h"

namespace ember {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Parameters with every cut off: plain softmax sampling at temperature 1.
SamplingParams plain_params(uint64_t seed = 1) {
    SamplingParams p;
    p.temperature = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.seed = seed;
    return p;
}

// Standard normal values via Box-Muller on our own generator, so the test inputs do not depend
// on the standard library's distribution implementation either.
std::vector<float> random_logits(Rng& rng, size_t n, double scale) {
    std::vector<float> out(n);
    for (size_t i = 0; i < n; ++i) {
        const double u1 = 1.0 - rng.next_double();  // (0, 1]
        const double u2 = rng.next_double();
        out[i] = static_cast<float>(scale * std::sqrt(-2.0 * std::log(u1)) *
                                    std::cos(2.0 * std::numbers::pi * u2));
    }
    return out;
}

std::vector<float> logits_from_probs(const std::vector<double>& probs) {
    std::vector<float> out;
    for (const double p : probs) out.push_back(static_cast<float>(std::log(p)));
    return out;
}

std::vector<double> softmax(const std::vector<float>& logits, double temperature) {
    double max_logit = -kInf;
    for (const float l : logits) max_logit = std::max(max_logit, static_cast<double>(l));
    std::vector<double> p;
    double total = 0.0;
    for (const float l : logits) {
        p.push_back(std::exp((l - max_logit) / temperature));
        total += p.back();
    }
    for (double& x : p) x /= total;
    return p;
}

double entropy(const std::vector<double>& p) {
    double h = 0.0;
    for (const double x : p) {
        if (x > 0) h -= x * std::log(x);
    }
    return h;
}

// Upper critical value of chi-square with `df` degrees of freedom at the normal quantile z
// (Wilson-Hilferty approximation; z = 4.75 is a tail of about 1e-6).
double chi_square_critical(int df, double z = 4.75) {
    const double a = 2.0 / (9.0 * df);
    return df * std::pow(1.0 - a + z * std::sqrt(a), 3.0);
}

// Pearson's chi-square of observed counts against expected probabilities (indexed by token).
// Bins expecting fewer than 5 draws are pooled so the approximation holds (a pool still
// below 5 is scored as if it expected 5, which only makes the test more lenient there). Draws on a
// token of probability 0 fail the test outright.
void expect_matches_distribution(const std::vector<int64_t>& counts,
                                 const std::vector<double>& probs, int64_t n_draws) {
    ASSERT_EQ(counts.size(), probs.size());
    double stat = 0.0;
    int bins = 0;
    double pooled_expected = 0.0;
    int64_t pooled_observed = 0;
    for (size_t i = 0; i < probs.size(); ++i) {
        const double expected = probs[i] * static_cast<double>(n_draws);
        if (probs[i] == 0.0) {
            EXPECT_EQ(counts[i], 0) << "token " << i << " has probability 0 but was drawn";
            continue;
        }
        if (expected < 5.0) {
            pooled_expected += expected;
            pooled_observed += counts[i];
            continue;
        }
        const double d = static_cast<double>(counts[i]) - expected;
        stat += d * d / expected;
        ++bins;
    }
    if (pooled_expected > 0.0) {
        const double d = static_cast<double>(pooled_observed) - pooled_expected;
        stat += d * d / std::max(pooled_expected, 5.0);
        ++bins;
    }
    ASSERT_GE(bins, 2);
    EXPECT_LT(stat, chi_square_critical(bins - 1)) << "chi-square over " << bins << " bins";
}

std::vector<int64_t> draw_counts(Sampler& sampler, const std::vector<float>& logits,
                                 int64_t n_draws) {
    std::vector<int64_t> counts(logits.size(), 0);
    for (int64_t i = 0; i < n_draws; ++i) {
        const int32_t token = sampler.sample(logits);
        if (token < 0 || static_cast<size_t>(token) >= logits.size()) {
            ADD_FAILURE() << "token " << token << " outside the vocabulary";
            continue;
        }
        ++counts[static_cast<size_t>(token)];
    }
    return counts;
}

// Logits after the penalties, computed independently in double from the full history.
std::vector<double> reference_penalized(const std::vector<float>& logits, const SamplingParams& sp,
                                        const std::vector<int32_t>& history) {
    std::vector<double> l(logits.begin(), logits.end());
    const size_t last_n = static_cast<size_t>(sp.penalty_last_n);
    const size_t start = history.size() > last_n ? history.size() - last_n : 0;
    std::map<int32_t, int> counts;
    for (size_t i = start; i < history.size(); ++i) ++counts[history[i]];
    for (const auto& [token, count] : counts) {
        if (static_cast<size_t>(token) >= l.size()) continue;
        double& x = l[static_cast<size_t>(token)];
        const double r = sp.repeat_penalty;
        x = x > 0 ? x / r : x * r;
        x -= count * static_cast<double>(sp.frequency_penalty) +
             static_cast<double>(sp.presence_penalty);
    }
    return l;
}

struct Reference {
    std::vector<std::pair<int32_t, double>> kept;  // ranked, probabilities summing to 1
    bool ambiguous = false;  // a cut lies within rounding of its threshold: skip exact checks
};

// The chain applied literally, step by step, in double: sort the whole vocabulary, cut to
// top-k, softmax with temperature, top-p on the cumulative mass, min-p against the maximum,
// renormalize.
Reference reference_chain(const std::vector<float>& logits, const SamplingParams& sp,
                          const std::vector<int32_t>& history) {
    const std::vector<double> l = reference_penalized(logits, sp, history);
    Reference ref;
    std::vector<int32_t> order(l.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
        return l[static_cast<size_t>(a)] > l[static_cast<size_t>(b)];
    });
    if (sp.temperature == 0.0f) {
        ref.kept.push_back({order[0], 1.0});
        return ref;
    }
    if (sp.top_k > 0 && static_cast<size_t>(sp.top_k) < order.size()) {
        order.resize(static_cast<size_t>(sp.top_k));
    }
    const double max_logit = l[static_cast<size_t>(order[0])];
    std::vector<double> p;
    double total = 0.0;
    for (const int32_t id : order) {
        p.push_back(std::exp((l[static_cast<size_t>(id)] - max_logit) / sp.temperature));
        total += p.back();
    }
    for (double& x : p) x /= total;

    // Top-p on the cumulative mass, then min-p against the most likely token (top-p's
    // renormalization leaves ratios alone, so p[0] serves), then renormalize.
    const auto cut = [&](double top_p, double min_p) {
        size_t keep = order.size();
        if (top_p < 1.0) {
            double cumulative = 0.0;
            for (size_t i = 0; i < order.size(); ++i) {
                cumulative += p[i];
                if (cumulative >= top_p) {
                    keep = i + 1;
                    break;
                }
            }
        }
        std::vector<std::pair<int32_t, double>> kept;
        for (size_t i = 0; i < keep; ++i) {
            if (p[i] >= min_p * p[0]) kept.push_back({order[i], p[i]});
        }
        double mass = 0.0;
        for (const auto& kp : kept) mass += kp.second;
        for (auto& kp : kept) kp.second /= mass;
        return kept;
    };
    const auto same_ids = [](const auto& a, const auto& b) {
        return std::equal(a.begin(), a.end(), b.begin(), b.end(),
                          [](const auto& x, const auto& y) { return x.first == y.first; });
    };
    const double top_p = sp.top_p;
    const double min_p = sp.min_p;
    ref.kept = cut(top_p, min_p);
    // The sampler works with float weights: if nudging a threshold by 1e-6 changes the kept
    // set, either answer is right and the exact comparison is skipped.
    constexpr double kNudge = 1e-6;
    if (top_p < 1.0 && !same_ids(cut(top_p - kNudge, min_p), cut(top_p + kNudge, min_p))) {
        ref.ambiguous = true;
    }
    if (min_p > 0.0 &&
        !same_ids(cut(top_p, min_p * (1 - kNudge)), cut(top_p, min_p * (1 + kNudge)))) {
        ref.ambiguous = true;
    }
    return ref;
}

std::vector<double> reference_probs_by_id(const Reference& ref, size_t n_vocab) {
    std::vector<double> probs(n_vocab, 0.0);
    for (const auto& [id, p] : ref.kept) probs[static_cast<size_t>(id)] = p;
    return probs;
}

void expect_distribution_equals(std::span<const TokenProb> got, const Reference& ref) {
    ASSERT_EQ(got.size(), ref.kept.size());
    for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(got[i].id, ref.kept[i].first) << "rank " << i;
        EXPECT_NEAR(got[i].p, ref.kept[i].second, 1e-6 + 1e-4 * ref.kept[i].second) << "rank " << i;
    }
}

// ---------------------------------------------------------------------------------------------
// Parameters

TEST(SamplingParams, DefaultsAreTheDocumentedOnesAndValid) {
    const SamplingParams p;
    EXPECT_FLOAT_EQ(p.temperature, 0.8f);
    EXPECT_EQ(p.top_k, 40);
    EXPECT_FLOAT_EQ(p.top_p, 0.95f);
    EXPECT_FLOAT_EQ(p.min_p, 0.05f);
    EXPECT_FLOAT_EQ(p.repeat_penalty, 1.0f);
    EXPECT_FLOAT_EQ(p.presence_penalty, 0.0f);
    EXPECT_FLOAT_EQ(p.frequency_penalty, 0.0f);
    EXPECT_EQ(p.penalty_last_n, 64);
    EXPECT_NO_THROW(p.validate());
}

TEST(SamplingParams, BoundaryValuesAreAccepted) {
    SamplingParams p;
    p.temperature = 0.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.penalty_last_n = 0;
    p.presence_penalty = -2.0f;
    p.frequency_penalty = 2.0f;
    EXPECT_NO_THROW(p.validate());
    p.min_p = 1.0f;
    p.penalty_last_n = SamplingParams::kMaxPenaltyLastN;
    EXPECT_NO_THROW(p.validate());
}

TEST(SamplingParams, ValidateNamesTheBadField) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const float inf = std::numeric_limits<float>::infinity();
    struct Case {
        const char* field;
        void (*mutate)(SamplingParams&, float nan, float inf);
    };
    const Case cases[] = {
        {"temperature", [](SamplingParams& p, float, float) { p.temperature = -0.1f; }},
        {"temperature", [](SamplingParams& p, float n, float) { p.temperature = n; }},
        {"temperature", [](SamplingParams& p, float, float i) { p.temperature = i; }},
        {"top_k", [](SamplingParams& p, float, float) { p.top_k = -1; }},
        {"top_p", [](SamplingParams& p, float, float) { p.top_p = 0.0f; }},
        {"top_p", [](SamplingParams& p, float, float) { p.top_p = 1.01f; }},
        {"top_p", [](SamplingParams& p, float n, float) { p.top_p = n; }},
        {"min_p", [](SamplingParams& p, float, float) { p.min_p = -0.01f; }},
        {"min_p", [](SamplingParams& p, float, float) { p.min_p = 1.5f; }},
        {"min_p", [](SamplingParams& p, float n, float) { p.min_p = n; }},
        {"repeat_penalty", [](SamplingParams& p, float, float) { p.repeat_penalty = 0.0f; }},
        {"repeat_penalty", [](SamplingParams& p, float, float) { p.repeat_penalty = -1.1f; }},
        {"repeat_penalty", [](SamplingParams& p, float, float i) { p.repeat_penalty = i; }},
        {"presence_penalty", [](SamplingParams& p, float n, float) { p.presence_penalty = n; }},
        {"frequency_penalty", [](SamplingParams& p, float, float i) { p.frequency_penalty = -i; }},
        {"penalty_last_n", [](SamplingParams& p, float, float) { p.penalty_last_n = -1; }},
        {"penalty_last_n", [](SamplingParams& p, float,
                              float) { p.penalty_last_n = SamplingParams::kMaxPenaltyLastN + 1; }},
    };
    for (const Case& c : cases) {
        SamplingParams p;
        c.mutate(p, nan, inf);
        try {
            p.validate();
            ADD_FAILURE() << "validate() accepted a bad " << c.field;
        } catch (const std::invalid_argument& e) {
            EXPECT_NE(std::string(e.what()).find(c.field), std::string::npos)
                << "message '" << e.what() << "' does not name " << c.field;
        }
        EXPECT_THROW(Sampler{p}, std::invalid_argument) << c.field;
    }
}

TEST(SamplingParams, SetParamsRejectsBadValuesAndChangesNothing) {
    Sampler sampler(plain_params());
    SamplingParams bad = plain_params();
    bad.top_p = 2.0f;
    EXPECT_THROW(sampler.set_params(bad), std::invalid_argument);
    EXPECT_FLOAT_EQ(sampler.params().top_p, 1.0f);
}

// ---------------------------------------------------------------------------------------------
// Generator: reference values computed from the published algorithm definitions
// (splitmix64 and xoshiro256**) by an independent implementation.

TEST(Rng, MatchesReferenceVectors) {
    uint64_t x = 0;
    EXPECT_EQ(Rng::splitmix64(x), 0xe220a8397b1dcdafULL);
    EXPECT_EQ(Rng::splitmix64(x), 0x6e789e6aa1b965f4ULL);

    const Rng zero(0);
    EXPECT_EQ(zero.state(), (Rng::State{0xe220a8397b1dcdafULL, 0x6e789e6aa1b965f4ULL,
                                        0x06c45d188009454fULL, 0xf88bb8a8724c81ecULL}));
    Rng a(0);
    EXPECT_EQ(a.next_u64(), 0x99ec5f36cb75f2b4ULL);
    EXPECT_EQ(a.next_u64(), 0xbf6e1f784956452aULL);
    EXPECT_EQ(a.next_u64(), 0x1a5f849d4933e6e0ULL);
    EXPECT_EQ(a.next_u64(), 0x6aa594f1262d2d2cULL);

    Rng b(0xdeadbeefcafebabeULL);
    EXPECT_EQ(b.next_u64(), 0x2299b3421aa78b66ULL);
    EXPECT_EQ(b.next_u64(), 0x9af6550483e02887ULL);

    Rng c(42);
    EXPECT_DOUBLE_EQ(c.next_double(), 0.08386297105988216);
    EXPECT_DOUBLE_EQ(c.next_double(), 0.3789802506626686);
    EXPECT_DOUBLE_EQ(c.next_double(), 0.6800434110281394);
}

// ---------------------------------------------------------------------------------------------
// Kernels

TEST(SamplingKernels, ExpMatchesStdExp) {
    namespace k = sampling_kernels;
    EXPECT_EQ(k::exp_nonpositive(0.0f), 1.0f);
    EXPECT_EQ(k::exp_nonpositive(-0.0f), 1.0f);
    EXPECT_EQ(k::exp_nonpositive(-87.5f), 0.0f);
    EXPECT_EQ(k::exp_nonpositive(-1e30f), 0.0f);
    EXPECT_EQ(k::exp_nonpositive(-std::numeric_limits<float>::infinity()), 0.0f);
    double worst = 0.0;
    float previous = 0.0f;
    for (int i = 0; i <= 2000000; ++i) {
        const float x = -87.0f + 87.0f * static_cast<float>(i) / 2000000.0f;
        const float got = k::exp_nonpositive(x);
        const double want = std::exp(static_cast<double>(x));
        worst = std::max(worst, std::abs(got - want) / want);
        // Ranking relies on weights never decreasing as logits grow (ties allowed).
        ASSERT_GE(got, previous) << "x = " << x;
        previous = got;
    }
    EXPECT_LT(worst, 2.5e-7);
}

TEST(SamplingKernels, ReductionsAndScansMatchPlainLoops) {
    namespace k = sampling_kernels;
    Rng rng(3);
    for (const size_t n : {1u, 7u, 16u, 17u, 100u, 1000u}) {
        SCOPED_TRACE(n);
        std::vector<float> x = random_logits(rng, n, 4.0);
        if (n > 5) {
            x[3] = -std::numeric_limits<float>::infinity();
            x[4] = -0.0f;
        }
        const float max = *std::max_element(x.begin(), x.end());
        EXPECT_EQ(k::max_value(x.data(), n), max);
        EXPECT_EQ(k::first_index_of(x.data(), n, max),
                  static_cast<size_t>(std::find(x.begin(), x.end(), max) - x.begin()));
        std::vector<float> weights;
        for (const float v : x) weights.push_back(std::exp(std::min(v, 0.0f)));
        double plain = 0.0;
        for (const float w : weights) plain += w;
        EXPECT_NEAR(k::sum(weights.data(), n), plain, 1e-12 * static_cast<double>(n));
        double plain_above = 0.0;
        for (const float w : weights) plain_above += w >= 0.5f ? w : 0.0f;
        EXPECT_NEAR(k::sum_at_least(weights.data(), n, 0.5f), plain_above,
                    1e-12 * static_cast<double>(n));
    }
    const std::vector<float> negatives = {-3.0f, -1.0f, -2.0f, -1.0f};
    EXPECT_EQ(k::max_value(negatives.data(), negatives.size()), -1.0f);
    // Weight buckets never go backwards as the weight grows.
    uint32_t previous = k::kBuckets - 1;
    EXPECT_EQ(k::weight_bucket(0.0f), previous);
    for (float w = 1e-15f; w <= 1.0f; w *= 1.01f) {
        const uint32_t b = k::weight_bucket(w);
        EXPECT_LE(b, previous) << "w = " << w;
        previous = b;
    }
    EXPECT_EQ(k::weight_bucket(1.0f), 0u);
}

TEST(Sampler, DrawMappingIsPinned) {
    // Any change here breaks the replay of saved sessions. Equal weights over 1000 tokens: the
    // draw is floor(u * 1000) for the generator's u, which pins the path from seed to token.
    Sampler sampler(plain_params(42));
    const std::vector<float> flat(1000, 0.5f);
    EXPECT_EQ(sampler.sample(flat), 83);
    EXPECT_EQ(sampler.sample(flat), 378);
    EXPECT_EQ(sampler.sample(flat), 680);

    // The same for the cutting paths (top-k; top-p and min-p over the whole vocabulary), on
    // logits with many ties. Values recorded from this implementation; they agree at -O0 and
    // -O3 and between GCC and Clang.
    std::vector<float> logits(5000);
    for (size_t i = 0; i < logits.size(); ++i) {
        logits[i] = static_cast<float>((i * 7919) % 1000) / 100.0f;
    }
    const struct {
        int32_t top_k;
        float top_p, min_p;
        std::vector<int32_t> expected;
    } cases[] = {
        {40, 0.95f, 0.05f, {2321, 4926, 2321, 642, 4926, 4642}},
        {0, 0.9f, 0.0f, {284, 3914, 359, 804, 3877, 1235}},
        {0, 1.0f, 0.01f, {284, 3914, 359, 803, 3877, 1235}},
    };
    for (const auto& c : cases) {
        SamplingParams p = plain_params(2024);
        p.top_k = c.top_k;
        p.top_p = c.top_p;
        p.min_p = c.min_p;
        Sampler s(p);
        std::vector<int32_t> got;
        for (size_t i = 0; i < c.expected.size(); ++i) got.push_back(s.sample(logits));
        EXPECT_EQ(got, c.expected) << "top_k=" << c.top_k << " top_p=" << c.top_p;
    }
}

// ---------------------------------------------------------------------------------------------
// Greedy

TEST(Sampler, GreedyIsArgmaxWithLowestIdOnTies) {
    SamplingParams p = plain_params();
    p.temperature = 0.0f;
    Sampler sampler(p);
    Rng rng(5);
    for (int trial = 0; trial < 50; ++trial) {
        const std::vector<float> logits = random_logits(rng, 1000, 3.0);
        const auto expected = std::max_element(logits.begin(), logits.end()) - logits.begin();
        EXPECT_EQ(sampler.sample(logits), expected);
    }
    EXPECT_EQ(sampler.sample(std::vector<float>{1.0f, 3.0f, 3.0f, 2.0f}), 1);
    EXPECT_EQ(sampler.sample(std::vector<float>{7.0f, 7.0f}), 0);
    const auto dist = sampler.distribution(std::vector<float>{1.0f, 3.0f, 3.0f, 2.0f});
    ASSERT_EQ(dist.size(), 1u);
    EXPECT_EQ(dist[0].id, 1);
    EXPECT_FLOAT_EQ(dist[0].p, 1.0f);
}

TEST(Sampler, GreedyAppliesPenaltiesFirst) {
    SamplingParams p = plain_params();
    p.temperature = 0.0f;
    p.repeat_penalty = 1.2f;  // 2.0 / 1.2 = 1.67 < 1.9
    Sampler sampler(p);
    const std::vector<float> logits = {2.0f, 1.9f, 0.0f};
    EXPECT_EQ(sampler.sample(logits), 0);
    sampler.accept(0);
    EXPECT_EQ(sampler.sample(logits), 1);
}

TEST(Sampler, GreedyDoesNotConsumeTheGenerator) {
    const std::vector<float> logits = {0.1f, 0.5f, 0.2f, 0.9f, 0.4f};
    SamplingParams greedy = plain_params(9);
    greedy.temperature = 0.0f;
    Sampler a(greedy);
    for (int i = 0; i < 10; ++i) a.sample(logits);
    a.set_params(plain_params());
    Sampler b(plain_params(9));
    for (int i = 0; i < 100; ++i) EXPECT_EQ(a.sample(logits), b.sample(logits));
}

// ---------------------------------------------------------------------------------------------
// Distributions of actual draws

TEST(Sampler, UntruncatedDrawsFollowTheSoftmax) {
    const std::vector<float> logits = {1.0f, -0.5f, 2.0f, 0.3f, 0.0f, -2.0f, 1.7f, 0.9f};
    Sampler sampler(plain_params(11));
    const std::vector<double> expected = softmax(logits, 1.0);
    const auto dist = sampler.distribution(logits);
    ASSERT_EQ(dist.size(), logits.size());
    for (const TokenProb& tp : dist) EXPECT_NEAR(tp.p, expected[static_cast<size_t>(tp.id)], 1e-6);
    constexpr int64_t kDraws = 200000;
    expect_matches_distribution(draw_counts(sampler, logits, kDraws), expected, kDraws);
}

TEST(Sampler, UntruncatedDrawsOverManyBlocksFollowTheSoftmax) {
    // Draws over the whole vocabulary go block by block (256 tokens); heavy tokens placed at
    // block edges and in between check that no block is skipped or counted twice.
    std::vector<float> logits(3000, -4.0f);
    const int32_t heavy[] = {0, 255, 256, 511, 700, 1023, 1024, 1500, 2047, 2048, 2815, 2999};
    for (size_t i = 0; i < std::size(heavy); ++i) {
        logits[static_cast<size_t>(heavy[i])] = 1.0f + 0.1f * static_cast<float>(i);
    }
    Sampler sampler(plain_params(13));
    constexpr int64_t kDraws = 40000;
    expect_matches_distribution(draw_counts(sampler, logits, kDraws), softmax(logits, 1.0), kDraws);
}

TEST(Sampler, TemperatureMatchesTemperedSoftmaxAndOrdersEntropy) {
    const std::vector<float> logits = {1.0f, -0.5f, 2.0f, 0.3f, 0.0f, -2.0f, 1.7f, 0.9f};
    constexpr int64_t kDraws = 200000;
    double previous_exact = 0.0;
    double previous_empirical = 0.0;
    for (const float temperature : {0.5f, 1.0f, 2.0f}) {
        SCOPED_TRACE(temperature);
        SamplingParams p = plain_params(21);
        p.temperature = temperature;
        Sampler sampler(p);
        const std::vector<double> expected = softmax(logits, temperature);
        const auto dist = sampler.distribution(logits);
        for (const TokenProb& tp : dist) {
            EXPECT_NEAR(tp.p, expected[static_cast<size_t>(tp.id)], 1e-6);
        }
        const std::vector<int64_t> counts = draw_counts(sampler, logits, kDraws);
        expect_matches_distribution(counts, expected, kDraws);
        std::vector<double> empirical;
        for (const int64_t c : counts) empirical.push_back(static_cast<double>(c) / kDraws);
        // Higher temperature flattens the distribution, so entropy must rise, both exactly and
        // in the draws.
        EXPECT_GT(entropy(expected), previous_exact);
        EXPECT_GT(entropy(empirical), previous_empirical);
        EXPECT_NEAR(entropy(empirical), entropy(expected), 0.01);
        previous_exact = entropy(expected);
        previous_empirical = entropy(empirical);
    }
}

TEST(Sampler, TopKTwoDrawsOnlyTheTopTwoInTheRightRatio) {
    const std::vector<float> logits = {0.2f, -1.0f, 1.5f, 0.9f, 0.0f, 2.0f, 1.1f, -0.3f};
    SamplingParams p = plain_params(31);
    p.top_k = 2;
    Sampler sampler(p);
    constexpr int64_t kDraws = 200000;
    const std::vector<int64_t> counts = draw_counts(sampler, logits, kDraws);
    EXPECT_EQ(counts[5] + counts[2], kDraws) << "drew outside the top 2";
    // Renormalized over the two survivors: P(5) = 1 / (1 + e^(1.5 - 2.0)).
    const double q = 1.0 / (1.0 + std::exp(1.5 - 2.0));
    const double sigma = std::sqrt(kDraws * q * (1.0 - q));
    EXPECT_NEAR(static_cast<double>(counts[5]), kDraws * q, 5.0 * sigma);
    const auto dist = sampler.distribution(logits);
    ASSERT_EQ(dist.size(), 2u);
    EXPECT_EQ(dist[0].id, 5);
    EXPECT_EQ(dist[1].id, 2);
    EXPECT_NEAR(dist[0].p, q, 1e-6);
}

TEST(Sampler, TopKBreaksTiesTowardLowerIds) {
    SamplingParams p = plain_params();
    p.top_k = 2;
    Sampler sampler(p);
    const auto dist = sampler.distribution(std::vector<float>{1.0f, 2.0f, 2.0f, 2.0f});
    ASSERT_EQ(dist.size(), 2u);
    EXPECT_EQ(dist[0].id, 1);
    EXPECT_EQ(dist[1].id, 2);
    EXPECT_FLOAT_EQ(dist[0].p, 0.5f);
}

TEST(Sampler, TopPKeepsTheMinimalSetReachingP) {
    // Probabilities 0.4, 0.3, 0.2, 0.1 scattered over ids.
    const std::vector<double> probs = {0.1, 0.4, 0.2, 0.3};
    const std::vector<float> logits = logits_from_probs(probs);
    const struct {
        float top_p;
        std::vector<int32_t> kept;  // ranked
    } cases[] = {
        {0.35f, {1}},           // 0.4 >= 0.35
        {0.65f, {1, 3}},        // 0.4 < 0.65 <= 0.7
        {0.75f, {1, 3, 2}},     // 0.7 < 0.75 <= 0.9
        {0.95f, {1, 3, 2, 0}},  // 0.9 < 0.95
        {1.0f, {1, 3, 2, 0}},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.top_p);
        SamplingParams p = plain_params(41);
        p.top_p = c.top_p;
        Sampler sampler(p);
        const auto dist = sampler.distribution(logits);
        ASSERT_EQ(dist.size(), c.kept.size());
        double kept_mass = 0.0;
        for (const int32_t id : c.kept) kept_mass += probs[static_cast<size_t>(id)];
        for (size_t i = 0; i < dist.size(); ++i) {
            EXPECT_EQ(dist[i].id, c.kept[i]);
            EXPECT_NEAR(dist[i].p, probs[static_cast<size_t>(c.kept[i])] / kept_mass, 1e-6);
        }
    }
    // Draws with top_p = 0.75 follow 0.4 : 0.3 : 0.2 and never pick id 0.
    SamplingParams p = plain_params(43);
    p.top_p = 0.75f;
    Sampler sampler(p);
    constexpr int64_t kDraws = 200000;
    const std::vector<double> expected = {0.0, 0.4 / 0.9, 0.2 / 0.9, 0.3 / 0.9};
    expect_matches_distribution(draw_counts(sampler, logits, kDraws), expected, kDraws);
}

TEST(Sampler, MinPCutsTokensBelowTheFractionOfTheMaximum) {
    const std::vector<double> probs = {0.15, 0.05, 0.5, 0.1, 0.2};
    const std::vector<float> logits = logits_from_probs(probs);
    SamplingParams p = plain_params(51);
    p.min_p = 0.25f;  // threshold 0.125: keeps 0.5, 0.2, 0.15
    Sampler sampler(p);
    const auto dist = sampler.distribution(logits);
    ASSERT_EQ(dist.size(), 3u);
    EXPECT_EQ(dist[0].id, 2);
    EXPECT_EQ(dist[1].id, 4);
    EXPECT_EQ(dist[2].id, 0);
    constexpr int64_t kDraws = 200000;
    const std::vector<double> expected = {0.15 / 0.85, 0.0, 0.5 / 0.85, 0.0, 0.2 / 0.85};
    expect_matches_distribution(draw_counts(sampler, logits, kDraws), expected, kDraws);
}

TEST(Sampler, MinPAppliesToTemperedProbabilities) {
    // At temperature 2 the ratios are square roots: 0.1/0.5 = 0.2 becomes sqrt(0.2) = 0.447, so
    // min_p = 0.3 keeps id 1 although 0.2 < 0.3 at temperature 1.
    const std::vector<float> logits = logits_from_probs({0.5, 0.1, 0.4});
    SamplingParams p = plain_params();
    p.min_p = 0.3f;
    EXPECT_EQ(Sampler(p).distribution(logits).size(), 2u);
    p.temperature = 2.0f;
    EXPECT_EQ(Sampler(p).distribution(logits).size(), 3u);
}

// ---------------------------------------------------------------------------------------------
// The whole chain against the literal reference

TEST(Sampler, ChainMatchesReferenceAcrossSettings) {
    Rng rng(61);
    const std::vector<float> logits = random_logits(rng, 3000, 2.5);
    std::vector<int32_t> history;
    for (int i = 0; i < 100; ++i) history.push_back(static_cast<int32_t>(rng.next_u64() % 200));
    int compared = 0;
    int ambiguous = 0;
    for (const int32_t top_k : {0, 1, 7, 40, 1500}) {  // 1500 takes the nth_element path
        for (const float top_p : {1.0f, 0.9f, 0.5f}) {
            for (const float min_p : {0.0f, 0.05f, 0.3f}) {
                for (const float temperature : {0.3f, 0.8f, 1.7f}) {
                    for (const bool penalties : {false, true}) {
                        SamplingParams p;
                        p.top_k = top_k;
                        p.top_p = top_p;
                        p.min_p = min_p;
                        p.temperature = temperature;
                        if (penalties) {
                            p.repeat_penalty = 1.3f;
                            p.presence_penalty = 0.4f;
                            p.frequency_penalty = 0.2f;
                            p.penalty_last_n = 48;
                        }
                        SCOPED_TRACE(testing::Message()
                                     << "top_k=" << top_k << " top_p=" << top_p
                                     << " min_p=" << min_p << " T=" << temperature
                                     << " penalties=" << penalties);
                        const Reference ref = reference_chain(logits, p, history);
                        if (ref.ambiguous) {
                            ++ambiguous;
                            continue;
                        }
                        Sampler sampler(p);
                        sampler.accept(history);
                        expect_distribution_equals(sampler.distribution(logits), ref);
                        ++compared;
                    }
                }
            }
        }
    }
    EXPECT_LE(ambiguous, 5);
    EXPECT_GE(compared, 200);
}

TEST(Sampler, DrawsFollowTheReferenceChain) {
    Rng rng(71);
    const std::vector<float> logits = random_logits(rng, 500, 1.5);
    std::vector<int32_t> history;
    for (int i = 0; i < 30; ++i) history.push_back(static_cast<int32_t>(rng.next_u64() % 500));
    SamplingParams p;
    p.temperature = 0.9f;
    p.top_k = 60;
    p.top_p = 0.8f;
    p.min_p = 0.02f;
    p.repeat_penalty = 1.1f;
    p.frequency_penalty = 0.1f;
    p.presence_penalty = 0.3f;
    p.seed = 72;
    const Reference ref = reference_chain(logits, p, history);
    ASSERT_FALSE(ref.ambiguous);
    Sampler sampler(p);
    sampler.accept(history);
    constexpr int64_t kDraws = 50000;
    expect_matches_distribution(draw_counts(sampler, logits, kDraws),
                                reference_probs_by_id(ref, logits.size()), kDraws);
}

// A 152k vocabulary (Qwen-sized) through every selection path: heap top-k, nth_element top-k,
// whole-vocabulary min-p gathering, the lowering top-p threshold, and no cut at all.
TEST(Sampler, LargeVocabularyPathsMatchReference) {
    constexpr size_t kVocab = 152064;
    Rng rng(81);
    std::vector<float> peaked = random_logits(rng, kVocab, 2.0);
    peaked[1234] = 14.0f;
    peaked[99999] = 13.0f;
    peaked[5] = 12.5f;
    // One dominant token over a long flat tail holding most of the mass (top 1: weight 1 vs
    // 152k x e^-10 = 6.9): the top-p gathering must lower its threshold to reach the tail.
    std::vector<float> long_tail = random_logits(rng, kVocab, 0.01);
    long_tail[777] = 10.0f;

    struct Case {
        const char* name;
        const std::vector<float>* logits;
        int32_t top_k;
        float top_p;
        float min_p;
    };
    const Case cases[] = {
        {"defaults", &peaked, 40, 0.95f, 0.05f},
        {"nth_element top-k", &peaked, 5000, 0.95f, 0.0f},
        {"top-p only", &peaked, 0, 0.9f, 0.0f},
        {"top-p and min-p", &peaked, 0, 0.95f, 0.01f},
        {"long tail top-p", &long_tail, 0, 0.5f, 0.0f},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.name);
        SamplingParams p;
        p.temperature = 1.0f;
        p.top_k = c.top_k;
        p.top_p = c.top_p;
        p.min_p = c.min_p;
        p.seed = 82;
        const Reference ref = reference_chain(*c.logits, p, {});
        ASSERT_FALSE(ref.ambiguous);
        Sampler sampler(p);
        expect_distribution_equals(sampler.distribution(*c.logits), ref);
        std::set<int32_t> support;
        for (const auto& kp : ref.kept) support.insert(kp.first);
        for (int i = 0; i < 50; ++i) {
            EXPECT_TRUE(support.count(sampler.sample(*c.logits))) << "drew outside the kept set";
        }
    }

    // No cut at all: draws over the whole vocabulary, checked on the dominant tokens' rates.
    SamplingParams p = plain_params(83);
    Sampler sampler(p);
    const std::vector<double> expected = softmax(peaked, 1.0);
    constexpr int64_t kDraws = 1000;
    int64_t hits = 0;
    for (int64_t i = 0; i < kDraws; ++i) hits += sampler.sample(peaked) == 1234 ? 1 : 0;
    const double q = expected[1234];
    EXPECT_NEAR(static_cast<double>(hits), kDraws * q, 5.0 * std::sqrt(kDraws * q * (1 - q)));
}

// ---------------------------------------------------------------------------------------------
// Penalties

// Log-probability differences under plain sampling recover the penalized logits up to a
// constant, so comparing them to independently computed values checks every single logit.
void expect_penalized_logits(Sampler& sampler, const std::vector<float>& logits,
                             const std::vector<double>& expected) {
    const auto dist = sampler.distribution(logits);
    ASSERT_EQ(dist.size(), logits.size());
    std::vector<double> log_p(logits.size(), 0.0);
    for (const TokenProb& tp : dist) log_p[static_cast<size_t>(tp.id)] = std::log(tp.p);
    for (size_t i = 1; i < logits.size(); ++i) {
        EXPECT_NEAR(log_p[i] - log_p[0], expected[i] - expected[0], 2e-5) << "token " << i;
    }
}

TEST(Sampler, PenaltiesChangeExactlyTheExpectedLogits) {
    const std::vector<float> logits = {0.3f, 1.5f, -0.8f, 0.0f, 2.2f, -1.6f, 0.9f, -0.2f};
    // Token 3 sits at 0 (unchanged by the repeat penalty's scaling); token 4 occurs three times
    // in the window; token 6 only before it; 1000 is beyond the vocabulary.
    const std::vector<int32_t> history = {6, 6, 4, 2, 4, 3, 5, 1000, 4, 1, 2};
    const struct {
        const char* name;
        float repeat, presence, frequency;
    } cases[] = {
        {"repeat", 1.4f, 0.0f, 0.0f},
        {"presence", 1.0f, 0.7f, 0.0f},
        {"frequency", 1.0f, 0.0f, 0.35f},
        {"all", 1.25f, 0.5f, 0.3f},
        {"negative (encouraging)", 0.8f, -0.4f, -0.1f},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.name);
        SamplingParams p = plain_params();
        p.repeat_penalty = c.repeat;
        p.presence_penalty = c.presence;
        p.frequency_penalty = c.frequency;
        p.penalty_last_n = 9;  // drops the leading 6, 6
        Sampler sampler(p);
        sampler.accept(history);
        const std::vector<double> expected = reference_penalized(logits, p, history);
        // Sanity of the reference itself on two tokens, by hand.
        EXPECT_DOUBLE_EQ(expected[6], 0.9f);   // outside the window
        EXPECT_DOUBLE_EQ(expected[7], -0.2f);  // never seen
        expect_penalized_logits(sampler, logits, expected);
    }
}

TEST(Sampler, PenaltyFormulasByHand) {
    SamplingParams p = plain_params();
    p.temperature = 0.0f;
    p.repeat_penalty = 2.0f;
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.25f;
    Sampler sampler(p);
    sampler.accept(std::vector<int32_t>{0, 0, 1});
    // Token 0: 3.0 / 2 - (2 x 0.25 + 0.5) = 0.5. Token 1: -1.0 x 2 - (0.25 + 0.5) = -2.75.
    // Token 2 (unseen) at 0.6 must now win over token 0; at 0.4 it must lose.
    EXPECT_EQ(sampler.sample(std::vector<float>{3.0f, -1.0f, 0.6f}), 2);
    EXPECT_EQ(sampler.sample(std::vector<float>{3.0f, -1.0f, 0.4f}), 0);
    // Token 1 against -2.7 / -2.8.
    EXPECT_EQ(sampler.sample(std::vector<float>{-9.0f, -1.0f, -2.8f}), 1);
    EXPECT_EQ(sampler.sample(std::vector<float>{-9.0f, -1.0f, -2.7f}), 2);
}

TEST(Sampler, PenaltyWindowKeepsTheLastN) {
    SamplingParams p = plain_params();
    p.penalty_last_n = 4;
    Sampler sampler(p);
    for (int32_t t = 0; t < 10; ++t) sampler.accept(t);
    EXPECT_EQ(sampler.history(), (std::vector<int32_t>{6, 7, 8, 9}));

    p.penalty_last_n = 2;
    sampler.set_params(p);
    EXPECT_EQ(sampler.history(), (std::vector<int32_t>{8, 9}));
    p.penalty_last_n = 5;
    sampler.set_params(p);
    sampler.accept(10);
    EXPECT_EQ(sampler.history(), (std::vector<int32_t>{8, 9, 10}));
    for (int32_t t = 11; t < 14; ++t) sampler.accept(t);
    EXPECT_EQ(sampler.history(), (std::vector<int32_t>{9, 10, 11, 12, 13}));

    p.penalty_last_n = 0;
    p.repeat_penalty = 5.0f;
    sampler.set_params(p);
    sampler.accept(1);
    EXPECT_TRUE(sampler.history().empty());
    // No window, no penalty.
    const std::vector<float> logits = {0.5f, 1.0f};
    const auto dist = sampler.distribution(logits);
    EXPECT_NEAR(dist[0].p, softmax(logits, 1.0)[1], 1e-6);
}

TEST(Sampler, AcceptRejectsNegativeIdsAtomically) {
    Sampler sampler(plain_params());
    EXPECT_THROW(sampler.accept(-1), std::invalid_argument);
    EXPECT_THROW(sampler.accept(std::vector<int32_t>{1, 2, -3}), std::invalid_argument);
    EXPECT_TRUE(sampler.history().empty());
}

// ---------------------------------------------------------------------------------------------
// Determinism and state

// Feeds the sampler's own picks back as history, as a decode loop does, over changing logits.
std::vector<int32_t> generate(Sampler& sampler, uint64_t logits_seed, int n) {
    Rng rng(logits_seed);
    std::vector<int32_t> out;
    for (int i = 0; i < n; ++i) {
        const int32_t token = sampler.sample(random_logits(rng, 256, 1.0));
        sampler.accept(token);
        out.push_back(token);
    }
    return out;
}

SamplingParams busy_params(uint64_t seed) {
    SamplingParams p;  // defaults: top-k, top-p and min-p all active
    p.repeat_penalty = 1.1f;
    p.frequency_penalty = 0.1f;
    p.seed = seed;
    return p;
}

TEST(Sampler, SameSeedSameTokensDifferentSeedDifferentTokens) {
    Sampler a(busy_params(1234));
    Sampler b(busy_params(1234));
    Sampler c(busy_params(1235));
    const std::vector<int32_t> seq_a = generate(a, 9, 300);
    EXPECT_EQ(seq_a, generate(b, 9, 300));
    const std::vector<int32_t> seq_c = generate(c, 9, 300);
    int differences = 0;
    for (size_t i = 0; i < seq_a.size(); ++i) differences += seq_a[i] != seq_c[i] ? 1 : 0;
    EXPECT_GT(differences, 100);

    a.reset(1234);
    EXPECT_TRUE(a.history().empty());
    EXPECT_EQ(a.params().seed, 1234u);
    EXPECT_EQ(generate(a, 9, 300), seq_a);
}

TEST(Sampler, SaveAndLoadStateResumesExactly) {
    Sampler a(busy_params(77));
    a.accept(std::vector<int32_t>{3, 1, 4, 1, 5, 9, 2, 6});
    generate(a, 1, 50);
    const std::vector<uint8_t> blob = a.save_state();
    const std::vector<int32_t> continued = generate(a, 2, 50);

    Sampler b(busy_params(999));
    b.load_state(blob);
    EXPECT_EQ(b.save_state(), blob);
    EXPECT_EQ(generate(b, 2, 50), continued);
    EXPECT_EQ(b.history(), a.history());

    // A smaller window keeps the most recent tokens of the blob.
    SamplingParams small = busy_params(5);
    small.penalty_last_n = 3;
    Sampler c(small);
    c.load_state(blob);
    Sampler full(busy_params(5));
    full.load_state(blob);
    const std::vector<int32_t> all = full.history();
    EXPECT_EQ(c.history(), std::vector<int32_t>(all.end() - 3, all.end()));
}

TEST(Sampler, LoadStateRejectsMalformedBlobsAndChangesNothing) {
    Sampler source(busy_params(3));
    source.accept(std::vector<int32_t>{10, 20, 30});
    const std::vector<uint8_t> good = source.save_state();
    ASSERT_EQ(good.size(), 44u + 12u);

    Sampler target(busy_params(4));
    target.accept(7);
    const std::vector<uint8_t> before = target.save_state();

    auto corrupt = [&](auto edit) {
        std::vector<uint8_t> bad = good;
        edit(bad);
        return bad;
    };
    const std::vector<std::vector<uint8_t>> bad_blobs = {
        {},
        std::vector<uint8_t>(good.begin(), good.begin() + 43),     // truncated header
        std::vector<uint8_t>(good.begin(), good.end() - 1),        // truncated tokens
        corrupt([](std::vector<uint8_t>& b) { b[0] = 'X'; }),      // magic
        corrupt([](std::vector<uint8_t>& b) { b[4] = 2; }),        // version
        corrupt([](std::vector<uint8_t>& b) { b[40] = 4; }),       // count
        corrupt([](std::vector<uint8_t>& b) { b.push_back(0); }),  // trailing byte
        corrupt([](std::vector<uint8_t>& b) { b[55] = 0x80; }),    // negative token
        corrupt([](std::vector<uint8_t>& b) {                      // all-zero generator
            std::fill(b.begin() + 8, b.begin() + 40, uint8_t{0});
        }),
    };
    for (size_t i = 0; i < bad_blobs.size(); ++i) {
        EXPECT_THROW(target.load_state(bad_blobs[i]), std::invalid_argument) << "blob " << i;
        EXPECT_EQ(target.save_state(), before) << "blob " << i;
    }
}

// ---------------------------------------------------------------------------------------------
// Odd inputs

TEST(Sampler, NanAndInfinityAreHandled) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const float inf = std::numeric_limits<float>::infinity();
    Sampler sampler(plain_params(91));
    for (int i = 0; i < 200; ++i) {
        EXPECT_NE(sampler.sample(std::vector<float>{nan, 0.0f, 0.1f}), 0);
        EXPECT_EQ(sampler.sample(std::vector<float>{0.0f, inf, 5.0f}), 1);
    }
    const auto split = sampler.distribution(std::vector<float>{inf, 1.0f, inf});
    ASSERT_EQ(split.size(), 3u);
    EXPECT_FLOAT_EQ(split[0].p, 0.5f);
    EXPECT_FLOAT_EQ(split[1].p, 0.5f);
    EXPECT_FLOAT_EQ(split[2].p, 0.0f);

    EXPECT_THROW(sampler.sample(std::vector<float>{}), std::invalid_argument);
    EXPECT_THROW(sampler.sample(std::vector<float>{-inf, nan}), std::invalid_argument);
    SamplingParams greedy = plain_params();
    greedy.temperature = 0.0f;
    Sampler g(greedy);
    EXPECT_EQ(g.sample(std::vector<float>{nan, -1.0f, nan}), 1);
    EXPECT_THROW(g.sample(std::vector<float>{-inf, nan}), std::invalid_argument);
    SamplingParams top_k = plain_params();
    top_k.top_k = 1;
    EXPECT_THROW(Sampler(top_k).sample(std::vector<float>{-inf, -inf}), std::invalid_argument);
}

TEST(Sampler, SingleTokenVocabularyAndTinyTemperatures) {
    Sampler sampler(plain_params());
    EXPECT_EQ(sampler.sample(std::vector<float>{-3.0f}), 0);
    SamplingParams cold = plain_params();
    cold.temperature = 1e-6f;
    Sampler c(cold);
    for (int i = 0; i < 100; ++i) {
        EXPECT_EQ(c.sample(std::vector<float>{0.0f, 0.5f, 0.49f}), 1);
    }
    // A subnormal temperature overflows 1/T; the limit is still "only the maximal tokens".
    cold.temperature = std::numeric_limits<float>::denorm_min();
    Sampler d(cold);
    const auto dist = d.distribution(std::vector<float>{0.5f, 0.1f, 0.5f});
    ASSERT_EQ(dist.size(), 3u);
    EXPECT_FLOAT_EQ(dist[0].p, 0.5f);
    EXPECT_FLOAT_EQ(dist[1].p, 0.5f);
    EXPECT_EQ(dist[2].p, 0.0f);
}

}  // namespace
}  // namespace ember
