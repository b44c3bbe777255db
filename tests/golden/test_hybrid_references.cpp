// The hybrid families (lfm2: short convolutions + attention; qwen35: GatedDeltaNet + gated
// attention) against their HF float64 references, in process: every reference top-5 logit
// within 2e-3 at every position, whether the tokens arrive in one call, one by one or in
// uneven batches (which exercises the chunked and the token-serial delta rule and the conv
// history across calls); greedy tokens where the reference margin is unambiguous; and the
// recurrent state's snapshot/restore and serialization.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <span>
#include <vector>

#include "engine/model/forward.h"
#include "engine/model/model.h"
#include "engine/model/recurrent_state.h"
#include "engine/model/state.h"
#include "engine/model/state_io.h"
#include "engine/util/thread_pool.h"
#include "tests/support/fixtures.h"
#include "tests/support/kv_precision.h"
#include "tests/support/reference_logits.h"

namespace ember::test {
namespace {

using json = nlohmann::json;

constexpr double kTolerance = 2e-3;

class HybridReference : public ::testing::TestWithParam<std::string> {
protected:
    void SetUp() override {
        const std::string arch = GetParam();
        gguf_ = "arch/" + arch + "/" + arch + ".gguf";
        EMBER_REQUIRE_FIXTURE(gguf_);
        model_ = Model::load(fixture_path(gguf_));
        ref_ = json::parse(read_file(fixture_path("arch/" + arch + "/ref.json")));
    }

    // Feeds `ids` in batches of the given sizes (the last repeats); logits [ids x n_vocab]
    // (KV cache of `kv_type`).
    std::vector<float> run_batches(const std::vector<int32_t>& ids, std::vector<int64_t> sizes,
                                   KvType kv_type = KvType::F32) {
        return logits_in_batches(*model_, pool_, ids, sizes, kv_type);
    }

    double deviation(const std::vector<float>& all, const json& seq) {
        return sequence_deviation(all, model_->config().n_vocab, seq);
    }

