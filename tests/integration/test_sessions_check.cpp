// Damaged message trees in a real session database, against the real binary: a parent chain
// that loops, a message its own parent, a parent that does not exist, and reply token ids
// that are garbage, each in its own conversation beside a healthy one. Every command ends
// within a deadline (an unbounded walk used to spin forever), names the damaged conversation
// in one error line and leaves the others working; a conversation whose ids are damaged still
// continues; `sessions check` reports each problem by id and `--repair` fixes them after a
// byte-for-byte backup.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "sessions/sqlite.h"
#include "tests/support/fixtures.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"

namespace ember::test {
namespace {

namespace fs = std::filesystem;

const char* const kModel = "arch/llama/llama.gguf";
// Long enough for a slow machine to load the tiny model, far shorter than "forever".
constexpr double kDeadline = 60;

CommandResult ember(const std::vector<std::string>& args, const std::string& input = "") {
    std::vector<std::string> argv = {ember_binary()};
    argv.insert(argv.end(), args.begin(), args.end());
    return run_command(argv, input, kDeadline);
}

CommandResult chat(const std::string& db, const std::vector<std::string>& extra) {
    std::vector<std::string> args = {
        "chat", "-m", fixture_path(kModel), "--db", db, "--temp", "0", "-n", "4", "-t", "1"};
    args.insert(args.end(), extra.begin(), extra.end());
    return ember(args);
}

int64_t query_int(const std::string& db, const std::string& sql) {
    sessions::Database d(db);
    auto s = d.prepare(sql);
    s.step();
    return s.column_int(0);
}

// Damage written the way another tool would write it: the sqlite3 shell where there is one
// (foreign keys off, as it starts), else a connection of ours with foreign keys turned off.
void corrupt(const std::string& db, const std::string& sql) {
    const std::string shell = find_in_path("sqlite3");
    if (!shell.empty()) {
        const auto r = run_command({shell, db, sql}, "", kDeadline);
        ASSERT_EQ(r.status, 0) << r.err;
        return;
    }
    sessions::Database d(db);
    d.exec("PRAGMA foreign_keys=OFF");
    d.exec(sql);
}

std::string bytes_of(const std::string& path) {
    return read_file(path);
}

// A database of five one-turn conversations (messages 2k-1: user, 2k: reply, k = 1..5):
// "loop" (1 and 2 each other's parent), "self" (4 its own parent), "dangling" (6's parent
// is message 999, which does not exist), "garbage" (8's token ids a 5-byte blob) and
// "healthy". The "loop" one is made the most recent, the one --continue takes.
struct DamagedStore {
    TempDir dir;
    std::string db = dir.file("ember.db");
    std::map<std::string, std::string> id;  // title -> public id

