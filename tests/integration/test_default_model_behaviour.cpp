// The default model, SmolLM2 135M Instruct (Q4_1), asked eight short questions as a user asks
// them, at the default settings but greedy: through the real binary (`ember chat -m MODEL -p
// QUESTION`, temperature 0) and through `ember serve` with the official OpenAI client
// (temperature 0, nothing else set). The model's own chat template renders each question after
// its default system prompt.
//
// At 135M parameters the model is often wrong (its float64 greedy answers get about five of the
// eight right), so what is checked is fidelity, not trivia: each reply must be HF transformers'
// float64 greedy reply on the same file (tests/data/smollm2-135m-instruct/questions.json, made
// by scripts/real_model_refs.py), token for token, up to the first step where the reference's
// top two logits lie within kDecisiveMargin of each other (there rounding may legitimately pick
// the other, and the replies part); the test reports that step. The CLI's JSONL carries the
// reply's text, so there the comparison is the text of those tokens (HF's decoding of them);
// the server reports the ids themselves.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tests/support/fixtures.h"
#include "tests/support/process.h"
#include "tests/support/serve.h"
#include "tests/support/temp_dir.h"

namespace ember::test {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// The reference's greedy replies are compared up to the first step whose top1 - top2 margin
// is below this (issue 38).
constexpr double kDecisiveMargin = 1e-3;
// A model of 135M parameters answers in well under a second; the limit only keeps a hung
// binary from hanging the suite.
constexpr double kTimeoutSeconds = 300;

json load_questions() {
    return json::parse(read_file(real_model_reference("questions.json", kSmolLM2_135m)));
}

// How many of the reference reply's tokens are decisive: those before the first step whose
// margin is below kDecisiveMargin.
size_t decisive_steps(const json& q) {
    const json& margins = q.at("reply_margins");
    for (size_t i = 0; i < margins.size(); ++i) {
        if (margins.at(i).get<double>() < kDecisiveMargin) return i;
    }
    return margins.size();
}

// Whether the whole reference reply, its last token included (the end of the turn, or the
// token limit), is decisive.
bool fully_decisive(const json& q) {
    return decisive_steps(q) == q.at("reply_ids").size();
}

// The ember processes read no user configuration (sampling defaults there would change the
// replies) and write no history: XDG_CONFIG_HOME and XDG_DATA_HOME point into a fresh directory
// for the test. The model path was resolved before, from the runner's environment.
class DefaultModelBehaviour : public ::testing::Test {
protected:
    void SetUp() override {
        EMBER_REQUIRE_REAL_MODEL_OF(kSmolLM2_135m);
        model_ = real_model_path(kSmolLM2_135m);
        questions_ = load_questions();
        ASSERT_EQ(questions_.at("questions").size(), 8u);
        ASSERT_EQ(questions_.at("model").get<std::string>(), kSmolLM2_135m.file_name);
        for (const char* name : {"XDG_CONFIG_HOME", "XDG_DATA_HOME"}) {
            if (const char* old = std::getenv(name))
                saved_.emplace_back(name, old);
            else
                saved_.emplace_back(name, std::nullopt);
            const fs::path dir = dir_.path() / name;
            fs::create_directories(dir);
            setenv(name, dir.c_str(), 1);
        }
    }
    void TearDown() override {
        for (const auto& [name, value] : saved_) {
            if (value)
                setenv(name.c_str(), value->c_str(), 1);
            else
                unsetenv(name.c_str());
        }
    }
    int max_tokens() const { return questions_.at("max_reply_tokens").get<int>(); }

