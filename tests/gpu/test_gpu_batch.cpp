// A decode step of several conversations at once (forward.h: decode_batch) on the GPU: each
// conversation's logits are bit for bit those it gets stepping alone (the captured one-token
// step), whichever conversations share its step, as they join and leave, for every family the
// batched path takes (dense, sliding windows, biases, experts, sinks) and every KV type. A
// conversation whose context is full gets forward()'s error while the others go on. The hybrids
// fall back to one conversation at a time, with the same bits.
#include <gtest/gtest.h>

#include <cstring>
#include <exception>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "tests/gpu/gpu_support.h"
#include "tests/support/fixtures.h"
#include "tests/support/gemma3_fixture.h"
#include "tests/support/reference_logits.h"
#include "tests/support/temp_dir.h"

namespace ember::test {
namespace {

using json = nlohmann::json;

constexpr int kConversations = 6;
constexpr int kSteps = 12;

struct BatchCase {
    std::string arch;
    KvType kv_type;
};

std::string case_name(const ::testing::TestParamInfo<BatchCase>& info) {
    return info.param.arch + "_" + std::string(kv_type_name(info.param.kv_type));
}

class GpuBatch : public ::testing::TestWithParam<BatchCase> {
protected:
    void SetUp() override {
        EMBER_REQUIRE_GPU();
        const std::string arch = GetParam().arch;
        const std::string rel = "arch/" + arch + "/" + arch + ".gguf";
        EMBER_REQUIRE_FIXTURE(rel);
        const json ref = json::parse(read_file(fixture_path("arch/" + arch + "/ref.json")));
        source_ = ids_of(ref["seqs"]["long"]);
        const std::string path = arch == "gemma3"
                                     ? gemma3_with_config_pattern(dir_.file("gemma3-pattern.gguf"))
                                     : fixture_path(rel);
        model_ = load_fixture_model(path, true);
    }

    // Conversation c's prompt: a rotation of the reference sequence, of its own length.
    std::vector<int32_t> prompt(int c) const {
        const size_t n = source_.size();
        const size_t length = std::max<size_t>(2, n * static_cast<size_t>(c + 1) / kConversations);
        std::vector<int32_t> ids;
        for (size_t i = 0; i < length; ++i) ids.push_back(source_[(i + 5 * c) % n]);
        return ids;
    }

    std::unique_ptr<InferenceState> state_for(int64_t positions) const {
        return make_state(model_->config(), positions, GetParam().kv_type);
    }