    std::string gguf_;
    std::unique_ptr<Model> model_;
    json ref_;
    ThreadPool pool_{2};
};

TEST_P(HybridReference, LogitsWithin2e3HoweverTheTokensAreBatched) {
    const std::vector<std::vector<int64_t>> schedules = {
        {kMaxBatch}, {1}, {1, 7, 64, 1000}, {5, 3, 17, 2}};
    const char* schedule_names[] = {"one call", "one by one", "1,7,64,rest", "5,3,17,2..."};
    for (const char* name : {"text", "chat", "long"}) {
        ASSERT_TRUE(ref_["seqs"].contains(name)) << gguf_ << " ref.json lacks " << name;
        const json& seq = ref_["seqs"][name];
        const std::vector<int32_t> ids = ids_of(seq);
        std::vector<float> one_call;
        for (size_t s = 0; s < schedules.size(); ++s) {
            const std::vector<float> all = run_batches(ids, schedules[s]);
            const double dev = deviation(all, seq);
            EXPECT_LE(dev, kTolerance) << GetParam() << "/" << name << " " << schedule_names[s];
            std::printf("[ref] %s/%s (%s): max |dlogit| %.2e over %zu positions\n",
                        GetParam().c_str(), name, schedule_names[s], dev, ids.size());
            if (s == 0) {
                one_call = all;
                continue;
            }
            // The chunked (prefill) and token-serial (decode) recurrences agree closely.
            double diff = 0;
            for (size_t i = 0; i < all.size(); ++i) {
                diff = std::max(diff, static_cast<double>(std::fabs(all[i] - one_call[i])));
            }
            EXPECT_LE(diff, 1e-4) << GetParam() << "/" << name << " " << schedule_names[s]
                                  << " differs from one call";
        }
    }
}

// The KV types' fidelity (kv_precision.h): every sequence in one call, and in batches of at
// most 17, which must give the one-by-one logits bit for bit whatever the cache holds.
TEST_P(HybridReference, EachKvTypeWithinItsTolerance) {
    check_each_kv_type(*model_, pool_, ref_["seqs"], {"text", "chat", "long"}, "chat", GetParam(),
                       kMaxBatch);
}

TEST_P(HybridReference, GreedyMatchesWhereTheMarginIsClear) {
    for (const char* name : {"text", "chat"}) {
        const json& seq = ref_["seqs"][name];
        const std::vector<int32_t> prompt = ids_of(seq);
        const std::vector<int32_t> expected = ids_of(seq, "greedy_ids");
        auto state =
            make_state(model_->config(), static_cast<int64_t>(prompt.size() + expected.size()) + 8);
        auto logits = forward(*model_, *state, pool_, prompt, LogitsWanted::Last);
        for (size_t i = 0; i < expected.size(); ++i) {
            const int32_t best = static_cast<int32_t>(
                std::max_element(logits.begin(), logits.end()) - logits.begin());
            if (best != expected[i]) {
                EXPECT_LE(seq["greedy_margins"][i].get<double>(), 1e-2)
                    << GetParam() << "/" << name << ": greedy token " << i << " is " << best
                    << ", reference " << expected[i];
                break;  // past an ambiguous choice the continuations differ
            }
            const int32_t next[] = {best};
            logits = forward(*model_, *state, pool_, next, LogitsWanted::Last);
        }
    }
}

// Speculation's pattern: snapshot, run ahead, restore, run the same tokens again.
TEST_P(HybridReference, SnapshotRestoreIsBitIdentical) {
    const std::vector<int32_t> ids = ids_of(ref_["seqs"]["long"]);
    auto state = make_state(model_->config(), 512);
    forward(*model_, *state, pool_, std::span(ids).first(100), LogitsWanted::Last);
    RecurrentSnapshotPool snapshots;
    snapshots.init(state->recurrent, 2);
    snapshots.save(1, state->recurrent);
    const int64_t saved = state->kv.length();
    EXPECT_EQ(snapshots.position(1), saved);

    auto ahead =
        forward(*model_, *state, pool_, std::span(ids).subspan(100, 37), LogitsWanted::All);
    const std::vector<float> first(ahead.begin(), ahead.end());
    state->kv.set_length(saved);
    snapshots.restore(1, state->recurrent);
    auto again =
        forward(*model_, *state, pool_, std::span(ids).subspan(100, 37), LogitsWanted::All);
    ASSERT_EQ(again.size(), first.size());
    EXPECT_EQ(std::memcmp(again.data(), first.data(), first.size() * sizeof(float)), 0);
    EXPECT_THROW(snapshots.restore(0, state->recurrent), std::logic_error);  // never saved
}

// A truncated cache cannot roll back recurrent state: forward refuses it; back to 0 restarts.
TEST_P(HybridReference, RollbackWithoutSnapshotIsRefusedExceptToTheStart) {
    const std::vector<int32_t> ids = ids_of(ref_["seqs"]["text"]);
    auto state = make_state(model_->config(), 128);
    auto first = forward(*model_, *state, pool_, ids, LogitsWanted::Last);
    const std::vector<float> expected(first.begin(), first.end());
    state->kv.set_length(3);
    EXPECT_THROW(forward(*model_, *state, pool_, std::span(ids).subspan(3), LogitsWanted::Last),
                 std::logic_error);
    state->kv.set_length(0);
    auto again = forward(*model_, *state, pool_, ids, LogitsWanted::Last);
    EXPECT_EQ(std::memcmp(again.data(), expected.data(), expected.size() * sizeof(float)), 0);
}

// The session store's pattern: serialize at a turn boundary, resume in a fresh state.
TEST_P(HybridReference, SerializedStateResumesBitIdentically) {
    const std::vector<int32_t> ids = ids_of(ref_["seqs"]["long"]);
    const size_t boundary = 120;
    auto state = make_state(model_->config(), 512);
    forward(*model_, *state, pool_, std::span(ids).first(boundary), LogitsWanted::Last);
    const std::vector<uint8_t> kv_blob = serialize_kv_rows(state->kv, 0, state->kv.length());
    const std::vector<uint8_t> rec_blob = serialize_recurrent(state->recurrent);
    const RecurrentBlobInfo info = inspect_recurrent(rec_blob);
    EXPECT_EQ(info.position, static_cast<int64_t>(boundary));
    EXPECT_EQ(info.n_floats, static_cast<int64_t>(state->recurrent.data().size()));
    auto rest =
        forward(*model_, *state, pool_, std::span(ids).subspan(boundary), LogitsWanted::All);
    const std::vector<float> expected(rest.begin(), rest.end());

    auto resumed = make_state(model_->config(), 512);
    apply_kv_rows(kv_blob, resumed->kv, 0, static_cast<int64_t>(boundary));
    resumed->kv.set_length(static_cast<int64_t>(boundary));
    apply_recurrent(rec_blob, resumed->recurrent);
    auto got =
        forward(*model_, *resumed, pool_, std::span(ids).subspan(boundary), LogitsWanted::All);
    ASSERT_EQ(got.size(), expected.size());
    EXPECT_EQ(std::memcmp(got.data(), expected.data(), expected.size() * sizeof(float)), 0);

    // Damaged or mismatched blobs are refused before anything is written.
    std::vector<uint8_t> truncated(rec_blob.begin(), rec_blob.end() - 4);
    EXPECT_THROW(apply_recurrent(truncated, resumed->recurrent), StateFormatError);
    EXPECT_THROW(apply_recurrent(kv_blob, resumed->recurrent), StateFormatError);
    EXPECT_THROW(inspect_kv_rows(rec_blob), StateFormatError);
}

INSTANTIATE_TEST_SUITE_P(Families, HybridReference, ::testing::Values("lfm2", "qwen35"));

}  // namespace
}  // namespace ember::test
