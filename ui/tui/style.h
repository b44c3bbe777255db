// How a piece of transcript or input text should look, as bits the screen maps to curses
// attributes and colours (or to attributes alone on a monochrome terminal or with NO_COLOR).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ember::ui::tui {

using Style = uint32_t;

namespace style {
inline constexpr Style kPlain = 0;
inline constexpr Style kBold = 1u << 0;
inline constexpr Style kItalic = 1u << 1;
inline constexpr Style kUnderline = 1u << 2;
inline constexpr Style kStrike = 1u << 3;
inline constexpr Style kInlineCode = 1u << 4;
inline constexpr Style kCodeBlock = 1u << 5;
inline constexpr Style kHeading = 1u << 6;
inline constexpr Style kQuote = 1u << 7;
inline constexpr Style kLink = 1u << 8;
inline constexpr Style kMarker = 1u << 9;  // list bullets, quote bars, role prefixes
inline constexpr Style kUser = 1u << 10;
inline constexpr Style kThinking = 1u << 11;
inline constexpr Style kNotice = 1u << 12;  // command output, turn footers
inline constexpr Style kError = 1u << 13;
inline constexpr Style kStatus = 1u << 14;    // the status line
inline constexpr Style kSelected = 1u << 15;  // the chosen row of a picker
inline constexpr Style kPanel = 1u << 16;     // picker borders and text
inline constexpr Style kControl = 1u << 17;   // a control character's visible stand-in
}  // namespace style

// A run of text in one style.
struct Span {
    std::string text;
    Style style = style::kPlain;
};

using Spans = std::vector<Span>;

}  // namespace ember::ui::tui
