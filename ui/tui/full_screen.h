// The full-screen chat interface (curses): a transcript that streams replies as they are
// generated, an input box that grows with multi-line input, a status line, and a sessions
// picker. Generation runs on a worker thread; the UI thread owns the terminal.
//
// open() takes the terminal at once, before the model is loaded, and shows the load; run()
// then drives the chat until the user leaves. The terminal is restored on every way out:
// returning, an exception (the destructor), SIGTERM, SIGINT and SIGHUP.
#pragma once

#include <memory>
#include <string>

#include "ui/chat/chat_controller.h"

namespace ember::ui {

struct FullScreenOptions {
    std::string model_path;    // named (with its size) while it loads, and in the status line
    std::string model_name;    // shown instead of model_path's file name (a remote model)
    std::string history_path;  // sent prompts (one line each) are read from and added to it
    bool color = true;         // false: attributes only (NO_COLOR)
};

// stdin and stdout are terminals and TERM names one a full-screen UI can use (set, not dumb).
bool full_screen_possible();

class FullScreen {
public:
    // Takes over the terminal and shows the model loading; nullptr when curses cannot start
    // (the caller falls back to line mode). A key that quits (Ctrl-C, Ctrl-D) or a
    // terminating signal during the load restores the terminal and ends the process the way
    // that signal would.
    static std::unique_ptr<FullScreen> open(const FullScreenOptions& options);
    ~FullScreen();
    FullScreen(const FullScreen&) = delete;
    FullScreen& operator=(const FullScreen&) = delete;

    // Runs the chat until /quit, Ctrl-D, Ctrl-C twice within a second on an empty input or a
    // terminating signal;
    // returns the exit status (128 + the signal's number after a signal).
    int run(ChatController& controller);
    // A notice added to the transcript when run() starts (what the load or the store has to
    // say; stderr is the screen's while it runs).
    void add_notice(std::string text);
    // Where the model runs ("CPU", "GPU 0"), shown after its name in the status line.
    void set_placement(const std::string& where);

    struct Impl;

private:
    explicit FullScreen(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace ember::ui