    void build() {
        for (const char* title : {"loop", "self", "dangling", "garbage", "healthy"}) {
            const auto r = chat(db, {"-p", title});
            ASSERT_EQ(r.status, 0) << r.err;
        }
        sessions::Database d(db);
        auto s = d.prepare("SELECT title, public_id FROM conversations");
        while (s.step()) id[s.column_text(0)] = s.column_text(1);
        ASSERT_EQ(id.size(), 5u);
        ASSERT_EQ(query_int(db, "SELECT COUNT(*) FROM messages"), 10);
        ASSERT_EQ(query_int(db,
                            "SELECT COUNT(*) FROM messages WHERE id = 8 AND "
                            "length(token_ids) > 0"),
                  1);
    }
    void damage() {
        corrupt(db,
                "UPDATE messages SET parent_id = 2 WHERE id = 1;"
                "UPDATE messages SET parent_id = 4 WHERE id = 4;"
                "UPDATE messages SET parent_id = 999 WHERE id = 6;"
                "UPDATE messages SET token_ids = X'FFFFFF7F01' WHERE id = 8;"
                "UPDATE conversations SET activity = 1000 WHERE title = 'loop';");
    }
};

// The one error line of a command refused for a damaged conversation.
void expect_damaged(const CommandResult& r, const std::string& public_id) {
    EXPECT_FALSE(r.timed_out) << "hung";
    EXPECT_EQ(r.status, 1) << r.out << r.err;
    const auto lines = split_lines(r.err);
    ASSERT_EQ(lines.size(), 1u) << r.err;
    EXPECT_EQ(lines[0].rfind("ember: error: conversation " + public_id + " is damaged: ", 0), 0u)
        << lines[0];
    EXPECT_NE(lines[0].find("ember sessions check --repair"), std::string::npos) << lines[0];
}

class SessionsCheck : public ::testing::Test {
protected:
    void SetUp() override {
        EMBER_REQUIRE_FIXTURE(kModel);
        store.build();
        if (HasFatalFailure()) return;
        store.damage();
    }
    DamagedStore store;
};

TEST_F(SessionsCheck, ListShowExportReplayAndRemoveEndAndNameTheDamage) {
    const std::string& db = store.db;
    const auto list = ember({"sessions", "--db", db, "list"});
    EXPECT_FALSE(list.timed_out);
    ASSERT_EQ(list.status, 0) << list.err;
    for (const auto& [title, id] : store.id) {
        EXPECT_NE(list.out.find(id), std::string::npos) << title << "\n" << list.out;
    }

    for (const char* title : {"loop", "self", "dangling"}) {
        SCOPED_TRACE(title);
        const std::string& id = store.id[title];
        expect_damaged(ember({"sessions", "--db", db, "show", id}), id);
        expect_damaged(ember({"sessions", "--db", db, "export", id}), id);
        expect_damaged(ember({"sessions", "--db", db, "export", id, "--format", "json"}), id);
        expect_damaged(ember({"replay", "--db", db, id}), id);
    }
    const auto self = ember({"sessions", "--db", db, "show", store.id["self"]});
    EXPECT_NE(self.err.find("message 4 is its own parent"), std::string::npos) << self.err;
    const auto dangling = ember({"sessions", "--db", db, "show", store.id["dangling"]});
    EXPECT_NE(dangling.err.find("(999)"), std::string::npos) << dangling.err;

    // The healthy ones (garbage ids do not stop the text from showing) work as before.
    for (const char* title : {"healthy", "garbage"}) {
        SCOPED_TRACE(title);
        const auto show = ember({"sessions", "--db", db, "show", store.id[title]});
        EXPECT_EQ(show.status, 0) << show.err;
        EXPECT_NE(show.out.find(title), std::string::npos) << show.out;
        EXPECT_EQ(ember({"sessions", "--db", db, "export", store.id[title]}).status, 0);
        EXPECT_EQ(ember({"replay", "--db", db, store.id[title]}).status, 0);
    }

    // Removing a damaged conversation works (the cascade ends on loops), and only it goes.
    for (const char* title : {"loop", "self", "dangling"}) {
        const auto rm = ember({"sessions", "--db", db, "rm", store.id[title]});
        EXPECT_FALSE(rm.timed_out);
        EXPECT_EQ(rm.status, 0) << rm.err;
        EXPECT_NE(rm.out.find("removed " + store.id[title]), std::string::npos) << rm.out;
    }
    EXPECT_EQ(query_int(db, "SELECT COUNT(*) FROM conversations"), 2);
    EXPECT_EQ(query_int(db, "SELECT COUNT(*) FROM messages"), 4);
    const auto after = ember({"sessions", "--db", db, "list"});
    EXPECT_EQ(after.status, 0);
    EXPECT_NE(after.out.find(store.id["healthy"]), std::string::npos);
    EXPECT_EQ(after.out.find(store.id["loop"]), std::string::npos);
}

TEST_F(SessionsCheck, ContinuingADamagedTreeFailsWithoutAddingAMessage) {
    const std::string& db = store.db;
    const auto cont = chat(db, {"--continue", "-p", "more"});
    expect_damaged(cont, store.id["loop"]);
    const auto resume = chat(db, {"--resume", store.id["dangling"], "-p", "more"});
    expect_damaged(resume, store.id["dangling"]);
    EXPECT_EQ(query_int(db, "SELECT COUNT(*) FROM messages"), 10);
    // Another conversation continues normally.
    const auto healthy = chat(db, {"--resume", store.id["healthy"], "-p", "more"});
    EXPECT_EQ(healthy.status, 0) << healthy.err;
    EXPECT_EQ(query_int(db, "SELECT COUNT(*) FROM messages"), 12);
}

TEST_F(SessionsCheck, GarbageTokenIdsAreTokenizedAgainFromTheText) {
    const std::string& db = store.db;
    for (int attempt = 0; attempt < 2; ++attempt) {
        const auto r = chat(db, {"--resume", store.id["garbage"], "-p", "again"});
        EXPECT_FALSE(r.timed_out);
        ASSERT_EQ(r.status, 0) << r.err;
        EXPECT_FALSE(r.out.empty());
    }
    // Both turns answered: a user message and its reply each, no unanswered one.
    const std::string conv =
        "(SELECT id FROM conversations WHERE public_id = '" + store.id["garbage"] + "')";
    EXPECT_EQ(query_int(db, "SELECT COUNT(*) FROM messages WHERE conversation_id = " + conv), 6);
    EXPECT_EQ(query_int(db,
                        "SELECT COUNT(*) FROM messages WHERE role = 'user' AND "
                        "conversation_id = " +
                            conv),
              3);

    // Ids that are whole int32s but past this model's vocabulary (49152 entries): the same.
    corrupt(db, "UPDATE messages SET token_ids = X'00C00000' WHERE id = 2");
    const auto r = chat(db, {"--resume", store.id["loop"], "-p", "x"});
    EXPECT_EQ(r.status, 1);  // still the loop: refused before any message is added
    corrupt(db, "UPDATE messages SET parent_id = NULL WHERE id = 1");
    const auto fixed = chat(db, {"--resume", store.id["loop"], "-p", "x"});
    EXPECT_EQ(fixed.status, 0) << fixed.err;
}

TEST_F(SessionsCheck, CheckReportsEachProblemAndRepairFixesThemAfterABackup) {
    const std::string& db = store.db;
    const auto check = ember({"sessions", "--db", db, "check"});
    EXPECT_FALSE(check.timed_out);
    EXPECT_EQ(check.status, 1) << check.err;
    auto line_for = [&](const std::string& out, const std::string& title) {
        for (const auto& line : split_lines(out)) {
            if (line.rfind("conversation " + store.id[title] + ": ", 0) == 0) return line;
        }
        return std::string();
    };
    EXPECT_NE(line_for(check.out, "loop").find("messages 1, 2 form a loop"), std::string::npos)
        << check.out;
    EXPECT_NE(line_for(check.out, "self").find("message 4 is its own parent"), std::string::npos)
        << check.out;
    EXPECT_NE(line_for(check.out, "dangling").find("message 6 has a parent (999)"),
              std::string::npos)
        << check.out;
    EXPECT_NE(line_for(check.out, "garbage").find("message 8 has bad token ids"), std::string::npos)
        << check.out;
    EXPECT_EQ(line_for(check.out, "healthy"), "") << check.out;
    EXPECT_NE(check.out.find("4 problems in 4 conversations"), std::string::npos) << check.out;

    const std::string damaged = bytes_of(db);
    ASSERT_FALSE(fs::exists(db + "-wal") && fs::file_size(db + "-wal") > 0);
    const auto repair = ember({"sessions", "--db", db, "check", "--repair"});
    EXPECT_EQ(repair.status, 0) << repair.out << repair.err;
    std::string backup;
    for (const auto& line : split_lines(repair.out)) {
        const std::string prefix = "backup of the damaged database: ";
        if (line.rfind(prefix, 0) == 0) backup = line.substr(prefix.size());
    }
    ASSERT_FALSE(backup.empty()) << repair.out;
    EXPECT_EQ(fs::path(backup).parent_path(), fs::path(db).parent_path());
    EXPECT_EQ(bytes_of(backup), damaged);
    EXPECT_NE(repair.out.find("repaired; no problems left"), std::string::npos) << repair.out;

    const auto clean = ember({"sessions", "--db", db, "check"});
    EXPECT_EQ(clean.status, 0) << clean.out;
    EXPECT_NE(clean.out.find("no problems found"), std::string::npos) << clean.out;
    // Nothing was deleted.
    EXPECT_EQ(query_int(db, "SELECT COUNT(*) FROM messages"), 10);
    // The backup still holds the damage, and check says so.
    EXPECT_EQ(ember({"sessions", "--db", backup, "check"}).status, 1);

    // Every repaired conversation shows and continues.
    for (const char* title : {"loop", "self", "dangling", "garbage"}) {
        SCOPED_TRACE(title);
        EXPECT_EQ(ember({"sessions", "--db", db, "show", store.id[title]}).status, 0);
        const auto more = chat(db, {"--resume", store.id[title], "-p", "more"});
        EXPECT_EQ(more.status, 0) << more.err;
    }
    // The loop's oldest message became its root again: the whole turn is on the branch.
    const auto show = ember({"sessions", "--db", db, "show", store.id["loop"]});
    EXPECT_NE(show.out.find("turns:   2"), std::string::npos) << show.out;
    EXPECT_EQ(query_int(db, "SELECT COUNT(*) FROM messages"), 18);
    EXPECT_EQ(ember({"sessions", "--db", db, "check"}).status, 0);
}

}  // namespace
}  // namespace ember::test

