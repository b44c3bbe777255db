#include "engine/util/utf8.h"

namespace ember {

void append_utf8(std::string& out, char32_t cp) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp <= kMaxCodePoint) {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

Utf8Step utf8_step(std::string_view text) {
    const auto b0 = static_cast<unsigned char>(text[0]);
    if (b0 < 0x80) return {Utf8Status::Valid, 1, b0};
    size_t need = 0;
    char32_t cp = 0;
    // Bounds of the second byte, which is where Unicode's table of well-formed sequences
    // excludes overlong forms (E0, F0), surrogates (ED) and values past U+10FFFF (F4).
    unsigned char low = 0x80, high = 0xBF;
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        need = 2;
        cp = b0 & 0x1F;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
        need = 3;
        cp = b0 & 0x0F;
        if (b0 == 0xE0) low = 0xA0;
        if (b0 == 0xED) high = 0x9F;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        need = 4;
        cp = b0 & 0x07;
        if (b0 == 0xF0) low = 0x90;
        if (b0 == 0xF4) high = 0x8F;
    } else {
        return {Utf8Status::Invalid, 1, 0};  // a continuation byte, C0/C1 or F5..FF
    }
    for (size_t i = 1; i < need; ++i) {
        if (i >= text.size()) return {Utf8Status::Incomplete, i, 0};
        const auto b = static_cast<unsigned char>(text[i]);
        const bool fits = i == 1 ? (b >= low && b <= high) : (b >= 0x80 && b <= 0xBF);
        if (!fits) return {Utf8Status::Invalid, i, 0};
        cp = (cp << 6) | (b & 0x3F);
    }
    return {Utf8Status::Valid, need, cp};
}

bool is_valid_utf8(std::string_view text) {
    for (size_t i = 0; i < text.size();) {
        const Utf8Step step = utf8_step(text.substr(i));
        if (step.status != Utf8Status::Valid) return false;
        i += step.length;
    }
    return true;
}

size_t utf8_cut(std::string_view text, size_t at) {
    if (at >= text.size()) return text.size();
    while (at > 0 && (static_cast<unsigned char>(text[at]) & 0xC0) == 0x80) --at;
    return at;
}

}  // namespace ember
