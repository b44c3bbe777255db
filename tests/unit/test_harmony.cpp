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

}  // namespace
}  // namespace ember
