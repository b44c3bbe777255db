// The host-memory tier in front of the SQLite state store: recently saved prefixes' state,
// uncompressed, so switching between conversations (in a chat, or between a server's
// requests) restores by copying rows instead of reading, checking and inflating blobs.
//
// Blocks mirror state_store.h's: a full block holds `block_tokens` tokens and is keyed by the
// same hash chain (state_keys.h), a partial block holds a saved prompt's tail after its last
// full block, and a hybrid's recurrent snapshot sits on the block where it was taken. A block
// holds its rows as serialize_kv_rows() writes them (state_io.h), so restoring is
// apply_kv_rows(): the same bytes the live cache held, bit for bit.
//
// The tier holds at most `cap_bytes` (rows, snapshots, tokens and bookkeeping): a save makes
// room by dropping the least recently used blocks (a save or restore stamps every block of its
// chain with one tick; ties go to the later block, so a chain loses its end before its start
// and never its middle), and a block that cannot fit is not kept. The SQLite store stays the
// durable copy: everything saved here is saved there too (TieredStateStore).
//
// What lets a restore skip the database: each block knows whether every continuation the
// database holds of it is here too ("complete"). A block is complete when this process stored
// it in both places at once (the database did not hold it before, so it has no continuations
// but those saved here since); it stops being complete when a child leaves the tier or
// another process writes the database (forget_completeness). The roots are known complete
// only when the database held none of the model's blocks when the tier began saving them
// (store_holds_no_roots); otherwise a prompt whose first full block is not here asks the
// database.
//
// Safe to use from several threads (one mutex); one tier serves every store of a process
// (blocks of different models never meet: the chain's seed covers the model).
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "engine/model/pinned_bytes.h"
#include "engine/model/state.h"
#include "sessions/state_keys.h"

namespace ember::sessions {

struct StateTierStats {
    uint64_t cap_bytes = 0;
    uint64_t bytes = 0;  // held now
    int64_t blocks = 0;
    int64_t snapshots = 0;
    int64_t restores = 0;  // restores that loaded something
    int64_t tokens_restored = 0;
    int64_t bytes_restored = 0;
    double restore_seconds = 0;
    int64_t blocks_stored = 0;
    int64_t blocks_evicted = 0;  // dropped to make room (with the blocks continuing them)
    int64_t blocks_refused = 0;  // not kept: no room even after dropping all others
};

// What the tier holds of a prompt beyond the live state.
struct TierMatch {
    int64_t reach = 0;  // restoring from the tier brings the state here (<= have: nothing)
    int64_t bytes = 0;  // bytes a restore to `reach` copies
    // The database may hold a longer usable prefix than the tier (see the file comment).
    bool store_may_hold_more = true;
};

class StateTier {
public:
    explicit StateTier(uint64_t cap_bytes);
    StateTier(const StateTier&) = delete;
    StateTier& operator=(const StateTier&) = delete;

    // The restore throughput measured so far (bytes of state per second), or the assumed
    // one before a megabyte has been restored.
    static constexpr double kAssumedBytesPerSecond = 4.0e9;
    double restore_bytes_per_second() const;

    // What a restore of `tokens` into a state holding [0, have) would reach, at most `limit`
    // (hybrids: only to a block with a snapshot, short of the last token). Touches nothing.
    TierMatch match(const StateKey& seed, int64_t block_tokens, std::span<const int32_t> tokens,
                    int64_t have, int64_t limit, bool hybrid);
    // Restores what match() describes into `state` and returns the length it holds then
    // (`have` when nothing was restored); the blocks used become the most recent. The
    // match's store_may_hold_more goes to `match` when given.
    int64_t restore(const StateKey& seed, int64_t block_tokens, std::span<const int32_t> tokens,
                    int64_t have, int64_t limit, InferenceState& state, TierMatch* match = nullptr);
    // Keeps what `state` holds of `tokens` (its first min(size, kv length) tokens; a hybrid's
    // recurrent state must be at that position and is kept as the end block's snapshot).
    // `store_new_from`: where the same save in the database began storing blocks it did not
    // hold (nullopt: it stored none, or failed), which decides which new blocks are complete.
    void save(const StateKey& seed, int64_t block_tokens, std::span<const int32_t> tokens,
              const InferenceState& state, std::optional<int64_t> store_new_from);
    // The database changed behind the tier (another process wrote it): every block may now
    // have continuations there that the tier lacks.
    void forget_completeness();
    // The database holds no block under `seed` (checked before the first save through the
    // tier): every root it will hold is saved through the tier, so a prompt whose start the
    // tier lacks needs no look in the database either. Ignored once the tier holds roots.
    void store_holds_no_roots(const StateKey& seed);

