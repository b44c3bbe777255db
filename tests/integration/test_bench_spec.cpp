// ember bench --spec ngram: off and ngram rows side by side per prompt, greedy ids equal.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/support/fixtures.h"
#include "tests/support/process.h"

namespace ember::test {
namespace {

void check_rows(const char* fixture) {
    EMBER_REQUIRE_FIXTURE(fixture);
    const auto r = run_command({ember_binary(), "bench", "-m", fixture_path(fixture), "--spec",
                                "ngram", "-n", "48", "-t", "2", "--json"});
    ASSERT_EQ(r.status, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_TRUE(j["ids_equal"].get<bool>());
    const auto& rows = j["rows"];
    ASSERT_EQ(rows.size() % 2, 0u);
    bool high = false, none = false;
    int64_t drafted = 0;
    for (size_t i = 0; i < rows.size(); i += 2) {
        const auto& off = rows[i];
        const auto& on = rows[i + 1];
        EXPECT_EQ(off["spec"], "off");
        EXPECT_EQ(on["spec"], "ngram");
        EXPECT_EQ(off["prompt"], on["prompt"]);
        EXPECT_EQ(off["ids"], on["ids"]);
        EXPECT_EQ(off["ids"].size(), 48u);
        EXPECT_EQ(off["drafted"].get<int64_t>(), 0);
        drafted += on["drafted"].get<int64_t>();
        EXPECT_GT(on["decode_tps"].get<double>(), 0.0);
        high = high || off["workload"] == "high-overlap";
        none = none || off["workload"] == "no-overlap";
    }
    EXPECT_TRUE(high && none);
    EXPECT_GT(drafted, 0);
}

TEST(BenchSpec, RowsPairUpAndGreedyIdsAreEqual) {
    check_rows("arch/llama/llama.gguf");
}

// Hybrids speculate too (their recurrent state is restored after a rejected draft).
TEST(BenchSpec, HybridRowsPairUpAndGreedyIdsAreEqual) {
    check_rows("arch/lfm2/lfm2.gguf");
}

// The verify timing rewinds to the end of the prompt before each forward; a hybrid's
// recurrent state must go back there too (through a snapshot), or the forward refuses it.
TEST(BenchSpec, VerifyTimingRunsOnHybrids) {
    const char* fixture = "arch/qwen35/qwen35.gguf";
    EMBER_REQUIRE_FIXTURE(fixture);
    const auto r =
        run_command({ember_binary(), "bench", "-m", fixture_path(fixture), "-p", "16", "-n", "4",
                     "--reps", "1", "--verify", "5", "--bw-passes", "1", "-t", "2", "--json"});
    ASSERT_EQ(r.status, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    ASSERT_TRUE(j.contains("verify_ms")) << r.out;
}

}  // namespace
}  // namespace ember::test
