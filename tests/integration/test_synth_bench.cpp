// `ember synth` and `ember bench` through the real binary: the synthetic files must have the
// layout of a real SmolLM2-135M conversion (names, shapes, the reference converter's type mix,
// metadata, the fixture's tokenizer), hold exactly the quantized noise they claim, load, and
// benchmark with one JSON object carrying every required key.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "engine/gguf/gguf.h"
#include "engine/model/forward.h"
#include "engine/model/model.h"
#include "engine/model/state.h"
#include "engine/synth/synth.h"
#include "engine/tensor/traits.h"
#include "engine/util/thread_pool.h"
#include "tests/support/fixtures.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"

namespace ember::test {
namespace {

using json = nlohmann::json;

constexpr const char* kLlamaFixture = "arch/llama/llama.gguf";
constexpr const char* kQwen3Fixture = "arch/qwen3/qwen3.gguf";
constexpr uint64_t kSeed = 7;

// One temporary directory for the whole suite; each synthesized file is made once and shared
// by the tests that read it (synth is the expensive part).
class SynthBench : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        std::string tmpl = (std::filesystem::temp_directory_path() / "ember_synth_XXXXXX").string();
        ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
        dir_ = new std::string(tmpl);
        files_ = new std::map<std::string, std::string>();
    }
    static void TearDownTestSuite() {
        std::error_code ec;
        std::filesystem::remove_all(*dir_, ec);
        delete dir_;
        delete files_;
    }

    // Path of a smollm2-135m file of `type`, synthesized on first use ("" on failure).
    static std::string synth(const std::string& type) {
        auto it = files_->find(type);
        if (it != files_->end()) return it->second;
        const std::string out = *dir_ + "/smollm2-" + type + ".gguf";
        const auto r = run_command({ember_binary(), "synth", "--shape", "smollm2-135m", "--type",
                                    type, "--vocab-from", fixture_path(kLlamaFixture), "-o", out,
                                    "--seed", std::to_string(kSeed)});
        EXPECT_EQ(r.status, 0) << r.err;
        const std::string path = r.status == 0 ? out : "";
        (*files_)[type] = path;
        return path;
    }

    static std::string* dir_;
    static std::map<std::string, std::string>* files_;
};

std::string* SynthBench::dir_ = nullptr;
std::map<std::string, std::string>* SynthBench::files_ = nullptr;

// The reference converter's "more bits" layers of a 30-layer model (first and last eighth,
// every third between): written out, not computed, so the test does not share the rule's code.
const std::set<int> kMoreBitsLayers = {0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 26, 27, 28, 29};

// Expected type of every matrix of smollm2-135m. Its 576-wide rows cannot hold 256-element
// super-blocks, so the reference falls back: Q6_K to Q8_0 and Q4_K to Q5_0.
TensorType expected_type(const std::string& type, const std::string& name) {
    if (type == "q8_0") return TensorType::Q8_0;
    if (name == "token_embd.weight") return TensorType::Q8_0;  // output (tied): Q6_K -> Q8_0
    if (type == "q4_0") return TensorType::Q4_0;
    const int layer = std::stoi(name.substr(4));  // "blk.N."
    const bool more = kMoreBitsLayers.count(layer) != 0;
    if (name.ends_with("ffn_down.weight")) return more ? TensorType::Q6_K : TensorType::Q4_K;
    if (name.ends_with("attn_v.weight")) return more ? TensorType::Q8_0 : TensorType::Q5_0;
    return TensorType::Q5_0;
}

struct Expected {
    std::string name;
    std::vector<int64_t> dims;
};

std::vector<Expected> expected_tensors() {
    std::vector<Expected> e = {{"token_embd.weight", {576, 49152}}};
    for (int i = 0; i < 30; ++i) {
        const std::string b = "blk." + std::to_string(i) + ".";
        e.push_back({b + "attn_norm.weight", {576}});
        e.push_back({b + "attn_q.weight", {576, 576}});
        e.push_back({b + "attn_k.weight", {576, 192}});
        e.push_back({b + "attn_v.weight", {576, 192}});
        e.push_back({b + "attn_output.weight", {576, 576}});
        e.push_back({b + "ffn_norm.weight", {576}});
        e.push_back({b + "ffn_gate.weight", {576, 1536}});
        e.push_back({b + "ffn_up.weight", {576, 1536}});
        e.push_back({b + "ffn_down.weight", {1536, 576}});
    }
    e.push_back({"output_norm.weight", {576}});
    return e;
}

