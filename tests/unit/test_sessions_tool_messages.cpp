// Tool calls in the session database (schema 6): a version 5 file is rebuilt with the 'tool'
// role and the tool columns and keeps everything it held (ids, branches, reply stats, the
// full-text index, the id sequence); tool calls and tool results round-trip and show in the
// exports.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "sessions/schema.h"
#include "sessions/session_store.h"
#include "sessions/sqlite.h"
#include "tests/support/temp_dir.h"

namespace ember::sessions {
namespace {

using TempDir = ::ember::test::TempDir;

int64_t query_int(Database& db, const std::string& sql) {
    Statement s = db.prepare(sql);
    EXPECT_TRUE(s.step()) << sql;
    return s.column_int(0);
}

TEST(SessionsToolSchema, VersionFiveFileIsRebuiltKeepingEverything) {
    TempDir dir;
    const std::string path = dir.file("v5.db");
    {
        Database db(path);
        migrate(db, 5);
        db.exec(
            "INSERT INTO conversations(public_id, title, created_at, updated_at) VALUES "
            "('5555abcd', 'v5 chat', '2026-01-01T00:00:00.000Z', '2026-01-01T00:00:00.000Z');"
            "INSERT INTO messages(conversation_id, parent_id, role, content, created_at) VALUES "
            "(1, NULL, 'user', 'tell me about quinces', '2026-01-01T00:00:00.000Z'), "
            "(1, 1, 'assistant', 'they are fragrant', '2026-01-01T00:00:01.000Z'), "
            "(1, 1, 'assistant', 'a deleted branch', '2026-01-01T00:00:02.000Z');"
            "INSERT INTO reply_stats VALUES (2, 10, 0, 0, 10, 3, 0.1, 0.2, 0.1, 'stop', 7);"
            "DELETE FROM messages WHERE id = 3;"
            "UPDATE conversations SET current_leaf = 2;");
        ASSERT_EQ(query_int(db, "SELECT seq FROM sqlite_sequence WHERE name = 'messages'"), 3);
    }
    Database db(path);
    migrate(db);
    EXPECT_EQ(db.user_version(), kSchemaVersion);
    EXPECT_EQ(query_int(db, "PRAGMA foreign_keys"), 1);  // back on after the rebuild
    EXPECT_EQ(query_int(db, "SELECT COUNT(*) FROM pragma_foreign_key_check"), 0);
    SessionStore store(db);
    const auto info = store.find("5555abcd");
    ASSERT_TRUE(info);
    const auto branch = store.branch(*info);
    ASSERT_EQ(branch.size(), 2u);
    EXPECT_EQ(branch[0].id, 1);
    EXPECT_EQ(branch[1].id, 2);
    EXPECT_EQ(branch[1].content, "they are fragrant");
    ASSERT_TRUE(branch[1].stats);
    EXPECT_EQ(branch[1].stats->seed, 7u);
    EXPECT_TRUE(branch[1].tool_calls.empty());
    // The search index still finds old messages, and new ones.
    ASSERT_EQ(store.search("quinces", 10).size(), 1u);
    // The id of the deleted message is not given out again.
    NewMessage next;
    next.role = "user";
    next.content = "and medlars?";
    EXPECT_EQ(store.add_message(info->id, 2, next), 4);
    EXPECT_EQ(store.search("medlars", 10).size(), 1u);
    // Removing the conversation still cascades through the rebuilt table.
    store.remove(info->id);
    EXPECT_EQ(query_int(db, "SELECT COUNT(*) FROM messages"), 0);
    EXPECT_EQ(query_int(db, "SELECT COUNT(*) FROM reply_stats"), 0);
}

TEST(SessionsToolSchema, ToolCallsAndResultsRoundTripAndExport) {
    TempDir dir;
    Database db(dir.file("t.db"));
    migrate(db);
    SessionStore store(db);
    NewConversation c;
    c.title = "tools";
    const ConversationInfo info = store.create(c);
    NewMessage user;
    user.role = "user";
    user.content = "what is in notes.txt?";
    const int64_t u = store.add_message(info.id, 0, user);
    const std::string calls =
        R"([{"id":"call_1","name":"read_file","arguments":"{\"path\": \"notes.txt\"}"}])";
    NewMessage reply;
    reply.role = "assistant";
    reply.content = "";
    reply.tool_calls = calls;
    const int64_t a = store.add_message(info.id, u, reply);
    NewMessage result;
    result.role = "tool";
    result.content = "buy quinces\n";
    result.tool_call_id = "call_1";
    result.tool_name = "read_file";
    store.add_message(info.id, a, result);

    const auto branch = store.branch(*store.find(info.public_id));
    ASSERT_EQ(branch.size(), 3u);
    EXPECT_EQ(branch[1].tool_calls, calls);
    EXPECT_EQ(branch[2].role, "tool");
    EXPECT_EQ(branch[2].content, "buy quinces\n");
    EXPECT_EQ(branch[2].tool_call_id, "call_1");
    EXPECT_EQ(branch[2].tool_name, "read_file");
    EXPECT_TRUE(branch[0].tool_calls.empty());

    const std::string md = store.export_markdown(*store.find(info.public_id));
    EXPECT_NE(md.find("Tool call: `read_file` {\"path\": \"notes.txt\"}"), std::string::npos) << md;
    EXPECT_NE(md.find("## Tool result (read_file)"), std::string::npos) << md;
    const auto exported = nlohmann::json::parse(store.export_json(*store.find(info.public_id)));
    EXPECT_EQ(exported["messages"][1]["tool_calls"][0]["name"], "read_file");
    EXPECT_EQ(exported["messages"][2]["tool_call_id"], "call_1");
}

}  // namespace
}  // namespace ember::sessions
