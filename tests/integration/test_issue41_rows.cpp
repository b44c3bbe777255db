// Issue 41's attacks re-run through the real binary: a real `ember serve` over HTTP, the
// command line's --json-schema and --grammar, real SQLite files, a real small file system.
// Each must end in one clear line (or the right behaviour), never a crash, a hang or lost
// messages.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/mount.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "tests/support/fixtures.h"
#include "tests/support/process.h"
#include "tests/support/serve.h"
#include "tests/support/temp_dir.h"

namespace ember::test {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const char* const kModel = "arch/llama/llama.gguf";

std::string ref_chain_schema(int n) {
    std::string s = R"({"$ref": "#/$defs/a0", "$defs": {)";
    for (int i = 0; i < n; ++i) {
        s += "\"a" + std::to_string(i) + "\": {\"$ref\": \"#/$defs/a" + std::to_string(i + 1) +
             "\"}, ";
    }
    s += "\"a" + std::to_string(n) + "\": {\"type\": \"integer\"}}}";
    return s;
}

int64_t query_int(const std::string& db, const std::string& sql) {
    sqlite3* h = nullptr;
    EXPECT_EQ(sqlite3_open_v2(db.c_str(), &h, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
    sqlite3_stmt* st = nullptr;
    int64_t v = -1;
    if (sqlite3_prepare_v2(h, sql.c_str(), -1, &st, nullptr) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW) {
        v = sqlite3_column_int64(st, 0);
    }
    sqlite3_finalize(st);
    sqlite3_close(h);
    return v;
}

// --- rows 1 and 5 (and 14, 15, 18): a real server ------------------------------------------------

class Issue41Serve : public ::testing::Test {
protected:
    void SetUp() override {
        EMBER_REQUIRE_FIXTURE(kModel);
        dir_ = std::make_unique<TempDir>("ember-issue41");
        setenv("EMBER_TEST_KEY", "sekrit", 1);
        log_ = dir_->file("serve.log");
        server_ = std::make_unique<ServeProcess>(
            std::vector<std::string>{"-m", fixture_path(kModel), "-t", "1", "--api-key-env",
                                     "EMBER_TEST_KEY"},
            log_);
        ASSERT_GT(server_->port(), 0) << read_file(log_);
    }
    httplib::Headers auth() const { return {{"Authorization", "Bearer sekrit"}}; }
    json chat(const json& body, int* status) {
        auto c = server_->client(60);
        const auto r = c->Post("/v1/chat/completions", auth(), body.dump(), "application/json");
        *status = r ? r->status : -1;
        return r ? json::parse(r->body, nullptr, false) : json();
    }
    void expect_alive() {
        auto c = server_->client(10);
        const auto r = c->Get("/health", auth());
        ASSERT_TRUE(r) << "the server is gone:\n" << read_file(log_);
        EXPECT_EQ(r->status, 200);
        const json h = json::parse(r->body);
        EXPECT_TRUE(h.contains("requests_compiling")) << r->body;
    }
    static json user(const std::string& text) {
        return json::array({{{"role", "user"}, {"content", text}}});
    }

    std::unique_ptr<TempDir> dir_;
    std::string log_;
    std::unique_ptr<ServeProcess> server_;
};

TEST_F(Issue41Serve, ARefChainIsA400AndTheServerLives) {
    const json schema = json::parse(ref_chain_schema(7000));
    int status = 0;
    json r =
        chat({{"messages", user("x")},
              {"max_tokens", 4},
              {"response_format",
               {{"type", "json_schema"}, {"json_schema", {{"name", "x"}, {"schema", schema}}}}}},
             &status);
    EXPECT_EQ(status, 400) << r.dump().substr(0, 500);
    EXPECT_NE(r["error"]["message"].get<std::string>().find("nests deeper than 256 levels"),
              std::string::npos)
        << r.dump().substr(0, 500);
    EXPECT_EQ(r["error"]["param"], "response_format.json_schema.schema");
    expect_alive();
    // The same through a tool's parameters.
    r = chat({{"messages", user("x")},
              {"max_tokens", 4},
              {"tools", json::array({{{"type", "function"},
                                      {"function", {{"name", "f"}, {"parameters", schema}}}}})},
              {"tool_choice", "required"}},
             &status);
    EXPECT_EQ(status, 400) << r.dump().substr(0, 500);
    expect_alive();
}

TEST_F(Issue41Serve, ABigConstCompilesQuicklyUnderTheSlot) {
    const auto start = std::chrono::steady_clock::now();
    int status = 0;
    const json r = chat(
        {{"messages", user("x")},
         {"max_tokens", 3},
         {"response_format",
          {{"type", "json_schema"},
           {"json_schema", {{"name", "x"}, {"schema", {{"const", std::string(3 << 20, 'x')}}}}}}}},
        &status);
    EXPECT_EQ(status, 200) << r.dump().substr(0, 500);
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
              30.0);
    expect_alive();
}

TEST_F(Issue41Serve, TheBearerKeyIsComparedWhole) {
    const std::string body = json{{"messages", user("hi")}, {"max_tokens", 1}}.dump();
    const auto status_of = [&](const std::string& header) {
        const int fd = connect_loopback(server_->port());
        EXPECT_GE(fd, 0);
        std::string raw =
            "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            "Content-Type: application/json\r\nAuthorization: " +
            header + "\r\nContent-Length: " + std::to_string(body.size()) +
            "\r\nConnection: close\r\n\r\n" + body;
        send_all(fd, raw);
        const std::string got = read_until_closed(fd, 30000);
        close(fd);
        return got.size() >= 12 ? std::atoi(got.c_str() + 9) : 0;
    };
    EXPECT_EQ(status_of(std::string("Bearer sekrit\0junk", 18)), 401);
    EXPECT_EQ(status_of("Bearer sekritjunk"), 401);
    EXPECT_EQ(status_of("bearer sekrit"), 200);
    EXPECT_EQ(status_of("Bearer sekrit"), 200);
}

TEST_F(Issue41Serve, AMalformedRequestLineClosesTheConnection) {
    const int fd = connect_loopback(server_->port());
    ASSERT_GE(fd, 0);
    // A bad request line, then header lines that must not be taken for requests.
    send_all(fd, "GARBAGE\r\nGET /health HTTP/1.1\r\nHost: x\r\n\r\n");
    const std::string got = read_until_closed(fd, 5000);
    close(fd);
    EXPECT_EQ(got.rfind("HTTP/1.1 400", 0), 0u) << got;
    // One response, then the connection ended: no second answer to the header lines.
    EXPECT_EQ(got.find("HTTP/1.1", 5), std::string::npos) << got;
}

TEST_F(Issue41Serve, LogsEscapeTheClientsControlBytes) {
    auto c = server_->client(10);
    c->Get("/no\x1b]0;pwned\x07where", auth());
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const std::string log = read_file(log_);
    EXPECT_EQ(log.find('\x1b'), std::string::npos);
    EXPECT_EQ(log.find('\x07'), std::string::npos);
}

// --- rows 2, 3, 4, 17: the command line's compilers ----------------------------------------------

std::string write_file_in(const TempDir& dir, const std::string& name, const std::string& text) {
    const std::string path = dir.file(name);
    std::ofstream(path, std::ios::binary) << text;
    return path;
}

TEST(Issue41Cli, HostileSchemasAndGrammarsAreOneLineUsageErrors) {
    EMBER_REQUIRE_FIXTURE(kModel);
    TempDir dir;
    std::string deep;
    for (int i = 0; i < 10000; ++i) deep += R"({"anyOf": [)";
    deep += R"({"type": "integer"})";
    for (int i = 0; i < 10000; ++i) deep += "]}";
    struct Case {
        std::string flag, file, says;
    };
    const Case cases[] = {
        {"--json-schema", write_file_in(dir, "deep.json", deep), "JSON nested deeper than 512"},
        {"--json-schema", write_file_in(dir, "refs.json", ref_chain_schema(7000)),
         "nests deeper than 256 levels"},
        {"--grammar", write_file_in(dir, "n300.gbnf", R"(root ::= (("a"{0,300}){0,300}){0,300})"),
         "too ambiguous"},
        {"--grammar", write_file_in(dir, "nul.gbnf", R"(root ::= "\x00")"), "NUL character"},
        {"--grammar", write_file_in(dir, "sur.gbnf", R"(root ::= "\uD800")"), "surrogate"},
    };
    for (const Case& c : cases) {
        const auto r = run_command({ember_binary(), "run", "-m", fixture_path(kModel), "-p", "x",
                                    "-n", "4", "-t", "1", c.flag, c.file},
                                   "", 60);
        EXPECT_FALSE(r.timed_out) << c.file;
        EXPECT_EQ(r.status, 2) << c.file << "\n" << r.err.substr(0, 400);
        EXPECT_NE(r.err.find(c.says), std::string::npos) << c.file << "\n" << r.err.substr(0, 400);
        EXPECT_LT(r.err.size(), 1000u) << r.err.substr(0, 400);
    }
}

// --- row 7: a negative schema version
// -------------------------------------------------------------

TEST(Issue41Store, NegativeSchemaVersionsAreRefusedClearly) {
    TempDir dir;
    for (const int version : {-1, -3, -1000000}) {
        const std::string db = dir.file("neg" + std::to_string(-version) + ".db");
        sqlite3* h = nullptr;
        ASSERT_EQ(sqlite3_open(db.c_str(), &h), SQLITE_OK);
        const std::string sql = "PRAGMA user_version = " + std::to_string(version);
        ASSERT_EQ(sqlite3_exec(h, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK);
        sqlite3_close(h);
        const auto r = run_command({ember_binary(), "sessions", "list", "--db", db}, "", 30);
        EXPECT_EQ(r.status, 1) << r.err;
        EXPECT_NE(r.err.find("schema version " + std::to_string(version) + " is negative"),
                  std::string::npos)
            << r.err;
        EXPECT_EQ(query_int(db, "PRAGMA user_version"), version);
    }
}

// --- row 8: the disk fills while a scripted chat records
// ------------------------------------------

// Scripted chats on a 13 MiB file system: their messages need about 10 MiB (the WAL grows by
// whole 64 KiB pages per commit), messages and state about 16 MiB. Without the room state
// leaves for messages (EMBER_STATE_MIN_FREE=0: the store as it was) the disk fills with state
// and the replies printed after that are lost; with it, state is skipped and said, and every
// printed reply is stored.
struct DiskFullRun {
    CommandResult result;
    int64_t messages = -1;
    int64_t printed = 0;
};

DiskFullRun chat_on_small_disk(const std::string& min_free) {
    DiskFullRun run;
    TempDir dir;
    const fs::path mount_dir = dir.path() / "fs";
    fs::create_directories(mount_dir);
    if (::mount("tmpfs", mount_dir.c_str(), "tmpfs", 0, "size=13m,mode=0755") != 0) return run;
    struct Unmount {
        fs::path p;
        ~Unmount() { ::umount2(p.c_str(), MNT_DETACH); }
    } unmount{mount_dir};
    const std::string db = (mount_dir / "ember.db").string();
    std::string input;
    for (int i = 0; i < 6; ++i) {
        input += json{{"role", "user"},
                      {"content", "Tell me about the number " + std::to_string(i) + " please"}}
                     .dump() +
                 "\n";
    }
    std::string sh = "EMBER_STATE_MIN_FREE=" + min_free + " " + shell_quote(ember_binary()) +
                     " chat -m " + shell_quote(fixture_path(kModel)) +
                     " --script --jsonl --temp 0 -n 48 -t 1 --db " + shell_quote(db);
    run.result = run_command({"/bin/sh", "-c", sh}, input, 120);
    run.printed = static_cast<int64_t>(split_lines(run.result.out).size());
    run.messages = query_int(db, "SELECT COUNT(*) FROM messages");
    return run;
}

TEST(Issue41Store, AFullDiskCostsStateNeverPrintedMessages) {
    EMBER_REQUIRE_FIXTURE(kModel);
    if (geteuid() != 0) GTEST_SKIP() << "needs root to mount a small tmpfs";
    const DiskFullRun kept = chat_on_small_disk("64MiB");  // the default
    if (kept.messages < 0) GTEST_SKIP() << "cannot mount a tmpfs: " << std::strerror(errno);
    ASSERT_FALSE(kept.result.timed_out);
    EXPECT_EQ(kept.result.status, 0) << kept.result.err;
    EXPECT_EQ(kept.printed, 6) << kept.result.out << kept.result.err;
    EXPECT_EQ(kept.messages, 12) << kept.result.err;  // every printed reply and its prompt
    EXPECT_NE(kept.result.err.find("MiB are kept for messages"), std::string::npos)
        << kept.result.err;
    // The control: the same run with no room kept is the reported loss, and its error names
    // what is not stored.
    const DiskFullRun lost = chat_on_small_disk("0");
    EXPECT_EQ(lost.printed, 6) << lost.result.err;
    EXPECT_LT(lost.messages, 12) << "the scenario no longer fills the disk: " << lost.result.err;
    if (lost.messages < 12) {
        EXPECT_NE(lost.result.err.find("not stored: this"), std::string::npos) << lost.result.err;
    }
}

// --- row 16: a current_leaf naming no message ----------------------------------------------------

TEST(Issue41Store, ADanglingCurrentLeafIsReportedNotReRooted) {
    EMBER_REQUIRE_FIXTURE(kModel);
    TempDir dir;
    const std::string db = dir.file("leaf.db");
    const auto first = run_command({ember_binary(), "chat", "-m", fixture_path(kModel), "-p",
                                    "Hello there", "-n", "4", "-t", "1", "--db", db},
                                   "", 60);
    ASSERT_EQ(first.status, 0) << first.err;
    {
        sqlite3* h = nullptr;
        ASSERT_EQ(sqlite3_open(db.c_str(), &h), SQLITE_OK);
        ASSERT_EQ(sqlite3_exec(h, "UPDATE conversations SET current_leaf = 999999", nullptr,
                               nullptr, nullptr),
                  SQLITE_OK);
        sqlite3_close(h);
    }
    const auto resumed = run_command({ember_binary(), "chat", "-m", fixture_path(kModel),
                                      "--continue", "-p", "more", "-n", "4", "-t", "1", "--db", db},
                                     "", 60);
    EXPECT_EQ(resumed.status, 1) << resumed.err;
    EXPECT_NE(resumed.err.find("its current message (999999) is not in the conversation"),
              std::string::npos)
        << resumed.err;
    EXPECT_NE(resumed.err.find("sessions check --repair"), std::string::npos) << resumed.err;
    EXPECT_EQ(query_int(db, "SELECT COUNT(*) FROM messages"), 2);  // nothing re-rooted
    // The repair points it at the conversation's last message; then it resumes.
    const auto repair =
        run_command({ember_binary(), "sessions", "--db", db, "check", "--repair"}, "", 60);
    EXPECT_EQ(query_int(db, "SELECT current_leaf FROM conversations"),
              query_int(db, "SELECT MAX(id) FROM messages"))
        << repair.out << repair.err;
}

// --- rows 12, 13, 19: paths and input lines ------------------------------------------------------

TEST(Issue41Cli, AnEmptyDbPathIsRefused) {
    const auto r = run_command({ember_binary(), "sessions", "--db", "", "list"}, "", 30);
    EXPECT_EQ(r.status, 2) << r.err;
    EXPECT_NE(r.err.find("--db"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("the path is empty"), std::string::npos) << r.err;
}

TEST(Issue41Cli, AConfigModelWithANulIsRefused) {
    EMBER_REQUIRE_FIXTURE(kModel);
    TempDir dir;
    fs::create_directories(dir.path() / "ember");
    std::ofstream(dir.path() / "ember" / "config.json")
        << "{\"model\": \"" << fixture_path(kModel) << "\\u0000junk\"}";
    const std::string sh = "XDG_CONFIG_HOME=" + shell_quote(dir.path().string()) +
                           " EMBER_MODEL= " + shell_quote(ember_binary()) + " run -p x -n 1 -t 1";
    const auto r = run_command({"/bin/sh", "-c", sh}, "", 60);
    EXPECT_EQ(r.status, 1) << r.err;
    EXPECT_NE(r.err.find("NUL byte"), std::string::npos) << r.err;
}

TEST(Issue41Cli, AScriptedLineWithoutEndStopsAtTheLineLimit) {
    EMBER_REQUIRE_FIXTURE(kModel);
    const std::string sh = shell_quote(ember_binary()) + " chat -m " +
                           shell_quote(fixture_path(kModel)) +
                           " --script -n 1 -t 1 --no-db < /dev/zero";
    const auto r = run_command({"/bin/sh", "-c", sh}, "", 120);
    ASSERT_FALSE(r.timed_out);
    EXPECT_EQ(r.status, 1) << r.err;
    EXPECT_NE(r.err.find("stdin line 1 is longer than 64 MiB"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace ember::test
