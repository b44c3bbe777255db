#include "ui/io/terminal_text.h"

#include <unistd.h>

#include "engine/util/utf8.h"

namespace ember::ui {

namespace {

// The stand-ins, built once at compile time: Control Pictures for C0 (U+2400 + c, three
// bytes E2 90 80+c in UTF-8) and "<U+00XX>" for C1.
struct StandIns {
    char c0[32][3] = {};
    char c1[32][8] = {};
};

constexpr StandIns make_stand_ins() {
    StandIns s;
    const char* const hex = "0123456789ABCDEF";
    for (int c = 0; c < 32; ++c) {
        s.c0[c][0] = '\xE2';
        s.c0[c][1] = '\x90';
        s.c0[c][2] = static_cast<char>(0x80 + c);
        const int cp = 0x80 + c;
        const char text[8] = {'<', 'U', '+', '0', '0', hex[cp >> 4], hex[cp & 15], '>'};
        for (int i = 0; i < 8; ++i) s.c1[c][i] = text[i];
    }
    return s;
}

constexpr StandIns kStandIns = make_stand_ins();
constexpr std::string_view kDelete = "\u2421";       // ␡
constexpr std::string_view kReplacement = "\uFFFD";  // �

// Invisible format characters that change what a terminal shows without showing themselves:
// the bidirectional controls can reorder a line so that it reads differently from what it
// holds ("Trojan Source", CVE-2021-42574), and zero-width ones hide inside words and names.
// ZWJ (U+200D) and ZWNJ (U+200C) are left alone: emoji sequences and Persian and Indic
// writing need them, and they cannot reorder text.
struct FormatStandIn {
    unsigned code_point;
    std::string_view text;
};
constexpr FormatStandIn kFormatStandIns[] = {
    {0x061C, "<U+061C>"},  // ARABIC LETTER MARK
    {0x200B, "<U+200B>"},  // ZERO WIDTH SPACE
    {0x200E, "<U+200E>"},  // LEFT-TO-RIGHT MARK
    {0x200F, "<U+200F>"},  // RIGHT-TO-LEFT MARK
    {0x202A, "<U+202A>"},  // LEFT-TO-RIGHT EMBEDDING
    {0x202B, "<U+202B>"},  // RIGHT-TO-LEFT EMBEDDING
    {0x202C, "<U+202C>"},  // POP DIRECTIONAL FORMATTING
    {0x202D, "<U+202D>"},  // LEFT-TO-RIGHT OVERRIDE
    {0x202E, "<U+202E>"},  // RIGHT-TO-LEFT OVERRIDE
    {0x2060, "<U+2060>"},  // WORD JOINER
    {0x2066, "<U+2066>"},  // LEFT-TO-RIGHT ISOLATE
    {0x2067, "<U+2067>"},  // RIGHT-TO-LEFT ISOLATE
    {0x2068, "<U+2068>"},  // FIRST STRONG ISOLATE
    {0x2069, "<U+2069>"},  // POP DIRECTIONAL ISOLATE
    {0xFEFF, "<U+FEFF>"},  // ZERO WIDTH NO-BREAK SPACE (byte order mark)
};

// The stand-in for a flagged format character, or an empty view.
std::string_view format_stand_in(unsigned cp) {
    for (const auto& f : kFormatStandIns) {
        if (f.code_point == cp) return f.text;
    }
    return {};
}

enum class Kind { Plain, C0, Delete, C1, Format, Invalid, Truncated };

struct Decoded {
    Kind kind = Kind::Plain;
    size_t length = 1;
    unsigned value = 0;  // the byte (C0) or code point (C1, Format)
};

// One UTF-8 sequence (or one ill-formed part of one) at `offset`, as utf8_step() reads it:
// an ill-formed part is as long as the valid prefix before the bad byte.
Decoded decode_one(std::string_view text, size_t offset) {
    const auto b0 = static_cast<unsigned char>(text[offset]);
    if (b0 < 0x80) {
        if (b0 == '\n' || b0 == '\t') return {Kind::Plain, 1, b0};
        if (b0 < 0x20) return {Kind::C0, 1, b0};
        if (b0 == 0x7F) return {Kind::Delete, 1, b0};
        return {Kind::Plain, 1, b0};
    }
    const Utf8Step step = utf8_step(text.substr(offset));
    if (step.status == Utf8Status::Incomplete) return {Kind::Truncated, step.length, 0};
    if (step.status == Utf8Status::Invalid) return {Kind::Invalid, step.length, 0};
    const char32_t cp = step.code_point;
    if (cp >= 0x80 && cp < 0xA0) return {Kind::C1, 2, cp};
    // Every flagged format character is two or three bytes long (U+061C .. U+FEFF).
    if (step.length <= 3 && !format_stand_in(cp).empty()) return {Kind::Format, step.length, cp};
    return {Kind::Plain, step.length, 0};
}

}  // namespace

TerminalPiece terminal_piece_at(std::string_view text, size_t offset) {
    TerminalPiece piece;
    Decoded d = decode_one(text, offset);
    switch (d.kind) {
        case Kind::C0:
            return {1, std::string_view(kStandIns.c0[d.value], 3), false};
        case Kind::Delete:
            return {1, kDelete, false};
        case Kind::C1:
            return {2, std::string_view(kStandIns.c1[d.value - 0x80], 8), false};
        case Kind::Format:
            return {d.length, format_stand_in(d.value), false};
        case Kind::Invalid:
            return {d.length, kReplacement, false};
        case Kind::Truncated:
            return {d.length, kReplacement, true};
        case Kind::Plain:
            break;
    }
    // A run of plain sequences is one piece.
    size_t end = offset + d.length;
    while (end < text.size()) {
        d = decode_one(text, end);
        if (d.kind != Kind::Plain) break;
        end += d.length;
    }
    piece.length = end - offset;
    return piece;
}

std::string terminal_safe(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    for_each_terminal_piece(text, [&](std::string_view piece, bool) { out += piece; });
    return out;
}

std::string TerminalTextStream::feed(std::string_view chunk) {
    held_.append(chunk);
    std::string out;
    out.reserve(held_.size());
    size_t offset = 0;
    while (offset < held_.size()) {
        const TerminalPiece p = terminal_piece_at(held_, offset);
        if (p.truncated) break;  // the next chunk may complete it
        out += p.stand_in.empty() ? std::string_view(held_).substr(offset, p.length) : p.stand_in;
        offset += p.length;
    }
    held_.erase(0, offset);
    return out;
}

std::string TerminalTextStream::finish() {
    std::string out = terminal_safe(held_);
    held_.clear();
    return out;
}

bool is_terminal(std::FILE* stream) {
    return stream != nullptr && isatty(fileno(stream)) == 1;
}

TextWriter::TextWriter(std::FILE* stream) : stream_(stream), terminal_(is_terminal(stream)) {}

TextWriter& TextWriter::raw(std::string_view s) {
    std::fwrite(s.data(), 1, s.size(), stream_);
    return *this;
}

TextWriter& TextWriter::text(std::string_view s) {
    if (!terminal_) return raw(s);
    for_each_terminal_piece(s, [&](std::string_view piece, bool) { raw(piece); });
    return *this;
}

std::string TextWriter::shown(std::string_view s) const {
    return terminal_ ? terminal_safe(s) : std::string(s);
}

}  // namespace ember::ui
