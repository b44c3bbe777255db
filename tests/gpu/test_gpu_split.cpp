// Models split between the GPU and the CPU (engine/model/gpu_plan.h, --gpu-layers N): the first
// N layers on GPU 0, the rest and the output on the CPU. Against the fixtures' HF float64
// references (every KV type within its tolerance, as a whole-GPU model is held), against the
// whole-GPU and the CPU runs of the same file, and across a save and restore of the state.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/model/state_io.h"
#include "tests/gpu/gpu_support.h"
#include "tests/support/fixtures.h"
#include "tests/support/gemma3_fixture.h"
#include "tests/support/kv_precision.h"
#include "tests/support/reference_logits.h"
#include "tests/support/temp_dir.h"

namespace ember::test {
namespace {

using json = nlohmann::json;

constexpr int kSteps = 16;

struct SplitCase {
    std::string arch;
    int64_t gpu_layers;  // of the fixture's 3 (2 for gptoss)
};

class GpuSplit : public ::testing::TestWithParam<SplitCase> {
protected:
    void SetUp() override {
        EMBER_REQUIRE_GPU();
        arch_ = GetParam().arch;
        EMBER_REQUIRE_FIXTURE("arch/" + arch_ + "/" + arch_ + ".gguf");
        ref_ = json::parse(read_file(fixture_path("arch/" + arch_ + "/ref.json")));
        path_ = arch_ == "gemma3" ? gemma3_with_config_pattern(dir_.file("gemma3-pattern.gguf"))
                                  : fixture_path("arch/" + arch_ + "/" + arch_ + ".gguf");
        LoadOptions options;
        options.weight_panels = false;  // the row layout, as a model that may go to a GPU
        split_ = Model::load(path_, options);
        GpuRequest request{GpuRequest::Mode::Index, 0};
        request.layers = GetParam().gpu_layers;
        placed_ = place_model(*split_, request, 0);
        whole_ = load_fixture_model(path_, true);
        cpu_ = load_fixture_model(path_, false);
        what_ = arch_ + " " + std::to_string(GetParam().gpu_layers) + "/" +
                std::to_string(split_->config().n_layer) + " on the GPU";
    }

