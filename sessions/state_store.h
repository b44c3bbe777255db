// The SQLite-backed prefix store: evaluated KV rows in blocks of tokens, keyed by a hash
// chain (state_keys.h), stored once and shared by every conversation and turn whose prompt
// starts with them, so storage grows with new tokens rather than with turns.
//
// Rows of table state_blocks: a full block holds `block_tokens` tokens and chains to the
// block before it (parent_id); a partial block (fewer tokens) holds the tail of a saved
// prompt after its last full block, so a later turn resumes exactly where the last one ended.
// A block's rows are usable for any prefix of its tokens, which is how a second conversation
// with the same system prompt but another question starts warm up to the first differing
// token.
//
// Hybrid models (a recurrent state beside the KV cache) also store a snapshot of the recurrent
// state at the end of each saved prefix (table state_snapshots); their state is restored only
// up to a block end that has one, since recurrent state cannot be cut to a shorter prefix.
//
// The seed of the key chain covers the model's fingerprint and a full hash of its file
// (model_identity.h), computed on the first save or restore, so a store that is never used
// never reads the whole model.
//
// Eviction is least-recently-used under a byte cap. Every operation stamps the blocks it
// walked with one tick, so a block is never newer than its parent, and ties go to the later
// block: children go before the blocks they extend, and a chain never loses its middle.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "engine/generate/prefix_store.h"
#include "engine/model/state.h"
#include "sessions/sqlite.h"
#include "sessions/state_keys.h"

namespace ember {
class Model;
class RecurrentState;
}  // namespace ember

namespace ember::sessions {

struct StateStoreOptions {
    int64_t block_tokens = 64;
    uint64_t cap_bytes = uint64_t{2} << 30;  // compressed state kept at most (--state-cap)
    int zstd_level = 3;
    // State is a cache and messages are not: a blob is written only while the file system
    // holding the database keeps this much free after it, so the cache never takes the room
    // the next messages need (a full disk then costs state, never a conversation).
    uint64_t min_free_bytes = uint64_t{64} << 20;
    // Told at once about a dropped blob or a failed write (the chat prints it); without one,
    // warnings wait for take_warning().
    std::function<void(const std::string&)> on_warning;
};

// Sizes and counters for `ember sessions stats`; counters accumulate over the database's life.
struct StateStats {
    int64_t blocks = 0;
    int64_t partial_blocks = 0;
    int64_t stored_bytes = 0;  // compressed, as on disk
    int64_t raw_bytes = 0;     // before compression
    int64_t tokens = 0;        // tokens covered by stored blocks
    int64_t models = 0;        // distinct fingerprint/KV-type seeds
    int64_t restores = 0;      // restore calls that wanted tokens beyond the live state
    int64_t restore_hits = 0;  // of those, calls that loaded something
    int64_t tokens_wanted = 0;
    int64_t tokens_restored = 0;
    int64_t blocks_written = 0;
    int64_t bytes_written = 0;
    int64_t blocks_reused = 0;  // saves that found the block already stored
    int64_t blocks_evicted = 0;
    int64_t bytes_evicted = 0;
    int64_t blobs_dropped = 0;  // corrupted or unreadable blobs deleted on restore
    // Of the restores, those where the engine read less than the store offered because
    // recomputing was estimated faster (resume_plan.h), and the tokens it left.
    int64_t restores_declined = 0;
    int64_t tokens_declined = 0;
    int64_t snapshots = 0;  // recurrent-state snapshots (hybrid models)
    // Time spent restoring (reading, checking, decompressing, copying into the cache) and
    // the bytes restored, for the restore throughput.
    double restore_seconds = 0;
    int64_t restore_raw_bytes = 0;
    int64_t restore_stored_bytes = 0;
};

// Reads the sizes and counters without a model (for the command line, which words them).
StateStats read_state_stats(Database& db);

// Deletes stored state (blocks, their blobs and snapshots; never messages): every block, or
// those not used since `unused_since` (UTC, "YYYY-MM-DDTHH:MM:SSZ"), with the blocks that
// continue them. The file keeps its size until VACUUM.
struct PruneResult {
    int64_t blocks = 0;
    int64_t stored_bytes = 0;
};
PruneResult prune_state(Database& db, const std::optional<std::string>& unused_since);

class StateStore final : public PrefixStore {
public:
    // `db` (and `model`) must outlive the store, and `db` must be migrated (schema.h). Keys
    // are seeded with the model's identity (model_identity.h), computed on first use.
    StateStore(Database& db, const Model& model, KvType kv_type, StateStoreOptions options = {});
    // Keys seeded with an identity string given by the caller (tests, tools).
    StateStore(Database& db, std::string_view model_identity, KvType kv_type,
               StateStoreOptions options = {});

    // Priced with the restore throughput the database's counters have measured so far
    // (kAssumedBytesPerSecond before any restore).
    std::vector<RestoreSpan> offer(std::span<const int32_t> tokens, int64_t have,
                                   const InferenceState& state) override;
    int64_t restore_up_to(std::span<const int32_t> tokens, int64_t have, int64_t limit,
                          InferenceState& state) override;
    void save(std::span<const int32_t> tokens, const InferenceState& state) override;
    std::string take_warning() override;

    // A restore's speed before the database has measured one (bytes of state per second):
    // what reading and inflating f16 rows reaches on one core; with the model on a GPU, where
    // the rows are stored as they are and go to the device alone, 308 MB of a Llama-3.1-8B's
    // rows restored in 50-53 ms (~6 GB/s) on the H200 machine: assumed 4 GB/s there.
    static constexpr double kAssumedBytesPerSecond = 1.0e9;
    static constexpr double kAssumedGpuBytesPerSecond = 4.0e9;
    // The restore throughput measured so far (restore_raw_bytes / restore_seconds), or the
    // assumed one.
    double restore_bytes_per_second();

