// /copy: text to the system clipboard, only on the user's own command. A clipboard tool on
// PATH (wl-copy, xclip, xsel, pbcopy) takes it when one is there and succeeds; otherwise the
// terminal is asked to set its clipboard with an OSC 52 escape sequence.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace ember::ui {

// What /copy [N] picks from a reply: the whole reply (N absent) or its Nth fenced code block
// (from 1), without the fences. Empty optional and `error` set when there is no such block.
std::optional<std::string> copy_selection(const std::string& reply, const std::string& arg,
                                          std::string& error);

// The fenced code blocks of a Markdown text (``` or ~~~ fences), contents only.
std::vector<std::string> code_blocks(const std::string& markdown);

struct ClipboardResult {
    bool via_tool = false;  // a clipboard tool took it; else `osc52` must go to the terminal
    std::string tool;       // its name
    std::string osc52;      // the escape sequence to write when no tool took it
};

// Hands `text` to the first clipboard tool on PATH that takes it, or returns the OSC 52
// sequence carrying it.
ClipboardResult copy_to_clipboard(const std::string& text);

// Why an OSC 52 sequence written now would set no clipboard, when that can be known: tmux
// passes one on only with its set-clipboard option "on" (its default, "external", drops it);
// empty when nothing is known to stop it (whether the terminal takes it cannot be asked).
std::string osc52_blocker();

// ESC ] 52 ; c ; BASE64(text) BEL
std::string osc52_sequence(const std::string& text);

}  // namespace ember::ui
