// --grammar and --json-schema on the command line: the answer follows them, and a bad grammar
// or an unsupported schema feature is a usage error naming the flag and the fault.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/support/fixtures.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"

namespace ember::test {
namespace {

using json = nlohmann::json;

const char* const kLlama = "arch/llama/llama.gguf";

std::string write(TempDir& dir, const std::string& name, const std::string& text) {
    const std::string path = dir.file(name);
    std::ofstream(path) << text;
    return path;
}

TEST(ConstrainedCli, RunFollowsAGrammarAndAnInlineSchema) {
    EMBER_REQUIRE_FIXTURE(kLlama);
    TempDir dir;
    const std::string yes_no = write(dir, "yn.gbnf", "root ::= (\"yes\" | \"no\") \"!\"{1,3}\n");
    for (const std::string seed : {"1", "2", "3", "4"}) {
        const auto r = run_command({ember_binary(), "run", "-m", fixture_path(kLlama), "-p",
                                    "Well?", "-n", "8", "--temp", "1.5", "--seed", seed, "-t", "1",
                                    "--json", "--grammar", yes_no});
        ASSERT_EQ(r.status, 0) << r.err;
        const std::string text = json::parse(r.out)["text"];
        EXPECT_TRUE(text == "yes!" || text == "yes!!" || text == "yes!!!" || text == "no!" ||
                    text == "no!!" || text == "no!!!")
            << text;
    }
    const auto r = run_command(
        {ember_binary(), "chat", "-m", fixture_path(kLlama), "-p", "n?", "-n", "20", "--temp",
         "1.5", "-t", "1", "--no-db", "--jsonl", "--json-schema",
         R"({"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2})"});
    ASSERT_EQ(r.status, 0) << r.err;
    const json v = json::parse(json::parse(r.out)["reply"].get<std::string>());
    ASSERT_TRUE(v.is_array());
    EXPECT_EQ(v.size(), 2u);
    for (const json& x : v) EXPECT_TRUE(x.is_number_integer()) << v.dump();
}

TEST(ConstrainedCli, BadGrammarsAndUnsupportedSchemasAreUsageErrors) {
    EMBER_REQUIRE_FIXTURE(kLlama);
    TempDir dir;
    const std::string broken = write(dir, "bad.gbnf", "root ::= \"a\" | item\n");
    auto r = run_command(
        {ember_binary(), "run", "-m", fixture_path(kLlama), "-p", "x", "--grammar", broken});
    EXPECT_EQ(r.status, 2);
    EXPECT_NE(r.err.find("--grammar: line 1, column 16: rule 'item' is used but not defined"),
              std::string::npos)
        << r.err;
    r = run_command({ember_binary(), "chat", "-m", fixture_path(kLlama), "-p", "x", "--no-db",
                     "--json-schema", R"({"type": "string", "format": "ipv4"})"});
    EXPECT_EQ(r.status, 2);
    EXPECT_NE(r.err.find("--json-schema"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("format 'ipv4' is not supported"), std::string::npos) << r.err;
    r = run_command({ember_binary(), "run", "-m", fixture_path(kLlama), "-p", "x", "--json-schema",
                     dir.file("missing.json")});
    EXPECT_EQ(r.status, 2);
    EXPECT_NE(r.err.find("cannot read"), std::string::npos) << r.err;
    // A JSONL line with an unsupported schema is skipped, named; the others are answered.
    r = run_command({ember_binary(), "chat", "-m", fixture_path(kLlama), "--jsonl", "--no-db", "-n",
                     "8", "-t", "1"},
                    R"({"prompt": "a", "schema": {"type": "integer", "maximum": 3}})"
                    "\n"
                    R"({"prompt": "b", "schema": {"type": "boolean"}})"
                    "\n");
    EXPECT_EQ(r.status, 1);
    EXPECT_NE(r.err.find("stdin line 1: \"schema\": unsupported JSON Schema keyword 'maximum'"),
              std::string::npos)
        << r.err;
    const auto lines = split_lines(r.out);
    ASSERT_EQ(lines.size(), 1u) << r.out;
    const std::string reply = json::parse(lines[0])["reply"];
    EXPECT_TRUE(json::parse(reply).is_boolean()) << reply;  // leading whitespace is allowed
}

}  // namespace
}  // namespace ember::test
