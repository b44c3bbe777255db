// Control-token text that comes from data stays text, wherever the chat template puts it.
//
// A message's content is located in the rendered prompt and tokenized as text (see
// Conversation::tokenize_prompt), so "<|im_end|>" typed by a user cannot close their turn. The
// rest of what a request brings — tool names, descriptions, parameter schemas, replayed tool-call
// arguments — is printed by the template in its own ways (tojson, indented, inside other text),
// where it cannot be found again reliably. So before rendering, each control-token text in
// those strings is replaced by a placeholder of letters and digits (which tojson and every
// string filter leave alone), and after rendering the placeholders are turned back into the
// text, their ranges marked literal for the tokenizer.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tokenizer/tokenizer.h"

namespace ember {

class ControlTextMask {
public:
    explicit ControlTextMask(const Tokenizer& tokenizer);

    // Replaces control-token text in `s` by placeholders; returns whether anything changed.
    bool mask(std::string& s);
    // The same for every string and every object key inside `j`.
    bool mask(nlohmann::ordered_json& j);
    bool used() const { return !texts_.empty(); }

    struct Restored {
        std::string text;
        std::vector<TextRange> literal;  // where the control-token texts are, in order
    };
    // `rendered` with the placeholders turned back into their text. Nothing when the template
    // changed a placeholder (upper-cased it, cut it): then it cannot be restored faithfully.
    std::optional<Restored> restore(std::string_view rendered) const;

private:
    const Tokenizer& tokenizer_;
    std::string prefix_;              // "EmberCtl" and a random nonce, letters and digits
    std::vector<std::string> texts_;  // placeholder i stands for texts_[i]
};

// Merges sorted-or-not ranges into sorted, non-overlapping ones (as EncodeOptions::literal
// wants them).
std::vector<TextRange> merge_ranges(std::vector<TextRange> ranges);

}  // namespace ember
