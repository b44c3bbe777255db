// A session database the user cannot write, against the real binary (issue 41, "the store"):
// `sessions list/show/export/check` read it as it is and say "read-only"; commands that must
// write (chat into it, rm, check --repair) stop with one line naming the file; nothing is
// created beside it and nothing in it changes (no migration either).
//
// Tests run as root here, and root writes a 0444 file anyway, so "cannot write" is made real
// in two ways, each probed first and asserted to refuse a write (never a silent pass):
//  - as another user: the binary runs under `setpriv` as nobody (65534), the file 0444 in a
//    0555 directory, so neither the file nor its -wal and -shm can be written or created;
//  - as root on a read-only file system: `unshare -m` and a read-only bind mount of the
//    directory, inside which the binary runs.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "sessions/sqlite.h"
#include "tests/support/fixtures.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"

namespace ember::test {
namespace {

namespace fs = std::filesystem;

const char* const kModel = "arch/llama/llama.gguf";
constexpr double kDeadline = 60;

CommandResult run(const std::vector<std::string>& wrapper, const std::vector<std::string>& args) {
    std::vector<std::string> argv = wrapper;
    argv.push_back(ember_binary());
    argv.insert(argv.end(), args.begin(), args.end());
    return run_command(argv, "", kDeadline);
}

std::string read_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

// nobody, with a home and XDG directories it may read (root's are closed to it).
std::vector<std::string> as_nobody() {
    const std::string tmp = fs::temp_directory_path().string();
    return {find_in_path("setpriv"),
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "env",
            "HOME=" + tmp,
            "XDG_CONFIG_HOME=" + tmp + "/ember-ro-none",
            "XDG_DATA_HOME=" + tmp + "/ember-ro-none"};
}

// Runs the rest of the command line as root inside a private mount namespace where `dir` is
// a read-only bind mount of itself.
std::vector<std::string> on_read_only_mount(const std::string& dir) {
    const std::string q = shell_quote(dir);
    return {find_in_path("unshare"),
            "-m",
            "sh",
            "-c",
            "mount --bind " + q + " " + q + " && mount -o remount,bind,ro " + q + " && exec \"$@\"",
            "sh"};
}

// One stored conversation, made by a real chat, in a directory of its own.
struct Store {
    TempDir root{"ember-ro"};
    std::string dir = root.file("store");
    std::string db = dir + "/ember.db";
    std::string id;

