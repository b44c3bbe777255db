// The harmony router (gpt-oss replies) on token streams made with the real gpt-oss tokenizer:
// analysis is thinking, final the answer, the markup never shows, the end markers end the
// reply, and output that breaks the format is shown as text with a warning, never dropped.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/generate/harmony.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/support/fixtures.h"

namespace ember {
namespace {

constexpr const char* kGptOss = "arch/gptoss/gptoss.gguf";

struct Shown {
    // Text as the callback saw it, with the kind of each piece: what the curses UI dims
    // (thinking), what line mode and scripted output print, what JSONL puts in "reply".
    std::string thinking, answer;
    std::vector<TextKind> kinds;  // one entry per change of kind
    std::string router_answer, router_thinking;
    std::vector<std::string> warnings;
    bool done = false;
    bool stopped_by_string = false;
    ReplyRouter::Phase phase = ReplyRouter::Phase::Undecided;
};

class Harmony : public testing::Test {
protected:
    void SetUp() override {
        EMBER_REQUIRE_FIXTURE(kGptOss);
        tok_.emplace(load_tokenizer(test::fixture_path(kGptOss)));
        auto markers = HarmonyTokens::find(*tok_);
        ASSERT_TRUE(markers.has_value()) << "the gpt-oss vocabulary has the harmony markers";
        markers_ = *markers;
    }

    std::vector<TokenId> ids(const std::string& text) const {
        EncodeOptions enc;
        enc.parse_special = true;
        return tok_->encode(text, enc);
    }

    // Routes the tokens of `stream` (harmony text as the model would write it after the
    // generation prompt's `<|start|>assistant`), then `finish()`.
    Shown route(const std::string& stream, const std::vector<std::string>& stops = {},
                bool starts_in_final = false) const {
        Shown s;
        const TextCallback cb = [&](const std::string& t, TextKind kind) {
            if (s.kinds.empty() || s.kinds.back() != kind) s.kinds.push_back(kind);
            (kind == TextKind::Thinking ? s.thinking : s.answer) += t;
            return true;
        };
        HarmonyRouter router(*tok_, markers_, stops, starts_in_final, /*stop_at_end=*/true, cb);
        for (TokenId id : ids(stream)) router.push(id);
        s.phase = router.phase();
        router.finish();
        s.router_answer = router.answer();
        s.router_thinking = router.thinking();
        s.warnings = router.warnings();
        s.done = router.done();
        s.stopped_by_string = router.stopped_by_string();
        return s;
    }

