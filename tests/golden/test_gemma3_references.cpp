// gemma3 against its HF float64 reference (../shared/fixtures/arch/gemma3), in process: every
// reference top-5 logit and the logsumexp within 2e-3 at every position of every sequence,
// whether the tokens arrive in one call, one by one or in uneven batches; greedy tokens where
// the reference margin is unambiguous. Then the sliding-window KV cache: a ring that wraps
// many times gives bit for bit what a cache keeping every row gives, batches up to
// kExactBatchTokens are bit-identical to single tokens, rollback within the ring's slack is
// exact, a cut behind the window is refused, and serialized state resumes bit-identically.
//
// The fixture's HF config names its layers (sliding, sliding, full); the converter writes no
// layer pattern, so the file as converted follows the published rule (every 6th layer global:
// all three of these slide). The reference comparisons use a copy of the file that states the
// config's pattern in `gemma3.attention.sliding_window_pattern`, read from hf/config.json.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <span>
#include <vector>

#include "engine/gguf/gguf.h"
#include "engine/model/forward.h"
#include "engine/model/model.h"
#include "engine/model/state.h"
#include "engine/model/state_io.h"
#include "engine/util/thread_pool.h"
#include "tests/support/fixtures.h"
#include "tests/support/gemma3_fixture.h"
#include "tests/support/kv_precision.h"
#include "tests/support/reference_logits.h"
#include "tests/support/state_bytes.h"
#include "tests/support/temp_dir.h"

namespace ember::test {
namespace {

using json = nlohmann::json;

constexpr double kTolerance = 2e-3;
constexpr const char* kGguf = kGemma3Gguf;

class Gemma3 : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        if (!fixture_exists(kGguf)) return;
        dir_ = new TempDir("ember-gemma3");
        model_ =
            Model::load(gemma3_with_config_pattern(dir_->file("gemma3-pattern.gguf"))).release();
        ref_ = new json(json::parse(read_file(fixture_path("arch/gemma3/ref.json"))));
    }
    static void TearDownTestSuite() {
        delete model_;
        delete ref_;
        delete dir_;
        model_ = nullptr;
        ref_ = nullptr;
        dir_ = nullptr;
    }
    void SetUp() override { EMBER_REQUIRE_FIXTURE(kGguf); }

    // Feeds `ids` in batches of the given sizes (the last repeats); logits [ids x n_vocab]
    // (KV cache of `kv_type`).
    std::vector<float> run_batches(const std::vector<int32_t>& ids, std::vector<int64_t> sizes,
                                   KvType kv_type = KvType::F32) {
        return logits_in_batches(*model_, pool_, ids, sizes, kv_type);
    }

    double deviation(const std::vector<float>& all, const json& seq) {
        return sequence_deviation(all, model_->config().n_vocab, seq);
    }

    static TempDir* dir_;
    static Model* model_;
    static json* ref_;
    ThreadPool pool_{2};
};

TempDir* Gemma3::dir_ = nullptr;
Model* Gemma3::model_ = nullptr;
json* Gemma3::ref_ = nullptr;

TEST_F(Gemma3, ConfigFollowsTheFileAndTheFamilyRule) {
    const ModelConfig& c = model_->config();
    EXPECT_EQ(c.sliding_window, 8);
    EXPECT_EQ(c.sliding, (std::vector<bool>{true, true, false}));
    EXPECT_DOUBLE_EQ(c.rope_base, 1e6);
    EXPECT_DOUBLE_EQ(c.rope_base_local, 1e4);
    EXPECT_FLOAT_EQ(static_cast<float>(c.attn_scale), 0.25f);  // 1/sqrt(query_pre_attn_scalar 16)
    EXPECT_TRUE(c.tied_output);
    // As converted, without a pattern key: every 6th layer global, so all three slide.
    const auto as_converted = Model::load(fixture_path(kGguf));
    EXPECT_EQ(as_converted->config().sliding, (std::vector<bool>{true, true, true}));
    EXPECT_NE(as_converted->fingerprint(), model_->fingerprint());
}

