// The reply router splits streamed text into thinking and answer, applies stop strings to the
// answer only and never shows a tag or a stop string, however the text is split into pieces.
#include <gtest/gtest.h>

#include "engine/generate/reply_router.h"

namespace ember {
namespace {

struct Routed {
    std::string thinking, answer;  // as the callback saw them
    std::string router_thinking, router_answer;
    bool stopped = false;
};

// Feeds `text` in pieces of `piece` bytes.
Routed route(const std::string& text, size_t piece, const std::vector<std::string>& stops,
             bool thinking_possible, bool starts_in_thinking) {
    Routed r;
    const TextCallback cb = [&](const std::string& t, TextKind kind) {
        (kind == TextKind::Thinking ? r.thinking : r.answer) += t;
        return true;
    };
    ReplyRouter router(stops, thinking_possible, starts_in_thinking, cb);
    for (size_t i = 0; i < text.size(); i += piece) router.push(text.substr(i, piece));
    router.finish();
    r.router_thinking = router.thinking();
    r.router_answer = router.answer();
    r.stopped = router.stopped_by_string();
    return r;
}

TEST(ReplyRouter, SeparatesThinkingFromAnswerAtEverySplit) {
    const std::string text = "  <think>\nweigh the options</think>\n\nThe answer. END and more";
    for (size_t piece = 1; piece <= text.size(); ++piece) {
        const Routed r = route(text, piece, {"END"}, true, false);
        EXPECT_EQ(r.thinking, "weigh the options") << "piece " << piece;
        EXPECT_EQ(r.answer, "The answer. ") << "piece " << piece;
        EXPECT_EQ(r.router_answer, r.answer);
        EXPECT_EQ(r.router_thinking, r.thinking);
        EXPECT_TRUE(r.stopped);
    }
}

TEST(ReplyRouter, ReplyStartingInsideThinkingBlock) {
    const std::string text = "\nstill thinking</think>answer";
    for (size_t piece = 1; piece <= text.size(); ++piece) {
        const Routed r = route(text, piece, {}, true, true);
        EXPECT_EQ(r.thinking, "still thinking");
        EXPECT_EQ(r.answer, "answer");
    }
}

TEST(ReplyRouter, TextThatOnlyLooksLikeATagIsAnswer) {
    for (size_t piece = 1; piece <= 6; ++piece) {
        const Routed r = route("<thin air> is <think>", piece, {}, true, false);
        EXPECT_EQ(r.thinking, "");
        EXPECT_EQ(r.answer, "<thin air> is <think>");
    }
}

TEST(ReplyRouter, WithoutThinkingTemplateTagsAreText) {
    const Routed r = route("<think>x</think>y", 3, {}, false, false);
    EXPECT_EQ(r.answer, "<think>x</think>y");
    EXPECT_EQ(r.thinking, "");
}

TEST(ReplyRouter, StopStringInsideThinkingDoesNotStop) {
    const Routed r = route("<think>say END</think>fine END", 2, {"END"}, true, false);
    EXPECT_EQ(r.thinking, "say END");
    EXPECT_EQ(r.answer, "fine ");
    EXPECT_TRUE(r.stopped);
}

TEST(ReplyRouter, UnterminatedThinkingKeepsHeldBackText) {
    // "</thi" is held back as a possible close tag, and is thinking once the reply ends.
    const Routed r = route("<think>abc</thi", 1, {}, true, false);
    EXPECT_EQ(r.thinking, "abc</thi");
    EXPECT_EQ(r.answer, "");
}

TEST(ReplyRouter, ForcedEndTurnsTheRestIntoAnswer) {
    std::string thinking, answer;
    const TextCallback cb = [&](const std::string& t, TextKind kind) {
        (kind == TextKind::Thinking ? thinking : answer) += t;
        return true;
    };
    const std::vector<std::string> stops;
    ReplyRouter router(stops, true, true, cb);
    router.push("going round </th");
    router.force_end_thinking(" enough.");
    router.push("\n\nAnswer");
    router.finish();
    EXPECT_EQ(thinking, "going round </th enough.");
    EXPECT_EQ(answer, "Answer");
}

TEST(ReplyRouter, CallbackCanCancel) {
    int calls = 0;
    const TextCallback cb = [&](const std::string&, TextKind) { return ++calls < 2; };
    const std::vector<std::string> stops;
    ReplyRouter router(stops, false, false, cb);
    router.push("a");
    EXPECT_FALSE(router.cancelled());
    router.push("b");
    EXPECT_TRUE(router.cancelled());
}

TEST(TokensLoop, DetectsPeriodicTails) {
    std::vector<int32_t> t;
    for (int i = 0; i < 40; ++i) t.push_back(i);  // no repetition
    EXPECT_FALSE(tokens_loop(t));
    for (int r = 0; r < 8; ++r) t.insert(t.end(), {7, 8, 9, 10, 11});  // period 5, 40 tokens
    EXPECT_TRUE(tokens_loop(t));
    t.push_back(99);  // the loop was broken
    EXPECT_FALSE(tokens_loop(t));

    std::vector<int32_t> same(31, 5);  // period 1 needs min_span (32) tokens
    EXPECT_FALSE(tokens_loop(same));
    same.push_back(5);
    EXPECT_TRUE(tokens_loop(same));

    std::vector<int32_t> long_period;  // period 100 needs 4 repeats
    for (int r = 0; r < 3; ++r) {
        for (int i = 0; i < 100; ++i) long_period.push_back(1000 + i);
    }
    EXPECT_FALSE(tokens_loop(long_period));
    for (int i = 0; i < 100; ++i) long_period.push_back(1000 + i);
    EXPECT_TRUE(tokens_loop(long_period));
}

}  // namespace
}  // namespace ember
