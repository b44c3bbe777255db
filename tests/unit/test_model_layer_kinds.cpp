// Hybrid layer kinds when the metadata disagrees with the tensors. Converters write qwen35's
// layer pattern as one full_attention_interval whatever the HF model's pattern is; where each
// layer's tensors show its kind unambiguously the model follows them and says so in one
// warning (returned, not printed), computing exactly what the original file computes. A layer
// whose tensors contradict each other is still refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "engine/gguf/gguf.h"
#include "engine/model/forward.h"
#include "engine/model/model.h"
#include "engine/model/state.h"
#include "engine/util/thread_pool.h"
#include "tests/support/fixtures.h"
#include "tests/support/temp_dir.h"

namespace ember::test {
namespace {

using json = nlohmann::json;

// A copy of `src` with metadata values replaced and tensors added (copies of existing ones,
// under new names).
std::string rewrite(const std::string& src, const std::string& dst,
                    const std::map<std::string, GgufValue>& set,
                    const std::map<std::string, std::string>& add_copies = {}) {
    const auto f = GgufFile::open(src);
    GgufWriter w;
    for (const std::string& key : f->metadata_order()) w.copy_from(*f, key);
    for (const auto& [key, value] : set) w.set(key, value);
    auto copy = [&](const std::string& name, const GgufTensorInfo& t) {
        w.add_tensor(name, t.dims, t.type, std::vector<uint8_t>(t.data, t.data + t.n_bytes));
    };
    for (const GgufTensorInfo& t : f->tensors()) copy(t.name, t);
    for (const auto& [name, from] : add_copies) copy(name, *f->find_tensor(from));
    w.write(dst);
    return dst;
}

GgufValue u32(int64_t v) {
    return GgufValue{GgufValueType::U32, v};
}

std::vector<LayerKind> kinds(const Model& m) {
    std::vector<LayerKind> k;
    for (const LayerWeights& L : m.layers()) k.push_back(L.kind);
    return k;
}

// All logits of `ids`, [ids x n_vocab].
std::vector<float> logits_of(const Model& m, const std::vector<int32_t>& ids) {
    ThreadPool pool(2);
    auto state = make_state(m.config(), static_cast<int64_t>(ids.size()) + 8);
    std::vector<float> all;
    for (size_t at = 0; at < ids.size(); at += kMaxBatch) {
        const size_t len = std::min<size_t>(kMaxBatch, ids.size() - at);
        const auto logits =
            forward(m, *state, pool, std::span(ids).subspan(at, len), LogitsWanted::All);
        all.insert(all.end(), logits.begin(), logits.end());
    }
    return all;
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

class Qwen35LayerKinds : public ::testing::Test {
protected:
    void SetUp() override {
        EMBER_REQUIRE_FIXTURE(kGguf);
        EMBER_REQUIRE_FIXTURE(kRef);
    }
    static constexpr const char* kGguf = "arch/qwen35/qwen35.gguf";
    static constexpr const char* kRef = "arch/qwen35/ref.json";
    TempDir tmp_;
};

TEST_F(Qwen35LayerKinds, WrongIntervalFollowsTheTensorsWithOneWarning) {
    const auto original = Model::load(fixture_path(kGguf));
    // The fixture (hf/config.json: 4 layers, full_attention_interval 4) has attention only
    // in layer 3; an interval of 2 would make layers 1 and 3 attention.
    ASSERT_EQ(original->config().n_layer, 4);
    const std::vector<LayerKind> expected = {LayerKind::DeltaNet, LayerKind::DeltaNet,
                                             LayerKind::DeltaNet, LayerKind::Attention};
    ASSERT_EQ(kinds(*original), expected);
    EXPECT_TRUE(original->load_warnings().empty());

    const std::string path = rewrite(fixture_path(kGguf), tmp_.file("interval2.gguf"),
                                     {{"qwen35.full_attention_interval", u32(2)}});
    std::unique_ptr<Model> fixed;
    ASSERT_NO_THROW(fixed = Model::load(path));
    EXPECT_EQ(kinds(*fixed), expected);
    EXPECT_EQ(fixed->config().n_kv_layers, 1);
    ASSERT_EQ(fixed->load_warnings().size(), 1u);
    const std::string& w = fixed->load_warnings()[0];
    EXPECT_NE(w.find(path), std::string::npos) << w;
    EXPECT_NE(w.find("full_attention_interval = 2"), std::string::npos) << w;
    EXPECT_NE(w.find("makes layers 1, 3 attention"), std::string::npos) << w;
    EXPECT_NE(w.find("tensors make layers 3 attention"), std::string::npos) << w;

    // Same computation as the original, bit for bit, and within the HF float64 reference.
    const json ref = json::parse(read_file(fixture_path(kRef)));
    const json& seq = ref["seqs"]["text"];
    const std::vector<int32_t> ids = seq["ids"].get<std::vector<int32_t>>();
    const std::vector<float> a = logits_of(*original, ids);
    const std::vector<float> b = logits_of(*fixed, ids);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_TRUE(a == b) << "logits differ from the original file's";
    const size_t n_vocab = static_cast<size_t>(fixed->config().n_vocab);
    double worst = 0;
    for (size_t p = 0; p < ids.size(); ++p) {
        for (size_t i = 0; i < 5; ++i) {
            const size_t id = seq["top5_ids"][p][i].get<size_t>();
            worst = std::max(
                worst, std::fabs(b[p * n_vocab + id] - seq["top5_logits"][p][i].get<double>()));
        }
    }
    EXPECT_LE(worst, 2e-3);
}

TEST_F(Qwen35LayerKinds, IntervalPointingAtNoLayerFollowsTheTensors) {
    // An interval past the last layer says no layer is attention.
    const std::string path = rewrite(fixture_path(kGguf), tmp_.file("interval8.gguf"),
                                     {{"qwen35.full_attention_interval", u32(8)}});
    const auto m = Model::load(path);
    EXPECT_EQ(m->layers()[3].kind, LayerKind::Attention);
    ASSERT_EQ(m->load_warnings().size(), 1u);
    EXPECT_NE(m->load_warnings()[0].find("makes layers (none) attention"), std::string::npos)
        << m->load_warnings()[0];
}

TEST_F(Qwen35LayerKinds, LayerWithBothKindsOfTensorsIsRefused) {
    // Layer 1 gains an attention query projection beside its GatedDeltaNet tensors.
    const std::string path = rewrite(fixture_path(kGguf), tmp_.file("both.gguf"),
                                     {{"qwen35.full_attention_interval", u32(2)}},
                                     {{"blk.1.attn_q.weight", "blk.3.attn_q.weight"}});
    const std::string msg = load_error(path);
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find("layer 1 has both attention and recurrent tensors"), std::string::npos)
        << msg;
}

// lfm2 states the kinds per layer (KV head count 0 for a conv layer): the same rule.
TEST(Lfm2LayerKinds, WrongPerLayerHeadCountsFollowTheTensors) {
    const char* rel = "arch/lfm2/lfm2.gguf";
    EMBER_REQUIRE_FIXTURE(rel);
    TempDir tmp;
    const auto original = Model::load(fixture_path(rel));
    const auto f = GgufFile::open(fixture_path(rel));
    const GgufArray* heads = f->get_array("lfm2.attention.head_count_kv");
    ASSERT_NE(heads, nullptr);
    // Swap every layer's stated kind.
    GgufArray swapped = *heads;
    const int64_t n_kv = original->config().n_head_kv;
    for (int64_t& v : swapped.ints) v = v == 0 ? n_kv : 0;
    const std::string path =
        rewrite(fixture_path(rel), tmp.file("swapped.gguf"),
                {{"lfm2.attention.head_count_kv", GgufValue{GgufValueType::ARRAY, swapped}}});
    const auto m = Model::load(path);
    EXPECT_EQ(kinds(*m), kinds(*original));
    ASSERT_EQ(m->load_warnings().size(), 1u);
    EXPECT_NE(m->load_warnings()[0].find("lfm2.attention.head_count_kv"), std::string::npos)
        << m->load_warnings()[0];
    const std::vector<int32_t> ids = {1, 100, 200, 300, 400};
    EXPECT_TRUE(logits_of(*original, ids) == logits_of(*m, ids));
}

}  // namespace
}  // namespace ember::test
