// Markdown (CommonMark via md4c, plus strikethrough) to styled lines for the transcript:
// headings, emphasis, inline code, fenced and indented code blocks, lists, quotes and rules
// come out as styles and prefixes, never as the markup characters themselves.
//
// A chat reply is Markdown written for people reading it line by line, so a single newline
// inside a paragraph (a soft break) stays a line break here rather than becoming a space.
// Unfinished markup in a reply still streaming (an open ``` fence, a lone **) renders the way
// CommonMark reads it at that moment and settles as more text arrives.
#pragma once

#include <string_view>
#include <vector>

#include "ui/tui/style.h"

namespace ember::ui::tui {

// One line of text before wrapping to the screen's width.
struct LogicalLine {
    Spans first_prefix;  // before the line's first row: list bullets, quote bars
    Spans rest_prefix;   // before each row the line wraps onto (as wide as first_prefix)
    Spans spans;
    bool preformatted = false;  // code: spaces kept, wrapped at any character
    bool rule = false;          // a horizontal rule across the width
};

// `base` is added to every span (e.g. style::kUser for the user's own messages).
std::vector<LogicalLine> render_markdown(std::string_view text, Style base = style::kPlain);

// Text as lines without Markdown: each '\n' ends a line, spaces are kept (command output,
// thinking). Every span gets `base`.
std::vector<LogicalLine> render_plain(std::string_view text, Style base);

}  // namespace ember::ui::tui
