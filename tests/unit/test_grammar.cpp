// The GBNF parser, the byte-level matcher and the vocabulary mask.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "engine/grammar/gbnf.h"
#include "engine/grammar/matcher.h"
#include "engine/grammar/token_mask.h"

using namespace ember::grammar;

namespace {

std::shared_ptr<const Grammar> compile(const std::string& text) {
    return std::make_shared<const Grammar>(parse_gbnf(text));
}

// Whether the whole of `input` is a sentence of the grammar.
bool matches(const std::string& grammar, const std::string& input) {
    Matcher m(compile(grammar));
    return m.accept(input) && m.complete();
}

// Whether `input` is a prefix of some sentence.
bool prefix_ok(const std::string& grammar, const std::string& input) {
    Matcher m(compile(grammar));
    return m.accept(input);
}

std::string error_of(const std::string& grammar) {
    try {
        parse_gbnf(grammar);
    } catch (const GrammarError& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST(Gbnf, LiteralsAlternationAndSequences) {
    const std::string g = "root ::= \"ab\" (\"c\" | \"de\") \"!\"";
    EXPECT_TRUE(matches(g, "abc!"));
    EXPECT_TRUE(matches(g, "abde!"));
    EXPECT_FALSE(matches(g, "abd!"));
    EXPECT_FALSE(matches(g, "abc"));  // a prefix, not complete
    EXPECT_TRUE(prefix_ok(g, "abc"));
    EXPECT_FALSE(prefix_ok(g, "abx"));
    EXPECT_FALSE(matches(g, "abc!!"));  // nothing may follow a complete sentence
}

TEST(Gbnf, RepetitionOperatorsCountExactly) {
    EXPECT_TRUE(matches("root ::= \"a\"*", ""));
    EXPECT_TRUE(matches("root ::= \"a\"*", "aaaa"));
    EXPECT_FALSE(matches("root ::= \"a\"+", ""));
    EXPECT_TRUE(matches("root ::= \"a\"+ \"b\"", "aaab"));
    EXPECT_TRUE(matches("root ::= \"a\"? \"b\"", "b"));
    EXPECT_FALSE(matches("root ::= \"a\"? \"b\"", "aab"));
    const std::string g = "root ::= \"x\"{2,4}";
    EXPECT_FALSE(matches(g, "x"));
    EXPECT_TRUE(matches(g, "xx"));
    EXPECT_TRUE(matches(g, "xxxx"));
    EXPECT_FALSE(prefix_ok(g, "xxxxx"));
    EXPECT_TRUE(matches("root ::= \"ab\"{3}", "ababab"));
    EXPECT_FALSE(matches("root ::= \"ab\"{3}", "abab"));
    EXPECT_TRUE(matches("root ::= [0-9]{2,}", "12345"));
    EXPECT_FALSE(matches("root ::= [0-9]{2,}", "1"));
}

TEST(Gbnf, CharacterClassesRangesNegationAndUtf8) {
    const std::string g = "root ::= [a-cx] [^a-z\\n]";
    EXPECT_TRUE(matches(g, "bZ"));
    EXPECT_TRUE(matches(g, "x7"));
    EXPECT_FALSE(matches(g, "dZ"));
    EXPECT_FALSE(matches(g, "aq"));
    EXPECT_FALSE(matches(g, "a\n"));
    // A negated class takes any other code point, as whole UTF-8 sequences.
    EXPECT_TRUE(matches(g, "a\xC3\xA9"));          // é, 2 bytes
    EXPECT_TRUE(matches(g, "a\xE2\x82\xAC"));      // €, 3 bytes
    EXPECT_TRUE(matches(g, "a\xF0\x9F\x98\x80"));  // 😀, 4 bytes
    EXPECT_FALSE(matches(g, "a\xC3"));             // half a character
    EXPECT_FALSE(prefix_ok(g, "a\xC3\x28"));       // not a continuation byte
    EXPECT_FALSE(prefix_ok(g, "a\xED\xA0\x80"));   // a surrogate (U+D800) is never valid
    EXPECT_FALSE(prefix_ok(g, "a\xC0\xAF"));       // overlong encoding of '/'
    // Ranges over multibyte characters.
    const std::string greek = "root ::= [α-ω]+";
    EXPECT_TRUE(matches(greek, "λόγος") == false);  // ό (U+03CC) lies outside α-ω (U+03B1-03C9)
    EXPECT_TRUE(matches(greek, "λογος"));
    EXPECT_FALSE(matches(greek, "λx"));
    EXPECT_TRUE(matches("root ::= .+", "any ✓ thing"));
}

TEST(Gbnf, EscapesInLiteralsAndClasses) {
    EXPECT_TRUE(matches(R"(root ::= "a\"b\\c\n\t\x41\u00e9")", "a\"b\\c\n\tA\xC3\xA9"));
    EXPECT_TRUE(matches(R"(root ::= [\]\-]+)", "]-]"));
    EXPECT_FALSE(matches(R"(root ::= [\]\-]+)", "a"));
    EXPECT_TRUE(matches(R"(root ::= [\x00-\x1F])", std::string(1, '\x05')));
    EXPECT_TRUE(matches("root ::= \"\\U0001F600\"", "\xF0\x9F\x98\x80"));
}

TEST(Gbnf, RulesCommentsAndMultilineAlternatives) {
    const std::string g = R"(# a comment line
root ::= greeting " " name   # trailing comment
greeting ::= "hi"
           | "hello"
name ::= (
    "ann" |
    "bob"
)
)";
    EXPECT_TRUE(matches(g, "hi ann"));
    EXPECT_TRUE(matches(g, "hello bob"));
    EXPECT_FALSE(matches(g, "hey bob"));
}

TEST(Gbnf, RecursionNestsAndTheStackUnwinds) {
    const std::string g = "root ::= \"(\" root \")\" | \"x\"";
    EXPECT_TRUE(matches(g, "x"));
    EXPECT_TRUE(matches(g, "(((x)))"));
    EXPECT_FALSE(matches(g, "((x)"));
    EXPECT_FALSE(prefix_ok(g, "((x)))"));
    Matcher m(compile(g));
    ASSERT_TRUE(m.accept("(((("));
    EXPECT_EQ(m.min_bytes_to_complete(), 5u);  // "x))))"
}

TEST(Gbnf, ErrorsNameLineAndColumn) {
    EXPECT_EQ(error_of("root ::= \"a\"\nfoo ::= bar"),
              "line 2, column 9: rule 'bar' is used but not defined");
    EXPECT_EQ(error_of("root ::= \"abc"), "line 1, column 10: unterminated string literal");
    EXPECT_EQ(error_of("root ::= [a-z"), "line 1, column 10: unterminated character class");
    EXPECT_EQ(error_of("root ::= (\"a\""), "line 1, column 14: expected ')' to close the group");
    EXPECT_EQ(error_of("root = \"a\""), "line 1, column 6: expected '::=' after rule name 'root'");
    EXPECT_EQ(error_of("root ::= * \"a\""),
              "line 1, column 10: '*' with nothing before it to repeat");
    EXPECT_EQ(error_of("root ::= \"a\"{3,1}"), "line 1, column 18: repetition {m,n} with n < m");
    EXPECT_EQ(error_of("root ::= [z-a]"), "line 1, column 10: character range out of order");
    EXPECT_EQ(error_of("root ::= \"\\q\""), "line 1, column 11: unknown escape '\\q'");
    EXPECT_EQ(error_of("root ::= \"a\"\nroot ::= \"b\""),
              "line 2, column 1: rule 'root' is defined twice");
    EXPECT_EQ(error_of("start ::= \"a\""), "the grammar has no rule 'root'");
    EXPECT_NE(
        error_of("root ::= root \"a\" | \"b\"").find("rule 'root' can recurse without consuming"),
        std::string::npos);
    EXPECT_NE(error_of("root ::= (\"a\"?)*").find("can recurse without consuming"),
              std::string::npos);
}

TEST(Utf8, RangesSplitIntoByteRangeSequences) {
    // U+0080-U+07FF: exactly one 2-byte product [C2-DF][80-BF].
    auto two = utf8_sequences({0x80, 0x7FF});
    ASSERT_EQ(two.size(), 1u);
    ASSERT_EQ(two[0].size(), 2u);
    EXPECT_EQ(two[0][0].lo, 0xC2);
    EXPECT_EQ(two[0][0].hi, 0xDF);
    EXPECT_EQ(two[0][1].lo, 0x80);
    EXPECT_EQ(two[0][1].hi, 0xBF);
    // Every code point of a ragged range is covered exactly once, checked by brute force.
    const CodePointRange r{0x3A5, 0x1F62A};
    const auto seqs = utf8_sequences(r);
    for (uint32_t cp = 0x300; cp < 0x20000; ++cp) {
        const std::string bytes = encode_utf8(cp);
        int hits = 0;
        for (const auto& s : seqs) {
            if (s.size() != bytes.size()) continue;
            bool in = true;
            for (size_t i = 0; i < s.size(); ++i) {
                const auto b = static_cast<uint8_t>(bytes[i]);
                in = in && b >= s[i].lo && b <= s[i].hi;
            }
            hits += in;
        }
        const bool want = cp >= r.first && cp <= r.last && (cp < 0xD800 || cp > 0xDFFF);
        ASSERT_EQ(hits, want ? 1 : 0) << std::hex << cp;
    }
}

TEST(Matcher, AgreesWithStdRegexOnRandomStrings) {
    // An independent reference: std::regex (ECMAScript) for the same language.
    const std::string g = R"(root ::= ("a" | "b" [cd]*)+ "e"? [0-9]{1,3})";
    const std::regex re("(a|b[cd]*)+e?[0-9]{1,3}");
    std::mt19937 rng(7);
    const std::string alphabet = "abcde0129";
    int accepted = 0;
    for (int i = 0; i < 3000; ++i) {
        std::string s;
        const int len = static_cast<int>(rng() % 9);
        for (int j = 0; j < len; ++j) s += alphabet[rng() % alphabet.size()];
        const bool want = std::regex_match(s, re);
        accepted += want;
        ASSERT_EQ(matches(g, s), want) << s;
    }
    EXPECT_GT(accepted, 50);  // the test saw both answers
}

namespace {

std::shared_ptr<const TokenTrie> small_vocab() {
    // ids:          0     1     2      3      4     5      6      7    8      9     10 (end)
    return std::make_shared<const TokenTrie>(
        std::vector<std::string>{"{", "}", "\"a", "\":", " ", "1", "12", "{\"", "x", "", "<e>"},
        std::vector<int32_t>{10});
}

std::vector<int> allowed_ids(GrammarConstraint& c) {
    std::vector<uint8_t> allowed;
    c.allowed_tokens(allowed);
    std::vector<int> ids;
    for (size_t i = 0; i < allowed.size(); ++i) {
        if (allowed[i]) ids.push_back(static_cast<int>(i));
    }
    // The lazy check must agree with the full mask for every token.
    for (size_t i = 0; i < allowed.size(); ++i) {
        EXPECT_EQ(c.allows(static_cast<int32_t>(i)), allowed[i] != 0) << "token " << i;
    }
    return ids;
}

}  // namespace

TEST(TokenMask, AllowsExactlyTheTokensWhoseBytesFit) {
    const auto grammar = compile(R"(root ::= "{" ( "\"a\":" " "? [0-9]+ )? "}")");
    GrammarConstraint c(grammar, small_vocab());
    EXPECT_EQ(allowed_ids(c), (std::vector<int>{0, 7}));  // "{" and "{\""
    ASSERT_TRUE(c.accept(7));
    // "a" alone is not a token: nothing fits, and the full mask leaves the end token so that
    // sampling always has a choice (the one-token check still says no to it).
    std::vector<uint8_t> allowed;
    c.allowed_tokens(allowed);
    EXPECT_EQ(std::count(allowed.begin(), allowed.end(), 1), 1);
    EXPECT_EQ(allowed[10], 1);
    EXPECT_FALSE(c.allows(10));
    c.reset();
    ASSERT_TRUE(c.accept(0));
    EXPECT_EQ(allowed_ids(c), (std::vector<int>{1, 2}));
    ASSERT_TRUE(c.accept(2));
    ASSERT_TRUE(c.accept(3));
    EXPECT_EQ(allowed_ids(c), (std::vector<int>{4, 5, 6}));
    ASSERT_TRUE(c.accept(6));
    EXPECT_EQ(allowed_ids(c), (std::vector<int>{1, 5, 6}));
    EXPECT_FALSE(c.accept(4));  // refused: nothing changes
    ASSERT_TRUE(c.accept(1));
    EXPECT_TRUE(c.complete());
    EXPECT_EQ(allowed_ids(c), (std::vector<int>{10}));  // only the end token
    EXPECT_TRUE(c.accept(10));
    EXPECT_TRUE(c.finished());
}

TEST(TokenMask, TheLengthLimitSteersToCompletion) {
    const auto grammar = compile(R"(root ::= "{" ( "\"a\":" " "? [0-9]+ )? "}")");
    GrammarConstraint c(grammar, small_vocab());
    ASSERT_TRUE(c.accept(0));
    // One token may follow the next: "\"a" would leave "\":" + digit + "}" (4 bytes) to close.
    c.set_remaining(1);
    EXPECT_EQ(allowed_ids(c), (std::vector<int>{1}));
    c.set_remaining(4);
    EXPECT_EQ(allowed_ids(c), (std::vector<int>{1, 2}));
    // Past the point where the limit cannot be met, progress is still allowed.
    ASSERT_TRUE(c.accept(2));
    c.set_remaining(0);
    EXPECT_EQ(allowed_ids(c), (std::vector<int>{3}));
}

TEST(TokenMask, MaskSetsMinusInfinityOnRefusedTokens) {
    const auto grammar = compile(R"(root ::= "1" "2"?)");
    GrammarConstraint c(grammar, small_vocab());
    std::vector<float> logits(12, 0.5f);  // two padded rows past the vocabulary
    c.mask(logits);
    for (size_t i = 0; i < logits.size(); ++i) {
        const bool kept = i == 5 || i == 6;
        EXPECT_EQ(std::isinf(logits[i]), !kept) << i;
    }
    EXPECT_EQ(c.accepted_prefix(std::vector<int32_t>{5, 8, 1}), 1u);
    EXPECT_EQ(c.accepted_prefix(std::vector<int32_t>{6, 10}), 1u);  // an end token ends a draft
}

TEST(TokenMask, TrieWalkMatchesTokenByTokenChecksOnARandomVocabulary) {
    std::mt19937 rng(11);
    std::vector<std::string> pieces;
    const std::string alphabet = "{}\":,[] abn0123456789-.e\\";
    for (int i = 0; i < 4000; ++i) {
        std::string p;
        const int len = 1 + static_cast<int>(rng() % 5);
        for (int j = 0; j < len; ++j) p += alphabet[rng() % alphabet.size()];
        pieces.push_back(p);
    }
    pieces.push_back("");
    auto trie = std::make_shared<const TokenTrie>(pieces, std::vector<int32_t>{4000});
    const auto grammar = compile(R"(
root ::= value
value ::= obj | arr | str | num | "null"
obj ::= "{" ( str ":" value ( "," str ":" value )* )? "}"
arr ::= "[" ( value ( "," value )* )? "]"
str ::= "\"" [ab ]* "\""
num ::= "-"? [0-9]+ ( "." [0-9]+ )?
)");
    GrammarConstraint c(grammar, trie);
    Matcher reference(grammar);
    std::vector<uint8_t> allowed;
    for (int step = 0; step < 40 && !c.complete(); ++step) {
        c.allowed_tokens(allowed);
        std::vector<int32_t> ok;
        for (size_t id = 0; id < 4000; ++id) {
            ASSERT_EQ(allowed[id] != 0, reference.can_accept(pieces[id]))
                << "step " << step << " " << pieces[id];
            if (allowed[id]) ok.push_back(static_cast<int32_t>(id));
        }
        ASSERT_FALSE(ok.empty());
        const int32_t pick = ok[rng() % ok.size()];
        ASSERT_TRUE(c.accept(pick));
        ASSERT_TRUE(reference.accept(pieces[static_cast<size_t>(pick)]));
    }
}
