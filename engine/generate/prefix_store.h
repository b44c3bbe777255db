// Where evaluated prompt prefixes live outside the live state (the session database, for
// one). The engine knows only this interface; `sessions/` decides where the bytes go.
//
// A conversation asks the store before evaluating a turn ("do you hold more of this prefix
// than my state does?") and hands it the state after the turn ("keep what is new"). Stores
// must compare stored tokens, never trust a hash alone, and must leave the state untouched
// when they cannot restore (a bad blob is dropped and reported, the prompt is recomputed).
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace ember {

struct InferenceState;

class PrefixStore {
public:
    virtual ~PrefixStore() = default;

    // The state already holds `tokens[0, have)`. If the store holds a longer verified prefix
    // of `tokens`, load it into `state` and return its length; otherwise return `have`.
    // Never returns more than tokens.size().
    virtual int64_t restore(std::span<const int32_t> tokens, int64_t have,
                            InferenceState& state) = 0;

    // The state holds exactly `tokens` (all evaluated); called at turn boundaries. Persist
    // what the store lacks.
    virtual void save(std::span<const int32_t> tokens, const InferenceState& state) = 0;

    // A line for the user about the last restore/save that went wrong (a dropped blob, a
    // failed write); empty when all was well. Reading it clears it.
    virtual std::string take_warning() { return {}; }
};

}  // namespace ember
