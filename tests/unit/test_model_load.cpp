// Model::load on the fixture models: hyper-parameters against the HF configs the models were
// built from (or the published configs / fixture README for the others), weight views, the
// fingerprint, and errors for files whose tensors or metadata do not fit the family.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "engine/gguf/gguf.h"
#include "engine/model/model.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/support/fixtures.h"
#include "tests/support/temp_dir.h"

namespace ember::test {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

using TempDir = ::ember::test::TempDir;

// Bytes per block and elements per block of the GGUF tensor types, from the format itself
// (ggml's block structs), kept here independently of the engine's table.
struct Block {
    uint64_t elems, bytes;
};
Block block_of(TensorType t) {
    switch (t) {
        case TensorType::F32:
            return {1, 4};
        case TensorType::F16:
            return {1, 2};
        case TensorType::BF16:
            return {1, 2};
        case TensorType::Q4_0:
            return {32, 18};
        case TensorType::Q4_1:
            return {32, 20};
        case TensorType::Q5_0:
            return {32, 22};
        case TensorType::Q5_1:
            return {32, 24};
        case TensorType::Q8_0:
            return {32, 34};
        case TensorType::IQ4_NL:
            return {32, 18};
        case TensorType::IQ4_XS:
            return {256, 136};
        case TensorType::IQ3_S:
            return {256, 110};
        case TensorType::MXFP4:
            return {32, 17};
        case TensorType::Q2_K:
            return {256, 84};
        case TensorType::Q3_K:
            return {256, 110};
        case TensorType::Q4_K:
            return {256, 144};
        case TensorType::Q5_K:
            return {256, 176};
        case TensorType::Q6_K:
            return {256, 210};
        default:
            ADD_FAILURE() << "unexpected type " << static_cast<int>(t);
            return {1, 1};
    }
}
uint64_t bytes_for(TensorType t, uint64_t rows, uint64_t cols) {
    const Block b = block_of(t);
    EXPECT_EQ(cols % b.elems, 0u);
    return rows * (cols / b.elems) * b.bytes;
}

json hf_config(const std::string& arch) {
    std::ifstream in(fixture_path("arch/" + arch + "/hf/config.json"));
    return json::parse(in);
}

bool inside(const void* p, uint64_t n, const GgufFile& f) {
    const auto* b = static_cast<const uint8_t*>(p);
    return b >= f.file_data() && b + n <= f.file_data() + f.file_size();
}

std::string load_error(const std::string& path) {
    try {
        Model::load(path);
    } catch (const std::exception& e) {
        return e.what();
    }
    ADD_FAILURE() << "Model::load(" << path << ") succeeded; expected an error";
    return {};
}

// Checks the matrices of every layer against the shapes implied by the config, that they
// point into the mapping (or, rewritten into 16-row panels at load, into the model's own copy),
// and returns the bytes one decoded token reads (computed here).
uint64_t check_layers(const Model& m, int64_t hidden, int64_t heads, int64_t kv_heads,
                      int64_t head_dim, int64_t ff) {
    const GgufFile& f = m.gguf();
    uint64_t total = 0;
    auto check = [&](const MatrixView& w, int64_t rows, int64_t cols, const std::string& what) {
        SCOPED_TRACE(what);
        EXPECT_EQ(w.rows, rows);
        EXPECT_EQ(w.cols, cols);
        const uint64_t bytes =
            bytes_for(w.type, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols));
        EXPECT_EQ(w.row_stride * static_cast<uint64_t>(rows), bytes);
        if (w.layout == WeightLayout::Rows) {
            EXPECT_TRUE(inside(w.data, bytes, f)) << "weights not in the file mapping";
        } else {
            EXPECT_FALSE(inside(w.data, bytes, f)) << "panels written over the file mapping";
            EXPECT_TRUE(w.type == TensorType::Q4_K || w.type == TensorType::Q6_K)
                << "panels of a type without a panel kernel";
        }
        total += bytes;
    };
    EXPECT_EQ(static_cast<int64_t>(m.layers().size()), m.config().n_layer);
    for (size_t i = 0; i < m.layers().size(); ++i) {
        const LayerWeights& L = m.layers()[i];
        const std::string b = "blk." + std::to_string(i) + ".";
        check(L.wq, heads * head_dim, hidden, b + "wq");
        check(L.wk, kv_heads * head_dim, hidden, b + "wk");
        check(L.wv, kv_heads * head_dim, hidden, b + "wv");
        check(L.wo, hidden, heads * head_dim, b + "wo");
        check(L.w_gate, ff, hidden, b + "w_gate");
        check(L.w_up, ff, hidden, b + "w_up");
        check(L.w_down, hidden, ff, b + "w_down");
        EXPECT_EQ(L.attn_norm.size(), static_cast<size_t>(hidden));
        EXPECT_EQ(L.ffn_norm.size(), static_cast<size_t>(hidden));
    }
    return total;
}