TEST_F(Gemma3, LogitsWithin2e3HoweverTheTokensAreBatched) {
    const std::vector<std::vector<int64_t>> schedules = {
        {kMaxBatch}, {1}, {1, 7, 64, 1000}, {5, 3, 17, 2}};
    const char* schedule_names[] = {"one call", "one by one", "1,7,64,rest", "5,3,17,2..."};
    for (const char* name : {"text", "chat", "long"}) {
        ASSERT_TRUE((*ref_)["seqs"].contains(name)) << "ref.json lacks " << name;
        const json& seq = (*ref_)["seqs"][name];
        const std::vector<int32_t> ids = ids_of(seq);
        std::vector<float> one_by_one;
        for (size_t s = 0; s < schedules.size(); ++s) {
            const std::vector<float> all = run_batches(ids, schedules[s]);
            const double dev = deviation(all, seq);
            EXPECT_LE(dev, kTolerance) << name << " " << schedule_names[s];
            std::printf("[ref] gemma3/%s (%s): max |dlogit| %.2e over %zu positions\n", name,
                        schedule_names[s], dev, ids.size());
            if (s == 1) one_by_one = all;
            // Batches of at most kExactBatchTokens are bit-identical to single tokens.
            if (s == 3) {
                EXPECT_EQ(0, std::memcmp(all.data(), one_by_one.data(), all.size() * sizeof(float)))
                    << name << ": batches of <= 17 differ from one by one";
            }
        }
    }
}

// The KV types' fidelity (kv_precision.h): every sequence in one call (the long one wraps the
// sliding layers' rings), and in batches of at most 17, which must give the one-by-one logits
// bit for bit whatever the cache holds.
TEST_F(Gemma3, EachKvTypeWithinItsTolerance) {
    check_each_kv_type(*model_, pool_, (*ref_)["seqs"], {"text", "chat", "long"}, "chat", "gemma3",
                       kMaxBatch);
}

TEST_F(Gemma3, GreedyMatchesWhereTheMarginIsClear) {
    for (const char* name : {"text", "chat"}) {
        const json& seq = (*ref_)["seqs"][name];
        const std::vector<int32_t> prompt = ids_of(seq);
        const std::vector<int32_t> expected = ids_of(seq, "greedy_ids");
        auto state =
            make_state(model_->config(), static_cast<int64_t>(prompt.size() + expected.size()) + 8);
        auto logits = forward(*model_, *state, pool_, prompt, LogitsWanted::Last);
        size_t matched = 0;
        for (size_t i = 0; i < expected.size(); ++i) {
            const int32_t best = static_cast<int32_t>(
                std::max_element(logits.begin(), logits.end()) - logits.begin());
            if (best != expected[i]) {
                EXPECT_LE(seq["greedy_margins"][i].get<double>(), 1e-2)
                    << name << ": greedy token " << i << " is " << best << ", reference "
                    << expected[i];
                break;  // past an ambiguous choice the continuations differ
            }
            ++matched;
            const int32_t next[] = {best};
            logits = forward(*model_, *state, pool_, next, LogitsWanted::Last);
        }
        std::printf("[ref] gemma3/%s greedy: %zu of %zu tokens as the reference\n", name, matched,
                    expected.size());
    }
}

// A sliding window of 0 or past the context, or a pattern of the wrong length: one error
// naming the file and the key.
TEST_F(Gemma3, BadWindowMetadataNamesFileAndKey) {
    const auto src = GgufFile::open(fixture_path(kGguf));
    auto rewrite = [&](const std::string& key, GgufValue value) {
        const std::string dst = dir_->file("bad.gguf");
        GgufWriter w;
        for (const std::string& k : src->metadata_order()) w.copy_from(*src, k);
        w.set(key, std::move(value));
        for (const GgufTensorInfo& t : src->tensors()) {
            w.add_tensor(t.name, t.dims, t.type, std::vector<uint8_t>(t.data, t.data + t.n_bytes));
        }
        w.write(dst);
        return dst;
    };
    const std::string window = "gemma3.attention.sliding_window";
    GgufArray two;
    two.elem_type = GgufValueType::BOOL;
    two.ints = {1, 0};
    const std::pair<std::string, GgufValue> cases[] = {
        {window, GgufValue{GgufValueType::U32, int64_t{0}}},
        {window, GgufValue{GgufValueType::U32, int64_t{4097}}},  // context_length 4096
        {"gemma3.attention.sliding_window_pattern", GgufValue{GgufValueType::ARRAY, two}},
    };
    for (const auto& [key, value] : cases) {
        const std::string path = rewrite(key, value);
        try {
            Model::load(path);
            ADD_FAILURE() << key << " was accepted";
        } catch (const GgufError& e) {
            const std::string msg = e.what();
            EXPECT_NE(msg.find(path), std::string::npos) << msg;
            EXPECT_NE(msg.find(key), std::string::npos) << msg;
        }
    }
}

