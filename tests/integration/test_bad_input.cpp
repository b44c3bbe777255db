// Bad input against the real binary, one table row per case: each gets one clear error naming
// the problem, exit status 2 (usage) or 1, no crash (no signal, no sanitizer report), no hang
// (every run has a time limit), and a session database given to it keeps every row it had.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>

#include "tests/support/fixtures.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tmux.h"

namespace ember::test {
namespace {

namespace fs = std::filesystem;

const char* const kModel = "models/stories260K.gguf";
constexpr double kTimeLimit = 60.0;  // seconds; every case here fails fast or not at all

// Every row of every ordinary table (virtual tables are views of their shadow tables, which
// are dumped) and the schema version, typed, in rowid order: equal dumps, equal content.
std::string dump_database(const std::string& path) {
    sqlite3* db = nullptr;
    if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
        const std::string message = sqlite3_errmsg(db);
        sqlite3_close(db);
        throw std::runtime_error("cannot open " + path + ": " + message);
    }
    std::string dump;
    const auto query = [&](const std::string& sql, const std::function<void(sqlite3_stmt*)>& row) {
        sqlite3_stmt* st = nullptr;
        if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) != SQLITE_OK) {
            throw std::runtime_error(path + ": " + sql + ": " + sqlite3_errmsg(db));
        }
        while (sqlite3_step(st) == SQLITE_ROW) row(st);
        sqlite3_finalize(st);
    };
    query("PRAGMA user_version", [&](sqlite3_stmt* st) {
        dump += "user_version " + std::to_string(sqlite3_column_int64(st, 0)) + "\n";
    });
    std::vector<std::string> tables;
    query(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND sql NOT LIKE 'CREATE VIRTUAL%' "
        "ORDER BY name",
        [&](sqlite3_stmt* st) {
            tables.emplace_back(reinterpret_cast<const char*>(sqlite3_column_text(st, 0)));
        });
    for (const auto& table : tables) {
        dump += "table " + table + "\n";
        query("SELECT * FROM \"" + table + "\"", [&](sqlite3_stmt* st) {
            for (int c = 0; c < sqlite3_column_count(st); ++c) {
                const int type = sqlite3_column_type(st, c);
                const auto* bytes = static_cast<const char*>(sqlite3_column_blob(st, c));
                dump += std::to_string(type) + ":" +
                        std::string(bytes ? bytes : "",
                                    static_cast<size_t>(sqlite3_column_bytes(st, c))) +
                        "|";
            }
            dump += "\n";
        });
    }
    sqlite3_close(db);
    return dump;
}

// What a database file holds: its rows when it is a SQLite database, else its bytes.
std::string snapshot(const std::string& path) {
    const std::string bytes = read_file(path);
    return bytes.starts_with("SQLite format 3") ? dump_database(path) : bytes;
}

void write_file(const std::string& path, const std::string& bytes) {
    std::ofstream out(path, std::ios::binary);
    out << bytes;
    ASSERT_TRUE(out.good()) << path;
}

// A tmpfs mounted at a directory (root only; CI may not allow it), unmounted at scope end.
class Tmpfs {
public:
    Tmpfs(const fs::path& dir, const std::string& size) : dir_(dir) {
        fs::create_directories(dir_);
        if (geteuid() != 0) {
            why_not_ = "not root";
            return;
        }
        const std::string options = "size=" + size + ",mode=0755";
        if (::mount("tmpfs", dir_.c_str(), "tmpfs", 0, options.c_str()) != 0) {
            why_not_ = std::string("mount failed: ") + std::strerror(errno);
            return;
        }
        mounted_ = true;
    }
    ~Tmpfs() {
        if (mounted_) ::umount2(dir_.c_str(), MNT_DETACH);
    }
    Tmpfs(const Tmpfs&) = delete;
    Tmpfs& operator=(const Tmpfs&) = delete;
    bool mounted() const { return mounted_; }
    const std::string& why_not() const { return why_not_; }
    bool set_read_only(bool read_only) {
        unsigned long flags = MS_REMOUNT;
        if (read_only) flags |= MS_RDONLY;
        return ::mount("tmpfs", dir_.c_str(), "tmpfs", flags, nullptr) == 0;
    }

private:
    fs::path dir_;
    bool mounted_ = false;
    std::string why_not_;
};

