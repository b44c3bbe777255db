#include "ui/tui/input.h"

#include <algorithm>

#include "ui/tui/text.h"

namespace ember::ui::tui {

namespace {

bool is_space(char c) {
    return c == ' ' || c == '\n';
}

std::string common_prefix(const std::vector<std::string>& words) {
    if (words.empty()) return {};
    std::string prefix = words.front();
    for (const auto& w : words) {
        size_t n = 0;
        while (n < prefix.size() && n < w.size() && prefix[n] == w[n]) ++n;
        prefix.resize(n);
    }
    return prefix;
}

std::vector<std::string> starting_with(const std::vector<std::string>& words,
                                       const std::string& start) {
    std::vector<std::string> out;
    for (const auto& w : words) {
        if (w.starts_with(start)) out.push_back(w);
    }
    return out;
}

}  // namespace

void InputEditor::set_text(std::string text) {
    text_.clear();
    cursor_ = 0;
    insert(text);
}

std::string InputEditor::take() {
    std::string out = std::move(text_);
    text_.clear();
    cursor_ = 0;
    history_index_ = history_.size();
    draft_.clear();
    return out;
}

void InputEditor::insert(std::string_view text) {
    std::string clean;
    clean.reserve(text.size());
    for (size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (c == '\r') {
            if (i + 1 < text.size() && text[i + 1] == '\n') continue;
            clean += '\n';
        } else if (c == '\t') {
            clean += "    ";
        } else if (c == '\n' || static_cast<unsigned char>(c) >= 0x20) {
            if (c != 0x7f) clean += c;
        }
    }
    // Invalid UTF-8 would make the cursor arithmetic lie; keep only what decodes.
    std::string valid;
    size_t at = 0;
    while (at < clean.size()) {
        char32_t cp = 0;
        const size_t n = decode_at(clean, at, cp);
        if (cp == '\n' || (cp >= 0x20 && !(cp >= 0x7F && cp < 0xA0))) valid.append(clean, at, n);
        at += n;
    }
    text_.insert(cursor_, valid);
    cursor_ += valid.size();
}

void InputEditor::backspace() {
    if (cursor_ == 0) return;
    const size_t start = previous_boundary(text_, cursor_);
    text_.erase(start, cursor_ - start);
    cursor_ = start;
}

void InputEditor::delete_forward() {
    if (cursor_ >= text_.size()) return;
    text_.erase(cursor_, next_boundary(text_, cursor_) - cursor_);
}

void InputEditor::left() {
    if (cursor_ > 0) cursor_ = previous_boundary(text_, cursor_);
}

void InputEditor::right() {
    if (cursor_ < text_.size()) cursor_ = next_boundary(text_, cursor_);
}

void InputEditor::word_left() {
    while (cursor_ > 0 && is_space(text_[cursor_ - 1])) left();
    while (cursor_ > 0 && !is_space(text_[cursor_ - 1])) left();
}

void InputEditor::word_right() {
    while (cursor_ < text_.size() && is_space(text_[cursor_])) right();
    while (cursor_ < text_.size() && !is_space(text_[cursor_])) right();
}

size_t InputEditor::line_start_of(size_t offset) const {
    if (offset == 0) return 0;
    const size_t nl = text_.rfind('\n', offset - 1);
    return nl == std::string::npos ? 0 : nl + 1;
}

size_t InputEditor::line_end_of(size_t offset) const {
    const size_t nl = text_.find('\n', offset);
    return nl == std::string::npos ? text_.size() : nl;
}

void InputEditor::line_start() {
    cursor_ = line_start_of(cursor_);
}

void InputEditor::line_end() {
    cursor_ = line_end_of(cursor_);
}

void InputEditor::kill_to_line_end() {
    const size_t end = line_end_of(cursor_);
    text_.erase(cursor_, end == cursor_ && end < text_.size() ? 1 : end - cursor_);
}

void InputEditor::kill_to_line_start() {
    const size_t start = line_start_of(cursor_);
    text_.erase(start, cursor_ - start);
    cursor_ = start;
}

void InputEditor::kill_word_back() {
    const size_t end = cursor_;
    word_left();
    text_.erase(cursor_, end - cursor_);
}

void InputEditor::kill_word_forward() {
    const size_t start = cursor_;
    word_right();
    text_.erase(start, cursor_ - start);
    cursor_ = start;
}

int InputEditor::column_of(size_t offset) const {
    const size_t start = line_start_of(offset);
    return display_width(std::string_view(text_).substr(start, offset - start));
}

size_t InputEditor::offset_at_column(size_t line_start, int column) const {
    const size_t end = line_end_of(line_start);
    size_t at = line_start;
    int used = 0;
    while (at < end) {
        const size_t next = next_boundary(text_, at);
        const int w = display_width(std::string_view(text_).substr(at, next - at));
        if (used + w > column) break;
        used += w;
        at = next;
    }
    return at;
}

void InputEditor::load_history_entry() {
    text_ = history_index_ < history_.size() ? history_[history_index_] : draft_;
    cursor_ = text_.size();
}

bool InputEditor::up() {
    const size_t start = line_start_of(cursor_);
    if (start > 0) {
        const int column = column_of(cursor_);
        cursor_ = offset_at_column(line_start_of(start - 1), column);
        return true;
    }
    if (history_index_ == 0) return false;
    if (history_index_ == history_.size()) draft_ = text_;
    --history_index_;
    load_history_entry();
    return true;
}

bool InputEditor::down() {
    const size_t end = line_end_of(cursor_);
    if (end < text_.size()) {
        const int column = column_of(cursor_);
        cursor_ = offset_at_column(end + 1, column);
        return true;
    }
    if (history_index_ >= history_.size()) return false;
    ++history_index_;
    load_history_entry();
    return true;
}

void InputEditor::remember(const std::string& entry) {
    if (entry.find_first_not_of(" \n") == std::string::npos) return;
    if (history_.empty() || history_.back() != entry) history_.push_back(entry);
    history_index_ = history_.size();
    draft_.clear();
}

InputEditor::Layout InputEditor::layout(int width) const {
    width = std::max(1, width);
    Layout out;
    out.rows.emplace_back();
    int column = 0;
    size_t at = 0;
    const auto place_cursor = [&] {
        out.cursor_row = static_cast<int>(out.rows.size()) - 1;
        out.cursor_column = column;
    };
    while (at < text_.size()) {
        if (at == cursor_) place_cursor();
        if (text_[at] == '\n') {
            out.rows.emplace_back();
            column = 0;
            ++at;
            continue;
        }
        const size_t next = next_boundary(text_, at);
        const std::string_view cluster = std::string_view(text_).substr(at, next - at);
        const int w = display_width(cluster);
        if (column + w > width && column > 0) {
            out.rows.emplace_back();
            column = 0;
            if (at == cursor_) place_cursor();
        }
        out.rows.back() += cluster;
        column += w;
        at = next;
    }
    if (cursor_ >= text_.size()) {
        if (column >= width) {
            out.rows.emplace_back();
            column = 0;
        }
        place_cursor();
    }
    return out;
}

Completion complete_line(const std::string& line, const CompletionSources& sources) {
    Completion out{line, {}};
    if (line.empty() || line[0] != '/' || line.find('\n') != std::string::npos) return out;
    const size_t space = line.find(' ');
    std::string head;  // kept as typed
    std::string word;  // being completed
    std::vector<std::string> choices;
    if (space == std::string::npos) {
        word = line;
        choices = sources.commands;
    } else {
        const std::string command = line.substr(0, space);
        head = line.substr(0, space + 1);
        word = line.substr(space + 1);
        if (word.find(' ') != std::string::npos) return out;
        if (command == "/load") {
            choices = sources.session_ids;
        } else if (command == "/set") {
            choices = sources.settings;
        } else if (command == "/model") {
            choices = sources.models;
        } else {
            return out;
        }
    }
    const auto matches = starting_with(choices, word);
    if (matches.empty()) return out;
    if (matches.size() == 1) {
        out.line = head + matches.front() + " ";
        return out;
    }
    out.line = head + common_prefix(matches);  // every match starts with `word`
    out.candidates = matches;
    return out;
}

}  // namespace ember::ui::tui
