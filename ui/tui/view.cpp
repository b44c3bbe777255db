// Drawing the full-screen UI: one frame at a time, from the state in app_impl.h.
#include "ui/tui/view.h"

#include <sys/stat.h>

#include <cmath>
#include <cstdio>
#include <string_view>
#include <vector>

#include "ui/io/progress.h"
#include "ui/tui/app_impl.h"
#include "ui/tui/text.h"

namespace ember::ui {

namespace tui {

namespace {

const char* const kSeparator = " │ ";

std::string format_rate(double count, double seconds) {
    if (seconds <= 0 || count <= 0) return "–";
    char buffer[32];
    const double rate = count / seconds;
    std::snprintf(buffer, sizeof buffer, rate >= 100 ? "%.0f" : "%.1f", rate);
    return buffer;
}

}  // namespace

namespace {

// One piece of the status line: its text in full and briefly (labels shortened, never the
// numbers), and when it goes as the line narrows (higher first; 0: never).
struct Piece {
    std::string full;
    std::string brief;
    int drop_rank = 0;
};

int pieces_width(const std::vector<Piece>& pieces, bool brief) {
    int width = 0;
    for (const auto& p : pieces) {
        width += display_width(" │ ") + display_width(brief ? p.brief : p.full);
    }
    return width;
}

std::string join_pieces(const std::vector<Piece>& pieces, bool brief) {
    std::string out;
    for (const auto& p : pieces) {
        out += out.empty() ? " " : kSeparator;
        out += brief ? p.brief : p.full;
    }
    return out;
}

// `name` cut to `columns` with an ellipsis.
std::string shortened(const std::string& name, int columns) {
    if (display_width(name) <= columns) return name;
    return std::string(fit_prefix(name, std::max(1, columns - 1))) + "…";
}

std::vector<Piece> status_pieces(const StatusInfo& info) {
    std::vector<Piece> pieces;
    pieces.push_back({info.model, info.model, 6});
    // A remote server does not say how large its context is.
    std::string ctx = std::to_string(info.context_used);
    if (info.context_total > 0) {
        ctx += '/';  // appended in two steps: GCC 12 warns (-Wrestrict) about "/" + string
        ctx += std::to_string(info.context_total);
    }
    // Its label goes last of all (fit_left).
    pieces.push_back({"ctx " + ctx, "ctx " + ctx, 0});
    if (info.last_turn) {
        const TurnResult& t = *info.last_turn;
        const int64_t decoded = std::max<int64_t>(0, t.stats.generated_tokens - 1);
        pieces.push_back({std::to_string(t.stats.generated_tokens) + " tok",
                          std::to_string(t.stats.generated_tokens) + " tok", 3});
        const std::string prefill =
            format_rate(static_cast<double>(t.tokens_evaluated), t.stats.prefill_seconds);
        if (!info.remote) pieces.push_back({"prefill " + prefill + " tok/s", "pp " + prefill, 4});
        const std::string decode =
            format_rate(static_cast<double>(decoded), t.stats.decode_seconds);
        pieces.push_back({"decode " + decode + " tok/s", "tg " + decode, 2});
        const SpeculationStats& spec = t.stats.speculation;
        if (spec.drafted > 0) {
            // Share of drafted tokens the model kept (n-gram speculation).
            const std::string share =
                std::to_string(static_cast<int>(spec.acceptance_rate() * 100.0 + 0.5)) + "%";
            pieces.push_back({"spec " + share, "spec " + share, 5});
        }
        if (!info.remote) {
            pieces.push_back({t.tokens_reused > 0
                                  ? "warm, " + std::to_string(t.tokens_reused) + " reused"
                                  : std::string("cold"),
                              t.tokens_reused > 0 ? "warm" : "cold", 5});
        }
    }
    if (!info.title.empty()) {
        std::string title = sanitize(info.title);
        for (char& c : title) {
            if (c == '\n') c = ' ';
        }
        pieces.push_back({title, title, 7});
    }
    return pieces;
}

// The left part within `width` columns (0: any): the title goes first, then the model's name
// is shortened, then labels, then whole pieces, least useful first; a number is never cut.
std::string fit_left(std::vector<Piece> pieces, int width) {
    if (width <= 0 || pieces_width(pieces, false) <= width) return join_pieces(pieces, false);
    const auto drop = [&](int rank) {
        std::erase_if(pieces, [&](const Piece& p) { return p.drop_rank == rank; });
    };
    drop(7);  // the title
    if (pieces_width(pieces, false) <= width) return join_pieces(pieces, false);
    for (auto& p : pieces) {
        if (p.drop_rank == 6) p.full = p.brief = shortened(p.full, 16);
    }
    if (pieces_width(pieces, false) <= width) return join_pieces(pieces, false);
    for (int rank : {5, 4, 3, 2, 6}) {
        if (pieces_width(pieces, true) <= width) break;
        drop(rank);
    }
    if (pieces_width(pieces, true) > width) {
        for (auto& p : pieces) {
            if (p.brief.starts_with("ctx ")) p.brief.erase(0, 4);
        }
    }
    return join_pieces(pieces, true);
}

}  // namespace

StatusText status_text(const StatusInfo& info) {
    StatusText out;
    if (info.scrolled_rows > 0) {
        out.right = "↓ " + std::to_string(info.scrolled_rows) + " more · End ";
    }
    if (info.busy && !info.activity.empty()) {
        char seconds[32];
        std::snprintf(seconds, sizeof seconds, "%.0fs", std::floor(info.busy_seconds));
        out.right += info.activity + " " + seconds + " ";
    } else if (info.busy && info.streamed == 0 && info.prefill.total > 0 &&
               info.prefill.done < info.prefill.total) {
        // A long prompt being read: how far, how fast, how long still; the numbers stay on a
        // narrow line, the bar and the words go first.
        const PrefillProgress& p = info.prefill;
        const std::string numbers = prefill_text(p);
        const std::string bar =
            "▕" + progress_bar(static_cast<double>(p.done) / static_cast<double>(p.total), 12) +
            "▏";
        const std::string counts = numbers.substr(0, numbers.find(" · "));  // "3,072/6,511 tok 47%"
        const std::string choices[] = {"reading prompt " + bar + " " + numbers + " ",
                                       bar + " " + numbers + " ", counts + " "};
        // The left keeps room for the model's shortened name and the context (fit_left).
        constexpr int kLeftRoom = 36;
        std::string right = choices[2];
        for (const std::string& choice : choices) {
            if (info.width <= 0 || display_width(choice) + kLeftRoom <= info.width) {
                right = choice;
                break;
            }
        }
        out.right += right;
    } else if (info.busy) {
        char seconds[32];
        std::snprintf(seconds, sizeof seconds, "%.0fs", std::floor(info.busy_seconds));
        out.right += std::string(info.thinking ? "thinking " : "replying ") +
                     std::to_string(info.streamed) + " tok " + seconds + " · Esc stops ";
        // A narrow line keeps the numbers.
        if (info.width > 0 && display_width(out.right) * 2 > info.width) {
            out.right = std::to_string(info.streamed) + " tok " + seconds + " ";
        }
    }
    const int left_width =
        info.width > 0 ? std::max(1, info.width - display_width(out.right) - 1) : 0;
    out.left = fit_left(status_pieces(info), left_width);
    return out;
}

}  // namespace tui

namespace {

std::string size_text(const std::string& path) {
    struct stat st {};
    if (path.empty() || stat(path.c_str(), &st) != 0) return {};
    const double bytes = static_cast<double>(st.st_size);
    char buffer[32];
    if (bytes >= 1024.0 * 1024 * 1024) {
        std::snprintf(buffer, sizeof buffer, "%.1f GiB", bytes / (1024.0 * 1024 * 1024));
    } else {
        std::snprintf(buffer, sizeof buffer, "%.1f MiB", bytes / (1024.0 * 1024));
    }
    return buffer;
}

tui::Spans one(std::string text, tui::Style s) {
    return {{std::move(text), s}};
}

// `text` (sanitized, one line) in rows of `width` columns, broken at spaces where it can,
// at most `max_rows` of them (the last one then ends in "…").
std::vector<std::string> wrap_message(const std::string& text, int width, size_t max_rows) {
    std::vector<std::string> rows;
    std::string_view rest = text;
    while (!rest.empty() && rows.size() < max_rows) {
        std::string_view piece = tui::fit_prefix(rest, width);
        if (piece.empty()) break;  // a wide character in a one-column row
        if (piece.size() < rest.size()) {
            const size_t space = piece.rfind(' ');
            if (space != std::string_view::npos && space > 0) piece = piece.substr(0, space);
        }
        rows.emplace_back(piece);
        rest.remove_prefix(piece.size());
        while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
    }
    if (!rest.empty() && !rows.empty()) {
        rows.back() = std::string(tui::fit_prefix(rows.back(), std::max(1, width - 1))) + "…";
    }
    return rows;
}

}  // namespace

void FullScreen::Impl::draw_loading() {
    screen->begin_frame();
    const int rows = screen->rows();
    const int cols = screen->columns();
    const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
    char elapsed[32];
    std::snprintf(elapsed, sizeof elapsed, "%.1f s", seconds);
    std::string line = "loading " + model_name;
    const std::string size = size_text(options.model_path);
    if (!size.empty()) line += " (" + size + ")";
    // A spinner, so a slow load still visibly moves.
    static const char* const kSpinner[] = {"⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"};
    line.append(" ")
        .append(kSpinner[static_cast<int>(seconds * 10) % 10])
        .append(" ")
        .append(elapsed);
    const int width = tui::display_width(line);
    screen->draw(rows / 2, std::max(0, (cols - width) / 2), one(line, tui::style::kPlain), cols);
    if (!loading_note.empty()) {
        const std::string note = tui::sanitize(loading_note);
        screen->draw(rows / 2 + 1, std::max(0, (cols - tui::display_width(note)) / 2),
                     one(note, tui::style::kNotice), cols);
    }
    if (rows > 1) {
        screen->fill(rows - 1, 0, cols, tui::style::kStatus);
        screen->draw(rows - 1, 0,
                     one(std::string(" ember · ").append(model_name).append(" · loading"),
                         tui::style::kStatus),
                     cols);
    }
    screen->hide_cursor();
    screen->end_frame();
}

void FullScreen::Impl::draw() {
    screen->begin_frame();
    const int rows = screen->rows();
    const int cols = screen->columns();
    if (rows < 1 || cols < 1) {
        screen->end_frame();
        return;
    }
    const auto layout = input.layout(std::max(1, cols - 2));
    const int most_input_rows = rows < 4 ? 1 : std::max(1, (rows - 1) / 3);
    const int input_height = std::clamp(static_cast<int>(layout.rows.size()), 1, most_input_rows);
    const int status_row = rows - input_height - 1;  // -1: no room for it
    // The message above the status line wraps (up to a few rows) rather than being cut.
    std::vector<std::string> message_rows;
    if (!message.empty() && status_row >= 2) {
        const size_t most = static_cast<size_t>(std::clamp(status_row / 3, 1, 4));
        message_rows = wrap_message(tui::sanitize(message), std::max(1, cols - 1), most);
    }
    const int message_height = static_cast<int>(message_rows.size());
    const int transcript_height = std::max(0, status_row - message_height);
    draw_transcript(0, transcript_height);
    const tui::Style message_style = message_error ? tui::style::kError : tui::style::kNotice;
    for (int i = 0; i < message_height; ++i) {
        screen->draw(status_row - message_height + i, 0,
                     one(std::string(" ").append(message_rows[i]), message_style), cols);
    }
    if (status_row >= 0) draw_status(status_row);
    draw_input(rows - input_height, input_height, layout);
    if (picker_open) {
        draw_picker(0, transcript_height);
        screen->hide_cursor();
    }
    screen->end_frame();
}

void FullScreen::Impl::draw_transcript(int top_row, int height) {
    const int width = screen->columns();
    if (height <= 0) {
        view_height = 1;
        return;
    }
    const int total = transcript.total_rows(width);
    // A new width reflows everything: keep the same part of the conversation in view.
    if (!follow && view_width > 0 && width != view_width && view_total > 0) {
        view_top = static_cast<int>(static_cast<int64_t>(view_top) * total / view_total);
    }
    const int max_top = std::max(0, total - height);
    view_top = follow ? max_top : std::clamp(view_top, 0, max_top);
    view_height = height;
    view_width = width;
    view_total = total;
    std::vector<tui::Row> shown;
    transcript.rows(width, view_top, height, shown);
    for (size_t i = 0; i < shown.size(); ++i) {
        screen->draw(top_row + static_cast<int>(i), 0, shown[i].spans, width);
    }
}

void FullScreen::Impl::draw_status(int row) {
    const int cols = screen->columns();
    tui::StatusInfo info;
    info.model = model_name;
    info.context_total = context_total;
    info.last_turn = last_turn;
    info.remote = options.model_path.empty();
    info.title = session_title();
    info.busy = job != JobKind::None && job != JobKind::Refresh;
    info.thinking = reply_thinking;
    info.activity = job_activity;
    info.streamed = streamed;
    info.prefill.total = prefill_total.load(std::memory_order_relaxed);
    info.prefill.done = prefill_done.load(std::memory_order_relaxed);
    info.prefill.seconds =
        static_cast<double>(prefill_millis.load(std::memory_order_relaxed)) / 1000.0;
    info.context_used = context_used + (info.busy ? streamed : 0);
    info.busy_seconds = std::chrono::duration<double>(Clock::now() - job_started).count();
    info.scrolled_rows = follow ? 0 : std::max(0, view_total - view_top - view_height);
    info.width = cols;
    const tui::StatusText text = tui::status_text(info);
    screen->fill(row, 0, cols, tui::style::kStatus);
    const int right_width = tui::display_width(text.right);
    const int left_limit = std::max(0, cols - right_width - 1);
    screen->draw(row, 0, one(text.left, tui::style::kStatus), left_limit);
    if (right_width < cols) {
        screen->draw(row, cols - right_width, one(text.right, tui::style::kStatus), cols);
    }
}

void FullScreen::Impl::draw_input(int first_row, int height,
                                  const tui::InputEditor::Layout& layout) {
    const int cols = screen->columns();
    // The box scrolls with the cursor once the text is taller than the box.
    const int first = std::max(0, layout.cursor_row - height + 1);
    for (int i = 0; i < height; ++i) {
        const int r = first + i;
        if (r >= static_cast<int>(layout.rows.size())) break;
        const char* prefix = r == 0 ? (editing_last ? "✎ " : "» ") : "  ";
        screen->draw(first_row + i, 0, one(prefix, tui::style::kMarker | tui::style::kBold), cols);
        screen->draw(first_row + i, 2, one(layout.rows[r], tui::style::kPlain), cols);
    }
    if (input.empty()) {
        const bool busy = job != JobKind::None;
        const std::string hint = !busy                  ? "Type a message · /help"
                                 : job_activity.empty() ? "Esc stops the reply"
                                                        : job_activity + "…";
        screen->draw(first_row, 2, one(hint, tui::style::kNotice), cols);
    }
    screen->place_cursor(first_row + layout.cursor_row - first, 2 + layout.cursor_column);
}

void FullScreen::Impl::draw_picker(int top_row, int height) {
    const int cols = screen->columns();
    if (height < 3 || cols < 10) return;
    const int width = std::min(cols - 2, 110);
    const int left = (cols - width) / 2;
    const int inner = width - 4;
    const int visible = std::max(1, std::min(height - 2, static_cast<int>(sessions.size())));
    const int box_height = visible + 2;
    const int top = top_row + std::max(0, (height - box_height) / 3);
    const tui::Style panel = tui::style::kPanel;
    auto border = [&](const std::string& l, const std::string& title, const std::string& r) {
        std::string line = l + title;
        const int used = tui::display_width(line) + tui::display_width(r);
        for (int i = used; i < width; ++i) line += "─";
        return line + r;
    };
    screen->fill(top, left, left + width, panel);
    screen->draw(top, left, one(border("┌─", " Sessions · Enter opens · Esc closes ", "┐"), panel),
                 left + width);
    const int first = std::clamp(picker_index - visible + 1, 0,
                                 std::max(0, static_cast<int>(sessions.size()) - visible));
    for (int i = 0; i < visible; ++i) {
        const int row = top + 1 + i;
        screen->fill(row, left, left + width, panel);
        screen->draw(row, left, one("│", panel), left + width);
        screen->draw(row, left + width - 1, one("│", panel), left + width);
        const int index = first + i;
        if (sessions.empty()) {
            screen->draw(row, left + 2, one("no saved conversations", tui::style::kNotice),
                         left + width - 2);
            continue;
        }
        if (index >= static_cast<int>(sessions.size())) continue;
        const SessionSummary& s = sessions[index];
        char turns[32];
        std::snprintf(turns, sizeof turns, "%3lld turns", static_cast<long long>(s.turns));
        std::string text = (s.id == session_id ? "* " : "  ") + s.id + "  " + turns + "  " +
                           s.updated + "  " + tui::sanitize(s.title);
        for (char& c : text) {
            if (c == '\n') c = ' ';
        }
        const tui::Style row_style = index == picker_index ? tui::style::kSelected : panel;
        if (index == picker_index) screen->fill(row, left + 1, left + width - 1, row_style);
        screen->draw(row, left + 2, one(text, row_style), left + 2 + inner);
    }
    screen->fill(top + box_height - 1, left, left + width, panel);
    screen->draw(top + box_height - 1, left, one(border("└", "", "┘"), panel), left + width);
}

}  // namespace ember::ui
