// The families on the GPU (the dense ones and the hybrids) against the fixtures' independent
// references: HF float64 for the architecture fixtures (every KV type within its tolerance,
// kv_precision.h), the exact float64 forward pass for the quantized fixtures; bit-identical logits
// run to run; batches of up to 17 tokens bit for bit the one-by-one logits; whole, one-by-one and
// uneven feeds the same greedy choices.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "tests/gpu/gpu_support.h"
#include "tests/support/fixtures.h"
#include "tests/support/gemma3_fixture.h"
#include "tests/support/reference_logits.h"
#include "tests/support/temp_dir.h"

namespace ember::test {
namespace {

using json = nlohmann::json;

// The fixture of `arch` as its reference was made (gemma3: with its HF layer types).
std::string arch_model_path(const std::string& arch, TempDir& dir) {
    if (arch == "gemma3") return gemma3_with_config_pattern(dir.file("gemma3-pattern.gguf"));
    return fixture_path("arch/" + arch + "/" + arch + ".gguf");
}

// An architecture fixture on GPU 0, with its HF float64 reference.
class GpuArch : public ::testing::TestWithParam<std::string> {
protected:
    void SetUp() override {
        EMBER_REQUIRE_GPU();
        arch_ = GetParam();
        EMBER_REQUIRE_FIXTURE("arch/" + arch_ + "/" + arch_ + ".gguf");
        ref_ = json::parse(read_file(fixture_path("arch/" + arch_ + "/ref.json")));
        model_ = load_fixture_model(arch_model_path(arch_, dir_), true);
    }

    std::string arch_;
    json ref_;
    TempDir dir_{"ember-gpu"};
    std::unique_ptr<Model> model_;
    ThreadPool pool_{2};
};

TEST_P(GpuArch, EveryKvTypeWithinToleranceAndShortBatchesExact) {
    // Prefill in batches of 256 (cuBLAS), the exactness check in batches of <= 17 (gemv).
    check_each_kv_type(*model_, pool_, ref_["seqs"], {"text", "long"}, "text", arch_ + " (GPU)",
                       256);
}

TEST_P(GpuArch, RunToRunIdenticalAndFeedsAgree) {
    check_feeds_agree(*model_, pool_, ids_of(ref_["seqs"]["long"]), KvType::F16, arch_);
}

TEST_P(GpuArch, GreedyMatchesTheReferenceWhereClear) {
    check_greedy_where_clear(*model_, pool_, ref_["seqs"]["text"], arch_);
}

INSTANTIATE_TEST_SUITE_P(DenseFamilies, GpuArch,
                         ::testing::Values("llama", "qwen2", "qwen3", "gemma3"));
// The hybrids' mixers run on the device too (mixer_kernels.cuh), their state mirrored there.
INSTANTIATE_TEST_SUITE_P(HybridFamilies, GpuArch, ::testing::Values("qwen35", "lfm2"));

struct QuantCase {
    std::string type;
    double tolerance;
};

class GpuQuant : public ::testing::TestWithParam<QuantCase> {};

// The exact float64 reference on the dequantized weights: the GPU reads the weights exactly
// and keeps f32 activations (no 8-bit activation blocks as the CPU's quantized path), so the
// quantized types are held far closer than the CPU's 0.10; prefill's TF32 products (cuBLAS, for
// batches over 17 tokens of quantized weights) are the largest term.
TEST_P(GpuQuant, LogitsWithinTolerance) {
    EMBER_REQUIRE_GPU();
    const QuantCase c = GetParam();
    const std::string rel = "quant/qfix-" + c.type + ".gguf";
    EMBER_REQUIRE_FIXTURE(rel);
    const json ref = json::parse(read_file(fixture_path(rel + ".ref.json")));
    auto model = load_fixture_model(fixture_path(rel), true);
    ThreadPool pool(2);
    double worst = 0;
    for (const char* name : {"short", "long"}) {
        const json& seq = ref["seqs"][name];
        const std::vector<int32_t> ids = ids_of(seq);
        for (const int64_t batch : {int64_t{256}, int64_t{1}}) {
            const auto all = logits_in_batches(*model, pool, ids, {batch}, KvType::F32);
            const double dev = sequence_deviation(all, model->config().n_vocab, seq);
            EXPECT_LE(dev, c.tolerance) << c.type << "/" << name << " batch " << batch;
            worst = std::max(worst, dev);
        }
    }
    std::printf("[gpu] %s: max |dlogit| %.2e (tolerance %.0e)\n", c.type.c_str(), worst,
                c.tolerance);
}

INSTANTIATE_TEST_SUITE_P(
    Types, GpuQuant,
    ::testing::Values(QuantCase{"F32", 2e-3}, QuantCase{"F16", 2e-3}, QuantCase{"BF16", 2e-3},
                      QuantCase{"Q8_0", 1e-2}, QuantCase{"Q4_0", 1e-2}, QuantCase{"Q6_K", 1e-2},
                      QuantCase{"Q4_K_M", 1e-2}, QuantCase{"Q5_K_M", 1e-2},
                      // Converted to f32 at load (no kernel reads them on the GPU).
                      QuantCase{"Q4_1", 2e-3}, QuantCase{"Q5_0", 2e-3}, QuantCase{"Q3_K_M", 1e-2},
                      QuantCase{"IQ4_NL", 2e-3}),
    [](const auto& param_info) { return param_info.param.type; });

}  // namespace
}  // namespace ember::test
