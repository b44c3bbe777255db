#include "sessions/state_store.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <ctime>
#include <optional>
#include <utility>

#include "engine/model/state_io.h"
#include "sessions/blob_codec.h"

namespace ember::sessions {

namespace {

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

std::string now_iso8601() {
    const std::time_t t = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

int64_t counter(Database& db, const char* name) {
    Statement s = db.prepare("SELECT value FROM state_counters WHERE name = ?");
    s.bind(1, name);
    return s.step() ? s.column_int(0) : 0;
}

std::string human_bytes(double bytes) {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024 && u < 4) {
        bytes /= 1024;
        ++u;
    }
    char buf[32];
    std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", bytes, units[u]);
    return buf;
}

std::string percent(int64_t part, int64_t whole) {
    if (whole <= 0) return "n/a";
    char buf[16];
    std::snprintf(buf, sizeof buf, "%.1f%%", 100.0 * static_cast<double>(part) / whole);
    return buf;
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
    return st;
}

std::string format_state_stats(const StateStats& s, uint64_t cap_bytes) {
    std::string out;
    auto line = [&](const std::string& text) { out += text + "\n"; };
    line("state: " + std::to_string(s.blocks) + " blocks (" + std::to_string(s.partial_blocks) +
         " partial) covering " + std::to_string(s.tokens) + " tokens, " + std::to_string(s.models) +
         " model/KV-type key(s)");
    line("size:  " + human_bytes(static_cast<double>(s.stored_bytes)) + " stored (" +
         human_bytes(static_cast<double>(s.raw_bytes)) + " before compression), cap " +
         human_bytes(static_cast<double>(cap_bytes)));
    line("restore: " + std::to_string(s.restore_hits) + " of " + std::to_string(s.restores) +
         " lookups hit (" + percent(s.restore_hits, s.restores) + "), " +
         std::to_string(s.tokens_restored) + " of " + std::to_string(s.tokens_wanted) +
         " wanted tokens restored (" + percent(s.tokens_restored, s.tokens_wanted) + ")");
    line("save:  " + std::to_string(s.blocks_written) + " blocks written (" +
         human_bytes(static_cast<double>(s.bytes_written)) + "), " +
         std::to_string(s.blocks_reused) + " already stored");
    line("eviction: " + std::to_string(s.blocks_evicted) + " blocks evicted (" +
         human_bytes(static_cast<double>(s.bytes_evicted)) + "), " +
         std::to_string(s.blobs_dropped) + " corrupted blobs dropped");
    return out;
}

StateStore::StateStore(Database& db, std::string_view model_fingerprint, KvType kv_type,
                       StateStoreOptions options)
    : db_(db),
      seed_(state_seed(model_fingerprint, kv_type, options.block_tokens)),
      kv_type_(kv_type),
      options_(options) {
    if (options_.block_tokens <= 0) options_.block_tokens = 64;
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
    Statement s = db_.prepare("UPDATE state_blocks SET last_used = ? WHERE id = ?");
    for (int64_t id : ids) {
        s.bind(1, tick).bind(2, id).run();
        s.reset();
    }
}

StateStore::BlockRow StateStore::best_child(int64_t parent_id, int64_t begin,
                                            std::span<const int32_t> tail) {
    Statement s = db_.prepare(
        parent_id == 0
            ? "SELECT id, tokens FROM state_blocks WHERE parent_id IS NULL AND seed = ? "
              "AND begin_pos = ?"
            : "SELECT id, tokens FROM state_blocks WHERE parent_id = ? AND begin_pos = ?");
    if (parent_id == 0) {
        s.bind_blob(1, seed_);
    } else {
        s.bind(1, parent_id);
    }
    s.bind(2, begin);
    BlockRow best{0, begin, 0};
    while (s.step()) {
        const auto tokens = blob_to_tokens(s.column_blob(1));
        const auto n = static_cast<int64_t>(common_prefix(tokens, tail));
        if (n > best.n_tokens) best = BlockRow{s.column_int(0), begin, n};
    }
    return best;
}

std::vector<StateStore::BlockRow> StateStore::find_chain(std::span<const int32_t> tokens) {
    const auto block = static_cast<size_t>(options_.block_tokens);
    std::vector<BlockRow> chain;
    StateKey previous = seed_;
    int64_t parent_id = 0;
    size_t pos = 0;
    while (pos + block <= tokens.size()) {
        const auto piece = tokens.subspan(pos, block);
        const StateKey key = chain_key(previous, piece);
        const auto found = lookup_block(db_, key);
        // The key says "probably this prefix"; the stored tokens and links make it certain.
        if (!found || found->seed != seed_ || found->parent_id != parent_id ||
            found->begin != static_cast<int64_t>(pos) ||
            !std::equal(piece.begin(), piece.end(), found->tokens.begin(), found->tokens.end())) {
            break;
        }
        chain.push_back({found->id, static_cast<int64_t>(pos), static_cast<int64_t>(block)});
        parent_id = found->id;
        previous = key;
        pos += block;
    }
    if (pos < tokens.size()) {
        const BlockRow tail = best_child(parent_id, static_cast<int64_t>(pos), tokens.subspan(pos));
        if (tail.n_tokens > 0) chain.push_back(tail);
    }
    return chain;
}

int64_t StateStore::load_chain(const std::vector<BlockRow>& chain, int64_t have, KvCache& kv) {
    int64_t restored = have;
    for (const BlockRow& b : chain) {
        const int64_t end = b.begin + b.n_tokens;
        if (end <= have) continue;
        Statement s = db_.prepare("SELECT state FROM state_blocks WHERE id = ?");
        s.bind(1, b.id);
        if (!s.step()) break;  // evicted meanwhile by another process
        try {
            const std::vector<uint8_t> raw = unpack_blob(s.column_blob(0));
            const KvBlobInfo info = inspect_kv_rows(raw);
            if (info.begin != b.begin || info.begin + info.count < end) {
                throw BlobError("state blob: rows [" + std::to_string(info.begin) + ", +" +
                                std::to_string(info.count) + ") do not match the block");
            }
            apply_kv_rows(raw, kv, std::max(have, b.begin), end);
        } catch (const std::exception& e) {
            // BlobError or StateFormatError: never restore it, drop it and what chains to it.
            Transaction tx(db_);
            Statement del = db_.prepare("DELETE FROM state_blocks WHERE id = ?");
            del.bind(1, b.id).run();
            add_counter("blobs_dropped", 1);
            tx.commit();
            warn("stored state for tokens " + std::to_string(b.begin) + ".." + std::to_string(end) +
                 " in '" + db_.path() + "' was unreadable (" + e.what() +
                 "); dropped it, recomputing");
            break;
        }
        restored = end;
    }
    return restored;
}

int64_t StateStore::restore(std::span<const int32_t> tokens, int64_t have, InferenceState& state) {
    if (static_cast<int64_t>(tokens.size()) <= have) return have;
    int64_t restored = have;
    try {
        const std::vector<BlockRow> chain = find_chain(tokens);
        const int64_t reach = chain.empty() ? 0 : chain.back().begin + chain.back().n_tokens;
        if (reach > have) {
            restored = load_chain(chain, have, state.kv);
            if (restored > have) state.kv.set_length(restored);
        }
        Transaction tx(db_);
        const int64_t tick = next_tick();
        std::vector<int64_t> used;
        for (const BlockRow& b : chain) {
            if (b.begin < restored) used.push_back(b.id);
        }
        touch(used, tick);
        add_counter("restores", 1);
        add_counter("tokens_wanted", static_cast<int64_t>(tokens.size()) - have);
        if (restored > have) {
            add_counter("restore_hits", 1);
            add_counter("tokens_restored", restored - have);
        }
        tx.commit();
    } catch (const SqliteError& e) {
        warn(std::string("prefix state lookup failed: ") + e.what());
    }
    return restored;
}

int64_t StateStore::insert_block(int64_t parent_id, const StateKey& key, int64_t begin,
                                 std::span<const int32_t> block, const KvCache& kv, int64_t tick) {
    const int64_t end = begin + static_cast<int64_t>(block.size());
    const std::vector<uint8_t> raw = serialize_kv_rows(kv, begin, end);
    const std::vector<uint8_t> packed = pack_blob(raw, options_.zstd_level);
    Statement s = db_.prepare(
        "INSERT INTO state_blocks(key, parent_id, seed, begin_pos, n_tokens, tokens, state, "
        "stored_bytes, raw_bytes, last_used, created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?)");
    s.bind_blob(1, key);
    if (parent_id == 0) {
        s.bind_null(2);
    } else {
        s.bind(2, parent_id);
    }
    s.bind_blob(3, seed_);
    s.bind(4, begin);
    s.bind(5, static_cast<int64_t>(block.size()));
    s.bind_blob(6, tokens_to_blob(block));
    s.bind_blob(7, packed);
    s.bind(8, static_cast<int64_t>(packed.size()));
    s.bind(9, static_cast<int64_t>(raw.size()));
    s.bind(10, tick);
    s.bind(11, now_iso8601());
    s.run();
    const int64_t id = db_.last_insert_id();  // before the counters insert rows of their own
    add_counter("blocks_written", 1);
    add_counter("bytes_written", static_cast<int64_t>(packed.size()));
    return id;
}

void StateStore::drop_superseded_partials(int64_t parent_id, int64_t keep_id,
                                          std::span<const int32_t> tokens) {
    // A shorter sibling whose tokens all appear at the start of `tokens` adds nothing: the
    // new block's rows serve every prefix it served.
    Statement s = db_.prepare(
        parent_id == 0 ? "SELECT id, tokens FROM state_blocks WHERE parent_id IS NULL AND "
                         "seed = ? AND id != ? AND n_tokens < ?"
                       : "SELECT id, tokens FROM state_blocks WHERE parent_id = ? AND id != ? "
                         "AND n_tokens < ?");
    if (parent_id == 0) {
        s.bind_blob(1, seed_);
    } else {
        s.bind(1, parent_id);
    }
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

void StateStore::save(std::span<const int32_t> tokens, const InferenceState& state) {
    const KvCache& kv = state.kv;
    if (kv.type() != kv_type_) {
        warn("prefix state not saved: the cache's KV type differs from the store's");
        return;
    }
    const size_t n = std::min(tokens.size(), static_cast<size_t>(kv.length()));
    const auto block = static_cast<size_t>(options_.block_tokens);
    try {
        Transaction tx(db_);
        const int64_t tick = next_tick();
        std::vector<int64_t> used;
        StateKey previous = seed_;
        int64_t parent_id = 0;
        size_t pos = 0;
        bool chain_ok = true;
        for (; pos + block <= n; pos += block) {
            const auto piece = tokens.subspan(pos, block);
            const StateKey key = chain_key(previous, piece);
            if (const auto found = lookup_block(db_, key)) {
                if (found->parent_id != parent_id || found->seed != seed_ ||
                    !std::equal(piece.begin(), piece.end(), found->tokens.begin(),
                                found->tokens.end())) {
                    chain_ok = false;  // a hash collision: keep what is stored, store no more
                    break;
                }
                used.push_back(found->id);
                add_counter("blocks_reused", 1);
                parent_id = found->id;
            } else {
                const int64_t id =
                    insert_block(parent_id, key, static_cast<int64_t>(pos), piece, kv, tick);
                drop_superseded_partials(parent_id, id, piece);
                parent_id = id;
            }
            previous = key;
        }
        if (chain_ok && pos < n) {
            const auto tail = tokens.subspan(pos, n - pos);
            const BlockRow covering = best_child(parent_id, static_cast<int64_t>(pos), tail);
            if (covering.n_tokens == static_cast<int64_t>(tail.size())) {
                used.push_back(covering.id);
            } else {
                const int64_t id = insert_block(parent_id, chain_key(previous, tail),
                                                static_cast<int64_t>(pos), tail, kv, tick);
                drop_superseded_partials(parent_id, id, tail);
            }
        }
        touch(used, tick);
        tx.commit();
    } catch (const std::exception& e) {
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
    auto totals = [&] {
        Statement s =
            db_.prepare("SELECT COUNT(*), COALESCE(SUM(stored_bytes), 0) FROM state_blocks");
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
            "SELECT id, stored_bytes FROM state_blocks ORDER BY last_used ASC, begin_pos DESC");
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
