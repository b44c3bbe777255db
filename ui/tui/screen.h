// The terminal while the full-screen UI runs: curses for output, the raw input descriptor,
// terminal modes (mouse wheel reports, bracketed paste), stderr captured so stray writes do
// not scribble over the screen, and the signal flags. Everything is undone by restore(),
// which the destructor calls: every way out of the UI, exceptions included, passes through it.
#pragma once

#include <atomic>
#include <csignal>
#include <memory>
#include <string>
#include <vector>

#include "ui/tui/style.h"

namespace ember::ui::tui {

// Set by the signal handlers (SIGWINCH, SIGTERM, SIGINT, SIGHUP) and read by the UI's loop.
// Signal handlers take no user data, so this is process-wide: the one piece of global mutable
// state of the full-screen UI. Only lock-free atomics and write() on a pipe are touched in a
// handler, both async-signal-safe.
struct SignalFlags {
    std::atomic<bool> resized{false};
    std::atomic<int> terminate_signal{0};  // the signal that asked us to leave, 0: none
    std::atomic<int> wake_fd{-1};          // written to wake the UI's poll()
};
SignalFlags& signal_flags();

class Screen {
public:
    // Takes over the terminal on stdin/stdout. Returns nullptr (the terminal untouched) when
    // curses cannot drive it; `why` then says why.
    static std::unique_ptr<Screen> start(bool color, std::string& why);
    ~Screen();
    Screen(const Screen&) = delete;
    Screen& operator=(const Screen&) = delete;

    // Gives the terminal back: modes off, curses ended, stderr restored, then what was
    // written to stderr meanwhile repeated there. Safe to call twice.
    void restore();

    int rows() const { return rows_; }
    int columns() const { return columns_; }
    // Reads the window size from the terminal (after SIGWINCH) and tells curses.
    void update_size();
    // Draws the next frame from scratch (after Ctrl-L).
    void invalidate();
    // Hands the terminal to another program for a while (the user's editor): curses and our
    // modes off, stderr back on the terminal. resume() takes it back and redraws whole.
    void suspend();
    void resume();
    // Writes raw bytes to the terminal between frames (an OSC 52 clipboard sequence).
    void write_raw(const std::string& bytes);

    // A frame: begin, draw, end; end writes it to the terminal in one update.
    void begin_frame();
    // Draws `spans` on `row` from `column`, clipped at `limit` (exclusive); returns the column
    // after the last cell drawn.
    int draw(int row, int column, const Spans& spans, int limit, Style extra = style::kPlain);
    // Paints `row` from `column` to `limit` with blanks in `s` (a status bar's background).
    void fill(int row, int column, int limit, Style s);
    void place_cursor(int row, int column);
    void hide_cursor();
    void end_frame();

    int input_fd() const;
    // The read end of the captured stderr (non-blocking); drain it with read_stderr().
    int stderr_fd() const { return stderr_read_; }
    // New complete lines written to stderr since the last call.
    std::vector<std::string> read_stderr();

private:
    Screen() = default;
    void install_signal_handlers();
    void capture_stderr();
    unsigned long attributes(Style s) const;
    short color_pair(Style s) const;

    bool active_ = false;
    bool color_ = false;
    int rows_ = 0;
    int columns_ = 0;
    bool cursor_visible_ = true;
    int cursor_row_ = -1;
    int cursor_column_ = 0;
    void* curses_screen_ = nullptr;  // SCREEN*, kept opaque to keep curses out of this header
    int saved_stderr_ = -1;
    int suspended_stderr_ = -1;  // the capture pipe's write end while suspended
    int stderr_read_ = -1;
    std::string stderr_partial_;
    std::vector<std::string> stderr_lines_;  // repeated on the real stderr at restore
    std::vector<std::pair<int, struct sigaction>> previous_handlers_;
};

}  // namespace ember::ui::tui
