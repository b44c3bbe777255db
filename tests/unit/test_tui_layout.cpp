// The full-screen UI's pure parts: display widths of wide and combining characters, word
// wrapping, Markdown to styled lines, and transcript layout.
#include <gtest/gtest.h>

#include <cctype>
#include <string>
#include <vector>

#include "ui/io/progress.h"
#include "ui/tui/markdown.h"
#include "ui/tui/text.h"
#include "ui/tui/transcript.h"
#include "ui/tui/view.h"

namespace ember::ui::tui {
namespace {

std::vector<std::string> wrapped(const std::string& text, int width, bool pre = false) {
    LogicalLine line;
    line.spans.push_back({text, style::kPlain});
    line.preformatted = pre;
    std::vector<Row> rows;
    wrap_line(line, width, rows);
    std::vector<std::string> out;
    for (const auto& r : rows) out.push_back(row_text(r));
    return out;
}

std::vector<std::string> texts(const std::vector<LogicalLine>& lines) {
    std::vector<std::string> out;
    for (const auto& l : lines) {
        std::string s;
        for (const auto& p : l.first_prefix) s += p.text;
        for (const auto& p : l.spans) s += p.text;
        out.push_back(s);
    }
    return out;
}

Style style_of(const std::vector<LogicalLine>& lines, const std::string& text) {
    for (const auto& l : lines) {
        for (const auto& s : l.spans) {
            if (s.text.find(text) != std::string::npos) return s.style;
        }
    }
    ADD_FAILURE() << "no span holds " << text;
    return 0;
}

TEST(TuiText, WidthsOfWideAndCombiningCharacters) {
    EXPECT_EQ(display_width("abc"), 3);
    EXPECT_EQ(display_width("日本語"), 6);
    EXPECT_EQ(display_width("😀"), 2);
    EXPECT_EQ(display_width("e\u0301"), 1);  // e + combining acute
    EXPECT_EQ(display_width("café"), 4);
    // Hangul jamo: a leading consonant is wide, the vowel and final consonant after it join
    // its cell as terminals draw them (glibc's wcwidth: 2, 0, 0), whatever utf8proc says.
    EXPECT_EQ(display_width("\u1100\u1161\u11A8"), 2);
    EXPECT_EQ(display_width("e\u119E"), 1);
    const auto clusters = split_clusters("ae\u0301日");
    ASSERT_EQ(clusters.size(), 3u);
    EXPECT_EQ(clusters[1].end - clusters[1].begin, 3u);  // e and its accent stay together
    EXPECT_EQ(clusters[2].width, 2);
}

TEST(TuiText, SanitizeKeepsEscapesAwayFromTheTerminal) {
    EXPECT_EQ(sanitize("a\x1b[2Jb"), "a\u241B[2Jb");
    EXPECT_EQ(sanitize("a\tb"), "a   b");
    EXPECT_EQ(sanitize("x\r\ny"), "x\u240D\ny");
    EXPECT_EQ(sanitize("bad \xff byte"), "bad \uFFFD byte");
    EXPECT_EQ(sanitize("csi \xc2\x9b"), "csi <U+009B>");
    // The stand-ins are spans of their own, styled apart from text that looks the same.
    const Spans spans = visible_spans("a\x1b]0;t\x07", style::kUser);
    ASSERT_EQ(spans.size(), 4u);
    EXPECT_EQ(spans[0].text, "a");
    EXPECT_EQ(spans[0].style, style::kUser);
    EXPECT_EQ(spans[1].text, "\u241B");
    EXPECT_EQ(spans[1].style, style::kUser | style::kControl);
    EXPECT_EQ(spans[2].text, "]0;t");
    EXPECT_EQ(spans[3].text, "\u2407");
    EXPECT_EQ(spans[3].style, style::kUser | style::kControl);
}

TEST(TuiText, BoundariesStepOverWholeClusters) {
    const std::string s = "xe\u0301日";
    EXPECT_EQ(next_boundary(s, 1), 4u);
    EXPECT_EQ(previous_boundary(s, 4), 1u);
    EXPECT_EQ(previous_boundary(s, s.size()), 4u);
    EXPECT_EQ(fit_prefix("日本語", 5), "日本");
}

TEST(TuiWrap, WordsMoveWholeAndSpacesAtBreaksGo) {
    EXPECT_EQ(wrapped("hello big world", 10), (std::vector<std::string>{"hello big", "world"}));
    EXPECT_EQ(wrapped("abcdefghijkl", 5), (std::vector<std::string>{"abcde", "fghij", "kl"}));
    EXPECT_EQ(wrapped("", 5), (std::vector<std::string>{""}));
}

TEST(TuiWrap, WideCharactersNeverSplitAndMayBreakAnywhere) {
    const auto rows = wrapped("日本語のテキスト", 5);
    ASSERT_EQ(rows.size(), 4u);
    for (const auto& r : rows) EXPECT_LE(display_width(r), 5) << r;
    EXPECT_EQ(rows[0], "日本");
    // Mixed: the Latin word stays whole, CJK fills the row.
    const auto mixed = wrapped("ab 日本語 cd", 6);
    for (const auto& r : mixed) EXPECT_LE(display_width(r), 6) << r;
    EXPECT_EQ(mixed[0], "ab 日");
}

TEST(TuiWrap, CombiningMarksStayWithTheirLetter) {
    const auto rows = wrapped("e\u0301e\u0301e\u0301e\u0301", 2);
    ASSERT_EQ(rows.size(), 2u);
    EXPECT_EQ(rows[0], "e\u0301e\u0301");
}

TEST(TuiWrap, PreformattedKeepsSpaces) {
    EXPECT_EQ(wrapped("a   b   c", 4, true), (std::vector<std::string>{"a   ", "b   ", "c"}));
}

TEST(TuiMarkdown, NoMarkupNoiseAndStylesInstead) {
    const auto lines = render_markdown("# Title\n\nSome *emph*, **strong** and `code`.");
    EXPECT_EQ(texts(lines), (std::vector<std::string>{"Title", "", "Some emph, strong and code."}));
    EXPECT_TRUE(style_of(lines, "Title") & style::kHeading);
    EXPECT_TRUE(style_of(lines, "emph") & style::kItalic);
    EXPECT_TRUE(style_of(lines, "strong") & style::kBold);
    EXPECT_TRUE(style_of(lines, "code") & style::kInlineCode);
}

TEST(TuiMarkdown, FencedCodeKeepsItsLinesAndSpaces) {
    const auto lines = render_markdown("Look:\n\n```cpp\nint x;\n  return 1;\n```\nafter");
    const auto t = texts(lines);
    ASSERT_GE(t.size(), 5u);
    EXPECT_EQ(t[2], "┃ int x;");
    EXPECT_EQ(t[3], "┃   return 1;");
    EXPECT_TRUE(lines[2].preformatted);
    EXPECT_TRUE(style_of(lines, "int x;") & style::kCodeBlock);
    EXPECT_EQ(t.back(), "after");
}

TEST(TuiMarkdown, AnOpenFenceWhileStreamingIsCode) {
    const auto lines = render_markdown("```\nfor (;;)");
    ASSERT_EQ(lines.size(), 1u);
    EXPECT_TRUE(lines[0].preformatted);
}

TEST(TuiMarkdown, ListsGetBulletsAndNumbers) {
    EXPECT_EQ(texts(render_markdown("- one\n- two\n  - nested")),
              (std::vector<std::string>{"• one", "• two", "  • nested"}));
    EXPECT_EQ(texts(render_markdown("3. c\n4. d")), (std::vector<std::string>{"3. c", "4. d"}));
}

TEST(TuiMarkdown, SoftBreaksStayLineBreaksAndEntitiesDecode) {
    EXPECT_EQ(texts(render_markdown("roses are red\nviolets &amp; blue")),
              (std::vector<std::string>{"roses are red", "violets & blue"}));
    // Raw HTML is text, not markup to hide.
    EXPECT_EQ(texts(render_markdown("a <b>tag</b>")), (std::vector<std::string>{"a <b>tag</b>"}));
}

TEST(TuiTranscript, UserRepliesThinkingAndFootersLayOut) {
    Transcript t;
    t.add({EntryKind::User, "hi **there**"});
    Entry reply{EntryKind::Assistant, "answer"};
    reply.thinking = "let me think\nabout it";
    reply.footer = "[3 tokens]";
    t.add(reply);
    const int width = 40;
    std::vector<Row> rows;
    t.rows(width, 0, t.total_rows(width), rows);
    std::vector<std::string> text;
    for (const auto& r : rows) text.push_back(row_text(r));
    ASSERT_EQ(text.size(), 5u);
    EXPECT_EQ(text[0], "> hi there");
    EXPECT_EQ(text[1], "");
    EXPECT_EQ(text[2], "▸ thought for 5 words (Ctrl-T shows it)");  // collapsed: one line
    EXPECT_EQ(text[3], "answer");
    EXPECT_EQ(text[4], "[3 tokens]");
    t.set_thinking_expanded(true);
    EXPECT_EQ(t.total_rows(width), 7);
}

TEST(TuiTranscript, RowsWindowAndUpdatesRelayout) {
    Transcript t;
    for (int i = 0; i < 5; ++i) t.add({EntryKind::Notice, "line " + std::to_string(i)});
    EXPECT_EQ(t.total_rows(20), 9);
    std::vector<Row> rows;
    t.rows(20, 2, 3, rows);
    ASSERT_EQ(rows.size(), 3u);
    EXPECT_EQ(row_text(rows[0]), "line 1");
    EXPECT_EQ(row_text(rows[1]), "");
    EXPECT_EQ(row_text(rows[2]), "line 2");
    t.update(4, [](Entry& e) { e.text += "\nmore"; });
    EXPECT_EQ(t.total_rows(20), 10);
    // Every row fits the width, however narrow.
    t.add({EntryKind::User, "日本語 😀 café " + std::string(50, 'x')});
    for (int width : {1, 2, 3, 7, 13}) {
        rows.clear();
        t.rows(width, 0, t.total_rows(width), rows);
        if (width < 2) continue;  // a wide character alone is wider than that
        for (const auto& r : rows) EXPECT_LE(display_width(row_text(r)), width) << row_text(r);
    }
}

TEST(TuiStatus, ShowsContextSpeedsAndReuse) {
    StatusInfo info;
    info.model = "m.gguf";
    info.context_used = 100;
    info.context_total = 4096;
    TurnResult turn;
    turn.stats.generated_tokens = 11;
    turn.stats.decode_seconds = 0.5;
    turn.stats.prefill_seconds = 0.1;
    turn.tokens_evaluated = 50;
    turn.tokens_reused = 30;
    info.last_turn = turn;
    info.title = "chat";
    const auto text = status_text(info);
    EXPECT_NE(text.left.find("ctx 100/4096"), std::string::npos) << text.left;
    EXPECT_NE(text.left.find("11 tok"), std::string::npos) << text.left;
    EXPECT_NE(text.left.find("prefill 500 tok/s"), std::string::npos) << text.left;
    EXPECT_NE(text.left.find("decode 20.0 tok/s"), std::string::npos) << text.left;
    EXPECT_NE(text.left.find("warm, 30 reused"), std::string::npos) << text.left;
    EXPECT_NE(text.left.find("chat"), std::string::npos) << text.left;
    EXPECT_TRUE(text.right.empty());
    EXPECT_EQ(text.left.find("spec"), std::string::npos) << text.left;  // nothing drafted
    turn.stats.speculation.drafted = 20;
    turn.stats.speculation.accepted = 14;
    info.last_turn = turn;
    EXPECT_NE(status_text(info).left.find("spec 70%"), std::string::npos);
    info.busy = true;
    info.streamed = 7;
    EXPECT_NE(status_text(info).right.find("replying 7 tok"), std::string::npos);
    // A job that is no reply (/model loading a model) says what it waits for.
    info.activity = "loading gemma3";
    const std::string right = status_text(info).right;
    EXPECT_EQ(right.find("replying"), std::string::npos) << right;
    EXPECT_NE(right.find("loading gemma3 0s"), std::string::npos) << right;
}

TEST(TuiStatus, NarrowLinesShortenNamesAndLabelsNeverNumbers) {
    StatusInfo info;
    info.model = "a-rather-long-model-name-q4_k_m.gguf";
    info.context_used = 1191;
    info.context_total = 18432;
    TurnResult turn;
    turn.stats.generated_tokens = 123;
    turn.stats.decode_seconds = 1.0;
    turn.stats.prefill_seconds = 0.5;
    turn.tokens_evaluated = 400;
    info.last_turn = turn;
    info.title = "a conversation about lighthouses";
    for (int width = 16; width <= 160; ++width) {
        info.width = width;
        const StatusText text = status_text(info);
        const int used = display_width(text.left) + display_width(text.right);
        if (width >= 24) {
            EXPECT_LE(used, width) << width << ": " << text.left;
        }
        // The context's numbers are always there whole, whatever else had to go.
        EXPECT_NE(text.left.find(" 1191/18432"), std::string::npos) << width << ": " << text.left;
        // Any number shown is whole: the ones it could show are these.
        std::string digits;
        for (char c : text.left + " ") {
            if (std::isdigit(static_cast<unsigned char>(c))) {
                digits += c;
            } else if (!digits.empty()) {
                EXPECT_TRUE(digits == "1191" || digits == "18432" || digits == "123" ||
                            digits == "800" || digits == "122.0" || digits == "122" ||
                            digits == "4" || digits == "0")
                    << width << ": " << digits << " in " << text.left;
                digits.clear();
            }
        }
    }
    info.width = 0;  // no limit: everything in full
    EXPECT_NE(status_text(info).left.find("lighthouses"), std::string::npos);
    info.width = 200;
    EXPECT_NE(status_text(info).left.find("prefill 800 tok/s"), std::string::npos);
}

TEST(TuiStatus, APromptBeingReadShowsItsProgressAndKeepsItsNumbersWhenNarrow) {
    StatusInfo info;
    info.model = "SmolLM2-135M-Instruct.Q4_1.gguf";
    info.context_total = 8192;
    info.busy = true;
    info.prefill = {3072, 6511, 2.0};
    const std::string right = status_text(info).right;
    EXPECT_NE(right.find("reading prompt ▕"), std::string::npos) << right;
    EXPECT_NE(right.find("3,072/6,511 tok 47%"), std::string::npos) << right;
    EXPECT_NE(right.find("1,536 tok/s"), std::string::npos) << right;
    EXPECT_NE(right.find("3s left"), std::string::npos) << right;
    EXPECT_EQ(right.find("replying"), std::string::npos) << right;
    for (int width = 24; width <= 160; width += 4) {
        info.width = width;
        const StatusText text = status_text(info);
        EXPECT_NE(text.right.find("3,072/6,511 tok"), std::string::npos)
            << width << ": " << text.right;
    }
    // Once the reply streams, or the prompt is read, it is a reply again.
    info.width = 0;
    info.streamed = 3;
    EXPECT_NE(status_text(info).right.find("replying 3 tok"), std::string::npos);
    info.streamed = 0;
    info.prefill.done = info.prefill.total;
    EXPECT_NE(status_text(info).right.find("replying 0 tok"), std::string::npos);
}

TEST(Progress, BarsFillInEighthsAndNumbersAreGrouped) {
    EXPECT_EQ(progress_bar(0.0, 4), "    ");
    EXPECT_EQ(progress_bar(1.0, 4), "████");
    EXPECT_EQ(progress_bar(0.5, 4), "██  ");
    EXPECT_EQ(progress_bar(0.5 + 1.0 / 32, 4), "██▏ ");  // an eighth of a cell more
    EXPECT_EQ(progress_bar(2.0, 3), "███");              // clamped
    EXPECT_EQ(progress_bar(-1.0, 2), "  ");
    EXPECT_EQ(grouped(0), "0");
    EXPECT_EQ(grouped(999), "999");
    EXPECT_EQ(grouped(1000), "1,000");
    EXPECT_EQ(grouped(1234567), "1,234,567");
    EXPECT_EQ(prefill_text({0, 100, 0.0}), "0/100 tok 0%");
    const nlohmann::json event = prefill_event({50, 200, 2.0});
    EXPECT_EQ(event["event"], "progress");
    EXPECT_EQ(event["stage"], "prefill");
    EXPECT_EQ(event["done"], 50);
    EXPECT_EQ(event["total"], 200);
    EXPECT_DOUBLE_EQ(event["tokens_per_second"].get<double>(), 25.0);
}

}  // namespace
}  // namespace ember::ui::tui
