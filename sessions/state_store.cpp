#include "sessions/state_store.h"

#include <sys/statvfs.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <ctime>
#include <exception>
#include <filesystem>
#include <mutex>
#include <optional>
#include <utility>

#include "engine/model/model.h"
#include "engine/model/pinned_bytes.h"
#include "engine/model/state_io.h"
#include "engine/util/fan_out.h"
#include "engine/util/utc_time.h"
#include "sessions/blob_codec.h"
#include "sessions/model_identity.h"

namespace ember::sessions {

namespace {

// Byte planes for a cache's rows (blob_codec.h). f16, the default of every command that
// stores state, as planes of high and low bytes: restoring decodes ~3x faster and the blobs
// shrink ~8%. f32 and q8_0 rows are stored as they are: f32 is the exact type (eval's, for
// fidelity checks), and as 4 planes it would shrink about as much again (1304 -> 1213 bytes per
// token on the qwen3 fixture), which is left for when f32 state is restored often enough to
// matter; a q8_0 row's 34-byte blocks hold one f16 scale and 32 small integers.
int byte_planes(KvType type) {
    return type == KvType::F16 ? 2 : 1;
}

// How a block's rows are packed (blob_codec.h: pack_blob's level and planes).
struct RowsPacking {
    int level = 3;
    int planes = 1;
};

// Where the model runs on a GPU, KV rows are stored as they are (zstd's fastest level, which
// finds nothing in them: x1.00): a restore there is as fast as the host inflates, and inflating
// was most of it. Restoring 17,516 tokens of a Llama-3.1-8B onto the H200 took 313 ms on 16
// threads, 190 of them each thread's inflating (~0.75 GB/s a thread with the others at it), where
// the copies to the device are ~55 GB/s. f16 rows of a trained model (SmolLM2-135M-Instruct, 25
// blocks) shrink x1.16 as planes at level 3 and decode at 3.7 GB/s a core on the CI machine; at
// level -1 they shrink x1.00 and decode at ~32 GB/s (a copy). So a GPU's blobs are 16% larger
// and inflate ~9x faster; on the CPU, whose prefill is a thousand times slower than the
// restore, the bytes stay what counts.
RowsPacking rows_packing(KvType type, bool on_gpu, int level) {
    if (on_gpu) return {-1, 1};
    return {level, byte_planes(type)};
}

// Restoring threads: decoding (zstd, byte planes, checksum) and copying into the cache take
// ~2 GB/s per thread, and the engine's threads wait for the restore anyway. A GPU's host has
// the cores for more, but not for 16: with the rows going to the device alone and stored as
// they are (rows_packing), 2,348 tokens of a Llama-3.1-8B restored on the H200 machine in
// 59-66 ms on 8 threads and 82-93 ms on 16 (each thread's connection opening and page-locking
// its buffer wait on the others: SQLite's locks, the driver's), 17,516 tokens in 180 ms on
// either.
constexpr unsigned kMaxRestoreThreads = 8;

// A row of state_blocks without its state blob.
struct StoredBlock {
    int64_t id = 0;
    int64_t parent_id = 0;  // 0: a root block
    StateKey seed{};
    int64_t begin = 0;
    std::vector<int32_t> tokens;
};

std::optional<StoredBlock> lookup_block(Database& db, const StateKey& key) {
    Statement s = db.prepare(
        "SELECT id, COALESCE(parent_id, 0), seed, begin_pos, tokens FROM state_blocks "
        "WHERE key = ?");
    s.bind_blob(1, key);
    if (!s.step()) return std::nullopt;
    StoredBlock b;
    b.id = s.column_int(0);
    b.parent_id = s.column_int(1);
    const auto seed = s.column_blob(2);
    if (seed.size() == b.seed.size()) std::copy(seed.begin(), seed.end(), b.seed.begin());
    b.begin = s.column_int(3);
    b.tokens = blob_to_tokens(s.column_blob(4));
    return b;
}

size_t common_prefix(std::span<const int32_t> a, std::span<const int32_t> b) {
    const size_t n = std::min(a.size(), b.size());
    size_t i = 0;
    while (i < n && a[i] == b[i]) ++i;
    return i;
}

int64_t counter(Database& db, const char* name) {
    Statement s = db.prepare("SELECT value FROM state_counters WHERE name = ?");
    s.bind(1, name);
    return s.step() ? s.column_int(0) : 0;
}

}  // namespace

StateStats read_state_stats(Database& db) {
    StateStats st;
    {
        Statement s = db.prepare(
            "SELECT COUNT(*), COALESCE(SUM(stored_bytes), 0), COALESCE(SUM(raw_bytes), 0), "
            "COALESCE(SUM(n_tokens), 0), COUNT(DISTINCT seed) FROM state_blocks");
        s.step();
        st.blocks = s.column_int(0);
        st.stored_bytes = s.column_int(1);
        st.raw_bytes = s.column_int(2);
        st.tokens = s.column_int(3);
        st.models = s.column_int(4);
    }
    {
        // Partial blocks are the ones shorter than the longest block of their seed.
        Statement s = db.prepare(
            "SELECT COUNT(*) FROM state_blocks b WHERE n_tokens < "
            "(SELECT MAX(n_tokens) FROM state_blocks c WHERE c.seed = b.seed)");
        s.step();
        st.partial_blocks = s.column_int(0);
    }
    st.restores = counter(db, "restores");
    st.restore_hits = counter(db, "restore_hits");
    st.tokens_wanted = counter(db, "tokens_wanted");
    st.tokens_restored = counter(db, "tokens_restored");
    st.blocks_written = counter(db, "blocks_written");
    st.bytes_written = counter(db, "bytes_written");
    st.blocks_reused = counter(db, "blocks_reused");
    st.blocks_evicted = counter(db, "blocks_evicted");
    st.bytes_evicted = counter(db, "bytes_evicted");
    st.blobs_dropped = counter(db, "blobs_dropped");
    st.restores_declined = counter(db, "restores_declined");
    st.tokens_declined = counter(db, "tokens_declined");
    {
        Statement s = db.prepare(
            "SELECT COUNT(*), COALESCE(SUM(stored_bytes), 0), COALESCE(SUM(raw_bytes), 0) "
            "FROM state_snapshots");
        s.step();
        st.snapshots = s.column_int(0);
        st.stored_bytes += s.column_int(1);
        st.raw_bytes += s.column_int(2);
    }
    st.restore_seconds = static_cast<double>(counter(db, "restore_micros")) / 1e6;
    st.restore_raw_bytes = counter(db, "restore_raw_bytes");
    st.restore_stored_bytes = counter(db, "restore_stored_bytes");
    return st;
}

PruneResult prune_state(Database& db, const std::optional<std::string>& unused_since) {
    PruneResult r;
    const std::string where =
        unused_since ? " WHERE COALESCE(used_at, created_at) < ?" : std::string();
    {
        Transaction tx(db);
        // Counted with the recurrent snapshots their blocks hold; a block's descendants go
        // with it (ON DELETE CASCADE): a chain is of no use without its start.
        Statement count = db.prepare(
            "SELECT COUNT(*), COALESCE(SUM(stored_bytes), 0) + COALESCE((SELECT "
            "SUM(stored_bytes) FROM state_snapshots), 0) FROM state_blocks");
        count.step();
        const int64_t blocks_before = count.column_int(0);
        const int64_t bytes_before = count.column_int(1);
        Statement del = db.prepare("DELETE FROM state_blocks" + where);
        if (unused_since) del.bind(1, *unused_since);
        del.run();
        count.reset();
        count.step();
        r.blocks = blocks_before - count.column_int(0);
        r.stored_bytes = bytes_before - count.column_int(1);
        tx.commit();
    }
    return r;
}

StateStore::StateStore(Database& db, const Model& model, KvType kv_type, StateStoreOptions options)
    : db_(db), model_(&model), kv_type_(kv_type), options_(std::move(options)) {
    if (options_.block_tokens <= 0) options_.block_tokens = 64;
}

StateStore::StateStore(Database& db, std::string_view model_identity, KvType kv_type,
                       StateStoreOptions options)
    : db_(db), identity_(model_identity), kv_type_(kv_type), options_(std::move(options)) {
    if (options_.block_tokens <= 0) options_.block_tokens = 64;
}

const StateKey& StateStore::seed() {
    if (!seed_) {
        // Lazily: hashing a model file in full is one read of it, paid (once per file, then
        // cached in the database) only by a process that saves or restores state.
        const std::string identity =
            model_ != nullptr ? model_state_identity(db_, *model_) : identity_;
        seed_ = state_seed(identity, kv_type_, options_.block_tokens);
    }
    return *seed_;
}

std::string StateStore::take_warning() {
    return std::exchange(warning_, std::string());
}

void StateStore::warn(const std::string& message) {
    if (options_.on_warning) {
        options_.on_warning(message);
        return;
    }
    if (!warning_.empty()) warning_ += "; ";
    warning_ += message;
}

void StateStore::add_counter(const char* name, int64_t delta) {
    if (delta == 0) return;
    Statement s = db_.prepare(
        "INSERT INTO state_counters(name, value) VALUES (?, ?) "
        "ON CONFLICT(name) DO UPDATE SET value = value + excluded.value");
    s.bind(1, name).bind(2, delta).run();
}

int64_t StateStore::next_tick() {
    add_counter("use_tick", 1);
    return counter(db_, "use_tick");
}

void StateStore::touch(const std::vector<int64_t>& ids, int64_t tick) {
    Statement s = db_.prepare("UPDATE state_blocks SET last_used = ?, used_at = ? WHERE id = ?");
    const std::string now = utc_now(UtcFormat::Iso8601Seconds);
    for (int64_t id : ids) {
        s.bind(1, tick).bind(2, now).bind(3, id).run();
        s.reset();
    }
}

Statement StateStore::children(int64_t parent_id, const std::string& select,
                               const std::string& blocks, const std::string& condition) {
    // Roots have no parent row; they are told apart by the store's seed.
    Statement s =
        db_.prepare(select + " WHERE " +
                    (parent_id == 0 ? blocks + "parent_id IS NULL AND " + blocks + "seed = ?"
                                    : blocks + "parent_id = ?") +
                    " AND " + condition);
    if (parent_id == 0) {
        s.bind_blob(1, seed());
    } else {
        s.bind(1, parent_id);
    }
    return s;
}

StateStore::BlockRow StateStore::best_child(int64_t parent_id, int64_t begin,
                                            std::span<const int32_t> tail) {
    Statement s = children(parent_id, "SELECT id, tokens FROM state_blocks", "", "begin_pos = ?");
    s.bind(2, begin);
    BlockRow best{0, begin, 0, 0};
    while (s.step()) {
        const auto tokens = blob_to_tokens(s.column_blob(1));
        const auto n = static_cast<int64_t>(common_prefix(tokens, tail));
        const auto size = static_cast<int64_t>(tokens.size());
        // Longest shared prefix first; among equals, the block ending exactly there (a
        // hybrid's snapshot can only sit at a block's end).
        if (n > best.n_tokens || (n == best.n_tokens && n > 0 && size == n)) {
            best = BlockRow{s.column_int(0), begin, n, size};
        }
    }
    return best;
}

std::vector<StateStore::BlockRow> StateStore::full_blocks(std::span<const int32_t> tokens) {
    const auto block = static_cast<size_t>(options_.block_tokens);
    std::vector<BlockRow> chain;
    StateKey previous = seed();
    int64_t parent_id = 0;
    for (size_t pos = 0; pos + block <= tokens.size(); pos += block) {
        const auto piece = tokens.subspan(pos, block);
        const StateKey key = chain_key(previous, piece);
        const auto found = lookup_block(db_, key);
        // The key says "probably this prefix"; the stored tokens and links make it certain.
        if (!found || found->seed != seed() || found->parent_id != parent_id ||
            found->begin != static_cast<int64_t>(pos) ||
            !std::equal(piece.begin(), piece.end(), found->tokens.begin(), found->tokens.end())) {
            break;
        }
        chain.push_back({found->id, static_cast<int64_t>(pos), static_cast<int64_t>(block),
                         static_cast<int64_t>(block)});
        parent_id = found->id;
        previous = key;
    }
    return chain;
}

std::vector<StateStore::BlockRow> StateStore::find_chain(std::span<const int32_t> tokens) {
    std::vector<BlockRow> chain = full_blocks(tokens);
    const int64_t pos = chain.empty() ? 0 : chain.back().begin + chain.back().n_tokens;
    if (pos < static_cast<int64_t>(tokens.size())) {
        const BlockRow tail = best_child(chain.empty() ? 0 : chain.back().id, pos,
                                         tokens.subspan(static_cast<size_t>(pos)));
        if (tail.n_tokens > 0) chain.push_back(tail);
    }
    return chain;
}

std::vector<StateStore::BlockRow> StateStore::find_snapshot_chain(std::span<const int32_t> tokens,
                                                                  int64_t have, int64_t limit) {
    const std::vector<BlockRow> full = full_blocks(tokens);
    // Deeper levels end further along, so the first level with a usable snapshot wins; within
    // a level, the longest block. A snapshot folds in every token of its block, so the block
    // must match the prompt in full; and at least one prompt token must remain to be
    // evaluated for the first logits (the state cannot step back from a snapshot).
    limit = std::min(limit, static_cast<int64_t>(tokens.size()) - 1);
    for (size_t level = full.size() + 1; level-- > 0;) {
        const int64_t parent_id = level == 0 ? 0 : full[level - 1].id;
        const int64_t begin = static_cast<int64_t>(level) * options_.block_tokens;
        if (begin >= limit) continue;
        Statement s = children(parent_id,
                               "SELECT b.id, b.tokens, n.position FROM state_blocks b JOIN "
                               "state_snapshots n ON n.block_id = b.id",
                               "b.", "b.begin_pos = ?");
        s.bind(2, begin);
        const auto tail = tokens.subspan(static_cast<size_t>(begin));
        BlockRow best{0, begin, 0, 0};
        while (s.step()) {
            const auto stored = blob_to_tokens(s.column_blob(1));
            const auto size = static_cast<int64_t>(stored.size());
            const int64_t end = begin + size;
            if (size > best.n_tokens && end > have && end <= limit && s.column_int(2) == end &&
                common_prefix(stored, tail) == stored.size()) {
                best = BlockRow{s.column_int(0), begin, size, size};
            }
        }
        if (best.n_tokens > 0) {
            std::vector<BlockRow> chain(full.begin(),
                                        full.begin() + static_cast<std::ptrdiff_t>(level));
            chain.push_back(best);
            return chain;
        }
    }
    return {};
}

void StateStore::drop_blob(const char* table, const char* id_column, int64_t id,
                           const std::string& what, const std::exception& why) {
    // A BlobError or StateFormatError: never restore it; drop it (a block takes the blocks
    // chained after it along) so the next save stores good state in its place.
    Transaction tx(db_);
    Statement del =
        db_.prepare(std::string("DELETE FROM ") + table + " WHERE " + id_column + " = ?");
    del.bind(1, id).run();
    add_counter("blobs_dropped", 1);
    tx.commit();
    warn("stored " + what + " in '" + db_.path() + "' was unreadable (" + why.what() +
         "); dropped it, recomputing");
}

namespace {

// One block of a chain being restored, as a restoring thread left it.
struct BlockLoad {
    int64_t id = 0;
    int64_t begin = 0;          // the block's first position
    int64_t end = 0;            // the end of the rows the prefix uses
    int64_t from = 0;           // the first position to write (the cache holds those before)
    bool missing = false;       // no blob (evicted meanwhile by another process)
    std::exception_ptr failed;  // reading the database failed: the restore fails
    std::string unreadable;     // the blob is bad (its check's message): it is dropped
    int64_t raw_bytes = 0;
    int64_t stored_bytes = 0;
};

// The blocks of a restore, taken one at a time by the restoring threads in chain order: a
// thread that starts late (its connection's opening waited on SQLite's locks: 11-50 ms on the
// H200 machine's 16 cores) takes fewer, where a fixed share per thread made the restore wait
// for its last starter. `stop`: a block was missing or bad, the ones after it are of no use.
struct BlockQueue {
    std::vector<BlockLoad>& loads;
    std::atomic<size_t> next{0};
    std::atomic<bool> stop{false};
    BlockLoad* take() {
        if (stop.load(std::memory_order_relaxed)) return nullptr;
        const size_t i = next.fetch_add(1, std::memory_order_relaxed);
        return i < loads.size() ? &loads[i] : nullptr;
    }
};

// Reads, checks and applies the blocks `queue` hands out until none is left or one is missing
// or bad (the blocks after it cannot be used: the queue stops). The reads go through `db` under
// `db_mutex`; the blocks write disjoint rows of `kv`, whose chunks are reserved already, and
// this thread maps chunks `part`, `part + parts`, ... of them first.
void load_blocks(Database& db, std::mutex& db_mutex, BlockQueue& queue, size_t part, size_t parts,
                 KvCache& kv) {
    // One buffer of each kind per thread: the blocks are of one size, so their pages are
    // faulted in once rather than once per block. The inflated rows are page-locked where a
    // GPU mirrors the cache: its copy then reads them with the copy engine while the thread
    // goes on, where from pageable memory the copies went one at a time through the driver's
    // staging and were half of a 2 GB restore's time (Llama-3.1-8B on the H200: 483 of
    // 891 ms, the threads waiting on each other's copies).
    std::vector<uint8_t> packed;
    PinnedBytes raw;
    std::vector<uint8_t> planes;
    kv.populate(part, parts);  // the chunks the blocks are about to fill, mapped in one go
    while (BlockLoad* next = queue.take()) {
        BlockLoad& b = *next;
        try {
            const std::lock_guard<std::mutex> lock(db_mutex);
            b.missing = !read_blob(db, "state_blobs", "state", b.id, packed);
        } catch (...) {
            b.failed = std::current_exception();
            queue.stop = true;
            return;
        }
        if (b.missing) {
            queue.stop = true;
            return;
        }
        try {
            if (kv.mirrored()) raw.reserve_pinned(unpacked_size(packed));
            unpack_blob(packed, raw.vector(), planes);
            const KvBlobInfo info = inspect_kv_rows(raw.bytes());
            if (info.begin != b.begin || info.begin + info.count < b.end) {
                throw BlobError("state blob: rows [" + std::to_string(info.begin) + ", +" +
                                std::to_string(info.count) + ") do not match the block");
            }
            apply_kv_rows(raw.bytes(), kv, b.from, b.end);
        } catch (const std::exception& e) {
            b.unreadable = e.what();
            queue.stop = true;
            return;
        }
        b.raw_bytes = static_cast<int64_t>(raw.size());
        b.stored_bytes = static_cast<int64_t>(packed.size());
    }
}

}  // namespace

int64_t StateStore::load_chain(const std::vector<BlockRow>& chain, int64_t have, KvCache& kv,
                               LoadTotals& totals) {
    std::vector<BlockLoad> loads;
    for (const BlockRow& b : chain) {
        const int64_t end = b.begin + b.n_tokens;
        if (end > have) loads.push_back({b.id, b.begin, end, std::max(have, b.begin)});
    }
    if (loads.empty()) return have;
    // Blocks write their own rows, so they can be restored side by side; but a sliding
    // layer's ring slot serves positions a window apart, and the later block must write last.
    const int threads = kv.ring_positions() > 0
                            ? 1
                            : fan_out_threads(std::min<int64_t>(
                                  kMaxRestoreThreads, static_cast<int64_t>(loads.size())));
    // The chunks, before threads write into them (a blob reaching past the context is
    // refused by apply_kv_rows and dropped).
    kv.reserve(std::min(loads.back().end, kv.capacity()), KvCache::Pages::SmallPages);
    // Threads past the first read through connections of their own where the database is a
    // file: one connection's blob reads take turns, and at ~1.5 GB/s they were what a restore
    // onto a GPU waited on (2 GB of Llama-3.1-8B rows in 1.3 s on 16 threads). A reader that
    // cannot open shares the first connection.
    std::error_code ec;
    const bool own_readers = threads > 1 && std::filesystem::is_regular_file(db_.path(), ec);
    std::mutex db_mutex;
    BlockQueue queue{loads};
    fan_out(threads, [&](int t) {
        std::unique_ptr<Database> own;
        if (own_readers && t > 0) {
            try {
                own = std::make_unique<Database>(db_.path(), OpenMode::read_only);
            } catch (const SqliteError&) {
                own.reset();
            }
        }
        std::mutex own_mutex;  // nobody else reads through `own`
        load_blocks(own ? *own : db_, own ? own_mutex : db_mutex, queue, static_cast<size_t>(t),
                    static_cast<size_t>(threads), kv);
    });
    int64_t restored = have;
    for (const BlockLoad& b : loads) {
        if (b.failed) std::rethrow_exception(b.failed);
        if (b.missing) break;
        if (!b.unreadable.empty()) {
            drop_blob("state_blocks", "id", b.id,
                      "state for tokens " + std::to_string(b.begin) + ".." + std::to_string(b.end),
                      BlobError(b.unreadable));
            break;
        }
        // The queue hands the blocks out in order and stops at a bad one, so every block left
        // undone lies after one of the breaks above; this guards that reasoning, it is not a
        // case of its own.
        if (b.raw_bytes == 0) break;
        totals.raw_bytes += b.raw_bytes;
        totals.stored_bytes += b.stored_bytes;
        restored = b.end;
    }
    return restored;
}

bool StateStore::load_snapshot(int64_t block_id, int64_t position, RecurrentState& state,
                               LoadTotals& totals) {
    Statement s = db_.prepare("SELECT state FROM state_snapshots WHERE block_id = ?");
    s.bind(1, block_id);
    if (!s.step()) return false;  // evicted meanwhile by another process
    try {
        const std::vector<uint8_t> packed = s.column_blob(0);
        const std::vector<uint8_t> raw = unpack_blob(packed);
        if (inspect_recurrent(raw).position != position) {
            throw BlobError("snapshot position differs from its block's end");
        }
        apply_recurrent(raw, state);  // checks the shape before writing anything
        totals.raw_bytes += static_cast<int64_t>(raw.size());
        totals.stored_bytes += static_cast<int64_t>(packed.size());
        return true;
    } catch (const std::exception& e) {
        drop_blob("state_snapshots", "block_id", block_id,
                  "recurrent state at token " + std::to_string(position), e);
        return false;
    }
}

std::vector<StateStore::BlockRow> StateStore::restorable_chain(std::span<const int32_t> tokens,
                                                               int64_t have, int64_t limit,
                                                               bool hybrid) {
    limit = std::min(limit, static_cast<int64_t>(tokens.size()));
    if (limit <= have) return {};
    return hybrid ? find_snapshot_chain(tokens, have, limit)
                  : find_chain(tokens.first(static_cast<size_t>(limit)));
}

double StateStore::restore_bytes_per_second() {
    const double seconds = static_cast<double>(counter(db_, "restore_micros")) / 1e6;
    const auto bytes = static_cast<double>(counter(db_, "restore_raw_bytes"));
    // A handful of tiny restores measures the lookups more than the rows: wait for a
    // megabyte before trusting the figure.
    if (seconds <= 0 || bytes < 1e6) {
        return model_ != nullptr && model_->device() != nullptr ? kAssumedGpuBytesPerSecond
                                                                : kAssumedBytesPerSecond;
    }
    return bytes / seconds;
}

const StateStore::Offered* StateStore::offered(std::span<const int32_t> tokens, int64_t have,
                                               bool hybrid) const {
    if (!offered_ || offered_->have != have || offered_->hybrid != hybrid ||
        !std::equal(tokens.begin(), tokens.end(), offered_->tokens.begin(),
                    offered_->tokens.end())) {
        return nullptr;
    }
    return &*offered_;
}

std::vector<RestoreSpan> StateStore::offer(std::span<const int32_t> tokens, int64_t have,
                                           const InferenceState& state) {
    const bool hybrid = !state.recurrent.empty();
    offered_.reset();
    try {
        std::vector<BlockRow> chain =
            restorable_chain(tokens, have, static_cast<int64_t>(tokens.size()), hybrid);
        const int64_t reach = chain.empty() ? 0 : chain.back().begin + chain.back().n_tokens;
        offered_ = Offered{{tokens.begin(), tokens.end()}, have, hybrid, std::move(chain), reach};
        if (reach <= have) return {};
        RestoreSpan span;
        span.end = reach;
        span.bytes = (reach - have) * static_cast<int64_t>(state.kv.bytes_per_position()) +
                     (hybrid ? static_cast<int64_t>(state.recurrent.bytes()) : 0);
        span.bytes_per_second = restore_bytes_per_second();
        span.source = "database";
        return {span};
    } catch (const SqliteError& e) {
        warn(std::string("prefix state lookup failed: ") + e.what());
        return {};
    }
}

bool StateStore::holds_state() {
    Statement s = db_.prepare("SELECT EXISTS(SELECT 1 FROM state_blocks WHERE seed = ?)");
    s.bind_blob(1, seed());
    s.step();
    return s.column_int(0) != 0;
}

bool StateStore::changed_elsewhere() {
    Statement s = db_.prepare("PRAGMA data_version");
    s.step();
    const int64_t version = s.column_int(0);
    const bool changed = !data_version_ || *data_version_ != version;
    data_version_ = version;
    return changed;
}

int64_t StateStore::restore_up_to(std::span<const int32_t> tokens, int64_t have, int64_t limit,
                                  InferenceState& state) {
    if (static_cast<int64_t>(tokens.size()) <= have) return have;
    limit = std::min(limit, static_cast<int64_t>(tokens.size()));
    const auto started = std::chrono::steady_clock::now();
    const bool hybrid = !state.recurrent.empty();
    // What the offer before this call held beyond `limit` was left to be recomputed.
    const Offered* offer = offered(tokens, have, hybrid);
    const int64_t declined = offer != nullptr ? offer->reach - std::max(limit, have) : 0;
    int64_t restored = have;
    LoadTotals totals;
    try {
        const std::vector<BlockRow> chain = limit <= have ? std::vector<BlockRow>()
                                            : offer != nullptr && limit >= offer->reach
                                                ? offer->chain
                                                : restorable_chain(tokens, have, limit, hybrid);
        const int64_t reach = chain.empty() ? 0 : chain.back().begin + chain.back().n_tokens;
        if (reach > have) {
            restored = load_chain(chain, have, state.kv, totals);
            // A hybrid resumes only where its snapshot was taken: all the rows or nothing.
            if (hybrid && (restored != reach ||
                           !load_snapshot(chain.back().id, reach, state.recurrent, totals))) {
                restored = have;
            }
            if (restored > have && !state.kv.can_resume_at(restored)) {
                // Sliding-window layers lack rows of the window before `restored` (the blobs
                // hold only what their rings held when saved): not a state to continue from.
                // What was written may have overwritten the rings' rows before `have` too.
                state.kv.forget_ring_rows_before(restored);
                restored = have;
            }
            if (restored > have) state.kv.set_length(restored);
        }
        const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(
                                std::chrono::steady_clock::now() - started)
                                .count();
        Transaction tx(db_);
        const int64_t tick = next_tick();
        std::vector<int64_t> used;
        for (const BlockRow& b : chain) {
            if (b.begin < restored) used.push_back(b.id);
        }
        touch(used, tick);
        add_counter("restores", 1);
        add_counter("tokens_wanted", static_cast<int64_t>(tokens.size()) - have);
        if (declined > 0) {
            add_counter("restores_declined", 1);
            add_counter("tokens_declined", declined);
        }
        if (restored > have) {
            add_counter("restore_hits", 1);
            add_counter("tokens_restored", restored - have);
            add_counter("restore_micros", static_cast<int64_t>(micros));
            add_counter("restore_raw_bytes", totals.raw_bytes);
            add_counter("restore_stored_bytes", totals.stored_bytes);
        }
        tx.commit();
    } catch (const SqliteError& e) {
        warn(std::string("prefix state lookup failed: ") + e.what());
    }
    offered_.reset();
    return restored;
}

namespace {

// Bytes free (to this user) on the file system holding `db_path`; nullopt when unknown (an
// in-memory database, a path statvfs cannot read).
std::optional<uint64_t> free_bytes_near(const std::string& db_path) {
    if (db_path.empty() || db_path == ":memory:") return std::nullopt;
    std::string dir = db_path;
    struct statvfs st {};
    if (::statvfs(dir.c_str(), &st) != 0) {
        const size_t slash = dir.find_last_of('/');
        dir = slash == std::string::npos ? "." : slash == 0 ? "/" : dir.substr(0, slash);
        if (::statvfs(dir.c_str(), &st) != 0) return std::nullopt;
    }
    return static_cast<uint64_t>(st.f_bavail) * static_cast<uint64_t>(st.f_frsize);
}

}  // namespace

void StateStore::check_headroom(uint64_t bytes) const {
    const std::optional<uint64_t> free = free_bytes_near(db_.path());
    // The blob goes to the WAL first and to the database at the checkpoint: count it twice.
    if (!free || *free >= options_.min_free_bytes + 2 * bytes) return;
    throw SqliteError("the disk holding '" + db_.path() + "' has " + std::to_string(*free >> 20) +
                      " MiB free, and " + std::to_string(options_.min_free_bytes >> 20) +
                      " MiB are kept for messages (state is a cache; the messages are stored)");
}

int64_t StateStore::insert_block(int64_t parent_id, const StateKey& key, int64_t begin,
                                 std::span<const int32_t> block, const KvCache& kv, int64_t tick) {
    const int64_t end = begin + static_cast<int64_t>(block.size());
    const std::vector<uint8_t> raw = serialize_kv_rows(kv, begin, end);
    const RowsPacking packing = rows_packing(
        kv.type(), model_ != nullptr && model_->device() != nullptr, options_.zstd_level);
    const std::vector<uint8_t> packed = pack_blob(raw, packing.level, packing.planes);
    check_headroom(packed.size());
    Statement s = db_.prepare(
        "INSERT INTO state_blocks(key, parent_id, seed, begin_pos, n_tokens, tokens, "
        "stored_bytes, raw_bytes, last_used, created_at) VALUES (?,?,?,?,?,?,?,?,?,?)");
    s.bind_blob(1, key);
    if (parent_id == 0) {
        s.bind_null(2);
    } else {
        s.bind(2, parent_id);
    }
    s.bind_blob(3, seed());
    s.bind(4, begin);
    s.bind(5, static_cast<int64_t>(block.size()));
    s.bind_blob(6, tokens_to_blob(block));
    s.bind(7, static_cast<int64_t>(packed.size()));
    s.bind(8, static_cast<int64_t>(raw.size()));
    s.bind(9, tick);
    s.bind(10, utc_now(UtcFormat::Iso8601Seconds));
    s.run();
    const int64_t id = db_.last_insert_id();  // before the counters insert rows of their own
    Statement blob = db_.prepare("INSERT INTO state_blobs(block_id, state) VALUES (?, ?)");
    blob.bind(1, id).bind_blob(2, packed).run();
    add_counter("blocks_written", 1);
    add_counter("bytes_written", static_cast<int64_t>(packed.size()));
    return id;
}

void StateStore::drop_superseded_partials(int64_t parent_id, int64_t keep_id,
                                          std::span<const int32_t> tokens) {
    // A shorter sibling whose tokens all appear at the start of `tokens` adds nothing: the
    // new block's rows serve every prefix it served. Unless it carries a hybrid's snapshot:
    // that is the only place the recurrent state can resume from (a turn's prompt end, say).
    Statement s = children(parent_id, "SELECT id, tokens FROM state_blocks", "",
                           "id != ? AND n_tokens < ? AND id NOT IN "
                           "(SELECT block_id FROM state_snapshots)");
    s.bind(2, keep_id).bind(3, static_cast<int64_t>(tokens.size()));
    std::vector<int64_t> superseded;
    while (s.step()) {
        const auto sibling = blob_to_tokens(s.column_blob(1));
        if (common_prefix(sibling, tokens) == sibling.size()) superseded.push_back(s.column_int(0));
    }
    Statement del = db_.prepare("DELETE FROM state_blocks WHERE id = ?");
    for (int64_t id : superseded) {
        del.bind(1, id).run();
        del.reset();
    }
}

void StateStore::save_snapshot(int64_t block_id, const RecurrentState& state) {
    const std::vector<uint8_t> raw = serialize_recurrent(state);
    const std::vector<uint8_t> packed = pack_blob(raw, options_.zstd_level, sizeof(float));
    check_headroom(packed.size());
    Statement s = db_.prepare(
        "INSERT OR REPLACE INTO state_snapshots(block_id, position, state, stored_bytes, "
        "raw_bytes) VALUES (?,?,?,?,?)");
    s.bind(1, block_id).bind(2, state.position()).bind_blob(3, packed);
    s.bind(4, static_cast<int64_t>(packed.size())).bind(5, static_cast<int64_t>(raw.size()));
    s.run();
    add_counter("bytes_written", static_cast<int64_t>(packed.size()));
}

int64_t StateStore::save_blocks(std::span<const int32_t> tokens, size_t n, const KvCache& kv,
                                bool exact_end) {
    const auto block = static_cast<size_t>(options_.block_tokens);
    const int64_t tick = next_tick();
    std::vector<int64_t> used;
    StateKey previous = seed();
    int64_t parent_id = 0;
    size_t pos = 0;
    for (; pos + block <= n; pos += block) {
        const auto piece = tokens.subspan(pos, block);
        const StateKey key = chain_key(previous, piece);
        if (const auto found = lookup_block(db_, key)) {
            if (found->parent_id != parent_id || found->seed != seed() ||
                !std::equal(piece.begin(), piece.end(), found->tokens.begin(),
                            found->tokens.end())) {
                touch(used, tick);
                return 0;  // a hash collision: keep what is stored, store no more
            }
            used.push_back(found->id);
            add_counter("blocks_reused", 1);
            parent_id = found->id;
        } else {
            const int64_t id =
                insert_block(parent_id, key, static_cast<int64_t>(pos), piece, kv, tick);
            if (!last_save_new_from_) last_save_new_from_ = static_cast<int64_t>(pos);
            drop_superseded_partials(parent_id, id, piece);
            parent_id = id;
        }
        previous = key;
    }
    int64_t end_block = parent_id;  // the prefix ends with the last full block ...
    if (pos < n) {                  // ... or in a partial one after it
        const auto tail = tokens.subspan(pos, n - pos);
        const BlockRow covering = best_child(parent_id, static_cast<int64_t>(pos), tail);
        const auto tail_size = static_cast<int64_t>(tail.size());
        // A longer block starting with the tail serves its rows; a snapshot (exact_end) needs
        // a block that ends where the state does.
        if (covering.n_tokens == tail_size && (!exact_end || covering.stored_tokens == tail_size)) {
            used.push_back(covering.id);
            end_block = covering.id;
        } else {
            end_block = insert_block(parent_id, chain_key(previous, tail),
                                     static_cast<int64_t>(pos), tail, kv, tick);
            if (!last_save_new_from_) last_save_new_from_ = static_cast<int64_t>(pos);
            drop_superseded_partials(parent_id, end_block, tail);
        }
    }
    touch(used, tick);
    return end_block;
}

void StateStore::save(std::span<const int32_t> tokens, const InferenceState& state) {
    const KvCache& kv = state.kv;
    if (kv.type() != kv_type_) {
        warn("prefix state not saved: the cache's KV type differs from the store's");
        return;
    }
    const size_t n = std::min(tokens.size(), static_cast<size_t>(kv.length()));
    // A hybrid's rows are useful only with a snapshot of its recurrent state at their end.
    const bool hybrid = !state.recurrent.empty();
    last_save_new_from_.reset();
    offered_.reset();
    if (n == 0 || (hybrid && state.recurrent.position() != static_cast<int64_t>(n))) return;
    try {
        seed();  // before the transaction: the first call may hash the model file
        Transaction tx(db_);
        const int64_t end_block = save_blocks(tokens, n, kv, hybrid);
        if (hybrid && end_block != 0) save_snapshot(end_block, state.recurrent);
        tx.commit();
    } catch (const std::exception& e) {
        last_save_new_from_.reset();  // rolled back
        warn(std::string("prefix state not saved: ") + e.what());
        return;
    }
    try {
        evict_to_cap();
    } catch (const SqliteError& e) {
        warn(std::string("state eviction failed: ") + e.what());
    }
}

void StateStore::evict_to_cap() {
    offered_.reset();
    // A block's snapshot (hybrids) goes with it, so its bytes count with the block's.
    auto totals = [&] {
        Statement s = db_.prepare(
            "SELECT (SELECT COUNT(*) FROM state_blocks), "
            "(SELECT COALESCE(SUM(stored_bytes), 0) FROM state_blocks) + "
            "(SELECT COALESCE(SUM(stored_bytes), 0) FROM state_snapshots)");
        s.step();
        return std::pair<int64_t, int64_t>(s.column_int(0), s.column_int(1));
    };
    Transaction tx(db_);
    const auto [blocks_before, bytes_before] = totals();
    const auto cap = static_cast<int64_t>(std::min<uint64_t>(options_.cap_bytes, INT64_MAX));
    if (bytes_before <= cap) return;
    std::vector<int64_t> victims;
    {
        // Oldest use first; on a tie the later block, so a chain is cut from its end.
        Statement s = db_.prepare(
            "SELECT b.id, b.stored_bytes + COALESCE(n.stored_bytes, 0) FROM state_blocks b "
            "LEFT JOIN state_snapshots n ON n.block_id = b.id "
            "ORDER BY b.last_used ASC, b.begin_pos DESC");
        int64_t remaining = bytes_before;
        while (remaining > cap && s.step()) {
            victims.push_back(s.column_int(0));
            remaining -= s.column_int(1);
        }
    }
    Statement del = db_.prepare("DELETE FROM state_blocks WHERE id = ?");
    for (int64_t id : victims) {
        del.bind(1, id).run();  // cascades to any block chained after it
        del.reset();
    }
    const auto [blocks_after, bytes_after] = totals();
    add_counter("blocks_evicted", blocks_before - blocks_after);
    add_counter("bytes_evicted", bytes_before - bytes_after);
    tx.commit();
}

}  // namespace ember::sessions
