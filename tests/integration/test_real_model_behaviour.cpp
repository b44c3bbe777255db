// The default model (Gemma 3 270M, the BASE model, Q4_K_M) asked through the real binary,
// `ember chat -m MODEL -p TEXT`, greedily. A broken tokenizer, forward pass, sampler or
// detokenizer on the chat path makes these fail.
//
// What this base model can and cannot do through a chat template decides what is tested:
//  - Through Gemma's turn format (the fallback Ember uses, the file having no template of its
//    own) the base model does not answer: HF transformers running the same file in float64
//    repeats the question and then emits a rare word (" mendatang" for the questions below)
//    where the turn should end. <end_of_turn> ranks between about 70,000th and 262,000th of
//    262,144 at every step of those replies, and in tests/data/gemma-3-270m/ref.json (the
//    published template's chat) the top five at each turn end hold no <end_of_turn> either.
//    So "answers correctly" and "stops by itself at <end_of_turn>" cannot be asked of this
//    model there; instead the replies are checked against that float64 reference.
//  - As plain text (a pass-through template given with --chat-template) the base model does
//    complete factual sentences correctly; those are the question-and-answer checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/support/fixtures.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"

namespace ember::test {
namespace {

using json = nlohmann::json;

// A model of 270M parameters answers in well under a second; the limit only keeps a hung
// binary from hanging the suite.
constexpr double kTimeoutSeconds = 300;

// One greedy `ember chat -p` turn, as JSONL (for the reply's exact text and why it ended).
// Every sampling flag is given so that a user's config file (which may set sampling
// defaults) cannot change the run; --no-db so that nothing is read or written.
json ask(const std::string& prompt, int max_tokens, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> argv = {
        ember_binary(), "chat",    "-m", real_model_path(),         "-p", prompt,
        "--jsonl",      "--no-db", "-n", std::to_string(max_tokens)};
    for (const char* flag : {"--temp 0", "--top-k 1", "--repeat-penalty 1", "--presence-penalty 0",
                             "--frequency-penalty 0", "--seed 1"}) {
        const std::string f = flag;
        argv.push_back(f.substr(0, f.find(' ')));
        argv.push_back(f.substr(f.find(' ') + 1));
    }
    argv.insert(argv.end(), extra.begin(), extra.end());
    const CommandResult r = run_command(argv, "", kTimeoutSeconds);
    EXPECT_FALSE(r.timed_out) << prompt;
    EXPECT_EQ(r.status, 0) << prompt << "\n" << r.err;
    const std::vector<std::string> lines = split_lines(r.out);
    EXPECT_EQ(lines.size(), 1u) << r.out;
    if (lines.empty()) return json::object();
    json turn = json::parse(lines.front(), nullptr, /*allow_exceptions=*/false);
    EXPECT_TRUE(turn.is_object()) << lines.front();
    return turn.is_object() ? turn : json::object();
}

std::string lower(std::string s) {
    std::transform(s.begin(), s.end(), s.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return s;
}

// The reply up to the end of its first clause: a base model keeps writing after the answer
// ("Berlin. The capital of the United States ..."), and only the answer itself should count.
std::string first_clause(const std::string& reply) {
    const size_t end = reply.find_first_of(".,;\n", reply.find_first_not_of(" \n"));
    return end == std::string::npos ? reply : reply.substr(0, end);
}

// `word` (lower case) as a whole word in `text`, ignoring case.
bool has_word(const std::string& text, const std::string& word) {
    const std::string t = lower(text);
    for (size_t at = t.find(word); at != std::string::npos; at = t.find(word, at + 1)) {
        const bool starts = at == 0 || !std::isalnum(static_cast<unsigned char>(t[at - 1]));
        const size_t after = at + word.size();
        const bool ends = after == t.size() || !std::isalnum(static_cast<unsigned char>(t[after]));
        if (starts && ends) return true;
    }
    return false;
}

// Chat markup and special-token text must never reach the user.
void expect_no_markup(const std::string& reply, const std::string& prompt) {
    for (const char* marker : {"<start_of_turn>", "<end_of_turn>", "<bos>", "<eos>", "<pad>"}) {
        EXPECT_EQ(reply.find(marker), std::string::npos)
            << marker << " leaked into the reply to " << json(prompt).dump() << ": "
            << json(reply).dump();
    }
}

struct Fact {
    const char* prompt;
    const char* answer;  // lower case
};

// Sentences the base model completes correctly, the answer being its first words. HF float64
// greedy on the same file picks each answer's first token with a margin of about 1.5 logits or
// more, well clear of what float32 arithmetic changes. The capitals are primed with one
// example sentence: this model continues the bare "The capital of France is" with " the
// capital of the country of France".
constexpr Fact kFacts[] = {
    {"The capital of France is Paris. The capital of Germany is", "berlin"},
    {"The capital of Italy is Rome. The capital of France is", "paris"},
    {"The capital of France is Paris. The capital of Japan is", "tokyo"},
    {"The capital of France is Paris. The capital of Italy is", "rome"},
    {"Two plus two equals", "four"},
    {"3 + 4 =", "7"},
    {"A week has seven", "days"},
    {"Bananas are yellow. Grass is", "green"},  // a colour: margin 1.69 (ember eval, exact)
};

TEST(RealModelBehaviour, CompletesFactualSentencesThroughTheChatBinary) {
    EMBER_REQUIRE_REAL_MODEL();
    // The prompt reaches the model as plain text after the BOS: the base model's own format.
    TempDir dir("ember-real-behaviour");
    const std::string raw_template = dir.file("plain.jinja");
    {
        std::ofstream out(raw_template, std::ios::binary);
        out << "{{ bos_token }}{{ messages[-1]['content'] }}";
        ASSERT_TRUE(out.good()) << raw_template;
    }
    for (const Fact& f : kFacts) {
        const json turn = ask(f.prompt, 8, {"--chat-template", raw_template});
        const std::string reply = turn.value("reply", "");
        const std::string clause = first_clause(reply);
        EXPECT_TRUE(has_word(clause, f.answer))
            << json(f.prompt).dump() << " should be completed with '" << f.answer
            << "'; the reply was " << json(reply).dump();
        expect_no_markup(reply, f.prompt);
    }
}

struct ReferenceReply {
    const char* question;
    // The start of HF transformers' greedy reply (the GGUF dequantized, computed in float64) to
    // the question in Gemma 3's turn format, cut where the margin between its best and
    // second-best token first falls below 1 logit.
    const char* reply_start;
};

// The base model repeats the question; for the last two the rare token that stands where the
// turn should end has a margin of 2.8 logits or more, so it is part of the reference too.
constexpr ReferenceReply kReferenceReplies[] = {
    {"What is the capital of France?", "What is the capital of France?"},
    {"What is the capital of Japan?", "What is the capital of Japan?"},
    {"What is the capital of Italy?", "What is the capital of Italy?"},
    {"What is 2 + 2?", "What is 2 + 2? mendatang\n"},
    {"How many days are in a week?", "How many days are in a week? mendatang"},
};

// The reference replies were generated to this length: neither <end_of_turn> nor <eos> came
// up, <end_of_turn> ranking 70,000th or lower at every step.
constexpr int kReplyTokens = 16;

TEST(RealModelBehaviour, ChatTurnRepliesAsTheFloat64Reference) {
    EMBER_REQUIRE_REAL_MODEL();
    for (const ReferenceReply& r : kReferenceReplies) {
        // Ember's template for this model (Gemma's turn format, see default_template.h).
        const json turn = ask(r.question, kReplyTokens);
        const std::string reply = turn.value("reply", "");
        EXPECT_TRUE(reply.starts_with(r.reply_start))
            << "the reply to " << json(r.question).dump() << " should start with "
            << json(r.reply_start).dump() << " (HF float64), it is " << json(reply).dump();
        expect_no_markup(reply, r.question);
        // The base model never ends the turn (see the top of the file): the reply runs to the
        // token limit, which must then be reported as such.
        EXPECT_EQ(turn.value("finish", ""), "length") << json(reply).dump();
        EXPECT_EQ(turn.value("tokens_generated", -1), kReplyTokens);
    }
}

}  // namespace
}  // namespace ember::test
