// Pieces of the full-screen UI's look that need no terminal: the status line's text.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "engine/generate/conversation.h"

namespace ember::ui::tui {

struct StatusInfo {
    std::string model;  // file name
    int64_t context_used = 0;
    int64_t context_total = 0;
    std::optional<TurnResult> last_turn;
    std::string title;  // the conversation's, empty before it is saved
    bool busy = false;
    bool thinking = false;  // the reply is in its thinking block
    // What the busy job is when it is no reply ("loading gemma3" for /model); empty: a reply.
    std::string activity;
    int64_t streamed = 0;  // tokens of the reply being written (about)
    // The prompt being read before the reply starts (total 0: none), and how long it took.
    PrefillProgress prefill;
    double busy_seconds = 0;
    int scrolled_rows = 0;  // rows below the view when the user scrolled back; 0: follows
    // Columns the line has (0: any): names shorten and labels go before any number is cut.
    int width = 0;
    // A remote server's model: its prefill speed and reuse are not known here, so they are
    // not shown (no "cold", no "prefill –").
    bool remote = false;
};

// " llama.gguf │ ctx 530/4096 │ 16 tok │ prefill 812 tok/s │ decode 85.3 tok/s │ warm 120
// reused │ title" on the left, the state ("replying 42 tok · Esc stops") on the right.
struct StatusText {
    std::string left;
    std::string right;
};
StatusText status_text(const StatusInfo& info);

}  // namespace ember::ui::tui
