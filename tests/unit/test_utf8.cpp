// engine/util/utf8.h: the one UTF-8 encoder and decoder, and the readers built on it agreeing
// on what is valid (the tokenizer's lossy decoding, the templates' surrogate escapes, the
// terminal filter, the attachment check, the GBNF parser).
#include <gtest/gtest.h>

#include <string>

#include "engine/grammar/gbnf.h"
#include "engine/template/template_strings.h"
#include "engine/util/utf8.h"
#include "ui/io/attachments.h"
#include "ui/io/terminal_text.h"
#include "ui/tui/text.h"

namespace ember {
namespace {

std::string encoded(char32_t cp) {
    std::string out;
    append_utf8(out, cp);
    return out;
}

TEST(Utf8, EncodesEachLength) {
    EXPECT_EQ(encoded(U'A'), "A");
    EXPECT_EQ(encoded(0xE9), "\xC3\xA9");
    EXPECT_EQ(encoded(0x20AC), "\xE2\x82\xAC");
    EXPECT_EQ(encoded(0x1F600), "\xF0\x9F\x98\x80");
    EXPECT_EQ(encoded(kMaxCodePoint), "\xF4\x8F\xBF\xBF");
    // A surrogate is written as its three bytes (the templates' escapes need that); a value
    // past U+10FFFF is no code point and writes nothing.
    EXPECT_EQ(encoded(0xD800), "\xED\xA0\x80");
    EXPECT_EQ(encoded(kMaxCodePoint + 1), "");
}

TEST(Utf8, StepsThroughValidSequences) {
    for (char32_t cp :
         {char32_t{0}, char32_t{0x7F}, char32_t{0x80}, char32_t{0x7FF}, char32_t{0x800},
          char32_t{0xD7FF}, char32_t{0xE000}, char32_t{0xFFFF}, char32_t{0x10000}, kMaxCodePoint}) {
        const std::string bytes = encoded(cp);
        const Utf8Step step = utf8_step(bytes);
        EXPECT_EQ(step.status, Utf8Status::Valid) << std::hex << static_cast<uint32_t>(cp);
        EXPECT_EQ(step.length, bytes.size()) << std::hex << static_cast<uint32_t>(cp);
        EXPECT_EQ(step.code_point, cp) << std::hex << static_cast<uint32_t>(cp);
    }
}

TEST(Utf8, RefusesOverlongsSurrogatesAndPastTheRange) {
    struct Case {
        std::string bytes;
        Utf8Status status;
        size_t length;  // the ill-formed part U+FFFD replaces, or the bytes present
    };
    const Case cases[] = {
        {"\x80", Utf8Status::Invalid, 1},      // a lone continuation byte
        {"\xC0\x80", Utf8Status::Invalid, 1},  // overlong NUL (C0/C1 never lead)
        {"\xC1\xBF", Utf8Status::Invalid, 1},
        {"\xE0\x80\x80", Utf8Status::Invalid, 1},  // overlong three-byte form
        {"\xE0\x9F\xBF", Utf8Status::Invalid, 1},
        {"\xED\xA0\x80", Utf8Status::Invalid, 1},      // surrogate U+D800
        {"\xED\xBF\xBF", Utf8Status::Invalid, 1},      // surrogate U+DFFF
        {"\xF0\x8F\xBF\xBF", Utf8Status::Invalid, 1},  // overlong four-byte form
        {"\xF4\x90\x80\x80", Utf8Status::Invalid, 1},  // U+110000
        {"\xF5\x80\x80\x80", Utf8Status::Invalid, 1},
        {"\xFF", Utf8Status::Invalid, 1},
        {"\xE2\x82"
         "A",
         Utf8Status::Invalid, 2},  // cut short by a non-continuation
        {"\xF0\x9F\x98"
         "A",
         Utf8Status::Invalid, 3},
        {"\xE2\x82", Utf8Status::Incomplete, 2},  // the text ends inside the sequence
        {"\xF0", Utf8Status::Incomplete, 1},
    };
    for (const Case& c : cases) {
        const Utf8Step step = utf8_step(c.bytes);
        EXPECT_EQ(step.status, c.status) << testing::PrintToString(c.bytes);
        EXPECT_EQ(step.length, c.length) << testing::PrintToString(c.bytes);
    }
    EXPECT_TRUE(is_valid_utf8(""));
    EXPECT_TRUE(is_valid_utf8("caf\xC3\xA9 \xF0\x9F\x98\x80"));
    EXPECT_FALSE(is_valid_utf8("caf\xC3"));
    EXPECT_FALSE(is_valid_utf8("\xED\xA0\x80"));
}

TEST(Utf8, CutsOnACharacterBoundary) {
    const std::string text =
        "a\xE2\x82\xAC"
        "b";  // a, the euro sign (3 bytes), b
    EXPECT_EQ(utf8_cut(text, 1), 1u);
    EXPECT_EQ(utf8_cut(text, 2), 1u);  // inside the euro sign: before it
    EXPECT_EQ(utf8_cut(text, 3), 1u);
    EXPECT_EQ(utf8_cut(text, 4), 4u);
    EXPECT_EQ(utf8_cut(text, 99), text.size());
}

// Every reader refuses the same sequences and accepts the same ones.
TEST(Utf8, TheReadersAgree) {
    const std::string bad[] = {"\xC0\x80",         "\xE0\x80\x80", "\xED\xA0\x80",
                               "\xF4\x90\x80\x80", "\xE2\x82",     "\x80"};
    for (const std::string& b : bad) {
        const std::string text = "a" + b + "z";
        EXPECT_FALSE(is_valid_utf8(text));
        EXPECT_NE(ui::text_problem(text), "") << testing::PrintToString(text);
        EXPECT_NE(ui::terminal_safe(text), text) << testing::PrintToString(text);
        // The templates keep each bad byte as a surrogate escape and write it back unchanged.
        const std::u32string cps = jinja::utf8_decode(text);
        EXPECT_EQ(cps.size(), text.size()) << testing::PrintToString(text);
        EXPECT_EQ(jinja::utf8_encode(cps), text);
        char32_t cp = 0;
        EXPECT_EQ(ui::tui::decode_at(text, 1, cp), 1u);
        EXPECT_EQ(cp, 0xFFFDu);
        EXPECT_THROW(grammar::parse_gbnf("root ::= \"" + text + "\""), grammar::GrammarError);
    }
    const std::string good = "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80z";
    EXPECT_EQ(ui::text_problem(good), "");
    EXPECT_EQ(ui::terminal_safe(good), good);
    EXPECT_EQ(jinja::utf8_decode(good), U"a\u00E9\u20AC\U0001F600z");
    char32_t cp = 0;
    EXPECT_EQ(ui::tui::decode_at(good, 6, cp), 4u);
    EXPECT_EQ(cp, 0x1F600u);
    EXPECT_NO_THROW(grammar::parse_gbnf("root ::= \"" + good + "\""));
}

}  // namespace
}  // namespace ember
