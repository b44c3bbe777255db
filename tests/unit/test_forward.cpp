// The forward pass and its state: batching must not change the numbers, rollback is a length
// move, the f16 cache stays close to f32, and bad input leaves the state untouched.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <vector>

#include "engine/model/forward.h"
#include "engine/model/model.h"
#include "engine/model/state.h"
#include "engine/util/thread_pool.h"
#include "tests/support/fixtures.h"

namespace ember::test {
namespace {

using json = nlohmann::json;

std::vector<int32_t> reference_ids(const std::string& arch, const std::string& seq) {
    const json ref = json::parse(read_file(fixture_path("arch/" + arch + "/ref.json")));
    return ref["seqs"][seq]["ids"].get<std::vector<int32_t>>();
}

double max_abs_diff(std::span<const float> a, std::span<const float> b) {
    double d = 0;
    for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(double(a[i]) - b[i]));
    return d;
}

class ForwardTest : public ::testing::Test {
protected:
    void SetUp() override {
        EMBER_REQUIRE_FIXTURE("arch/qwen3/qwen3.gguf");
        model_ = Model::load(fixture_path("arch/qwen3/qwen3.gguf"));
        ids_ = reference_ids("qwen3", "chat");
    }
    std::unique_ptr<Model> model_;
    std::vector<int32_t> ids_;
    ThreadPool pool_{2};
};

TEST_F(ForwardTest, TokenByTokenEqualsOneBatch) {
    const int64_t n_vocab = model_->config().n_vocab;
    auto batch_state = make_state(model_->config(), 64);
    auto all = forward(*model_, *batch_state, pool_, ids_, LogitsWanted::All);
    const std::vector<float> batch(all.begin(), all.end());

    auto step_state = make_state(model_->config(), 64);
    for (size_t t = 0; t < ids_.size(); ++t) {
        auto logits =
            forward(*model_, *step_state, pool_, std::span(ids_).subspan(t, 1), LogitsWanted::Last);
        ASSERT_EQ(logits.size(), static_cast<size_t>(n_vocab));
        EXPECT_LT(max_abs_diff(logits, std::span(batch).subspan(t * n_vocab, n_vocab)), 1e-4)
            << "position " << t;
    }
    EXPECT_EQ(step_state->n_past(), static_cast<int64_t>(ids_.size()));
}

TEST_F(ForwardTest, RollbackRecomputesIdentically) {
    auto state = make_state(model_->config(), 64);
    auto first = forward(*model_, *state, pool_, ids_, LogitsWanted::Last);
    const std::vector<float> expected(first.begin(), first.end());
    // Roll back to a prefix and evaluate the rest again (what a chat turn does).
    state->kv.set_length(10);
    auto again = forward(*model_, *state, pool_, std::span(ids_).subspan(10), LogitsWanted::Last);
    EXPECT_LT(max_abs_diff(again, expected), 1e-5);
    // A different continuation after rollback must give different logits.
    state->kv.set_length(10);
    std::vector<int32_t> other(ids_.begin() + 10, ids_.end());
    std::reverse(other.begin(), other.end());
    auto diff = forward(*model_, *state, pool_, other, LogitsWanted::Last);
    EXPECT_GT(max_abs_diff(diff, expected), 1e-3);
}

TEST_F(ForwardTest, LongInputSplitsIntoBatchesTransparently) {
    std::vector<int32_t> long_ids = reference_ids("qwen3", "long");
    ASSERT_GT(static_cast<int64_t>(long_ids.size()), kMaxBatch);
    const int64_t n_vocab = model_->config().n_vocab;
    auto s1 = make_state(model_->config(), 512);
    auto all = forward(*model_, *s1, pool_, long_ids, LogitsWanted::All);
    const std::vector<float> last(all.end() - n_vocab, all.end());
    auto s2 = make_state(model_->config(), 512);
    auto only_last = forward(*model_, *s2, pool_, long_ids, LogitsWanted::Last);
    EXPECT_LT(max_abs_diff(only_last, last), 1e-5);
}

TEST_F(ForwardTest, F16CacheStaysClose) {
    auto f32 = make_state(model_->config(), 64, KvType::F32);
    auto f16 = make_state(model_->config(), 64, KvType::F16);
    auto a = forward(*model_, *f32, pool_, ids_, LogitsWanted::Last);
    const std::vector<float> ref(a.begin(), a.end());
    auto b = forward(*model_, *f16, pool_, ids_, LogitsWanted::Last);
    const double d = max_abs_diff(b, ref);
    EXPECT_LT(d, 5e-3);
    EXPECT_GT(d, 0.0);  // it really is a different cache
    EXPECT_EQ(f16->kv.bytes_per_position() * 2, f32->kv.bytes_per_position());
}

TEST_F(ForwardTest, ContextOverflowAndBadIdsLeaveStateUnchanged) {
    auto state = make_state(model_->config(), 16);
    forward(*model_, *state, pool_, std::span(ids_).subspan(0, 10), LogitsWanted::Last);
    EXPECT_THROW(
        forward(*model_, *state, pool_, std::span(ids_).subspan(10, 10), LogitsWanted::Last),
        std::length_error);
    EXPECT_EQ(state->n_past(), 10);
    const int32_t bad[] = {1, static_cast<int32_t>(model_->config().n_vocab)};
    EXPECT_THROW(forward(*model_, *state, pool_, bad, LogitsWanted::Last), std::out_of_range);
    EXPECT_EQ(state->n_past(), 10);
}

TEST_F(ForwardTest, ThreadCountDoesNotChangeResults) {
    ThreadPool one(1);
    auto s1 = make_state(model_->config(), 64);
    auto a = forward(*model_, *s1, one, ids_, LogitsWanted::Last);
    const std::vector<float> ref(a.begin(), a.end());
    auto s2 = make_state(model_->config(), 64);
    auto b = forward(*model_, *s2, pool_, ids_, LogitsWanted::Last);
    EXPECT_LT(max_abs_diff(b, ref), 1e-6);
}

// A watch that stops the evaluation once it reports more than `after` tokens done, recording
// what it was told.
struct StopAfter {
    double after;
    std::vector<double> seen;
    EvaluationWatch watch() {
        return [this](double done) {
            seen.push_back(done);
            return done <= after;
        };
    }
};

// Asks `arch`'s long sequence to stop once past its first batch of `batch` tokens, then
// evaluates the rest: `kept` tokens (whole batches) stay, and the logits are those of one
// uninterrupted evaluation.
void expect_stop_keeps_whole_batches(const std::string& arch, int64_t batch, int64_t kept) {
    const std::string file = "arch/" + arch + "/" + arch + ".gguf";
    EMBER_REQUIRE_FIXTURE(file);
    auto model = Model::load(fixture_path(file));
    ThreadPool pool(2);
    const std::vector<int32_t> ids = reference_ids(arch, "long");
    ASSERT_GT(static_cast<int64_t>(ids.size()), batch + 1);
    auto whole = make_state(model->config(), 512);
    auto expected_span = forward(*model, *whole, pool, ids, LogitsWanted::Last);
    const std::vector<float> expected(expected_span.begin(), expected_span.end());

    auto state = make_state(model->config(), 512);
    StopAfter stop{static_cast<double>(batch) + 1.0, {}};
    const EvaluationWatch watch = stop.watch();
    try {
        forward(*model, *state, pool, ids, LogitsWanted::Last, &watch);
        FAIL() << "the watch did not stop the evaluation";
    } catch (const EvaluationStopped& e) {
        EXPECT_EQ(e.evaluated, kept);
    }
    ASSERT_EQ(state->n_past(), kept);
    ASSERT_FALSE(stop.seen.empty());
    EXPECT_TRUE(std::is_sorted(stop.seen.begin(), stop.seen.end()));
    auto rest = forward(*model, *state, pool, std::span(ids).subspan(static_cast<size_t>(kept)),
                        LogitsWanted::Last);
    EXPECT_EQ(max_abs_diff(rest, expected), 0.0);
    EXPECT_EQ(state->n_past(), static_cast<int64_t>(ids.size()));
}

TEST(ForwardStop, BetweenLayersKeepsTheBatchesBefore) {
    // qwen3 is watched between layers: the second batch reports fractions of its tokens, the
    // stop comes inside it, and it is dropped.
    expect_stop_keeps_whole_batches("qwen3", kMaxBatch, kMaxBatch);
}

TEST(ForwardStop, SlidingLayersResumeAfterAStopInsideABatch) {
    // gemma3's sliding layers keep rings; the dropped batch's half-written rows must not cost
    // the rows the window needs.
    expect_stop_keeps_whole_batches("gemma3", kMaxBatch, kMaxBatch);
}

TEST(ForwardStop, HybridStopsInsideABatchAndPutsBackItsRecurrentState) {
    // lfm2's recurrent state folds in a batch layer by layer: a stop inside the second batch of
    // 128 drops it and puts the state back as it was after the first, so the rest evaluated
    // afterwards gives the uninterrupted logits bit for bit.
    expect_stop_keeps_whole_batches("lfm2", 128, 128);
}

TEST_F(ForwardTest, WatchThatNeverStopsChangesNothing) {
    std::vector<int32_t> long_ids = reference_ids("qwen3", "long");
    auto plain_state = make_state(model_->config(), 512);
    auto plain = forward(*model_, *plain_state, pool_, long_ids, LogitsWanted::Last);
    const std::vector<float> expected(plain.begin(), plain.end());
    std::vector<double> seen;
    const EvaluationWatch watch = [&](double done) {
        seen.push_back(done);
        return true;
    };
    auto watched_state = make_state(model_->config(), 512);
    auto watched = forward(*model_, *watched_state, pool_, long_ids, LogitsWanted::Last, &watch);
    EXPECT_EQ(max_abs_diff(watched, expected), 0.0);
    // Between every two layers of both batches, and once between the batches; more from
    // inside a layer when one takes longer than ThreadPool::kInterruptionPoll (a loaded
    // machine), each repeating the last figure: never going back.
    const auto layers = static_cast<size_t>(model_->layers().size());
    EXPECT_GE(seen.size(), 2 * (layers - 1) + 1);
    for (size_t i = 1; i < seen.size(); ++i) EXPECT_GE(seen[i], seen[i - 1]) << i;
    EXPECT_LT(seen.back(), static_cast<double>(long_ids.size()));
}

}  // namespace
}  // namespace ember::test
