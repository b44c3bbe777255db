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

void Matcher::advance(uint32_t position, int32_t parent, uint8_t byte, StackSet& out) {
    const Grammar& g = *grammar_;
    for (;;) {
        const Element& e = g.at(position);
        if (e.kind == ElementKind::Bytes) {
            if (g.byte_set(e.value).has(byte)) push_top(position + 1, parent, out);
            return;
        }
        if (e.kind == ElementKind::End) {
            if (parent < 0) return;  // complete: no byte may follow
            const Node frame = nodes_[static_cast<size_t>(parent)];
            position = frame.position;
            parent = frame.parent;
            continue;
        }
        // A rule: its continuation becomes a frame (made once, when an alternative is
        // entered), unless nothing follows the reference (a tail call).
        const uint32_t next = position + 1;
        const bool tail = g.at(next).kind == ElementKind::End;
        int32_t below = tail ? parent : -2;
        for (const uint32_t alt : g.alternatives(e.value)) {
            if (g.min_bytes_from(alt) != 0 && !g.first_bytes_from(alt).has(byte)) continue;
            if (below == -2) below = new_node(next, parent);
            advance(alt, below, byte, out);
        }
        return;
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
