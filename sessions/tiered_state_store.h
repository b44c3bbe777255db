// The prefix store a conversation sees when a host-memory tier (state_tier.h) sits in front of
// the SQLite state store: restores come from memory where the tier holds the prefix and from
// the database for what it does not; saves go to both (the database is the durable copy,
// written through). A restore that the tier serves in full reads nothing of the state tables:
// the tier knows when the database cannot hold a longer prefix (its blocks' completeness),
// and asks SQLite only whether another connection wrote meanwhile (PRAGMA data_version).
#pragma once

#include <span>
#include <string>
#include <vector>

#include "engine/generate/prefix_store.h"
#include "sessions/state_store.h"
#include "sessions/state_tier.h"

namespace ember::sessions {

class TieredStateStore final : public PrefixStore {
public:
    // Both must outlive this store; `tier` may serve other stores (other models) too.
    TieredStateStore(StateStore& durable, StateTier& tier);

    // A "memory" span for what the tier holds, then a "database" span for what the database
    // holds beyond it (asked only when it may hold more).
    std::vector<RestoreSpan> offer(std::span<const int32_t> tokens, int64_t have,
                                   const InferenceState& state) override;
    int64_t restore_up_to(std::span<const int32_t> tokens, int64_t have, int64_t limit,
                          InferenceState& state) override;
    void save(std::span<const int32_t> tokens, const InferenceState& state) override;
    std::string take_warning() override { return durable_.take_warning(); }

    StateStore& durable() { return durable_; }
    StateTier& tier() { return tier_; }

private:
    // Whether another connection wrote the database since the last look (then no block of
    // the tier is known complete any more); a failed look counts as a write.
    void notice_other_writers();
    // Once, before the first save through the tier: a database holding nothing for this
    // model lets the tier know all its roots (StateTier::store_holds_no_roots).
    void check_roots(const StateKey& seed);

    StateStore& durable_;
    StateTier& tier_;
    bool asked_database_ = false;  // the last offer included the database's
    bool roots_checked_ = false;
};

}  // namespace ember::sessions
