// choose_resume(): restore, recompute, or restore a prefix and recompute the rest, priced
// with given speeds. Every expected value below is worked out by hand from the figures in
// the test (seconds = bytes / throughput, tokens / prefill speed), not by the function.
#include <gtest/gtest.h>

#include <vector>

#include "engine/generate/resume_plan.h"

namespace ember {
namespace {

constexpr double kGB = 1e9;

RestoreSpan span(int64_t end, int64_t bytes, double bytes_per_second, const char* source,
                 double fixed_seconds = 0) {
    RestoreSpan s;
    s.end = end;
    s.bytes = bytes;
    s.bytes_per_second = bytes_per_second;
    s.fixed_seconds = fixed_seconds;
    s.source = source;
    return s;
}

TEST(ResumePlan, NothingOfferedLeavesTheStateAsItIs) {
    const ResumeChoice c = choose_resume(100, {}, 1000);
    EXPECT_EQ(c.path, ResumePath::None);
    EXPECT_EQ(c.restore_to, 100);
    EXPECT_EQ(c.spans_used, 0u);
    // A span that does not reach past the live state is no offer either.
    const std::vector<RestoreSpan> behind = {span(80, 1000, kGB, "database")};
    EXPECT_EQ(choose_resume(100, behind, 1000).path, ResumePath::None);
}

TEST(ResumePlan, RestoresWhenReadingIsFasterThanEvaluating) {
    // 2,000 tokens of 128 KiB each (an 8B model, f16): 262,144,000 bytes at 1.5 GB/s is
    // 0.174763 s; evaluating them at 1,000 tokens/s (a CPU) takes 2 s.
    const std::vector<RestoreSpan> offer = {span(2000, 2000 * 131072, 1.5 * kGB, "database")};
    const ResumeChoice c = choose_resume(0, offer, 1000);
    EXPECT_EQ(c.path, ResumePath::Restore);
    EXPECT_EQ(c.restore_to, 2000);
    EXPECT_EQ(c.spans_used, 1u);
    EXPECT_NEAR(c.restore_seconds, 0.174763, 1e-6);
    EXPECT_NEAR(c.all_restore_seconds, 0.174763, 1e-6);
    EXPECT_NEAR(c.all_recompute_seconds, 2.0, 1e-12);
    EXPECT_NEAR(c.recompute_seconds, 0.0, 1e-12);
}

TEST(ResumePlan, RecomputesWhenEvaluatingIsFasterThanReading) {
    // The same rows against a GPU's 20,000 tokens/s: 0.1 s evaluating, 0.175 s reading.
    const std::vector<RestoreSpan> offer = {span(2000, 2000 * 131072, 1.5 * kGB, "database")};
    const ResumeChoice c = choose_resume(0, offer, 20000);
    EXPECT_EQ(c.path, ResumePath::Recompute);
    EXPECT_EQ(c.restore_to, 0);
    EXPECT_EQ(c.spans_used, 0u);
    EXPECT_NEAR(c.recompute_seconds, 0.1, 1e-12);
    EXPECT_NEAR(c.all_restore_seconds, 0.174763, 1e-6);
    EXPECT_NEAR(c.restore_seconds, 0.0, 1e-12);
}

TEST(ResumePlan, TheCrossoverFollowsTheSpeedRatio) {
    // 1,000 tokens, 1,000,000 bytes at 1 GB/s: reading takes 1 ms, so restoring pays below
    // 1,000,000 tokens/s and recomputing above; at exactly that speed the tie restores.
    const std::vector<RestoreSpan> offer = {span(1500, 1'000'000, kGB, "database")};
    struct Case {
        double prefill;
        ResumePath path;
    };
    const Case cases[] = {{10, ResumePath::Restore},          {1000, ResumePath::Restore},
                          {500'000, ResumePath::Restore},     {1'000'000, ResumePath::Restore},
                          {1'000'001, ResumePath::Recompute}, {2'000'000, ResumePath::Recompute},
                          {1e9, ResumePath::Recompute}};
    for (const Case& k : cases) {
        const ResumeChoice c = choose_resume(500, offer, k.prefill);
        EXPECT_EQ(c.path, k.path) << k.prefill << " tokens/s";
        EXPECT_EQ(c.restore_to, k.path == ResumePath::Restore ? 1500 : 500) << k.prefill;
    }
}

TEST(ResumePlan, RestoresTheFastPrefixAndRecomputesTheSlowRest) {
    // Memory holds [0, 1000) (64 MB at 8 GB/s: 8 ms); the database holds [1000, 3000)
    // (128 MB at 1 GB/s: 128 ms). At 10,000 tokens/s the first thousand tokens take 100 ms to
    // evaluate (memory pays) and the next two thousand 200 ms (the database pays too): all.
    const std::vector<RestoreSpan> offer = {span(1000, 64'000'000, 8 * kGB, "memory"),
                                            span(3000, 128'000'000, kGB, "database")};
    ResumeChoice c = choose_resume(0, offer, 10'000);
    EXPECT_EQ(c.path, ResumePath::Restore);
    EXPECT_EQ(c.restore_to, 3000);
    EXPECT_NEAR(c.restore_seconds, 0.008 + 0.128, 1e-12);
    // At 40,000 tokens/s: memory still pays (8 ms against 25 ms), the database does not
    // (128 ms against 50 ms): restore [0, 1000), recompute [1000, 3000) in 50 ms.
    c = choose_resume(0, offer, 40'000);
    EXPECT_EQ(c.path, ResumePath::Partial);
    EXPECT_EQ(c.restore_to, 1000);
    EXPECT_EQ(c.spans_used, 1u);
    EXPECT_NEAR(c.restore_seconds, 0.008, 1e-12);
    EXPECT_NEAR(c.recompute_seconds, 0.05, 1e-12);
    EXPECT_NEAR(c.all_recompute_seconds, 0.075, 1e-12);
    EXPECT_NEAR(c.all_restore_seconds, 0.136, 1e-12);
    // At 200,000 tokens/s even memory is slower (8 ms against 5 ms): recompute all 15 ms.
    c = choose_resume(0, offer, 200'000);
    EXPECT_EQ(c.path, ResumePath::Recompute);
    EXPECT_EQ(c.restore_to, 0);
    EXPECT_NEAR(c.recompute_seconds, 0.015, 1e-12);
}

TEST(ResumePlan, APlacesFixedCostIsPaidOnceAndCanTipTheChoice) {
    // 100 tokens, 100 KB at 1 GB/s (0.1 ms) plus 5 ms of lookups, against 100 tokens at
    // 50,000 tokens/s (2 ms): the fixed cost decides for recomputing.
    std::vector<RestoreSpan> offer = {span(100, 100'000, kGB, "database", 0.005)};
    EXPECT_EQ(choose_resume(0, offer, 50'000).path, ResumePath::Recompute);
    // At 10,000 tokens/s (10 ms) restoring wins: 5.1 ms.
    ResumeChoice c = choose_resume(0, offer, 10'000);
    EXPECT_EQ(c.path, ResumePath::Restore);
    EXPECT_NEAR(c.restore_seconds, 0.0051, 1e-12);
    // Two spans from one place pay its fixed cost once: 5 ms + 0.1 ms + 0.1 ms.
    offer.push_back(span(200, 100'000, kGB, "database", 0.005));
    c = choose_resume(0, offer, 10'000);
    EXPECT_EQ(c.restore_to, 200);
    EXPECT_NEAR(c.restore_seconds, 0.0052, 1e-12);
}

TEST(ResumePlan, AnUnknownThroughputRestoresAsBeforeAnyEstimate) {
    const std::vector<RestoreSpan> offer = {span(4000, 1'000'000'000, 0, "database")};
    const ResumeChoice c = choose_resume(0, offer, 1e12);
    EXPECT_EQ(c.path, ResumePath::Restore);
    EXPECT_EQ(c.restore_to, 4000);
}

TEST(ResumePlan, PathNames) {
    EXPECT_EQ(resume_path_name(ResumePath::None), "none");
    EXPECT_EQ(resume_path_name(ResumePath::Restore), "restore");
    EXPECT_EQ(resume_path_name(ResumePath::Partial), "partial");
    EXPECT_EQ(resume_path_name(ResumePath::Recompute), "recompute");
}

TEST(PrefillRateTest, DefaultsUntilMeasuredAndWeighsNewerPrompts) {
    PrefillRate rate;
    EXPECT_FALSE(rate.measured());
    EXPECT_EQ(rate.tokens_per_second(), PrefillRate::kDefaultTokensPerSecond);
    // A thin prompt says little about prefill speed: not counted.
    rate.add(PrefillRate::kMinTokens - 1, 0.0001);
    EXPECT_FALSE(rate.measured());
    rate.add(1000, 1.0);  // 1,000 tokens/s
    EXPECT_TRUE(rate.measured());
    EXPECT_DOUBLE_EQ(rate.tokens_per_second(), 1000.0);
    // Then 3,000 tokens in 0.5 s: the first weighs half, (500 + 3000) / (0.5 + 0.5).
    rate.add(3000, 0.5);
    EXPECT_DOUBLE_EQ(rate.tokens_per_second(), 3500.0);
}

// A GPU starts from its own estimate (ComputeDevice::assumed_prefill_tokens_per_second):
// with 1,000 tokens/s assumed, the H200 restored 225 MB at 1.5 GB/s (150 ms) where it
// recomputes 2,000 tokens in ~70 ms.
TEST(PrefillRateTest, ADevicesEstimateStandsUntilMeasuredAndThenDeclinesASlowRestore) {
    const PrefillRate gpu(30000);
    EXPECT_FALSE(gpu.measured());
    EXPECT_EQ(gpu.tokens_per_second(), 30000.0);
    const RestoreSpan db{2000, 225'000'000, 1.5e9, 0.0, "database"};
    EXPECT_EQ(choose_resume(0, std::span(&db, 1), gpu.tokens_per_second()).path,
              ResumePath::Recompute);
    EXPECT_EQ(choose_resume(0, std::span(&db, 1), PrefillRate().tokens_per_second()).path,
              ResumePath::Restore);
    // Measured prompts replace the estimate; none given (0) is the CPU's default.
    PrefillRate measured(30000);
    measured.add(2000, 0.1);
    EXPECT_DOUBLE_EQ(measured.tokens_per_second(), 20000.0);
    EXPECT_EQ(PrefillRate(0).tokens_per_second(), PrefillRate::kDefaultTokensPerSecond);
}

}  // namespace
}  // namespace ember