    TempDir dir_{"ember-gpu-batch"};
    ThreadPool pool_{2};
    std::vector<int32_t> source_;
    std::unique_ptr<Model> model_;
};

TEST_P(GpuBatch, EachConversationGetsTheBitsItGetsAlone) {
    const auto n_vocab = static_cast<size_t>(model_->config().n_vocab);
    std::vector<std::unique_ptr<InferenceState>> alone, together;
    std::vector<std::vector<float>> last(kConversations);  // the alone run's latest logits
    // The last conversation's context fills after three steps: its error must not stop the rest.
    const int short_one = kConversations - 1;
    for (int c = 0; c < kConversations; ++c) {
        const std::vector<int32_t> ids = prompt(c);
        const int64_t positions =
            static_cast<int64_t>(ids.size()) + (c == short_one ? 3 : kSteps + 4);
        alone.push_back(state_for(positions));
        together.push_back(state_for(positions));
        const auto first = forward(*model_, *alone.back(), pool_, ids, LogitsWanted::Last);
        last[static_cast<size_t>(c)].assign(first.begin(), first.end());
        forward(*model_, *together.back(), pool_, ids, LogitsWanted::Last);
    }
    int compared = 0, refused = 0;
    for (int step = 0; step < kSteps; ++step) {
        // Who steps: all at first, then conversations leave and come back.
        std::vector<int> members;
        for (int c = 0; c < kConversations; ++c) {
            if (step < 2 || (c + step) % 4 != 0) members.push_back(c);
        }
        std::vector<InferenceState*> states;
        std::vector<int32_t> tokens;
        for (int c : members) {
            states.push_back(together[static_cast<size_t>(c)].get());
            tokens.push_back(argmax(last[static_cast<size_t>(c)]));
        }
        std::vector<float> rows(members.size() * n_vocab);
        const auto errors = decode_batch(*model_, states, pool_, tokens, rows.data());
        ASSERT_EQ(errors.size(), members.size());
        for (size_t m = 0; m < members.size(); ++m) {
            const auto c = static_cast<size_t>(members[m]);
            InferenceState& own = *alone[c];
            const bool full = own.kv.length() + 1 > own.kv.capacity();
            if (full) {
                ASSERT_TRUE(errors[m]) << "conversation " << c << " at step " << step;
                EXPECT_THROW(std::rethrow_exception(errors[m]), std::length_error);
                EXPECT_EQ(together[c]->kv.length(), own.kv.length()) << "a refused step moved";
                ++refused;
                continue;
            }
            ASSERT_FALSE(errors[m]) << "conversation " << c << " at step " << step;
            const int32_t token = tokens[m];
            const auto expected = forward(*model_, own, pool_, std::span<const int32_t>(&token, 1),
                                          LogitsWanted::Last);
            ASSERT_EQ(
                0, std::memcmp(expected.data(), rows.data() + m * n_vocab, n_vocab * sizeof(float)))
                << "conversation " << c << " at step " << step << " (" << members.size()
                << " together): the batched logits differ from its own";
            EXPECT_EQ(together[c]->kv.length(), own.kv.length());
            last[c].assign(expected.begin(), expected.end());
            ++compared;
        }
    }
    EXPECT_GT(refused, 0) << "the full context was never met";
    std::printf("[batch] %s %s: %d rows equal bit for bit, %d steps refused (context full)\n",
                GetParam().arch.c_str(), std::string(kv_type_name(GetParam().kv_type)).c_str(),
                compared, refused);
}

// A state warmed up (forward.h: warm_up, as each of serve's slots is at start) is empty again
// and gives, prompt and steps, the bits a fresh state gives.
TEST_P(GpuBatch, WarmedUpStateGivesTheBitsOfAFreshOne) {
    const std::vector<int32_t> ids = prompt(2);
    const int64_t positions = static_cast<int64_t>(ids.size()) + 8 + kExactBatchTokens;
    auto fresh = state_for(positions);
    auto warmed = state_for(positions);
    warm_up(*model_, *warmed, pool_);
    ASSERT_EQ(warmed->kv.length(), 0) << "warm_up left tokens in the state";
    std::vector<float> expected;
    for (int step = 0; step < 4; ++step) {
        std::vector<int32_t> input = ids;
        if (step > 0) input = {argmax(expected)};
        const auto want = forward(*model_, *fresh, pool_, input, LogitsWanted::Last);
        expected.assign(want.begin(), want.end());
        const auto got = forward(*model_, *warmed, pool_, input, LogitsWanted::Last);
        ASSERT_EQ(0, std::memcmp(expected.data(), got.data(), expected.size() * sizeof(float)))
            << "step " << step << ": the warmed-up state's logits differ from a fresh one's";
    }
    EXPECT_EQ(warmed->kv.length(), fresh->kv.length());
}

std::vector<BatchCase> cases() {
    std::vector<BatchCase> out;
    for (const char* arch :
         {"llama", "qwen2", "qwen3", "gemma3", "qwen3moe", "gptoss", "lfm2", "qwen35"}) {
        for (KvType t : {KvType::F32, KvType::F16, KvType::Q8_0}) out.push_back({arch, t});
    }
    return out;
}

INSTANTIATE_TEST_SUITE_P(Families, GpuBatch, ::testing::ValuesIn(cases()), case_name);

}  // namespace
}  // namespace ember::test
