// What a store or a --db path may hold that Ember did not write, against the real binary and
// real SQLite files (issue 30, rows 11 and 15): JSON nested 100,000 deep in a conversation's
// sampling column (export and replay --regenerate give a one-line error, not a signal), a
// NUL byte in a JSONL system message (refused as a prompt holding one is), and --db naming
// a device, a FIFO or a "file:" URI (the same refusal in every command, nothing left
// beside the device).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/support/fixtures.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"

namespace ember::test {
namespace {

namespace fs = std::filesystem;

const char* kModel = "models/stories260K.gguf";

CommandResult ember(const std::vector<std::string>& args, const std::string& input = "") {
    std::vector<std::string> argv = {ember_binary()};
    argv.insert(argv.end(), args.begin(), args.end());
    return run_command(argv, input, 120);
}

// Exit 1 and exactly one line on stderr (after the model's own warnings), saying `needle`.
void expect_error_line(const CommandResult& r, const std::string& needle) {
    EXPECT_EQ(r.status, 1) << r.err;
    EXPECT_FALSE(r.timed_out);
    int errors = 0;
    for (const auto& line : split_lines(r.err)) errors += line.rfind("ember: error: ", 0) == 0;
    EXPECT_EQ(errors, 1) << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
}

// A conversation of two turns stored in `db`; returns its id.
std::string make_conversation(const std::string& db) {
    const CommandResult chat = ember({"chat", "-m", fixture_path(kModel), "--script", "--jsonl",
                                      "--temp", "0", "-n", "8", "-c", "256", "-t", "1", "--db", db},
                                     "{\"prompt\": \"Hello\"}\n{\"prompt\": \"Again\"}\n");
    EXPECT_EQ(chat.status, 0) << chat.err;
    const CommandResult list = ember({"sessions", "--db", db, "list"});
    const auto rows = split_lines(list.out);
    if (rows.size() < 2) return {};
    return rows[1].substr(0, rows[1].find(' '));
}

TEST(StoreHostileInput, DeepJsonInTheSamplingColumnIsAClearError) {
    EMBER_REQUIRE_FIXTURE(kModel);
    const std::string python = find_in_path("python3");
    if (python.empty()) EMBER_SKIP_OR_FAIL("python3 is needed to edit the SQLite file");
    TempDir dir;
    const std::string db = dir.file("chat.db");
    const std::string id = make_conversation(db);
    ASSERT_FALSE(id.empty());
    // 100,000 levels in the column, where replay's template variables are read from.
    const CommandResult edit = run_command(
        {python, "-c",
         "import sqlite3, sys\n"
         "deep = '[' * 100000 + ']' * 100000\n"
         "c = sqlite3.connect(sys.argv[1])\n"
         "c.execute('UPDATE conversations SET sampling = ?', ("
         "'{\"temperature\": 0, \"chat\": {\"template_vars\": {\"x\": ' + deep + '}}}',))\n"
         "c.commit()\n",
         db},
        "", 60);
    ASSERT_EQ(edit.status, 0) << edit.err;
    const std::string limit = "JSON nested deeper than 512 levels";
    expect_error_line(ember({"sessions", "--db", db, "export", id, "--format", "json"}), limit);
    expect_error_line(
        ember({"replay", "--db", db, id, "--regenerate", "-m", fixture_path(kModel), "-t", "1"}),
        limit);
    // The rest of the store is untouched: listed, shown, exported as markdown, checked.
    EXPECT_EQ(ember({"sessions", "--db", db, "list"}).status, 0);
    const CommandResult show = ember({"sessions", "--db", db, "show", id});
    EXPECT_EQ(show.status, 0) << show.err;
    EXPECT_NE(show.out.find("Again"), std::string::npos);
    EXPECT_EQ(ember({"sessions", "--db", db, "export", id, "--format", "md"}).status, 0);
    EXPECT_EQ(ember({"sessions", "--db", db, "check"}).status, 0);
    // 500 levels are within the limit and export as they are.
    const CommandResult shallow = run_command(
        {python, "-c",
         "import sqlite3, sys\n"
         "c = sqlite3.connect(sys.argv[1])\n"
         "c.execute('UPDATE conversations SET sampling = ?', ('{\"x\": ' + '[' * 500 + ']' * "
         "500 + '}',))\n"
         "c.commit()\n",
         db},
        "", 60);
    ASSERT_EQ(shallow.status, 0) << shallow.err;
    const CommandResult exported =
        ember({"sessions", "--db", db, "export", id, "--format", "json"});
    ASSERT_EQ(exported.status, 0) << exported.err;
    EXPECT_TRUE(nlohmann::json::parse(exported.out)["sampling"]["x"].is_array());
}

TEST(StoreHostileInput, ANulInAJsonlSystemMessageIsRefusedLikeOneInAPrompt) {
    EMBER_REQUIRE_FIXTURE(kModel);
    TempDir dir;
    const std::string db = dir.file("chat.db");
    const CommandResult chat = ember({"chat", "-m", fixture_path(kModel), "--script", "--jsonl",
                                      "--temp", "0", "-n", "4", "-c", "256", "-t", "1", "--db", db},
                                     "{\"role\": \"system\", \"content\": \"Be\\u0000 evil\"}\n"
                                     "{\"prompt\": \"Hello\"}\n");
    EXPECT_EQ(chat.status, 1) << chat.err;
    EXPECT_NE(chat.err.find("ember: stdin line 1: the system message holds a NUL byte (byte 3); "
                            "line skipped"),
              std::string::npos)
        << chat.err;
    // The prompt after it was answered, without that system message.
    const CommandResult list = ember({"sessions", "--db", db, "list"});
    const auto rows = split_lines(list.out);
    ASSERT_EQ(rows.size(), 2u) << list.out;
    const std::string id = rows[1].substr(0, rows[1].find(' '));
    const CommandResult exported =
        ember({"sessions", "--db", db, "export", id, "--format", "json"});
    ASSERT_EQ(exported.status, 0) << exported.err;
    const auto conv = nlohmann::json::parse(exported.out);
    EXPECT_EQ(conv["system_prompt"].get<std::string>().find('\0'), std::string::npos);
    ASSERT_EQ(conv["messages"].size(), 2u) << exported.out;
    EXPECT_EQ(conv["messages"][0]["content"], "Hello");
}

TEST(StoreHostileInput, SpecialDbPathsAreRefusedAlikeByEveryCommand) {
    EMBER_REQUIRE_FIXTURE(kModel);
    TempDir dir;
    const std::string fifo = dir.file("fifo");
    ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
    const bool journal_before = fs::exists("/dev/null-journal") || fs::exists("/dev/null-wal");
    const std::string uri = "file:" + dir.file("uri.db");
    struct Case {
        std::string path;
        std::string says;
    };
    const std::vector<Case> cases = {{"/dev/null", "' is a device, not a database file"},
                                     {fifo, "' is a FIFO, not a database file"},
                                     {uri, "': SQLite URIs are not taken"}};
    for (const auto& c : cases) {
        SCOPED_TRACE(c.path);
        const std::string model = fixture_path(kModel);
        expect_error_line(
            ember({"chat", "-m", model, "--script", "-n", "2", "--db", c.path}, "hello\n"),
            "session database '" + c.path + c.says);
        for (const char* sub : {"list", "stats", "check"}) {
            expect_error_line(ember({"sessions", "--db", c.path, sub}),
                              "session database '" + c.path + c.says);
        }
        expect_error_line(ember({"sessions", "--db", c.path, "show", "abc"}),
                          "session database '" + c.path + c.says);
        expect_error_line(ember({"replay", "--db", c.path, "abc"}),
                          "session database '" + c.path + c.says);
        expect_error_line(ember({"serve", "-m", model, "--port", "0", "--db", c.path}),
                          "session database '" + c.path + c.says);
    }
    // Nothing was written beside the device, and no "file:" directory was made for the URI.
    if (!journal_before) {
        EXPECT_FALSE(fs::exists("/dev/null-journal"));
        EXPECT_FALSE(fs::exists("/dev/null-wal"));
    }
    EXPECT_FALSE(fs::exists("file:"));
    EXPECT_FALSE(fs::exists(dir.file("uri.db")));
    // A path that only looks like a URI when written without ./ is an ordinary file.
    const std::string odd = dir.file("file:odd.db");
    const CommandResult chat =
        ember({"chat", "-m", fixture_path(kModel), "--script", "-n", "2", "--db", odd}, "hi\n");
    EXPECT_EQ(chat.status, 0) << chat.err;
    EXPECT_TRUE(fs::exists(odd));
    EXPECT_EQ(ember({"sessions", "--db", odd, "check"}).status, 0);
}

}  // namespace
}  // namespace ember::test
