// Issue 43's small things of the command line, each through the real binary: "did you mean"
// for commands, options and model names; a --db typed wrong; --json-schema answers that start
// with their JSON; exported settings as the shortest decimals; a bench whose bandwidth probe
// stays in proportion; the README's --tools example as written; CJK titles in `sessions list`.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/support/fixtures.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"

namespace ember::test {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kLlama = "arch/llama/llama.gguf";
constexpr const char* kQwen3 = "arch/qwen3/qwen3.gguf";  // has a tool-call template

TEST(DidYouMean, AMistypedCommandIsAnsweredWithTheNearestOne) {
    auto r = run_command({ember_binary(), "caht"});
    EXPECT_EQ(r.status, 2);
    EXPECT_EQ(r.err,
              "ember: error: unknown command 'caht'; did you mean 'chat'?\n"
              "Run with --help for more information.\n");
    r = run_command({ember_binary(), "sesions", "list"});
    EXPECT_EQ(r.status, 2);
    EXPECT_NE(r.err.find("did you mean 'sessions'?"), std::string::npos) << r.err;
    // A sub-command of a command.
    r = run_command({ember_binary(), "sessions", "lst"});
    EXPECT_EQ(r.status, 2);
    EXPECT_EQ(r.err,
              "ember: error: unknown command 'sessions lst'; did you mean 'sessions list'?\n"
              "Run with --help for more information.\n");
    // Nothing near: no guess.
    r = run_command({ember_binary(), "xyzzy"});
    EXPECT_EQ(r.status, 2);
    EXPECT_EQ(r.err,
              "ember: error: unknown command 'xyzzy'\nRun with --help for more information.\n");
}

TEST(DidYouMean, AMistypedOptionIsAnsweredWithTheNearestOneOfItsCommand) {
    auto r = run_command({ember_binary(), "chat", "-m", "x.gguf", "--tmep", "0.5", "-p", "hi"});
    EXPECT_EQ(r.status, 2);
    EXPECT_EQ(r.err,
              "ember: error: unknown option '--tmep'; did you mean '--temp'?\n"
              "Run with --help for more information.\n");
    // Options first, no command (`ember -m ... --tmep`): chat's options.
    r = run_command({ember_binary(), "-m", "x.gguf", "--top-pp", "0.5"});
    EXPECT_EQ(r.status, 2);
    EXPECT_NE(r.err.find("unknown option '--top-pp'; did you mean '--top-p'?"), std::string::npos)
        << r.err;
    // A sub-command's own options.
    r = run_command({ember_binary(), "sessions", "list", "--limt", "3"});
    EXPECT_EQ(r.status, 2);
    EXPECT_NE(r.err.find("unknown option '--limt'; did you mean '--limit'?"), std::string::npos)
        << r.err;
}

TEST(DidYouMean, AMistypedModelNameIsAnsweredWithTheNearestFoundModel) {
    EMBER_REQUIRE_FIXTURE(kLlama);
    TempDir home;
    const fs::path models = home.path() / ".local/share/ember/models";
    fs::create_directories(models);
    fs::copy_file(fixture_path(kLlama), models / "tiny-llama.gguf");
    const auto r =
        run_command({"/usr/bin/env", "-u", "XDG_DATA_HOME", "-u", "EMBER_MODEL",
                     "HOME=" + home.path().string(), ember_binary(), "info", "-m", "tiny-lama"});
    EXPECT_EQ(r.status, 1);
    EXPECT_NE(r.err.find("model 'tiny-lama': no such file; did you mean 'tiny-llama'?"),
              std::string::npos)
        << r.err;
}

TEST(NamedDatabase, AMissingFolderIsRefusedAndAMissingFileIsSaidNotInvented) {
    EMBER_REQUIRE_FIXTURE(kLlama);
    TempDir dir;
    const std::string in_missing_folder = dir.file("typo/history.db");
    auto r = run_command({ember_binary(), "chat", "-m", fixture_path(kLlama), "-p", "hi", "-n", "2",
                          "--db", in_missing_folder});
    EXPECT_EQ(r.status, 1);
    EXPECT_NE(r.err.find("session database '" + in_missing_folder + "': the folder '" +
                         dir.file("typo") + "' does not exist"),
              std::string::npos)
        << r.err;
    EXPECT_FALSE(fs::exists(dir.file("typo")));
    // Reading a file that is not there is an error, not an empty list.
    r = run_command({ember_binary(), "sessions", "list", "--db", dir.file("histroy.db")});
    EXPECT_EQ(r.status, 1);
    EXPECT_EQ(r.err, "ember: error: no session database at " + dir.file("histroy.db") + "\n");
    EXPECT_FALSE(fs::exists(dir.file("histroy.db")));
    // Writing to a new file in a folder that exists starts a database there, and says so.
    r = run_command({ember_binary(), "chat", "-m", fixture_path(kLlama), "-p", "hi", "-n", "2",
                     "--db", dir.file("new.db")});
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.err.find("no session database at " + dir.file("new.db") +
                         " yet: starting a new one there"),
              std::string::npos)
        << r.err;
    EXPECT_TRUE(fs::exists(dir.file("new.db")));
    // The second time it exists: nothing said.
    r = run_command({ember_binary(), "chat", "-m", fixture_path(kLlama), "-p", "hi", "-n", "2",
                     "--db", dir.file("new.db")});
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.err.find("starting a new one"), std::string::npos) << r.err;
}

