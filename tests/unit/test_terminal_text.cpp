// The terminal sanitizer (ui/io/terminal_text.h): every expected string below is written out by
// hand from the rules in the header (C0 -> U+2400 + c, DEL -> U+2421, C1 -> "<U+00XX>",
// ill-formed UTF-8 -> U+FFFD per maximal ill-formed part), as UTF-8 bytes where that is
// clearer, never produced by the code under test.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ui/io/terminal_text.h"

namespace ember::ui {
namespace {

using namespace std::string_literals;

struct Case {
    const char* name;
    std::string input;
    std::string shown;
};

const std::vector<Case>& cases() {
    static const std::vector<Case> table = {
        {"plain ASCII", "hello, world", "hello, world"},
        {"newline and tab pass", "a\tb\nc", "a\tb\nc"},
        {"empty", "", ""},
        {"NUL", "a\0b"s,
         "a\xE2\x90\x80"
         "b"},
        {"SOH", "\x01", "\xE2\x90\x81"},
        {"BEL", "\x07", "\xE2\x90\x87"},
        {"backspace", "\x08", "\xE2\x90\x88"},
        {"vertical tab", "\x0B", "\xE2\x90\x8B"},
        {"form feed", "\x0C", "\xE2\x90\x8C"},
        {"carriage return", "x\r\ny", "x\xE2\x90\x8D\ny"},
        {"unit separator", "\x1F", "\xE2\x90\x9F"},
        {"ESC alone", "\x1B", "\xE2\x90\x9B"},
        {"clear screen", "a\x1B[2Jb", "a\xE2\x90\x9B[2Jb"},
        {"window title", "\x1B]0;pwned\x07", "\xE2\x90\x9B]0;pwned\xE2\x90\x87"},
        {"OSC 52 clipboard", "\x1B]52;c;aGk=\x07", "\xE2\x90\x9B]52;c;aGk=\xE2\x90\x87"},
        {"OSC ended by ST", "\x1B]0;t\x1B\\", "\xE2\x90\x9B]0;t\xE2\x90\x9B\\"},
        {"DEL", "a\x7F", "a\xE2\x90\xA1"},
        {"C1 PAD U+0080", "\xC2\x80", "<U+0080>"},
        {"C1 CSI U+009B",
         "\xC2\x9B"
         "31m",
         "<U+009B>31m"},
        {"C1 OSC U+009D",
         "\xC2\x9D"
         "0;t",
         "<U+009D>0;t"},
        {"C1 APC U+009F", "\xC2\x9F", "<U+009F>"},
        {"NBSP U+00A0 passes", "\xC2\xA0", "\xC2\xA0"},
        {"e acute passes", "caf\xC3\xA9", "caf\xC3\xA9"},
        {"CJK passes", "\xE4\xB8\xAD\xE6\x96\x87", "\xE4\xB8\xAD\xE6\x96\x87"},
        {"emoji passes", "\xF0\x9F\x98\x80", "\xF0\x9F\x98\x80"},
        {"control pictures pass", "\xE2\x90\x9B", "\xE2\x90\x9B"},
        {"U+FFFD passes", "\xEF\xBF\xBD", "\xEF\xBF\xBD"},
        {"raw 0x9B byte",
         "a\x9B"
         "31mb",
         "a\xEF\xBF\xBD"
         "31mb"},
        {"lone continuation", "\x80", "\xEF\xBF\xBD"},
        {"two continuations", "\x80\xBF", "\xEF\xBF\xBD\xEF\xBF\xBD"},
        {"overlong C0 lead", "\xC0\xAF", "\xEF\xBF\xBD\xEF\xBF\xBD"},
        {"overlong C1 lead", "\xC1\x9B", "\xEF\xBF\xBD\xEF\xBF\xBD"},
        {"overlong E0", "\xE0\x80\xAF", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},
        {"surrogate", "\xED\xA0\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},
        {"past U+10FFFF", "\xF4\x90\x80\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},
        {"F5 lead", "\xF5", "\xEF\xBF\xBD"},
        {"FF byte", "\xFF", "\xEF\xBF\xBD"},
        {"cut 3-byte sequence then ASCII",
         "\xE2\x82"
         "A",
         "\xEF\xBF\xBD"
         "A"},
        {"cut 4-byte sequence then ESC", "\xF0\x9F\x98\x1B", "\xEF\xBF\xBD\xE2\x90\x9B"},
        {"cut at the end", "ok\xE2\x82", "ok\xEF\xBF\xBD"},
        {"lead then C1 as bytes", "\xC2\xC2\x9B", "\xEF\xBF\xBD<U+009B>"},
    };
    return table;
}

TEST(TerminalText, TableOfInputsAndWhatATerminalShows) {
    for (const Case& c : cases()) {
        EXPECT_EQ(terminal_safe(c.input), c.shown) << c.name;
    }
}

// Whatever goes in, what comes out is valid UTF-8 with no byte below 0x20 but '\n' and '\t',
// no DEL and no C1 code point: checked byte by byte, independently of the decoder above.
bool terminal_clean(const std::string& s) {
    for (size_t i = 0; i < s.size(); ++i) {
        const auto b = static_cast<unsigned char>(s[i]);
        if ((b < 0x20 && b != '\n' && b != '\t') || b == 0x7F) return false;
        if (b == 0xC2 && i + 1 < s.size()) {
            const auto next = static_cast<unsigned char>(s[i + 1]);
            if (next >= 0x80 && next <= 0x9F) return false;
        }
    }
    // Valid UTF-8 by lead and trail byte counts (the exact ranges are the table's business).
    size_t i = 0;
    while (i < s.size()) {
        const auto b = static_cast<unsigned char>(s[i]);
        const size_t n = b < 0x80 ? 1 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC2 ? 2 : 0;
        if (n == 0 || i + n > s.size()) return false;
        for (size_t k = 1; k < n; ++k) {
            if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
        }
        i += n;
    }
    return true;
}

TEST(TerminalText, EveryByteValueComesOutClean) {
    for (int a = 0; a < 256; ++a) {
        for (int b = 0; b < 256; b += 3) {
            const std::string in = {static_cast<char>(a), static_cast<char>(b), 'z'};
            const std::string out = terminal_safe(in);
            ASSERT_TRUE(terminal_clean(out)) << "bytes " << a << " " << b;
            EXPECT_EQ(out.back(), 'z');
        }
    }
}

TEST(TerminalText, PiecesMarkTheStandIns) {
    std::vector<std::pair<std::string, bool>> pieces;
    for_each_terminal_piece("ab\x1B[2J\xC2\x9B\xFFz", [&](std::string_view p, bool replaced) {
        pieces.emplace_back(std::string(p), replaced);
    });
    const std::vector<std::pair<std::string, bool>> expected = {
        {"ab", false},      {"\xE2\x90\x9B", true}, {"[2J", false},
        {"<U+009B>", true}, {"\xEF\xBF\xBD", true}, {"z", false}};
    EXPECT_EQ(pieces, expected);
}

// Streaming: every way of cutting the input in two (and byte by byte) shows the same text as
// the whole; a character split between pieces is not turned into U+FFFD.
TEST(TerminalText, StreamShowsTheSameWhereverThePiecesAreCut) {
    for (const Case& c : cases()) {
        for (size_t cut = 0; cut <= c.input.size(); ++cut) {
            TerminalTextStream stream;
            std::string out = stream.feed(std::string_view(c.input).substr(0, cut));
            out += stream.feed(std::string_view(c.input).substr(cut));
            out += stream.finish();
            EXPECT_EQ(out, c.shown) << c.name << " cut at " << cut;
        }
        TerminalTextStream stream;
        std::string out;
        for (char ch : c.input) out += stream.feed(std::string_view(&ch, 1));
        out += stream.finish();
        EXPECT_EQ(out, c.shown) << c.name << " byte by byte";
    }
}

TEST(TerminalText, StreamHoldsASplitCharacterUntilItsEnd) {
    TerminalTextStream stream;
    EXPECT_EQ(stream.feed("caf\xC3"), "caf");
    EXPECT_EQ(stream.feed("\xA9!"), "\xC3\xA9!");
    EXPECT_EQ(stream.feed("\xF0\x9F"), "");
    EXPECT_EQ(stream.feed("\x98"), "");
    EXPECT_EQ(stream.feed("\x80"), "\xF0\x9F\x98\x80");
    // C1 split between pieces is still a C1 control.
    EXPECT_EQ(stream.feed("\xC2"), "");
    EXPECT_EQ(stream.feed("\x9B"), "<U+009B>");
    // A reply that ends inside a character: the part shows as U+FFFD at the end.
    EXPECT_EQ(stream.feed("x\xE2\x82"), "x");
    EXPECT_EQ(stream.finish(), "\xEF\xBF\xBD");
    EXPECT_EQ(stream.finish(), "");
}

}  // namespace
}  // namespace ember::ui
