// The session database on real SQLite files: schema and forward migrations, the message
// tree and its branches, full-text search, export, removal, and clear errors for a file
// that is not a database or was written by a newer ember.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "sessions/schema.h"
#include "sessions/session_store.h"
#include "sessions/sqlite.h"
#include "tests/support/temp_dir.h"

namespace ember::sessions {
namespace {

namespace fs = std::filesystem;

using TempDir = ::ember::test::TempDir;

struct OpenDb {
    explicit OpenDb(const std::string& path) : db(path) { migrate(db); }
    Database db;
};

NewMessage msg(const std::string& role, const std::string& content) {
    NewMessage m;
    m.role = role;
    m.content = content;
    return m;
}

std::vector<std::string> contents(const std::vector<StoredMessage>& path) {
    std::vector<std::string> out;
    for (const auto& m : path) out.push_back(m.content);
    return out;
}

TEST(SessionsSchema, FreshDatabaseIsCurrentWalWithForeignKeys) {
    TempDir dir;
    OpenDb o(dir.file("a.db"));
    EXPECT_EQ(o.db.user_version(), kSchemaVersion);
    auto mode = o.db.prepare("PRAGMA journal_mode");
    ASSERT_TRUE(mode.step());
    EXPECT_EQ(mode.column_text(0), "wal");
    auto fk = o.db.prepare("PRAGMA foreign_keys");
    ASSERT_TRUE(fk.step());
    EXPECT_EQ(fk.column_int(0), 1);
    // Opening again is a no-op migration.
    migrate(o.db);
    EXPECT_EQ(o.db.user_version(), kSchemaVersion);
}

TEST(SessionsSchema, MigratesVersionOneDatabaseAndIndexesOldMessages) {
    TempDir dir;
    const std::string path = dir.file("old.db");
    {
        Database db(path);
        migrate(db, 1);  // what an ember of schema version 1 wrote
        ASSERT_EQ(db.user_version(), 1);
        db.exec(
            "INSERT INTO conversations(public_id, title, created_at, updated_at) VALUES "
            "('0123abcd', 'old chat', '2025-01-01T00:00:00.000Z', '2025-01-01T00:00:00.000Z');"
            "INSERT INTO messages(conversation_id, parent_id, role, content, created_at) VALUES "
            "(1, NULL, 'user', 'tell me about marmalade', '2025-01-01T00:00:00.000Z');"
            "UPDATE conversations SET current_leaf = 1;");
    }
    OpenDb o(path);
    EXPECT_EQ(o.db.user_version(), kSchemaVersion);
    SessionStore store(o.db);
    auto info = store.find("0123abcd");
    ASSERT_TRUE(info);
    EXPECT_EQ(info->title, "old chat");
    EXPECT_EQ(info->turns, 1);
    // Messages written before search existed are found.
    const auto hits = store.search("marmalade", 10);
    ASSERT_EQ(hits.size(), 1u);
    EXPECT_EQ(hits[0].conversation, "0123abcd");
    // And the newer tables work on the upgraded file.
    ReplyStats stats;
    stats.finish = "stop";
    NewMessage reply = msg("assistant", "it is orange");
    reply.stats = &stats;
    const int64_t id = store.add_message(info->id, info->current_leaf, reply);
    auto path_now = store.branch(*store.find("0123abcd"));
    ASSERT_EQ(path_now.size(), 2u);
    EXPECT_EQ(path_now.back().id, id);
    ASSERT_TRUE(path_now.back().stats);
    EXPECT_EQ(path_now.back().stats->finish, "stop");
}

TEST(SessionsSchema, VersionFourStoreKeepsItsRepliesAndGainsPathsAndSeeds) {
    TempDir dir;
    const std::string path = dir.file("v4.db");
    {
        Database db(path);
        migrate(db, 4);  // what an ember of schema version 4 wrote: no path, no seeds
        db.exec(
            "INSERT INTO conversations(public_id, title, model, model_fingerprint, created_at, "
            "updated_at) VALUES ('4444abcd', 'v4 chat', 'qwen3.gguf', 'f00d', "
            "'2026-01-01T00:00:00.000Z', '2026-01-01T00:00:00.000Z');"
            "INSERT INTO messages(conversation_id, parent_id, role, content, created_at) VALUES "
            "(1, NULL, 'user', 'hello', '2026-01-01T00:00:00.000Z'), "
            "(1, 1, 'assistant', 'hi there', '2026-01-01T00:00:01.000Z');"
            "INSERT INTO reply_stats VALUES (2, 10, 0, 0, 10, 3, 0.1, 0.2, 0.1, 'stop');"
            "UPDATE conversations SET current_leaf = 2;");
    }
    OpenDb o(path);
    EXPECT_EQ(o.db.user_version(), kSchemaVersion);
    SessionStore store(o.db);
    const auto info = store.find("4444abcd");
    ASSERT_TRUE(info);
    EXPECT_EQ(info->model, "qwen3.gguf");
    EXPECT_EQ(info->model_fingerprint, "f00d");
    EXPECT_EQ(info->model_path, "");  // found again by name and fingerprint
    const auto branch = store.branch(*info);
    ASSERT_EQ(branch.size(), 2u);
    EXPECT_EQ(branch[1].content, "hi there");
    ASSERT_TRUE(branch[1].stats);
    EXPECT_EQ(branch[1].stats->tokens_generated, 3);
    EXPECT_FALSE(branch[1].stats->seed);
    // New conversations record both; a seed past INT64_MAX comes back whole.
    NewConversation n;
    n.model = "m.gguf";
    n.model_path = "/models/m.gguf";
    const auto created = store.create(n);
    ReplyStats stats;
    stats.finish = "length";
    stats.seed = 0xfedcba9876543210ull;
    NewMessage reply = msg("assistant", "sampled");
    reply.stats = &stats;
    store.add_message(created.id, store.add_message(created.id, 0, msg("user", "q")), reply);
    const auto again = store.find(created.public_id);
    ASSERT_TRUE(again);
    EXPECT_EQ(again->model_path, "/models/m.gguf");
    const auto stored = store.branch(*again);
    ASSERT_EQ(stored.size(), 2u);
    ASSERT_TRUE(stored[1].stats && stored[1].stats->seed);
    EXPECT_EQ(*stored[1].stats->seed, 0xfedcba9876543210ull);
}

TEST(SessionsSchema, NewerSchemaIsRefusedByName) {
    TempDir dir;
    const std::string path = dir.file("future.db");
    {
        Database db(path);
        db.set_user_version(kSchemaVersion + 5);
    }
    Database db(path);
    try {
        migrate(db);
        FAIL() << "a newer schema must be refused";
    } catch (const SqliteError& e) {
        EXPECT_NE(std::string(e.what()).find("newer"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
}

TEST(SessionsSchema, FileThatIsNotADatabaseGivesClearError) {
    TempDir dir;
    const std::string path = dir.file("garbage.db");
    {
        std::ofstream out(path, std::ios::binary);
        for (int i = 0; i < 512; ++i) out << "this is not sqlite ";
    }
    try {
        OpenDb o(path);
        FAIL() << "garbage must not open";
    } catch (const SqliteError& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find(path), std::string::npos) << what;
        EXPECT_NE(what.find("not a database"), std::string::npos) << what;
    }
    // A directory where the file should be.
    EXPECT_THROW(OpenDb(dir.file("")), SqliteError);
}

TEST(SessionsStore, RegenerateAndEditMakeBranches) {
    TempDir dir;
    OpenDb o(dir.file("tree.db"));
    SessionStore store(o.db);
    NewConversation n;
    n.model = "llama.gguf";
    n.system_prompt = "be brief";
    const ConversationInfo c = store.create(n);
    EXPECT_EQ(c.public_id.size(), 8u);

    const int64_t u1 = store.add_message(c.id, 0, msg("user", "What is 2+2?\nPlease answer."));
    const int64_t a1 = store.add_message(c.id, u1, msg("assistant", "4"));
    // Regenerate: another reply under the same user message.
    const int64_t a1b = store.add_message(c.id, u1, msg("assistant", "four"));
    const int64_t u2 = store.add_message(c.id, a1b, msg("user", "And 3+3?"));
    const int64_t a2 = store.add_message(c.id, u2, msg("assistant", "six"));
    // Edit the first message: a new root branch.
    const int64_t u1e = store.add_message(c.id, 0, msg("user", "What is 5+5?"));

    auto info = store.find(c.public_id);
    ASSERT_TRUE(info);
    EXPECT_EQ(info->title, "What is 2+2?");  // the first user message's first line
    EXPECT_EQ(info->message_count, 6);
    EXPECT_EQ(info->current_leaf, u1e);
    EXPECT_EQ(info->turns, 1);
    EXPECT_EQ(contents(store.branch(*info)), std::vector<std::string>{"What is 5+5?"});
    EXPECT_EQ(
        contents(store.branch(*info, a2)),
        (std::vector<std::string>{"What is 2+2?\nPlease answer.", "four", "And 3+3?", "six"}));
    EXPECT_EQ(contents(store.branch(*info, a1)),
              (std::vector<std::string>{"What is 2+2?\nPlease answer.", "4"}));

    // Back to the longer branch.
    store.set_current_leaf(c.id, a2);
    info = store.find(c.public_id);
    EXPECT_EQ(info->turns, 2);

    // A parent from another conversation is refused.
    const ConversationInfo other = store.create(NewConversation{});
    EXPECT_THROW(store.add_message(other.id, a2, msg("user", "x")), SqliteError);
    EXPECT_THROW(store.set_current_leaf(other.id, a2), SqliteError);

    // Token ids and thinking survive the round trip.
    const std::vector<int32_t> ids = {5, 6, 7, -1, 123456};
    NewMessage reply = msg("assistant", "ok");
    reply.token_ids = ids;
    reply.thinking = "let me think";
    const int64_t a3 = store.add_message(c.id, a2, reply);
    const auto branch = store.branch(*store.find(c.public_id));
    ASSERT_EQ(branch.back().id, a3);
    EXPECT_EQ(branch.back().token_ids, ids);
    EXPECT_EQ(branch.back().thinking, "let me think");
}

TEST(SessionsStore, ListFindRenameRemove) {
    TempDir dir;
    OpenDb o(dir.file("list.db"));
    SessionStore store(o.db);
    const ConversationInfo a = store.create(NewConversation{});
    store.add_message(a.id, 0, msg("user", "first conversation"));
    const ConversationInfo b = store.create(NewConversation{});
    store.add_message(b.id, 0, msg("user", "second conversation"));

    auto all = store.list(10);
    ASSERT_EQ(all.size(), 2u);
    EXPECT_EQ(all[0].public_id, b.public_id);  // most recently updated first
    EXPECT_EQ(store.most_recent()->public_id, b.public_id);

    // A unique prefix finds it; an unknown id finds nothing.
    EXPECT_EQ(store.find(a.public_id.substr(0, 7))->public_id, a.public_id);
    EXPECT_FALSE(store.find("zzzz"));
    EXPECT_FALSE(store.find(""));

    store.rename(a.id, "Renamed");
    EXPECT_EQ(store.find(a.public_id)->title, "Renamed");
    EXPECT_EQ(store.most_recent()->public_id, a.public_id);

    store.remove(a.id);
    EXPECT_FALSE(store.find(a.public_id));
    EXPECT_TRUE(store.search("first", 10).empty());  // its messages left the index too
    auto left = o.db.prepare("SELECT COUNT(*) FROM messages");
    left.step();
    EXPECT_EQ(left.column_int(0), 1);
}

TEST(SessionsStore, AmbiguousPrefixIsAnError) {
    TempDir dir;
    OpenDb o(dir.file("ambig.db"));
    o.db.exec(
        "INSERT INTO conversations(public_id, created_at, updated_at) VALUES "
        "('abc00001', 'x', 'x'), ('abc00002', 'x', 'x')");
    SessionStore store(o.db);
    EXPECT_THROW(store.find("abc"), SqliteError);
    EXPECT_EQ(store.find("abc00002")->public_id, "abc00002");
}

TEST(SessionsStore, FullTextSearch) {
    TempDir dir;
    OpenDb o(dir.file("fts.db"));
    SessionStore store(o.db);
    const ConversationInfo c = store.create(NewConversation{});
    const int64_t u = store.add_message(c.id, 0, msg("user", "How do I bake sourdough bread?"));
    store.add_message(c.id, u, msg("assistant", "Feed the starter, then knead the dough."));

    auto hits = store.search("sourdough", 10);
    ASSERT_EQ(hits.size(), 1u);
    EXPECT_EQ(hits[0].role, "user");
    EXPECT_NE(hits[0].snippet.find("[sourdough]"), std::string::npos) << hits[0].snippet;
    EXPECT_EQ(store.search("knead starter", 10).size(), 1u);   // every word, any order
    EXPECT_TRUE(store.search("knead sourdough", 10).empty());  // not in one message
    // FTS5 syntax in user input is taken literally, not parsed.
    EXPECT_NO_THROW(store.search("\"bread AND (", 10));
    EXPECT_NO_THROW(store.search("NEAR( * ^", 10));
    EXPECT_TRUE(store.search("   ", 10).empty());
}

TEST(SessionsStore, ExportMarkdownAndJson) {
    TempDir dir;
    OpenDb o(dir.file("export.db"));
    SessionStore store(o.db);
    NewConversation n;
    n.title = "Arithmetic";
    n.model = "qwen3.gguf";
    n.system_prompt = "be exact";
    n.sampling_json = R"({"temperature":0})";
    const ConversationInfo c = store.create(n);
    const int64_t u = store.add_message(c.id, 0, msg("user", "2+2?"));
    ReplyStats stats;
    stats.tokens_generated = 3;
    stats.finish = "stop";
    NewMessage reply = msg("assistant", "4");
    reply.stats = &stats;
    store.add_message(c.id, u, msg("assistant", "four"));  // an older branch
    store.add_message(c.id, u, reply);

    const auto info = *store.find(c.public_id);
    const std::string md = store.export_markdown(info);
    EXPECT_NE(md.find("# Arithmetic"), std::string::npos) << md;
    EXPECT_NE(md.find("## System\n\nbe exact"), std::string::npos) << md;
    EXPECT_NE(md.find("## User\n\n2+2?"), std::string::npos) << md;
    EXPECT_NE(md.find("## Assistant\n\n4"), std::string::npos) << md;
    EXPECT_EQ(md.find("four"), std::string::npos) << "markdown shows the current branch only";

    const auto j = nlohmann::json::parse(store.export_json(info));
    EXPECT_EQ(j["id"], c.public_id);
    EXPECT_EQ(j["sampling"]["temperature"], 0);
    ASSERT_EQ(j["messages"].size(), 3u);  // every branch
    EXPECT_TRUE(j["messages"][0]["parent_id"].is_null());
    EXPECT_EQ(j["messages"][2]["parent_id"], u);
    EXPECT_EQ(j["messages"][2]["stats"]["tokens_generated"], 3);
    EXPECT_EQ(j["branch"].size(), 2u);
}

TEST(SessionsStore, CommittedMessagesSurviveAnUncommittedWriter) {
    // A writer that dies mid-transaction (a crash while saving) loses only its transaction.
    TempDir dir;
    const std::string path = dir.file("crash.db");
    int64_t conversation = 0;
    {
        OpenDb o(path);
        SessionStore store(o.db);
        conversation = store.create(NewConversation{}).id;
        store.add_message(conversation, 0, msg("user", "kept"));
        o.db.exec("BEGIN IMMEDIATE");
        o.db.exec(
            "INSERT INTO messages(conversation_id, role, content, created_at) VALUES "
            "(1, 'assistant', 'half a reply', 'x')");
        // The connection closes without COMMIT.
    }
    OpenDb o(path);
    SessionStore store(o.db);
    const auto all = store.all_messages(conversation);
    ASSERT_EQ(all.size(), 1u);
    EXPECT_EQ(all[0].content, "kept");
}

TEST(SessionsSchema, ConnectionsMigratingANewFileAtOnceAllSucceed) {
    // Two embers started on a new database both find it at version 0; the one that waited
    // for the write lock must see the other's migration instead of re-running it.
    for (int attempt = 0; attempt < 4; ++attempt) {
        TempDir dir;
        const std::string path = dir.file("race.db");
        std::vector<std::thread> threads;
        std::atomic<int> failures{0};
        for (int i = 0; i < 6; ++i) {
            threads.emplace_back([&] {
                try {
                    Database db(path);
                    migrate(db);
                } catch (const std::exception& e) {
                    ADD_FAILURE() << e.what();
                    ++failures;
                }
            });
        }
        for (auto& t : threads) t.join();
        ASSERT_EQ(failures.load(), 0);
        Database db(path);
        EXPECT_EQ(db.user_version(), kSchemaVersion);
    }
}

}  // namespace
}  // namespace ember::sessions

namespace ember::sessions {
namespace {

// Schema 7: a reply's model and settings, a prompt's attachments; the title comes from the
// typed text after the attachments, not from the first attachment's heading.
TEST(SessionsOrigin, RepliesKeepTheirModelAndPromptsTheirAttachments) {
    ember::test::TempDir dir;
    Database db(dir.file("o.db"));
    migrate(db);
    SessionStore store(db);
    const auto c = store.create({});
    const std::string attached = "Output of: ls\n```\na.txt\n```\n\n";
    NewMessage prompt;
    prompt.role = "user";
    prompt.content = attached + "what are these files?";
    prompt.attachments = R"([{"heading": "Output of: ls", "bytes": 6, "length": 27}])";
    prompt.attached_bytes = attached.size();
    const int64_t p = store.add_message(c.id, 0, prompt);
    NewMessage reply;
    reply.role = "assistant";
    reply.content = "text files";
    reply.origin = {"qwen3.gguf", "/m/qwen3.gguf", "f00d", R"({"temperature": 0.3})"};
    store.add_message(c.id, p, reply);
    const auto info = store.find(c.public_id);
    ASSERT_TRUE(info);
    EXPECT_EQ(info->title, "what are these files?");
    const auto branch = store.branch(*info);
    ASSERT_EQ(branch.size(), 2u);
    EXPECT_EQ(branch[0].attachments, prompt.attachments);
    EXPECT_EQ(branch[0].content, prompt.content);  // stored whole: the model read it
    EXPECT_EQ(branch[1].origin.model, "qwen3.gguf");
    EXPECT_EQ(branch[1].origin.model_path, "/m/qwen3.gguf");
    EXPECT_EQ(branch[1].origin.model_fingerprint, "f00d");
    EXPECT_EQ(branch[1].origin.settings, R"({"temperature": 0.3})");
    // Exports say it too.
    EXPECT_NE(store.export_markdown(*info).find("## Assistant (qwen3.gguf)"), std::string::npos);
    const auto json = nlohmann::json::parse(store.export_json(*info));
    EXPECT_EQ(json["messages"][1]["model"], "qwen3.gguf");
    EXPECT_EQ(json["messages"][1]["settings"]["temperature"], 0.3);
    EXPECT_EQ(json["messages"][0]["attachments"][0]["heading"], "Output of: ls");
    // /set: the conversation's settings change in place.
    store.set_settings(c.id, R"({"temperature": 0.5})");
    EXPECT_EQ(store.find(c.public_id)->sampling_json, R"({"temperature": 0.5})");
}

}  // namespace
}  // namespace ember::sessions