TEST(JsonSchemaOutput, StartsWithTheJsonValueNotABlank) {
    EMBER_REQUIRE_FIXTURE(kLlama);
    // Random weights at a high temperature: a blank first was often drawn when allowed.
    for (const std::string seed : {"1", "2", "3", "4", "5", "6"}) {
        const auto r = run_command(
            {ember_binary(), "run", "-m", fixture_path(kLlama), "-p", "JSON?", "-n", "12", "--temp",
             "2", "--seed", seed, "-t", "1", "--json", "--json-schema",
             R"({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]})"});
        ASSERT_EQ(r.status, 0) << r.err;
        const std::string text = json::parse(r.out)["text"];  // the completion, not the prompt
        ASSERT_FALSE(text.empty());
        EXPECT_EQ(text.front(), '{') << "seed " << seed << ": [" << text << "]";
    }
}

// A conversation saved in `db` by a one-prompt chat; returns its id (from `sessions list`).
std::string saved_conversation(const std::string& db, const std::vector<std::string>& extra) {
    std::vector<std::string> argv = {
        ember_binary(), "chat", "-m", fixture_path(kLlama), "-p", "hi", "-n", "2", "--db", db};
    argv.insert(argv.end(), extra.begin(), extra.end());
    const auto r = run_command(argv);
    EXPECT_EQ(r.status, 0) << r.err;
    const auto list = run_command({ember_binary(), "sessions", "list", "--db", db});
    const auto lines = split_lines(list.out);
    if (lines.size() < 2) return {};
    return lines[1].substr(0, lines[1].find(' '));
}

TEST(SessionsExport, SettingsAreTheShortestDecimalsOfTheirFloats) {
    EMBER_REQUIRE_FIXTURE(kLlama);
    TempDir dir;
    const std::string db = dir.file("h.db");
    const std::string id = saved_conversation(db, {"--temp", "0.8", "--top-p", "0.95"});
    ASSERT_FALSE(id.empty());
    const auto r =
        run_command({ember_binary(), "sessions", "export", id, "--format", "json", "--db", db});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out.find("0.800000011920929"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("0.949999988"), std::string::npos) << r.out;
    const json exported = json::parse(r.out);
    EXPECT_EQ(exported["sampling"]["temperature"].get<double>(), 0.8);
    EXPECT_EQ(exported["sampling"]["top_p"].get<double>(), 0.95);
    EXPECT_NE(r.out.find("0.8"), std::string::npos);
}

TEST(SessionsList, PadsTitlesByDisplayWidth) {
    EMBER_REQUIRE_FIXTURE(kLlama);
    TempDir dir;
    const std::string db = dir.file("h.db");
    const std::string id = saved_conversation(db, {});
    ASSERT_FALSE(id.empty());
    const std::string title = "日本語のタイトル";  // 8 characters, 16 columns
    ASSERT_EQ(run_command({ember_binary(), "sessions", "rename", id, title, "--db", db}).status, 0);
    const auto r = run_command({ember_binary(), "sessions", "list", "--db", db});
    ASSERT_EQ(r.status, 0) << r.err;
    const auto lines = split_lines(r.out);
    ASSERT_GE(lines.size(), 2u);
    // The title column is 40 columns: 16 for the title, 24 spaces, then the separator.
    const size_t at = lines[1].find(title);
    ASSERT_NE(at, std::string::npos) << lines[1];
    EXPECT_EQ(lines[1].substr(at + title.size(), 25), std::string(25, ' ')) << lines[1];
    EXPECT_NE(lines[1][at + title.size() + 25], ' ') << lines[1];
    // In columns: the id's 10 and a space, the title's 40 and a space, as in the header.
    EXPECT_EQ(at, 11u) << lines[1];
    EXPECT_EQ(lines[0].find("MODEL"), 11u + 40u + 1u) << lines[0];
}