    std::optional<Tokenizer> tok_;
    HarmonyTokens markers_;
};

TEST_F(Harmony, MarkersAreSpecialTokensOfTheVocabulary) {
    EXPECT_EQ(ids("<|channel|>").size(), 1u);
    EXPECT_EQ(ids("<|channel|>")[0], markers_.channel);
    EXPECT_EQ(ids("<|return|>")[0], markers_.ret);
    EXPECT_EQ(ids("<|call|>")[0], markers_.call);
    EXPECT_NE(markers_.constrain, kNoToken);
}

TEST_F(Harmony, AnalysisIsThinkingAndFinalIsTheAnswer) {
    const Shown s = route(
        "<|channel|>analysis<|message|>User wants a color. Pick blue.<|end|>"
        "<|start|>assistant<|channel|>final<|message|>Blue.<|return|>");
    EXPECT_EQ(s.thinking, "User wants a color. Pick blue.");
    EXPECT_EQ(s.answer, "Blue.");
    EXPECT_EQ(s.kinds, (std::vector<TextKind>{TextKind::Thinking, TextKind::Answer}));
    EXPECT_EQ(s.router_answer, s.answer);
    EXPECT_EQ(s.router_thinking, s.thinking);
    EXPECT_TRUE(s.done);
    EXPECT_TRUE(s.warnings.empty());
}

TEST_F(Harmony, FinalEndedByEndMarkerEndsTheReplyAndLaterTokensAreIgnored) {
    const Shown s = route(
        "<|channel|>final<|message|>Red.<|end|><|start|>assistant<|channel|>final<|message|>"
        "Green.<|return|>");
    EXPECT_EQ(s.answer, "Red.");
    EXPECT_TRUE(s.done);
}

TEST_F(Harmony, AnalysisEndedByEndMarkerDoesNotEndTheReply) {
    const Shown s = route("<|channel|>analysis<|message|>Hmm.<|end|>");
    EXPECT_FALSE(s.done);
    EXPECT_EQ(s.phase, ReplyRouter::Phase::Undecided);  // between messages
    EXPECT_EQ(s.thinking, "Hmm.");
    EXPECT_EQ(s.answer, "");
}

TEST_F(Harmony, StreamCutInsideAnalysisKeepsTheThinkingAndNoAnswer) {
    const Shown s = route("<|channel|>analysis<|message|>First, the user asks about");
    EXPECT_EQ(s.phase, ReplyRouter::Phase::Thinking);
    EXPECT_EQ(s.thinking, "First, the user asks about");
    EXPECT_EQ(s.answer, "");
    EXPECT_FALSE(s.done);
    EXPECT_TRUE(s.warnings.empty());
}

TEST_F(Harmony, ToolCallEndsTheReplyAndIsShownWithAWarning) {
    const Shown s = route(
        "<|channel|>analysis<|message|>Need weather.<|end|>"
        "<|start|>assistant<|channel|>commentary to=functions.get_weather "
        "<|constrain|>json<|message|>{\"city\":\"Paris\"}<|call|>");
    EXPECT_EQ(s.thinking, "Need weather.");
    EXPECT_EQ(s.answer, "{\"city\":\"Paris\"}");
    EXPECT_TRUE(s.done);
    ASSERT_EQ(s.warnings.size(), 1u);
    EXPECT_NE(s.warnings[0].find("functions.get_weather"), std::string::npos) << s.warnings[0];
}

TEST_F(Harmony, CommentaryPreambleAndFinalAreBothShownApart) {
    const Shown s = route(
        "<|channel|>commentary<|message|>Checking.<|end|>"
        "<|start|>assistant<|channel|>final<|message|>Done.<|return|>");
    EXPECT_EQ(s.answer, "Checking.\n\nDone.");
    EXPECT_TRUE(s.warnings.empty());
}

TEST_F(Harmony, UnknownChannelIsShownAsTextWithAWarning) {
    const Shown s = route("<|channel|>scratchpad<|message|>note to self<|end|>");
    EXPECT_EQ(s.answer, "note to self");
    ASSERT_EQ(s.warnings.size(), 1u);
    EXPECT_NE(s.warnings[0].find("unknown channel 'scratchpad'"), std::string::npos);
}

TEST_F(Harmony, MissingMessageMarkerShowsTheHeaderAsPlainText) {
    const Shown s = route("<|channel|>final Blue is nice.<|end|>");
    EXPECT_EQ(s.answer, "<|channel|>final Blue is nice.");
    ASSERT_EQ(s.warnings.size(), 1u);
    EXPECT_NE(s.warnings[0].find("without <|message|>"), std::string::npos) << s.warnings[0];
    EXPECT_TRUE(s.done);
}

TEST_F(Harmony, PlainTextWithoutAnyMarkupIsKept) {
    // A model that ignores the format: its words must still reach the user.
    const Shown s = route("Just words, no channels at all.");
    EXPECT_EQ(s.answer, "Just words, no channels at all.");
    ASSERT_EQ(s.warnings.size(), 1u);
}

TEST_F(Harmony, LongHeaderWithoutMessageBecomesText) {
    std::string words;
    for (int i = 0; i < 80; ++i) words += "word ";
    const Shown s = route(words + "<|return|>");
    EXPECT_EQ(s.answer, words);
    EXPECT_FALSE(s.warnings.empty());
}

TEST_F(Harmony, StopStringsApplyToTheAnswerOnly) {
    const Shown s = route(
        "<|channel|>analysis<|message|>say STOP later<|end|>"
        "<|start|>assistant<|channel|>final<|message|>One, two STOP three<|return|>",
        {"STOP"});
    EXPECT_EQ(s.thinking, "say STOP later");
    EXPECT_EQ(s.answer, "One, two ");
    EXPECT_TRUE(s.stopped_by_string);
    EXPECT_TRUE(s.done);
}

TEST_F(Harmony, StartingInFinalTakesTextAsTheAnswer) {
    const Shown s = route("Blue.<|return|>", {}, /*starts_in_final=*/true);
    EXPECT_EQ(s.answer, "Blue.");
    EXPECT_EQ(s.thinking, "");
    EXPECT_TRUE(s.done);
}

TEST_F(Harmony, ForcedEndOfThinkingContinuesInFinal) {
    std::string thinking, answer;
    const TextCallback cb = [&](const std::string& t, TextKind kind) {
        (kind == TextKind::Thinking ? thinking : answer) += t;
        return true;
    };
    HarmonyRouter router(*tok_, markers_, {}, false, true, cb);
    for (TokenId id : ids("<|channel|>analysis<|message|>going on and on")) router.push(id);
    ASSERT_EQ(router.phase(), ReplyRouter::Phase::Thinking);
    router.force_end_thinking(" Enough.");
    EXPECT_EQ(router.phase(), ReplyRouter::Phase::Answer);
    // The caller fed kHarmonyCloseAnalysis; the model goes on with the answer's text.
    for (TokenId id : ids("Blue.<|return|>")) router.push(id);
    router.finish();
    EXPECT_EQ(thinking, "going on and on Enough.");
    EXPECT_EQ(answer, "Blue.");
    EXPECT_TRUE(router.done());
}

TEST_F(Harmony, ACancelFromTheCallbackIsReported) {
    int calls = 0;
    const TextCallback cb = [&](const std::string&, TextKind) { return ++calls < 2; };
    HarmonyRouter router(*tok_, markers_, {}, false, true, cb);
    for (TokenId id : ids("<|channel|>analysis<|message|>a b c d e f")) router.push(id);
    EXPECT_TRUE(router.cancelled());
}

TEST(HarmonyTokensFind, VocabulariesWithoutTheMarkersAreNotHarmony) {
    EMBER_REQUIRE_FIXTURE("arch/qwen3/qwen3.gguf");
    const Tokenizer tok = load_tokenizer(test::fixture_path("arch/qwen3/qwen3.gguf"));
    EXPECT_FALSE(HarmonyTokens::find(tok).has_value());
}

// Tool calls in harmony (OpenAI's harmony format guide): a commentary message addressed
// `to=functions.NAME`, JSON arguments, ended by <|call|>. Both header orders gpt-oss uses
// (recipient after the channel, or in the role position as its template renders past calls).
struct RoutedCalls {
    std::vector<ToolCall> calls;  // rebuilt from the deltas
    std::string answer, thinking;
    std::vector<std::string> warnings;
    bool done = false;
};

RoutedCalls route_calls(const Tokenizer& tok, const HarmonyTokens& markers,
                        const std::string& stream, std::vector<std::string> names = {}) {
    RoutedCalls r;
    const TextCallback cb = [&](const std::string& t, TextKind kind) {
        (kind == TextKind::Thinking ? r.thinking : r.answer) += t;
        return true;
    };
    const ToolCallCallback on_call = [&](const ToolCallDelta& d) {
        if (d.index == r.calls.size()) r.calls.push_back({d.id, d.name, {}});
        r.calls.back().arguments += d.arguments;
        return true;
    };
    HarmonyRouter router(tok, markers, {}, false, /*stop_at_end=*/true, cb);
    router.enable_tool_calls(std::move(names), on_call);
    EncodeOptions enc;
    enc.parse_special = true;
    for (TokenId id : tok.encode(stream, enc)) router.push(id);
    router.finish();
    r.warnings = router.warnings();
    r.done = router.done();
    EXPECT_EQ(router.tool_calls().size(), r.calls.size());
    return r;
}

TEST_F(Harmony, ACallToAFunctionIsAToolCall) {
    const RoutedCalls r = route_calls(
        *tok_, markers_,
        "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>"
        "commentary to=functions.get_current_weather <|constrain|>json<|message|>"
        "{\"location\":\"San Francisco\"}<|call|>",
        {"get_current_weather"});
    ASSERT_EQ(r.calls.size(), 1u);
    EXPECT_EQ(r.calls[0].name, "get_current_weather");
    EXPECT_EQ(r.calls[0].arguments, "{\"location\":\"San Francisco\"}");
    EXPECT_FALSE(r.calls[0].id.empty());
    EXPECT_EQ(r.thinking, "Need the weather.");
    EXPECT_EQ(r.answer, "") << "no markup and no arguments in the answer";
    EXPECT_TRUE(r.warnings.empty());
    EXPECT_TRUE(r.done) << "<|call|> ends the reply";
}

TEST_F(Harmony, RecipientInTheRolePosition) {
    const RoutedCalls r =
        route_calls(*tok_, markers_,
                    " to=functions.lookup<|channel|>commentary json<|message|>{\"q\": 1}<|call|>");
    ASSERT_EQ(r.calls.size(), 1u);
    EXPECT_EQ(r.calls[0].name, "lookup");
    EXPECT_EQ(r.calls[0].arguments, "{\"q\": 1}");
}

TEST_F(Harmony, UnknownFunctionAndBadArgumentsWarn) {
    const RoutedCalls unknown = route_calls(
        *tok_, markers_,
        "<|channel|>commentary to=functions.rm <|constrain|>json<|message|>{}<|call|>", {"ls"});
    EXPECT_TRUE(unknown.calls.empty());
    EXPECT_EQ(unknown.answer, "{}");
    EXPECT_FALSE(unknown.warnings.empty());
    const RoutedCalls bad = route_calls(
        *tok_, markers_, "<|channel|>commentary to=functions.ls<|message|>{oops<|call|>", {"ls"});
    ASSERT_EQ(bad.calls.size(), 1u);
    ASSERT_EQ(bad.warnings.size(), 1u);
    EXPECT_NE(bad.warnings[0].find("not a valid JSON object"), std::string::npos);
}

}  // namespace
}  // namespace ember
