// The hybrids' recurrent state on the GPU (issue 40, item 1): the state the device moves is the
// one the host reads when it snapshots (speculation) or serializes (the session store), and a
// state crosses between the CPU and the GPU like the KV rows do: a conversation prefilled on
// one continues on the other within the fixtures' 2e-3 of HF float64.
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <span>
#include <vector>

#include "engine/model/recurrent_state.h"
#include "engine/model/state_io.h"
#include "tests/gpu/gpu_support.h"
#include "tests/support/fixtures.h"
#include "tests/support/reference_logits.h"

namespace ember::test {
namespace {

using json = nlohmann::json;

constexpr double kTolerance = 2e-3;

class GpuRecurrent : public ::testing::TestWithParam<std::string> {
protected:
    void SetUp() override {
        EMBER_REQUIRE_GPU();
        const std::string arch = GetParam();
        const std::string gguf = "arch/" + arch + "/" + arch + ".gguf";
        EMBER_REQUIRE_FIXTURE(gguf);
        ref_ = json::parse(read_file(fixture_path("arch/" + arch + "/ref.json")));
        gpu_ = load_fixture_model(fixture_path(gguf), true);
        ids_ = ids_of(ref_["seqs"]["long"]);
    }

    // Largest deviation from the reference of the logits [rows x n_vocab] of positions
    // first.. of the long sequence.
    double deviation_from(std::span<const float> logits, size_t first) const {
        const auto width = static_cast<size_t>(gpu_->config().n_vocab);
        double worst = 0;
        for (size_t r = 0; r < logits.size() / width; ++r) {
            worst = std::max(worst, position_deviation(logits.subspan(r * width, width),
                                                       ref_["seqs"]["long"], first + r));
        }
        return worst;
    }

    json ref_;
    std::unique_ptr<Model> gpu_;
    std::vector<int32_t> ids_;
    ThreadPool pool_{2};
};

// Speculation's pattern on the device: snapshot (the host reads the device's state), run ahead,
// restore (the host writes it back), run the same tokens again: the same bits.
TEST_P(GpuRecurrent, SnapshotRestoreIsBitIdentical) {
    auto state = make_state(gpu_->config(), 512);
    forward(*gpu_, *state, pool_, std::span(ids_).first(100), LogitsWanted::Last);
    RecurrentSnapshotPool snapshots;
    snapshots.init(state->recurrent, 1);
    snapshots.save(0, state->recurrent);
    const int64_t saved = state->kv.length();
    auto ahead = forward(*gpu_, *state, pool_, std::span(ids_).subspan(100, 9), LogitsWanted::All);
    const std::vector<float> first(ahead.begin(), ahead.end());
    // Decode steps (the captured graph) ahead too, so the restore must reach the graph's state.
    for (size_t i = 109; i < 112; ++i) {
        forward(*gpu_, *state, pool_, std::span(ids_).subspan(i, 1), LogitsWanted::Last);
    }
    state->kv.set_length(saved);
    snapshots.restore(0, state->recurrent);
    auto again = forward(*gpu_, *state, pool_, std::span(ids_).subspan(100, 9), LogitsWanted::All);
    ASSERT_EQ(again.size(), first.size());
    EXPECT_EQ(0, std::memcmp(again.data(), first.data(), first.size() * sizeof(float)))
        << GetParam() << ": the restored device state differs";
    EXPECT_LE(deviation_from(first, 100), kTolerance);
}

// The session store's pattern: the KV rows and the recurrent state serialized from one engine
// and applied to a fresh state of the other, both ways; the continuation within 2e-3 of the
// reference, and on the device bit for bit what the device gives without the round trip.
TEST_P(GpuRecurrent, StateCrossesBetweenCpuAndGpu) {
    auto cpu =
        load_fixture_model(fixture_path("arch/" + GetParam() + "/" + GetParam() + ".gguf"), false);
    const size_t boundary = 120;
    const auto prefix = std::span(ids_).first(boundary);
    const auto rest = std::span(ids_).subspan(boundary);
    struct Saved {
        std::vector<uint8_t> kv, recurrent;
    };
    const auto prefill = [&](const Model& model) {
        auto state = make_state(model.config(), 512);
        forward(model, *state, pool_, prefix, LogitsWanted::Last);
        return Saved{serialize_kv_rows(state->kv, 0, state->kv.length()),
                     serialize_recurrent(state->recurrent)};
    };
    const auto continue_on = [&](const Model& model, const Saved& saved) {
        auto state = make_state(model.config(), 512);
        apply_kv_rows(saved.kv, state->kv, 0, static_cast<int64_t>(boundary));
        state->kv.set_length(static_cast<int64_t>(boundary));
        apply_recurrent(saved.recurrent, state->recurrent);
        const auto logits = forward(model, *state, pool_, rest, LogitsWanted::All);
        return std::vector<float>(logits.begin(), logits.end());
    };
    const Saved from_gpu = prefill(*gpu_);
    const Saved from_cpu = prefill(*cpu);
    const std::vector<float> gpu_to_cpu = continue_on(*cpu, from_gpu);
    const std::vector<float> cpu_to_gpu = continue_on(*gpu_, from_cpu);
    const std::vector<float> gpu_to_gpu = continue_on(*gpu_, from_gpu);
    EXPECT_LE(deviation_from(gpu_to_cpu, boundary), kTolerance) << "GPU prefix, CPU continues";
    EXPECT_LE(deviation_from(cpu_to_gpu, boundary), kTolerance) << "CPU prefix, GPU continues";

    auto state = make_state(gpu_->config(), 512);
    forward(*gpu_, *state, pool_, prefix, LogitsWanted::Last);
    const auto direct = forward(*gpu_, *state, pool_, rest, LogitsWanted::All);
    ASSERT_EQ(direct.size(), gpu_to_gpu.size());
    EXPECT_EQ(0, std::memcmp(direct.data(), gpu_to_gpu.data(), direct.size() * sizeof(float)))
        << GetParam() << ": a serialized device state resumes differently";
    std::printf("[gpu] %s state across CPU/GPU: GPU->CPU %.2e, CPU->GPU %.2e of the reference\n",
                GetParam().c_str(), deviation_from(gpu_to_cpu, boundary),
                deviation_from(cpu_to_gpu, boundary));
}

INSTANTIATE_TEST_SUITE_P(HybridFamilies, GpuRecurrent, ::testing::Values("qwen35", "lfm2"));

}  // namespace
}  // namespace ember::test
