#include "engine/grammar/gbnf.h"

#include <map>
#include <string>
#include <utility>

#include "engine/util/depth_guard.h"
#include "engine/util/utf8.h"

namespace ember::grammar {

namespace {

// Repetition counts past this are refused: {m,n} is laid out as n nested rules.
constexpr int kMaxRepeat = 10000;

bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
}

int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

class Parser {
public:
    Parser(std::string_view text, CompileBudget* budget) : text_(text), builder_(budget) {}

    Grammar parse(const std::string& root) {
        skip_space(/*newlines=*/true);
        while (!at_end()) {
            parse_rule();
            skip_space(true);
        }
        for (const auto& [name, at] : first_use_) {
            if (!builder_.defined(builder_.rule(name))) {
                fail("rule '" + name + "' is used but not defined", at);
            }
        }
        return builder_.build(root);
    }

private:
    [[noreturn]] void fail(const std::string& message, size_t at) const {
        size_t line = 1, column = 1;
        for (size_t i = 0; i < at && i < text_.size(); ++i) {
            if (text_[i] == '\n') {
                ++line;
                column = 1;
            } else {
                ++column;
            }
        }
        throw GrammarError("line " + std::to_string(line) + ", column " + std::to_string(column) +
                           ": " + message);
    }
    [[noreturn]] void fail(const std::string& message) const { fail(message, pos_); }

    bool at_end() const { return pos_ >= text_.size(); }
    char peek(size_t ahead = 0) const {
        return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0';
    }

    // Skips blanks and comments; newlines too when `newlines` (inside a group).
    void skip_space(bool newlines) {
        while (!at_end()) {
            const char c = peek();
            if (c == ' ' || c == '\t' || c == '\r' || (newlines && c == '\n')) {
                ++pos_;
            } else if (c == '#') {
                while (!at_end() && peek() != '\n') ++pos_;
            } else {
                break;
            }
        }
    }

    std::string parse_name() {
        const size_t start = pos_;
        while (!at_end() && is_name_char(peek())) ++pos_;
        if (pos_ == start) fail("expected a rule name");
        return std::string(text_.substr(start, pos_ - start));
    }

    void parse_rule() {
        const size_t start = pos_;
        const std::string name = parse_name();
        skip_space(false);
        if (text_.substr(pos_, 3) != "::=") fail("expected '::=' after rule name '" + name + "'");
        pos_ += 3;
        skip_space(false);
        const uint32_t id = builder_.rule(name);
        if (builder_.defined(id)) fail("rule '" + name + "' is defined twice", start);
        builder_.define(id, parse_alternatives(name, /*nested=*/false));
    }

    std::vector<Sequence> parse_alternatives(const std::string& rule, bool nested) {
        std::vector<Sequence> alternatives;
        alternatives.push_back(parse_sequence(rule, nested));
        for (;;) {
            // A rule continues on the next line when that line starts with '|'.
            const size_t before = pos_;
            skip_space(true);
            if (peek() != '|') {
                if (!nested) pos_ = before;
                return alternatives;
            }
            ++pos_;
            skip_space(true);
            alternatives.push_back(parse_sequence(rule, nested));
        }
    }

    Sequence parse_sequence(const std::string& rule, bool nested) {
        Sequence sequence;
        size_t last_item = 0;  // where the most recent item's elements start
        bool have_item = false;
        for (;;) {
            builder_.budget().tick();
            skip_space(nested);
            const char c = peek();
            if (at_end() || c == '|' || c == ')' || c == '\n') return sequence;
            if (c == '*' || c == '+' || c == '?' || c == '{') {
                if (!have_item) fail(std::string("'") + c + "' with nothing before it to repeat");
                const auto [min, max] = parse_repetition();
                const Sequence item(sequence.begin() + static_cast<ptrdiff_t>(last_item),
                                    sequence.end());
                sequence.resize(last_item);
                sequence.push_back(builder_.repeat(item, min, max, rule));
                continue;
            }
            last_item = sequence.size();
            have_item = true;
            if (c == '"') {
                parse_literal(sequence);
            } else if (c == '[') {
                sequence.push_back(parse_class());
            } else if (c == '.') {
                ++pos_;
                sequence.push_back(builder_.char_class({}, /*negated=*/true));
            } else if (c == '(') {
                const int limit = builder_.budget().limits().max_nesting;
                const DepthGuard guard(depth_, limit, [&] {
                    fail("groups nested deeper than " + std::to_string(limit) +
                         " levels (the limit on nesting)");
                });
                ++pos_;
                skip_space(true);
                const uint32_t group = builder_.fresh_rule(rule);
                builder_.define(group, parse_alternatives(rule, /*nested=*/true));
                skip_space(true);
                if (peek() != ')') fail("expected ')' to close the group");
                ++pos_;
                sequence.push_back(builder_.ref(group));
            } else if (is_name_char(c)) {
                const size_t start = pos_;
                const std::string name = parse_name();
                skip_space(false);
                if (text_.substr(pos_, 3) == "::=") {
                    if (nested) fail("a new rule '" + name + "' starts inside a group", start);
                    pos_ = start;  // the next rule's name: this sequence ended at a newline
                    return sequence;
                }
                first_use_.emplace(name, start);
                sequence.push_back(builder_.ref(builder_.rule(name)));
            } else {
                fail(std::string("unexpected character '") + c + "'");
            }
        }
    }