// How a case's --db file is made.
enum class Db {
    None,         // no database involved
    Seeded,       // a real database holding a conversation
    NotSqlite,    // text where a database should be
    NewerSchema,  // a real database whose schema version is from a later ember
    ReadOnly,     // a real database on a read-only file system (or a read-only file)
    FullDisk,     // a real database on a file system with no space left
};

struct Case {
    const char* name;
    std::vector<std::string> args;  // after the binary; {model} {db} {dir} are substituted
    int status;                     // 1 (failed) or 2 (usage)
    std::string message;            // what stderr must say
    Db db = Db::None;
    std::string input;  // stdin
};

// Test names print the case, not its bytes.
void PrintTo(const Case& c, std::ostream* os) {
    *os << c.name;
}

std::vector<Case> cases() {
    const std::vector<std::string> run = {"run", "-m", "{model}", "-p", "Once", "-n", "4"};
    const auto with = [](std::vector<std::string> base, std::vector<std::string> more) {
        base.insert(base.end(), more.begin(), more.end());
        return base;
    };
    const std::vector<std::string> chat = {"chat", "-m", "{model}", "-n", "4", "-t", "1"};
    std::string one_mb_line(1 << 20, 'a');
    for (size_t i = 5; i < one_mb_line.size(); i += 6) one_mb_line[i] = ' ';
    one_mb_line += "\n";
    return {
        {"CtxZero", with(run, {"-c", "0"}), 2, "--ctx: must be at least 1, not '0'"},
        {"CtxNegative", with(run, {"-c", "-5"}), 2, "--ctx: must be at least 1, not '-5'"},
        {"ChatCtxZero", with(chat, {"-p", "hi", "-c", "0"}), 2, "--ctx: must be at least 1"},
        {"CtxBeyondTraining", with(run, {"-c", "100000"}), 2,
         "--ctx: 100000 is more than the 2048 tokens the model was trained for"},
        {"NPredictMinusTwo", with(run, {"-n", "-2"}), 2,
         "--n-predict: must be at least 1, or -1 for until the context is full, not '-2'"},
        {"NPredictZero", with(run, {"-n", "0"}), 2, "--n-predict: must be at least 1"},
        {"ChatNPredictMinusFive", with(chat, {"-p", "hi", "-n", "-5"}), 2,
         "--n-predict: must be at least 1"},
        // The sampling ranges the server and /set hold values to, in the same words.
        {"TempNan", with(run, {"--temp", "nan"}), 2,
         "--temp: must be a number between 0 and 2, not 'nan'"},
        {"TempNegative", with(run, {"--temp", "-1"}), 2,
         "--temp: must be a number between 0 and 2, not '-1'"},
        {"TempFive", with(chat, {"-p", "hi", "--temp", "5"}), 2,
         "--temp: must be a number between 0 and 2, not '5'"},
        {"TopPTwo", with(run, {"--top-p", "2"}), 2,
         "--top-p: must be a number more than 0 and at most 1"},
        {"TopPZero", with(run, {"--top-p", "0"}), 2, "--top-p: must be a number more than 0"},
        {"MinPAboveOne", with(run, {"--min-p", "1.5"}), 2,
         "--min-p: must be a number between 0 and 1"},
        {"TopKNegative", with(run, {"--top-k", "-3"}), 2,
         "--top-k: must be a whole number between 0 and 1048576"},
        {"RepeatPenaltyZero", with(run, {"--repeat-penalty", "0"}), 2,
         "--repeat-penalty: must be a number more than 0 and at most 10"},
        {"RepeatLastNNegative", with(run, {"--repeat-last-n", "-5"}), 2,
         "--repeat-last-n: must be from 0 to 1048576"},
        {"ThreadsZero", with(run, {"-t", "0"}), 2, "--threads: must be from 1 to 1024, not '0'"},
        {"ThreadsHuge", with(run, {"-t", "100000"}), 2, "--threads: must be from 1 to 1024"},
        {"ChatThreadsZero", with(chat, {"-p", "hi", "-t", "0"}), 2,
         "--threads: must be from 1 to 1024"},
        {"IdsOutOfVocabulary",
         {"run", "-m", "{model}", "--ids", "1,99999", "-n", "4"},
         2,
         "--ids: token id 99999 is outside the model's vocabulary (ids 0 to 511)"},
        {"IdsVocabularySize",
         {"run", "-m", "{model}", "--ids", "512", "-n", "4"},
         2,
         "--ids: token id 512 is outside the model's vocabulary"},
        {"IdsNegative",
         {"run", "-m", "{model}", "--ids", "1,-1", "-n", "4"},
         2,
         "--ids: '-1' is not a token id"},
        {"IdsEmptyItem",
         {"run", "-m", "{model}", "--ids", "1,,2", "-n", "4"},
         2,
         "--ids: empty item at character 2"},
        {"IdsEmpty",
         {"run", "-m", "{model}", "--ids", "", "-n", "4"},
         2,
         "--ids: no token ids given"},
        {"SeedBeyond64Bits", with(run, {"--seed", "18446744073709551616"}), 2,
         "--seed: must be a whole number from 0 to 18446744073709551615, not "
         "'18446744073709551616'"},
        {"SeedNegative", with(run, {"--seed", "-1"}), 2, "--seed: must be a whole number from 0"},
        {"KvTypeUnknown", with(run, {"--kv-type", "q4"}), 2, "--kv-type: q4 not in {f32,f16,q8_0}"},
        {"StateCapZero", with(chat, {"-p", "hi", "--db", "{db}", "--state-cap", "0"}), 2,
         "--state-cap: must be more than 0", Db::Seeded},
        {"StateCapNotASize", with(chat, {"-p", "hi", "--db", "{db}", "--state-cap", "12parsecs"}),
         2, "--state-cap: '12parsecs' is not a size", Db::Seeded},
        {"StateMemoryNotASize",
         with(chat, {"-p", "hi", "--db", "{db}", "--state-memory", "12parsecs"}), 2,
         "--state-memory: '12parsecs' is not a size", Db::Seeded},
        {"DbNotSqlite", with(chat, {"-p", "hi", "--db", "{db}"}), 1,
         "session database '{db}': file is not a database", Db::NotSqlite},
        {"SessionsListDbNotSqlite",
         {"sessions", "list", "--db", "{db}"},
         1,
         "file is not a database",
         Db::NotSqlite},
        {"DbNewerSchema", with(chat, {"-p", "hi", "--db", "{db}"}), 1,
         "session database '{db}': schema version 99 was written by a newer ember (this one "
         "knows",
         Db::NewerSchema},
        {"SessionsShowDbNewerSchema",
         {"sessions", "list", "--db", "{db}"},
         1,
         "schema version 99 was written by a newer ember",
         Db::NewerSchema},
        {"DbReadOnly", with(chat, {"-p", "hi", "--db", "{db}"}), 1,
         "session database '{db}' is read-only (a read-only file system); --no-db chats without "
         "saving",
         Db::ReadOnly},
        {"DbDiskFull", with(chat, {"-p", "hi", "--db", "{db}"}), 1,
         "ember: the session database failed, recording stops: session database '{db}': "
         "database or disk is full",
         Db::FullDisk},
        {"DbIsADirectory", with(chat, {"-p", "hi", "--db", "{dir}"}), 1,
         "session database '{dir}' is a directory"},
        {"ResumeUnknownId", with(chat, {"-p", "hi", "--db", "{db}", "--resume", "nope"}), 1,
         "no saved conversation 'nope' in {db}", Db::Seeded},
        {"SessionsShowUnknownId",
         {"sessions", "show", "nope", "--db", "{db}"},
         1,
         "no saved conversation 'nope' in {db}",
         Db::Seeded},
        {"ModelIsADirectory",
         {"run", "-m", "{dir}", "-p", "hi"},
         1,
         "model '{dir}' is a directory, not a GGUF file"},
        {"ModelIsAFifo",
         {"run", "-m", "{dir}/fifo.gguf", "-p", "hi"},
         1,
         "model '{dir}/fifo.gguf' is a FIFO, not a GGUF file"},
        {"ModelIsDevZero",
         {"run", "-m", "/dev/zero", "-p", "hi"},
         1,
         "model '/dev/zero' is a device, not a GGUF file"},
        {"ModelIsEmpty",
         {"run", "-m", "{dir}/empty.gguf", "-p", "hi"},
         1,
         "{dir}/empty.gguf: file is empty"},
        {"ModelIsText",
         {"run", "-m", "{dir}/text.gguf", "-p", "hi"},
         1,
         "{dir}/text.gguf: bad magic: not a GGUF file"},
        {"ModelTruncated",
         {"run", "-m", "{dir}/truncated.gguf", "-p", "hi"},
         1,
         "lies outside the file"},
        {"ModelMissing",
         {"run", "-m", "{dir}/missing.gguf", "-p", "hi"},
         1,
         "model '{dir}/missing.gguf': no such file"},
        {"PromptOfOneMegabyte", with(chat, {"--script"}), 1,
         "ember: prompt skipped: the prompt needs", Db::None, one_mb_line},
        {"PromptWithNul", with(chat, {"--script"}), 1,
         "ember: stdin line 1: the prompt holds a NUL byte (byte 6); line skipped", Db::None,
         std::string("hello\0world\n", 12)},
        {"JsonlPromptWithNul", with(chat, {"--script", "--jsonl"}), 1,
         "ember: stdin line 2: the prompt holds a NUL byte (byte 2); line skipped", Db::None,
         "\n{\"prompt\": \"a\\u0000b\"}\n"},
        {"UnknownCommand", {"bogus"}, 2, "ember: error: unknown command 'bogus'"},
        {"UnknownOption",
         {"run", "-m", "{model}", "-p", "hi", "--bogus"},
         2,
         "ember: error: The following argument was not expected: --bogus"},
    };
}

