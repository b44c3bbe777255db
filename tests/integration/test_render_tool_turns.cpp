// Tool turns render as HF renders them: conversations with tools, assistant tool_calls and
// tool results, sent as a client sends them to `ember serve` (OpenAI's shape: arguments as JSON
// strings, content null beside calls), rendered by `ember render --request` (serve's request
// parser, the engine's shaping of tool turns, Ember's template engine) must equal what jinja2
// renders in HF transformers' environment for the same conversation shaped as HF's tool-use
// documentation shapes it (tests/integration/py/render_tool_turns.py, run in the pinned venv
// that scripts/test_venv.sh makes). A template that refuses a conversation in jinja2 (Llama
// 3.2 with two calls in one turn, Mistral's call-id rule) must be refused by Ember too.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "tests/support/fixtures.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"

namespace ember::test {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// Templates of the fixtures that carry tools (Gemma 3's has none: its tool turns are Ember's
// prompt convention, tested in tests/unit/test_tool_calls.cpp).
const std::vector<std::string> kTemplates = {
    "Qwen-Qwen3-0.6B",
    "meta-llama-Llama-3.2-3B-Instruct",
    "openai-gpt-oss-120b",
    "Qwen-Qwen2.5-7B-Instruct",
    "HuggingFaceTB-SmolLM3-3B",
    "ibm-granite-granite-4.0",
    "Qwen3.5-4B",
    "mistralai-Mistral-Nemo-Instruct-2407",
    "LFM2.5-Instruct",
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B",
};

fs::path build_dir() {
    return fs::read_symlink("/proc/self/exe").parent_path().parent_path();
}

TEST(RenderToolTurns, EmberRendersToolTurnsAsHfDoes) {
    for (const auto& name : kTemplates) EMBER_REQUIRE_FIXTURE("templates/" + name + ".jinja");
    const fs::path python = build_dir() / "venv" / "bin" / "python";
    if (!fs::exists(python)) {
        const std::string why = "no Python venv with jinja2 at " + python.string() +
                                ": run scripts/test_venv.sh " + build_dir().string();
        EMBER_SKIP_OR_FAIL(why);
    }
    TempDir dir;
    std::vector<std::string> argv = {
        python.string(),
        std::string(EMBER_SOURCE_DIR) + "/tests/integration/py/render_tool_turns.py",
        fixtures_dir() + "/templates", dir.path().string()};
    argv.insert(argv.end(), kTemplates.begin(), kTemplates.end());
    const auto made = run_command(argv, "", 120);
    ASSERT_EQ(made.status, 0) << made.out << made.err;
    const json cases = json::parse(read_file(dir.file("cases.json")));
    int compared = 0, refused = 0;
    for (const json& c : cases.at("cases")) {
        const std::string name = c.at("template");
        const std::string label = name + " / " + c.at("conversation").get<std::string>() +
                                  (c.at("add_generation_prompt").get<bool>() ? " + prompt" : "");
        std::vector<std::string> render = {
            ember_binary(),    "render",
            "--chat-template", fixtures_dir() + "/templates/" + name + ".jinja",
            "--request",       "--messages",
            c.at("request"),   "--bos",
            cases.at("bos"),   "--eos",
            cases.at("eos"),   "--date",
            cases.at("date")};
        if (!c.at("add_generation_prompt").get<bool>()) render.push_back("--no-generation-prompt");
        const auto r = run_command(render, "", 60);
        if (c.contains("error")) {
            EXPECT_NE(r.status, 0)
                << label << ": jinja2 refused (" << c.at("error") << ") but Ember rendered:\n"
                << r.out;
            ++refused;
            continue;
        }
        ASSERT_EQ(r.status, 0) << label << ": " << r.err;
        EXPECT_EQ(r.out, c.at("text").get<std::string>()) << label;
        ++compared;
    }
    EXPECT_GE(compared, 50);
    EXPECT_GE(refused, 2);
}

}  // namespace
}  // namespace ember::test