void check_rope(const Model& m, double theta, int64_t rope_dims) {
    ASSERT_EQ(m.rope_inv_freq().size(), static_cast<size_t>(rope_dims / 2));
    for (int64_t i = 0; i < rope_dims / 2; ++i) {
        const double expect = 1.0 / std::pow(theta, static_cast<double>(2 * i) / rope_dims);
        EXPECT_NEAR(m.rope_inv_freq()[static_cast<size_t>(i)], expect, 1e-12 * expect + 1e-300)
            << i;
    }
}

// ---------------------------------------------------------------------------------------------

class ArchFixture : public ::testing::TestWithParam<const char*> {};

TEST_P(ArchFixture, HyperParametersMatchTheHfConfig) {
    const std::string arch = GetParam();
    const std::string rel = "arch/" + arch + "/" + arch + ".gguf";
    EMBER_REQUIRE_FIXTURE(rel);
    EMBER_REQUIRE_FIXTURE("arch/" + arch + "/hf/config.json");
    const json hf = hf_config(arch);
    const auto m = Model::load(fixture_path(rel));
    const ModelConfig& c = m->config();

    const int64_t hidden = hf.at("hidden_size");
    const int64_t heads = hf.at("num_attention_heads");
    const int64_t kv_heads = hf.value("num_key_value_heads", heads);
    const int64_t head_dim = hf.contains("head_dim") && !hf["head_dim"].is_null()
                                 ? hf["head_dim"].get<int64_t>()
                                 : hidden / heads;
    const int64_t ff = hf.at("intermediate_size");
    const int64_t layers = hf.at("num_hidden_layers");
    const int64_t vocab = hf.at("vocab_size");
    const double eps = hf.at("rms_norm_eps");
    const double theta = hf.contains("rope_parameters") ? hf["rope_parameters"].at("rope_theta")
                                                        : hf.at("rope_theta");
    const bool tied = hf.value("tie_word_embeddings", false);

    EXPECT_EQ(c.arch, hf.at("model_type").get<std::string>());
    EXPECT_EQ(family_name(c.family), hf.at("model_type").get<std::string>());
    EXPECT_EQ(c.n_embd, hidden);
    EXPECT_EQ(c.n_layer, layers);
    EXPECT_EQ(c.n_head, heads);
    EXPECT_EQ(c.n_head_kv, kv_heads);
    EXPECT_EQ(c.head_dim, head_dim);
    EXPECT_EQ(c.value_dim, head_dim);
    EXPECT_EQ(c.n_ff, ff);
    EXPECT_EQ(c.n_vocab, vocab);
    EXPECT_EQ(m->tokenizer().vocab_size(), static_cast<size_t>(vocab));
    EXPECT_EQ(c.n_ctx_train, hf.at("max_position_embeddings").get<int64_t>());
    // The file stores eps as f32.
    EXPECT_NEAR(c.rms_eps, eps, eps * 1e-6);
    EXPECT_EQ(c.rope_base, theta);
    EXPECT_EQ(c.rope_dims, head_dim);  // full rotary: no partial_rotary_factor in the configs
    EXPECT_EQ(c.rope_freq_scale, 1.0);
    EXPECT_EQ(c.tied_output, tied);
    // Family traits (HF modelling code): Qwen2 has q/k/v biases, Qwen3 per-head q/k norms,
    // both rotate the two halves of a head; llama as converted rotates adjacent pairs.
    EXPECT_EQ(c.qkv_bias, arch == "qwen2");
    EXPECT_EQ(c.qk_norm, arch == "qwen3");
    EXPECT_EQ(c.rope_layout, arch == "llama" ? RopeLayout::Adjacent : RopeLayout::Halves);
    check_rope(*m, theta, head_dim);

    // Weights: BF16 matrices (fixture README), shapes from the config, all in the mapping.
    const uint64_t layer_bytes = check_layers(*m, hidden, heads, kv_heads, head_dim, ff);
    for (const LayerWeights& L : m->layers()) {
        EXPECT_EQ(L.wq.type, TensorType::BF16);
        EXPECT_EQ(L.w_down.type, TensorType::BF16);
        if (arch == "qwen2") {
            EXPECT_EQ(L.bq.size(), static_cast<size_t>(heads * head_dim));
            EXPECT_EQ(L.bk.size(), static_cast<size_t>(kv_heads * head_dim));
            EXPECT_EQ(L.bv.size(), static_cast<size_t>(kv_heads * head_dim));
        } else {
            EXPECT_TRUE(L.bq.empty());
        }
        if (arch == "qwen3") {
            EXPECT_EQ(L.q_norm.size(), static_cast<size_t>(head_dim));
            EXPECT_EQ(L.k_norm.size(), static_cast<size_t>(head_dim));
        } else {
            EXPECT_TRUE(L.q_norm.empty());
        }
    }
    EXPECT_EQ(m->token_embd().rows, vocab);
    EXPECT_EQ(m->token_embd().cols, hidden);
    EXPECT_EQ(m->output().rows, vocab);
    EXPECT_EQ(m->output().cols, hidden);
    EXPECT_EQ(m->output_norm().size(), static_cast<size_t>(hidden));
    if (tied) {
        EXPECT_EQ(m->output().data, m->token_embd().data);
    }
    EXPECT_TRUE(inside(m->token_embd().data, static_cast<uint64_t>(vocab * hidden * 2), m->gguf()));

    // Every matrix once (the output matrix too, tied or not) plus one embedding row.
    const uint64_t expect =
        layer_bytes + static_cast<uint64_t>(vocab * hidden) * 2 + static_cast<uint64_t>(hidden) * 2;
    EXPECT_EQ(m->weight_bytes_per_token(), expect);
    EXPECT_LE(m->weight_bytes_per_token(), fs::file_size(fixture_path(rel)));
}

