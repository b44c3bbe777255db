// `ember run` speculates as chat does: greedy ids are the same with and without --no-spec on
// every fixture family, and the speculating run did draft (so the comparison is not vacuous).
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "tests/support/fixtures.h"
#include "tests/support/process.h"

namespace ember::test {
namespace {

using json = nlohmann::json;

// Prompts that repeat themselves, so the n-gram table has something to draft from: token ids
// below 512 (inside every fixture's vocabulary; stories260K has the smallest, 512), and text.
std::string repeated_ids() {
    std::string ids;
    for (int rep = 0; rep < 6; ++rep) {
        for (int id : {17, 301, 45, 99, 260, 7, 412, 33}) {
            if (!ids.empty()) ids += ',';
            ids += std::to_string(id);
        }
    }
    return ids;
}

constexpr int64_t kTokens = 48;

json run_json(const std::string& model, const std::vector<std::string>& extra) {
    std::vector<std::string> argv = {ember_binary(), "run", "-m", fixture_path(model),
                                     "--temp",       "0",   "-n", std::to_string(kTokens),
                                     "--ignore-eos", "-t",  "2",  "--json"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    const auto r = run_command(argv);
    EXPECT_EQ(r.status, 0) << model << ": " << r.err;
    if (r.status != 0) return json::object();
    return json::parse(r.out);
}

class RunSpeculation : public ::testing::TestWithParam<const char*> {};

// Each prompt with and without --no-spec: the same ids and text. The hybrids' gate drafts
// only where acceptance is high, so a model must have drafted on one of the prompts, not both.
TEST_P(RunSpeculation, GreedyOutputEqualWithAndWithoutSpeculation) {
    const char* model = GetParam();
    EMBER_REQUIRE_FIXTURE(model);
    const std::vector<std::vector<std::string>> prompts = {
        {"--ids", repeated_ids()},
        {"-p", "a b c d a b c d a b c d a b c d a b c d"},
        {"-p", "def add(a, b):\n    return a + b\n\ndef add(a, b):\n    return"}};
    int64_t drafted = 0;
    for (const auto& prompt : prompts) {
        const json on = run_json(model, prompt);
        std::vector<std::string> off_args = prompt;
        off_args.push_back("--no-spec");
        const json off = run_json(model, off_args);
        ASSERT_TRUE(on.contains("ids") && off.contains("ids")) << prompt[1];
        EXPECT_EQ(on["ids"].size(), static_cast<size_t>(kTokens)) << prompt[1];
        EXPECT_EQ(on["ids"], off["ids"]) << prompt[1];
        EXPECT_EQ(on["text"], off["text"]) << prompt[1];
        EXPECT_EQ(off["spec_drafted"].get<int64_t>(), 0) << prompt[1];
        EXPECT_LE(on["spec_accepted"].get<int64_t>(), on["spec_drafted"].get<int64_t>());
        drafted += on["spec_drafted"].get<int64_t>();
    }
    EXPECT_GT(drafted, 0) << "no prompt drafted, so the comparison proved nothing";
}

// Every model fixture ember can load; FixtureListFollowsTheFixtures keeps it complete.
const char* const kModels[] = {"arch/llama/llama.gguf",       "arch/qwen2/qwen2.gguf",
                               "arch/qwen3/qwen3.gguf",       "arch/qwen35/qwen35.gguf",
                               "arch/lfm2/lfm2.gguf",         "arch/gemma3/gemma3.gguf",
                               "arch/qwen3moe/qwen3moe.gguf", "models/stories260K.gguf"};
// Fixture architectures ember does not load yet (`ember run` refuses them by name).
const char* const kNotSupported[] = {"gptoss"};

INSTANTIATE_TEST_SUITE_P(Fixtures, RunSpeculation, ::testing::ValuesIn(kModels),
                         [](const auto& param_info) {
                             std::string name = param_info.param;
                             name = name.substr(name.rfind('/') + 1);
                             return name.substr(0, name.find('.'));
                         });

// A fixture architecture added later is either in kModels or named as not supported, so
// "every fixture model" stays true as the fixture grows.
TEST(RunSpeculationFixtures, FixtureListFollowsTheFixtures) {
    const std::filesystem::path arch = fixture_path("arch");
    EMBER_SKIP_OR_FAIL_WITHOUT(arch.string());
    std::set<std::string> known(std::begin(kNotSupported), std::end(kNotSupported));
    for (const char* model : kModels) {
        const std::string path = model;
        if (path.starts_with("arch/")) known.insert(path.substr(5, path.find('/', 5) - 5));
    }
    for (const auto& entry : std::filesystem::directory_iterator(arch)) {
        if (!entry.is_directory()) continue;
        const std::string name = entry.path().filename().string();
        EXPECT_TRUE(known.contains(name))
            << "arch/" << name << " is in the fixture but not in kModels (nor kNotSupported)";
    }
}

TEST(RunSpeculationOptions, DraftMaxOutOfRangeIsAUsageError) {
    EMBER_REQUIRE_FIXTURE("models/stories260K.gguf");
    const auto r =
        run_command({ember_binary(), "run", "-m", fixture_path("models/stories260K.gguf"), "--ids",
                     "1,2,3", "--draft-max", "0"});
    EXPECT_EQ(r.status, 2) << r.err;
    EXPECT_NE(r.err.find("--draft-max"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace ember::test
