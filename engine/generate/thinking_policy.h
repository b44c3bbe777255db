// How long a reply may think: the budget of tokens its thinking block may spend and the check
// for a block that goes round in circles. The reply's generation counts each thinking token
// here and, when the policy says the block must end, closes it for the model with the
// transition below and lets it answer.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/generate/conversation.h"

namespace ember {

class ThinkingPolicy {
public:
    // `budget` < 0 counts as 0 (no thinking at all).
    ThinkingPolicy(int64_t budget, bool loop_check);

    // Whether the reply may think at all; without, a block the prompt opens is closed before
    // the model starts.
    bool allows_thinking() const { return budget_ > 0; }

    // A token of the thinking block (the one that closes it included).
    void count(int32_t id) { thinking_ids_.push_back(id); }
    int64_t tokens_counted() const { return static_cast<int64_t>(thinking_ids_.size()); }

    // With the block still open after the last count(): whether it must end now (its budget is
    // spent, or it loops); the reason is then forced().
    bool must_end_now();
    // Why the policy ended the block (None: it did not).
    ThinkingEnd forced() const { return forced_; }

    // The words that close a thinking block cut short, before its closing tag: they tell the
    // model to answer from what it has.
    static constexpr const char* kTransition =
        "\n\nI have thought enough; I will answer now based on the thinking above.\n";

private:
    int64_t budget_;
    bool loop_check_;
    std::vector<int32_t> thinking_ids_;  // for the loop check
    ThinkingEnd forced_ = ThinkingEnd::None;
};

}  // namespace ember