    std::pair<int, int> parse_repetition() {
        const char c = peek();
        ++pos_;
        if (c == '*') return {0, -1};
        if (c == '+') return {1, -1};
        if (c == '?') return {0, 1};
        skip_space(false);
        const int min = parse_count();
        skip_space(false);
        int max = min;
        if (peek() == ',') {
            ++pos_;
            skip_space(false);
            max = peek() == '}' ? -1 : parse_count();
            skip_space(false);
        }
        if (peek() != '}') fail("expected '}' to close the repetition");
        ++pos_;
        if (max >= 0 && max < min) fail("repetition {m,n} with n < m");
        return {min, max};
    }

    int parse_count() {
        const size_t start = pos_;
        long value = 0;
        while (peek() >= '0' && peek() <= '9') {
            value = value * 10 + (peek() - '0');
            if (value > kMaxRepeat)
                fail("repetition count above " + std::to_string(kMaxRepeat), start);
            ++pos_;
        }
        if (pos_ == start) fail("expected a number in the repetition");
        return static_cast<int>(value);
    }

    // One code point of a literal or class at pos_, escapes decoded.
    uint32_t parse_char() {
        const size_t start = pos_;
        const auto byte = static_cast<uint8_t>(peek());
        if (byte == '\\') {
            ++pos_;
            const char e = peek();
            ++pos_;
            switch (e) {
                case 'n':
                    return '\n';
                case 'r':
                    return '\r';
                case 't':
                    return '\t';
                case '\\':
                case '"':
                case ']':
                case '[':
                case '-':
                case '^':
                case '\'':
                    return static_cast<uint8_t>(e);
                case 'x':
                    return parse_hex(2, start);
                case 'u':
                    return parse_hex(4, start);
                case 'U':
                    return parse_hex(8, start);
                default:
                    fail(std::string("unknown escape '\\") + e + "'", start);
            }
        }
        // A UTF-8 sequence from the grammar text itself.
        if (at_end()) fail("invalid UTF-8 in the grammar");
        const Utf8Step step = utf8_step(text_.substr(pos_));
        if (step.status != Utf8Status::Valid) fail("invalid UTF-8 in the grammar");
        pos_ += step.length;
        return step.code_point;
    }

    uint32_t parse_hex(int digits, size_t start) {
        uint32_t value = 0;
        for (int i = 0; i < digits; ++i) {
            const int d = hex_value(peek());
            if (d < 0) fail("expected " + std::to_string(digits) + " hex digits", start);
            value = value * 16 + static_cast<uint32_t>(d);
            ++pos_;
        }
        if (value > 0x10FFFF) fail("code point above U+10FFFF", start);
        return value;
    }

    void parse_literal(Sequence& sequence) {
        const size_t start = pos_;
        ++pos_;  // the opening quote
        std::string bytes;
        while (peek() != '"') {
            if (at_end() || peek() == '\n') fail("unterminated string literal", start);
            const size_t at = pos_;
            const uint32_t cp = parse_char();
            // What a literal forces the model to write must be text: no NUL, and no half of a
            // UTF-16 surrogate pair (which has no UTF-8 form).
            if (cp == 0) fail("a NUL character in a string literal (output must be text)", at);
            if (cp >= 0xD800 && cp <= 0xDFFF) {
                fail(
                    "a surrogate code point in a string literal (not a character; output "
                    "must be valid UTF-8)",
                    at);
            }
            bytes += encode_utf8(cp);
        }
        ++pos_;
        builder_.append_literal(sequence, bytes);
    }

    Element parse_class() {
        const size_t start = pos_;
        ++pos_;  // '['
        bool negated = false;
        if (peek() == '^') {
            negated = true;
            ++pos_;
        }
        std::vector<CodePointRange> ranges;
        while (peek() != ']') {
            if (at_end() || peek() == '\n') fail("unterminated character class", start);
            const uint32_t first = parse_char();
            uint32_t last = first;
            if (peek() == '-' && peek(1) != ']' && pos_ + 1 < text_.size()) {
                ++pos_;
                last = parse_char();
                if (last < first) fail("character range out of order", start);
            }
            ranges.push_back({first, last});
        }
        ++pos_;
        if (ranges.empty() && !negated) fail("empty character class", start);
        try {
            return builder_.char_class(std::move(ranges), negated);
        } catch (const GrammarError& e) {
            fail(e.what(), start);
        }
    }

    std::string_view text_;
    size_t pos_ = 0;
    int depth_ = 0;  // groups open
    GrammarBuilder builder_;
    std::map<std::string, size_t> first_use_;  // rule name -> offset of its first reference
};

}  // namespace

Grammar parse_gbnf(std::string_view text, const std::string& root, CompileBudget* budget) {
    return Parser(text, budget).parse(root);
}

}  // namespace ember::grammar
