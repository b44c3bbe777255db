// Terminal input bytes to key events. The terminal is read directly (not through curses'
// getch) so that the sequences curses does not know come through: bracketed paste, SGR mouse
// wheel reports, Alt-Enter (ESC CR) and the Shift-Enter encodings of modifyOtherKeys and the
// kitty keyboard protocol.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ember::ui::tui {

enum class Key {
    Text,     // printable text (one code point) in `text`
    Enter,    // sends
    Newline,  // inserts a line break: Alt-Enter, Shift-Enter, Ctrl-J
    Tab,
    BackTab,
    Backspace,
    Delete,
    Left,
    Right,
    Up,
    Down,
    Home,
    End,
    PageUp,
    PageDown,
    Escape,
    Control,  // Ctrl + the letter in `letter` ('a'..'z', also '\\', ']', '^', '_')
    Alt,      // Alt + the character in `text` (Alt-b, Alt-f, Alt-d)
    AltBackspace,
    Paste,  // bracketed paste, the pasted bytes in `text`
    WheelUp,
    WheelDown,
    Function,  // F1..F12 in `number`
    Unknown,   // a sequence this decoder does not handle (ignored)
};

struct KeyEvent {
    Key key = Key::Unknown;
    std::string text;
    char letter = 0;
    int number = 0;
    bool ctrl = false;  // for arrows, Home/End: Ctrl held (word moves, transcript jumps)
    bool shift = false;

    bool operator==(const KeyEvent&) const = default;
};

class KeyDecoder {
public:
    // Decodes as much of the bytes seen so far as forms whole events.
    void feed(std::string_view bytes, std::vector<KeyEvent>& out);
    // Bytes held back because they may start a longer sequence (a lone ESC, half a UTF-8
    // character). The caller waits briefly for more and then calls flush().
    bool pending() const { return !buffer_.empty() && !in_paste_; }
    // No more bytes came: what is held back is taken as typed (a lone ESC is Escape).
    void flush(std::vector<KeyEvent>& out);

private:
    // Decodes one event at the start of buffer_; returns the bytes used, 0 when incomplete.
    size_t decode_one(std::vector<KeyEvent>& out, bool final);
    size_t decode_escape(std::vector<KeyEvent>& out, bool final);
    size_t decode_csi(std::vector<KeyEvent>& out);
    void take_paste(std::vector<KeyEvent>& out);

    std::string buffer_;
    bool in_paste_ = false;
    std::string paste_;
};

}  // namespace ember::ui::tui
