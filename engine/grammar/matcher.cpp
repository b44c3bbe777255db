#include "engine/grammar/matcher.h"

#include <algorithm>
#include <utility>

namespace ember::grammar {

namespace {
// Commits add nodes for good; past this many, the arena is rebuilt with only the live ones.
constexpr size_t kCompactAbove = size_t{1} << 16;
}  // namespace

Matcher::Matcher(std::shared_ptr<const Grammar> grammar) : grammar_(std::move(grammar)) {
    reset();
}

void Matcher::reset() {
    nodes_.clear();
    state_ = {};
    for (const uint32_t alt : grammar_->alternatives(grammar_->root())) push_top(alt, -1, state_);
    finish(state_);
}

int32_t Matcher::new_node(uint32_t position, int32_t parent) {
    const uint32_t below = parent < 0 ? 0 : nodes_[static_cast<size_t>(parent)].rest;
    const uint32_t rest = std::min(Grammar::kUnbounded, grammar_->min_bytes_from(position) + below);
    nodes_.push_back({position, parent, rest});
    return static_cast<int32_t>(nodes_.size() - 1);
}

void Matcher::push_top(uint32_t position, int32_t parent, StackSet& out) {
    if (grammar_->at(position).kind != ElementKind::End) {
        out.tops.push_back(new_node(position, parent));
    } else if (parent >= 0) {
        out.tops.push_back(parent);  // the frame below waits where it was
    } else {
        out.complete = true;  // the whole input was a sentence; nothing may follow
    }
}

void Matcher::begin_step() {
    step_work_ = 0;
    if (seen_count_ == 0) return;  // the table holds nothing of the last step
    seen_count_ = 0;
    if (++stamp_ == 0) {  // wrapped: no slot may look live
        std::fill(seen_stamps_.begin(), seen_stamps_.end(), 0u);
        stamp_ = 1;
    }
}

bool Matcher::counted_visit(uint32_t position, int32_t parent) {
    if (step_work_ > kMaxStepWork) {
        throw GrammarError("the grammar is too ambiguous: matching one byte took more than " +
                           std::to_string(kMaxStepWork) +
                           " expansions (nested repetitions of something that can match "
                           "nothing?)");
    }
    if (seen_keys_.empty() || (seen_count_ + 1) * 2 > seen_keys_.size()) {
        // Grow: the live slots move to a table twice the size.
        const size_t size = std::max<size_t>(256, seen_keys_.size() * 2);
        std::vector<uint64_t> keys(size);
        std::vector<uint32_t> stamps(size, 0);
        for (size_t i = 0; i < seen_keys_.size(); ++i) {
            if (seen_stamps_[i] != stamp_) continue;
            size_t j = (seen_keys_[i] * 0x9E3779B97F4A7C15ull >> 20) & (size - 1);
            while (stamps[j] == stamp_) j = (j + 1) & (size - 1);
            keys[j] = seen_keys_[i];
            stamps[j] = stamp_;
        }
        seen_keys_ = std::move(keys);
        seen_stamps_ = std::move(stamps);
    }
    const uint64_t key = uint64_t{position} << 32 | static_cast<uint32_t>(parent + 1);
    const size_t mask = seen_keys_.size() - 1;
    for (size_t j = (key * 0x9E3779B97F4A7C15ull >> 20) & mask;; j = (j + 1) & mask) {
        if (seen_stamps_[j] != stamp_) {
            seen_stamps_[j] = stamp_;
            seen_keys_[j] = key;
            ++seen_count_;
            return true;
        }
        if (seen_keys_[j] == key) return false;
    }
}

void Matcher::advance(uint32_t position, int32_t parent, uint8_t byte, StackSet& out) {
    const Grammar& g = *grammar_;
    work_.clear();
    work_.push_back({position, parent});
    while (!work_.empty()) {
        Pending at = work_.back();
        work_.pop_back();
        while (first_visit(at.position, at.parent)) {
            const Element& e = g.at(at.position);
            if (e.kind == ElementKind::Bytes) {
                if (g.byte_set(e.value).has(byte)) push_top(at.position + 1, at.parent, out);
                break;
            }
            if (e.kind == ElementKind::End) {
                if (at.parent < 0) break;  // complete: no byte may follow
                const Node frame = nodes_[static_cast<size_t>(at.parent)];
                at = {frame.position, frame.parent};
                continue;
            }
            // A rule: its continuation becomes a frame (made once, when an alternative is
            // entered), unless nothing follows the reference (a tail call). The first
            // alternative that can start with the byte is followed here, the others go on the
            // work list (last first, so they are expanded in order).
            const uint32_t next = at.position + 1;
            const bool tail = g.at(next).kind == ElementKind::End;
            int32_t below = tail ? at.parent : -2;
            const std::vector<uint32_t>& alts = g.alternatives(e.value);
            uint32_t first = 0;
            bool any = false;
            for (size_t i = alts.size(); i-- > 0;) {
                const uint32_t alt = alts[i];
                if (g.min_bytes_from(alt) != 0 && !g.first_bytes_from(alt).has(byte)) continue;
                if (below == -2) below = new_node(next, at.parent);
                if (any) work_.push_back({first, below});
                first = alt;
                any = true;
            }
            if (!any) break;
            at = {first, below};
        }
    }
}

void Matcher::finish(StackSet& set) const {
    if (set.tops.size() >= 2) {
        // Equal stacks reached along different paths usually share their parent node: compare
        // (position, parent). Stacks equal only deeper down stay apart, which is correct, only
        // slower.
        const auto key = [this](int32_t id) {
            const Node& n = nodes_[static_cast<size_t>(id)];
            return std::pair(n.position, n.parent);
        };
        std::sort(set.tops.begin(), set.tops.end(),
                  [&](int32_t a, int32_t b) { return key(a) < key(b); });
        set.tops.erase(std::unique(set.tops.begin(), set.tops.end(),
                                   [&](int32_t a, int32_t b) { return key(a) == key(b); }),
                       set.tops.end());
        if (set.tops.size() > kMaxStacks) {
            throw GrammarError("the grammar is too ambiguous: more than " +
                               std::to_string(kMaxStacks) + " parses alive at once");
        }
    }
    // A stack whose every remaining frame can match empty can end here.
    for (const int32_t top : set.tops) {
        if (nodes_[static_cast<size_t>(top)].rest == 0) set.complete = true;
    }
}

void Matcher::step(const StackSet& from, uint8_t byte, StackSet& to) {
    to.tops.clear();
    to.complete = false;
    begin_step();
    for (const int32_t top : from.tops) {
        const Node n = nodes_[static_cast<size_t>(top)];
        advance(n.position, n.parent, byte, to);
    }
    finish(to);
}

uint32_t Matcher::min_bytes(const StackSet& set) const {
    if (set.complete) return 0;
    uint32_t best = Grammar::kUnbounded;
    for (const int32_t top : set.tops) best = std::min(best, nodes_[static_cast<size_t>(top)].rest);
    return best;
}

void Matcher::signature(std::vector<uint32_t>& out) const {
    constexpr uint32_t kStackEnd = ~uint32_t{0};
    out.clear();
    out.push_back(state_.complete ? 1 : 0);
    for (const int32_t top : state_.tops) {
        for (int32_t id = top; id >= 0; id = nodes_[static_cast<size_t>(id)].parent) {
            out.push_back(nodes_[static_cast<size_t>(id)].position);
        }
        out.push_back(kStackEnd);
    }
}

bool Matcher::can_accept(std::string_view bytes) {
    const size_t m = mark();
    const StackSet* from = &state_;
    bool ok = true;
    for (const char c : bytes) {
        StackSet& to = from == &scratch_a_ ? scratch_b_ : scratch_a_;
        step(*from, static_cast<uint8_t>(c), to);
        if (!to.alive()) {
            ok = false;
            break;
        }
        from = &to;
    }
    truncate(m);
    return ok;
}

bool Matcher::accept(std::string_view bytes) {
    const size_t m = mark();
    StackSet current = state_;
    for (const char c : bytes) {
        StackSet next;
        step(current, static_cast<uint8_t>(c), next);
        if (!next.alive()) {
            truncate(m);
            return false;
        }
        // Complete with no stacks: any further byte is refused on the next step.
        current = std::move(next);
    }
    state_ = std::move(current);
    if (nodes_.size() > kCompactAbove) compact();
    return true;
}

void Matcher::compact() {
    // Parents are always created before their children, so keeping the live nodes in their
    // old order keeps every parent id below its children's.
    std::vector<int32_t> remap(nodes_.size(), -1);
    std::vector<uint8_t> live(nodes_.size(), 0);
    for (const int32_t top : state_.tops) {
        for (int32_t id = top; id >= 0 && !live[static_cast<size_t>(id)];
             id = nodes_[static_cast<size_t>(id)].parent) {
            live[static_cast<size_t>(id)] = 1;
        }
    }
    std::vector<Node> kept;
    for (size_t i = 0; i < nodes_.size(); ++i) {
        if (!live[i]) continue;
        Node n = nodes_[i];
        if (n.parent >= 0) n.parent = remap[static_cast<size_t>(n.parent)];
        remap[i] = static_cast<int32_t>(kept.size());
        kept.push_back(n);
    }
    for (int32_t& top : state_.tops) top = remap[static_cast<size_t>(top)];
    nodes_ = std::move(kept);
}

}  // namespace ember::grammar
