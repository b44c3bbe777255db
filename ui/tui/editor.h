// Composing a message in the user's own editor (Ctrl-X Ctrl-E in the full-screen chat): the
// input is written to a temporary file, $VISUAL (else $EDITOR) runs on it through /bin/sh, as
// git and the shells do, and the file's text comes back. The caller gives the terminal over
// (Screen::suspend) around the call.
#pragma once

#include <optional>
#include <string>

namespace ember::ui::tui {

struct EditorOutcome {
    std::optional<std::string> text;  // the edited text; empty optional: see `error`
    std::string error;                // one line saying why nothing came back
};

// The editor command the environment names ($VISUAL, then $EDITOR); empty when neither is set.
std::string editor_command();

// Runs `command` on a temporary file holding `text` and returns what the file then holds,
// with one trailing newline (editors add it) taken off. SIGINT and SIGQUIT are ignored here
// while the editor runs (they are the editor's), as system() does.
EditorOutcome edit_text(const std::string& command, const std::string& text);

}  // namespace ember::ui::tui
