#include "ui/tui/text.h"

#include <utf8proc.h>

#include "engine/util/utf8.h"
#include "ui/io/terminal_text.h"

namespace ember::ui::tui {

namespace {

constexpr char32_t kReplacement = 0xFFFD;  // what decode_at() gives for an invalid byte
constexpr int kTabStop = 4;

bool is_control(char32_t cp) {
    return cp < 0x20 || (cp >= 0x7F && cp < 0xA0);
}

// Hangul's conjoining medial vowels and final consonants join the syllable before them:
// terminals (glibc's wcwidth, which ncurses and tmux use) give them no column, where utf8proc
// 2.8 gives each one. Counted utf8proc's way, a line holding one was drawn a column narrower
// than measured, and a wrapped reply's row measured 101 columns of a 100-column terminal.
bool is_hangul_conjoining(char32_t cp) {
    return (cp >= 0x1160 && cp <= 0x11FF) || (cp >= 0xD7B0 && cp <= 0xD7FF);
}

int terminal_width(char32_t cp) {
    if (is_hangul_conjoining(cp)) return 0;
    return utf8proc_charwidth(static_cast<utf8proc_int32_t>(cp));
}

// Zero-width characters that attach to the cluster before them.
bool attaches_to_previous(char32_t cp) {
    if (is_control(cp)) return false;
    return terminal_width(cp) == 0;
}

}  // namespace

size_t decode_at(std::string_view text, size_t offset, char32_t& codepoint) {
    // Past the end reads as one invalid byte, as it did through utf8proc.
    const Utf8Step step = offset < text.size() ? utf8_step(text.substr(offset)) : Utf8Step{};
    if (step.status != Utf8Status::Valid) {
        codepoint = kReplacement;
        return 1;
    }
    codepoint = step.code_point;
    return step.length;
}

int codepoint_width(char32_t codepoint) {
    return terminal_width(codepoint);
}

namespace detail {

Cluster cluster_at(std::string_view text, size_t offset) {
    Cluster c;
    c.begin = offset;
    char32_t cp = 0;
    size_t at = offset + decode_at(text, offset, cp);
    if (cp == '\n') {
        c.end = at;
        return c;  // a line break never carries marks: they belong to the next line
    }
    // A stray mark is drawn on a space (see split_clusters); width 1 either way.
    c.width = attaches_to_previous(cp) ? 1 : codepoint_width(cp);
    if (c.width < 0) c.width = 1;
    while (at < text.size()) {
        char32_t next = 0;
        const size_t n = decode_at(text, at, next);
        if (!attaches_to_previous(next)) break;
        at += n;
    }
    c.end = at;
    return c;
}

}  // namespace detail

std::vector<Cluster> split_clusters(std::string_view text) {
    std::vector<Cluster> out;
    for_each_cluster(text, [&](const Cluster& c) { out.push_back(c); });
    return out;
}

int display_width(std::string_view text) {
    int width = 0;
    for_each_cluster(text, [&](const Cluster& c) { width += c.width; });
    return width;
}

Spans visible_spans(std::string_view text, Style s) {
    Spans out;
    const auto push = [&](std::string_view piece, Style piece_style) {
        if (piece.empty()) return;
        if (!out.empty() && out.back().style == piece_style) {
            out.back().text += piece;
        } else {
            out.push_back({std::string(piece), piece_style});
        }
    };
    int column = 0;  // for tab stops; reset at each newline
    for_each_terminal_piece(text, [&](std::string_view piece, bool replaced) {
        if (replaced) {
            push(piece, s | style::kControl);
            column += display_width(piece);
            return;
        }
        std::string plain;  // `piece` with its tabs expanded
        plain.reserve(piece.size());
        size_t offset = 0;
        while (offset < piece.size()) {
            char32_t cp = 0;
            const size_t n = decode_at(piece, offset, cp);
            if (cp == '\n') {
                plain += '\n';
                column = 0;
            } else if (cp == '\t') {
                const int spaces = kTabStop - column % kTabStop;
                plain.append(static_cast<size_t>(spaces), ' ');
                column += spaces;
            } else {
                plain.append(piece.substr(offset, n));
                column += std::max(0, codepoint_width(cp));
            }
            offset += n;
        }
        push(plain, s);
    });
    return out;
}

std::string sanitize(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    for (const Span& span : visible_spans(text, style::kPlain)) out += span.text;
    return out;
}

size_t previous_boundary(std::string_view text, size_t offset) {
    if (offset > text.size()) offset = text.size();
    size_t last = 0;
    size_t at = 0;
    // Clusters are only defined walking forwards; lines are short, so scan from the start of
    // the line holding `offset`.
    const size_t line_start = offset == 0 ? 0 : text.rfind('\n', offset - 1);
    at = line_start == std::string_view::npos ? 0 : line_start;
    last = at;
    while (at < offset) {
        last = at;
        at = detail::cluster_at(text, at).end;
    }
    return last;
}

size_t next_boundary(std::string_view text, size_t offset) {
    if (offset >= text.size()) return text.size();
    return detail::cluster_at(text, offset).end;
}

std::string_view fit_prefix(std::string_view text, int columns) {
    int used = 0;
    size_t end = 0;
    while (end < text.size()) {
        const Cluster c = detail::cluster_at(text, end);
        if (used + c.width > columns) break;
        used += c.width;
        end = c.end;
    }
    return text.substr(0, end);
}

}  // namespace ember::ui::tui