    std::string arch_, path_, what_;
    json ref_;
    TempDir dir_{"ember-gpu-split"};
    std::unique_ptr<Model> split_, whole_, cpu_;
    GpuPlacement placed_;
    ThreadPool pool_{2};
};

TEST_P(GpuSplit, PlacedAsAskedWithItsAccount) {
    const int64_t n_layer = split_->config().n_layer;
    ASSERT_TRUE(placed_.on_gpu);
    ASSERT_NE(split_->device(), nullptr);
    EXPECT_EQ(split_->device()->layers(), GetParam().gpu_layers);
    EXPECT_EQ(placed_.gpu_layers, GetParam().gpu_layers);
    EXPECT_EQ(whole_->device()->layers(), n_layer);
    // The CPU's layers (and the output) are not uploaded.
    EXPECT_LT(split_->device()->weight_bytes(), whole_->device()->weight_bytes());
    const std::string account = "GPU 0: " + std::to_string(GetParam().gpu_layers) + " of " +
                                std::to_string(n_layer) + " layers (";
    EXPECT_NE(placed_.note.find(account), std::string::npos) << placed_.note;
    EXPECT_NE(placed_.note.find(std::to_string(n_layer - GetParam().gpu_layers) + " on the CPU"),
              std::string::npos)
        << placed_.note;
    std::printf("[split] %s: %s\n", what_.c_str(), placed_.note.c_str());
}

// The independent reference: HF float64, each KV type within the tolerance a whole-GPU (and a
// CPU) model is held to; batches of up to 17 bit for bit the one-by-one logits.
TEST_P(GpuSplit, EveryKvTypeWithinTheReferenceTolerance) {
    // Named by the fixture: a family's own tolerance (kv_precision.h: qwen3moe's q8_0 cache
    // flips near-tied expert choices) applies to its split as to its whole runs.
    std::printf("[split] %s: the KV types against the reference\n", what_.c_str());
    check_each_kv_type(*split_, pool_, ref_["seqs"], {"text", "long"}, "text", arch_, 256);
}

// Prefill (one batch) and decode (one token at a time, the captured graph replayed): the split's
// logits within the KV type's tolerance of the whole-GPU run's and of the CPU's, each of which is
// within that tolerance of the reference.
TEST_P(GpuSplit, LogitsAgreeWithTheWholeGpuAndTheCpu) {
    const std::vector<int32_t> ids = ids_of(ref_["seqs"]["long"]);
    for (const KvType type : {KvType::F32, KvType::F16}) {
        for (const int64_t batch : {int64_t{256}, int64_t{1}}) {
            const auto split = logits_in_batches(*split_, pool_, ids, {batch}, type);
            const auto whole = logits_in_batches(*whole_, pool_, ids, {batch}, type);
            const auto cpu = logits_in_batches(*cpu_, pool_, ids, {batch}, type);
            double vs_whole = 0, vs_cpu = 0;
            for (size_t i = 0; i < split.size(); ++i) {
                ASSERT_TRUE(std::isfinite(split[i])) << what_ << " logit " << i;
                vs_whole = std::max(vs_whole, static_cast<double>(std::fabs(split[i] - whole[i])));
                vs_cpu = std::max(vs_cpu, static_cast<double>(std::fabs(split[i] - cpu[i])));
            }
            EXPECT_LE(vs_whole, kv_tolerance(type, arch_)) << what_ << " batch " << batch;
            EXPECT_LE(vs_cpu, kv_tolerance(type, arch_)) << what_ << " batch " << batch;
            std::printf("[split] %s %s batch %lld: max |dlogit| vs whole GPU %.2e, vs CPU %.2e\n",
                        what_.c_str(), kv_type_name(type), static_cast<long long>(batch), vs_whole,
                        vs_cpu);
        }
    }
}

// A prompt, its rows saved as the state store saves them (the GPU layers' rows fetched from the
// device), restored into a fresh split state: the same continuation bit for bit; restored over a
// reply cut back to half the prompt: the same again; the rows resume on the whole GPU and on
// the CPU with the same choices wherever they are clear.
TEST_P(GpuSplit, SavedAndRestoredStateContinuesTheSame) {
    const std::vector<int32_t> prompt = ids_of(ref_["seqs"]["long"]);
    const auto n = static_cast<int64_t>(prompt.size());
    const auto fresh = [&](const Model& m) {
        return make_state(m.config(), n + kSteps + 8, KvType::F16);
    };
    auto cold_state = fresh(*split_);
    const auto first = forward(*split_, *cold_state, pool_, prompt, LogitsWanted::Last);
    const std::vector<float> last(first.begin(), first.end());
    const auto rows = serialize_kv_rows(cold_state->kv, 0, n);
    const GreedyRun cold = greedy_from(*split_, *cold_state, pool_, last, kSteps);

    const auto resumed = [&](const Model& m) {
        auto state = fresh(m);
        state->kv.reserve(n);
        apply_kv_rows(rows, state->kv, 0, n);
        state->kv.set_length(n);
        return greedy_from(m, *state, pool_, last, kSteps);
    };
    const GreedyRun warm = resumed(*split_);
    ASSERT_EQ(warm.tokens, cold.tokens) << what_;
    for (int i = 0; i < kSteps; ++i) {
        EXPECT_EQ(0, std::memcmp(warm.logits[i].data(), cold.logits[i].data(),
                                 cold.logits[i].size() * sizeof(float)))
            << what_ << " restored, step " << i;
    }

    // The reply cut back to half the prompt, the prompt's rows from there restored on the host.
    auto state = fresh(*split_);
    forward(*split_, *state, pool_, prompt, LogitsWanted::Last);
    greedy_from(*split_, *state, pool_, last, kSteps);
    state->kv.set_length(n / 2);
    ASSERT_TRUE(state->kv.can_resume_at(n / 2));
    apply_kv_rows(rows, state->kv, n / 2, n);
    state->kv.set_length(n);
    const GreedyRun again = greedy_from(*split_, *state, pool_, last, kSteps);
    EXPECT_EQ(again.tokens, cold.tokens) << what_ << " cut back and restored";

    expect_same_where_clear(cold, resumed(*whole_), 1e-2, what_ + " rows on the whole GPU");
    expect_same_where_clear(cold, resumed(*cpu_), 1e-2, what_ + " rows on the CPU");
}

INSTANTIATE_TEST_SUITE_P(
    Dense, GpuSplit,
    ::testing::Values(SplitCase{"llama", 1}, SplitCase{"llama", 2}, SplitCase{"qwen3", 1},
                      SplitCase{"qwen3", 2}, SplitCase{"qwen2", 1}, SplitCase{"gemma3", 1},
                      SplitCase{"gemma3", 2}, SplitCase{"qwen3moe", 2}, SplitCase{"gptoss", 1}),
    [](const auto& param_info) {
        return param_info.param.arch + "_" + std::to_string(param_info.param.gpu_layers);
    });

}  // namespace
}  // namespace ember::test
