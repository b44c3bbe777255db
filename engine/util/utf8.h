// UTF-8, written once for every layer: encoding a code point, and stepping through text one
// sequence at a time under RFC 3629's rules (no overlong forms, no surrogates, nothing past
// U+10FFFF). The tokenizer, the chat templates, the grammar engine, the terminal's text filter
// and the attachment check all read text through utf8_step(), so they agree on what is valid.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ember {

inline constexpr char32_t kMaxCodePoint = 0x10FFFF;
inline constexpr std::string_view kReplacementCharacter = "\xEF\xBF\xBD";  // U+FFFD

// Appends the UTF-8 encoding of `cp`. Surrogates (U+D800..U+DFFF) are written as their three
// bytes: the templates' surrogate escapes and Python's str hold them, and callers that must
// produce valid text refuse them first. A value past U+10FFFF is no code point and writes
// nothing.
void append_utf8(std::string& out, char32_t cp);

enum class Utf8Status { Valid, Incomplete, Invalid };

// One step through UTF-8 text.
struct Utf8Step {
    Utf8Status status = Utf8Status::Invalid;
    // Valid: the bytes of the character. Incomplete: the bytes present of a sequence that the
    // text ends inside of (more bytes could still complete it). Invalid: the maximal ill-formed
    // part (at least 1 byte) that one U+FFFD replaces, as Unicode recommends and Python's and
    // Rust's lossy decoders do.
    size_t length = 1;
    char32_t code_point = 0;  // Valid only
};

// Decodes the sequence at the start of `text` (which must not be empty).
Utf8Step utf8_step(std::string_view text);

// Whether `text` is valid UTF-8 as a whole.
bool is_valid_utf8(std::string_view text);

// Where to cut `text` to keep at most `at` bytes without splitting a character: `at` moved
// back over continuation bytes (the text's size when `at` is past it).
size_t utf8_cut(std::string_view text, size_t at);

}  // namespace ember
