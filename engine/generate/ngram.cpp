#include "engine/generate/ngram.h"

#include <algorithm>
#include <stdexcept>

namespace ember {

NgramTable::NgramTable(NgramOptions options) : options_(options) {
    if (options_.min_context < 1 || options_.max_context < options_.min_context) {
        throw std::invalid_argument("n-gram contexts must satisfy 1 <= min <= max");
    }
    if (options_.max_contexts < 16) throw std::invalid_argument("n-gram table too small");
}

void NgramTable::clear() {
    map_.clear();
    history_.clear();
    tick_ = 0;
}

uint64_t NgramTable::context_key(const int32_t* end, int n) {
    // FNV-1a over the token values, seeded with the length. Collisions only cost a bad draft
    // (the model verifies every draft), never a wrong output.
    uint64_t h = 1469598103934665603ull ^ static_cast<uint64_t>(n);
    for (int i = n; i > 0; --i) {
        h ^= static_cast<uint32_t>(end[-i]);
        h *= 1099511628211ull;
    }
    return h;
}

void NgramTable::record(uint64_t key, int32_t next) {
    Entry& e = map_[key];
    e.last_used = tick_;
    ++e.total;
    Candidate* slot = nullptr;
    for (auto& c : e.candidates) {
        if (c.token == next) {
            slot = &c;
            break;
        }
    }
    if (slot == nullptr) {
        // Replace the weakest candidate (lowest count, then oldest).
        slot = &*std::min_element(
            e.candidates.begin(), e.candidates.end(), [](const Candidate& a, const Candidate& b) {
                return a.count != b.count ? a.count < b.count : a.last_seen < b.last_seen;
            });
        *slot = Candidate{next, 0, 0};
    }
    ++slot->count;
    slot->last_seen = tick_;
}

void NgramTable::evict_oldest_half() {
    std::vector<uint64_t> ages;
    ages.reserve(map_.size());
    for (const auto& [key, e] : map_) ages.push_back(e.last_used);
    auto mid = ages.begin() + static_cast<std::ptrdiff_t>(ages.size() / 2);
    std::nth_element(ages.begin(), mid, ages.end());
    const uint64_t cutoff = *mid;
    for (auto it = map_.begin(); it != map_.end();) {
        it = it->second.last_used < cutoff ? map_.erase(it) : std::next(it);
    }
}

void NgramTable::add(std::span<const int32_t> tokens) {
    for (int32_t token : tokens) {
        ++tick_;
        const size_t have = history_.size();
        for (int n = options_.min_context; n <= options_.max_context; ++n) {
            if (static_cast<size_t>(n) > have) break;
            record(context_key(history_.data() + have, n), token);
        }
        history_.push_back(token);
        if (map_.size() > options_.max_contexts) evict_oldest_half();
    }
}

int32_t NgramTable::best_next(const int32_t* end, size_t available) const {
    for (int n = options_.max_context; n >= options_.min_context; --n) {
        if (static_cast<size_t>(n) > available) continue;
        const auto it = map_.find(context_key(end, n));
        if (it == map_.end()) continue;
        const Entry& e = it->second;
        const Candidate* best = nullptr;
        for (const auto& c : e.candidates) {
            if (c.count == 0) continue;
            if (best == nullptr || c.count > best->count ||
                (c.count == best->count && c.last_seen > best->last_seen)) {
                best = &c;
            }
        }
        if (best != nullptr && best->count >= options_.min_support &&
            static_cast<float>(best->count) >=
                options_.min_confidence * static_cast<float>(e.total)) {
            return best->token;
        }
    }
    return -1;
}

void NgramTable::draft(int max_tokens, std::vector<int32_t>& out) const {
    out.clear();
    if (max_tokens <= 0 || history_.empty()) return;
    // Work on the tail of the history plus the drafts, so chained lookups see the drafts.
    const size_t tail = std::min(history_.size(), static_cast<size_t>(options_.max_context));
    scratch_.assign(history_.end() - static_cast<std::ptrdiff_t>(tail), history_.end());
    for (int i = 0; i < max_tokens; ++i) {
        const int32_t next = best_next(scratch_.data() + scratch_.size(), scratch_.size());
        if (next < 0) break;
        out.push_back(next);
        scratch_.push_back(next);
    }
}

}  // namespace ember
