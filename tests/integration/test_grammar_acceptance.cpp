// Issue 32's acceptance: 200 random JSON Schemas x 3 fixture models, sampled at temperature
// 1.5 with speculation on and a reply limit the grammar must close within; every reply must
// parse and validate with an independent validator (Python's jsonschema, run by
// tests/integration/py/grammar_acceptance.py from BUILD_DIR/venv, made by
// scripts/test_venv.sh). Skipped without the fixtures or the venv, failed under CI=true.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/support/fixtures.h"
#include "tests/support/process.h"

namespace ember::test {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const std::vector<std::string> kModels = {"arch/qwen3/qwen3.gguf", "arch/llama/llama.gguf",
                                          "arch/gemma3/gemma3.gguf"};

fs::path build_dir() {
    return fs::read_symlink("/proc/self/exe").parent_path().parent_path();
}

// The script's per-model summaries, keyed by model name; fails the test on its errors.
std::vector<json> run_acceptance(const std::vector<std::string>& extra) {
    const fs::path python = build_dir() / "venv" / "bin" / "python";
    std::vector<std::string> argv = {
        python.string(),
        std::string(EMBER_SOURCE_DIR) + "/tests/integration/py/grammar_acceptance.py", "--ember",
        ember_binary()};
    for (const std::string& m : kModels) {
        argv.push_back("--model");
        argv.push_back(fs::path(m).stem().string() + "=" + fixture_path(m));
    }
    argv.insert(argv.end(), extra.begin(), extra.end());
    const CommandResult r = run_command(argv, "", 600);
    EXPECT_EQ(r.status, 0) << r.out << "\n" << r.err;
    std::vector<json> out;
    for (const std::string& line : split_lines(r.out)) {
        if (!line.empty()) out.push_back(json::parse(line));
    }
    return out;
}

TEST(GrammarAcceptance, TwoHundredRandomSchemasOnThreeModelsAllValidate) {
    for (const std::string& m : kModels) EMBER_REQUIRE_FIXTURE(m);
    const fs::path python = build_dir() / "venv" / "bin" / "python";
    if (!fs::exists(python) ||
        run_command({python.string(), "-c", "import jsonschema"}, "", 60).status != 0) {
        EMBER_SKIP_OR_FAIL("no Python venv with jsonschema at " + python.string() +
                           ": run scripts/test_venv.sh " + build_dir().string());
    }
    // top-k 40 (the candidates are checked one by one when that settles the draw)...
    const std::vector<json> main = run_acceptance({"--schemas", "200", "--temp", "1.5"});
    ASSERT_EQ(main.size(), kModels.size());
    for (const json& s : main) {
        EXPECT_EQ(s.at("valid"), 200) << s.dump();
        // The limit cut some replies, which still validated: the grammar closed them in time.
        EXPECT_GT(s.at("finish_length").get<int>(), 0) << s.dump();
        EXPECT_GT(s.at("spec_drafted").get<int>(), 0) << s.dump();  // speculation was on
    }
    EXPECT_GT(main[0].at("thinking_replies").get<int>(), 0)
        << "qwen3 reasons before some answers (unconstrained): " << main[0].dump();
    // ...and top-k off, where every token goes through the whole-vocabulary mask.
    const std::vector<json> masked =
        run_acceptance({"--schemas", "30", "--top-k", "0", "--seed", "7", "--max-tokens", "64"});
    ASSERT_EQ(masked.size(), kModels.size());
    for (const json& s : masked) EXPECT_EQ(s.at("valid"), 30) << s.dump();
}

}  // namespace
}  // namespace ember::test
