#include "ui/tui/transcript.h"

#include <algorithm>

#include "ui/tui/text.h"

namespace ember::ui::tui {

namespace {

const char* const kUserMarker = "> ";
const char* const kToolBar = "│ ";
const char* const kThinkingBar = "┊ ";
const char* const kCollapsedMarker = "▸ ";
const char* const kExpandedMarker = "▾ ";
const char* const kRuleGlyph = "─";

int spans_width(const Spans& spans) {
    int width = 0;
    for (const auto& s : spans) width += display_width(s.text);
    return width;
}

void append_span(Spans& spans, std::string_view text, Style s) {
    if (text.empty()) return;
    if (!spans.empty() && spans.back().style == s) {
        spans.back().text += text;
    } else {
        spans.push_back({std::string(text), s});
    }
}

// A cluster of a logical line, by position in its span.
struct Piece {
    size_t span = 0;
    size_t begin = 0;
    size_t end = 0;
    int width = 0;
    bool space = false;
};

class Wrapper {
public:
    Wrapper(const LogicalLine& line, int width, std::vector<Row>& out)
        : line_(line), out_(out), preformatted_(line.preformatted) {
        prefix_width_ = spans_width(line.first_prefix);
        // A terminal too narrow for the prefix and a wide character still gets the text.
        use_prefix_ = prefix_width_ + 2 <= width;
        available_ = std::max(1, use_prefix_ ? width - prefix_width_ : width);
        for (size_t s = 0; s < line.spans.size(); ++s) {
            const std::string& text = line.spans[s].text;
            for_each_cluster(text, [&](const Cluster& c) {
                const bool space = c.end - c.begin == 1 && text[c.begin] == ' ';
                pieces_.push_back({s, c.begin, c.end, c.width, space});
            });
        }
    }

    void run() {
        const size_t n = pieces_.size();
        size_t row_start = 0;
        size_t last_break = 0;  // a row may start here; 0 (never > row_start then) is none
        int row_width = 0;
        size_t i = 0;
        while (i < n) {
            const Piece& piece = pieces_[i];
            if (row_width + piece.width > available_ && i > row_start) {
                size_t end = i;
                if (!preformatted_ && !piece.space && last_break > row_start) end = last_break;
                emit(row_start, end);
                row_start = end;
                if (!preformatted_) {
                    while (row_start < n && pieces_[row_start].space) ++row_start;
                }
                if (row_start > i) {
                    i = row_start;
                    row_width = 0;
                    last_break = 0;
                    continue;
                }
                // Re-measure what moved to the new row, then look at piece i again.
                row_width = 0;
                last_break = 0;
                for (size_t k = row_start; k < i; ++k) note(k, row_start, row_width, last_break);
                continue;
            }
            note(i, row_start, row_width, last_break);
            ++i;
        }
        emit(row_start, n);
    }

private:
    void note(size_t k, size_t row_start, int& row_width, size_t& last_break) const {
        const Piece& p = pieces_[k];
        if (!preformatted_ && p.width == 2 && k > row_start) last_break = k;
        row_width += p.width;
        if (!preformatted_ && (p.space || p.width == 2)) last_break = k + 1;
    }

    void emit(size_t begin, size_t end) {
        if (!preformatted_) {
            while (end > begin && pieces_[end - 1].space) --end;
        }
        Row row;
        if (use_prefix_) {
            for (const auto& s : rows_emitted_ == 0 ? line_.first_prefix : line_.rest_prefix) {
                append_span(row.spans, s.text, s.style);
            }
        }
        for (size_t k = begin; k < end; ++k) {
            const Piece& p = pieces_[k];
            const Span& span = line_.spans[p.span];
            append_span(row.spans, std::string_view(span.text).substr(p.begin, p.end - p.begin),
                        span.style);
        }
        out_.push_back(std::move(row));
        ++rows_emitted_;
    }