    std::string model_;
    json questions_;
    TempDir dir_{"ember-default-model"};

private:
    std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

TEST_F(DefaultModelBehaviour, ChatRepliesAsTheFloat64ReferenceTokenForToken) {
    for (const json& q : questions_.at("questions")) {
        const std::string question = q.at("question");
        // Default settings, greedy: --temp 0 is the only sampling flag (the default samples).
        const CommandResult r =
            run_command({ember_binary(), "chat", "-m", model_, "-p", question, "--jsonl", "--no-db",
                         "--temp", "0", "-n", std::to_string(max_tokens())},
                        "", kTimeoutSeconds);
        ASSERT_FALSE(r.timed_out) << question;
        ASSERT_EQ(r.status, 0) << question << "\n" << r.err;
        const std::vector<std::string> lines = split_lines(r.out);
        ASSERT_EQ(lines.size(), 1u) << r.out;
        const json turn = json::parse(lines.front());
        const std::string reply = turn.at("reply");

        const size_t decisive = decisive_steps(q);
        const json& prefixes = q.at("reply_prefix_texts");
        // How many of the reference's tokens the reply's text begins with.
        size_t same = 0;
        while (same + 1 < prefixes.size() &&
               reply.starts_with(prefixes.at(same + 1).get<std::string>())) {
            ++same;
        }
        std::printf(
            "[behaviour] chat %s -> %s (%zu of the reference's %zu tokens, %zu of them "
            "decisive)\n",
            json(question).dump().c_str(), json(reply).dump().c_str(), same,
            q.at("reply_ids").size(), decisive);
        if (decisive < q.at("reply_ids").size()) {
            std::printf("[behaviour]   compared up to token %zu: its float64 margin is %.2e\n",
                        decisive, q.at("reply_margins").at(decisive).get<double>());
        }
        EXPECT_GE(same, decisive) << json(question).dump() << ": the reply " << json(reply).dump()
                                  << " parts from HF float64's after " << same
                                  << " tokens (the first " << decisive
                                  << " are decisive): " << json(prefixes.at(decisive)).dump();
        if (fully_decisive(q)) {
            // The whole reply, and why it ended.
            EXPECT_EQ(reply, q.at("reply_text").get<std::string>()) << question;
            EXPECT_EQ(turn.at("finish").get<std::string>(),
                      q.at("ended").get<bool>() ? "stop" : "length")
                << question;
        }
    }
}

// The build tree this test binary belongs to (it lives in BUILD_DIR/tests), where
// scripts/test_venv.sh puts the venv.
fs::path build_dir() {
    return fs::read_symlink("/proc/self/exe").parent_path().parent_path();
}

TEST_F(DefaultModelBehaviour, ServeRepliesAsTheFloat64ReferenceThroughTheOpenAiClient) {
    const fs::path python = build_dir() / "venv" / "bin" / "python";
    if (!fs::exists(python)) {
        EMBER_SKIP_OR_FAIL("no Python venv with the OpenAI client at " + python.string() +
                           ": run scripts/test_venv.sh " + build_dir().string());
    }
    json asked = json::array();
    for (const json& q : questions_.at("questions")) asked.push_back(q.at("question"));

    // Default settings: only the model, the port and no database.
    ServeProcess server({"-m", model_, "--no-db"}, dir_.file("serve.log"));
    // The server answers to the file's name without .gguf.
    const std::string served = fs::path(model_).stem().string();
    ASSERT_GT(server.port(), 0) << server.process().log();
    const std::string script =
        std::string(EMBER_SOURCE_DIR) + "/tests/integration/py/openai_questions.py";
    const CommandResult r =
        run_command({python.string(), script, "--base-url", server.url(), "--model", served,
                     "--questions", asked.dump(), "--max-tokens", std::to_string(max_tokens())},
                    "", kTimeoutSeconds);
    const std::string context =
        "\nclient stderr:\n" + r.err + "\nserver log:\n" + server.process().log();
    ASSERT_EQ(r.status, 0) << r.out << context;
    const auto lines = split_lines(r.out);
    ASSERT_FALSE(lines.empty()) << context;
    const json replies = json::parse(lines.back()).at("replies");
    ASSERT_EQ(replies.size(), questions_.at("questions").size());

    for (size_t i = 0; i < replies.size(); ++i) {
        const json& q = questions_.at("questions").at(i);
        const json& got = replies.at(i);
        const std::string question = q.at("question");
        // The prompt as HF's template and tokenizer made it.
        EXPECT_EQ(got.at("prompt_tokens"), q.at("prompt_ids").size()) << question;
        // completion_ids holds the reply's tokens, not the end of the turn that closed it.
        const bool ended = q.at("ended").get<bool>();
        auto expected = q.at("reply_ids").get<std::vector<int>>();
        if (ended) expected.pop_back();
        const auto ids = got.at("completion_ids").get<std::vector<int>>();
        const size_t decisive = std::min(decisive_steps(q), expected.size());
        size_t same = 0;
        while (same < ids.size() && same < expected.size() && ids[same] == expected[same]) ++same;
        std::printf(
            "[behaviour] serve %s -> %s (%zu of the reference's %zu tokens, %zu of them "
            "decisive)\n",
            json(question).dump().c_str(), got.at("content").dump().c_str(), same, expected.size(),
            decisive);
        EXPECT_GE(same, decisive) << question << ": token " << same << " is "
                                  << (same < ids.size() ? ids[same] : -1) << ", HF float64's "
                                  << expected[same];
        if (fully_decisive(q)) {
            // The end of the reply too: the end of the turn, or the token limit.
            EXPECT_EQ(ids, expected) << question;
            EXPECT_EQ(got.at("finish_reason").get<std::string>(), ended ? "stop" : "length")
                << question;
            EXPECT_EQ(got.at("content").get<std::string>(), q.at("reply_text").get<std::string>())
                << question;
        }
    }
}

}  // namespace
}  // namespace ember::test