    // Page-locks the rows of blocks stored from now on (the model runs on a GPU, where a
    // restore copies from locked memory at several times the speed of pageable: 2 GB of
    // Llama-3.1-8B rows in ~40 ms instead of ~290 on the H200's host). Locking costs a save
    // ~0.06 ms a MB, once.
    void pin_rows(bool on);

    StateTierStats stats() const;
    uint64_t bytes() const;
    uint64_t cap_bytes() const { return cap_bytes_; }

private:
    struct KeyHash {
        size_t operator()(const StateKey& key) const;
    };
    struct Block {
        StateKey key{};     // the chain's key at the block's end
        StateKey parent{};  // the previous block's key (the seed for a root)
        int64_t begin = 0;
        std::vector<int32_t> tokens;
        PinnedBytes rows;  // serialize_kv_rows(kv, begin, begin + tokens.size()); locked on a GPU
        std::vector<uint8_t> snapshot;  // hybrids: serialize_recurrent at the block's end
        bool complete = false;          // every continuation the database holds is here
        uint64_t tick = 0;
        uint64_t bytes() const;
    };
    // A chain found for a prompt: its blocks, the end of the rows used of the last one, and
    // whether the database might do better.
    struct Walk {
        std::vector<Block*> chain;
        int64_t reach = 0;
        int64_t used_of_last = 0;  // tokens of the last block the prefix uses
        bool store_may_hold_more = true;
    };
    using LruKey = std::tuple<uint64_t, int64_t, StateKey>;  // tick, -begin, key

    Walk walk(const StateKey& seed, int64_t block_tokens, std::span<const int32_t> tokens,
              int64_t have, int64_t limit, bool hybrid);
    // The chain of full blocks verifying against the start of `tokens` (at most `limit`).
    std::vector<Block*> full_blocks(const StateKey& seed, int64_t block_tokens,
                                    std::span<const int32_t> tokens, int64_t limit);
    // The child of `parent` at `begin` sharing the longest prefix with `tail` (ties: the one
    // ending there); null when none shares any. `shared` gets the length.
    Block* best_child(const StateKey& parent, int64_t begin, std::span<const int32_t> tail,
                      int64_t& shared);
    // Whether every continuation the database holds of the block `key` (or of the seed
    // `key`: its roots) is in the tier.
    bool is_complete(const StateKey& key) const;
    void set_complete(const StateKey& key, bool complete);
    int64_t copy_rows(const Walk& w, int64_t have, InferenceState& state, bool hybrid);
    Block* insert(Block block, const std::vector<StateKey>& keep);
    // Drops least recently used blocks (never those in `keep`) until `bytes` more fit;
    // false when they cannot.
    bool make_room(uint64_t bytes, const std::vector<StateKey>& keep);
    void evict(StateKey key);
    void touch(Block& block, uint64_t tick);
    void drop_superseded_partials(const StateKey& parent, const Block& kept);

    const uint64_t cap_bytes_;
    mutable std::mutex mutex_;
    std::unordered_map<StateKey, Block, KeyHash> blocks_;
    std::unordered_map<StateKey, std::vector<StateKey>, KeyHash> children_;  // by parent key
    std::set<LruKey> lru_;                                        // least recently used first
    std::unordered_map<StateKey, bool, KeyHash> complete_seeds_;  // seeds whose roots are all here
    uint64_t bytes_ = 0;
    uint64_t tick_ = 0;
    bool pin_rows_ = false;
    StateTierStats stats_;
};

}  // namespace ember::sessions
