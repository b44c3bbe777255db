// The official OpenAI client library (npm `openai`) against a real `ember serve`: a chat
// completion, a streamed one, a completion and two error cases, asserted on the parsed
// results (tests/integration/js/openai_client.cjs). The package is installed with npm into
// the build directory on first use; without node/npm or the registry the test is skipped,
// except under CI=true, where that is a failure.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "tests/support/fixtures.h"
#include "tests/support/process.h"
#include "tests/support/serve.h"
#include "tests/support/temp_dir.h"

namespace ember::test {
namespace {

namespace fs = std::filesystem;

// Where the package goes: next to this test's executable (the build directory).
fs::path npm_prefix() {
    return fs::read_symlink("/proc/self/exe").parent_path() / "npm-openai";
}

// Returns an empty string when the package is there; otherwise why it is not.
std::string ensure_openai_package(const std::string& npm) {
    const fs::path prefix = npm_prefix();
    if (fs::exists(prefix / "node_modules" / "openai" / "package.json")) return {};
    fs::create_directories(prefix);
    const auto r = run_command({npm, "install", "--prefix", prefix.string(), "--no-audit",
                                "--no-fund", "--loglevel=error", "openai@4"});
    if (r.status != 0) return "npm install openai@4 failed: " + r.err + r.out;
    return {};
}

#define SKIP_OR_FAIL(why)                                                    \
    do {                                                                     \
        if (running_in_ci()) FAIL() << (why) << " (required under CI=true)"; \
        GTEST_SKIP() << (why);                                               \
    } while (0)

TEST(ServeOpenAiClient, ChatStreamingAndErrorsThroughTheOfficialLibrary) {
    EMBER_REQUIRE_FIXTURE("arch/qwen3/qwen3.gguf");
    const std::string node = find_in_path("node");
    const std::string npm = find_in_path("npm");
    if (node.empty() || npm.empty())
        SKIP_OR_FAIL("node and npm are needed (apt install nodejs npm)");
    const std::string missing = ensure_openai_package(npm);
    if (!missing.empty()) SKIP_OR_FAIL(missing);

    TempDir dir;
    ServeProcess server({"-m", fixture_path("arch/qwen3/qwen3.gguf"), "--no-db", "-t", "1"},
                        dir.file("log"));
    ASSERT_GT(server.port(), 0) << server.process().log();
    const std::string script =
        std::string(EMBER_SOURCE_DIR) + "/tests/integration/js/openai_client.cjs";
    const auto r = run_command(
        {node, script, (npm_prefix() / "node_modules" / "openai").string(), server.url(), "qwen3"});
    ASSERT_EQ(r.status, 0) << r.err << r.out << "\nserver log:\n" << server.process().log();
    const auto lines = split_lines(r.out);
    ASSERT_FALSE(lines.empty());
    const auto result = nlohmann::json::parse(lines.back());
    EXPECT_EQ(result["reply"], result["streamed"]);
    EXPECT_GE(result["chunks"].get<int>(), 3);
    EXPECT_NE(result["not_found"].get<std::string>().find("no-such-model"), std::string::npos);
    EXPECT_NE(result["bad_request"].get<std::string>().find("temperature"), std::string::npos);
}

}  // namespace
}  // namespace ember::test
