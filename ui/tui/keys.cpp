#include "ui/tui/keys.h"

#include <charconv>

#include "engine/util/utf8.h"
#include "ui/tui/text.h"

namespace ember::ui::tui {

namespace {

const std::string_view kPasteStart = "\x1b[200~";
const std::string_view kPasteEnd = "\x1b[201~";

KeyEvent key(Key k) {
    KeyEvent e;
    e.key = k;
    return e;
}

std::vector<int> parse_params(std::string_view params) {
    std::vector<int> out;
    size_t start = 0;
    while (start <= params.size()) {
        const size_t end = std::min(params.find_first_of(";:", start), params.size());
        int value = 0;
        std::from_chars(params.data() + start, params.data() + end, value);
        out.push_back(value);
        start = end + 1;
    }
    return out;
}

// xterm's modifier parameter: 1 + (shift 1, alt 2, ctrl 4).
void apply_modifier(KeyEvent& e, int modifier) {
    if (modifier < 2) return;
    const int bits = modifier - 1;
    e.shift = (bits & 1) != 0;
    e.ctrl = (bits & 4) != 0;
}

Key tilde_key(int number) {
    switch (number) {
        case 1:
        case 7:
            return Key::Home;
        case 4:
        case 8:
            return Key::End;
        case 3:
            return Key::Delete;
        case 5:
            return Key::PageUp;
        case 6:
            return Key::PageDown;
        default:
            return Key::Unknown;
    }
}

int function_number(int tilde_code) {
    switch (tilde_code) {
        case 11:
            return 1;
        case 12:
            return 2;
        case 13:
            return 3;
        case 14:
            return 4;
        case 15:
            return 5;
        case 17:
            return 6;
        case 18:
            return 7;
        case 19:
            return 8;
        case 20:
            return 9;
        case 21:
            return 10;
        case 23:
            return 11;
        case 24:
            return 12;
        default:
            return 0;
    }
}

// A key given as a code point with modifiers (kitty's CSI u, xterm's CSI 27;m;c ~).
KeyEvent code_point_key(int code, int modifier) {
    const int bits = modifier > 1 ? modifier - 1 : 0;
    const bool shift = bits & 1, alt = bits & 2, ctrl = bits & 4;
    KeyEvent e;
    if (code == 13) {
        e.key = shift || alt || ctrl ? Key::Newline : Key::Enter;
    } else if (code == 9) {
        e.key = shift ? Key::BackTab : Key::Tab;
    } else if (code == 27) {
        e.key = Key::Escape;
    } else if (code == 127 || code == 8) {
        e.key = alt ? Key::AltBackspace : Key::Backspace;
    } else if (ctrl && code >= 'a' && code <= 'z') {
        e.key = Key::Control;
        e.letter = static_cast<char>(code);
    } else if (alt && code > 32 && code < 127) {
        e.key = Key::Alt;
        e.text = std::string(1, static_cast<char>(code));
    } else if (code >= 32) {
        e.key = Key::Text;
        append_utf8(e.text, static_cast<char32_t>(code));
    }
    return e;
}

}  // namespace

void KeyDecoder::feed(std::string_view bytes, std::vector<KeyEvent>& out) {
    buffer_.append(bytes);
    for (;;) {
        if (in_paste_) {
            take_paste(out);
            if (in_paste_) return;
            continue;
        }
        if (buffer_.empty()) return;
        const size_t used = decode_one(out, false);
        if (used == 0) return;
        buffer_.erase(0, used);
    }
}

void KeyDecoder::flush(std::vector<KeyEvent>& out) {
    while (!buffer_.empty() && !in_paste_) {
        const size_t used = decode_one(out, true);
        buffer_.erase(0, used == 0 ? 1 : used);
    }
}

void KeyDecoder::take_paste(std::vector<KeyEvent>& out) {
    const size_t end = buffer_.find(kPasteEnd);
    if (end == std::string::npos) {
        // Keep a tail that could be the start of the end marker.
        const size_t keep = std::min(buffer_.size(), kPasteEnd.size() - 1);
        paste_.append(buffer_, 0, buffer_.size() - keep);
        buffer_.erase(0, buffer_.size() - keep);
        return;
    }
    paste_.append(buffer_, 0, end);
    buffer_.erase(0, end + kPasteEnd.size());
    in_paste_ = false;
    KeyEvent e = key(Key::Paste);
    e.text = std::move(paste_);
    paste_.clear();
    out.push_back(std::move(e));
}

size_t KeyDecoder::decode_one(std::vector<KeyEvent>& out, bool final) {
    const auto byte = static_cast<unsigned char>(buffer_[0]);
    if (byte == 0x1b) return decode_escape(out, final);
    if (byte == '\r') {
        out.push_back(key(Key::Enter));
    } else if (byte == '\n') {
        out.push_back(key(Key::Newline));
    } else if (byte == '\t') {
        out.push_back(key(Key::Tab));
    } else if (byte == 0x7f || byte == 0x08) {
        out.push_back(key(Key::Backspace));
    } else if (byte < 0x20) {
        KeyEvent e = key(Key::Control);
        e.letter = static_cast<char>(byte == 0 ? ' ' : byte + 0x60);
        out.push_back(e);
    } else {
        // One UTF-8 character; half of one waits for the rest (engine/util/utf8.h's rule,
        // which the rest of the text path reads with too).
        if (utf8_step(buffer_).status == Utf8Status::Incomplete && !final) return 0;
        char32_t cp = 0;
        const size_t n = decode_at(buffer_, 0, cp);
        KeyEvent e = key(Key::Text);
        append_utf8(e.text, cp);
        out.push_back(std::move(e));
        return n;
    }
    return 1;
}

size_t KeyDecoder::decode_escape(std::vector<KeyEvent>& out, bool final) {
    if (buffer_.size() < 2) {
        if (!final) return 0;
        out.push_back(key(Key::Escape));
        return 1;
    }
    const char next = buffer_[1];
    if (next == '[') {
        const size_t used = decode_csi(out);
        if (used == 0 && final) {
            out.push_back(key(Key::Escape));
            return 1;
        }
        return used;
    }
    if (next == 'O') {
        if (buffer_.size() < 3) {
            if (!final) return 0;
            KeyEvent e = key(Key::Alt);
            e.text = "O";
            out.push_back(e);
            return 2;
        }
        switch (buffer_[2]) {
            case 'A':
                out.push_back(key(Key::Up));
                break;
            case 'B':
                out.push_back(key(Key::Down));
                break;
            case 'C':
                out.push_back(key(Key::Right));
                break;
            case 'D':
                out.push_back(key(Key::Left));
                break;
            case 'H':
                out.push_back(key(Key::Home));
                break;
            case 'F':
                out.push_back(key(Key::End));
                break;
            case 'M':
                out.push_back(key(Key::Enter));
                break;  // keypad Enter
            case 'P':
            case 'Q':
            case 'R':
            case 'S': {
                KeyEvent e = key(Key::Function);
                e.number = buffer_[2] - 'P' + 1;
                out.push_back(e);
                break;
            }
            default:
                out.push_back(key(Key::Unknown));
                break;
        }
        return 3;
    }
    if (next == '\r' || next == '\n') {
        out.push_back(key(Key::Newline));
        return 2;
    }
    if (next == 0x7f || next == 0x08) {
        out.push_back(key(Key::AltBackspace));
        return 2;
    }
    if (next == 0x1b) {
        // ESC ESC: the first was the Escape key on its own.
        out.push_back(key(Key::Escape));
        return 1;
    }
    if (static_cast<unsigned char>(next) >= 0x20 && static_cast<unsigned char>(next) < 0x7f) {
        KeyEvent e = key(Key::Alt);
        e.text = std::string(1, next);
        out.push_back(e);
        return 2;
    }
    out.push_back(key(Key::Escape));
    return 1;
}

size_t KeyDecoder::decode_csi(std::vector<KeyEvent>& out) {
    // ESC [ parameters (0x30-0x3f) intermediates (0x20-0x2f) final (0x40-0x7e)
    size_t at = 2;
    if (buffer_.size() > 2 && buffer_[2] == 'M') {
        // X10 mouse report: ESC [ M button x y (one byte each, offset by 32).
        if (buffer_.size() < 6) return 0;
        const int button = static_cast<unsigned char>(buffer_[3]) - 32;
        if (button == 64) out.push_back(key(Key::WheelUp));
        if (button == 65) out.push_back(key(Key::WheelDown));
        return 6;
    }
    while (at < buffer_.size() && buffer_[at] >= 0x30 && buffer_[at] <= 0x3f) ++at;
    const size_t params_end = at;
    while (at < buffer_.size() && buffer_[at] >= 0x20 && buffer_[at] <= 0x2f) ++at;
    if (at >= buffer_.size()) return 0;
    const char final_byte = buffer_[at];
    if (final_byte < 0x40 || final_byte > 0x7e) {
        out.push_back(key(Key::Unknown));
        return at + 1;
    }
    const size_t used = at + 1;
    std::string_view params = std::string_view(buffer_).substr(2, params_end - 2);
    if (final_byte == '~' && params == "200") {
        in_paste_ = true;
        paste_.clear();
        return used;
    }
    if (!params.empty() && params[0] == '<') {
        // SGR mouse report: ESC [ < button ; x ; y (M press, m release)
        const auto values = parse_params(params.substr(1));
        if (!values.empty() && final_byte == 'M') {
            if (values[0] == 64) out.push_back(key(Key::WheelUp));
            if (values[0] == 65) out.push_back(key(Key::WheelDown));
        }
        return used;
    }
    const auto values = parse_params(params);
    const int first = values.empty() ? 0 : values[0];
    const int modifier = values.size() > 1 ? values[1] : 0;
    KeyEvent e;
    switch (final_byte) {
        case 'A':
            e.key = Key::Up;
            break;
        case 'B':
            e.key = Key::Down;
            break;
        case 'C':
            e.key = Key::Right;
            break;
        case 'D':
            e.key = Key::Left;
            break;
        case 'H':
            e.key = Key::Home;
            break;
        case 'F':
            e.key = Key::End;
            break;
        case 'Z':
            e.key = Key::BackTab;
            break;
        case 'u':
            out.push_back(code_point_key(first, modifier));
            return used;
        case '~':
            if (first == 27 && values.size() >= 3) {
                out.push_back(code_point_key(values[2], values[1]));
                return used;
            }
            e.key = tilde_key(first);
            if (e.key == Key::Unknown && function_number(first) > 0) {
                e.key = Key::Function;
                e.number = function_number(first);
            }
            break;
        default:
            e.key = Key::Unknown;
            break;
    }
    apply_modifier(e, modifier);
    out.push_back(e);
    return used;
}

}  // namespace ember::ui::tui
