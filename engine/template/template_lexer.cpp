#include "engine/template/template_lexer.h"

#include <array>
#include <cctype>
#include <cstdlib>

#include "engine/template/template.h"
#include "engine/template/template_strings.h"

namespace ember::jinja {

namespace {

[[noreturn]] void syntax_error(const std::string& message, int line) {
    throw TemplateError(TemplateError::Kind::Syntax, message, line);
}

bool is_ascii_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool is_digit(char c) {
    return c >= '0' && c <= '9';
}
bool is_name_start(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool is_name_char(char c) {
    return is_name_start(c) || is_digit(c);
}

// jinja2 joins source.splitlines() with "\n": every line break becomes "\n", and without
// keep_trailing_newline one final line break disappears.
std::string normalize_newlines(std::string_view src, bool keep_trailing_newline) {
    const std::u32string cps = utf8_decode(src);
    std::u32string out;
    out.reserve(cps.size());
    bool ended_with_break = false;
    for (std::size_t i = 0; i < cps.size(); ++i) {
        const char32_t c = cps[i];
        const bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C ||
                         c == 0x1D || c == 0x1E || c == 0x85 || c == 0x2028 || c == 0x2029;
        if (brk) {
            if (c == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') ++i;
            out.push_back('\n');
        } else {
            out.push_back(c);
        }
        ended_with_break = brk;
    }
    if (ended_with_break && !keep_trailing_newline) out.pop_back();
    return utf8_encode(out);
}

// Decodes the escapes Python's "unicode-escape" codec knows; unknown ones stay as written.
std::string decode_string_escapes(std::string_view raw, int line) {
    std::string out;
    for (std::size_t i = 0; i < raw.size(); ++i) {
        if (raw[i] != '\\' || i + 1 >= raw.size()) {
            out.push_back(raw[i]);
            continue;
        }
        const char c = raw[++i];
        auto hex_escape = [&](std::size_t digits, const char* what) {
            std::uint32_t v = 0;
            for (std::size_t k = 1; k <= digits; ++k) {
                const char h = i + k < raw.size() ? raw[i + k] : '\0';
                int d = -1;
                if (is_digit(h)) d = h - '0';
                if (h >= 'a' && h <= 'f') d = h - 'a' + 10;
                if (h >= 'A' && h <= 'F') d = h - 'A' + 10;
                if (d < 0) syntax_error(std::string("truncated ") + what + " escape", line);
                v = v * 16 + static_cast<std::uint32_t>(d);
            }
            if (v > 0x10FFFF) syntax_error("illegal Unicode character", line);
            i += digits;
            utf8_append(out, static_cast<char32_t>(v));
        };
        switch (c) {
            case '\n':
                break;  // a backslash-newline continues the line
            case '\\':
                out.push_back('\\');
                break;
            case '\'':
                out.push_back('\'');
                break;
            case '"':
                out.push_back('"');
                break;
            case 'a':
                out.push_back('\a');
                break;
            case 'b':
                out.push_back('\b');
                break;
            case 'f':
                out.push_back('\f');
                break;
            case 'n':
                out.push_back('\n');
                break;
            case 'r':
                out.push_back('\r');
                break;
            case 't':
                out.push_back('\t');
                break;
            case 'v':
                out.push_back('\v');
                break;
            case 'x':
                hex_escape(2, "\\xXX");
                break;
            case 'u':
                hex_escape(4, "\\uXXXX");
                break;
            case 'U':
                hex_escape(8, "\\UXXXXXXXX");
                break;
            case 'N':
                syntax_error("named unicode escapes (\\N{...}) are not supported", line);
            default:
                if (c >= '0' && c <= '7') {
                    std::uint32_t v = static_cast<std::uint32_t>(c - '0');
                    for (int k = 0;
                         k < 2 && i + 1 < raw.size() && raw[i + 1] >= '0' && raw[i + 1] <= '7';
                         ++k) {
                        v = v * 8 + static_cast<std::uint32_t>(raw[++i] - '0');
                    }
                    utf8_append(out, static_cast<char32_t>(v));
                } else {
                    out.push_back('\\');
                    out.push_back(c);
                }
                break;
        }
    }
    return out;
}

class Lexer {
public:
    Lexer(std::string src, const LexerOptions& options) : src_(std::move(src)), opt_(options) {}

    std::vector<Token> run() {
        while (pos_ < src_.size()) {
            const std::size_t tag = find_tag_start(pos_);
            if (tag == std::string::npos) {
                push_data(src_.substr(pos_), line_);
                advance_to(src_.size());
                break;
            }
            lex_tag(tag);
        }
        push(TokenType::Eof, "", line_);
        return std::move(tokens_);
    }

private:
    std::size_t find_tag_start(std::size_t from) const {
        for (std::size_t i = src_.find('{', from); i != std::string::npos;
             i = src_.find('{', i + 1)) {
            if (i + 1 < src_.size()) {
                const char n = src_[i + 1];
                if (n == '{' || n == '%' || n == '#') return i;
            }
        }
        return std::string::npos;
    }

    void advance_to(std::size_t p) {
        for (std::size_t i = pos_; i < p; ++i) {
            if (src_[i] == '\n') ++line_;
        }
        pos_ = p;
    }

    void push(TokenType type, std::string text, int line) {
        Token t;
        t.type = type;
        t.text = std::move(text);
        t.line = line;
        tokens_.push_back(std::move(t));
    }

    void push_data(std::string text, int line) {
        if (!text.empty()) push(TokenType::Data, std::move(text), line);
    }

    // Applies `-` and lstrip_blocks to the text in front of a tag, as jinja2 does.
    std::string strip_before(std::string text, char sign, bool is_block_like) const {
        if (sign == '-') return py_strip(text, std::nullopt, false, true);
        if (sign == '+' || !opt_.lstrip_blocks || !is_block_like) return text;
        const std::size_t nl = text.rfind('\n');
        const std::size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
        if (l_pos == 0 && !line_starting_) return text;
        const std::string_view tail = std::string_view(text).substr(l_pos);
        if (tail.empty()) return text;
        for (char32_t c : utf8_decode(tail)) {
            if (!py_isspace(c)) return text;
        }
        return text.substr(0, l_pos);
    }

    // Skips the whitespace that `-%}` / `-}}` / `-#}` remove after a tag.
    std::size_t skip_whitespace_after(std::size_t p) const {
        while (p < src_.size()) {
            const std::size_t start = p;
            const auto b = static_cast<unsigned char>(src_[p]);
            std::size_t len = b < 0x80 ? 1 : (b >= 0xF0 ? 4 : (b >= 0xE0 ? 3 : 2));
            len = std::min(len, src_.size() - p);
            const std::u32string cp = utf8_decode(std::string_view(src_).substr(start, len));
            if (cp.size() != 1 || !py_isspace(cp[0])) break;
            p += len;
        }
        return p;
    }

    void lex_tag(std::size_t tag) {
        const char kind = src_[tag + 1];
        std::size_t after = tag + 2;
        char sign = '\0';
        if (after < src_.size() && (src_[after] == '-' || src_[after] == '+')) sign = src_[after++];
        const bool block_like = kind != '{';
        push_data(strip_before(src_.substr(pos_, tag - pos_), sign, block_like), line_);
        advance_to(tag);
        if (kind == '#') {
            lex_comment(after);
        } else if (kind == '%' && try_lex_raw(after)) {
            return;
        } else {
            lex_expression_tag(kind, after);
        }
    }

    void lex_comment(std::size_t content_start) {
        std::size_t end = src_.find("#}", content_start);
        if (end == std::string::npos) syntax_error("Missing end of comment tag", line_);
        // The earliest of "-#}", "+#}" or "#}" ends the comment.
        char sign = '\0';
        if (end > content_start && (src_[end - 1] == '-' || src_[end - 1] == '+')) {
            sign = src_[end - 1];
        }
        finish_tag(end + 2, sign, true);
    }

    // Moves past a tag's closing delimiter and applies `-`, `+` or trim_blocks to what follows.
    void finish_tag(std::size_t p, char sign, bool block_like) {
        if (sign == '-') {
            p = skip_whitespace_after(p);
        } else if (sign != '+' && block_like && opt_.trim_blocks && p < src_.size() &&
                   src_[p] == '\n') {
            ++p;
        }
        line_starting_ = p > 0 && src_[p - 1] == '\n';
        advance_to(p);
    }

    // {% raw %}...{% endraw %}: the content is data, tags and all.
    bool try_lex_raw(std::size_t p) {
        while (p < src_.size() && is_ascii_space(src_[p])) ++p;
        if (src_.compare(p, 3, "raw") != 0 || (p + 3 < src_.size() && is_name_char(src_[p + 3]))) {
            return false;
        }
        p += 3;
        while (p < src_.size() && is_ascii_space(src_[p])) ++p;
        if (src_.compare(p, 3, "-%}") == 0) {
            p = skip_whitespace_after(p + 3);
        } else if (src_.compare(p, 2, "%}") == 0) {
            p += 2;
        } else {
            return false;
        }
        line_starting_ = src_[p - 1] == '\n';
        advance_to(p);
        for (std::size_t t = src_.find("{%", p); t != std::string::npos;
             t = src_.find("{%", t + 1)) {
            std::size_t q = t + 2;
            char sign = '\0';
            if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) sign = src_[q++];
            while (q < src_.size() && is_ascii_space(src_[q])) ++q;
            if (src_.compare(q, 6, "endraw") != 0) continue;
            q += 6;
            while (q < src_.size() && is_ascii_space(src_[q])) ++q;
            char end_sign = '\0';
            if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) end_sign = src_[q++];
            if (src_.compare(q, 2, "%}") != 0) continue;
            push_data(strip_before(src_.substr(pos_, t - pos_), sign, true), line_);
            advance_to(t);
            finish_tag(q + 2, end_sign, true);
            return true;
        }
        syntax_error("Missing end of raw directive", line_);
    }

    // Returns true (and consumes it) when the tag's closing delimiter starts at pos_.
    bool try_close(char kind) {
        const char* close = kind == '%' ? "%}" : "}}";
        if (src_.compare(pos_, 2, close) == 0) {
            push(kind == '%' ? TokenType::BlockEnd : TokenType::VariableEnd, "", line_);
            finish_tag(pos_ + 2, '\0', kind == '%');
            return true;
        }
        if (pos_ >= src_.size()) return false;
        const bool signed_close = src_.compare(pos_ + 1, 2, close) == 0;
        if (signed_close && (src_[pos_] == '-' || (src_[pos_] == '+' && kind == '%'))) {
            push(kind == '%' ? TokenType::BlockEnd : TokenType::VariableEnd, "", line_);
            finish_tag(pos_ + 3, src_[pos_], kind == '%');
            return true;
        }
        return false;
    }

    void lex_expression_tag(char kind, std::size_t after) {
        push(kind == '%' ? TokenType::BlockBegin : TokenType::VariableBegin, "", line_);
        advance_to(after);
        std::vector<char> balance;  // closing brackets still expected
        while (true) {
            if (balance.empty() && try_close(kind)) return;
            if (pos_ >= src_.size()) {
                syntax_error(kind == '%'
                                 ? "unexpected end of template, expected 'end of statement block'"
                                 : "unexpected end of template, expected 'end of print statement'",
                             line_);
            }
            const char c = src_[pos_];
            if (is_ascii_space(c)) {
                advance_to(pos_ + 1);
            } else if (is_digit(c)) {
                lex_number();
            } else if (is_name_start(c)) {
                std::size_t e = pos_;
                while (e < src_.size() && is_name_char(src_[e])) ++e;
                push(TokenType::Name, src_.substr(pos_, e - pos_), line_);
                advance_to(e);
            } else if (c == '\'' || c == '"') {
                lex_string(c);
            } else {
                lex_operator(balance);
            }
        }
    }

    void lex_string(char quote) {
        std::size_t e = pos_ + 1;
        while (e < src_.size() && src_[e] != quote) {
            e += src_[e] == '\\' ? 2 : 1;
        }
        if (e >= src_.size())
            syntax_error("unexpected char '" + std::string(1, quote) + "'", line_);
        Token t;
        t.type = TokenType::String;
        t.line = line_;
        t.text =
            decode_string_escapes(std::string_view(src_).substr(pos_ + 1, e - pos_ - 1), line_);
        tokens_.push_back(std::move(t));
        advance_to(e + 1);
    }

    // Digits with single underscores between them, as jinja2's number rules allow.
    std::size_t scan_digits(std::size_t p) const {
        if (p >= src_.size() || !is_digit(src_[p])) return p;
        while (p < src_.size()) {
            if (is_digit(src_[p])) {
                ++p;
            } else if (src_[p] == '_' && p + 1 < src_.size() && is_digit(src_[p + 1])) {
                ++p;
            } else {
                break;
            }
        }
        return p;
    }

    void lex_number() {
        const std::size_t start = pos_;
        Token t;
        t.line = line_;
        auto clean = [&](std::size_t b, std::size_t e) {
            std::string s;
            for (std::size_t i = b; i < e; ++i) {
                if (src_[i] != '_') s.push_back(src_[i]);
            }
            return s;
        };
        // 0x / 0o / 0b integers.
        if (src_[start] == '0' && start + 1 < src_.size()) {
            const char p = static_cast<char>(src_[start + 1] | 0x20);
            const int base = p == 'x' ? 16 : (p == 'o' ? 8 : (p == 'b' ? 2 : 0));
            if (base != 0) {
                std::size_t e = start + 2;
                while (e < src_.size() &&
                       (std::isxdigit(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) {
                    ++e;
                }
                t.type = TokenType::Integer;
                t.int_value = std::strtoll(clean(start + 2, e).c_str(), nullptr, base);
                tokens_.push_back(std::move(t));
                advance_to(e);
                return;
            }
        }
        std::size_t e = scan_digits(start);
        bool is_float = false;
        const bool after_dot = start > 0 && src_[start - 1] == '.';  // "x.0" is an item access
        if (!after_dot) {
            std::size_t f = e;
            if (f + 1 < src_.size() && src_[f] == '.' && is_digit(src_[f + 1])) {
                f = scan_digits(f + 1);
                is_float = true;
            }
            if (f < src_.size() && (src_[f] == 'e' || src_[f] == 'E')) {
                std::size_t g = f + 1;
                if (g < src_.size() && (src_[g] == '+' || src_[g] == '-')) ++g;
                const std::size_t h = scan_digits(g);
                if (h > g) {
                    f = h;
                    is_float = true;
                }
            }
            if (is_float) e = f;
        }
        const std::string text = clean(start, e);
        if (is_float) {
            t.type = TokenType::Float;
            t.float_value = std::strtod(text.c_str(), nullptr);
        } else {
            t.type = TokenType::Integer;
            t.int_value = std::strtoll(text.c_str(), nullptr, 10);
        }
        tokens_.push_back(std::move(t));
        advance_to(e);
    }

    void lex_operator(std::vector<char>& balance) {
        static constexpr std::array<const char*, 6> kTwo = {"//", "**", "==", "!=", ">=", "<="};
        for (const char* op : kTwo) {
            if (src_.compare(pos_, 2, op) == 0) {
                push(TokenType::Operator, op, line_);
                advance_to(pos_ + 2);
                return;
            }
        }
        const char c = src_[pos_];
        static constexpr std::string_view kOne = "+-/*%~[](){}><=.:|,;";
        if (kOne.find(c) == std::string_view::npos) {
            syntax_error("unexpected char '" + std::string(1, c) + "' at " + std::to_string(pos_),
                         line_);
        }
        if (c == '(' || c == '[' || c == '{') {
            balance.push_back(c == '(' ? ')' : (c == '[' ? ']' : '}'));
        } else if (c == ')' || c == ']' || c == '}') {
            if (balance.empty()) syntax_error("unexpected '" + std::string(1, c) + "'", line_);
            if (balance.back() != c) {
                syntax_error("unexpected '" + std::string(1, c) + "', expected '" +
                                 std::string(1, balance.back()) + "'",
                             line_);
            }
            balance.pop_back();
        }
        push(TokenType::Operator, std::string(1, c), line_);
        advance_to(pos_ + 1);
    }

    std::string src_;
    LexerOptions opt_;
    std::size_t pos_ = 0;
    int line_ = 1;
    // Whether the previous tag's match ended with a newline: lstrip_blocks then also strips
    // indentation at the very start of the following text.
    bool line_starting_ = true;
    std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source, const LexerOptions& options) {
    Lexer lexer(normalize_newlines(source, options.keep_trailing_newline), options);
    return lexer.run();
}

std::string describe_token(const Token& token) {
    switch (token.type) {
        case TokenType::Data:
            return "template data";
        case TokenType::VariableBegin:
            return "begin of print statement";
        case TokenType::VariableEnd:
            return "end of print statement";
        case TokenType::BlockBegin:
            return "begin of statement block";
        case TokenType::BlockEnd:
            return "end of statement block";
        case TokenType::Name:
            return token.text;
        case TokenType::String:
            return "string";
        case TokenType::Integer:
            return "integer";
        case TokenType::Float:
            return "float";
        case TokenType::Operator:
            return token.text;
        case TokenType::Eof:
            return "end of template";
    }
    return "token";
}

}  // namespace ember::jinja
