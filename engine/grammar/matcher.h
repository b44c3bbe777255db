// Runs a Grammar over bytes: a pushdown recognizer holding every parse that is still alive.
//
// A parse is a stack of frames. The top frame waits at a byte element; each frame below
// remembers where to continue in its rule once the rule above it ends. Stacks share their
// lower frames: frames live in an arena as (position, parent) nodes, so advancing a stack by
// a byte adds one node for its new top instead of copying the stack. A rule reference at the
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
// a complete sentence of the grammar (one parse has nothing left to match).
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
    size_t mark() const { return nodes_.size(); }
    void truncate(size_t mark) { nodes_.resize(mark); }

    // Past this many live parses the grammar is too ambiguous to follow: GrammarError.
    static constexpr size_t kMaxStacks = 4096;

private:
    struct Node {
        uint32_t position;  // a byte element (top) or where the rule below continues
        int32_t parent;     // -1: the bottom of the stack
        uint32_t rest;      // fewest bytes completing this frame and every frame below it
    };
    int32_t new_node(uint32_t position, int32_t parent);
    // Adds the stacks that reach a byte element from `position` (in the frame above
    // `parent`) to `out`, following rule references and alternative ends.
    void expand(uint32_t position, int32_t parent, StackSet& out);
    void dedupe(StackSet& set) const;
    void compact();

    std::shared_ptr<const Grammar> grammar_;
    std::vector<Node> nodes_;
    StackSet state_;
    StackSet scratch_a_, scratch_b_;
};

}  // namespace ember::grammar
