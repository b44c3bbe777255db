// State across devices: KV rows computed on the GPU, serialized as the state store does, and
// restored into a GPU or a CPU state continue as the state they came from; rows made on the
// CPU continue on the GPU; a cache cut back and rebuilt on the GPU continues as before; rows
// restored from page-locked memory onto the device alone continue the same, and come back to
// the host when serialized.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "engine/model/pinned_bytes.h"
#include "engine/model/state_io.h"
#include "tests/gpu/gpu_support.h"
#include "tests/support/fixtures.h"
#include "tests/support/gemma3_fixture.h"
#include "tests/support/reference_logits.h"
#include "tests/support/temp_dir.h"

namespace ember::test {
namespace {

using json = nlohmann::json;

constexpr int kSteps = 24;

struct Models {
    std::unique_ptr<Model> gpu, cpu;
};

class GpuState : public ::testing::TestWithParam<std::string> {
protected:
    void SetUp() override {
        EMBER_REQUIRE_GPU();
        const std::string arch = GetParam();
        const std::string rel = "arch/" + arch + "/" + arch + ".gguf";
        EMBER_REQUIRE_FIXTURE(rel);
        const json ref = json::parse(read_file(fixture_path("arch/" + arch + "/ref.json")));
        prompt_ = ids_of(ref["seqs"]["long"]);
        // gemma3: with its HF layer types (a global layer beside the sliding ones).
        const std::string path = arch == "gemma3"
                                     ? gemma3_with_config_pattern(dir_.file("gemma3-pattern.gguf"))
                                     : fixture_path(rel);
        models_.gpu = load_fixture_model(path, true);
        models_.cpu = load_fixture_model(path, false);
    }

    std::unique_ptr<InferenceState> fresh(const Model& m) const {
        return make_state(m.config(), static_cast<int64_t>(prompt_.size()) + kSteps + 8,
                          KvType::F16);
    }

    // The prompt evaluated on `m`, its rows serialized as the state store saves them.
    std::vector<uint8_t> prompt_rows(const Model& m, InferenceState& state,
                                     std::vector<float>& last) {
        const auto logits = forward(m, state, pool_, prompt_, LogitsWanted::Last);
        last.assign(logits.begin(), logits.end());
        return serialize_kv_rows(state.kv, 0, state.kv.length());
    }

    // A fresh state on `m` holding `rows`, continued greedily from `last`.
    GreedyRun resumed(const Model& m, const std::vector<uint8_t>& rows,
                      const std::vector<float>& last) {
        auto state = fresh(m);
        const auto n = static_cast<int64_t>(prompt_.size());
        state->kv.reserve(n);
        apply_kv_rows(rows, state->kv, 0, n);
        state->kv.set_length(n);
        return greedy_from(m, *state, pool_, last, kSteps);
    }

