// Open-addressing hash tables for the vocabulary lookups.
//
// Internal to engine/tokenizer. Loading a 128K-token vocabulary with 280K merges does about a
// million lookups; node-based std::unordered_map spends most of that time on cache misses,
// these flat tables one or two per lookup.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace ember::tok {

inline size_t table_capacity(size_t n) {
    size_t cap = 16;
    while (cap < n + n / 2 + 1) cap *= 2;  // load factor <= 2/3
    return cap;
}

// Token text -> id. The strings live in the caller's vector, which must outlive the index and
// not change after build().
class TextIndex {
public:
    // Indexes tokens[i] for which keep(i) holds; for duplicate texts the first id wins.
    template <class Keep>
    void build(const std::vector<std::string>& tokens, Keep keep) {
        tokens_ = &tokens;
        slots_.assign(table_capacity(tokens.size()), Slot{0, -1});
        mask_ = slots_.size() - 1;
        for (size_t i = 0; i < tokens.size(); ++i) {
            if (tokens[i].empty() || !keep(i)) continue;
            const size_t h = std::hash<std::string_view>{}(tokens[i]);
            const auto tag = static_cast<uint32_t>(h >> 32);
            for (size_t s = h & mask_;; s = (s + 1) & mask_) {
                Slot& slot = slots_[s];
                if (slot.id < 0) {
                    slot = {tag, static_cast<int32_t>(i)};
                    max_len_ = std::max(max_len_, tokens[i].size());
                    break;
                }
                if (slot.tag == tag && tokens[static_cast<size_t>(slot.id)] == tokens[i]) break;
            }
        }
    }

    // The id of `text`, or -1.
    int32_t find(std::string_view text) const {
        if (slots_.empty() || text.size() > max_len_) return -1;
        const size_t h = std::hash<std::string_view>{}(text);
        const auto tag = static_cast<uint32_t>(h >> 32);
        for (size_t s = h & mask_;; s = (s + 1) & mask_) {
            const Slot& slot = slots_[s];
            if (slot.id < 0) return -1;
            if (slot.tag == tag && (*tokens_)[static_cast<size_t>(slot.id)] == text) return slot.id;
        }
    }

    size_t max_len() const { return max_len_; }

private:
    struct Slot {
        uint32_t tag;  // high hash bits: most mismatches never touch the string
        int32_t id;    // -1: empty
    };
    const std::vector<std::string>* tokens_ = nullptr;
    std::vector<Slot> slots_;
    size_t mask_ = 0;
    size_t max_len_ = 0;
};

// (left id, right id) -> (merge rank, merged id).
class PairIndex {
public:
    struct Value {
        int32_t rank;
        int32_t result;
    };

    void reserve(size_t n) {
        slots_.assign(table_capacity(n), Slot{kEmpty, {0, 0}});
        mask_ = slots_.size() - 1;
    }

    // Keeps the first value for a key (the lowest rank when inserted in rank order). The
    // number of inserts must not exceed what reserve() was given.
    void insert(int32_t left, int32_t right, Value v) {
        const uint64_t key = make_key(left, right);
        for (size_t s = mix(key) & mask_;; s = (s + 1) & mask_) {
            Slot& slot = slots_[s];
            if (slot.key == kEmpty) {
                slot = {key, v};
                return;
            }
            if (slot.key == key) return;
        }
    }

    const Value* find(int32_t left, int32_t right) const {
        if (slots_.empty()) return nullptr;
        const uint64_t key = make_key(left, right);
        for (size_t s = mix(key) & mask_;; s = (s + 1) & mask_) {
            const Slot& slot = slots_[s];
            if (slot.key == key) return &slot.value;
            if (slot.key == kEmpty) return nullptr;
        }
    }

private:
    static constexpr uint64_t kEmpty = ~uint64_t{0};  // ids are non-negative int32
    static uint64_t make_key(int32_t a, int32_t b) {
        return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
    }
    // splitmix64 finaliser: neighbouring ids must not land in neighbouring slots.
    static size_t mix(uint64_t x) {
        x ^= x >> 30;
        x *= 0xbf58476d1ce4e5b9ull;
        x ^= x >> 27;
        x *= 0x94d049bb133111ebull;
        x ^= x >> 31;
        return static_cast<size_t>(x);
    }
    struct Slot {
        uint64_t key;
        Value value;
    };
    std::vector<Slot> slots_;
    size_t mask_ = 0;
};

}  // namespace ember::tok
