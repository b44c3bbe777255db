// Damaged message trees on real SQLite files: parent chains that loop (two messages, a
// message its own parent), parents that are missing or in another conversation, a lost
// current message, and token ids that are not ids. Every walk ends (each test would hang
// otherwise, so each runs its walks on a thread with a deadline), the damaged conversation is
// named, the others work, and the check finds and the repair fixes each problem.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <iterator>

#include "sessions/integrity.h"
#include "sessions/schema.h"
#include "sessions/session_store.h"
#include "sessions/sqlite.h"
#include "tests/support/temp_dir.h"

namespace ember::sessions {
namespace {

using TempDir = ::ember::test::TempDir;

NewMessage msg(const std::string& role, const std::string& content) {
    NewMessage m;
    m.role = role;
    m.content = content;
    return m;
}

// Runs `f` on a thread and fails the test (without waiting for it) when it has not finished
// within a few seconds: an unbounded walk shows as a failure instead of a hung suite.
template <typename F>
auto within_deadline(F f) {
    auto task = std::async(std::launch::async, std::move(f));
    if (task.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
        ADD_FAILURE() << "did not finish within 10 s (an unbounded walk)";
        std::abort();  // the thread cannot be stopped; a hung walk must not hang the suite
    }
    return task.get();
}

struct Store {
    explicit Store(const std::string& path) : db(path) {
        migrate(db);
        // Damage is written the way another tool would: without foreign-key checks.
        db.exec("PRAGMA foreign_keys=OFF");
    }
    // A conversation of `turns` user/assistant pairs; the replies carry token ids.
    ConversationInfo conversation(const std::string& title, int turns) {
        SessionStore store(db);
        NewConversation n;
        n.title = title;
        ConversationInfo c = store.create(n);
        int64_t parent = 0;
        const std::vector<int32_t> ids = {5, 6, 7};
        for (int i = 0; i < turns; ++i) {
            parent = store.add_message(c.id, parent, msg("user", title + " q" + std::to_string(i)));
            NewMessage reply = msg("assistant", title + " a" + std::to_string(i));
            reply.token_ids = ids;
            parent = store.add_message(c.id, parent, reply);
        }
        return *store.find(c.public_id);
    }
    void sql(const std::string& text) { db.exec(text); }
    Database db;
};

std::vector<ProblemKind> kinds(const std::vector<IntegrityProblem>& problems) {
    std::vector<ProblemKind> out;
    for (const auto& p : problems) out.push_back(p.kind);
    return out;
}

TEST(SessionsIntegrity, CleanDatabaseHasNoProblems) {
    TempDir dir;
    Store s(dir.file("a.db"));
    s.conversation("one", 2);
    s.conversation("two", 1);
    EXPECT_TRUE(check_integrity(s.db).empty());
}

TEST(SessionsIntegrity, TwoMessageLoopIsNamedAndOthersStillWork) {
    TempDir dir;
    Store s(dir.file("a.db"));
    const auto bad = s.conversation("bad", 2);  // messages 1..4
    const auto good = s.conversation("good", 1);
    s.sql("UPDATE messages SET parent_id = 2 WHERE id = 1");
    SessionStore store(s.db);
    // Listing and finding count turns through the same chains: bounded.
    const auto all = within_deadline([&] { return store.list(-1); });
    EXPECT_EQ(all.size(), 2u);
    const auto info = within_deadline([&] { return store.find(bad.public_id); });
    ASSERT_TRUE(info.has_value());
    try {
        within_deadline([&] { return store.branch(*info); });
        FAIL() << "a looping branch was read";
    } catch (const DamagedConversation& e) {
        EXPECT_EQ(e.public_id(), bad.public_id);
        EXPECT_NE(std::string(e.what()).find("conversation " + bad.public_id + " is damaged"),
                  std::string::npos)
            << e.what();
    }
    EXPECT_THROW(within_deadline([&] { return store.export_markdown(*info); }),
                 DamagedConversation);
    EXPECT_EQ(store.branch(*store.find(good.public_id)).size(), 2u);

    const auto problems = check_integrity(s.db);
    ASSERT_EQ(problems.size(), 1u);
    EXPECT_EQ(problems[0].kind, ProblemKind::Cycle);
    EXPECT_EQ(problems[0].public_id, bad.public_id);
    EXPECT_EQ(problems[0].message_id, 1);  // the oldest in the loop
    EXPECT_NE(problems[0].detail.find("messages 1, 2"), std::string::npos) << problems[0].detail;

    repair_integrity(s.db, problems);
    EXPECT_TRUE(check_integrity(s.db).empty());
    // The oldest message became the root again: the whole branch is back.
    EXPECT_EQ(store.branch(*store.find(bad.public_id)).size(), 4u);
    EXPECT_EQ(store.find(bad.public_id)->turns, 2);
}

TEST(SessionsIntegrity, SelfParentIsFoundAndRemovable) {
    TempDir dir;
    Store s(dir.file("a.db"));
    const auto bad = s.conversation("bad", 1);  // 1, 2
    const auto good = s.conversation("good", 1);
    s.sql("UPDATE messages SET parent_id = 2 WHERE id = 2");
    SessionStore store(s.db);
    const auto info = within_deadline([&] { return store.find(bad.public_id); });
    ASSERT_TRUE(info);
    EXPECT_THROW(within_deadline([&] { return store.branch(*info); }), DamagedConversation);
    const auto problems = check_integrity(s.db);
    ASSERT_EQ(kinds(problems), std::vector<ProblemKind>{ProblemKind::Cycle});
    EXPECT_EQ(problems[0].message_id, 2);
    EXPECT_NE(problems[0].detail.find("message 2 is its own parent"), std::string::npos);
    // Removal cascades through the loop and ends (with foreign keys on, as ember has them).
    s.sql("PRAGMA foreign_keys=ON");
    within_deadline([&] {
        store.remove(info->id);
        return 0;
    });
    EXPECT_FALSE(store.find(bad.public_id));
    EXPECT_EQ(store.branch(*store.find(good.public_id)).size(), 2u);
    EXPECT_TRUE(check_integrity(s.db).empty());
}

TEST(SessionsIntegrity, LongLoopBelowTheLeafIsFound) {
    TempDir dir;
    Store s(dir.file("a.db"));
    const auto bad = s.conversation("bad", 3);  // 1..6, leaf 6
    // 6 -> 5 -> 4 -> 3 -> 2 -> 1 -> 4: the leaf's chain enters a loop of 4, 3, 2, 1.
    s.sql("UPDATE messages SET parent_id = 4 WHERE id = 1");
    SessionStore store(s.db);
    EXPECT_THROW(within_deadline([&] { return store.branch(*store.find(bad.public_id)); }),
                 DamagedConversation);
    const auto problems = check_integrity(s.db);
    ASSERT_EQ(kinds(problems), std::vector<ProblemKind>{ProblemKind::Cycle});
    EXPECT_EQ(problems[0].message_id, 1);
    repair_integrity(s.db, problems);
    EXPECT_TRUE(check_integrity(s.db).empty());
    EXPECT_EQ(store.branch(*store.find(bad.public_id)).size(), 6u);
}

TEST(SessionsIntegrity, MissingAndForeignParentsAndLostLeaf) {
    TempDir dir;
    Store s(dir.file("a.db"));
    const auto a = s.conversation("a", 1);  // 1, 2
    const auto b = s.conversation("b", 1);  // 3, 4
    const auto c = s.conversation("c", 1);  // 5, 6
    s.sql("UPDATE messages SET parent_id = 999 WHERE id = 2");
    s.sql("UPDATE messages SET parent_id = 1 WHERE id = 4");
    s.sql("UPDATE conversations SET current_leaf = 2 WHERE id = " + std::to_string(c.id));
    SessionStore store(s.db);
    EXPECT_THROW(store.branch(*store.find(a.public_id)), DamagedConversation);
    EXPECT_THROW(store.branch(*store.find(b.public_id)), DamagedConversation);
    const auto problems = check_integrity(s.db);
    EXPECT_EQ(kinds(problems),
              (std::vector<ProblemKind>{ProblemKind::MissingParent, ProblemKind::ForeignParent,
                                        ProblemKind::MissingLeaf}));
    EXPECT_EQ(problems[0].public_id, a.public_id);
    EXPECT_EQ(problems[0].other_id, 999);
    EXPECT_EQ(problems[1].public_id, b.public_id);
    EXPECT_EQ(problems[2].public_id, c.public_id);
    repair_integrity(s.db, problems);
    EXPECT_TRUE(check_integrity(s.db).empty());
    // Nothing was deleted: the message with the bad parent is a root now.
    auto count = s.db.prepare("SELECT COUNT(*) FROM messages");
    ASSERT_TRUE(count.step());
    EXPECT_EQ(count.column_int(0), 6);
    const auto branch_a = store.branch(*store.find(a.public_id));
    ASSERT_EQ(branch_a.size(), 1u);
    EXPECT_EQ(branch_a[0].id, 2);
    EXPECT_EQ(store.find(c.public_id)->current_leaf, 6);
}

TEST(SessionsIntegrity, RemovingAConversationKeepsAnotherOnesMessageThatPointsIntoIt) {
    TempDir dir;
    Store s(dir.file("a.db"));
    const auto a = s.conversation("a", 1);  // 1, 2
    const auto b = s.conversation("b", 1);  // 3, 4
    s.sql("UPDATE messages SET parent_id = 2 WHERE id = 3");
    s.sql("PRAGMA foreign_keys=ON");
    SessionStore store(s.db);
    store.remove(a.id);
    const auto branch = store.branch(*store.find(b.public_id));
    ASSERT_EQ(branch.size(), 2u);
    EXPECT_EQ(branch[0].id, 3);
    EXPECT_EQ(branch[0].parent_id, 0);
    EXPECT_TRUE(check_integrity(s.db).empty());
}

TEST(SessionsIntegrity, MessagesOfAMissingConversationAreNamedByRowId) {
    TempDir dir;
    Store s(dir.file("a.db"));
    s.conversation("a", 1);  // 1, 2
    s.sql("UPDATE messages SET parent_id = 1 WHERE id = 1");
    s.sql("DELETE FROM conversations");  // foreign keys off: the messages stay
    const auto problems = check_integrity(s.db);
    ASSERT_EQ(problems.size(), 1u);
    EXPECT_EQ(problems[0].public_id, "#1 (no such conversation)");
}

TEST(SessionsIntegrity, BadTokenIdsAreReportedIgnoredOnReadAndCleared) {
    TempDir dir;
    Store s(dir.file("a.db"));
    const auto c = s.conversation("c", 3);                                      // replies 2, 4, 6
    s.sql("UPDATE messages SET token_ids = X'0102030405' WHERE id = 2");        // not whole ids
    s.sql("UPDATE messages SET token_ids = X'FFFFFFFF' WHERE id = 4");          // -1
    s.sql("UPDATE messages SET token_ids = X'FFFFFF7F01000000' WHERE id = 6");  // 2^31 - 1
    SessionStore store(s.db);
    const auto branch = store.branch(*store.find(c.public_id));
    ASSERT_EQ(branch.size(), 6u);
    EXPECT_TRUE(branch[1].token_ids_damaged);
    EXPECT_TRUE(branch[1].token_ids.empty());
    // Whole ids, negative or past every vocabulary: only a model knows its own size (the
    // check reports them all the same).
    EXPECT_FALSE(branch[3].token_ids_damaged);
    EXPECT_FALSE(token_ids_fit(branch[3], 49152));
    EXPECT_FALSE(branch[5].token_ids_damaged);
    EXPECT_FALSE(token_ids_fit(branch[5], 49152));
    EXPECT_TRUE(token_ids_fit(branch[5], 0));
    EXPECT_FALSE(token_ids_fit(branch[1], 0));

    const auto problems = check_integrity(s.db);
    EXPECT_EQ(kinds(problems), std::vector<ProblemKind>(3, ProblemKind::BadTokenIds));
    EXPECT_NE(problems[0].detail.find("message 2"), std::string::npos);
    repair_integrity(s.db, problems);
    EXPECT_TRUE(check_integrity(s.db).empty());
    for (const auto& m : store.branch(*store.find(c.public_id))) {
        EXPECT_TRUE(m.token_ids.empty());
        EXPECT_TRUE(token_ids_fit(m, 49152));
    }
}

std::string bytes_of(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(SessionsIntegrity, BackupIsACopyOfTheDatabaseBeforeTheRepair) {
    TempDir dir;
    const std::string path = dir.file("a.db");
    {
        Store s(path);
        s.conversation("c", 2);
        s.sql("UPDATE messages SET parent_id = 2 WHERE id = 1");
    }
    const std::string before = bytes_of(path);  // no log left: the last connection closed
    Database db(path);
    migrate(db);
    const std::string backup = backup_database(db);
    EXPECT_EQ(std::filesystem::path(backup).parent_path(),
              std::filesystem::path(path).parent_path());
    EXPECT_EQ(backup.rfind(path + ".backup-", 0), 0u) << backup;
    EXPECT_EQ(bytes_of(backup), before);
    repair_integrity(db, check_integrity(db));
    EXPECT_TRUE(check_integrity(db).empty());
    // The backup still holds the damage.
    Database old(backup);
    EXPECT_EQ(check_integrity(old).size(), 1u);
    // A second backup in the same second gets its own name.
    EXPECT_NE(backup_database(db), backup);
}

}  // namespace
}  // namespace ember::sessions