TEST(Bench, TheBandwidthProbeStaysInProportionToAShortRun) {
    EMBER_REQUIRE_FIXTURE(kLlama);
    auto r = run_command({ember_binary(), "bench", "-m", fixture_path(kLlama), "-p", "16", "-n",
                          "8", "--reps", "5", "-t", "2", "--json"});
    ASSERT_EQ(r.status, 0) << r.err;
    json j = json::parse(r.out);
    // A rep of this 8 MiB model takes milliseconds: one pass of one probe, not six probes of
    // five passes over 1 GiB each.
    EXPECT_EQ(j["bandwidth_passes"].get<int>(), 1) << r.out;
    EXPECT_FALSE(j["bandwidth_interleaved"].get<bool>());
    EXPECT_GT(j["bandwidth_gbs"].get<double>(), 0);
    EXPECT_GT(j["bandwidth_seconds"].get<double>(), 0);
    EXPECT_LT(j["bandwidth_seconds"].get<double>(), j["run_seconds"].get<double>());
    // --bw-passes asks for the old thoroughness; --no-bandwidth for none.
    r = run_command({ember_binary(), "bench", "-m", fixture_path(kLlama), "-p", "16", "-n", "8",
                     "--reps", "1", "-t", "2", "--bw-passes", "2", "--json"});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_GE(json::parse(r.out)["bandwidth_passes"].get<int>(), 2) << r.out;
    r = run_command({ember_binary(), "bench", "-m", fixture_path(kLlama), "-p", "16", "-n", "8",
                     "--reps", "1", "-t", "2", "--no-bandwidth", "--json"});
    ASSERT_EQ(r.status, 0) << r.err;
    j = json::parse(r.out);
    EXPECT_TRUE(j["bandwidth_gbs"].is_null()) << r.out;
    EXPECT_TRUE(j["roofline_fraction"].is_null());
    EXPECT_EQ(j["bandwidth_seconds"].get<double>(), 0);
    r = run_command({ember_binary(), "bench", "-m", fixture_path(kLlama), "-p", "16", "-n", "8",
                     "--reps", "1", "-t", "2", "--no-bandwidth"});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("read bandwidth   not measured (--no-bandwidth): no roofline"),
              std::string::npos)
        << r.out;
}

// The README's --tools example as it ships (assets/examples/tools.json and weather.sh), run
// from the tools file's folder.
TEST(ReadmeTools, TheExampleRunsAsWrittenAndABadProgramStopsTheStart) {
    EMBER_REQUIRE_FIXTURE(kQwen3);
    TempDir dir;
    const fs::path examples = fs::path(EMBER_SOURCE_DIR) / "assets" / "examples";
    fs::copy_file(examples / "tools.json", dir.file("tools.json"));
    fs::copy_file(examples / "weather.sh", dir.file("weather.sh"));
    fs::permissions(dir.file("weather.sh"), fs::perms::owner_all);
    const auto in_dir = [&](const std::string& command) {
        return run_command({"/bin/sh", "-c",
                            "cd " + shell_quote(dir.path().string()) + " && exec " +
                                shell_quote(ember_binary()) + " " + command},
                           "", 120);
    };
    const std::string chat = "chat -m " + shell_quote(fixture_path(kQwen3)) +
                             " -t 1 --seed 3 -n 160 --think off --no-db --tools tools.json"
                             " --tool-choice get_weather -p 'Weather in Oslo?' --yes-tools";
    auto r = in_dir(chat);
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("[tool result] get_weather"), std::string::npos) << r.out << r.err;
    EXPECT_NE(r.out.find("Sunny, 18 C (arguments: {"), std::string::npos) << r.out << r.err;
    // A program that is not there: one line naming the file, the tool and the program, exit 1,
    // before the model is loaded.
    fs::remove(dir.file("weather.sh"));
    r = in_dir(chat);
    EXPECT_EQ(r.status, 1);
    EXPECT_NE(r.err.find("ember: error: tools.json: tool 1 (\"get_weather\"): \"command\"[0] '" +
                         (dir.path() / "weather.sh").string() + "' does not exist\n"),
              std::string::npos)
        << r.err;
    EXPECT_EQ(r.out, "");
}

// The example config file (assets/examples/config.json) as the user's: its preset starts a
// chat, and the preset's settings are the ones the run reports.
TEST(ExampleConfig, ItsPresetStartsAChat) {
    EMBER_REQUIRE_FIXTURE(kQwen3);
    TempDir dir;
    fs::create_directories(dir.path() / "config" / "ember");
    fs::copy_file(fs::path(EMBER_SOURCE_DIR) / "assets" / "examples" / "config.json",
                  dir.path() / "config" / "ember" / "config.json");
    const auto r =
        run_command({"/usr/bin/env", "XDG_CONFIG_HOME=" + (dir.path() / "config").string(),
                     ember_binary(), "chat", "-m", fixture_path(kQwen3), "-t", "1", "-n", "2",
                     "--think", "off", "--no-db", "--preset", "code", "-p", "hi", "--jsonl"},
                    "", 120);
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("\"finish\""), std::string::npos) << r.out;
    // A preset the file does not hold is refused, naming it and the ones it has.
    const auto missing = run_command(
        {"/usr/bin/env", "XDG_CONFIG_HOME=" + (dir.path() / "config").string(), ember_binary(),
         "chat", "-m", fixture_path(kQwen3), "--no-db", "--preset", "poem", "-p", "hi"},
        "", 120);
    EXPECT_NE(missing.status, 0);
    EXPECT_NE(missing.err.find("poem"), std::string::npos) << missing.err;
    EXPECT_NE(missing.err.find("code"), std::string::npos) << missing.err;
}

}  // namespace
}  // namespace ember::test
