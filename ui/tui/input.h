// The input box as data: the text being typed (possibly several lines), the cursor, editing
// commands, the history of sent prompts and Tab completion. No curses: the screen asks for
// the rows and the cursor position at a given width.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace ember::ui::tui {

class InputEditor {
public:
    const std::string& text() const { return text_; }
    size_t cursor() const { return cursor_; }
    bool empty() const { return text_.empty(); }
    // Replaces the text; the cursor goes to its end.
    void set_text(std::string text);
    // Returns the text and empties the box (history browsing ends).
    std::string take();

    // Inserts at the cursor. Carriage returns become newlines (a pasted CRLF is one line
    // break), tabs become four spaces and other control characters are dropped.
    void insert(std::string_view text);
    void backspace();
    void delete_forward();
    void left();
    void right();
    void word_left();
    void word_right();
    void line_start();          // Home, Ctrl-A: start of the cursor's line
    void line_end();            // End, Ctrl-E
    void kill_to_line_end();    // Ctrl-K (at a line's end: joins the next line)
    void kill_to_line_start();  // Ctrl-U
    void kill_word_back();      // Ctrl-W, Alt-Backspace
    void kill_word_forward();   // Alt-D
    // Up and Down move between the lines of a multi-line text; from the first line Up (and
    // from the last line Down) browses the history instead. Return whether anything moved.
    bool up();
    bool down();

    // Adds a sent prompt to the history (not twice in a row, not empty ones).
    void remember(const std::string& entry);
    const std::vector<std::string>& history() const { return history_; }

    struct Layout {
        std::vector<std::string> rows;  // the text of each row (no newlines)
        int cursor_row = 0;
        int cursor_column = 0;
    };
    // Rows at `width` columns, breaking at any character (a box that is being typed into
    // should not reflow words under the cursor) and at every newline.
    Layout layout(int width) const;

private:
    size_t line_start_of(size_t offset) const;
    size_t line_end_of(size_t offset) const;
    int column_of(size_t offset) const;  // display column within its line
    size_t offset_at_column(size_t line_start, int column) const;
    void load_history_entry();

    std::string text_;
    size_t cursor_ = 0;
    std::vector<std::string> history_;
    size_t history_index_ = 0;  // == history_.size(): the draft being typed
    std::string draft_;
};

// Tab completion of a single-line input whose cursor is at its end.
struct Completion {
    std::string line;                     // the input after completing (unchanged: nothing to add)
    std::vector<std::string> candidates;  // more than one match: what the user can choose from
};

struct CompletionSources {
    std::vector<std::string> commands;     // "/help", "/load", ...
    std::vector<std::string> session_ids;  // for /load
    std::vector<std::string> settings;     // for /set
    std::vector<std::string> models;       // for /model
};

Completion complete_line(const std::string& line, const CompletionSources& sources);

}  // namespace ember::ui::tui
