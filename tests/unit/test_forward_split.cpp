// forward()'s split of a model between a device and the CPU (engine/model/gpu_plan.h), on a
// machine without a GPU: a stand-in device that runs its layers with the CPU's own backend, so a
// split model must give the CPU's logits and KV rows bit for bit, whatever the batches, and leave
// no host-write marks behind (the device mirror would take them for a restore).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/model/compute_device.h"
#include "engine/model/cpu/cpu_backend.h"
#include "engine/model/forward.h"
#include "engine/model/model.h"
#include "engine/model/state.h"
#include "engine/model/state_io.h"
#include "engine/util/thread_pool.h"
#include "tests/support/fixtures.h"
#include "tests/support/reference_logits.h"

namespace ember::test {
namespace {

using json = nlohmann::json;

// Runs layers [0, layers) through a CpuBackend of its own, as a GPU would run them.
class CpuStandInDevice final : public ComputeDevice {
public:
    CpuStandInDevice(const Model& model, ThreadPool& pool, int64_t layers)
        : model_(model), pool_(pool), layers_(layers) {}
    std::string description() const override { return "stand-in"; }
    std::unique_ptr<Backend> make_backend(InferenceState& state) override {
        return std::make_unique<CpuBackend>(model_, state, pool_);
    }
    void attach(InferenceState&) override {}
    double assumed_prefill_tokens_per_second() const override { return 0; }
    uint64_t weight_bytes() const override { return 0; }
    int64_t layers() const override { return layers_; }
    uint64_t memory_in_use() const override { return 0; }
    std::vector<double> measure_bandwidth_gbs(uint64_t, int) override { return {}; }

private:
    const Model& model_;
    ThreadPool& pool_;
    int64_t layers_;
};

class ForwardSplit : public ::testing::TestWithParam<std::string> {
protected:
    void SetUp() override {
        const std::string arch = GetParam();
        const std::string rel = "arch/" + arch + "/" + arch + ".gguf";
        EMBER_REQUIRE_FIXTURE(rel);
        ref_ = json::parse(read_file(fixture_path("arch/" + arch + "/ref.json")));
        plain_ = Model::load(fixture_path(rel));
        split_ = Model::load(fixture_path(rel));
    }

    json ref_;
    ThreadPool pool_{2};
    std::unique_ptr<Model> plain_, split_;
};

TEST_P(ForwardSplit, SameLogitsAndRowsAsTheCpu) {
    std::vector<int32_t> ids = ids_of(ref_["seqs"]["long"]);
    ids.resize(std::min<size_t>(ids.size(), 80));  // enough for every feed, and quick
    const auto n = static_cast<int64_t>(ids.size());
    const int64_t n_layer = plain_->config().n_layer;
    const size_t floats = ids.size() * static_cast<size_t>(plain_->config().n_vocab);
    for (int64_t layers = 1; layers < n_layer; ++layers) {
        split_->attach_device(std::make_shared<CpuStandInDevice>(*split_, pool_, layers));
        for (const std::vector<int64_t>& batches :
             {std::vector<int64_t>{256}, std::vector<int64_t>{1}, std::vector<int64_t>{7, 50, 3}}) {
            const auto want = logits_in_batches(*plain_, pool_, ids, batches, KvType::F16);
            const auto got = logits_in_batches(*split_, pool_, ids, batches, KvType::F16);
            ASSERT_EQ(want.size(), floats);
            EXPECT_EQ(0, std::memcmp(want.data(), got.data(), floats * sizeof(float)))
                << GetParam() << " " << layers << " layers first, batches of " << batches[0];
        }
        auto a = make_state(plain_->config(), n + 8, KvType::F16);
        auto b = make_state(split_->config(), n + 8, KvType::F16);
        forward(*plain_, *a, pool_, ids, LogitsWanted::Last);
        forward(*split_, *b, pool_, ids, LogitsWanted::Last);
        EXPECT_EQ(serialize_kv_rows(a->kv, 0, n), serialize_kv_rows(b->kv, 0, n));
        // The CPU layers' stores were not left as marks of a restore.
        EXPECT_EQ(b->kv.take_host_writes(), KvCache::kNoHostWrites);
    }
}

INSTANTIATE_TEST_SUITE_P(Dense, ForwardSplit,
                         ::testing::Values("llama", "qwen3", "gemma3", "qwen3moe"));

}  // namespace
}  // namespace ember::test