// Row `row` of a file tensor must be exactly the quantization of the regenerated noise, and
// dequantize to values near it with the scale the noise was drawn at.
void check_row(const GgufFile& f, const SynthTensor& plan, int64_t row, double max_rel_rms) {
    const GgufTensorInfo* t = f.find_tensor(plan.name);
    ASSERT_NE(t, nullptr) << plan.name;
    const int64_t n = plan.row_len();
    const uint64_t rb = row_bytes(type_info(t->type), static_cast<uint64_t>(n));
    const uint8_t* stored = t->data + static_cast<uint64_t>(row) * rb;

    std::vector<float> x(static_cast<size_t>(n));
    synth_row(kSeed, plan, row, x.data());
    std::vector<uint8_t> requant(rb);
    const TypeKernels& k = type_kernels(t->type);
    ASSERT_NE(k.quantize_row, nullptr);
    k.quantize_row(x.data(), requant.data(), n);
    EXPECT_EQ(std::memcmp(requant.data(), stored, rb), 0)
        << plan.name << " row " << row << " is not the quantization of its regenerated values";

    std::vector<float> y(static_cast<size_t>(n));
    k.dequantize_row(stored, y.data(), n);
    double err2 = 0, sum = 0, sum2 = 0;
    for (int64_t i = 0; i < n; ++i) {
        ASSERT_TRUE(std::isfinite(y[static_cast<size_t>(i)]));
        const double d = y[static_cast<size_t>(i)] - x[static_cast<size_t>(i)];
        err2 += d * d;
        sum += y[static_cast<size_t>(i)];
        sum2 += static_cast<double>(y[static_cast<size_t>(i)]) * y[static_cast<size_t>(i)];
    }
    const double mean = sum / static_cast<double>(n);
    const double sd = std::sqrt(sum2 / static_cast<double>(n) - mean * mean);
    EXPECT_NEAR(mean, plan.mean, 4 * plan.stddev / std::sqrt(static_cast<double>(n)))
        << plan.name << " row " << row;
    EXPECT_NEAR(sd, plan.stddev, 0.15 * plan.stddev) << plan.name << " row " << row;
    EXPECT_LT(std::sqrt(err2 / static_cast<double>(n)), max_rel_rms * plan.stddev)
        << plan.name << " row " << row;
}