std::string substitute(std::string text, const std::map<std::string, std::string>& values) {
    for (const auto& [key, value] : values) {
        for (size_t at = text.find(key); at != std::string::npos; at = text.find(key, at)) {
            text.replace(at, key.size(), value);
            at += value.size();
        }
    }
    return text;
}

class BadInput : public ::testing::TestWithParam<Case> {
protected:
    // A database holding one conversation, made once by the real binary (its WAL folded in,
    // so copying the one file copies everything).
    static void SetUpTestSuite() {
        if (!fixture_exists(kModel)) return;
        seeded_dir_ = std::make_unique<TempDir>("ember-bad-input-seed");
        seeded_ = seeded_dir_->file("seeded.db");
        const auto r = run_command({ember_binary(), "chat", "-m", fixture_path(kModel), "-p",
                                    "Hello there", "-n", "8", "-t", "1", "--db", seeded_},
                                   "", kTimeLimit);
        ASSERT_EQ(r.status, 0) << r.err;
        ASSERT_NE(dump_database(seeded_).find("Hello there"), std::string::npos);
    }
    static void TearDownTestSuite() { seeded_dir_.reset(); }

    static std::unique_ptr<TempDir> seeded_dir_;
    static std::string seeded_;
};

std::unique_ptr<TempDir> BadInput::seeded_dir_;
std::string BadInput::seeded_;

