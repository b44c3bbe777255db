// The mixture-of-experts families on the GPU (engine/model/cuda/moe_kernels.cuh): qwen3moe and
// gpt-oss against their HF float64 references (every KV type within its tolerance, f32 within
// 2e-3), batches of up to 17 tokens bit for bit the one-by-one logits, run-to-run identical,
// whole / one-by-one / uneven feeds agreeing, greedy tokens where the reference is clear; the
// quantized expert formats (MXFP4 as gpt-oss ships, Q4_K / Q6_K as qwen3moe's Q4_K_M) read in
// place on the GPU and agreeing with the CPU's exact-activation path on small synthetic models;
// and the qfix-MXFP4 fixture against its exact reference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "engine/synth/synth.h"
#include "tests/gpu/gpu_support.h"
#include "tests/support/fixtures.h"
#include "tests/support/reference_logits.h"
#include "tests/support/temp_dir.h"

namespace ember::test {
namespace {

using json = nlohmann::json;

// Largest |a - b| over two logit arrays of one size.
double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
    double worst = 0;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
        worst = std::max(worst, static_cast<double>(std::fabs(a[i] - b[i])));
    }
    return worst;
}

class GpuMoe : public ::testing::TestWithParam<std::string> {
protected:
    void SetUp() override {
        EMBER_REQUIRE_GPU();
        arch_ = GetParam();
        const std::string rel = "arch/" + arch_ + "/" + arch_ + ".gguf";
        EMBER_REQUIRE_FIXTURE(rel);
        ref_ = json::parse(read_file(fixture_path("arch/" + arch_ + "/ref.json")));
        model_ = load_fixture_model(fixture_path(rel), true);
        ASSERT_TRUE(model_->config().n_expert > 0) << arch_;
    }

    std::string arch_;
    json ref_;
    std::unique_ptr<Model> model_;
    ThreadPool pool_{2};
};

TEST_P(GpuMoe, EveryKvTypeWithinToleranceAndShortBatchesExact) {
    // The fixture's own name, so that kv_tolerance finds its q8_0 allowance for flipped expert
    // choices (kv_precision.h).
    check_each_kv_type(*model_, pool_, ref_["seqs"], {"text", "long"}, "text", arch_, 256);
}

TEST_P(GpuMoe, RunToRunIdenticalAndFeedsAgree) {
    check_feeds_agree(*model_, pool_, ids_of(ref_["seqs"]["long"]), KvType::F32, arch_);
}

TEST_P(GpuMoe, GreedyMatchesTheReferenceWhereClear) {
    check_greedy_where_clear(*model_, pool_, ref_["seqs"]["text"], arch_);
}

INSTANTIATE_TEST_SUITE_P(MoeFamilies, GpuMoe, ::testing::Values("qwen3moe", "gptoss"));

// A small synthetic MoE model with quantized experts, written from a published shape cut down.
struct SynthCase {
    std::string name;
    std::string shape;   // synth shape it is cut from
    SynthRecipe recipe;  // MXFP4: gpt-oss's experts; Q4_K_M: Q4_K gate/up, Q6_K or Q4_K down
    std::string vocab;   // fixture whose tokenizer it takes
};

class GpuMoeSynth : public ::testing::TestWithParam<SynthCase> {};