// Logits of `ids` fed in batches of `batch` (every row, or each batch's last), from `state`.
std::vector<float> feed(const Model& model, InferenceState& state, ThreadPool& pool,
                        std::span<const int32_t> ids, int64_t batch,
                        LogitsWanted wanted = LogitsWanted::All) {
    std::vector<float> all;
    for (size_t at = 0; at < ids.size(); at += static_cast<size_t>(batch)) {
        const auto part = ids.subspan(at, std::min(ids.size() - at, static_cast<size_t>(batch)));
        const auto logits = forward(model, state, pool, part, wanted);
        all.insert(all.end(), logits.begin(), logits.end());
    }
    return all;
}

// A cache keeping every row of every layer (no rings) for `c`: what the rings must equal.
std::unique_ptr<InferenceState> full_state(const ModelConfig& c, int64_t positions,
                                           KvType type = KvType::F32) {
    auto st = make_state(c, positions, type);
    st->kv.init(c.n_layer, c.n_head_kv * c.head_dim, c.n_head_kv * c.value_dim, positions, type);
    return st;
}

// 1,300 tokens wrap the sliding layers' rings (512 positions for W = 8) twice.
constexpr int64_t kLong = 1300;

TEST_F(Gemma3, RingsGiveWhatACacheOfEveryRowGives) {
    const ModelConfig& c = model_->config();
    const auto ids = some_tokens(kLong, c.n_vocab, 7);
    for (const KvType type : kAllKvTypes) {
        auto ring = make_state(c, 2048, type);
        auto full = full_state(c, 2048, type);
        ASSERT_EQ(ring->kv.ring_positions(), 512);
        const auto a = feed(*model_, *ring, pool_, ids, 97, LogitsWanted::Last);
        const auto b = feed(*model_, *full, pool_, ids, 97, LogitsWanted::Last);
        ASSERT_EQ(a.size(), b.size());
        EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)))
            << kv_type_name(type);
        for (int64_t l = 0; l < c.n_layer; ++l) {
            for (int64_t p = kLong - 512; p < kLong; ++p) {
                ASSERT_TRUE(kv_rows(*ring, l, p) == kv_rows(*full, l, p)) << l << " " << p;
            }
        }
        // O(W) memory: the two sliding layers hold 512 positions, the global one all 1,300.
        // A row is n_head_kv * head_dim = 16 elements: 64 bytes of f32, 32 of f16, and one
        // zero-padded 34-byte block of q8_0.
        const uint64_t row_bytes = type == KvType::F32 ? 64 : type == KvType::F16 ? 32 : 34;
        ASSERT_EQ(c.n_head_kv * c.head_dim, 16);
        EXPECT_EQ(ring->kv.allocated_bytes(), (2 * 512 + 1536) * 2 * row_bytes);
        EXPECT_LT(ring->kv.allocated_bytes(), full->kv.allocated_bytes());
    }
}

// Speculation's verification: batches up to kExactBatchTokens after a context that has
// wrapped the rings, ending inside and across attention runs, give bit for bit the logits and
// K/V rows of the same tokens one at a time.
TEST_F(Gemma3, BatchesUpToSeventeenAreBitIdenticalToSingleTokens) {
    const ModelConfig& c = model_->config();
    for (const int64_t prompt_len : {int64_t{5}, int64_t{124}, int64_t{1020}}) {
        for (const int64_t batch : {int64_t{2}, int64_t{5}, int64_t{9}, kExactBatchTokens}) {
            SCOPED_TRACE("prompt " + std::to_string(prompt_len) + " batch " +
                         std::to_string(batch));
            const auto prompt = some_tokens(prompt_len, c.n_vocab, prompt_len);
            const auto draft = some_tokens(batch, c.n_vocab, 1000 + batch);
            auto one = make_state(c, 2048);
            auto all = make_state(c, 2048);
            forward(*model_, *one, pool_, prompt, LogitsWanted::Last);
            forward(*model_, *all, pool_, prompt, LogitsWanted::Last);
            const auto singles = feed(*model_, *one, pool_, draft, 1);
            const auto rows = forward(*model_, *all, pool_, draft, LogitsWanted::All);
            ASSERT_EQ(rows.size(), singles.size());
            EXPECT_EQ(0, std::memcmp(rows.data(), singles.data(), rows.size() * sizeof(float)));
            for (int64_t l = 0; l < c.n_layer; ++l) {
                for (int64_t p = prompt_len; p < prompt_len + batch; ++p) {
                    ASSERT_TRUE(kv_rows(*one, l, p) == kv_rows(*all, l, p)) << l << " " << p;
                }
            }
        }
    }
}

