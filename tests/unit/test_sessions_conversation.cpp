// A real Conversation over a real model with the SQLite prefix store: long replies that fill
// the context (so older turns are dropped), replies cancelled part-way and regenerated, and
// every save still succeeds without a warning (the line-mode report of "prefix state not
// saved: ... FOREIGN KEY constraint failed"). Then a second model load with a fresh store on
// the same database, as a new process would have, restores the conversation and answers
// exactly what a cold conversation answers.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <random>

#include "engine/generate/conversation.h"
#include "engine/model/model.h"
#include "engine/util/thread_pool.h"
#include "sessions/schema.h"
#include "sessions/state_store.h"
#include "tests/support/fixtures.h"
#include "tests/support/sanitizers.h"
#include "tests/support/temp_dir.h"

namespace ember::sessions {
namespace {

namespace fs = std::filesystem;

using TempDir = ::ember::test::TempDir;

Sampler greedy() {
    SamplingParams p;
    p.temperature = 0;
    return Sampler(p);
}

ConversationOptions small_context() {
    ConversationOptions o;
    o.context = 640;  // long replies overflow it, so older turns get dropped
    return o;
}

class SessionsConversation : public ::testing::TestWithParam<std::string> {};

TEST_P(SessionsConversation, LongAndCancelledRepliesSaveCleanlyAndResumeExactly) {
    EMBER_REQUIRE_FIXTURE(GetParam());
    TempDir dir;
    const std::string path = test::fixture_path(GetParam());
    ThreadPool pool(2);
    Database db(dir.file("conv.db"));
    migrate(db);
    std::vector<ChatMessage> history;
    {
        auto model = Model::load(path);
        StateStore store(db, *model, KvType::F32);
        Conversation conv(*model, pool, small_context());
        conv.set_prefix_store(&store);
        Sampler sampler = greedy();
        GenerateOptions generation;
        generation.max_tokens = 250;
        std::mt19937 rng(11);
        // Under the sanitizers (several times slower) 5 turns still regenerate (turn 3),
        // cancel (1, 3) and overflow the context (from turn 2).
        const int turns = test::kSanitized ? 5 : 10;
        for (int turn = 0; turn < turns; ++turn) {
            if (turn % 4 == 3) {
                // Regenerate: drop the last reply and its prompt, ask again differently.
                conv.pop_assistant();
                conv.pop_message();
            }
            conv.add_message(
                {"user", "Tell me a long story, part " + std::to_string(turn), {}, {}});
            const int cancel_after = turn % 2 == 1 ? static_cast<int>(1 + rng() % 120) : -1;
            int pieces = 0;
            const TurnResult r =
                conv.respond(sampler, generation, [&](const std::string&, TextKind) {
                    return cancel_after < 0 || ++pieces < cancel_after;
                });
            EXPECT_EQ(store.take_warning(), "") << "turn " << turn;
            if (cancel_after > 0) {
                EXPECT_EQ(r.finish, FinishReason::Cancelled) << turn;
            }
        }
        EXPECT_GT(read_state_stats(db).blocks_written, 0);
        history = conv.messages();
    }
    history.push_back({"user", "One more question.", {}, {}});

    // A new "process": another model load, a fresh store on the same database file.
    auto model = Model::load(path);
    StateStore store(db, *model, KvType::F32);
    Conversation warm(*model, pool, small_context());
    warm.set_prefix_store(&store);
    for (const auto& m : history) warm.add_message(m);
    Sampler warm_sampler = greedy();
    GenerateOptions generation;
    generation.max_tokens = 24;
    const TurnResult resumed = warm.respond(warm_sampler, generation, nullptr);
    EXPECT_EQ(store.take_warning(), "");
    // A hybrid restores only from a snapshot of its recurrent state at a point where the
    // prompts agree; here older turns were dropped to fit the context (and a thinking
    // template re-renders earlier replies without their thinking), so the prompt departs
    // from every stored one inside its first message and nothing may be restorable.
    const bool hybrid = GetParam().find("qwen35") != std::string::npos ||
                        GetParam().find("lfm2") != std::string::npos;
    if (hybrid) {
        EXPECT_GT(read_state_stats(db).snapshots, 0);
    } else {
        EXPECT_GT(resumed.tokens_restored, 0);
    }
    EXPECT_EQ(resumed.tokens_reused + resumed.tokens_evaluated, resumed.prompt_tokens);

    ConversationOptions cold_options = small_context();
    cold_options.prefix_cache = false;
    Conversation cold(*model, pool, cold_options);
    for (const auto& m : history) cold.add_message(m);
    Sampler cold_sampler = greedy();
    const TurnResult recomputed = cold.respond(cold_sampler, generation, nullptr);
    EXPECT_EQ(recomputed.tokens_reused, 0);
    EXPECT_EQ(resumed.ids, recomputed.ids);
    EXPECT_EQ(resumed.reply, recomputed.reply);
}

INSTANTIATE_TEST_SUITE_P(Models, SessionsConversation,
                         ::testing::Values("arch/llama/llama.gguf", "arch/qwen2/qwen2.gguf",
                                           "arch/qwen35/qwen35.gguf", "arch/lfm2/lfm2.gguf"),
                         [](const auto& param_info) {
                             return fs::path(param_info.param).stem().string();
                         });

// defer_state_save (scripted chat): a turn stores nothing until store_pending_state(), which
// stores it once; a turn left pending is stored when the next one starts; and what a deferred
// save stored restores in a new conversation exactly as an immediate save does.
// A fixture model with an f16 prefix store over a fresh database, and conversation options
// that defer the save (as a scripted chat does): what the tests below start from.
struct DeferredF16Store {
    explicit DeferredF16Store(const std::string& fixture)
        : db(dir.file("conv.db")),
          model((migrate(db), Model::load(test::fixture_path(fixture)))),
          store(db, *model, KvType::F16) {
        options.kv_type = KvType::F16;
        options.defer_state_save = true;
    }
    TempDir dir;
    ThreadPool pool{2};
    Database db;
    std::unique_ptr<Model> model;
    StateStore store;
    ConversationOptions options = small_context();
};

TEST_P(SessionsConversation, DeferredSaveStoresWhenAskedOrAtTheNextTurn) {
    EMBER_REQUIRE_FIXTURE(GetParam());
    DeferredF16Store setup(GetParam());
    Database& db = setup.db;
    ThreadPool& pool = setup.pool;
    const std::unique_ptr<Model>& model = setup.model;
    StateStore& store = setup.store;
    const ConversationOptions& options = setup.options;
    Conversation conv(*model, pool, options);
    conv.set_prefix_store(&store);
    Sampler sampler = greedy();
    GenerateOptions generation;
    generation.max_tokens = 12;
    const auto written = [&] { return read_state_stats(db).blocks_written; };

    conv.add_message({"user", "Name three rivers of Europe.", {}, {}});
    conv.respond(sampler, generation, nullptr);
    EXPECT_EQ(written(), 0) << "stored before store_pending_state()";
    conv.store_pending_state();
    const int64_t after_first = written();
    EXPECT_GT(after_first, 0);
    conv.store_pending_state();  // nothing pending any more
    EXPECT_EQ(written(), after_first);

    conv.add_message({"user", "And three mountains?", {}, {}});
    conv.respond(sampler, generation, nullptr);
    EXPECT_EQ(written(), after_first) << "the second turn's state stored before it was asked";
    conv.add_message({"user", "Which is the highest?", {}, {}});
    const TurnResult third = conv.respond(sampler, generation, nullptr);
    EXPECT_GT(written(), after_first) << "the second turn's state was never stored";
    EXPECT_EQ(store.take_warning(), "");

    // The first two turns' state, stored on the way, serves a new conversation over the
    // same messages; its reply matches the one the live state gave.
    std::vector<ChatMessage> history = conv.messages();
    history.pop_back();  // the third reply: ask it again
    ConversationOptions fresh_options = options;
    fresh_options.defer_state_save = false;
    Conversation fresh(*model, pool, fresh_options);
    fresh.set_prefix_store(&store);
    for (const auto& m : history) fresh.add_message(m);
    Sampler fresh_sampler = greedy();
    const TurnResult again = fresh.respond(fresh_sampler, generation, nullptr);
    const bool hybrid = GetParam().find("qwen35") != std::string::npos ||
                        GetParam().find("lfm2") != std::string::npos;
    if (!hybrid) {
        EXPECT_GT(again.tokens_restored, 0);
    }
    EXPECT_EQ(again.ids, third.ids);
}

}  // namespace
}  // namespace ember::sessions

