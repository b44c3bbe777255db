// A long prompt stopped part way (GenerateOptions::stop_prefill): the turn ends at once as
// cancelled with no reply, the batches evaluated before the stop stay in the state, the
// progress reported on the way climbs to where it stopped, and the next turn reuses what was
// evaluated and answers exactly what an uninterrupted turn answers.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/generate/conversation.h"
#include "engine/model/forward.h"
#include "engine/model/model.h"
#include "engine/util/thread_pool.h"
#include "tests/support/fixtures.h"

namespace ember::test {
namespace {

Sampler greedy() {
    SamplingParams p;
    p.temperature = 0;
    return Sampler(p);
}

// A user message of several batches' worth of tokens.
std::string long_message() {
    std::string text;
    for (int i = 0; i < 120; ++i) {
        text +=
            "Item " + std::to_string(i) + " is filed under " + std::to_string(i * 7 % 13) + ". ";
    }
    return text;
}

struct Case {
    const char* model;
    int64_t batch;  // where a stop can keep the state: whole batches (forward.cpp)
};

class PrefillStop : public ::testing::TestWithParam<Case> {};

TEST_P(PrefillStop, KeepsWholeBatchesAndTheNextTurnReusesThem) {
    const Case c = GetParam();
    EMBER_REQUIRE_FIXTURE(c.model);
    auto model = Model::load(fixture_path(c.model));
    ThreadPool pool(2);
    ConversationOptions options;
    options.context = 4096;  // room for a thinking template's reply reserve (half)
    GenerateOptions generation;
    generation.max_tokens = 8;

    Conversation whole(*model, pool, options);
    whole.add_message({"user", long_message(), {}, {}});
    Sampler whole_sampler = greedy();
    const TurnResult expected = whole.respond(whole_sampler, generation, {});
    ASSERT_GT(expected.prompt_tokens, 2 * c.batch + 1);
    EXPECT_EQ(expected.tokens_not_evaluated, 0);

    Conversation conv(*model, pool, options);
    conv.add_message({"user", long_message(), {}, {}});
    Sampler sampler = greedy();
    std::vector<PrefillProgress> seen;
    GenerateOptions stopping = generation;
    stopping.on_prefill = [&](const PrefillProgress& p) { seen.push_back(p); };
    // Asked to stop once the second batch is under way.
    stopping.stop_prefill = [&] { return !seen.empty() && seen.back().done > c.batch; };
    bool text_came = false;
    const TurnResult stopped = conv.respond(sampler, stopping, [&](const std::string&, TextKind) {
        text_came = true;
        return true;
    });
    EXPECT_EQ(stopped.finish, FinishReason::Cancelled);
    EXPECT_FALSE(text_came);
    EXPECT_TRUE(stopped.reply.empty());
    EXPECT_TRUE(stopped.ids.empty());
    // The first batch stays (a per-layer stop drops only the batch in progress; a hybrid is
    // stopped between batches, after its second).
    const int64_t kept = stopped.prompt_tokens - stopped.tokens_not_evaluated;
    EXPECT_EQ(kept % c.batch, 0);
    EXPECT_GE(kept, c.batch);
    EXPECT_LE(kept, 2 * c.batch);
    EXPECT_EQ(stopped.tokens_evaluated, kept);
    EXPECT_EQ(static_cast<int64_t>(conv.cached_tokens().size()), kept);
    EXPECT_EQ(conv.state().kv.length(), kept);
    // Progress: the whole prompt as its total, climbing, never past it.
    ASSERT_FALSE(seen.empty());
    for (size_t i = 0; i < seen.size(); ++i) {
        EXPECT_EQ(seen[i].total, expected.prompt_tokens);
        EXPECT_LE(seen[i].done, seen[i].total);
        if (i > 0) {
            EXPECT_GE(seen[i].done, seen[i - 1].done);
        }
    }
    EXPECT_LT(seen.back().done, seen.back().total);

    // The stopped turn's empty reply goes (as /regen does); the prompt is answered again,
    // evaluating only what the stop left.
    ASSERT_TRUE(conv.pop_assistant());
    seen.clear();
    GenerateOptions watched = generation;
    watched.on_prefill = [&](const PrefillProgress& p) { seen.push_back(p); };
    const TurnResult again = conv.respond(sampler, watched, {});
    EXPECT_EQ(again.tokens_reused, kept);
    EXPECT_EQ(again.tokens_evaluated, expected.prompt_tokens - kept);
    EXPECT_EQ(again.tokens_not_evaluated, 0);
    EXPECT_EQ(again.reply, expected.reply);
    EXPECT_EQ(again.ids, expected.ids);
    ASSERT_FALSE(seen.empty());
    // The last report says the prompt is read.
    EXPECT_EQ(seen.back().done, seen.back().total);
    EXPECT_EQ(seen.back().total, expected.prompt_tokens - kept);
}

INSTANTIATE_TEST_SUITE_P(Families, PrefillStop,
                         ::testing::Values(Case{"arch/qwen3/qwen3.gguf", kMaxBatch},
                                           Case{"arch/lfm2/lfm2.gguf", 128}),
                         [](const auto& param_info) {
                             return std::string(param_info.param.model).find("lfm2") !=
                                            std::string::npos
                                        ? std::string("Hybrid")
                                        : std::string("Attention");
                         });

}  // namespace
}  // namespace ember::test
