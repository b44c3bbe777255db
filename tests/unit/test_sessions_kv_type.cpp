// KV precision and the prefix store, with real fixture models and a real SQLite file:
//  - a state stored with one KV type is never restored into a cache of another type: the
//    turn is recomputed, exactly as a cold conversation of that type computes it, while the
//    same type resumes warm;
//  - the stored (zstd-compressed) state per token of f16 and q8_0 against f32.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "engine/generate/conversation.h"
#include "engine/model/model.h"
#include "engine/util/thread_pool.h"
#include "sessions/schema.h"
#include "sessions/state_store.h"
#include "tests/support/fixtures.h"
#include "tests/support/temp_dir.h"

namespace ember::sessions {
namespace {

using TempDir = ::ember::test::TempDir;

Sampler greedy() {
    SamplingParams p;
    p.temperature = 0;
    return Sampler(p);
}

ConversationOptions options_for(KvType type, bool prefix_cache = true) {
    ConversationOptions o;
    o.context = 1024;
    o.kv_type = type;
    o.prefix_cache = prefix_cache;
    return o;
}

GenerateOptions reply_tokens(int n) {
    GenerateOptions g;
    g.max_tokens = n;
    return g;
}

// Builds a conversation of `turns` user turns with greedy replies of `reply` tokens, saving
// its state with a store of `type` in `db`; returns the messages.
std::vector<ChatMessage> build_conversation(const Model& model, ThreadPool& pool, Database& db,
                                            KvType type, int turns, int reply) {
    StateStore store(db, model, type);
    Conversation conv(model, pool, options_for(type));
    conv.set_prefix_store(&store);
    Sampler sampler = greedy();
    for (int turn = 0; turn < turns; ++turn) {
        conv.add_message({"user",
                          "Tell me about the river and the old mill, part " + std::to_string(turn),
                          {},
                          {}});
        conv.respond(sampler, reply_tokens(reply), nullptr);
        EXPECT_EQ(store.take_warning(), "") << "turn " << turn;
    }
    return conv.messages();
}

// One more turn after `history` in a fresh conversation of `type`: from the store when one
// is given, else cold.
TurnResult next_turn(const Model& model, ThreadPool& pool, std::vector<ChatMessage> history,
                     KvType type, StateStore* store) {
    Conversation conv(model, pool, options_for(type, store != nullptr));
    if (store != nullptr) conv.set_prefix_store(store);
    history.push_back({"user", "And what happened next?", {}, {}});
    for (const auto& m : history) conv.add_message(m);
    Sampler sampler = greedy();
    return conv.respond(sampler, reply_tokens(12), nullptr);
}

class SessionsKvType : public ::testing::TestWithParam<std::string> {};

// Stored with f16; a q8_0 or f32 conversation over the same database finds nothing to
// restore (the key chain's seed covers the KV type) and answers as a cold conversation of
// its own type; an f16 one restores.
TEST_P(SessionsKvType, StateOfOneTypeIsNeverRestoredIntoAnother) {
    EMBER_REQUIRE_FIXTURE(GetParam());
    TempDir dir;
    ThreadPool pool(2);
    auto model = Model::load(test::fixture_path(GetParam()));
    Database db(dir.file("kv.db"));
    migrate(db);
    const auto history = build_conversation(*model, pool, db, KvType::F16, 3, 16);
    const StateStats stored = read_state_stats(db);
    ASSERT_GT(stored.blocks_written, 0);

    for (const KvType type : {KvType::Q8_0, KvType::F32, KvType::F16}) {
        SCOPED_TRACE(kv_type_name(type));
        const StateStats before = read_state_stats(db);
        StateStore store(db, *model, type);
        const TurnResult warm = next_turn(*model, pool, history, type, &store);
        EXPECT_EQ(store.take_warning(), "");
        const TurnResult cold = next_turn(*model, pool, history, type, nullptr);
        EXPECT_EQ(cold.tokens_reused, 0);
        const StateStats after = read_state_stats(db);
        if (type == KvType::F16) {
            EXPECT_GT(warm.tokens_restored, 0);
            EXPECT_GT(after.tokens_restored, before.tokens_restored);
        } else {
            EXPECT_EQ(warm.tokens_restored, 0);
            EXPECT_EQ(warm.tokens_reused, 0);
            EXPECT_EQ(warm.tokens_evaluated, warm.prompt_tokens);
            EXPECT_EQ(after.restore_hits, before.restore_hits);
            EXPECT_EQ(after.tokens_restored, before.tokens_restored);
        }
        EXPECT_EQ(warm.ids, cold.ids);
        EXPECT_EQ(warm.reply, cold.reply);
    }
}

INSTANTIATE_TEST_SUITE_P(Models, SessionsKvType,
                         ::testing::Values("arch/qwen3/qwen3.gguf", "arch/llama/llama.gguf"),
                         [](const auto& param_info) {
                             return param_info.param.find("qwen3") != std::string::npos ? "qwen3"
                                                                                        : "llama";
                         });

// The same conversation stored with each KV type in its own database: compressed bytes per
// stored token, as the session store writes them. qwen3's rows are 64 elements (two heads of
// 32), so q8_0 rows are two whole blocks, as on real models.
TEST(SessionsKvTypeSize, StoredStatePerTokenShrinksWithThePrecision) {
    const std::string fixture = "arch/qwen3/qwen3.gguf";
    EMBER_REQUIRE_FIXTURE(fixture);
    TempDir dir;
    ThreadPool pool(2);
    auto model = Model::load(test::fixture_path(fixture));
    double per_token[3] = {};
    int64_t tokens[3] = {};
    for (const KvType type : {KvType::F32, KvType::F16, KvType::Q8_0}) {
        const int i = static_cast<int>(type);
        Database db(dir.file(std::string("size-") + kv_type_name(type) + ".db"));
        migrate(db);
        build_conversation(*model, pool, db, type, 6, 48);
        const StateStats s = read_state_stats(db);
        ASSERT_GT(s.tokens, 0);
        tokens[i] = s.tokens;
        per_token[i] = static_cast<double>(s.stored_bytes) / static_cast<double>(s.tokens);
        std::printf("[kv] stored state %s: %.1f bytes/token (raw %.1f) over %lld tokens\n",
                    kv_type_name(type), per_token[i],
                    static_cast<double>(s.raw_bytes) / static_cast<double>(s.tokens),
                    static_cast<long long>(s.tokens));
    }
    // Greedy replies may differ between types; the ratios are per token either way.
    EXPECT_GT(tokens[1], 0);
    const double f16 = per_token[1] / per_token[0];
    const double q8 = per_token[2] / per_token[0];
    std::printf("[kv] stored state vs f32: f16 %.3fx, q8_0 %.3fx\n", f16, q8);
    EXPECT_LE(f16, 0.5);
    EXPECT_LE(q8, 0.3);
}

}  // namespace
}  // namespace ember::sessions