// The GPU reads the experts in their own format (no conversion note) and agrees with the CPU's
// f32-activation path (ActivationChoice::Exact: the same dequantized weights, f32 sums), one
// token at a time and in a prefill batch; batches of <= 17 are the one-by-one bits.
TEST_P(GpuMoeSynth, QuantizedExpertsReadInPlaceAndAgreeWithTheCpu) {
    EMBER_REQUIRE_GPU();
    const SynthCase c = GetParam();
    EMBER_REQUIRE_FIXTURE(c.vocab);
    SynthShape tiny = *find_synth_shape(c.shape);
    // The vocabulary as the fixture holds it (its special tokens' ids must stay inside).
    tiny.n_vocab = Model::load(fixture_path(c.vocab))->config().n_vocab;
    tiny.n_embd = 256;
    tiny.n_layer = 2;
    tiny.n_head = 4;
    tiny.n_head_kv = 2;
    tiny.head_dim = 64;
    tiny.n_ff = 256;
    tiny.n_ff_exp = 256;
    tiny.n_expert = 8;
    tiny.n_expert_used = 2;
    if (tiny.sliding_window > 0) tiny.sliding_window = 8;
    TempDir dir("ember-gpu-moe");
    SynthOptions o;
    o.shape = &tiny;
    o.recipe = c.recipe;
    o.vocab_from = fixture_path(c.vocab);
    o.output = dir.file("moe.gguf");
    ThreadPool pool(2);
    write_synth_model(o, pool);

    LoadOptions cpu_options;
    cpu_options.activations = ActivationChoice::Exact;
    const auto cpu = Model::load(o.output, cpu_options);
    LoadOptions gpu_options;
    gpu_options.weight_panels = false;
    const auto gpu = Model::load(o.output, gpu_options);
    const GpuPlacement placed = place_model(*gpu, {GpuRequest::Mode::Index, 0}, 0);
    ASSERT_TRUE(placed.on_gpu);
    EXPECT_EQ(placed.note.find("converted"), std::string::npos) << placed.note;
    const TensorType expert_type = gpu->layers()[0].gate_exps.type;
    std::printf("[gpu] %s: experts %s, placement note '%s'\n", c.name.c_str(),
                std::string(type_info(expert_type).name).c_str(), placed.note.c_str());

    std::mt19937 rng(7);
    std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(tiny.n_vocab) - 1);
    std::vector<int32_t> ids(48);
    for (int32_t& id : ids) id = token(rng);
    const auto reference = logits_in_batches(*cpu, pool, ids, {256}, KvType::F32);
    const auto whole = logits_in_batches(*gpu, pool, ids, {256}, KvType::F32);
    const auto ones = logits_in_batches(*gpu, pool, ids, {1}, KvType::F32);
    const auto small = logits_in_batches(*gpu, pool, ids, {5, 3, 17, 2}, KvType::F32);
    EXPECT_EQ(0, std::memcmp(small.data(), ones.data(), ones.size() * sizeof(float)))
        << c.name << ": batches of <= 17 differ from one by one";
    const double d_ones = max_abs_diff(ones, reference);
    const double d_whole = max_abs_diff(whole, reference);
    // One by one: f32 products on both sides. Whole: prefill's dense products take f16 inputs
    // on the tensor cores (cuda_backend.cu, gemm_half).
    EXPECT_LE(d_ones, 1e-3) << c.name << ": one by one against the CPU";
    EXPECT_LE(d_whole, 2e-2) << c.name << ": one batch against the CPU";
    std::printf("[gpu] %s against the CPU (exact activations): one by one %.2e, batch %.2e\n",
                c.name.c_str(), d_ones, d_whole);
}

INSTANTIATE_TEST_SUITE_P(Types, GpuMoeSynth,
                         ::testing::Values(SynthCase{"gptoss_MXFP4", "gpt-oss-20b",
                                                     SynthRecipe::MXFP4, "arch/gptoss/gptoss.gguf"},
                                           SynthCase{"qwen3moe_Q4_K_M", "qwen3-30b-a3b",
                                                     SynthRecipe::Q4_K_M,
                                                     "arch/qwen3moe/qwen3moe.gguf"}),
                         [](const auto& param_info) { return param_info.param.name; });

// The qfix-MXFP4 fixture (a dense model whose every matrix but the embedding and output is
// MXFP4) against its exact float64 reference: the GPU's gemv and dequantization read MXFP4.
TEST(GpuMoeMxfp4, QfixWithinTolerance) {
    EMBER_REQUIRE_GPU();
    const std::string rel = "quant/qfix-MXFP4.gguf";
    EMBER_REQUIRE_FIXTURE(rel);
    const json ref = json::parse(read_file(fixture_path(rel + ".ref.json")));
    LoadOptions options;
    options.weight_panels = false;
    auto model = Model::load(fixture_path(rel), options);
    const GpuPlacement placed = place_model(*model, {GpuRequest::Mode::Index, 0}, 0);
    ASSERT_TRUE(placed.on_gpu);
    EXPECT_EQ(placed.note.find("MXFP4"), std::string::npos) << placed.note;
    ThreadPool pool(2);
    double worst = 0;
    for (const char* name : {"short", "long"}) {
        const json& seq = ref["seqs"][name];
        const std::vector<int32_t> ids = ids_of(seq);
        for (const int64_t batch : {int64_t{256}, int64_t{1}}) {
            const auto all = logits_in_batches(*model, pool, ids, {batch}, KvType::F32);
            const double dev = sequence_deviation(all, model->config().n_vocab, seq);
            EXPECT_LE(dev, 1e-2) << "MXFP4/" << name << " batch " << batch;
            worst = std::max(worst, dev);
        }
    }
    std::printf("[gpu] MXFP4: max |dlogit| %.2e (tolerance 1e-02)\n", worst);
}

}  // namespace
}  // namespace ember::test