namespace ember::sessions {
namespace {

// prepare_next_turn: once a turn's state is stored, the conversation evaluates the start
// every next prompt shares (the reply's end of turn and the next user header; Qwen3 with
// thinking off also renders a past reply without the empty think block its generation
// prompt had), so the next turn - here, or restored by a new conversation over the same
// store, as a new process would - evaluates only from the new message on, and answers what
// a conversation without the preparation answers.
class NextTurn : public ::testing::TestWithParam<std::string> {};

TEST_P(NextTurn, PreparedStartIsReusedHereAndRestoredElsewhere) {
    EMBER_REQUIRE_FIXTURE(GetParam());
    DeferredF16Store setup(GetParam());
    ThreadPool& pool = setup.pool;
    const std::unique_ptr<Model>& model = setup.model;
    StateStore& store = setup.store;
    ConversationOptions options = setup.options;
    GenerateOptions generation;
    generation.max_tokens = 10;
    const ChatMessage first{"user", "Name three rivers of Europe.", {}, {}};
    const ChatMessage second{"user", "And three mountains?", {}, {}};

    options.prepare_next_turn = true;
    Conversation prepared(*model, pool, options);
    prepared.set_thinking(false);
    prepared.set_prefix_store(&store);
    Sampler sampler = greedy();
    prepared.add_message(first);
    prepared.respond(sampler, generation, nullptr);
    const size_t after_reply = prepared.cached_tokens().size();
    const std::vector<ChatMessage> history = prepared.messages();
    prepared.store_pending_state();
    const std::vector<int32_t> start = prepared.cached_tokens();
    prepared.add_message(second);
    const std::vector<int32_t> prompt = prepared.prompt_tokens();
    ASSERT_LT(start.size(), prompt.size());
    EXPECT_TRUE(std::equal(start.begin(), start.end(), prompt.begin()))
        << "the prepared start is not where the next prompt starts";
    const TurnResult here = prepared.respond(sampler, generation, nullptr);
    EXPECT_EQ(here.tokens_reused, static_cast<int64_t>(start.size()));
    EXPECT_EQ(here.tokens_reused + here.tokens_evaluated, static_cast<int64_t>(prompt.size()));

    // Without the preparation the state keeps what the generation prompt and the reply
    // left, which the next prompt leaves sooner.
    options.prepare_next_turn = false;
    Conversation plain(*model, pool, options);
    plain.set_thinking(false);
    Sampler plain_sampler = greedy();
    plain.add_message(first);
    plain.respond(plain_sampler, generation, nullptr);
    EXPECT_EQ(plain.cached_tokens().size(), after_reply);
    plain.add_message(second);
    const TurnResult unprepared = plain.respond(plain_sampler, generation, nullptr);
    EXPECT_LT(unprepared.tokens_reused, here.tokens_reused);
    EXPECT_EQ(unprepared.ids, here.ids);

    // A new conversation over the same store restores the prepared start whole.
    Conversation resumed(*model, pool, options);
    resumed.set_thinking(false);
    resumed.set_prefix_store(&store);
    for (const auto& m : history) resumed.add_message(m);
    resumed.add_message(second);
    Sampler resumed_sampler = greedy();
    const TurnResult again = resumed.respond(resumed_sampler, generation, nullptr);
    EXPECT_EQ(again.tokens_restored, static_cast<int64_t>(start.size()));
    EXPECT_EQ(again.ids, here.ids);
    EXPECT_EQ(store.take_warning(), "");
}

INSTANTIATE_TEST_SUITE_P(Models, NextTurn,
                         ::testing::Values("arch/llama/llama.gguf", "arch/qwen3/qwen3.gguf"),
                         [](const auto& param_info) {
                             return fs::path(param_info.param).stem().string();
                         });

}  // namespace
}  // namespace ember::sessions