    TempDir dir_{"ember-gpu-state"};
    ThreadPool pool_{2};
    std::vector<int32_t> prompt_;
    Models models_;
};

TEST_P(GpuState, GpuRowsResumeOnGpuAndCpu) {
    auto cold_state = fresh(*models_.gpu);
    std::vector<float> last;
    const auto rows = prompt_rows(*models_.gpu, *cold_state, last);
    const GreedyRun cold = greedy_from(*models_.gpu, *cold_state, pool_, last, kSteps);

    // The same rows on the GPU: the same logits, bit for bit.
    const GreedyRun gpu_warm = resumed(*models_.gpu, rows, last);
    expect_same_bits(gpu_warm, cold);
    // On the CPU: the CPU's arithmetic, the same choices wherever they are clear.
    const GreedyRun cpu_warm = resumed(*models_.cpu, rows, last);
    expect_same_where_clear(cold, cpu_warm, 1e-2, GetParam() + " GPU rows on the CPU");
}

TEST_P(GpuState, CpuRowsResumeOnGpu) {
    auto cpu_state = fresh(*models_.cpu);
    std::vector<float> last;
    const auto rows = prompt_rows(*models_.cpu, *cpu_state, last);
    const GreedyRun cpu_cold = greedy_from(*models_.cpu, *cpu_state, pool_, last, kSteps);
    const GreedyRun gpu_warm = resumed(*models_.gpu, rows, last);
    expect_same_where_clear(cpu_cold, gpu_warm, 1e-2, GetParam() + " CPU rows on the GPU");
}

// A reply rolled back (the cache cut to half the prompt) and another prompt's rows restored
// after the cut: the GPU's copy must take the restored rows, not keep its own. From pageable
// memory the restore writes the host rows; from page-locked memory (a restoring thread's
// inflated blob) the rows go to the device alone, and the host's stale ones must not come back.
class GpuStateCutBack : public GpuState {
protected:
    void cut_back_and_restore(bool page_locked) {
        const auto n = static_cast<int64_t>(prompt_.size());
        // Prompt B: A's first half, then A's second half reversed.
        std::vector<int32_t> other = prompt_;
        std::reverse(other.begin() + n / 2, other.end());
        auto b_state = fresh(*models_.gpu);
        const auto b_logits = forward(*models_.gpu, *b_state, pool_, other, LogitsWanted::Last);
        const std::vector<float> b_last(b_logits.begin(), b_logits.end());
        PinnedBytes b_rows(serialize_kv_rows(b_state->kv, 0, n));
        if (page_locked) {
            ASSERT_TRUE(b_rows.pin()) << "could not page-lock the blob";
        }
        const GreedyRun b_cold = greedy_from(*models_.gpu, *b_state, pool_, b_last, kSteps);

        auto state = fresh(*models_.gpu);
        std::vector<float> last;
        prompt_rows(*models_.gpu, *state, last);
        // A's reply, on the GPU only; the host's rows of A's prompt brought up to date.
        greedy_from(*models_.gpu, *state, pool_, last, kSteps);
        const std::vector<uint8_t> a_head = serialize_kv_rows(state->kv, 0, n / 2);
        state->kv.set_length(n / 2);
        ASSERT_TRUE(state->kv.can_resume_at(n / 2));
        apply_kv_rows(b_rows.bytes(), state->kv, n / 2, n);
        state->kv.set_length(n);
        const GreedyRun b_warm = greedy_from(*models_.gpu, *state, pool_, b_last, kSteps);
        expect_same_bits(b_warm, b_cold);
        // The host's rows as the state holds them: A's head, B's restored tail, the reply's.
        EXPECT_EQ(serialize_kv_rows(state->kv, 0, n / 2), a_head);
        EXPECT_EQ(serialize_kv_rows(state->kv, 0, state->kv.length()),
                  serialize_kv_rows(b_state->kv, 0, b_state->kv.length()));
    }
};

TEST_P(GpuStateCutBack, RestoredOnTheHost) {
    cut_back_and_restore(false);
}

TEST_P(GpuStateCutBack, RestoredOntoTheDeviceAlone) {
    cut_back_and_restore(true);
}

// A new conversation's state attached to the GPU before its restore (as Conversation does),
// restored in two blocks from page-locked rows, the later block first (restoring threads finish
// in any order): without rings the rows go to the device alone, leaving the host's untouched;
// the continuation is the cold one bit for bit, and serializing any range, before and after the
// continuation, gives the rows the cold state holds.
TEST_P(GpuState, RestoredOntoTheDeviceAloneInAnyOrder) {
    const auto n = static_cast<int64_t>(prompt_.size());
    auto cold_state = fresh(*models_.gpu);
    std::vector<float> last;
    PinnedBytes rows(prompt_rows(*models_.gpu, *cold_state, last));
    ASSERT_TRUE(rows.pin()) << "could not page-lock the blob";
    const GreedyRun cold = greedy_from(*models_.gpu, *cold_state, pool_, last, kSteps);

    auto state = fresh(*models_.gpu);
    models_.gpu->device()->attach(*state);
    const bool rings = state->kv.ring_positions() > 0;
    EXPECT_EQ(state->kv.restores_to_device(), !rings);
    state->kv.reserve(n, KvCache::Pages::SmallPages);
    if (rings) {  // a ring's later rows must be written last
        apply_kv_rows(rows.bytes(), state->kv, 0, n / 2);
        apply_kv_rows(rows.bytes(), state->kv, n / 2, n);
    } else {
        apply_kv_rows(rows.bytes(), state->kv, n / 2, n);
        apply_kv_rows(rows.bytes(), state->kv, 0, n / 2);
        const KvCache& host = state->kv;  // const: reading asks the mirror nothing
        const std::vector<uint8_t> zeros(static_cast<size_t>(host.k_row_bytes()), 0);
        EXPECT_EQ(0, std::memcmp(host.k_data(0, n - 1), zeros.data(), zeros.size()))
            << "the restore wrote host rows";
    }
    state->kv.set_length(n);
    EXPECT_EQ(serialize_kv_rows(state->kv, n / 4, n / 2 + 3),
              serialize_kv_rows(cold_state->kv, n / 4, n / 2 + 3));
    const GreedyRun warm = greedy_from(*models_.gpu, *state, pool_, last, kSteps);
    expect_same_bits(warm, cold);
    EXPECT_EQ(serialize_kv_rows(state->kv, 0, state->kv.length()),
              serialize_kv_rows(cold_state->kv, 0, cold_state->kv.length()));
}

INSTANTIATE_TEST_SUITE_P(DenseFamilies, GpuState, ::testing::Values("qwen3", "gemma3"));
INSTANTIATE_TEST_SUITE_P(DenseFamilies, GpuStateCutBack, ::testing::Values("qwen3", "gemma3"));

}  // namespace
}  // namespace ember::test