// Rollback within the ring's slack recomputes exactly; behind the window it is refused (the
// rows are gone), and starting over works.
TEST_F(Gemma3, RollbackWithinTheSlackIsExactAndBehindTheWindowRefused) {
    const ModelConfig& c = model_->config();
    const auto ids = some_tokens(kLong, c.n_vocab, 11);
    auto st = make_state(c, 2048);
    forward(*model_, *st, pool_, std::span(ids).first(1200), LogitsWanted::Last);
    const auto ahead =
        forward(*model_, *st, pool_, std::span(ids).subspan(1200, 100), LogitsWanted::All);
    const std::vector<float> expected(ahead.end() - 83 * c.n_vocab, ahead.end());
    // Back 83 positions (past a speculation's 17, inside the 256 of slack): exact.
    ASSERT_TRUE(st->kv.can_resume_at(kLong - 83));
    st->kv.set_length(kLong - 83);
    const auto again =
        forward(*model_, *st, pool_, std::span(ids).subspan(kLong - 83), LogitsWanted::All);
    EXPECT_EQ(0, std::memcmp(again.data(), expected.data(), expected.size() * sizeof(float)));
    // Back 600: the rings (512) no longer hold the window before position 700.
    EXPECT_FALSE(st->kv.can_resume_at(700));
    st->kv.set_length(700);
    EXPECT_THROW(forward(*model_, *st, pool_, std::span(ids).subspan(700, 5), LogitsWanted::Last),
                 std::logic_error);
    st->kv.set_length(0);
    EXPECT_TRUE(st->kv.can_resume_at(0));
    const auto cold = make_state(c, 2048);
    const auto a = forward(*model_, *st, pool_, std::span(ids).first(40), LogitsWanted::Last);
    const std::vector<float> restart(a.begin(), a.end());
    const auto b = forward(*model_, *cold, pool_, std::span(ids).first(40), LogitsWanted::Last);
    EXPECT_EQ(0, std::memcmp(restart.data(), b.data(), restart.size() * sizeof(float)));
}

// The session store's pattern: blobs of runs of positions, written at turn ends, restored in a
// fresh state. A blob written after the rings wrapped holds the sliding rows the rings still
// had; resuming needs the window before the resume point, and is then bit-identical.
TEST_F(Gemma3, SerializedStateResumesBitIdentically) {
    const ModelConfig& c = model_->config();
    const auto ids = some_tokens(kLong, c.n_vocab, 13);
    const int64_t turn1 = 300;   // within the rings
    const int64_t turn2 = 1100;  // the rings have wrapped: they hold [588, 1100)
    auto st = make_state(c, 2048);
    forward(*model_, *st, pool_, std::span(ids).first(turn1), LogitsWanted::Last);
    const auto blob1 = serialize_kv_rows(st->kv, 0, turn1);
    forward(*model_, *st, pool_, std::span(ids).subspan(turn1, turn2 - turn1), LogitsWanted::Last);
    const auto blob2 = serialize_kv_rows(st->kv, turn1, turn2);
    const KvBlobInfo info = inspect_kv_rows(blob2);
    EXPECT_EQ(info.window, 8);
    EXPECT_EQ(info.ring_begin, turn2 - 512);
    EXPECT_EQ(info.ring_layers, c.sliding);
    const auto rest =
        forward(*model_, *st, pool_, std::span(ids).subspan(turn2), LogitsWanted::All);
    const std::vector<float> expected(rest.begin(), rest.end());

    auto resumed = make_state(c, 2048);
    apply_kv_rows(blob1, resumed->kv, 0, turn1);
    apply_kv_rows(blob2, resumed->kv, turn1, turn2);
    ASSERT_TRUE(resumed->kv.can_resume_at(turn2));
    resumed->kv.set_length(turn2);
    const auto got =
        forward(*model_, *resumed, pool_, std::span(ids).subspan(turn2), LogitsWanted::All);
    ASSERT_EQ(got.size(), expected.size());
    EXPECT_EQ(0, std::memcmp(got.data(), expected.data(), expected.size() * sizeof(float)));

    // Ending inside blob2 where its sliding rows are missing: not a state to continue from.
    auto partial = make_state(c, 2048);
    apply_kv_rows(blob1, partial->kv, 0, turn1);
    apply_kv_rows(blob2, partial->kv, turn1, 500);
    EXPECT_FALSE(partial->kv.can_resume_at(500));
    // A windowed blob does not apply to a cache with other sliding layers.
    const auto plain = Model::load(fixture_path(kGguf));  // all three layers slide
    auto other = make_state(plain->config(), 2048);
    EXPECT_THROW(apply_kv_rows(blob2, other->kv, turn1, turn2), StateFormatError);
    std::vector<uint8_t> truncated(blob2.begin(), blob2.end() - 4);
    EXPECT_THROW(inspect_kv_rows(truncated), StateFormatError);
}

}  // namespace
}  // namespace ember::test
