#include "sessions/tiered_state_store.h"

#include <algorithm>
#include <utility>

namespace ember::sessions {

TieredStateStore::TieredStateStore(StateStore& durable, StateTier& tier)
    : durable_(durable), tier_(tier) {}

void TieredStateStore::notice_other_writers() {
    bool changed = true;
    try {
        changed = durable_.changed_elsewhere();
    } catch (const SqliteError&) {
    }
    if (changed) tier_.forget_completeness();
}

void TieredStateStore::check_roots(const StateKey& seed) {
    if (roots_checked_) return;
    roots_checked_ = true;
    try {
        if (!durable_.holds_state()) tier_.store_holds_no_roots(seed);
    } catch (const SqliteError&) {
        // Not known: the roots stay incomplete, and prompts the tier lacks ask the database.
    }
}

std::vector<RestoreSpan> TieredStateStore::offer(std::span<const int32_t> tokens, int64_t have,
                                                 const InferenceState& state) {
    const bool hybrid = !state.recurrent.empty();
    asked_database_ = false;
    StateKey seed;
    try {
        seed = durable_.seed();  // the first call may hash the model file
    } catch (const SqliteError&) {
        return durable_.offer(tokens, have, state);  // which reports the failure
    }
    notice_other_writers();
    check_roots(seed);
    const int64_t block_tokens = durable_.options().block_tokens;
    const TierMatch m = tier_.match(seed, block_tokens, tokens, have, std::ssize(tokens), hybrid);
    std::vector<RestoreSpan> spans;
    if (m.reach > have) {
        RestoreSpan memory;
        memory.end = m.reach;
        memory.bytes = m.bytes;
        memory.bytes_per_second = tier_.restore_bytes_per_second();
        memory.source = "memory";
        spans.push_back(memory);
    }
    if (!m.store_may_hold_more) return spans;
    asked_database_ = true;
    const int64_t from = std::max(have, m.reach);
    for (RestoreSpan& s : durable_.offer(tokens, from, state)) {
        if (s.end > from) spans.push_back(std::move(s));
    }
    return spans;
}

int64_t TieredStateStore::restore_up_to(std::span<const int32_t> tokens, int64_t have,
                                        int64_t limit, InferenceState& state) {
    StateKey seed;
    try {
        seed = durable_.seed();
    } catch (const SqliteError&) {
        return durable_.restore_up_to(tokens, have, limit, state);
    }
    limit = std::min<int64_t>(limit, std::ssize(tokens));
    notice_other_writers();
    check_roots(seed);
    TierMatch m;
    const int64_t from_memory =
        tier_.restore(seed, durable_.options().block_tokens, tokens, have, limit, state, &m);
    // Done when the tier reached what was asked, or nothing longer can be in the database;
    // unless the offer asked the database, which then counts its lookup (and what the
    // choice left of its offer) as a restore without it.
    const bool asked = std::exchange(asked_database_, false);
    if (!asked && (from_memory >= limit || !m.store_may_hold_more)) return from_memory;
    return durable_.restore_up_to(tokens, from_memory, limit, state);
}

void TieredStateStore::save(std::span<const int32_t> tokens, const InferenceState& state) {
    StateKey seed;
    try {
        seed = durable_.seed();  // the first call may hash the model file
    } catch (const SqliteError&) {
        durable_.save(tokens, state);  // which says why nothing is saved
        return;
    }
    check_roots(seed);  // before this save adds roots to the database
    durable_.save(tokens, state);
    // A state the database refuses (another KV type) is no state for its keys here either.
    if (state.kv.type() != durable_.kv_type()) return;
    tier_.save(seed, durable_.options().block_tokens, tokens, state, durable_.last_save_new_from());
}

}  // namespace ember::sessions