INSTANTIATE_TEST_SUITE_P(ModelLoad, ArchFixture, ::testing::Values("llama", "qwen2", "qwen3"));

TEST(ModelLoad, Stories260K) {
    const std::string rel = "models/stories260K.gguf";
    EMBER_REQUIRE_FIXTURE(rel);
    const auto m = Model::load(fixture_path(rel));
    const ModelConfig& c = m->config();
    // llama2.c's stories260K: dim 64, 5 layers, 8 heads, 4 kv heads, SPM vocab 512, FFN
    // 2/3 * 4 * 64 rounded up to a multiple of 4 = 172; everything F32 (fixture README).
    const int64_t dim = 64, layers = 5, heads = 8, kv = 4, vocab = 512, ff = 172;
    EXPECT_EQ(c.arch, "llama");
    EXPECT_EQ(c.family, Family::Llama);
    EXPECT_EQ(c.n_embd, dim);
    EXPECT_EQ(c.n_layer, layers);
    EXPECT_EQ(c.n_head, heads);
    EXPECT_EQ(c.n_head_kv, kv);
    EXPECT_EQ(c.head_dim, dim / heads);
    EXPECT_EQ(c.n_ff, ff);
    EXPECT_EQ(c.n_vocab, vocab);
    EXPECT_EQ(m->tokenizer().vocab_size(), static_cast<size_t>(vocab));
    EXPECT_EQ(m->tokenizer().kind(), TokenizerKind::Spm);
    EXPECT_NEAR(c.rms_eps, 1e-5, 1e-11);
    EXPECT_EQ(c.rope_base, 10000.0);
    EXPECT_EQ(c.rope_dims, dim / heads);
    EXPECT_FALSE(c.tied_output);  // the converted file carries output.weight
    EXPECT_NE(m->output().data, m->token_embd().data);
    check_rope(*m, 10000.0, dim / heads);
    const uint64_t layer_bytes = check_layers(*m, dim, heads, kv, dim / heads, ff);
    EXPECT_EQ(layer_bytes, static_cast<uint64_t>(layers) *
                               (dim * dim * 2 + 2 * dim * (dim / heads) * kv + 3 * dim * ff) * 4);
    for (const auto& t : m->gguf().tensors()) EXPECT_EQ(t.type, TensorType::F32) << t.name;
    // "260K parameters": counted as llama2.c does, with the output tied to the embedding.
    int64_t params = 0;
    for (const auto& t : m->gguf().tensors()) {
        if (t.name != "output.weight") params += t.n_elements();
    }
    EXPECT_EQ(params,
              vocab * dim + dim +
                  layers * (2 * dim * dim + 2 * dim * (dim / heads) * kv + 3 * dim * ff + 2 * dim));
    EXPECT_NEAR(static_cast<double>(params), 260e3, 1e3);
    EXPECT_EQ(m->weight_bytes_per_token(),
              layer_bytes + static_cast<uint64_t>(vocab * dim * 4 + dim * 4));
    EXPECT_LE(m->weight_bytes_per_token(), fs::file_size(fixture_path(rel)));
}

