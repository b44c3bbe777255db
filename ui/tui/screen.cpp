#include "ui/tui/screen.h"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cwchar>

#ifndef NCURSES_WIDECHAR
#define NCURSES_WIDECHAR 1
#endif
#include <curses.h>

#include "ui/io/terminal_text.h"
#include "ui/tui/text.h"

namespace ember::ui::tui {

namespace {

// Mouse wheel reports (X10 button tracking, SGR encoding), bracketed paste, and xterm's
// modifyOtherKeys so Shift-Enter can be told from Enter where the terminal supports it.
const char* const kModesOn = "\x1b[?1000h\x1b[?1006h\x1b[?2004h\x1b[>4;1m";
const char* const kModesOff = "\x1b[>4;0m\x1b[?2004l\x1b[?1006l\x1b[?1000l";

enum Pair : short { kRed = 1, kGreen, kYellow, kBlue, kMagenta, kCyan };

SignalFlags g_signals;

void wake() {
    const int fd = g_signals.wake_fd.load();
    if (fd >= 0) {
        const char byte = 1;
        // A full pipe already holds a wake-up.
        [[maybe_unused]] const ssize_t n = write(fd, &byte, 1);
    }
}

extern "C" void on_resize_signal(int) {
    const int saved = errno;
    g_signals.resized.store(true);
    wake();
    errno = saved;
}

extern "C" void on_terminate_signal(int signal_number) {
    const int saved = errno;
    g_signals.terminate_signal.store(signal_number);
    wake();
    errno = saved;
}

void write_all(int fd, const char* text, size_t left) {
    while (left > 0) {
        const ssize_t n = write(fd, text, left);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return;
        text += n;
        left -= static_cast<size_t>(n);
    }
}

void write_all(int fd, const char* text) {
    write_all(fd, text, std::strlen(text));
}

}  // namespace

SignalFlags& signal_flags() {
    return g_signals;
}

std::unique_ptr<Screen> Screen::start(bool color, std::string& why) {
    std::unique_ptr<Screen> screen(new Screen());
    // Installed before curses starts so that curses keeps ours: it sets its own handlers for
    // SIGINT, SIGTERM and SIGWINCH only where the default one is in place.
    screen->install_signal_handlers();
    SCREEN* s = newterm(nullptr, stdout, stdin);
    if (s == nullptr) {
        why = "curses cannot drive this terminal (TERM=" +
              std::string(std::getenv("TERM") ? std::getenv("TERM") : "") + ")";
        screen->restore();
        return nullptr;
    }
    screen->curses_screen_ = s;
    screen->active_ = true;
    raw();  // Ctrl-C and Ctrl-Z arrive as keys; signals come only from outside
    noecho();
    nonl();
    keypad(stdscr, FALSE);  // keys are decoded from the raw bytes (KeyDecoder)
    typeahead(-1);          // never cut a frame short because input is waiting
    leaveok(stdscr, FALSE);
    if (color && has_colors() && start_color() == OK) {
        const short background = use_default_colors() == OK ? -1 : COLOR_BLACK;
        init_pair(kRed, COLOR_RED, background);
        init_pair(kGreen, COLOR_GREEN, background);
        init_pair(kYellow, COLOR_YELLOW, background);
        init_pair(kBlue, COLOR_BLUE, background);
        init_pair(kMagenta, COLOR_MAGENTA, background);
        init_pair(kCyan, COLOR_CYAN, background);
        screen->color_ = true;
    }
    screen->update_size();
    refresh();
    std::fflush(stdout);
    write_all(STDOUT_FILENO, kModesOn);
    screen->capture_stderr();
    return screen;
}

Screen::~Screen() {
    restore();
}

void Screen::install_signal_handlers() {
    struct sigaction action {};
    sigemptyset(&action.sa_mask);
    action.sa_flags = 0;  // no SA_RESTART: poll() returns at once with EINTR
    for (int sig : {SIGWINCH, SIGTERM, SIGINT, SIGHUP}) {
        action.sa_handler = sig == SIGWINCH ? on_resize_signal : on_terminate_signal;
        struct sigaction previous {};
        sigaction(sig, &action, &previous);
        previous_handlers_.emplace_back(sig, previous);
    }
}

void Screen::capture_stderr() {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return;
    saved_stderr_ = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
    if (saved_stderr_ < 0 || dup2(fds[1], STDERR_FILENO) < 0) {
        close(fds[0]);
        close(fds[1]);
        if (saved_stderr_ >= 0) close(saved_stderr_);
        saved_stderr_ = -1;
        return;
    }
    close(fds[1]);
    fcntl(fds[0], F_SETFL, O_NONBLOCK);
    stderr_read_ = fds[0];
}

std::vector<std::string> Screen::read_stderr() {
    std::vector<std::string> lines;
    if (stderr_read_ < 0) return lines;
    char buffer[4096];
    for (;;) {
        const ssize_t n = read(stderr_read_, buffer, sizeof buffer);
        if (n <= 0) break;
        stderr_partial_.append(buffer, static_cast<size_t>(n));
    }
    size_t nl;
    while ((nl = stderr_partial_.find('\n')) != std::string::npos) {
        std::string line = stderr_partial_.substr(0, nl);
        stderr_partial_.erase(0, nl + 1);
        if (line.empty()) continue;
        stderr_lines_.push_back(line);
        lines.push_back(std::move(line));
    }
    return lines;
}

void Screen::restore() {
    if (active_) {
        active_ = false;
        std::fflush(stdout);
        write_all(STDOUT_FILENO, kModesOff);
        curs_set(1);
        endwin();
        delscreen(static_cast<SCREEN*>(curses_screen_));
        curses_screen_ = nullptr;
        std::fflush(stdout);
    }
    if (saved_stderr_ >= 0) {
        read_stderr();
        if (!stderr_partial_.empty()) stderr_lines_.push_back(stderr_partial_);
        stderr_partial_.clear();
        dup2(saved_stderr_, STDERR_FILENO);
        close(saved_stderr_);
        saved_stderr_ = -1;
        close(stderr_read_);
        stderr_read_ = -1;
        // Repeated through TextWriter: a warning may quote a title or a file's contents.
        for (const auto& line : stderr_lines_) TextWriter(stderr).text(line).raw("\n");
        stderr_lines_.clear();
    }
    for (const auto& [sig, previous] : previous_handlers_) sigaction(sig, &previous, nullptr);
    previous_handlers_.clear();
}

void Screen::update_size() {
    winsize size{};
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_row > 0 && size.ws_col > 0) {
        resize_term(size.ws_row, size.ws_col);
        // What the terminal shows after a resize is its own business (it may cut, shift or
        // reflow the old rows), so the next frame is drawn whole rather than as a difference.
        clearok(curscr, TRUE);
    }
    rows_ = LINES;
    columns_ = COLS;
}

