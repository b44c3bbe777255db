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

// --gpu-memory (issue 40, item 2): a cap the model does not fit in places as many layers as fit
// there, the rest on the CPU. The cap is the smallest that places a layer, found by bisection of
// place_model's own choice (its result at each cap), so the test does not restate the plan's
// arithmetic; a byte less places none, with the error saying so. The split's logits
// agree with the whole GPU's and the CPU's within the KV type's tolerance, and the device memory
// it took while evaluating (its weights, the state's KV rows of its layers, the scratch) stays
// within the cap.
class GpuMemoryCap : public ::testing::TestWithParam<std::string> {
protected:
    // The model loaded as one that may go to a GPU, placed on GPU 0 under `cap` bytes for
    // `kv_bytes` of KV cache; placement.gpu_layers 0 where not one layer fits (place_model
    // refuses with an error for a numbered GPU).
    std::unique_ptr<Model> placed_under(uint64_t cap, uint64_t kv_bytes, GpuPlacement& placement) {
        LoadOptions options;
        options.weight_panels = false;
        auto model = Model::load(path_, options);
        GpuRequest request{GpuRequest::Mode::Index, 0};
        request.memory_limit = cap;
        refusal_.clear();
        try {
            placement = place_model(*model, request, kv_bytes);
        } catch (const std::runtime_error& e) {
            placement = GpuPlacement{};
            refusal_ = e.what();
        }
        return model;
    }

    std::string path_, refusal_;
};

TEST_P(GpuMemoryCap, ASplitUnderTheCapAgreesWithTheWholeGpuWithinTheCap) {
    EMBER_REQUIRE_GPU();
    const std::string arch = GetParam();
    EMBER_REQUIRE_FIXTURE("arch/" + arch + "/" + arch + ".gguf");
    path_ = fixture_path("arch/" + arch + "/" + arch + ".gguf");
    const json ref = json::parse(read_file(fixture_path("arch/" + arch + "/ref.json")));
    const std::vector<int32_t> ids = ids_of(ref["seqs"]["long"]);
    ThreadPool pool{2};

    // The KV cache logits_in_batches makes (every layer's rows; the plan counts the GPU
    // layers' share).
    const auto probe = load_fixture_model(path_, false);
    const int64_t n_layer = probe->config().n_layer;
    const auto kv_state =
        make_state(probe->config(), static_cast<int64_t>(ids.size()) + 64, KvType::F32);
    const uint64_t kv_bytes =
        static_cast<uint64_t>(kv_state->kv.capacity()) *
        static_cast<uint64_t>(kv_state->kv.k_row_bytes() + kv_state->kv.v_row_bytes()) *
        static_cast<uint64_t>(kv_state->kv.n_layer());

    // Bisection to the smallest cap that places a layer (`low` places none, `high` some): the
    // plan's own need for its layers to the byte, so the memory check below is a tight one.
    uint64_t low = 1, high = uint64_t{8} << 30;
    GpuPlacement placement;
    {
        auto whole = placed_under(high, kv_bytes, placement);
        ASSERT_EQ(placement.gpu_layers, n_layer) << arch << " whole under 8 GiB: " << refusal_;
    }
    while (high - low > 1) {
        const uint64_t mid = low + (high - low) / 2;
        auto model = placed_under(mid, kv_bytes, placement);
        (placement.gpu_layers == 0 ? low : high) = mid;
    }
    const uint64_t cap = high;
    {
        auto model = placed_under(low, kv_bytes, placement);
        EXPECT_EQ(placement.gpu_layers, 0) << arch << " at a byte under the cap";
        EXPECT_NE(refusal_.find("not even one layer fits"), std::string::npos) << refusal_;
    }
    auto capped = placed_under(cap, kv_bytes, placement);
    const int64_t layers = placement.gpu_layers;
    ASSERT_GE(layers, 1) << arch;
    ASSERT_LT(layers, n_layer) << arch << ": the smallest cap that places a layer places all";
    ASSERT_NE(capped->device(), nullptr);
    EXPECT_EQ(capped->device()->layers(), layers);
    const std::string account =
        "GPU 0: " + std::to_string(layers) + " of " + std::to_string(n_layer) + " layers (";
    EXPECT_NE(placement.note.find(account), std::string::npos) << placement.note;
    EXPECT_NE(placement.note.find(std::to_string(n_layer - layers) + " on the CPU"),
              std::string::npos)
        << placement.note;

    // Evaluated alone on the device (memory_in_use reads the device's free memory), then the
    // whole-GPU and CPU runs of the same file.
    std::vector<std::vector<float>> split_logits;
    for (const int64_t batch : {int64_t{256}, int64_t{1}}) {
        split_logits.push_back(logits_in_batches(*capped, pool, ids, {batch}, KvType::F32));
    }
    // The memory in use while a state of the same size is alive (logits_in_batches' is gone).
    uint64_t in_use = 0;
    {
        auto state =
            make_state(capped->config(), static_cast<int64_t>(ids.size()) + 64, KvType::F32);
        forward(*capped, *state, pool, ids, LogitsWanted::Last);
        in_use = capped->device()->memory_in_use();
    }
    std::printf("[split] %s under --gpu-memory %.2f MiB: %s; %.2f MiB in use evaluating\n",
                arch.c_str(), static_cast<double>(cap) / (1 << 20), placement.note.c_str(),
                static_cast<double>(in_use) / (1 << 20));
    EXPECT_LE(in_use, cap) << arch << ": the split took more device memory than --gpu-memory";
    capped.reset();

    const auto whole = load_fixture_model(path_, true);
    const auto cpu = load_fixture_model(path_, false);
    const double tolerance = kv_tolerance(KvType::F32, arch);
    for (size_t b = 0; b < split_logits.size(); ++b) {
        const int64_t batch = b == 0 ? 256 : 1;
        const auto on_whole = logits_in_batches(*whole, pool, ids, {batch}, KvType::F32);
        const auto on_cpu = logits_in_batches(*cpu, pool, ids, {batch}, KvType::F32);
        const std::vector<float>& split = split_logits[b];
        double vs_whole = 0, vs_cpu = 0;
        for (size_t i = 0; i < split.size(); ++i) {
            ASSERT_TRUE(std::isfinite(split[i])) << arch << " logit " << i;
            vs_whole = std::max(vs_whole, static_cast<double>(std::fabs(split[i] - on_whole[i])));
            vs_cpu = std::max(vs_cpu, static_cast<double>(std::fabs(split[i] - on_cpu[i])));
        }
        EXPECT_LE(vs_whole, tolerance) << arch << " batch " << batch;
        EXPECT_LE(vs_cpu, tolerance) << arch << " batch " << batch;
        std::printf("[split] %s capped, batch %lld: max |dlogit| vs whole GPU %.2e, vs CPU %.2e\n",
                    arch.c_str(), static_cast<long long>(batch), vs_whole, vs_cpu);
    }
}

INSTANTIATE_TEST_SUITE_P(Capped, GpuMemoryCap,
                         ::testing::Values("llama", "qwen3", "qwen3moe", "gptoss"),
                         [](const auto& param_info) { return param_info.param; });

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