namespace ember::test {
namespace {

TEST(SessionsCheckVocabulary, IdsPastTheModelsVocabularyNeedTheModelToBeSeen) {
    EMBER_REQUIRE_FIXTURE(kModel);
    DamagedStore store;
    store.build();
    // Whole ids below any plausible limit but past this model's 49152 entries.
    corrupt(store.db, "UPDATE messages SET token_ids = X'00C0000001000000' WHERE id = 2");
    const auto plain = ember({"sessions", "--db", store.db, "check"});
    EXPECT_EQ(plain.status, 0) << plain.out;
    const auto with_model =
        ember({"sessions", "--db", store.db, "check", "-m", fixture_path(kModel)});
    EXPECT_EQ(with_model.status, 1) << with_model.out << with_model.err;
    EXPECT_NE(with_model.out.find("conversation " + store.id["loop"] +
                                  ": message 2 has bad token ids (id 49152 is outside the "
                                  "model's vocabulary)"),
              std::string::npos)
        << with_model.out;
    const auto repair =
        ember({"sessions", "--db", store.db, "check", "-m", fixture_path(kModel), "--repair"});
    EXPECT_EQ(repair.status, 0) << repair.out << repair.err;
    EXPECT_EQ(query_int(store.db, "SELECT token_ids IS NULL FROM messages WHERE id = 2"), 1);
    EXPECT_EQ(ember({"sessions", "--db", store.db, "check", "-m", fixture_path(kModel)}).status, 0);
}

// A --db that names no file is said (a typo must not pass for a clean store), and not created.
TEST(SessionsCheckVocabulary, MissingDatabaseIsSaidAndNotCreated) {
    TempDir dir;
    const std::string db = dir.file("none.db");
    const auto r = ember({"sessions", "--db", db, "check", "--repair"});
    EXPECT_EQ(r.status, 1);
    EXPECT_EQ(r.err, "ember: error: no session database at " + db + "\n");
    EXPECT_FALSE(fs::exists(db));
}

}  // namespace
}  // namespace ember::test
