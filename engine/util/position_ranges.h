// A set of positions kept as sorted, disjoint, non-touching [begin, end) ranges: which rows of
// a KV cache one copy holds (a GPU mirror's host rows, which a restore onto the device alone
// leaves stale in the middle of what the host had).
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace ember {

class PositionRanges {
public:
    using Range = std::pair<int64_t, int64_t>;  // [begin, end)

    // Adds [begin, end), merging with the ranges it overlaps or touches.
    void add(int64_t begin, int64_t end) {
        if (begin >= end) return;
        std::vector<Range> out;
        out.reserve(ranges_.size() + 1);
        bool placed = false;
        for (const Range& r : ranges_) {
            if (r.second < begin) {
                out.push_back(r);
            } else if (r.first > end) {
                if (!placed) out.emplace_back(begin, end);
                placed = true;
                out.push_back(r);
            } else {  // overlaps or touches: widen the new range over it
                begin = std::min(begin, r.first);
                end = std::max(end, r.second);
            }
        }
        if (!placed) out.emplace_back(begin, end);
        ranges_ = std::move(out);
    }

    // Removes [begin, end); a range around it splits in two.
    void remove(int64_t begin, int64_t end) {
        if (begin >= end) return;
        std::vector<Range> out;
        out.reserve(ranges_.size() + 1);
        for (const Range& r : ranges_) {
            if (r.second <= begin || r.first >= end) {
                out.push_back(r);
                continue;
            }
            if (r.first < begin) out.emplace_back(r.first, begin);
            if (r.second > end) out.emplace_back(end, r.second);
        }
        ranges_ = std::move(out);
    }

    // Removes every position from `begin` on; in place (a GPU's decode step calls it, and the
    // decode loop does not allocate).
    void remove_from(int64_t begin) {
        while (!ranges_.empty() && ranges_.back().first >= begin) ranges_.pop_back();
        if (!ranges_.empty() && ranges_.back().second > begin) ranges_.back().second = begin;
    }

    // The parts of [begin, end) the set does not hold, in order.
    std::vector<Range> gaps(int64_t begin, int64_t end) const {
        std::vector<Range> out;
        int64_t at = begin;
        for (const Range& r : ranges_) {
            if (r.second <= at) continue;
            if (r.first >= end) break;
            if (r.first > at) out.emplace_back(at, r.first);
            at = r.second;
        }
        if (at < end) out.emplace_back(at, end);
        return out;
    }

    // Whether every position of [begin, end) is in the set (an empty range is).
    bool covers(int64_t begin, int64_t end) const {
        return begin >= end || gaps(begin, end).empty();
    }

    const std::vector<Range>& ranges() const { return ranges_; }

private:
    std::vector<Range> ranges_;  // sorted, disjoint, never touching
};

}  // namespace ember