    // Where the last save() began storing blocks the database did not hold yet (blocks
    // before it were there already, so the database may hold other continuations of them);
    // nullopt when it stored nothing (failed, or found everything stored).
    std::optional<int64_t> last_save_new_from() const { return last_save_new_from_; }
    // Whether the database holds any block under this store's seed (throws SqliteError).
    bool holds_state();
    // Whether another connection has changed the database since the last call (SQLite's
    // data_version; the first call says true). Throws SqliteError.
    bool changed_elsewhere();

    // Deletes least-recently-used blocks until the stored bytes fit the cap.
    void evict_to_cap();
    const StateStoreOptions& options() const { return options_; }
    KvType kv_type() const { return kv_type_; }
    // The key chain's seed; the first call may hash the model file (throws SqliteError).
    const StateKey& seed();

private:
    struct BlockRow {
        int64_t id = 0;
        int64_t begin = 0;
        int64_t n_tokens = 0;       // tokens of this block that the prefix uses
        int64_t stored_tokens = 0;  // tokens the block holds
    };
    // What a restore read, for the throughput counters.
    struct LoadTotals {
        int64_t raw_bytes = 0;
        int64_t stored_bytes = 0;
    };
    // The chain of full blocks that verifies against the start of `tokens`.
    std::vector<BlockRow> full_blocks(std::span<const int32_t> tokens);
    // The longest stored chain that verifies against `tokens`, ending in a full or partial
    // block used for its first `n_tokens` tokens.
    std::vector<BlockRow> find_chain(std::span<const int32_t> tokens);
    // What restore_up_to() would load: find_chain() of the first `limit` tokens, or for
    // hybrids find_snapshot_chain().
    std::vector<BlockRow> restorable_chain(std::span<const int32_t> tokens, int64_t have,
                                           int64_t limit, bool hybrid);
    // Hybrids: the chain to the furthest block that ends in a snapshot, matches `tokens` in
    // full and ends inside (have, limit] (and before the last token); empty when none.
    std::vector<BlockRow> find_snapshot_chain(std::span<const int32_t> tokens, int64_t have,
                                              int64_t limit);
    // A statement "<select> WHERE <parent> AND <condition>" over the children of `parent_id`
    // (0: the roots under this store's seed), the parent bound as parameter 1 and the
    // condition's parameters from 2; `blocks` is the state_blocks alias with its dot, if any.
    Statement children(int64_t parent_id, const std::string& select, const std::string& blocks,
                       const std::string& condition);
    // Among the children of `parent_id` (0: roots), the one sharing the longest token prefix
    // with `tail`; n_tokens 0 when none shares any.
    BlockRow best_child(int64_t parent_id, int64_t begin, std::span<const int32_t> tail);
    // Loads the blocks' rows past `have` into the cache; returns the restored length. A bad
    // blob is deleted (with the blocks after it) and the length stops before it.
    int64_t load_chain(const std::vector<BlockRow>& chain, int64_t have, KvCache& kv,
                       LoadTotals& totals);
    // Hybrids: loads the snapshot stored with `block_id` (taken at `position`); a bad one is
    // deleted and reported, and false returned with the state untouched.
    bool load_snapshot(int64_t block_id, int64_t position, RecurrentState& state,
                       LoadTotals& totals);
    void save_snapshot(int64_t block_id, const RecurrentState& state);
    void drop_blob(const char* table, const char* id_column, int64_t id, const std::string& what,
                   const std::exception& why);
    // Throws SqliteError when writing `bytes` would leave less than min_free_bytes free.
    void check_headroom(uint64_t bytes) const;
    int64_t insert_block(int64_t parent_id, const StateKey& key, int64_t begin,
                         std::span<const int32_t> block, const KvCache& kv, int64_t tick);
    // Stores what the state holds of `tokens[0, n)` (one transaction); returns the id of
    // the block the prefix ends in, 0 when none was stored.
    int64_t save_blocks(std::span<const int32_t> tokens, size_t n, const KvCache& kv,
                        bool exact_end);
    void drop_superseded_partials(int64_t parent_id, int64_t keep_id,
                                  std::span<const int32_t> tokens);
    int64_t next_tick();
    void touch(const std::vector<int64_t>& ids, int64_t tick);
    void add_counter(const char* name, int64_t delta);
    void warn(const std::string& message);

    Database& db_;
    const Model* model_ = nullptr;  // null when the identity was given
    std::string identity_;          // the given identity (when model_ is null)
    std::optional<StateKey> seed_;
    KvType kv_type_;
    StateStoreOptions options_;
    std::string warning_;
    std::optional<int64_t> last_save_new_from_;
    // The last offer(), so that the restore_up_to() following it neither walks the chain
    // again nor forgets what it left (tokens_declined). Cleared by anything that writes.
    struct Offered {
        std::vector<int32_t> tokens;
        int64_t have = 0;
        bool hybrid = false;
        std::vector<BlockRow> chain;
        int64_t reach = 0;
    };
    std::optional<Offered> offered_;
    // The offer for exactly these arguments, if it is the last one.
    const Offered* offered(std::span<const int32_t> tokens, int64_t have, bool hybrid) const;
    std::optional<int64_t> data_version_;
};

}  // namespace ember::sessions