    const LogicalLine& line_;
    std::vector<Row>& out_;
    bool preformatted_;
    int prefix_width_ = 0;
    bool use_prefix_ = true;
    int available_ = 1;
    std::vector<Piece> pieces_;
    int rows_emitted_ = 0;
};

void add_rows(const std::vector<LogicalLine>& lines, int width, std::vector<Row>& out) {
    for (const auto& line : lines) wrap_line(line, width, out);
}

// Puts `first` before the first line and `rest` (as wide) before every other row.
void prefix_lines(std::vector<LogicalLine>& lines, const Span& first, const Span& rest) {
    for (size_t i = 0; i < lines.size(); ++i) {
        auto& line = lines[i];
        line.first_prefix.insert(line.first_prefix.begin(), i == 0 ? first : rest);
        line.rest_prefix.insert(line.rest_prefix.begin(), rest);
    }
}

size_t count_words(std::string_view text) {
    size_t words = 0;
    bool in_word = false;
    for (char c : text) {
        const bool space = c == ' ' || c == '\n' || c == '\t';
        if (!space && !in_word) ++words;
        in_word = !space;
    }
    return words;
}

// The last line of `text` that has something on it.
std::string_view last_line(std::string_view text) {
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
    const size_t nl = text.rfind('\n');
    return nl == std::string_view::npos ? text : text.substr(nl + 1);
}

void layout_thinking(const Entry& entry, int width, bool expanded, std::vector<Row>& out) {
    const Style dim = style::kThinking;
    const bool live = entry.streaming && entry.text.empty();
    if (!expanded) {
        // One line: while thinking, the latest of it; afterwards, how much there was.
        LogicalLine line;
        line.first_prefix.push_back({kCollapsedMarker, dim | style::kMarker});
        line.rest_prefix = line.first_prefix;
        std::string summary = live ? "thinking… "
                                   : "thought for " + std::to_string(count_words(entry.thinking)) +
                                         " words (Ctrl-T shows it)";
        const int room = width - display_width(kCollapsedMarker) - display_width(summary);
        if (live && room > 0) {
            const std::string tail = sanitize(last_line(entry.thinking));
            // The end of the line is the newest part; keep as much of it as fits.
            std::string_view shown = tail;
            while (display_width(shown) > room) {
                shown.remove_prefix(next_boundary(shown, 0));
            }
            summary += shown;
        }
        line.spans.push_back(
            {std::string(fit_prefix(sanitize(summary), std::max(1, width - 2))), dim});
        wrap_line(line, width, out);
        return;
    }
    LogicalLine header;
    header.first_prefix.push_back({kExpandedMarker, dim | style::kMarker});
    header.rest_prefix = header.first_prefix;
    header.spans.push_back({live ? "thinking…" : "thinking (Ctrl-T hides it)", dim});
    wrap_line(header, width, out);
    auto lines = render_plain(entry.thinking, dim | style::kItalic);
    while (!lines.empty() && lines.back().spans.empty()) lines.pop_back();
    prefix_lines(lines, {kThinkingBar, dim | style::kMarker}, {kThinkingBar, dim | style::kMarker});
    add_rows(lines, width, out);
}

}  // namespace

void wrap_line(const LogicalLine& line, int width, std::vector<Row>& out) {
    if (line.rule) {
        Row row;
        int prefix = 0;
        for (const auto& s : line.first_prefix) {
            append_span(row.spans, s.text, s.style);
            prefix += display_width(s.text);
        }
        std::string rule;
        for (int i = prefix; i < width; ++i) rule += kRuleGlyph;
        append_span(row.spans, rule, style::kMarker);
        out.push_back(std::move(row));
        return;
    }
    Wrapper(line, std::max(1, width), out).run();
}

std::string row_text(const Row& row) {
    std::string text;
    for (const auto& s : row.spans) text += s.text;
    return text;
}

std::vector<Row> layout_entry(const Entry& entry, int width, bool thinking_expanded) {
    std::vector<Row> rows;
    switch (entry.kind) {
        case EntryKind::User: {
            auto lines = render_markdown(entry.text, style::kUser);
            if (lines.empty()) lines.emplace_back();
            prefix_lines(lines, {kUserMarker, style::kUser | style::kMarker | style::kBold},
                         {"  ", style::kUser});
            add_rows(lines, width, rows);
            break;
        }
        case EntryKind::Assistant: {
            if (!entry.thinking.empty()) layout_thinking(entry, width, thinking_expanded, rows);
            if (!entry.text.empty()) {
                add_rows(render_markdown(entry.text), width, rows);
            } else if (entry.streaming && entry.thinking.empty()) {
                wrap_line(LogicalLine{{}, {}, {{"…", style::kNotice}}}, width, rows);
            }
            if (!entry.footer.empty())
                add_rows(render_plain(entry.footer, style::kNotice), width, rows);
            break;
        }
        case EntryKind::Notice:
            add_rows(render_plain(entry.text, style::kNotice), width, rows);
            break;
        case EntryKind::Error:
            add_rows(render_plain(entry.text, style::kError), width, rows);
            break;
        case EntryKind::Tool: {
            // A bar down the side sets tool calls and results apart from the conversation.
            auto lines = render_plain(entry.text, style::kNotice);
            while (!lines.empty() && lines.back().spans.empty()) lines.pop_back();
            prefix_lines(lines, {kToolBar, style::kNotice | style::kMarker},
                         {kToolBar, style::kNotice | style::kMarker});
            add_rows(lines, width, rows);
            break;
        }
    }
    return rows;
}

void Transcript::clear() {
    entries_.clear();
    versions_.clear();
    layouts_.clear();
}

void Transcript::add(Entry entry) {
    entries_.push_back(std::move(entry));
    versions_.push_back(1);
    layouts_.emplace_back();
}

void Transcript::pop_back() {
    if (entries_.empty()) return;
    entries_.pop_back();
    versions_.pop_back();
    layouts_.pop_back();
}

const std::vector<Row>& Transcript::layout(size_t index, int width) {
    Layout& cached = layouts_[index];
    if (cached.width != width || cached.version != versions_[index] ||
        cached.expanded != thinking_expanded_) {
        cached.rows = layout_entry(entries_[index], width, thinking_expanded_);
        cached.width = width;
        cached.version = versions_[index];
        cached.expanded = thinking_expanded_;
    }
    return cached.rows;
}

int Transcript::total_rows(int width) {
    int total = 0;
    for (size_t i = 0; i < entries_.size(); ++i) {
        total += static_cast<int>(layout(i, width).size()) + (i > 0 ? 1 : 0);
    }
    return total;
}

void Transcript::rows(int width, int first, int count, std::vector<Row>& out) {
    int at = 0;  // row index of the next row considered
    const int end = first + count;
    for (size_t i = 0; i < entries_.size() && at < end; ++i) {
        const auto& entry_rows = layout(i, width);
        const int height = static_cast<int>(entry_rows.size()) + (i > 0 ? 1 : 0);
        if (at + height <= first) {
            at += height;
            continue;
        }
        if (i > 0) {
            if (at >= first) out.emplace_back();  // the blank row between entries
            ++at;
        }
        for (const auto& row : entry_rows) {
            if (at >= end) break;
            if (at >= first) out.push_back(row);
            ++at;
        }
    }
}

}  // namespace ember::ui::tui