TEST(ModelLoad, QuantFixtureQ4KM) {
    const std::string rel = "quant/qfix-Q4_K_M.gguf";
    EMBER_REQUIRE_FIXTURE(rel);
    const auto m = Model::load(fixture_path(rel));
    const ModelConfig& c = m->config();
    // Fixture README: 256 wide, 2 layers, untied output, 512-token SPM vocab, mixed types.
    EXPECT_EQ(c.family, Family::Llama);
    EXPECT_EQ(c.n_embd, 256);
    EXPECT_EQ(c.n_layer, 2);
    EXPECT_EQ(c.n_vocab, 512);
    EXPECT_FALSE(c.tied_output);
    EXPECT_EQ(m->tokenizer().kind(), TokenizerKind::Spm);
    EXPECT_EQ(m->tokenizer().vocab_size(), 512u);
    EXPECT_EQ(c.n_head * c.head_dim, c.n_embd);
    EXPECT_EQ(c.n_head % c.n_head_kv, 0);
    const uint64_t layer_bytes =
        check_layers(*m, c.n_embd, c.n_head, c.n_head_kv, c.head_dim, c.n_ff);
    std::set<TensorType> matrix_types;
    for (const LayerWeights& L : m->layers()) {
        for (const MatrixView* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) {
            matrix_types.insert(w->type);
        }
    }
    EXPECT_TRUE(matrix_types.count(TensorType::Q4_K)) << "a Q4_K_M file without q4_K matrices";
    EXPECT_GE(matrix_types.size(), 2u) << "Q4_K_M mixes types";
    const MatrixView& out = m->output();
    const MatrixView& emb = m->token_embd();
    const uint64_t expect =
        layer_bytes + bytes_for(out.type, 512, 256) + bytes_for(emb.type, 1, 256);
    EXPECT_EQ(m->weight_bytes_per_token(), expect);
    EXPECT_LE(m->weight_bytes_per_token(), fs::file_size(fixture_path(rel)));
    // Far smaller than the f32 equivalent (Q4_K_M stores about 4.5-6.5 bits per weight).
    uint64_t f32_bytes = (512 * 256 + 256) * 4;
    for (const LayerWeights& L : m->layers()) {
        for (const MatrixView* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) {
            f32_bytes += static_cast<uint64_t>(w->rows * w->cols) * 4;
        }
    }
    EXPECT_LT(m->weight_bytes_per_token(), f32_bytes / 4);
}

TEST(ModelLoad, FingerprintsDifferBetweenFilesAndAreStable) {
    const char* files[] = {"arch/llama/llama.gguf", "arch/qwen2/qwen2.gguf",
                           "arch/qwen3/qwen3.gguf", "quant/qfix-Q4_K_M.gguf",
                           "models/stories260K.gguf"};
    std::map<std::string, std::string> seen;  // fingerprint -> file
    for (const char* rel : files) {
        EMBER_REQUIRE_FIXTURE(rel);
        const std::string a = Model::load(fixture_path(rel))->fingerprint();
        const std::string b = Model::load(fixture_path(rel))->fingerprint();
        EXPECT_EQ(a, b) << rel;
        EXPECT_EQ(a.size(), 32u) << a;
        EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos) << a;
        const auto [it, inserted] = seen.emplace(a, rel);
        EXPECT_TRUE(inserted) << rel << " has the fingerprint of " << it->second;
    }
}

