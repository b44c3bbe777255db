// Tool calls in `ember serve` through the official OpenAI Python client, for each family's call
// format: Qwen3 (Hermes <tool_call>, the fixture's own template), Llama 3 JSON (the llama
// fixture served with Llama 3.2's template), gpt-oss harmony (the fixture's own template) and
// Gemma 3 (prompt-based, the fixture's own template). tests/integration/py/openai_tools.py
// forces calls (the models have random weights), validates their arguments against the tools'
// schemas with `jsonschema`, plain and streamed, and checks auto, a follow-up with the tool
// results, parallel_tool_calls=false and three 400s. The venv comes from scripts/test_venv.sh;
// without it (or the fixtures) the tests skip, except under CI=true, where they fail.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "tests/support/fixtures.h"
#include "tests/support/process.h"
#include "tests/support/serve.h"
#include "tests/support/temp_dir.h"

namespace ember::test {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

fs::path build_dir() {
    return fs::read_symlink("/proc/self/exe").parent_path().parent_path();
}

struct Family {
    const char* model;
    const char* chat_template;        // nullptr: the GGUF's own
    std::vector<std::string> markup;  // call markup that must never show in content
};

void run_family(const Family& f) {
    const fs::path python = build_dir() / "venv" / "bin" / "python";
    if (!fs::exists(python)) {
        const std::string why = "no Python venv with the OpenAI client at " + python.string() +
                                ": run scripts/test_venv.sh " + build_dir().string();
        EMBER_SKIP_OR_FAIL(why);
    }
    TempDir dir;
    std::vector<std::string> args = {
        "-m",   fixture_path(f.model),   "--no-db", "-t", "1", "--parallel", "1", "-c",
        "2048", "--max-thinking-tokens", "8"};
    if (f.chat_template != nullptr) {
        args.push_back("--chat-template");
        args.push_back(fixture_path(f.chat_template));
    }
    ServeProcess server(args, dir.file("log"));
    ASSERT_GT(server.port(), 0) << server.process().log();
    std::vector<std::string> argv = {
        python.string(), std::string(EMBER_SOURCE_DIR) + "/tests/integration/py/openai_tools.py",
        "--base-url",    server.url(),
        "--model",       fs::path(f.model).stem().string()};
    for (const auto& m : f.markup) {
        argv.push_back("--markup");
        argv.push_back(m);
    }
    const auto r = run_command(argv, "", 500);
    const std::string context =
        "\nclient stderr:\n" + r.err + "\nserver log:\n" + server.process().log();
    ASSERT_EQ(r.status, 0) << r.out << context;
    const auto lines = split_lines(r.out);
    ASSERT_FALSE(lines.empty()) << context;
    const json result = json::parse(lines.back());
    EXPECT_FALSE(result.at("required_plain").at("calls").empty());
    EXPECT_EQ(result.at("single_streamed").at("calls").size(), 1u);
    EXPECT_EQ(result.at("named_streamed").at("calls").at(0).at("name"), "set_alarm");
}

TEST(ServeTools, Qwen3HermesToolCalls) {
    EMBER_REQUIRE_FIXTURE("arch/qwen3/qwen3.gguf");
    run_family({"arch/qwen3/qwen3.gguf", nullptr, {"<tool_call>", "</tool_call>"}});
}

TEST(ServeTools, Llama3JsonToolCalls) {
    EMBER_REQUIRE_FIXTURE("arch/llama/llama.gguf");
    EMBER_REQUIRE_FIXTURE("templates/meta-llama-Llama-3.2-3B-Instruct.jinja");
    run_family({"arch/llama/llama.gguf",
                "templates/meta-llama-Llama-3.2-3B-Instruct.jinja",
                {"\"parameters\""}});
}

TEST(ServeTools, GptOssHarmonyToolCalls) {
    EMBER_REQUIRE_FIXTURE("arch/gptoss/gptoss.gguf");
    run_family({"arch/gptoss/gptoss.gguf", nullptr, {"to=functions", "<|call|>"}});
}

TEST(ServeTools, Gemma3PromptBasedToolCalls) {
    EMBER_REQUIRE_FIXTURE("arch/gemma3/gemma3.gguf");
    run_family({"arch/gemma3/gemma3.gguf", nullptr, {"\"parameters\""}});
}

// A model whose template knows no tool format refuses tools (never ignores them), and a tool's
// schema feature the grammar cannot enforce is a 400 naming it.
TEST(ServeTools, UnsupportedToolsAreRefusedNotIgnored) {
    EMBER_REQUIRE_FIXTURE("arch/llama/llama.gguf");
    EMBER_REQUIRE_FIXTURE("arch/qwen3/qwen3.gguf");
    const json tools = json::parse(R"([{"type": "function", "function": {"name": "f",
        "parameters": {"type": "object", "properties": {"n": {"type": "integer",
        "minimum": 3}}}}}])");
    auto ask = [&](const ServeProcess& server, const json& body) {
        auto c = server.client();
        return c->Post("/v1/chat/completions", body.dump(), "application/json");
    };
    {
        TempDir dir;
        // SmolLM2's ChatML template: no tool-call format.
        ServeProcess server({"-m", fixture_path("arch/llama/llama.gguf"), "--no-db", "-t", "1"},
                            dir.file("log"));
        ASSERT_GT(server.port(), 0) << server.process().log();
        const auto res = ask(server, {{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                                      {"tools", tools},
                                      {"max_tokens", 4}});
        ASSERT_TRUE(res);
        EXPECT_EQ(res->status, 400) << res->body;
        EXPECT_NE(res->body.find("tool-call format"), std::string::npos) << res->body;
    }
    TempDir dir;
    ServeProcess server({"-m", fixture_path("arch/qwen3/qwen3.gguf"), "--no-db", "-t", "1"},
                        dir.file("log"));
    ASSERT_GT(server.port(), 0) << server.process().log();
    const auto res = ask(server, {{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                                  {"tools", tools},
                                  {"tool_choice", "required"},
                                  {"max_tokens", 4}});
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 400) << res->body;
    EXPECT_NE(res->body.find("minimum"), std::string::npos) << res->body;
    // tool_choice "none": tools are accepted, nothing is parsed or forced.
    const auto none = ask(server, {{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                                   {"tools", tools},
                                   {"tool_choice", "none"},
                                   {"max_tokens", 4}});
    ASSERT_TRUE(none);
    EXPECT_EQ(none->status, 200) << none->body;
    EXPECT_FALSE(json::parse(none->body)["choices"][0]["message"].contains("tool_calls"));
}

}  // namespace
}  // namespace ember::test
