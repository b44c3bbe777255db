// Tokenizer for chat templates. Whitespace control happens here, as in jinja2's lexer: `-`
// markers, trim_blocks (drop the newline after a block or comment tag) and lstrip_blocks (drop
// the indentation before one) all edit the data tokens around the tags.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ember::jinja {

enum class TokenType {
    Data,           // literal template text
    VariableBegin,  // {{
    VariableEnd,    // }}
    BlockBegin,     // {%
    BlockEnd,       // %}
    Name,
    String,  // text holds the decoded value
    Integer,
    Float,
    Operator,  // text holds the operator, e.g. "//" or "("
    Eof,
};

struct Token {
    TokenType type = TokenType::Eof;
    std::string text;
    std::int64_t int_value = 0;
    double float_value = 0.0;
    int line = 1;
};

struct LexerOptions {
    bool trim_blocks = true;
    bool lstrip_blocks = true;
    bool keep_trailing_newline = false;
};

// Throws TemplateError (Kind::Syntax) on malformed input. The last token is Eof.
std::vector<Token> tokenize(std::string_view source, const LexerOptions& options = {});

// A token as jinja2's error messages name it: "end of print statement", "integer", or the
// name / operator itself.
std::string describe_token(const Token& token);

}  // namespace ember::jinja