// ---------------------------------------------------------------------------------------------
// Files that do not fit the family, made from a fixture with GgufWriter.

struct Edit {
    std::set<std::string> drop_keys;
    std::set<std::string> drop_tensors;
    std::map<std::string, std::vector<int64_t>> reshape;
    std::map<std::string, GgufValue> set;
    std::map<std::string, std::pair<size_t, uint8_t>> poke;  // tensor -> (byte, xor mask)
};

// Copies every metadata key (copy_from) and tensor of `src` into a new file, applying `e`.
std::string rewrite(const std::string& src, const std::string& dst, const Edit& e) {
    const auto f = GgufFile::open(src);
    GgufWriter w;
    for (const std::string& key : f->metadata_order()) {
        if (!e.drop_keys.count(key)) w.copy_from(*f, key);
    }
    for (const auto& [key, value] : e.set) w.set(key, value);
    for (const GgufTensorInfo& t : f->tensors()) {
        if (e.drop_tensors.count(t.name)) continue;
        std::vector<uint8_t> bytes(t.data, t.data + t.n_bytes);
        if (auto it = e.poke.find(t.name); it != e.poke.end()) {
            bytes.at(it->second.first) ^= it->second.second;
        }
        auto it = e.reshape.find(t.name);
        w.add_tensor(t.name, it == e.reshape.end() ? t.dims : it->second, t.type, std::move(bytes));
    }
    w.write(dst);
    return dst;
}

class ModelLoadErrors : public ::testing::Test {
protected:
    void SetUp() override { EMBER_REQUIRE_FIXTURE(kStories); }
    std::string make(const Edit& e) {
        return rewrite(fixture_path(kStories), tmp_.file("m.gguf"), e);
    }
    static constexpr const char* kStories = "models/stories260K.gguf";
    TempDir tmp_;
};

TEST_F(ModelLoadErrors, UnchangedRewriteLoadsWithTheSameFingerprint) {
    const std::string copy = make({});
    const auto original = Model::load(fixture_path(kStories));
    const auto rewritten = Model::load(copy);
    EXPECT_EQ(rewritten->fingerprint(), original->fingerprint());
    EXPECT_EQ(rewritten->config().n_layer, original->config().n_layer);
    // One changed weight byte in the first 4 KiB (always sampled) changes the fingerprint.
    Edit e;
    e.poke["blk.3.ffn_up.weight"] = {100, 0x01};
    const auto poked = Model::load(make(e));
    EXPECT_NE(poked->fingerprint(), original->fingerprint());
}

TEST_F(ModelLoadErrors, WrongShapeNamesTheTensorAndBothShapes) {
    {
        Edit e;
        e.reshape["blk.0.attn_q.weight"] = {32, 128};  // same size, wrong shape
        const std::string msg = load_error(make(e));
        EXPECT_NE(msg.find("blk.0.attn_q.weight"), std::string::npos) << msg;
        EXPECT_NE(msg.find("[32, 128]"), std::string::npos) << msg;
        EXPECT_NE(msg.find("[64, 64]"), std::string::npos) << msg;  // n_embd x n_head*head_dim
    }
    {
        Edit e;
        e.reshape["blk.4.ffn_down.weight"] = {64, 172};  // transposed
        const std::string msg = load_error(make(e));
        EXPECT_NE(msg.find("blk.4.ffn_down.weight"), std::string::npos) << msg;
        EXPECT_NE(msg.find("[64, 172]"), std::string::npos) << msg;
        EXPECT_NE(msg.find("[172, 64]"), std::string::npos) << msg;
    }
    {
        Edit e;
        e.reshape["blk.2.attn_norm.weight"] = {32, 2};
        const std::string msg = load_error(make(e));
        EXPECT_NE(msg.find("blk.2.attn_norm.weight"), std::string::npos) << msg;
        EXPECT_NE(msg.find("[32, 2]"), std::string::npos) << msg;
        EXPECT_NE(msg.find("[64]"), std::string::npos) << msg;
    }
    {
        Edit e;
        e.reshape["blk.1.attn_k.weight"] = {64, 32, 1, 1};  // trailing ones are harmless
        EXPECT_NO_THROW(Model::load(make(e)));
    }
}

