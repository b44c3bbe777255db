// Line mode: a readline prompt for terminals where curses is not wanted (ember chat --plain)
// or cannot start (TERM=dumb). Replies stream to stdout as they are generated, after a progress
// line while a long prompt is read; Ctrl-C stops a reply or the reading (keeping what was
// generated or read) or, at the prompt, clears the line; Ctrl-D leaves.
#pragma once

#include <optional>
#include <string>

#include "ui/chat/chat_controller.h"

namespace ember::ui {

struct LineModeOptions {
    // Where input history is kept across runs; empty: in memory only.
    std::string history_path;
    // ANSI dim for thinking text and the stats line.
    bool color = false;
};

// $XDG_DATA_HOME/ember/history, else ~/.local/share/ember/history; empty when neither
// variable gives an absolute directory.
std::string default_history_path();

// Colour on stdout: a terminal, NO_COLOR unset (or empty) and TERM not "dumb".
bool stdout_wants_color();

// Assembles one input from the lines typed at the prompt:
//   a line ending in a backslash continues on the next line (the backslash is dropped);
//   a line that is exactly """ opens a block that the next """ line closes.
// A block is always a prompt, even when it starts with '/'.
class MultilineInput {
public:
    struct Complete {
        std::string text;  // lines joined with '\n'
        bool from_block = false;
    };

    // Takes one typed line; returns the input once this line completes it.
    std::optional<Complete> feed(const std::string& line);
    // Inside a continuation or a block: the prompt should say so.
    bool pending() const { return continuing_ || in_block_; }
    void reset();

private:
    std::string text_;
    bool has_text_ = false;  // text_ holds at least one line (possibly an empty one)
    bool continuing_ = false;
    bool in_block_ = false;
};

// Runs the prompt loop on the terminal until Ctrl-D, /quit, SIGTERM or SIGHUP (the reply in
// progress stops and is saved). Returns the exit status: 0, or 128 + the signal's number.
int run_line_mode(ChatController& controller, const LineModeOptions& options);

}  // namespace ember::ui