void Screen::invalidate() {
    clearok(curscr, TRUE);
}

void Screen::suspend() {
    if (!active_) return;
    std::fflush(stdout);
    write_all(STDOUT_FILENO, kModesOff);
    curs_set(1);
    endwin();
    std::fflush(stdout);
    if (saved_stderr_ >= 0 && suspended_stderr_ < 0) {
        suspended_stderr_ = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
        dup2(saved_stderr_, STDERR_FILENO);
    }
}

void Screen::resume() {
    if (!active_) return;
    if (suspended_stderr_ >= 0) {
        dup2(suspended_stderr_, STDERR_FILENO);
        close(suspended_stderr_);
        suspended_stderr_ = -1;
    }
    refresh();  // back to curses' modes after endwin()
    write_all(STDOUT_FILENO, kModesOn);
    cursor_visible_ = true;
    update_size();
    clearok(curscr, TRUE);
}

void Screen::write_raw(const std::string& bytes) {
    std::fflush(stdout);
    write_all(STDOUT_FILENO, bytes.data(), bytes.size());
}

void Screen::begin_frame() {
    erase();
    cursor_row_ = -1;
}

unsigned long Screen::attributes(Style s) const {
    attr_t a = A_NORMAL;
    if (s & (style::kBold | style::kHeading)) a |= A_BOLD;
    if (s & style::kItalic) a |= A_ITALIC;
    if (s & (style::kUnderline | style::kLink)) a |= A_UNDERLINE;
    if (s & (style::kThinking | style::kNotice)) a |= A_DIM;
    if (s & (style::kStatus | style::kSelected | style::kControl)) a |= A_REVERSE;
    if (!color_) {
        // Without colour, weight and underline carry the distinctions colour would.
        if (s & (style::kInlineCode | style::kUser | style::kError)) a |= A_BOLD;
        if (s & style::kHeading) a |= A_UNDERLINE;
    }
    return a;
}