TEST_F(ModelLoadErrors, MissingTensorIsNamed) {
    for (const char* name : {"blk.1.ffn_up.weight", "output_norm.weight", "blk.4.attn_v.weight",
                             "token_embd.weight"}) {
        Edit e;
        e.drop_tensors.insert(name);
        const std::string msg = load_error(make(e));
        EXPECT_NE(msg.find("missing tensor '" + std::string(name) + "'"), std::string::npos) << msg;
    }
}

TEST_F(ModelLoadErrors, UnknownArchitectureIsNamed) {
    Edit e;
    e.set["general.architecture"] = GgufValue{GgufValueType::STRING, std::string("mamba")};
    const std::string msg = load_error(make(e));
    EXPECT_NE(msg.find("'mamba'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("not supported"), std::string::npos) << msg;
}

TEST_F(ModelLoadErrors, MissingRequiredMetadataIsNamed) {
    for (const char* key :
         {"general.architecture", "llama.embedding_length", "llama.block_count",
          "llama.feed_forward_length", "llama.attention.head_count", "tokenizer.ggml.tokens"}) {
        Edit e;
        e.drop_keys.insert(key);
        const std::string msg = load_error(make(e));
        EXPECT_NE(msg.find(key), std::string::npos) << msg;
    }
}

TEST_F(ModelLoadErrors, BadMetadataValuesAreNamed) {
    {
        Edit e;  // 8 heads do not split into 3 kv groups
        e.set["llama.attention.head_count_kv"] = GgufValue{GgufValueType::U32, int64_t{3}};
        const std::string msg = load_error(make(e));
        EXPECT_NE(msg.find("head_count_kv"), std::string::npos) << msg;
    }
    {
        Edit e;
        e.set["llama.block_count"] = GgufValue{GgufValueType::U32, int64_t{0}};
        const std::string msg = load_error(make(e));
        EXPECT_NE(msg.find("llama.block_count"), std::string::npos) << msg;
    }
    {
        Edit e;  // more layers than the file has tensors for
        e.set["llama.block_count"] = GgufValue{GgufValueType::U32, int64_t{6}};
        const std::string msg = load_error(make(e));
        EXPECT_NE(msg.find("blk.5."), std::string::npos) << msg;
    }
    {
        Edit e;
        e.set["llama.embedding_length"] = GgufValue{GgufValueType::STRING, std::string("64")};
        const std::string msg = load_error(make(e));
        EXPECT_NE(msg.find("llama.embedding_length"), std::string::npos) << msg;
    }
    {
        Edit e;  // a context of 0 tokens (callers size the KV cache from it)
        e.set["llama.context_length"] = GgufValue{GgufValueType::U32, int64_t{0}};
        const std::string msg = load_error(make(e));
        EXPECT_NE(msg.find("llama.context_length"), std::string::npos) << msg;
    }
    {
        Edit e;
        e.set["llama.rope.dimension_count"] = GgufValue{GgufValueType::U32, int64_t{7}};
        const std::string msg = load_error(make(e));
        EXPECT_NE(msg.find("rope.dimension_count"), std::string::npos) << msg;
    }
}

TEST(ModelLoadFamily, Qwen3QkNormShapeIsChecked) {
    const std::string rel = "arch/qwen3/qwen3.gguf";
    EMBER_REQUIRE_FIXTURE(rel);
    TempDir tmp;
    const json hf = hf_config("qwen3");
    const int64_t head_dim = hf.at("head_dim");
    Edit e;
    e.reshape["blk.1.attn_k_norm.weight"] = {head_dim / 2, 2};
    const std::string msg = load_error(rewrite(fixture_path(rel), tmp.file("q3.gguf"), e));
    EXPECT_NE(msg.find("blk.1.attn_k_norm.weight"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[" + std::to_string(head_dim) + "]"), std::string::npos) << msg;
    // And a missing qwen3-only tensor.
    Edit d;
    d.drop_tensors.insert("blk.2.attn_q_norm.weight");
    const std::string msg2 = load_error(rewrite(fixture_path(rel), tmp.file("q3b.gguf"), d));
    EXPECT_NE(msg2.find("missing tensor 'blk.2.attn_q_norm.weight'"), std::string::npos) << msg2;
}

TEST(ModelLoadFamily, Qwen2BiasShapeIsChecked) {
    const std::string rel = "arch/qwen2/qwen2.gguf";
    EMBER_REQUIRE_FIXTURE(rel);
    TempDir tmp;
    const json hf = hf_config("qwen2");
    const int64_t kv_dim =
        hf.at("num_key_value_heads").get<int64_t>() *
        (hf.at("hidden_size").get<int64_t>() / hf.at("num_attention_heads").get<int64_t>());
    Edit e;
    e.drop_tensors.insert("blk.0.attn_v.bias");
    const std::string msg = load_error(rewrite(fixture_path(rel), tmp.file("q2.gguf"), e));
    EXPECT_NE(msg.find("missing tensor 'blk.0.attn_v.bias'"), std::string::npos) << msg;
    Edit r;
    r.reshape["blk.1.attn_k.bias"] = {kv_dim / 2, 2};
    const std::string msg2 = load_error(rewrite(fixture_path(rel), tmp.file("q2b.gguf"), r));
    EXPECT_NE(msg2.find("blk.1.attn_k.bias"), std::string::npos) << msg2;
    EXPECT_NE(msg2.find("[" + std::to_string(kv_dim) + "]"), std::string::npos) << msg2;
}

// A MoE file whose expert counts disagree with its tensors: one error naming the tensor and the
// metadata key, never a crash or a read past a tensor (the experts are row slices of it).
TEST(ModelLoadFamily, Qwen3MoeExpertCountsAreChecked) {
    const std::string rel = "arch/qwen3moe/qwen3moe.gguf";
    EMBER_REQUIRE_FIXTURE(rel);
    TempDir tmp;
    auto u32 = [](int64_t v) { return GgufValue{GgufValueType::U32, v}; };
    auto expect_error = [&](const Edit& e, std::vector<std::string> parts) {
        const std::string msg = load_error(rewrite(fixture_path(rel), tmp.file("moe.gguf"), e));
        EXPECT_NE(msg.find(tmp.file("moe.gguf")), std::string::npos) << msg;
        for (const std::string& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << msg;
    };
    {
        Edit e;  // metadata says 64 experts, the tensors hold 128
        e.set["qwen3moe.expert_count"] = u32(64);
        expect_error(e, {"blk.0.ffn_gate_inp.weight", "[32, 128]", "qwen3moe.expert_count"});
    }
    {
        Edit e;  // one layer's up experts reshaped to 64 experts of twice the rows
        e.reshape["blk.1.ffn_up_exps.weight"] = {32, 48, 64};
        expect_error(e, {"blk.1.ffn_up_exps.weight", "[32, 48, 64]", "qwen3moe.expert_count"});
    }
    {
        Edit e;  // expert FFN size disagrees with the tensors
        e.set["qwen3moe.expert_feed_forward_length"] = u32(32);
        expect_error(e, {"blk.0.ffn_gate_exps.weight", "[32, 24, 128]", "[32, 32, 128]",
                         "expert_feed_forward_length"});
    }
    {
        Edit e;  // more experts per token than there are
        e.set["qwen3moe.expert_used_count"] = u32(129);
        expect_error(e, {"qwen3moe.expert_used_count", "129"});
    }
    {
        Edit e;
        e.drop_keys.insert("qwen3moe.expert_count");
        expect_error(e, {"missing metadata 'qwen3moe.expert_count'"});
    }
    {
        Edit e;
        e.drop_tensors.insert("blk.2.ffn_down_exps.weight");
        expect_error(e, {"missing tensor 'blk.2.ffn_down_exps.weight'"});
    }
}

}  // namespace
}  // namespace ember::test