// The recipes reproduce the reference converter's files: tensor data sizes of the models in
// /work/shared/bench/REFERENCE.md (MiB, as the reference benchmark reports them), to 1%.
TEST(SynthPlan, MatchesReferenceModelSizes) {
    struct Case {
        const char* shape;
        const char* type;
        double mib;
        size_t tensors;
    };
    const Case cases[] = {{"smollm2-135m", "q8_0", 136, 272},
                          {"smollm2-135m", "q4_0", 86, 272},
                          {"smollm2-135m", "q4_k_m", 99, 272},
                          {"qwen3-0.6b", "q8_0", 604, 310},
                          {"qwen3-0.6b", "q4_k_m", 373, 310},
                          // REFERENCE.md's file sizes less the Qwen3 tokenizer's ~6 MiB.
                          {"qwen3-1.7b", "q8_0", 1744, 310},
                          {"qwen3-1.7b", "q4_k_m", 1051, 310},
                          // The reference benchmark's 4.58 GiB for Llama 3.1 8B Q4_K_M (less
                          // rope_freqs.weight, which synth leaves out).
                          {"llama-3.1-8b", "q4_k_m", 4690, 291},
                          // Qwen3-30B-A3B Q4_K_M as the reference engine loads it: 579 tensors,
                          // 17.2-17.3 GiB of weights (30.53 B parameters).
                          {"qwen3-30b-a3b", "q4_k_m", 17.28 * 1024, 579},
                          // Gemma 3 as the reference benchmark reports them: 4B Q4_K_M 2.31 GiB
                          // (3.88 B parameters), 1B Q4_K_M 762.49 MiB (999.89 M), tied outputs.
                          {"gemma3-4b", "q4_k_m", 2.31 * 1024, 444},
                          {"gemma3-1b", "q4_k_m", 762.49, 340},
                          // gpt-oss-20b with MXFP4 experts: 459 tensors, ~12.1 GB as the
                          // published MXFP4 file (its other matrices Q8_0 here).
                          {"gpt-oss-20b", "mxfp4", 12.1e9 / 1048576.0, 459}};
    for (const auto& c : cases) {
        const auto plan =
            plan_synth_tensors(*find_synth_shape(c.shape), find_synth_recipe(c.type)->recipe);
        EXPECT_EQ(plan.size(), c.tensors) << c.shape << " " << c.type;
        double bytes = 0;
        for (const auto& t : plan) {
            bytes += static_cast<double>(t.rows()) *
                     static_cast<double>(row_bytes(type_info(t.type), t.row_len()));
        }
        EXPECT_NEAR(bytes / 1048576.0, c.mib, 0.01 * c.mib) << c.shape << " " << c.type;
    }
    // Qwen3-30B-A3B: stacked experts [cols, rows, 128] typed like the dense FFN they replace
    // (ffn_down_exps Q6_K in the "more bits" layers), F32 routers, untied Q6_K output.
    const auto moe = plan_synth_tensors(*find_synth_shape("qwen3-30b-a3b"), SynthRecipe::Q4_K_M);
    std::map<std::string, const SynthTensor*> by_name;
    for (const auto& t : moe) by_name[t.name] = &t;
    ASSERT_TRUE(by_name.count("blk.0.ffn_gate_exps.weight"));
    EXPECT_EQ(by_name["blk.0.ffn_gate_exps.weight"]->dims, (std::vector<int64_t>{2048, 768, 128}));
    EXPECT_EQ(by_name["blk.0.ffn_gate_exps.weight"]->type, TensorType::Q4_K);
    EXPECT_EQ(by_name["blk.0.ffn_down_exps.weight"]->dims, (std::vector<int64_t>{768, 2048, 128}));
    EXPECT_EQ(by_name["blk.0.ffn_down_exps.weight"]->type, TensorType::Q6_K);
    EXPECT_EQ(by_name["blk.7.ffn_down_exps.weight"]->type, TensorType::Q4_K);
    EXPECT_EQ(by_name["blk.8.ffn_down_exps.weight"]->type, TensorType::Q6_K);
    EXPECT_EQ(by_name["blk.47.ffn_gate_inp.weight"]->type, TensorType::F32);
    EXPECT_EQ(by_name["blk.47.ffn_gate_inp.weight"]->dims, (std::vector<int64_t>{2048, 128}));
    EXPECT_EQ(by_name["output.weight"]->type, TensorType::Q6_K);
    // Gemma 3 1B's 1152-wide rows hold no K-quant super-block: the reference falls back to
    // Q5_0 (for Q4_K) and Q8_0 (for Q6_K, the tied output); the 6912-wide ffn_down keeps K-quants.
    const auto g1 = plan_synth_tensors(*find_synth_shape("gemma3-1b"), SynthRecipe::Q4_K_M);
    std::map<std::string, const SynthTensor*> g1_by_name;
    for (const auto& t : g1) g1_by_name[t.name] = &t;
    EXPECT_EQ(g1_by_name["token_embd.weight"]->type, TensorType::Q8_0);
    EXPECT_EQ(g1_by_name["blk.5.attn_q.weight"]->type, TensorType::Q5_0);
    EXPECT_EQ(g1_by_name["blk.0.attn_v.weight"]->type, TensorType::Q8_0);
    EXPECT_EQ(g1_by_name["blk.5.attn_output.weight"]->type, TensorType::Q4_K);
    EXPECT_EQ(g1_by_name["blk.0.ffn_down.weight"]->type, TensorType::Q6_K);
    EXPECT_EQ(g1_by_name["blk.25.post_ffw_norm.weight"]->dims, (std::vector<int64_t>{1152}));
    EXPECT_EQ(g1_by_name["blk.25.post_attention_norm.weight"]->type, TensorType::F32);
    // Qwen3's 1024-wide rows hold super-blocks: the tied output is Q6_K, as in the reference.
    const auto qwen = plan_synth_tensors(*find_synth_shape("qwen3-0.6b"), SynthRecipe::Q4_K_M);
    EXPECT_EQ(qwen.front().name, "token_embd.weight");
    EXPECT_EQ(qwen.front().type, TensorType::Q6_K);
    // The IQ recipes follow the reference's rules: IQ3_M keeps attention v/output at Q4_K and
    // the rest IQ3_S; MXFP4 keeps the (tied) embedding Q8_0.
    auto type_of = [](const std::vector<SynthTensor>& plan, const std::string& name) {
        for (const auto& t : plan) {
            if (t.name == name) return t.type;
        }
        return TensorType::F64;  // absent
    };
    const auto& qwen3 = *find_synth_shape("qwen3-0.6b");
    const auto iq3m = plan_synth_tensors(qwen3, SynthRecipe::IQ3_M);
    EXPECT_EQ(type_of(iq3m, "token_embd.weight"), TensorType::Q6_K);
    EXPECT_EQ(type_of(iq3m, "blk.5.attn_v.weight"), TensorType::Q4_K);
    EXPECT_EQ(type_of(iq3m, "blk.5.attn_output.weight"), TensorType::Q4_K);
    EXPECT_EQ(type_of(iq3m, "blk.5.ffn_gate.weight"), TensorType::IQ3_S);
    EXPECT_EQ(type_of(iq3m, "blk.0.ffn_down.weight"), TensorType::Q4_K);  // first eighth
    EXPECT_EQ(type_of(iq3m, "blk.5.ffn_down.weight"), TensorType::IQ3_S);
    const auto iq4xs = plan_synth_tensors(qwen3, SynthRecipe::IQ4_XS);
    EXPECT_EQ(type_of(iq4xs, "blk.5.attn_q.weight"), TensorType::IQ4_XS);
    EXPECT_EQ(type_of(iq4xs, "blk.0.ffn_down.weight"), TensorType::Q5_K);
    const auto mxfp4 = plan_synth_tensors(qwen3, SynthRecipe::MXFP4);
    EXPECT_EQ(type_of(mxfp4, "token_embd.weight"), TensorType::Q8_0);
    EXPECT_EQ(type_of(mxfp4, "blk.5.ffn_up.weight"), TensorType::MXFP4);
    // SmolLM2's 576-wide rows cannot hold IQ super-blocks: IQ4_NL, as the reference falls back.
    const auto smol = plan_synth_tensors(*find_synth_shape("smollm2-135m"), SynthRecipe::IQ3_S);
    EXPECT_EQ(type_of(smol, "blk.5.attn_q.weight"), TensorType::IQ4_NL);
}

