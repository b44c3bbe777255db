// The conversation as the screen shows it: entries (prompts, replies with their thinking,
// command output) laid out into rows of a given width. Pure data, no curses, so wrapping and
// layout are tested without a terminal.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ui/tui/markdown.h"
#include "ui/tui/style.h"

namespace ember::ui::tui {

// One screen row: spans whose widths add up to at most the width it was laid out for.
struct Row {
    Spans spans;
};

// Wraps `line` to `width` columns and appends the rows. Words move to the next row whole
// unless a word alone is wider than the row; wide (CJK) characters may break anywhere;
// preformatted lines keep their spaces and break at any character.
void wrap_line(const LogicalLine& line, int width, std::vector<Row>& out);

// Text of a row without styles (for tests and for finding things on screen).
std::string row_text(const Row& row);

// Tool: a tool call the model proposed, or what came of one (its result, a refusal).
enum class EntryKind { User, Assistant, Notice, Error, Tool };

struct Entry {
    EntryKind kind = EntryKind::Notice;
    std::string text;      // Markdown for User and Assistant, plain for the rest
    std::string thinking;  // Assistant: the reasoning before the answer
    std::string footer;    // Assistant: the turn's numbers
    bool streaming = false;
};

// Lays one entry out at `width`; `thinking_expanded` shows the reasoning in full rather than
// as one summary line.
std::vector<Row> layout_entry(const Entry& entry, int width, bool thinking_expanded);

class Transcript {
public:
    const std::vector<Entry>& entries() const { return entries_; }
    bool empty() const { return entries_.empty(); }
    void clear();
    void add(Entry entry);
    void pop_back();
    // Changes the entry at `index` through `change`, which must not add or remove entries.
    template <class Change>
    void update(size_t index, Change&& change) {
        change(entries_.at(index));
        ++versions_.at(index);
    }
    size_t size() const { return entries_.size(); }

    bool thinking_expanded() const { return thinking_expanded_; }
    void set_thinking_expanded(bool expanded) { thinking_expanded_ = expanded; }

    // Rows of the whole transcript at `width` (entries separated by a blank row).
    int total_rows(int width);
    // Appends rows [first, first + count) at `width` to `out` (fewer at the end).
    void rows(int width, int first, int count, std::vector<Row>& out);

private:
    struct Layout {
        int width = -1;
        uint64_t version = 0;
        bool expanded = false;
        std::vector<Row> rows;
    };
    const std::vector<Row>& layout(size_t index, int width);

    std::vector<Entry> entries_;
    std::vector<uint64_t> versions_;
    std::vector<Layout> layouts_;
    bool thinking_expanded_ = false;
};

}  // namespace ember::ui::tui
