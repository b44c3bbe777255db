// ember bench --spec ngram: off and ngram rows side by side per prompt, greedy ids equal; and
// bench --depth (decode after a context already in the cache).
#include <gtest/gtest.h>

#include <fstream>
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

// --depth 40: each timed decode token reads the K/V of the 40 context positions and of the
// tokens decoded so far; kv_bytes_per_token counts them (K and V of every layer, f16), and the
// roofline counts them beside the weights. On a hybrid the context lives in the recurrent state
// too, which each rep must restore (a forward refuses a state that does not match the cache).
void check_depth(const char* fixture, int64_t kv_layers) {
    EMBER_REQUIRE_FIXTURE(fixture);
    std::ifstream in(fixture_path(std::string(fixture).substr(0, std::string(fixture).rfind('/')) +
                                  "/hf/config.json"));
    const auto file = nlohmann::json::parse(in);
    const auto& config = file.contains("text_config") ? file["text_config"] : file;
    const int64_t head_dim =
        config.value("head_dim", config["hidden_size"].get<int64_t>() /
                                     config["num_attention_heads"].get<int64_t>());
    const double kv_per_position = static_cast<double>(
        kv_layers * 2 * config["num_key_value_heads"].get<int64_t>() * head_dim * 2);
    const auto r =
        run_command({ember_binary(), "bench", "-m", fixture_path(fixture), "-p", "8", "-n", "5",
                     "--reps", "1", "--bw-passes", "1", "-t", "2", "--depth", "40", "--json"});
    ASSERT_EQ(r.status, 0) << r.err;
    const auto deep = nlohmann::json::parse(r.out);
    EXPECT_EQ(deep["depth"].get<int64_t>(), 40);
    EXPECT_EQ(deep["decode_context"], "depth");
    EXPECT_TRUE(deep["logits_finite"].get<bool>());
    // Positions read on average over 5 tokens: depth + 3.
    EXPECT_DOUBLE_EQ(deep["kv_bytes_per_token"].get<double>(), 43 * kv_per_position);
    EXPECT_GT(deep["roofline_fraction"].get<double>(),
              deep["roofline_fraction_weights_only"].get<double>());
}

TEST(BenchDepth, CountsTheContextsKvBytes) {
    check_depth("arch/qwen3/qwen3.gguf", 3);
}

TEST(BenchDepth, RestoresAHybridsContext) {
    // qwen35: one attention layer in four (the fixture has 4 layers).
    check_depth("arch/qwen35/qwen35.gguf", 1);
}

}  // namespace
}  // namespace ember::test