// gpt-oss-20b: the published config's shapes, MXFP4 experts, Q8_0 attention and untied
// output, F32 router, biases and sinks.
TEST(SynthPlan, GptOss20bHasThePublishedShape) {
    const auto plan = plan_synth_tensors(*find_synth_shape("gpt-oss-20b"), SynthRecipe::MXFP4);
    std::map<std::string, const SynthTensor*> by_name;
    for (const auto& t : plan) by_name[t.name] = &t;
    const auto dims = [&](const std::string& name) {
        return by_name.count(name) ? by_name[name]->dims : std::vector<int64_t>{};
    };
    EXPECT_EQ(dims("token_embd.weight"), (std::vector<int64_t>{2880, 201088}));
    EXPECT_EQ(dims("output.weight"), (std::vector<int64_t>{2880, 201088}));
    EXPECT_EQ(dims("blk.23.attn_q.weight"), (std::vector<int64_t>{2880, 4096}));  // 64 x 64
    EXPECT_EQ(dims("blk.23.attn_k.weight"), (std::vector<int64_t>{2880, 512}));   // 8 x 64
    EXPECT_EQ(dims("blk.23.attn_sinks.weight"), (std::vector<int64_t>{64}));
    EXPECT_EQ(dims("blk.0.ffn_gate_exps.weight"), (std::vector<int64_t>{2880, 2880, 32}));
    EXPECT_EQ(dims("blk.0.ffn_down_exps.bias"), (std::vector<int64_t>{2880, 32}));
    EXPECT_EQ(by_name["blk.0.ffn_up_exps.weight"]->type, TensorType::MXFP4);
    EXPECT_EQ(by_name["blk.0.ffn_down_exps.weight"]->type, TensorType::MXFP4);
    EXPECT_EQ(by_name["blk.0.attn_q.weight"]->type, TensorType::Q8_0);
    EXPECT_EQ(by_name["output.weight"]->type, TensorType::Q8_0);
    EXPECT_EQ(by_name["blk.0.ffn_gate_inp.weight"]->type, TensorType::F32);
    EXPECT_EQ(by_name["blk.0.attn_output.bias"]->type, TensorType::F32);
}

