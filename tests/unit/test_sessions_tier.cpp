// The host-memory tier in front of the SQLite state store (sessions/state_tier.h), on real
// fixture models and real database files:
//  - one chat switching between two conversations (as /load does) restores each from memory:
//    the database's restore counters do not move, and with the state tables dropped the
//    replies are still warm; every reply and every K/V row (and a hybrid's recurrent state)
//    equals, bit for bit, those of the same chat over the database alone (a tier of 0, which
//    restores from the database as before), and the replies equal a cold recomputation's;
//  - the byte bound holds after every save, the least recently used go first (a chain
//    loses its end before its start), and a block larger than the bound is not kept;
//  - the choice: a database measured slower than prompt evaluation is not read (the prompt
//    is recomputed), and a prefix the tier holds is restored while the slow rest is not;
//  - a longer prefix another connection stored is found in the database after the tier's.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/generate/conversation.h"
#include "engine/model/forward.h"
#include "engine/model/model.h"
#include "engine/model/state_io.h"
#include "engine/util/thread_pool.h"
#include "sessions/schema.h"
#include "sessions/state_store.h"
#include "sessions/state_tier.h"
#include "sessions/tiered_state_store.h"
#include "tests/support/fixtures.h"
#include "tests/support/temp_dir.h"

namespace ember::sessions {
namespace {

namespace fs = std::filesystem;
using TempDir = ::ember::test::TempDir;

constexpr int64_t kBlockTokens = 16;  // short prompts still fill several blocks

Sampler greedy() {
    SamplingParams p;
    p.temperature = 0;
    return Sampler(p);
}

ConversationOptions chat_options() {
    ConversationOptions o;
    o.context = 512;
    return o;
}

GenerateOptions reply_of(int64_t tokens) {
    GenerateOptions g;
    g.max_tokens = tokens;
    return g;
}

// One saved conversation: its messages, system prompt first.
struct Saved {
    std::vector<ChatMessage> messages;
    std::vector<std::string> questions;
};

Saved conversation(const std::string& system, std::vector<std::string> questions) {
    return Saved{{ChatMessage{"system", system, {}, {}}}, std::move(questions)};
}

// Opens `saved` in `chat` (what /load does: the messages change, the live state stays as it
// is) and asks its question `turn`.
TurnResult ask(Conversation& chat, Saved& saved, size_t turn) {
    chat.clear();
    for (const ChatMessage& m : saved.messages) chat.add_message(m);
    chat.add_message({"user", saved.questions.at(turn), {}, {}});
    Sampler sampler = greedy();
    TurnResult r = chat.respond(sampler, reply_of(12), nullptr);
    saved.messages = chat.messages();
    return r;
}

// Every K/V row the state holds, as bytes (and a hybrid's recurrent state).
std::vector<uint8_t> state_bytes(const InferenceState& state) {
    std::vector<uint8_t> bytes = serialize_kv_rows(state.kv, 0, state.kv.length());
    if (!state.recurrent.empty()) {
        const std::vector<uint8_t> r = serialize_recurrent(state.recurrent);
        bytes.insert(bytes.end(), r.begin(), r.end());
    }
    return bytes;
}

const std::vector<Saved>& two_conversations() {
    static const std::vector<Saved> kStart = {
        conversation("You are a terse assistant.",
                     {"Tell me about the rivers of Europe.", "Which one is the longest?",
                      "And which is the shortest?"}),
        conversation("You answer every question in one short line, politely.",
                     {"What colour are ripe apples?", "Why are they that colour?",
                      "Are there apples of other colours?"})};
    return kStart;
}

// Rounds of one chat switching between the two conversations: round r asks each its
// question r. `between(r)` runs before round r.
struct SwitchRun {
    std::vector<TurnResult> turns;             // round by round, conversation by conversation
    std::vector<std::vector<uint8_t>> states;  // the chat's state after each
};

SwitchRun switching(const Model& model, ThreadPool& pool, PrefixStore& store, size_t rounds,
                    const std::function<void(size_t)>& between) {
    Conversation chat(model, pool, chat_options());
    chat.set_prefix_store(&store);
    std::vector<Saved> saved = two_conversations();
    SwitchRun run;
    for (size_t round = 0; round < rounds; ++round) {
        between(round);
        for (Saved& c : saved) {
            run.turns.push_back(ask(chat, c, round));
            run.states.push_back(state_bytes(chat.state()));
        }
    }
    return run;
}

// The same prompts recomputed cold (prefix cache off): the replies' ids.
std::vector<std::vector<int32_t>> cold_replies(const Model& model, ThreadPool& pool,
                                               const SwitchRun& run, size_t rounds) {
    std::vector<Saved> saved = two_conversations();
    std::vector<std::vector<int32_t>> out;
    for (size_t round = 0; round < rounds; ++round) {
        for (size_t c = 0; c < saved.size(); ++c) {
            ConversationOptions cold_options = chat_options();
            cold_options.prefix_cache = false;
            Conversation cold(model, pool, cold_options);
            Saved copy = saved[c];
            out.push_back(ask(cold, copy, round).ids);
            // The history goes on with the switching chat's reply (equal when all is well).
            saved[c].messages.push_back({"user", saved[c].questions.at(round), {}, {}});
            const TurnResult& r = run.turns.at(round * saved.size() + c);
            saved[c].messages.push_back({"assistant", r.reply, r.ids, r.thinking});
        }
    }
    return out;
}

void set_counter(Database& db, const std::string& name, int64_t value) {
    db.exec("INSERT INTO state_counters(name, value) VALUES ('" + name + "', " +
            std::to_string(value) + ") ON CONFLICT(name) DO UPDATE SET value = excluded.value");
}

class TierChat : public ::testing::TestWithParam<std::string> {};

TEST_P(TierChat, SwitchingConversationsIsServedFromMemoryBitForBit) {
    EMBER_REQUIRE_FIXTURE(GetParam());
    TempDir dir;
    ThreadPool pool(2);
    auto model = Model::load(test::fixture_path(GetParam()));
    StateStoreOptions options;
    options.block_tokens = kBlockTokens;
    constexpr size_t kRounds = 3;

    // The reference: the same chat over the database alone (a tier of 0), as before the tier.
    Database plain_db(dir.file("plain.db"));
    migrate(plain_db);
    StateStore plain(plain_db, *model, KvType::F32, options);
    StateStats plain_before;
    const SwitchRun reference = switching(*model, pool, plain, kRounds, [&](size_t round) {
        if (round == 1) plain_before = read_state_stats(plain_db);
    });
    EXPECT_EQ(plain.take_warning(), "");
    for (size_t i = 2; i < reference.turns.size(); ++i) {
        EXPECT_GT(reference.turns[i].tokens_restored, 0) << i;
        EXPECT_EQ(reference.turns[i].restored_from, "database") << i;
    }
    EXPECT_EQ(read_state_stats(plain_db).restores, plain_before.restores + 4);

    Database db(dir.file("tier.db"));
    migrate(db);
    StateStore durable(db, *model, KvType::F32, options);
    StateTier tier(uint64_t{256} << 20);
    TieredStateStore store(durable, tier);
    StateStats before;
    const SwitchRun run = switching(*model, pool, store, kRounds, [&](size_t round) {
        if (round == 1) {
            EXPECT_EQ(store.take_warning(), "");
            before = read_state_stats(db);
            EXPECT_GT(before.blocks_written, 0);
        }
        if (round == 2) {
            // Round 1 read nothing of the database's state, and wrote through to it.
            EXPECT_EQ(store.take_warning(), "");
            const StateStats after = read_state_stats(db);
            EXPECT_EQ(after.restores, before.restores);
            EXPECT_EQ(after.tokens_wanted, before.tokens_wanted);
            EXPECT_EQ(after.restore_stored_bytes, before.restore_stored_bytes);
            EXPECT_GT(after.blocks_written, before.blocks_written);
            // From here on the state tables are gone: nothing of them can be read.
            db.exec("DROP TABLE state_snapshots; DROP TABLE state_blobs; DROP TABLE state_blocks;");
        }
    });
    // The saves of round 2 could not reach the database (and said so).
    EXPECT_NE(store.take_warning().find("not saved"), std::string::npos);
    EXPECT_GT(tier.stats().restores, 0);

    const auto cold = cold_replies(*model, pool, run, kRounds);
    ASSERT_EQ(run.turns.size(), reference.turns.size());
    for (size_t i = 0; i < run.turns.size(); ++i) {
        const TurnResult& r = run.turns[i];
        if (i >= 2) {  // every switch after the first round
            EXPECT_GT(r.tokens_restored, 0) << i;
            EXPECT_EQ(r.restored_from, "memory") << i;
            EXPECT_EQ(r.resume.path, ResumePath::Restore) << i;
            EXPECT_EQ(r.tokens_restored, reference.turns[i].tokens_restored) << i;
        }
        EXPECT_EQ(r.ids, reference.turns[i].ids) << i;
        EXPECT_EQ(r.ids, cold[i]) << i;
        // Every K/V row (and a hybrid's recurrent state) as the database's restore left it:
        // the logits of everything after are the same too.
        EXPECT_TRUE(run.states[i] == reference.states[i]) << i << ": the state differs";
    }
}

INSTANTIATE_TEST_SUITE_P(Models, TierChat,
                         ::testing::Values("arch/llama/llama.gguf", "arch/qwen3/qwen3.gguf",
                                           "arch/qwen35/qwen35.gguf", "arch/lfm2/lfm2.gguf",
                                           "arch/gemma3/gemma3.gguf"),
                         [](const auto& param_info) {
                             return fs::path(param_info.param).stem().string();
                         });

// A state that evaluated `n` tokens starting with `first` (ids spread over the vocabulary).
struct Evaluated {
    std::vector<int32_t> tokens;
    std::unique_ptr<InferenceState> state;
};

Evaluated evaluate(const Model& model, ThreadPool& pool, int32_t first, int64_t n) {
    Evaluated e;
    const int64_t vocab = model.config().n_vocab;
    for (int64_t i = 0; i < n; ++i) {
        e.tokens.push_back(static_cast<int32_t>((first + i * 37) % vocab));
    }
    e.state = make_state(model.config(), 256, KvType::F32);
    forward(model, *e.state, pool, e.tokens, LogitsWanted::None);
    return e;
}

int64_t reach(StateTier& tier, const StateKey& seed, const Evaluated& e) {
    return tier.match(seed, kBlockTokens, e.tokens, 0, std::ssize(e.tokens), false).reach;
}

TEST(StateTierBound, BytesNeverExceedTheBoundAndTheLeastRecentlyUsedGoFirst) {
    const std::string path = "arch/llama/llama.gguf";
    EMBER_REQUIRE_FIXTURE(path);
    ThreadPool pool(2);
    auto model = Model::load(test::fixture_path(path));
    const StateKey seed = state_seed("tier test", KvType::F32, kBlockTokens);
    const Evaluated a = evaluate(*model, pool, 1, 100);
    const Evaluated b = evaluate(*model, pool, 2, 100);
    const Evaluated c = evaluate(*model, pool, 3, 100);

    // What one conversation takes, measured on a tier of its own.
    StateTier probe(uint64_t{1} << 30);
    probe.save(seed, kBlockTokens, a.tokens, *a.state, 0);
    const uint64_t one = probe.bytes();
    ASSERT_GT(one, 100u * 4);
    const uint64_t cap = one * 5 / 2;  // two conversations and a half

    {
        StateTier tier(cap);
        tier.save(seed, kBlockTokens, a.tokens, *a.state, 0);
        EXPECT_LE(tier.bytes(), cap);
        tier.save(seed, kBlockTokens, b.tokens, *b.state, 0);
        EXPECT_LE(tier.bytes(), cap);
        EXPECT_EQ(reach(tier, seed, a), 100);
        EXPECT_EQ(reach(tier, seed, b), 100);
        tier.save(seed, kBlockTokens, c.tokens, *c.state, 0);
        EXPECT_LE(tier.bytes(), cap);
        // The oldest, a, made the room, from its end: what is left of it is a whole start.
        EXPECT_EQ(reach(tier, seed, b), 100);
        EXPECT_EQ(reach(tier, seed, c), 100);
        const int64_t left = reach(tier, seed, a);
        EXPECT_LT(left, 100);
        EXPECT_EQ(left % kBlockTokens, 0);
        EXPECT_GT(tier.stats().blocks_evicted, 0);
    }
    {
        StateTier tier(cap);
        tier.save(seed, kBlockTokens, a.tokens, *a.state, 0);
        tier.save(seed, kBlockTokens, b.tokens, *b.state, 0);
        // Restoring a makes it the most recent: b goes for c now. The restored rows are the
        // saved ones, bit for bit.
        auto fresh = make_state(model->config(), 256, KvType::F32);
        EXPECT_EQ(tier.restore(seed, kBlockTokens, a.tokens, 0, 100, *fresh), 100);
        EXPECT_TRUE(serialize_kv_rows(fresh->kv, 0, 100) == serialize_kv_rows(a.state->kv, 0, 100));
        tier.save(seed, kBlockTokens, c.tokens, *c.state, 0);
        EXPECT_LE(tier.bytes(), cap);
        EXPECT_EQ(reach(tier, seed, a), 100);
        EXPECT_EQ(reach(tier, seed, c), 100);
        EXPECT_LT(reach(tier, seed, b), 100);
    }
    {
        // Many saves of growing and branching prompts: the bound holds after every one.
        StateTier tier(one);
        for (int i = 0; i < 12; ++i) {
            const Evaluated& e = i % 3 == 0 ? a : i % 3 == 1 ? b : c;
            const auto n = static_cast<size_t>(20 + (i * 7) % 80);
            tier.save(seed, kBlockTokens, std::span<const int32_t>(e.tokens).first(n), *e.state, 0);
            EXPECT_LE(tier.bytes(), one) << i;
        }
    }
    {
        // A bound smaller than one block keeps nothing.
        StateTier tier(1000);
        tier.save(seed, kBlockTokens, a.tokens, *a.state, 0);
        EXPECT_EQ(tier.bytes(), 0u);
        EXPECT_EQ(reach(tier, seed, a), 0);
        EXPECT_GT(tier.stats().blocks_refused, 0);
    }
}

// The choice, end to end: the database's measured restore speed (its counters) set to far
// below the prompt evaluation speed.
TEST(TierChoice, ASlowDatabaseIsNotReadAndAFastPrefixIsRestoredAlone) {
    const std::string path = "arch/llama/llama.gguf";
    EMBER_REQUIRE_FIXTURE(path);
    TempDir dir;
    ThreadPool pool(2);
    auto model = Model::load(test::fixture_path(path));
    Saved saved = conversation("You are a terse assistant.", {"Tell me about the rivers of Europe.",
                                                              "Which one is the longest?"});
    Database db(dir.file("choice.db"));
    migrate(db);
    StateStoreOptions options;
    options.block_tokens = kBlockTokens;
    {
        StateStore store(db, *model, KvType::F32, options);
        Conversation chat(*model, pool, chat_options());
        chat.set_prefix_store(&store);
        ask(chat, saved, 0);
    }
    // 10 MB restored in 10^6 s: 10 bytes a second.
    set_counter(db, "restore_micros", int64_t{1'000'000'000'000});
    set_counter(db, "restore_raw_bytes", 10'000'000);
    Saved cold_copy = saved;
    ConversationOptions cold_options = chat_options();
    cold_options.prefix_cache = false;
    Conversation cold(*model, pool, cold_options);
    const TurnResult recomputed = ask(cold, cold_copy, 1);

    {
        // A new conversation (a new process): the database holds the prompt's start, and
        // reading it would take longer than evaluating it.
        StateStore store(db, *model, KvType::F32, options);
        Conversation chat(*model, pool, chat_options());
        chat.set_prefix_store(&store);
        const StateStats before = read_state_stats(db);
        Saved copy = saved;
        const TurnResult r = ask(chat, copy, 1);
        EXPECT_EQ(r.resume.path, ResumePath::Recompute);
        EXPECT_EQ(r.tokens_restored, 0);
        EXPECT_GT(r.resume.all_restore_seconds, r.resume.all_recompute_seconds);
        EXPECT_EQ(r.ids, recomputed.ids);
        // The lookup counts as ever; nothing was read, and the store knows why.
        const StateStats after = read_state_stats(db);
        EXPECT_EQ(after.restores, before.restores + 1);
        EXPECT_EQ(after.restore_hits, before.restore_hits);
        EXPECT_EQ(after.restore_stored_bytes, before.restore_stored_bytes);
        EXPECT_EQ(after.restores_declined, before.restores_declined + 1);
        EXPECT_GT(after.tokens_declined, before.tokens_declined);
    }
    {
        // A tier too small for the whole conversation holds its start: that is restored
        // from memory and the rest, which only the slow database holds, recomputed.
        StateStore durable(db, *model, KvType::F32, options);
        StateTier probe(uint64_t{1} << 30);
        TieredStateStore probing(durable, probe);
        Conversation first(*model, pool, chat_options());
        first.set_prefix_store(&probing);
        Saved copy = saved;
        copy.messages.resize(1);  // the first turn again, to fill the tier
        ask(first, copy, 0);
        const uint64_t whole = probe.bytes();

        StateTier tier(whole / 2);
        TieredStateStore store(durable, tier);
        Conversation filler(*model, pool, chat_options());
        filler.set_prefix_store(&store);
        Saved again = saved;
        again.messages.resize(1);
        ask(filler, again, 0);
        EXPECT_LE(tier.bytes(), whole / 2);

        Conversation chat(*model, pool, chat_options());
        chat.set_prefix_store(&store);
        Saved resumed = saved;
        const TurnResult r = ask(chat, resumed, 1);
        EXPECT_EQ(r.resume.path, ResumePath::Partial);
        EXPECT_EQ(r.restored_from, "memory");
        EXPECT_GT(r.tokens_restored, 0);
        EXPECT_LT(r.resume.restore_to, r.prompt_tokens - 1);
        EXPECT_EQ(r.ids, recomputed.ids);
    }
}

// Another process writing the same database (here: another connection) may store a longer
// prefix of a conversation the tier holds: the tier notices the write (PRAGMA data_version)
// and asks the database, which restores the rest after the tier's part.
TEST(TierCompleteness, ALongerPrefixAnotherWriterStoredIsRestoredFromTheDatabase) {
    const std::string path = "arch/llama/llama.gguf";
    EMBER_REQUIRE_FIXTURE(path);
    TempDir dir;
    ThreadPool pool(2);
    auto model = Model::load(test::fixture_path(path));
    StateStoreOptions options;
    options.block_tokens = kBlockTokens;
    Database db(dir.file("shared.db"));
    migrate(db);
    StateStore durable(db, *model, KvType::F32, options);
    StateTier tier(uint64_t{256} << 20);
    TieredStateStore store(durable, tier);
    Saved saved = conversation("You are a terse assistant.",
                               {"Tell me about the rivers of Europe.", "Which one is the longest?",
                                "And which is the shortest?"});
    {
        Conversation chat(*model, pool, chat_options());
        chat.set_prefix_store(&store);
        ask(chat, saved, 0);
    }
    int64_t other_reach = 0;
    {
        // The other writer goes on with the conversation on its own connection.
        Database other_db(dir.file("shared.db"));
        StateStore other(other_db, *model, KvType::F32, options);
        Conversation chat(*model, pool, chat_options());
        chat.set_prefix_store(&other);
        ask(chat, saved, 1);
        other_reach = static_cast<int64_t>(chat.cached_tokens().size());
        EXPECT_EQ(other.take_warning(), "");
    }
    // The reference: the database as it is now, alone (a copy: the turn below stores more).
    db.exec("VACUUM INTO '" + dir.file("reference.db") + "'");
    Saved reference_copy = saved;
    Conversation chat(*model, pool, chat_options());
    chat.set_prefix_store(&store);
    const TurnResult r = ask(chat, saved, 2);
    EXPECT_EQ(r.restored_from, "memory+database");
    EXPECT_EQ(r.resume.path, ResumePath::Restore);
    EXPECT_GT(r.tokens_restored, other_reach / 2);
    // As the database alone restores it.
    Database reference_db(dir.file("reference.db"));
    StateStore plain(reference_db, *model, KvType::F32, options);
    Conversation alone(*model, pool, chat_options());
    alone.set_prefix_store(&plain);
    const TurnResult expected = ask(alone, reference_copy, 2);
    EXPECT_EQ(expected.restored_from, "database");
    EXPECT_EQ(r.tokens_restored, expected.tokens_restored);
    EXPECT_EQ(r.ids, expected.ids);
    EXPECT_TRUE(state_bytes(chat.state()) == state_bytes(alone.state()));
}

}  // namespace
}  // namespace ember::sessions