short Screen::color_pair(Style s) const {
    if (!color_) return 0;
    if (s & style::kError) return kRed;
    if (s & style::kStatus) return 0;
    if (s & style::kCodeBlock) return kGreen;
    if (s & style::kInlineCode) return kYellow;
    if (s & style::kHeading) return kMagenta;
    if (s & style::kUser) return kCyan;
    if (s & style::kLink) return kBlue;
    if (s & style::kMarker) return kBlue;
    return 0;
}

int Screen::draw(int row, int column, const Spans& spans, int limit, Style extra) {
    if (row < 0 || row >= rows_) return column;
    limit = std::min(limit, columns_);
    for (const auto& span : spans) {
        const Style s = span.style | extra;
        const attr_t a = static_cast<attr_t>(attributes(s));
        const short pair = color_pair(s);
        bool full = false;
        for_each_cluster(span.text, [&](const Cluster& c) {
            if (full || column + c.width > limit) {
                full = true;
                return;
            }
            wchar_t chars[CCHARW_MAX + 1] = {};
            int count = 0;
            size_t at = c.begin;
            while (at < c.end && count < CCHARW_MAX) {
                char32_t cp = 0;
                at += decode_at(span.text, at, cp);
                // Callers hand over sanitized text; should a control character slip through,
                // curses would show ESC as "^[" but C1 as a blank: neither must reach here.
                if (cp < 0x20 || (cp >= 0x7F && cp < 0xA0)) cp = 0xFFFD;
                // A mark with nothing to sit on is drawn on a space.
                if (count == 0 && codepoint_width(cp) == 0) chars[count++] = L' ';
                if (count < CCHARW_MAX) chars[count++] = static_cast<wchar_t>(cp);
            }
            cchar_t cell;
            setcchar(&cell, chars, a, pair, nullptr);
            mvwadd_wch(stdscr, row, column, &cell);
            column += c.width;
        });
        if (full) break;
    }
    return column;
}

void Screen::fill(int row, int column, int limit, Style s) {
    if (row < 0 || row >= rows_) return;
    limit = std::min(limit, columns_);
    const attr_t a = static_cast<attr_t>(attributes(s));
    const short pair = color_pair(s);
    const wchar_t blank[2] = {L' ', 0};
    cchar_t cell;
    setcchar(&cell, blank, a, pair, nullptr);
    for (int c = column; c < limit; ++c) mvwadd_wch(stdscr, row, c, &cell);
}

void Screen::place_cursor(int row, int column) {
    cursor_row_ = row;
    cursor_column_ = column;
}

void Screen::hide_cursor() {
    cursor_row_ = -1;
}

void Screen::end_frame() {
    const bool visible = cursor_row_ >= 0;
    if (visible != cursor_visible_) {
        curs_set(visible ? 1 : 0);
        cursor_visible_ = visible;
    }
    if (visible) move(cursor_row_, std::min(cursor_column_, std::max(0, columns_ - 1)));
    wnoutrefresh(stdscr);
    doupdate();
}

int Screen::input_fd() const {
    return STDIN_FILENO;
}

}  // namespace ember::ui::tui