// A tiny gpt-oss written by synth loads and runs: the family's metadata (window, YaRN,
// experts) and tensor names are what the loader reads.
TEST(SynthGptOss, TinyVariantLoadsAndRuns) {
    EMBER_REQUIRE_FIXTURE("arch/gptoss/gptoss.gguf");
    SynthShape tiny = *find_synth_shape("gpt-oss-20b");
    tiny.n_vocab = 200019;  // the fixture's vocabulary as it is
    tiny.n_embd = 64;
    tiny.n_layer = 3;
    tiny.n_head = 4;
    tiny.n_head_kv = 2;
    tiny.head_dim = 32;
    tiny.n_ff = 64;
    tiny.n_ff_exp = 64;
    tiny.n_expert = 4;
    tiny.n_expert_used = 2;
    tiny.sliding_window = 8;
    TempDir dir("ember-synth-gptoss");
    SynthOptions o;
    o.shape = &tiny;
    o.recipe = SynthRecipe::MXFP4;
    o.vocab_from = fixture_path("arch/gptoss/gptoss.gguf");
    o.output = dir.file("tiny.gguf");
    ThreadPool pool(2);
    write_synth_model(o, pool);
    const auto model = Model::load(o.output);
    const ModelConfig& c = model->config();
    EXPECT_EQ(c.family, Family::GptOss);
    EXPECT_FALSE(c.tied_output);
    EXPECT_EQ(c.sliding, (std::vector<bool>{true, false, true}));
    EXPECT_DOUBLE_EQ(c.rope_yarn_factor, 32.0);
    EXPECT_EQ(c.rope_yarn_orig_ctx, 4096);
    EXPECT_EQ(model->layers()[0].gate_exps.type, TensorType::MXFP4);
    auto state = make_state(c, 64);
    const std::vector<int32_t> ids = {976, 4853, 19705, 68347, 65613, 1072, 290, 29082, 6446, 13};
    const auto logits = forward(*model, *state, pool, ids, LogitsWanted::Last);
    ASSERT_EQ(logits.size(), static_cast<size_t>(c.n_vocab));
    for (float l : logits) ASSERT_TRUE(std::isfinite(l));
}

