// A long prompt stopped part way (GenerateOptions::stop_prefill): the turn ends at once as
// cancelled with no reply, the batches evaluated before the stop stay in the state, the
// progress reported on the way climbs to where it stopped, and the next turn reuses what was
// evaluated and answers exactly what an uninterrupted turn answers.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "engine/generate/conversation.h"
#include "engine/model/forward.h"
#include "engine/model/model.h"
#include "engine/model/state.h"
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
    // The first batch stays; the second, in progress, is dropped (a hybrid's recurrent state
    // put back as it was after the first).
    const int64_t kept = stopped.prompt_tokens - stopped.tokens_not_evaluated;
    EXPECT_EQ(kept, c.batch);
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

// A stop asked inside a parallel section skips the section's remaining tasks (a layer of a
// large model's batch takes seconds on two cores; a stop must not wait for it) and every later
// section until the interruption ends; afterwards the pool runs whole sections again.
TEST(PoolInterruption, SkipsTheRestOfASectionAndTheSectionsAfterIt) {
    ThreadPool pool(2);
    constexpr int64_t kTasks = 400;
    std::atomic<int64_t> ran{0};
    const ThreadPool::TaskFn one_ms = [&](int64_t, int) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        ran.fetch_add(1);
    };
    {
        int asked = 0;
        const std::function<bool()> stop = [&] { return ++asked >= 2; };
        ThreadPool::Interruption interruption(pool, stop);
        EXPECT_THROW(pool.parallel_for(kTasks, one_ms), ThreadPool::Interrupted);
        // Two polls kInterruptionPoll apart, with two workers of 1 ms tasks: a few tens of tasks,
        // far from all of them (a bound with room for a loaded machine's sleeps).
        EXPECT_GE(asked, 2);
        EXPECT_LT(ran.load(), kTasks / 2);
        const int64_t before = ran.load();
        EXPECT_THROW(pool.parallel_for(kTasks, one_ms), ThreadPool::Interrupted);
        EXPECT_THROW(pool.parallel_for(1, one_ms), ThreadPool::Interrupted);
        EXPECT_EQ(ran.load(), before);
    }
    ran = 0;
    pool.parallel_for(kTasks, one_ms);
    EXPECT_EQ(ran.load(), kTasks);

    // A check that never says stop changes nothing.
    ran = 0;
    {
        const std::function<bool()> never = [] { return false; };
        ThreadPool::Interruption interruption(pool, never);
        pool.parallel_for(kTasks / 4, one_ms);
        pool.parallel_ranges(1000, 16,
                             [&](int64_t begin, int64_t end, int) { ran.fetch_add(end - begin); });
    }
    EXPECT_EQ(ran.load(), kTasks / 4 + 1000);
}

// A stop inside a layer (the pool's poll between tasks) ends the evaluation like a stop
// between layers: EvaluationStopped, the batch in progress dropped, the state at the batches
// before; evaluating the rest then gives the uninterrupted run's logits bit for bit.
TEST(PoolInterruption, AStopInsideALayerDropsOnlyTheBatchInProgress) {
    const char* name = "arch/qwen3/qwen3.gguf";
    EMBER_REQUIRE_FIXTURE(name);
    auto model = Model::load(fixture_path(name));
    ThreadPool pool(2);
    std::vector<int32_t> tokens(static_cast<size_t>(kMaxBatch + 40));
    for (size_t i = 0; i < tokens.size(); ++i) {
        tokens[i] = static_cast<int32_t>((i * 37 + 11) % model->config().n_vocab);
    }
    auto whole_state = make_state(model->config(), 1024);
    InferenceState& whole = *whole_state;
    const auto expected_span = forward(*model, whole, pool, tokens, LogitsWanted::Last);
    const std::vector<float> expected(expected_span.begin(), expected_span.end());

    auto stopped_state = make_state(model->config(), 1024);
    InferenceState& st = *stopped_state;
    // The first batch whole, then a stop at the first question inside the second batch: each
    // answer waits past the pool's poll interval, so the next question comes from inside a
    // parallel section (a question between layers comes only after a whole layer).
    // The questions from the end of the first batch on: the one between the batches, then
    // the stopping one. From inside a layer it repeats the last figure heard; between layers
    // it would say a layer of the second batch is done.
    std::vector<double> heard;
    const EvaluationWatch watch = [&](double tokens_done) {
        if (tokens_done < static_cast<double>(kMaxBatch)) return true;
        heard.push_back(tokens_done);
        std::this_thread::sleep_for(ThreadPool::kInterruptionPoll * 2);
        return heard.size() < 2;
    };
    int64_t evaluated = -1;
    try {
        forward(*model, st, pool, tokens, LogitsWanted::Last, &watch);
    } catch (const EvaluationStopped& e) {
        evaluated = e.evaluated;
    }
    EXPECT_EQ(evaluated, kMaxBatch);
    EXPECT_EQ(st.kv.length(), kMaxBatch);
    ASSERT_EQ(heard.size(), 2u);
    EXPECT_EQ(heard[0], static_cast<double>(kMaxBatch));
    EXPECT_EQ(heard[1], static_cast<double>(kMaxBatch));  // inside the second batch's first layer
    const auto rest = std::span<const int32_t>(tokens).subspan(static_cast<size_t>(kMaxBatch));
    const auto resumed = forward(*model, st, pool, rest, LogitsWanted::Last);
    ASSERT_EQ(resumed.size(), expected.size());
    for (size_t i = 0; i < expected.size(); ++i) ASSERT_EQ(resumed[i], expected[i]) << i;
}

INSTANTIATE_TEST_SUITE_P(Families, PrefillStop,
                         ::testing::Values(Case{"arch/qwen3/qwen3.gguf", kMaxBatch},
                                           Case{"arch/lfm2/lfm2.gguf", 128},
                                           Case{"arch/qwen35/qwen35.gguf", 128}),
                         [](const auto& param_info) {
                             const std::string model = param_info.param.model;
                             if (model.find("lfm2") != std::string::npos)
                                 return std::string("Hybrid");
                             if (model.find("qwen35") != std::string::npos) {
                                 return std::string("DeltaNetHybrid");
                             }
                             return std::string("Attention");
                         });

}  // namespace
}  // namespace ember::test
