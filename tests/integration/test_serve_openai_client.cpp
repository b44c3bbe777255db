// The official OpenAI client library (PyPI `openai`) against a real `ember serve`: a chat
// completion, the same one streamed, a completion, three error replies, and a stream closed
// mid-reply (tests/integration/py/openai_client.py checks what the client sees and prints it).
// What the replies must hold comes from the fixtures' HF references, not from Ember: the
// prompts are the qwen3 fixture's reference sequences (HF's chat template and tokenizer made
// their ids), so prompt token counts and the greedy continuation (float64 forward pass) are
// known. The library lives in BUILD_DIR/venv, made by scripts/test_venv.sh (scripts/setup.sh
// runs it); this test installs nothing, and without the venv it is skipped, except under
// CI=true, where that is a failure.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "tests/support/fixtures.h"
#include "tests/support/process.h"
#include "tests/support/serve.h"
#include "tests/support/temp_dir.h"

namespace ember::test {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kModel = "arch/qwen3/qwen3.gguf";
// HF float64 forward pass over the fixture's sequences: ids, greedy ids, text and margins.
constexpr const char* kForwardReference = "arch/qwen3/ref.json";
// HF tokenizer results for the fixture's tokenizer: the texts and messages behind those ids.
constexpr const char* kTokenizerReference = "tokenizers/ref/tokref_qwen3.json";
constexpr int kMaxTokens = 10;           // as openai_client.py asks for a chat reply
constexpr int kCompletionMaxTokens = 5;  // and for a completion
constexpr int kCancelMaxTokens = 3000;   // far more than arrive before the hang-up is seen
// The project's acceptance: greedy tokens match the reference wherever its top-1 logit leads
// the runner-up by more than this; closer than that, rounding may pick the other.
constexpr double kDecisiveMargin = 1e-2;

// The build tree this test binary belongs to (it lives in BUILD_DIR/tests), where
// scripts/test_venv.sh puts the venv.
fs::path build_dir() {
    return fs::read_symlink("/proc/self/exe").parent_path().parent_path();
}

// The tokenizer reference's entry (in `list`) whose ids are `ids`: the input behind a
// forward-reference sequence.
const json& case_with_ids(const json& list, const json& ids) {
    const auto it =
        std::find_if(list.begin(), list.end(), [&](const json& c) { return c.at("ids") == ids; });
    if (it == list.end()) throw std::runtime_error("no tokenizer reference case with these ids");
    return *it;
}

// The reference's greedy ids a correct engine reproduces: those before the first step whose
// margin is within kDecisiveMargin (after a legitimate flip the continuations part).
std::vector<int> decisive_greedy_ids(const json& sequence, size_t limit) {
    std::vector<int> ids;
    const json& greedy = sequence.at("greedy_ids");
    const json& margins = sequence.at("greedy_margins");
    for (size_t i = 0; i < limit && i < greedy.size(); ++i) {
        if (margins.at(i).get<double>() <= kDecisiveMargin) break;
        ids.push_back(greedy.at(i).get<int>());
    }
    return ids;
}

std::vector<int> first_ids(const json& ids, size_t count) {
    std::vector<int> out;
    for (size_t i = 0; i < count && i < ids.size(); ++i) out.push_back(ids.at(i).get<int>());
    return out;
}

// The token count in the server's log line for a cancelled stream, or -1 when there is none.
int cancelled_after_tokens(const std::string& log) {
    const std::string marker = "client disconnected after ";
    const size_t at = log.find(marker);
    if (at == std::string::npos || log.find("generation cancelled", at) == std::string::npos) {
        return -1;
    }
    return std::atoi(log.c_str() + at + marker.size());
}

TEST(ServeOpenAiClient, ChatStreamingErrorsAndCancelThroughTheOfficialLibrary) {
    EMBER_REQUIRE_FIXTURE(kModel);
    EMBER_REQUIRE_FIXTURE(kForwardReference);
    EMBER_REQUIRE_FIXTURE(kTokenizerReference);
    const fs::path python = build_dir() / "venv" / "bin" / "python";
    if (!fs::exists(python)) {
        EMBER_SKIP_OR_FAIL("no Python venv with the OpenAI client at " + python.string() +
                           ": run scripts/test_venv.sh " + build_dir().string());
    }
    const json forward = json::parse(read_file(fixture_path(kForwardReference)));
    const json tokenizer = json::parse(read_file(fixture_path(kTokenizerReference)));
    // A system prompt, an earlier exchange and a question, rendered with the template's
    // default variables (as `ember serve` renders); and a plain text for /v1/completions.
    const json& chat = forward.at("seqs").at("chat");
    const json& text = forward.at("seqs").at("text");
    const json& chat_input = case_with_ids(tokenizer.at("chat"), chat.at("ids"));
    ASSERT_TRUE(chat_input.at("kwargs").empty()) << chat_input.dump();
    const json& text_input = case_with_ids(tokenizer.at("with_special"), text.at("ids"));
    const size_t chat_prompt_tokens = chat.at("ids").size();

    TempDir dir;
    // One slot: the request after the cancelled one can only be answered once that slot is
    // free, and the repeated prompt is sure to find its tokens there. f32 KV: the reference
    // margins are as small as 0.0101, where f16 rows' rounding could flip a token.
    ServeProcess server({"-m", fixture_path(kModel), "--no-db", "-t", "1", "--parallel", "1", "-c",
                         "4096", "--kv-type", "f32"},
                        dir.file("log"));
    ASSERT_GT(server.port(), 0) << server.process().log();
    const std::string script =
        std::string(EMBER_SOURCE_DIR) + "/tests/integration/py/openai_client.py";
    const auto r = run_command(
        {python.string(), script, "--base-url", server.url(), "--model", "qwen3", "--messages",
         chat_input.at("messages").dump(), "--completion-prompt",
         text_input.at("text").get<std::string>(), "--max-tokens", std::to_string(kMaxTokens),
         "--completion-max-tokens", std::to_string(kCompletionMaxTokens), "--cancel-max-tokens",
         std::to_string(kCancelMaxTokens)},
        "", 300);
    const std::string context =
        "\nclient stderr:\n" + r.err + "\nserver log:\n" + server.process().log();
    ASSERT_EQ(r.status, 0) << r.out << context;
    const auto lines = split_lines(r.out);
    ASSERT_FALSE(lines.empty()) << context;
    const json result = json::parse(lines.back());
    const json& plain = result.at("plain");
    const json& streamed = result.at("streamed");
    const json& completion = result.at("completion");

    // Prompt sizes as HF's template and tokenizer give them.
    EXPECT_EQ(plain.at("usage").at("prompt_tokens"), chat_prompt_tokens) << plain.dump();
    EXPECT_EQ(plain.at("usage").at("completion_tokens"), kMaxTokens);
    EXPECT_EQ(plain.at("usage").at("total_tokens"), chat_prompt_tokens + kMaxTokens);
    EXPECT_EQ(streamed.at("usage").at("prompt_tokens"), chat_prompt_tokens);
    EXPECT_EQ(result.at("after_cancel").at("usage").at("prompt_tokens"), chat_prompt_tokens);
    EXPECT_EQ(completion.at("usage").at("prompt_tokens"), text.at("ids").size())
        << completion.dump();

    // The reply is the float64 reference's greedy continuation, as far as it is decisive
    // (the streamed one equals the plain one: openai_client.py checks that).
    const std::vector<int> chat_expected = decisive_greedy_ids(chat, kMaxTokens);
    EXPECT_EQ(first_ids(plain.at("completion_ids"), chat_expected.size()), chat_expected);
    if (chat_expected.size() == static_cast<size_t>(kMaxTokens)) {
        // All of it decisive: the text too is where HF's decoding of the reference begins.
        const std::string reference_text = chat.at("greedy_text");
        const std::string reply = plain.at("content");
        EXPECT_EQ(reference_text.substr(0, reply.size()), reply);
    }
    const std::vector<int> text_expected = decisive_greedy_ids(text, kCompletionMaxTokens);
    EXPECT_EQ(first_ids(completion.at("completion_ids"), text_expected.size()), text_expected);

    // The streamed request repeats the plain one's prompt in the same slot: it is reused,
    // all of it or all but the last token (evaluated again for the first reply token's logits).
    const json& cached = streamed.at("usage").at("prompt_tokens_details").at("cached_tokens");
    EXPECT_GE(cached, chat_prompt_tokens - 1) << streamed.dump();
    EXPECT_LE(cached, chat_prompt_tokens) << streamed.dump();

    // The hang-up cancelled the reply on the server well before its max_tokens, after at
    // least the chunks the client read; the slot was then free.
    const int cancelled_after = cancelled_after_tokens(server.process().log());
    ASSERT_GE(cancelled_after, 0) << "no cancellation in the server log" << context;
    EXPECT_GE(cancelled_after, result.at("cancel").at("text_chunks").get<int>());
    EXPECT_LT(cancelled_after, kCancelMaxTokens);
    EXPECT_EQ(result.at("cancel").at("health").at("slots"), 1);
    EXPECT_EQ(result.at("cancel").at("health").at("requests_waiting"), 0);
}

}  // namespace
}  // namespace ember::test