TEST_F(SynthBench, RejectsTokenizerOfAnotherVocabulary) {
    EMBER_REQUIRE_FIXTURE(kLlamaFixture);
    EMBER_REQUIRE_FIXTURE(kQwen3Fixture);
    const std::string out = *dir_ + "/wrong.gguf";
    const auto r = run_command({ember_binary(), "synth", "--shape", "smollm2-135m", "--type",
                                "q8_0", "--vocab-from", fixture_path(kQwen3Fixture), "-o", out});
    EXPECT_NE(r.status, 0);
    EXPECT_NE(r.err.find("151936"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("49152"), std::string::npos) << r.err;
    EXPECT_FALSE(std::filesystem::exists(out));
}

class SynthLayout : public SynthBench, public ::testing::WithParamInterface<std::string> {};

TEST_P(SynthLayout, MatchesRealConversion) {
    EMBER_REQUIRE_FIXTURE(kLlamaFixture);
    const std::string type = GetParam();
    const SynthRecipeInfo* recipe = find_synth_recipe(type);
    ASSERT_NE(recipe, nullptr);
    if (type_kernels(recipe->base).quantize_row == nullptr) {
        GTEST_SKIP() << "no quantizer for " << type_info(recipe->base).name << " yet";
    }
    const std::string path = synth(type);
    ASSERT_FALSE(path.empty());

    const auto info = run_command({ember_binary(), "info", "-m", path});
    ASSERT_EQ(info.status, 0) << info.err;
    EXPECT_NE(info.out.find("layers:        30"), std::string::npos) << info.out;
    EXPECT_NE(info.out.find("tied to token embedding"), std::string::npos) << info.out;

    auto f = GgufFile::open(path);
    const auto expected = expected_tensors();
    ASSERT_EQ(f->tensors().size(), expected.size());
    for (const auto& e : expected) {
        const GgufTensorInfo* t = f->find_tensor(e.name);
        ASSERT_NE(t, nullptr) << e.name;
        EXPECT_EQ(t->dims, e.dims) << e.name;
        const TensorType want = e.dims.size() == 1 ? TensorType::F32 : expected_type(type, e.name);
        EXPECT_EQ(t->type, want) << e.name << " is " << type_info(t->type).name;
    }

    EXPECT_EQ(f->get_string("general.architecture"), "llama");
    EXPECT_EQ(f->get_int("general.file_type"), static_cast<int64_t>(recipe->file_type));
    const std::map<std::string, int64_t> ints = {
        {"llama.context_length", 8192},     {"llama.embedding_length", 576},
        {"llama.block_count", 30},          {"llama.feed_forward_length", 1536},
        {"llama.attention.head_count", 9},  {"llama.attention.head_count_kv", 3},
        {"llama.attention.key_length", 64}, {"llama.attention.value_length", 64},
        {"llama.rope.dimension_count", 64}};
    for (const auto& [key, value] : ints) EXPECT_EQ(f->get_int(key), value) << key;
    EXPECT_NEAR(f->get_float("llama.rope.freq_base").value_or(0), 100000.0, 1e-3);
    EXPECT_NEAR(f->get_float("llama.attention.layer_norm_rms_epsilon").value_or(0), 1e-5, 1e-9);

    // Every tokenizer key of the source, with the same value shape.
    auto src = GgufFile::open(fixture_path(kLlamaFixture));
    for (const auto& key : src->metadata_order()) {
        if (!key.starts_with("tokenizer.")) continue;
        const GgufValue* ours = f->find(key);
        ASSERT_NE(ours, nullptr) << key;
        EXPECT_EQ(ours->type, src->find(key)->type) << key;
    }
    ASSERT_NE(f->get_array("tokenizer.ggml.tokens"), nullptr);
    EXPECT_EQ(f->get_array("tokenizer.ggml.tokens")->strings,
              src->get_array("tokenizer.ggml.tokens")->strings);

    // Stored values: token_embd rows across the table, a layer matrix, a norm.
    const auto plan = plan_synth_tensors(*find_synth_shape("smollm2-135m"), recipe->recipe);
    auto find_plan = [&](const std::string& name) -> const SynthTensor& {
        for (const auto& p : plan) {
            if (p.name == name) return p;
        }
        throw std::runtime_error("not planned: " + name);
    };
    // RMS error bounds relative to the noise scale: generous for 4-bit types, tight for 8.
    const double tol_embd = 0.05;  // token_embd is Q8_0 in every recipe here
    for (int64_t row : {0, 1, 4242, 49151}) {
        check_row(*f, find_plan("token_embd.weight"), row, tol_embd);
    }
    check_row(*f, find_plan("blk.29.ffn_down.weight"), 575, type == "q8_0" ? 0.05 : 0.35);
    check_row(*f, find_plan("blk.3.attn_v.weight"), 100, type == "q8_0" ? 0.05 : 0.35);
    check_row(*f, find_plan("output_norm.weight"), 0, 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Types, SynthLayout, ::testing::Values("q8_0", "q4_0", "q4_k_m"),
                         [](const auto& p) { return p.param; });

TEST_F(SynthBench, BenchPrintsOneJsonObject) {
    EMBER_REQUIRE_FIXTURE(kLlamaFixture);
    const std::string path = synth("q4_0");
    ASSERT_FALSE(path.empty());
    const auto r = run_command({ember_binary(), "bench", "-m", path, "--json", "-p", "32", "-n",
                                "8", "--reps", "1", "-t", "2"});
    ASSERT_EQ(r.status, 0) << r.err;
    const auto lines = split_lines(r.out);
    ASSERT_EQ(lines.size(), 1u) << r.out;
    const json j = json::parse(lines[0]);
    ASSERT_TRUE(j.is_object());
    for (const char* key : {"prefill_tps", "decode_tps", "ttft_ms", "peak_rss_mb", "bandwidth_gbs",
                            "roofline_fraction", "weight_bytes_per_token", "threads", "reps",
                            "file_mb", "kv_mb", "rss_bound_mb"}) {
        ASSERT_TRUE(j.contains(key)) << key;
        ASSERT_TRUE(j[key].is_number()) << key;
        EXPECT_GT(j[key].get<double>(), 0) << key;
    }
    EXPECT_EQ(j["threads"].get<int>(), 2);
    EXPECT_EQ(j["reps"].get<int>(), 1);
    EXPECT_TRUE(j["logits_finite"].get<bool>());
    EXPECT_LE(j["peak_rss_mb"].get<double>(), j["rss_bound_mb"].get<double>());
    EXPECT_TRUE(j["within_rss_bound"].get<bool>());
    // Weights read per token: every matrix once (the tied output included) plus one
    // embedding row; for this file that is nearly all of its tensor data.
    const double file_bytes = static_cast<double>(std::filesystem::file_size(path));
    EXPECT_GT(j["weight_bytes_per_token"].get<double>(), 0.9 * file_bytes);
    EXPECT_LE(j["weight_bytes_per_token"].get<double>(), file_bytes);
    EXPECT_GE(j["ttft_ms"].get<double>() * 1e-3, 32 / j["prefill_tps"].get<double>() * 0.999);
}

}  // namespace
}  // namespace ember::test
