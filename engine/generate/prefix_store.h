// Where evaluated prompt prefixes live outside the live state (the session database, for
// one). The engine knows only this interface; `sessions/` decides where the bytes go.
//
// A conversation asks the store before evaluating a turn ("do you hold more of this prefix
// than my state does?") and hands it the state after the turn ("keep what is new"). Stores
// must compare stored tokens, never trust a hash alone, and must leave the state untouched
// when they cannot restore (a bad blob is dropped and reported, the prompt is recomputed).
//
// Restoring is not always faster than recomputing (a fast device evaluates a prompt quicker
// than a database inflates its rows), so a conversation first asks what the store holds and
// at what cost (offer), chooses with its own prefill speed (resume_plan.h), and restores only
// as far as pays (restore_up_to).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/generate/resume_plan.h"

namespace ember {

struct InferenceState;

class PrefixStore {
public:
    virtual ~PrefixStore() = default;

    // What the store could restore of `tokens` beyond the `have` positions the state holds:
    // spans in order (resume_plan.h), the last ending where restore() would stop, priced
    // with the store's own measured speeds. Reads no state rows (indexes only); empty when
    // the store holds nothing more. `state` tells the shapes (bytes per position).
    virtual std::vector<RestoreSpan> offer(std::span<const int32_t> tokens, int64_t have,
                                           const InferenceState& state) = 0;

    // The state already holds `tokens[0, have)`. If the store holds a longer verified prefix
    // of `tokens`, load it into `state`, up to position `limit` at most, and return its
    // length; otherwise return `have`. Never returns more than min(limit, tokens.size()).
    virtual int64_t restore_up_to(std::span<const int32_t> tokens, int64_t have, int64_t limit,
                                  InferenceState& state) = 0;
    // As far as the store holds.
    int64_t restore(std::span<const int32_t> tokens, int64_t have, InferenceState& state) {
        return restore_up_to(tokens, have, static_cast<int64_t>(tokens.size()), state);
    }

    // The state holds exactly `tokens` (all evaluated); called at turn boundaries. Persist
    // what the store lacks.
    virtual void save(std::span<const int32_t> tokens, const InferenceState& state) = 0;

    // A line for the user about the last restore/save that went wrong (a dropped blob, a
    // failed write); empty when all was well. Reading it clears it.
    virtual std::string take_warning() { return {}; }
};

}  // namespace ember
