#include "sessions/state_tier.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>

#include "engine/model/state_io.h"
#include "engine/util/fan_out.h"

namespace ember::sessions {

namespace {

// Threads copying a restore's blocks: past eight, the copies wait on memory, not on each other
// (the H200 machine's host: 35 GB/s on four, 50 on eight, 39 on sixteen).
constexpr int64_t kMaxCopyThreads = 8;

// What a block costs besides its rows, snapshot and tokens: its map nodes, its place in the
// LRU order and its parent's list of children, about.
constexpr uint64_t kBlockOverheadBytes = 192;

size_t common_prefix(std::span<const int32_t> a, std::span<const int32_t> b) {
    const size_t n = std::min(a.size(), b.size());
    size_t i = 0;
    while (i < n && a[i] == b[i]) ++i;
    return i;
}

}  // namespace

size_t StateTier::KeyHash::operator()(const StateKey& key) const {
    // The key is a hash already: its first eight bytes are as good as any.
    uint64_t h = 0;
    std::memcpy(&h, key.data(), sizeof h);
    return static_cast<size_t>(h);
}

uint64_t StateTier::Block::bytes() const {
    return rows.size() + snapshot.size() + tokens.size() * sizeof(int32_t) + kBlockOverheadBytes;
}

StateTier::StateTier(uint64_t cap_bytes) : cap_bytes_(cap_bytes) {
    stats_.cap_bytes = cap_bytes;
}

double StateTier::restore_bytes_per_second() const {
    const std::lock_guard lock(mutex_);
    // A few small restores measure the bookkeeping more than the copying.
    if (stats_.restore_seconds <= 0 || stats_.bytes_restored < 1'000'000) {
        return kAssumedBytesPerSecond;
    }
    return static_cast<double>(stats_.bytes_restored) / stats_.restore_seconds;
}

void StateTier::pin_rows(bool on) {
    const std::lock_guard lock(mutex_);
    pin_rows_ = on;
}

StateTierStats StateTier::stats() const {
    const std::lock_guard lock(mutex_);
    StateTierStats s = stats_;
    s.bytes = bytes_;
    s.blocks = static_cast<int64_t>(blocks_.size());
    s.snapshots = 0;
    for (const auto& [key, block] : blocks_) s.snapshots += block.snapshot.empty() ? 0 : 1;
    return s;
}

uint64_t StateTier::bytes() const {
    const std::lock_guard lock(mutex_);
    return bytes_;
}

void StateTier::forget_completeness() {
    const std::lock_guard lock(mutex_);
    for (auto& [key, block] : blocks_) block.complete = false;
    complete_seeds_.clear();
}

bool StateTier::is_complete(const StateKey& key) const {
    if (const auto it = blocks_.find(key); it != blocks_.end()) return it->second.complete;
    const auto seed = complete_seeds_.find(key);  // a chain's seed: its roots
    return seed != complete_seeds_.end() && seed->second;
}

void StateTier::set_complete(const StateKey& key, bool complete) {
    if (const auto it = blocks_.find(key); it != blocks_.end()) {
        it->second.complete = complete;
    } else if (complete) {
        complete_seeds_[key] = true;
    } else {
        complete_seeds_.erase(key);
    }
}

void StateTier::store_holds_no_roots(const StateKey& seed) {
    const std::lock_guard lock(mutex_);
    // Only before the tier holds any of its blocks: those came from somewhere.
    if (!children_.contains(seed)) complete_seeds_[seed] = true;
}

std::vector<StateTier::Block*> StateTier::full_blocks(const StateKey& seed, int64_t block_tokens,
                                                      std::span<const int32_t> tokens,
                                                      int64_t limit) {
    const auto block = static_cast<size_t>(block_tokens);
    const auto end = static_cast<size_t>(std::min<int64_t>(limit, std::ssize(tokens)));
    std::vector<Block*> chain;
    StateKey previous = seed;
    for (size_t pos = 0; pos + block <= end; pos += block) {
        const auto piece = tokens.subspan(pos, block);
        const StateKey key = chain_key(previous, piece);
        const auto it = blocks_.find(key);
        // The key says "probably this prefix"; the stored tokens and links make it certain.
        if (it == blocks_.end() || it->second.parent != previous ||
            it->second.begin != static_cast<int64_t>(pos) ||
            !std::equal(piece.begin(), piece.end(), it->second.tokens.begin(),
                        it->second.tokens.end())) {
            break;
        }
        chain.push_back(&it->second);
        previous = key;
    }
    return chain;
}

StateTier::Block* StateTier::best_child(const StateKey& parent, int64_t begin,
                                        std::span<const int32_t> tail, int64_t& shared) {
    shared = 0;
    const auto kids = children_.find(parent);
    if (kids == children_.end()) return nullptr;
    Block* best = nullptr;
    for (const StateKey& key : kids->second) {
        Block& b = blocks_.at(key);
        if (b.begin != begin) continue;
        const auto n = static_cast<int64_t>(common_prefix(b.tokens, tail));
        // Longest shared prefix first; among equals, the block ending exactly there (a
        // hybrid's snapshot can only sit at a block's end).
        if (n > shared || (n == shared && n > 0 && std::ssize(b.tokens) == n)) {
            shared = n;
            best = &b;
        }
    }
    return shared > 0 ? best : nullptr;
}

StateTier::Walk StateTier::walk(const StateKey& seed, int64_t block_tokens,
                                std::span<const int32_t> tokens, int64_t have, int64_t limit,
                                bool hybrid) {
    Walk w;
    w.reach = have;
    limit = std::min<int64_t>(limit, std::ssize(tokens));
    if (!hybrid) {
        w.chain = full_blocks(seed, block_tokens, tokens, limit);
        const int64_t pos = std::ssize(w.chain) * block_tokens;
        const StateKey parent = w.chain.empty() ? seed : w.chain.back()->key;
        int64_t shared = 0;
        w.used_of_last = block_tokens;
        if (pos < limit) {
            const auto tail =
                tokens.subspan(static_cast<size_t>(pos), static_cast<size_t>(limit - pos));
            if (Block* b = best_child(parent, pos, tail, shared)) {
                w.chain.push_back(b);
                w.used_of_last = shared;
            }
        }
        const int64_t reach = w.chain.empty() ? 0 : w.chain.back()->begin + w.used_of_last;
        // The database continues a prompt only from the last full block (a partial block has
        // no children): the tier knows whether it holds all of those.
        w.store_may_hold_more = reach < limit && !is_complete(parent);
        if (reach > have) w.reach = reach;
        return w;
    }
    // A hybrid resumes only at a snapshot, which folds in every token of its block, so the
    // block must match in full; one prompt token must remain for the first logits.
    const int64_t last = std::min<int64_t>(limit, std::ssize(tokens) - 1);
    const std::vector<Block*> full = full_blocks(seed, block_tokens, tokens, std::ssize(tokens));
    // Levels from the deepest: the first with a usable snapshot wins; within a level, the
    // longest block.
    for (size_t level = full.size() + 1; level-- > 0;) {
        const int64_t begin = static_cast<int64_t>(level) * block_tokens;
        if (begin >= last) continue;
        const StateKey parent = level == 0 ? seed : full[level - 1]->key;
        const auto kids = children_.find(parent);
        if (kids == children_.end()) continue;
        const auto tail = tokens.subspan(static_cast<size_t>(begin));
        Block* best = nullptr;
        for (const StateKey& key : kids->second) {
            Block& b = blocks_.at(key);
            const int64_t end = b.begin + std::ssize(b.tokens);
            if (b.begin != begin || b.snapshot.empty() || end <= have || end > last) continue;
            if (common_prefix(b.tokens, tail) != b.tokens.size()) continue;
            if (best == nullptr || b.tokens.size() > best->tokens.size()) best = &b;
        }
        if (best == nullptr) continue;
        w.chain.assign(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(level));
        w.chain.push_back(best);
        w.used_of_last = std::ssize(best->tokens);
        w.reach = best->begin + w.used_of_last;
        // The database may hold a deeper (or longer) snapshot among the children of any
        // block from this level's parent (the seed for the roots) down the full chain.
        w.store_may_hold_more = false;
        for (size_t j = level; j <= full.size(); ++j) {
            const StateKey& p = j == 0 ? seed : full[j - 1]->key;
            if (static_cast<int64_t>(j) * block_tokens < last && !is_complete(p)) {
                w.store_may_hold_more = true;
            }
        }
        return w;
    }
    w.store_may_hold_more = true;
    return w;
}

TierMatch StateTier::match(const StateKey& seed, int64_t block_tokens,
                           std::span<const int32_t> tokens, int64_t have, int64_t limit,
                           bool hybrid) {
    const std::lock_guard lock(mutex_);
    const Walk w = walk(seed, block_tokens, tokens, have, limit, hybrid);
    TierMatch m;
    m.reach = w.reach;
    m.store_may_hold_more = w.store_may_hold_more;
    if (w.reach <= have) return m;
    for (size_t i = 0; i < w.chain.size(); ++i) {
        const Block& b = *w.chain[i];
        const int64_t size = std::ssize(b.tokens);
        const int64_t end = b.begin + (i + 1 == w.chain.size() ? w.used_of_last : size);
        const int64_t from = std::max(have, b.begin);
        if (end <= from) continue;
        m.bytes += static_cast<int64_t>(b.rows.size()) * (end - from) / size;
    }
    if (hybrid) m.bytes += static_cast<int64_t>(w.chain.back()->snapshot.size());
    return m;
}

int64_t StateTier::copy_rows(const Walk& w, int64_t have, InferenceState& state, bool hybrid) {
    // The blocks past `have`, each with the rows it brings.
    struct Piece {
        const Block* block = nullptr;
        int64_t from = 0;
        int64_t end = 0;
        bool done = false;
    };
    std::vector<Piece> pieces;
    for (size_t i = 0; i < w.chain.size(); ++i) {
        const Block& b = *w.chain[i];
        const int64_t end =
            b.begin + (i + 1 == w.chain.size() ? w.used_of_last : std::ssize(b.tokens));
        if (end > have) pieces.push_back({&b, std::max(have, b.begin), end});
    }
    if (pieces.empty()) return have;
    KvCache& kv = state.kv;
    // Blocks write their own rows, so they are copied side by side as the database's are
    // (state_store.cpp), into chunks reserved and mapped beforehand; a sliding layer's ring
    // slot serves positions a window apart, and then the later block must write last.
    const int threads =
        kv.ring_positions() > 0
            ? 1
            : fan_out_threads(std::min<int64_t>(kMaxCopyThreads, std::ssize(pieces)));
    kv.reserve(std::min(pieces.back().end, kv.capacity()), KvCache::Pages::SmallPages);
    fan_out(threads, [&](int t) {
        kv.populate(static_cast<size_t>(t), static_cast<size_t>(threads));
        for (size_t i = static_cast<size_t>(t); i < pieces.size();
             i += static_cast<size_t>(threads)) {
            try {
                apply_kv_rows(pieces[i].block->rows.bytes(), kv, pieces[i].from, pieces[i].end);
            } catch (const std::exception&) {
                return;  // the blocks after this one are of no use
            }
            pieces[i].done = true;
        }
    });
    // The tier holds what serialize_kv_rows wrote from a state of this very shape, so a
    // failure is not expected; the rows up to it stand (a hybrid's do not: it resumes only
    // with its snapshot).
    int64_t restored = have;
    for (const Piece& p : pieces) {
        if (!p.done) break;
        restored = p.end;
    }
    if (!hybrid) return restored;
    const Block& last = *w.chain.back();
    try {
        if (restored != pieces.back().end ||
            inspect_recurrent(last.snapshot).position != restored) {
            return have;
        }
        apply_recurrent(last.snapshot, state.recurrent);
    } catch (const std::exception&) {
        return have;
    }
    return restored;
}

int64_t StateTier::restore(const StateKey& seed, int64_t block_tokens,
                           std::span<const int32_t> tokens, int64_t have, int64_t limit,
                           InferenceState& state, TierMatch* match) {
    const std::lock_guard lock(mutex_);
    const auto started = std::chrono::steady_clock::now();
    const bool hybrid = !state.recurrent.empty();
    const Walk w = walk(seed, block_tokens, tokens, have, limit, hybrid);
    if (match != nullptr) {
        match->reach = w.reach;
        match->store_may_hold_more = w.store_may_hold_more;
    }
    if (w.reach <= have) return have;
    int64_t restored = copy_rows(w, have, state, hybrid);
    if (restored > have && !state.kv.can_resume_at(restored)) {
        // Sliding-window layers lack rows of the window before `restored` (a block holds
        // only what their rings held when it was saved), as in the database's blocks.
        state.kv.forget_ring_rows_before(restored);
        restored = have;
    }
    if (restored <= have) return have;
    state.kv.set_length(restored);
    const uint64_t tick = ++tick_;
    int64_t bytes = 0;
    for (Block* b : w.chain) {
        touch(*b, tick);
        if (b->begin + std::ssize(b->tokens) > have) bytes += static_cast<int64_t>(b->rows.size());
    }
    stats_.restores += 1;
    stats_.tokens_restored += restored - have;
    stats_.bytes_restored += bytes;
    stats_.restore_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    return restored;
}

void StateTier::touch(Block& block, uint64_t tick) {
    lru_.erase(LruKey{block.tick, -block.begin, block.key});
    block.tick = tick;
    lru_.insert(LruKey{block.tick, -block.begin, block.key});
}

// `key` by value: callers pass a key that lives in lru_, whose node this erases.
void StateTier::evict(const StateKey key) {
    const auto it = blocks_.find(key);
    if (it == blocks_.end()) return;
    // The blocks continuing it go with it: a chain is of no use without its start.
    const StateKey parent = it->second.parent;
    std::vector<StateKey> doomed{key};
    for (size_t i = 0; i < doomed.size(); ++i) {
        const auto kids = children_.find(doomed[i]);
        if (kids == children_.end()) continue;
        doomed.insert(doomed.end(), kids->second.begin(), kids->second.end());
        children_.erase(kids);
    }
    for (const StateKey& k : doomed) {
        const auto b = blocks_.find(k);
        lru_.erase(LruKey{b->second.tick, -b->second.begin, k});
        bytes_ -= b->second.bytes();
        blocks_.erase(b);
        stats_.blocks_evicted += 1;
    }
    if (const auto siblings = children_.find(parent); siblings != children_.end()) {
        std::erase(siblings->second, key);
        if (siblings->second.empty()) children_.erase(siblings);
    }
    // The database still holds what left: the parent (or the seed, for a root) no longer
    // has all its continuations here.
    set_complete(parent, false);
}

bool StateTier::make_room(uint64_t bytes, const std::vector<StateKey>& keep) {
    if (bytes > cap_bytes_) return false;
    while (bytes_ + bytes > cap_bytes_) {
        // The least recently used block outside the chain being saved.
        auto victim = lru_.begin();
        while (victim != lru_.end() &&
               std::find(keep.begin(), keep.end(), std::get<2>(*victim)) != keep.end()) {
            ++victim;
        }
        if (victim == lru_.end()) return false;
        evict(std::get<2>(*victim));
    }
    return true;
}

StateTier::Block* StateTier::insert(Block block, const std::vector<StateKey>& keep) {
    if (!make_room(block.bytes(), keep)) {
        stats_.blocks_refused += 1;
        // The database keeps it: its parent's continuations are no longer all here.
        set_complete(block.parent, false);
        return nullptr;
    }
    const StateKey key = block.key;
    const StateKey parent = block.parent;
    bytes_ += block.bytes();
    auto [it, inserted] = blocks_.emplace(key, std::move(block));
    if (!inserted) return nullptr;         // guarded by the callers (a key found is verified)
    if (pin_rows_) it->second.rows.pin();  // kept: only then worth locking
    children_[parent].push_back(key);
    lru_.insert(LruKey{it->second.tick, -it->second.begin, key});
    stats_.blocks_stored += 1;
    return &it->second;
}

void StateTier::drop_superseded_partials(const StateKey& parent, const Block& kept) {
    // As the database does: a shorter sibling whose tokens all start `kept`'s adds nothing
    // (kept's rows serve every prefix it served), unless it carries a snapshot.
    const auto kids = children_.find(parent);
    if (kids == children_.end()) return;
    std::vector<StateKey> superseded;
    for (const StateKey& key : kids->second) {
        const Block& b = blocks_.at(key);
        if (key != kept.key && b.begin == kept.begin && b.tokens.size() < kept.tokens.size() &&
            b.snapshot.empty() && common_prefix(b.tokens, kept.tokens) == b.tokens.size()) {
            superseded.push_back(key);
        }
    }
    const bool was_complete = is_complete(parent);
    for (const StateKey& key : superseded) evict(key);
    // Not a loss: the database drops the same siblings.
    if (was_complete) set_complete(parent, true);
}

void StateTier::save(const StateKey& seed, int64_t block_tokens, std::span<const int32_t> tokens,
                     const InferenceState& state, std::optional<int64_t> store_new_from) {
    const KvCache& kv = state.kv;
    const auto n = static_cast<size_t>(std::min<int64_t>(std::ssize(tokens), kv.length()));
    // A hybrid's rows are useful only with a snapshot of its recurrent state at their end.
    const bool hybrid = !state.recurrent.empty();
    if (n == 0 || (hybrid && state.recurrent.position() != static_cast<int64_t>(n))) return;
    const std::lock_guard lock(mutex_);
    const uint64_t tick = ++tick_;
    // A block new here is complete when the database stored it in the same save: it held
    // nothing continuing it before.
    const auto fresh = [&](int64_t begin) { return store_new_from && begin >= *store_new_from; };
    const auto make_block = [&](const StateKey& key, const StateKey& parent, size_t pos,
                                std::span<const int32_t> piece) {
        Block b;
        b.key = key;
        b.parent = parent;
        b.begin = static_cast<int64_t>(pos);
        b.tokens.assign(piece.begin(), piece.end());
        b.rows = PinnedBytes(serialize_kv_rows(kv, b.begin, b.begin + std::ssize(piece)));
        b.complete = fresh(b.begin);
        b.tick = tick;
        return b;
    };
    const auto block = static_cast<size_t>(block_tokens);
    std::vector<StateKey> keep;  // the chain so far: never dropped to make room
    StateKey previous = seed;
    Block* end_block = nullptr;
    size_t pos = 0;
    for (; pos + block <= n; pos += block) {
        const auto piece = tokens.subspan(pos, block);
        const StateKey key = chain_key(previous, piece);
        Block* b = nullptr;
        if (const auto it = blocks_.find(key); it != blocks_.end()) {
            if (it->second.parent != previous || it->second.begin != static_cast<int64_t>(pos) ||
                !std::equal(piece.begin(), piece.end(), it->second.tokens.begin(),
                            it->second.tokens.end())) {
                return;  // a hash collision: keep what is held, hold no more
            }
            b = &it->second;
            touch(*b, tick);
        } else {
            b = insert(make_block(key, previous, pos, piece), keep);
            if (b == nullptr) return;
            drop_superseded_partials(previous, *b);
        }
        keep.push_back(key);
        end_block = b;
        previous = key;
    }
    if (pos < n) {  // the tail after the last full block
        const auto tail = tokens.subspan(pos, n - pos);
        int64_t shared = 0;
        Block* covering = best_child(previous, static_cast<int64_t>(pos), tail, shared);
        const auto tail_size = std::ssize(tail);
        // A longer block starting with the tail serves its rows; a snapshot needs a block
        // that ends where the state does.
        if (covering != nullptr && shared == tail_size &&
            (!hybrid || std::ssize(covering->tokens) == tail_size)) {
            touch(*covering, tick);
            end_block = covering;
        } else {
            const StateKey key = chain_key(previous, tail);
            if (blocks_.contains(key)) return;  // a collision (an equal block was covering)
            end_block = insert(make_block(key, previous, pos, tail), keep);
            if (end_block == nullptr) return;
            drop_superseded_partials(previous, *end_block);
        }
        keep.push_back(end_block->key);
    }
    if (!hybrid || end_block == nullptr) return;
    std::vector<uint8_t> snapshot = serialize_recurrent(state.recurrent);
    const uint64_t old_size = end_block->snapshot.size();
    if (snapshot.size() > old_size && !make_room(snapshot.size() - old_size, keep)) {
        // Its rows without the snapshot are of no use to a hybrid: the block goes.
        evict(end_block->key);
        stats_.blocks_refused += 1;
        return;
    }
    bytes_ = bytes_ - old_size + snapshot.size();
    end_block->snapshot = std::move(snapshot);
}

}  // namespace ember::sessions
