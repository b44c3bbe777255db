// Display geometry of UTF-8 text: which bytes share a terminal cell group and how many columns
// they take. Widths come from utf8proc (Unicode's East Asian Width and general categories), so
// wrapping does not depend on the C library's locale tables.
//
// A "cluster" here is what the screen draws as one unit: a base character with the zero-width
// characters that follow it (combining accents, variation selectors, a zero-width joiner).
// Emoji joined by ZWJ stay separate clusters, as terminals and curses lay them out that way.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ui/tui/style.h"

namespace ember::ui::tui {

struct Cluster {
    size_t begin = 0;  // byte offsets into the text
    size_t end = 0;
    int width = 0;  // terminal columns: 0 (only for a stray mark, see below), 1 or 2
};

// Splits `text` (assumed sanitized, see below) into clusters. A zero-width mark with no base
// before it forms a cluster of its own with width 1: the screen draws it on a space.
std::vector<Cluster> split_clusters(std::string_view text);

// Calls `visit(cluster)` for each cluster without building a vector.
template <class Visit>
void for_each_cluster(std::string_view text, Visit&& visit);

// Columns `text` takes on one line.
int display_width(std::string_view text);

// Text safe to hand to the terminal: control characters (other than '\n') and invalid UTF-8
// become the visible stand-ins of ui/io/terminal_text.h ("␛", "␍", "<U+009B>", U+FFFD), a tab
// becomes spaces up to the next multiple of 4 columns. A model's reply may contain anything;
// an escape sequence must never reach the terminal.
std::string sanitize(std::string_view text);

// The same as spans: the text in `s`, each stand-in in `s | style::kControl` so the screen
// can tell it from text that merely looks like it.
Spans visible_spans(std::string_view text, Style s);

// Byte offset of the cluster boundary before / after `offset` (clamped to the text).
size_t previous_boundary(std::string_view text, size_t offset);
size_t next_boundary(std::string_view text, size_t offset);

// Decodes one code point at `offset`; returns its length in bytes (1 for an invalid byte,
// which decodes as U+FFFD).
size_t decode_at(std::string_view text, size_t offset, char32_t& codepoint);
// Columns a single code point takes (utf8proc), 0 for marks and joiners.
int codepoint_width(char32_t codepoint);

// The widest prefix of `text` that fits in `columns`, cut on a cluster boundary.
std::string_view fit_prefix(std::string_view text, int columns);

// --- implementation of the template ---

namespace detail {
// Length in bytes and width of the cluster starting at `offset`.
Cluster cluster_at(std::string_view text, size_t offset);
}  // namespace detail

template <class Visit>
void for_each_cluster(std::string_view text, Visit&& visit) {
    size_t offset = 0;
    while (offset < text.size()) {
        const Cluster c = detail::cluster_at(text, offset);
        visit(c);
        offset = c.end;
    }
}

}  // namespace ember::ui::tui