    void build() {
        fs::create_directories(dir);
        const auto r = run_command({ember_binary(), "chat", "-m", fixture_path(kModel), "--db", db,
                                    "--temp", "0", "-n", "4", "-t", "1", "-p", "lighthouse"},
                                   "", kDeadline);
        ASSERT_EQ(r.status, 0) << r.err;
        {
            sessions::Database d(db);
            auto s = d.prepare("SELECT public_id FROM conversations");
            ASSERT_TRUE(s.step());
            id = s.column_text(0);
        }
        ASSERT_FALSE(fs::exists(db + "-wal")) << "the last connection removes its log";
    }
    // The file 0444 in a 0555 directory, reachable (0755) from the temp root.
    void make_unwritable() {
        ASSERT_EQ(::chmod(root.path().c_str(), 0755), 0);
        ASSERT_EQ(::chmod(db.c_str(), 0444), 0);
        ASSERT_EQ(::chmod(dir.c_str(), 0555), 0);
    }
    ~Store() {
        ::chmod(dir.c_str(), 0755);  // so that TempDir can remove it
    }
    std::vector<std::string> beside() const {
        std::vector<std::string> names;
        for (const auto& e : fs::directory_iterator(dir)) {
            names.push_back(e.path().filename().string());
        }
        return names;
    }
};

// The wrapper really refuses a write to `dir` (else the test would prove nothing).
void expect_cannot_write(const std::vector<std::string>& wrapper, const std::string& dir,
                         bool* usable) {
    std::vector<std::string> probe = wrapper;
    probe.insert(probe.end(), {"sh", "-c", "echo x > " + shell_quote(dir + "/probe")});
    const auto r = run_command(probe, "", kDeadline);
    *usable = r.status != 0 && !fs::exists(dir + "/probe");
}

// One line of stderr that names the file and says read-only; the exit status is not 0.
void expect_refused(const CommandResult& r, const std::string& db, const std::string& what) {
    EXPECT_FALSE(r.timed_out) << what;
    EXPECT_NE(r.status, 0) << what << "\n" << r.out;
    EXPECT_EQ(split_lines(r.err).size(), 1u) << what << "\n" << r.err;
    EXPECT_NE(r.err.find(db), std::string::npos) << what << "\n" << r.err;
    EXPECT_NE(r.err.find("read-only"), std::string::npos) << what << "\n" << r.err;
}

// list/show/export/check read it and say "read-only"; rm, rename and check --repair refuse.
void expect_readable_not_writable(const std::vector<std::string>& wrapper, const Store& s) {
    const std::string before = read_bytes(s.db);
    const auto list = run(wrapper, {"sessions", "--db", s.db, "list"});
    ASSERT_EQ(list.status, 0) << list.err;
    EXPECT_NE(list.out.find(s.id), std::string::npos) << list.out;
    EXPECT_NE(list.err.find("read-only"), std::string::npos) << list.err;
    EXPECT_NE(list.err.find(s.db), std::string::npos) << list.err;

    const auto show = run(wrapper, {"sessions", "--db", s.db, "show", s.id});
    ASSERT_EQ(show.status, 0) << show.err;
    EXPECT_NE(show.out.find("lighthouse"), std::string::npos) << show.out;
    EXPECT_NE(show.err.find("read-only"), std::string::npos) << show.err;

    const auto json = run(wrapper, {"sessions", "--db", s.db, "export", s.id, "--format", "json"});
    ASSERT_EQ(json.status, 0) << json.err;
    EXPECT_NE(json.out.find("lighthouse"), std::string::npos) << json.out;
    EXPECT_EQ(json.out.find("read-only"), std::string::npos) << "the note is on stderr";

    const auto check = run(wrapper, {"sessions", "--db", s.db, "check"});
    EXPECT_EQ(check.status, 0) << check.err;
    EXPECT_NE(check.out.find("no problems found"), std::string::npos) << check.out;

    expect_refused(run(wrapper, {"sessions", "--db", s.db, "rm", s.id}), s.db, "rm");
    expect_refused(run(wrapper, {"sessions", "--db", s.db, "rename", s.id, "x"}), s.db, "rename");
    expect_refused(run(wrapper, {"sessions", "--db", s.db, "check", "--repair"}), s.db,
                   "check --repair");

    EXPECT_EQ(read_bytes(s.db), before) << "the database changed";
    EXPECT_EQ(s.beside(), std::vector<std::string>{"ember.db"}) << "files created beside it";
}

TEST(ReadOnlyStore, AnotherUserReadsA0444FileInA0555Directory) {
    if (find_in_path("setpriv").empty()) GTEST_SKIP() << "no setpriv to run as another user";
    Store s;
    ASSERT_NO_FATAL_FAILURE(s.build());
    ASSERT_NO_FATAL_FAILURE(s.make_unwritable());
    bool usable = false;
    expect_cannot_write(as_nobody(), s.dir, &usable);
    if (!usable) GTEST_SKIP() << "setpriv as nobody could still write the directory here";
    expect_readable_not_writable(as_nobody(), s);
}

TEST(ReadOnlyStore, RootReadsItOnAReadOnlyMountAndChatIsRefused) {
    if (find_in_path("unshare").empty()) GTEST_SKIP() << "no unshare for a private mount";
    Store s;
    ASSERT_NO_FATAL_FAILURE(s.build());
    const auto ro = on_read_only_mount(s.dir);
    bool usable = false;
    expect_cannot_write(ro, s.dir, &usable);
    if (!usable) {
        GTEST_SKIP() << "a read-only bind mount is not allowed here (unshare -m / mount failed)";
    }
    expect_readable_not_writable(ro, s);

    const std::string before = read_bytes(s.db);
    const auto chat = run(ro, {"chat", "-m", fixture_path(kModel), "--db", s.db, "--temp", "0",
                               "-n", "4", "-t", "1", "-p", "more"});
    expect_refused(chat, s.db, "chat");
    EXPECT_NE(chat.err.find("--no-db"), std::string::npos) << chat.err;
    EXPECT_EQ(chat.out, "") << "refused before the model answers";
    const auto resume = run(ro, {"chat", "-m", fixture_path(kModel), "--db", s.db, "--resume", s.id,
                                 "--temp", "0", "-n", "4", "-t", "1", "-p", "more"});
    expect_refused(resume, s.db, "chat --resume");
    EXPECT_EQ(read_bytes(s.db), before);
}

TEST(ReadOnlyStore, AnOlderSchemaIsNotMigratedButNamed) {
    if (find_in_path("setpriv").empty()) GTEST_SKIP() << "no setpriv to run as another user";
    Store s;
    ASSERT_NO_FATAL_FAILURE(s.build());
    {
        sessions::Database d(s.db);
        d.set_user_version(5);
    }
    ASSERT_NO_FATAL_FAILURE(s.make_unwritable());
    bool usable = false;
    expect_cannot_write(as_nobody(), s.dir, &usable);
    if (!usable) GTEST_SKIP() << "setpriv as nobody could still write the directory here";
    const std::string before = read_bytes(s.db);
    const auto list = run(as_nobody(), {"sessions", "--db", s.db, "list"});
    EXPECT_NE(list.status, 0);
    EXPECT_EQ(split_lines(list.err).size(), 1u) << list.err;
    EXPECT_NE(list.err.find("read-only"), std::string::npos) << list.err;
    EXPECT_NE(list.err.find("schema version 5"), std::string::npos) << list.err;
    EXPECT_EQ(read_bytes(s.db), before) << "a read-only store was migrated";
}

// A log with committed changes but no -shm, in a directory nobody may write: SQLite cannot
// read the log, and an immutable open would show the database without them. Refused, naming
// the log.
TEST(ReadOnlyStore, ALogThatCannotBeReadIsRefusedNotIgnored) {
    if (find_in_path("setpriv").empty()) GTEST_SKIP() << "no setpriv to run as another user";
    Store s;
    ASSERT_NO_FATAL_FAILURE(s.build());
    {
        // A renamed title left in the log: copies taken while the connection still holds it.
        sessions::Database d(s.db);
        d.exec("PRAGMA wal_autocheckpoint=0");
        d.exec("UPDATE conversations SET title = 'renamed-in-the-log'");
        fs::copy_file(s.db, s.root.file("copy.db"));
        fs::copy_file(s.db + "-wal", s.root.file("copy.db-wal"));
    }
    fs::remove(s.db);
    fs::rename(s.root.file("copy.db"), s.db);
    fs::rename(s.root.file("copy.db-wal"), s.db + "-wal");
    ASSERT_GT(fs::file_size(s.db + "-wal"), 0u);
    ASSERT_FALSE(fs::exists(s.db + "-shm"));
    ASSERT_NO_FATAL_FAILURE(s.make_unwritable());
    ASSERT_EQ(::chmod((s.db + "-wal").c_str(), 0444), 0);
    bool usable = false;
    expect_cannot_write(as_nobody(), s.dir, &usable);
    if (!usable) GTEST_SKIP() << "setpriv as nobody could still write the directory here";
    const auto list = run(as_nobody(), {"sessions", "--db", s.db, "list"});
    EXPECT_NE(list.status, 0) << list.out;
    EXPECT_EQ(split_lines(list.err).size(), 1u) << list.err;
    EXPECT_NE(list.err.find(s.db + "-wal"), std::string::npos) << list.err;
    EXPECT_NE(list.err.find("read-only"), std::string::npos) << list.err;
    EXPECT_EQ(list.out.find(s.id), std::string::npos) << "listed without the log's changes";
}

}  // namespace
}  // namespace ember::test
