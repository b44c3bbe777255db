// Text on its way to a terminal. Conversations hold whatever a user typed or pasted, a model
// produced (byte tokens can make any byte) or a shared database carried; written raw, an
// escape sequence in that text would drive the terminal: clear the screen, change the window
// title, write the clipboard (OSC 52). Every place that shows stored, model or user text on a
// terminal passes it through here, so such text is seen, never obeyed.
//
// On a terminal, text passes as it is when it is valid UTF-8 without control characters or
// invisible format characters; a newline and a tab pass too. Everything else becomes a
// visible stand-in:
//   C0 controls U+0000..U+001F (not '\n', '\t')  -> the Control Pictures U+2400..U+241F
//                                                   (ESC -> "␛", BEL -> "␇", CR -> "␍")
//   DEL U+007F                                   -> "␡" (U+2421)
//   C1 controls U+0080..U+009F (CSI is U+009B)   -> "<U+0080>".."<U+009F>"
//   invisible format characters: the bidi       -> "<U+202E>" and so on
//   controls U+061C, U+200E, U+200F, U+202A..
//   U+202E, U+2066..U+2069 (they can reorder a
//   line), and the zero-width U+200B, U+2060,
//   U+FEFF (ZWJ/ZWNJ pass: emoji and scripts
//   need them)
//   an ill-formed UTF-8 sequence (a lone 0x9B,   -> one U+FFFD per maximal ill-formed part,
//   overlong forms, surrogates, past U+10FFFF)      as Unicode's conversion guideline says
// Files and pipes get the exact bytes: callers decide with is_terminal() on the actual stream.
#pragma once

#include <cstddef>
#include <cstdio>
#include <string>
#include <string_view>

namespace ember::ui {

// One step through text: `length` bytes from where it starts, and what a terminal shows for
// them. An empty `stand_in` means the bytes show as they are.
struct TerminalPiece {
    size_t length = 0;
    std::string_view stand_in;
    // The bytes are the start of a valid UTF-8 sequence that the text cuts off (only at its
    // end); a stream waits for the rest before deciding.
    bool truncated = false;
};

// The piece of `text` starting at `offset` (< text.size()). A run of plain bytes (ASCII
// without controls, '\n', '\t', valid multi-byte sequences that are neither C1 nor flagged
// format characters) is one piece.
TerminalPiece terminal_piece_at(std::string_view text, size_t offset);

// Calls `visit(std::string_view piece, bool replaced)` for the text a terminal should show:
// plain runs with replaced == false, each stand-in with replaced == true.
template <class Visit>
void for_each_terminal_piece(std::string_view text, Visit&& visit) {
    size_t offset = 0;
    while (offset < text.size()) {
        const TerminalPiece p = terminal_piece_at(text, offset);
        if (p.stand_in.empty()) {
            visit(text.substr(offset, p.length), false);
        } else {
            visit(p.stand_in, true);
        }
        offset += p.length;
    }
}

// `text` as a terminal should show it.
std::string terminal_safe(std::string_view text);

// Streamed text (a reply arriving in pieces) made safe piece by piece. A UTF-8 sequence split
// between two pieces is held back until the rest arrives, so it shows as the character it is
// rather than as two U+FFFD.
class TerminalTextStream {
public:
    // The safe text for everything fed so far that can be decided now.
    std::string feed(std::string_view chunk);
    // What is still held back (a sequence the text ended inside of: U+FFFD); starts afresh.
    std::string finish();

private:
    std::string held_;  // 0..3 bytes: the start of a UTF-8 sequence cut off at a piece's end
};

// Whether `stream` is a terminal (isatty on its descriptor).
bool is_terminal(std::FILE* stream);

// Writes to one stream, deciding once whether it is a terminal. Untrusted text (from a user,
// a model, a file or the database) goes through text(): exact bytes to a file or a pipe, NUL
// bytes included; terminal_safe() on a terminal. The program's own labels go through raw().
class TextWriter {
public:
    explicit TextWriter(std::FILE* stream);
    bool terminal() const { return terminal_; }
    TextWriter& raw(std::string_view s);
    TextWriter& text(std::string_view s);
    // `s` as text() would write it, for callers that format it further.
    std::string shown(std::string_view s) const;

private:
    std::FILE* stream_;
    bool terminal_;
};

}  // namespace ember::ui
