// `ember bench-serve` against its own in-process server on the stories260K fixture: the levels'
// accounting (requests, completion tokens under --ignore-eos, the prefix a second turn reuses)
// and ember serve's own time to first token beside the client's. The server's TTFT is measured
// inside the request the client times, so each of its order statistics lies at or under the
// client's; a mix-up of units or of fields would break that.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "tests/support/fixtures.h"
#include "tests/support/process.h"

namespace ember::test {
namespace {

using nlohmann::json;

TEST(BenchServe, LevelsAccountForEveryRequestAndTheServersOwnTtft) {
    EMBER_REQUIRE_FIXTURE("models/stories260K.gguf");
    constexpr int kTurns = 2, kMaxTokens = 8;
    const auto r = run_command(
        {ember_binary(), "bench-serve", "-m", fixture_path("models/stories260K.gguf"), "-t", "1",
         "--parallel", "2", "-c", "512", "--clients", "1,2", "--turns", std::to_string(kTurns),
         "--max-tokens", std::to_string(kMaxTokens), "--ignore-eos"});
    ASSERT_EQ(r.status, 0) << r.err;
    const json j = json::parse(r.out);
    ASSERT_TRUE(j.contains("runs") && j["runs"].is_array());
    ASSERT_EQ(j["runs"].size(), 2u) << r.out;
    for (const json& level : j["runs"]) {
        const int clients = level["clients"].get<int>();
        const int requests = clients * kTurns;
        SCOPED_TRACE("clients " + std::to_string(clients));
        EXPECT_EQ(level["requests"].get<int>(), requests);
        EXPECT_EQ(level["errors"].get<int>(), 0) << level.value("first_error", "");
        EXPECT_EQ(level["completion_tokens"].get<int>(), requests * kMaxTokens);
        ASSERT_TRUE(level.contains("engine_ttft_ms")) << level.dump();
        const json& client = level["ttft_ms"];
        const json& engine = level["engine_ttft_ms"];
        EXPECT_GT(engine["p50"].get<double>(), 0.0);
        for (const char* at : {"p50", "p90", "max"}) {
            EXPECT_LE(engine[at].get<double>(), client[at].get<double>()) << at;
        }
        // The sum over the level's requests: at least the slowest one, at most all at the
        // slowest's time.
        const double total = level["engine_ttft_total_ms"].get<double>();
        EXPECT_GE(total, engine["max"].get<double>());
        EXPECT_LE(total, requests * engine["max"].get<double>() * (1 + 1e-9));
    }
    // One client: its second turn finds its first turn's tokens in the slot.
    const json& one = j["runs"][0];
    EXPECT_GT(one["cached_prompt_tokens"].get<int>(), 0);
    EXPECT_DOUBLE_EQ(one["requests_with_prefix_hit"].get<double>(), 0.5);
}

}  // namespace
}  // namespace ember::test
