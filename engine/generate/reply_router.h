// Splits a reply's text, as it streams, into a thinking model's reasoning and the answer.
//
// Thinking models write `<think> ... </think>` before the answer (or the chat template opens
// the block in the prompt, and the reply starts inside it). The router hands each piece to
// the callback with its kind, never the tags themselves, and applies the stop strings to the
// answer only. Text that might be the start of a tag or a stop string is held back until the
// next piece decides it, so nothing is shown that must later be taken back.
#pragma once

#include <string>
#include <vector>

#include "engine/generate/conversation.h"

namespace ember {

class ReplyRouter {
public:
    enum class Phase { Undecided, Thinking, Answer };

    // thinking_possible: the template knows <think> (otherwise all text is answer).
    // starts_in_thinking: the prompt ends inside an open <think> block.
    ReplyRouter(const std::vector<std::string>& stop_strings, bool thinking_possible,
                bool starts_in_thinking, const TextCallback& on_text);

    // Adds detokenized text.
    void push(const std::string& piece);
    // End of generation: flushes what was held back.
    void finish();
    // Ends an open thinking block from outside (budget or loop): `transition` is shown as the
    // last words of the thinking, and what follows is answer.
    void force_end_thinking(const std::string& transition);

    Phase phase() const { return phase_; }
    bool stopped_by_string() const { return stopped_by_string_; }
    bool cancelled() const { return cancelled_; }
    const std::string& answer() const { return answer_; }
    const std::string& thinking() const { return thinking_; }

private:
    bool step();  // one state transition; false when more text is needed
    void emit(const std::string& text, TextKind kind);
    void append_answer(const std::string& text);
    void emit_answer_upto(size_t end);

    const std::vector<std::string>& stops_;
    const TextCallback& on_text_;
    Phase phase_;
    std::string pending_;             // text not yet routed (a possible tag start)
    bool skip_leading_space_ = true;  // after a tag, whitespace before the text is dropped
    std::string answer_;
    size_t answer_emitted_ = 0;  // bytes of answer_ handed to the callback
    std::string thinking_;
    bool stopped_by_string_ = false;
    bool cancelled_ = false;
};

// True when the last `period * repeats` tokens (at least `min_span`) repeat one block of
// `period` tokens, for some period up to `max_period`: a model stuck in a loop.
bool tokens_loop(const std::vector<int32_t>& tokens, size_t max_period = 128, size_t repeats = 4,
                 size_t min_span = 32);

}  // namespace ember
