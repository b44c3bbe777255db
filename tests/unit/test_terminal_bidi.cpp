// Invisible format characters on a terminal (ui/io/terminal_text.h): the bidirectional controls
// that can make a line read differently from what it holds, and the zero-width ones that hide
// inside words, are shown as "<U+XXXX>". The UTF-8 bytes below are written out by hand from
// the code points, never produced by the code under test.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ui/io/terminal_text.h"

namespace ember::ui {
namespace {

struct Case {
    const char* name;
    std::string input;
    std::string shown;
};

TEST(TerminalBidi, FormatCharactersBecomeStandIns) {
    const std::vector<Case> cases = {
        {"RLO U+202E",
         "abc\xE2\x80\xAE"
         "def",
         "abc<U+202E>def"},
        {"LRE U+202A", "\xE2\x80\xAA", "<U+202A>"},
        {"RLE U+202B", "\xE2\x80\xAB", "<U+202B>"},
        {"PDF U+202C", "\xE2\x80\xAC", "<U+202C>"},
        {"LRO U+202D", "\xE2\x80\xAD", "<U+202D>"},
        {"LRM U+200E", "\xE2\x80\x8E", "<U+200E>"},
        {"RLM U+200F", "\xE2\x80\x8F", "<U+200F>"},
        {"LRI U+2066", "\xE2\x81\xA6", "<U+2066>"},
        {"RLI U+2067", "\xE2\x81\xA7", "<U+2067>"},
        {"FSI U+2068", "\xE2\x81\xA8", "<U+2068>"},
        {"PDI U+2069", "\xE2\x81\xA9", "<U+2069>"},
        {"ALM U+061C", "\xD8\x9C", "<U+061C>"},
        {"ZWSP U+200B", "pass\xE2\x80\x8Bword", "pass<U+200B>word"},
        {"word joiner U+2060", "\xE2\x81\xA0", "<U+2060>"},
        {"BOM U+FEFF", "\xEF\xBB\xBFtext", "<U+FEFF>text"},
        // The classic Trojan Source line: an RLO inside a comment, closed by a PDI.
        {"trojan source", "/*\xE2\x80\xAE } \xE2\x81\xA6if (admin)\xE2\x81\xA9 \xE2\x81\xA6 begin",
         "/*<U+202E> } <U+2066>if (admin)<U+2069> <U+2066> begin"},
        {"with ESC too", "\x1B[31m\xE2\x80\xAE", "\xE2\x90\x9B[31m<U+202E>"},
    };
    for (const Case& c : cases) EXPECT_EQ(terminal_safe(c.input), c.shown) << c.name;
}

TEST(TerminalBidi, NeighboursAndJoinersPass) {
    const std::vector<std::string> pass = {
        "\xE2\x80\x8C",                                  // ZWNJ U+200C (Persian, Indic scripts)
        "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9",  // man ZWJ woman: an emoji sequence
        "\xE2\x80\x8D",                                  // ZWJ alone
        "\xE2\x80\x90",                                  // U+2010 hyphen
        "\xE2\x80\xA9",                                  // U+2029 paragraph separator (not flagged)
        "\xE2\x80\xAF",                                  // U+202F narrow no-break space
        "\xE2\x81\xA5",                                  // U+2065 (unassigned, between the sets)
        "\xE2\x81\xAA",                                  // U+206A
        "\xD8\x9B",                                      // U+061B Arabic semicolon
        "\xD8\xB9\xD8\xB1\xD8\xA8\xD9\x8A",              // Arabic letters
        "\xD7\xA9\xD7\x9C\xD7\x95\xD7\x9D",              // Hebrew letters
        "\xEF\xBB\xBE",                                  // U+FEFE
    };
    for (const std::string& s : pass) EXPECT_EQ(terminal_safe(s), s) << s;
}

TEST(TerminalBidi, PiecesAndStreamsAgree) {
    const std::string text =
        "a\xE2\x80\xAE"
        "b\xEF\xBB\xBF";
    std::vector<std::pair<std::string, bool>> pieces;
    for_each_terminal_piece(text, [&](std::string_view p, bool replaced) {
        pieces.emplace_back(std::string(p), replaced);
    });
    const std::vector<std::pair<std::string, bool>> expected = {
        {"a", false}, {"<U+202E>", true}, {"b", false}, {"<U+FEFF>", true}};
    EXPECT_EQ(pieces, expected);
    // Fed a byte at a time, a three-byte control is held until complete, then replaced.
    TerminalTextStream stream;
    std::string streamed;
    for (char c : text) streamed += stream.feed(std::string(1, c));
    streamed += stream.finish();
    EXPECT_EQ(streamed, "a<U+202E>b<U+FEFF>");
}

}  // namespace
}  // namespace ember::ui
