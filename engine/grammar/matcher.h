// Runs a Grammar over bytes: a pushdown recognizer holding every parse that is still alive.
//
// A parse is a stack of frames. The top frame waits at a position of the grammar (not yet
// expanded); each frame below remembers where to continue in its rule once the rule above it
// ends. Stacks share their lower frames: frames live in an arena as (position, parent)
// nodes, so advancing a stack by a byte adds a node or two instead of copying the stack.
// Rules are expanded only when a byte arrives, and only into the alternatives that can start
// with that byte (first-byte sets computed with the grammar), so a character class of many
// UTF-8 alternatives costs one alternative per byte, not all of them. A rule reference at the
// end of an alternative pushes no frame (a tail call), so right-recursive repetition runs in
// constant stack depth.
//
// The low-level interface (step, mark, truncate) is what the token mask uses to walk a trie
// of the vocabulary: it advances a set of stacks by one byte, and throws away the nodes a
// rejected branch made by truncating the arena to a mark taken before.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "engine/grammar/grammar.h"

namespace ember::grammar {

// A set of live parses: the ids of their top nodes, and whether the input so far is already
// a complete sentence of the grammar (some parse can end here).
struct StackSet {
    std::vector<int32_t> tops;
    bool complete = false;
    bool alive() const { return complete || !tops.empty(); }
};

class Matcher {
public:
    explicit Matcher(std::shared_ptr<const Grammar> grammar);

    const Grammar& grammar() const { return *grammar_; }
    // The committed state (what accept() has consumed).
    const StackSet& state() const { return state_; }
    bool complete() const { return state_.complete; }
    // True when more input can still be accepted.
    bool can_continue() const { return !state_.tops.empty(); }
    // Fewest bytes that complete the input from the committed state (0 when complete).
    uint32_t min_bytes_to_complete() const { return min_bytes(state_); }

    // Consumes `bytes` when the grammar accepts all of them; otherwise changes nothing and
    // returns false.
    bool accept(std::string_view bytes);
    // Whether accept(bytes) would succeed, without changing anything.
    bool can_accept(std::string_view bytes);
    // Back to the start of the grammar.
    void reset();

    // --- low level, for the token mask ---
    // Advances `from` by one byte into `to` (cleared first; `to` must not alias `from`).
    // Nodes it creates stay in the arena until truncated.
    void step(const StackSet& from, uint8_t byte, StackSet& to);
    uint32_t min_bytes(const StackSet& set) const;
    // The committed state as the positions of every frame of every stack, top to bottom,
    // stacks separated: equal signatures accept exactly the same continuations.
    void signature(std::vector<uint32_t>& out) const;
    size_t mark() const { return nodes_.size(); }
    void truncate(size_t mark) { nodes_.resize(mark); }

    // Past this many live parses the grammar is too ambiguous to follow: GrammarError.
    static constexpr size_t kMaxStacks = 4096;
    // Past this many expansions (a rule entered, an alternative ended) to match one byte
    // from every live parse, likewise: nested repetitions of what can match empty, such as
    // (("a"{0,300}){0,300}){0,300}, have millions of ways to reach the next byte.
    static constexpr size_t kMaxStepWork = size_t{1} << 18;

private:
    struct Node {
        uint32_t position;  // where this frame waits (never an End element)
        int32_t parent;     // -1: the bottom of the stack
        uint32_t rest;      // fewest bytes completing this frame and every frame below it
    };
    int32_t new_node(uint32_t position, int32_t parent);
    // Adds to `out` the stack waiting at `position` above `parent`; an alternative's end pops
    // to the frame below (the bottom: the parse is complete).
    void push_top(uint32_t position, int32_t parent, StackSet& out);
    // Matches `byte` from `position` above `parent`, following rule references into the
    // alternatives that can start with it, and adds the stacks after the byte to `out`.
    // Iterative (its work list, not the C++ stack, holds what is left to expand), and each
    // (position, parent) is expanded once per step: what it yields depends on nothing else.
    void advance(uint32_t position, int32_t parent, uint8_t byte, StackSet& out);
    // A new step: forgets which (position, parent) pairs were expanded.
    void begin_step();
    // False when (position, parent) was expanded already in this step; counts the work. Most
    // steps expand a handful of pairs: those go without bookkeeping (a pair seen twice is
    // expanded twice, yielding the same stacks, which finish() merges).
    bool first_visit(uint32_t position, int32_t parent) {
        return ++step_work_ <= kUncountedWork || counted_visit(position, parent);
    }
    bool counted_visit(uint32_t position, int32_t parent);
    void finish(StackSet& set) const;  // dedupes, and sets `complete`
    void compact();

    std::shared_ptr<const Grammar> grammar_;
    std::vector<Node> nodes_;
    StackSet state_;
    StackSet scratch_a_, scratch_b_;
    struct Pending {
        uint32_t position;
        int32_t parent;
    };
    std::vector<Pending> work_;
    // The pairs expanded in this step: an open-addressing set whose slots are live when their
    // stamp is the step's, so starting a step clears nothing.
    std::vector<uint64_t> seen_keys_;
    std::vector<uint32_t> seen_stamps_;
    uint32_t stamp_ = 1;     // slots stamped 0 are never live
    size_t seen_count_ = 0;  // pairs in the table for this step
    size_t step_work_ = 0;
    // Expansions in a step before the table starts being used.
    static constexpr size_t kUncountedWork = 64;
};

}  // namespace ember::grammar