void set_schema_version(const std::string& path, int version) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    const std::string sql = "PRAGMA user_version = " + std::to_string(version);
    EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(db);
}

// Fills the file system holding `dir` until a write fails for want of space.
void fill_up(const fs::path& dir) {
    std::ofstream filler(dir / "filler", std::ios::binary);
    const std::string block(4096, 'x');
    while (filler.write(block.data(), block.size())) filler.flush();
}

TEST_P(BadInput, OneClearErrorNoCrashDatabaseUnchanged) {
    const Case& c = GetParam();
    EMBER_REQUIRE_FIXTURE(kModel);
    TempDir dir("ember-bad-input");
    // Models that are not models.
    ASSERT_EQ(mkfifo(dir.file("fifo.gguf").c_str(), 0600), 0);
    write_file(dir.file("empty.gguf"), "");
    write_file(dir.file("text.gguf"), "this is a text file, not a model\n");
    write_file(dir.file("truncated.gguf"), read_file(fixture_path(kModel)).substr(0, 100000));

    std::unique_ptr<Tmpfs> tmpfs;
    std::vector<std::string> as_nobody;  // a command prefix running ember as another user
    std::string db = dir.file("ember.db");
    std::optional<std::string> before;  // the database's content before the run
    switch (c.db) {
        case Db::None:
            break;
        case Db::Seeded:
        case Db::NewerSchema:
            fs::copy_file(seeded_, db);
            if (c.db == Db::NewerSchema) set_schema_version(db, 99);
            break;
        case Db::NotSqlite:
            write_file(db, "not a database, but a file someone named ember.db by mistake\n");
            break;
        case Db::ReadOnly:
        case Db::FullDisk: {
            const fs::path mount_dir = dir.path() / "fs";
            tmpfs = std::make_unique<Tmpfs>(mount_dir, c.db == Db::FullDisk ? "4m" : "16m");
            db = (mount_dir / "ember.db").string();
            if (!tmpfs->mounted()) {
                if (c.db == Db::FullDisk) {
                    GTEST_SKIP() << "cannot mount a small tmpfs to fill up (" << tmpfs->why_not()
                                 << ")";
                }
                // A read-only file in a read-only directory does the same, for a user that
                // permissions bind: root (in a container without mount rights) runs ember as
                // nobody.
                if (geteuid() == 0) {
                    const std::string setpriv = find_in_path("setpriv");
                    if (setpriv.empty()) {
                        GTEST_SKIP() << "no tmpfs (" << tmpfs->why_not()
                                     << ") and no setpriv to run ember as a user that file "
                                        "permissions bind (root ignores them)";
                    }
                    as_nobody = {setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"};
                }
                fs::copy_file(seeded_, db);
                before = snapshot(db);
                fs::permissions(
                    db, fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read);
                const auto read_and_enter = fs::perms::owner_read | fs::perms::owner_exec |
                                            fs::perms::group_read | fs::perms::group_exec |
                                            fs::perms::others_read | fs::perms::others_exec;
                fs::permissions(dir.path(), read_and_enter);
                fs::permissions(mount_dir, read_and_enter);
                break;
            }
            fs::copy_file(seeded_, db);
            // Read while it can be (a WAL database needs to write its -shm file to be read).
            before = snapshot(db);
            if (c.db == Db::FullDisk) {
                fill_up(mount_dir);
            } else {
                ASSERT_TRUE(tmpfs->set_read_only(true)) << std::strerror(errno);
            }
            break;
        }
    }
    if (c.db != Db::None && !before) before = snapshot(db);

    const std::map<std::string, std::string> values = {
        {"{model}", fixture_path(kModel)}, {"{db}", db}, {"{dir}", dir.path().string()}};
    std::vector<std::string> argv = as_nobody;
    argv.push_back(ember_binary());
    for (const auto& a : c.args) argv.push_back(substitute(a, values));
    const CommandResult r = run_command(argv, c.input, kTimeLimit);

    // In the XML/JSON report (--gtest_output), for the list of what a person sees.
    RecordProperty("exit_status", r.status);
    RecordProperty("stderr", r.err);
    ASSERT_FALSE(r.timed_out) << c.name << ": still running after " << kTimeLimit << " s";
    EXPECT_LT(r.status, 128) << c.name << ": killed by signal " << r.status - 128 << "\n" << r.err;
    EXPECT_EQ(r.status, c.status) << c.name << "\n" << r.err;
    const std::string message = substitute(c.message, values);
    EXPECT_NE(r.err.find(message), std::string::npos)
        << c.name << ": stderr does not say \"" << message << "\"; it says:\n"
        << r.err;
    // One clear message: one line of ours (CLI11's "Run with --help" hint aside), short (a 1 MB
    // prompt is not echoed back), no crash report.
    int messages = 0;
    for (const auto& line : split_lines(r.err)) {
        if (!line.starts_with("Run with --help")) ++messages;
    }
    EXPECT_EQ(messages, 1) << c.name << ": " << r.err.substr(0, 2000);
    EXPECT_LT(r.err.size(), 1000u) << r.err.substr(0, 2000);
    for (const char* crash : {"Sanitizer", "runtime error:", "terminate called", "Aborted"}) {
        EXPECT_EQ(r.err.find(crash), std::string::npos) << c.name << ": " << r.err;
    }

    if (c.db != Db::None) {
        if (tmpfs && tmpfs->mounted()) {
            std::error_code ignored;
            fs::remove(fs::path(db).parent_path() / "filler", ignored);
            if (c.db == Db::ReadOnly) {
                ASSERT_TRUE(tmpfs->set_read_only(false));
            }
        } else if (c.db == Db::ReadOnly) {
            fs::permissions(fs::path(db).parent_path(), fs::perms::owner_all);
        }
        EXPECT_EQ(snapshot(db), *before) << c.name << ": the database changed";
    }
}

INSTANTIATE_TEST_SUITE_P(Cases, BadInput, ::testing::ValuesIn(cases()),
                         [](const auto& param_info) { return std::string(param_info.param.name); });

// An unknown slash command in an interactive chat (a real terminal, through tmux): explained,
// the chat goes on, /quit ends it with status 0, and the database keeps what it had plus
// nothing (no prompt was sent).
TEST(BadInputInteractive, UnknownSlashCommandIsExplainedAndChangesNothing) {
    EMBER_REQUIRE_FIXTURE(kModel);
    EMBER_REQUIRE_TMUX(tmux);
    TempDir dir("ember-bad-input-tty");
    const std::string db = dir.file("ember.db");
    const auto seeded = run_command({ember_binary(), "chat", "-m", fixture_path(kModel), "-p",
                                     "Hello there", "-n", "8", "-t", "1", "--db", db},
                                    "", kTimeLimit);
    ASSERT_EQ(seeded.status, 0) << seeded.err;
    const std::string before = dump_database(db);

    const std::string socket = "ember-bad-input-" + std::to_string(getpid());
    const auto tmux_run = [&](std::vector<std::string> args) {
        args.insert(args.begin(), {tmux, "-L", socket, "-f", "/dev/null"});
        return run_command(args, "", kTimeLimit);
    };
    const std::string command = shell_quote(ember_binary()) + " chat --plain -m " +
                                shell_quote(fixture_path(kModel)) + " -t 1 --db " +
                                shell_quote(db) + "; echo \"exit status $?\"; sleep 30";
    ASSERT_EQ(
        tmux_run({"new-session", "-d", "-x", "120", "-y", "30", "-s", "t", "sh", "-c", command})
            .status,
        0);
    const auto screen_until = [&](const std::string& text) {
        std::string screen;
        for (int i = 0; i < 500 && screen.find(text) == std::string::npos; ++i) {
            usleep(30000);
            screen = tmux_run({"capture-pane", "-p", "-J", "-t", "t"}).out;
        }
        return screen;
    };
    std::string screen = screen_until("/help");
    tmux_run({"send-keys", "-t", "t", "-l", "/bogus"});
    tmux_run({"send-keys", "-t", "t", "Enter"});
    screen = screen_until("unknown command /bogus; /help lists the commands");
    EXPECT_NE(screen.find("unknown command /bogus; /help lists the commands"), std::string::npos)
        << screen;
    tmux_run({"send-keys", "-t", "t", "-l", "/quit"});
    tmux_run({"send-keys", "-t", "t", "Enter"});
    screen = screen_until("exit status");
    EXPECT_NE(screen.find("exit status 0"), std::string::npos) << screen;
    tmux_run({"kill-server"});
    EXPECT_EQ(dump_database(db), before) << "the database changed";
}

}  // namespace
}  // namespace ember::test
