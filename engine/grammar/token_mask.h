// Grammar-constrained decoding over a model's vocabulary.
//
// TokenTrie holds every token's bytes in a trie laid out in depth-first order, built once per
// vocabulary. GrammarConstraint walks it against the matcher's live parses to find the tokens
// whose bytes the grammar accepts: one matcher step per trie node, and a whole subtree skipped
// as soon as its prefix is refused, so tokens sharing a prefix share the work (Qwen3's
// 151,936 tokens make ~0.5 M nodes, but a JSON position typically visits a few thousand;
// free text inside a string visits most of them).
//
// End-of-generation tokens are allowed only where the grammar is complete. With a length
// limit (set_remaining), a token is allowed only if what it leaves can still be completed in
// the tokens that remain, counting one token per byte (vocabularies carry every byte as a
// token), so a reply cut by its limit still closes its JSON.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/grammar/matcher.h"
#include "engine/sampling/token_filter.h"

namespace ember::grammar {

class TokenTrie {
public:
    // pieces[id]: the bytes token `id` stands for; an empty piece (control tokens) is never
    // allowed. end_ids: the tokens that end generation (allowed when the grammar is complete).
    TokenTrie(std::vector<std::string> pieces, std::vector<int32_t> end_ids);

    size_t vocab_size() const { return pieces_.size(); }
    const std::string& piece(int32_t id) const { return pieces_[static_cast<size_t>(id)]; }
    bool is_end(int32_t id) const { return is_end_[static_cast<size_t>(id)] != 0; }
    const std::vector<int32_t>& end_ids() const { return end_ids_; }

    // One node per distinct token prefix, in depth-first (preorder) order.
    struct Node {
        uint8_t byte = 0;           // the byte this node adds to its parent's prefix
        uint32_t depth = 0;         // prefix length (1 for the first byte)
        uint32_t subtree_end = 0;   // index of the first node after this node's subtree
        uint32_t tokens_begin = 0;  // tokens whose bytes are exactly this prefix:
        uint32_t tokens_end = 0;    //   token_ids()[tokens_begin, tokens_end)
    };
    const std::vector<Node>& nodes() const { return nodes_; }
    const std::vector<int32_t>& token_ids() const { return token_ids_; }
    size_t max_depth() const { return max_depth_; }

private:
    std::vector<std::string> pieces_;
    std::vector<uint8_t> is_end_;  // one per token
    std::vector<int32_t> end_ids_;
    std::vector<Node> nodes_;
    std::vector<int32_t> token_ids_;
    size_t max_depth_ = 0;
};

class GrammarConstraint : public TokenFilter {
public:
    GrammarConstraint(std::shared_ptr<const Grammar> grammar,
                      std::shared_ptr<const TokenTrie> trie);

    // Tokens that may still follow the next one (a reply's length limit); < 0: no limit.
    void set_remaining(int64_t tokens_after_next) { remaining_ = tokens_after_next; }
    // A token allowed besides the grammar, which accepting does not advance it (a thinking
    // model's opening tag, before its answer has started); -1: none.
    void set_extra_allowed(int32_t id) { extra_allowed_ = id; }

    bool allows(int32_t id) override;
    void mask(std::span<float> logits) override;
    // allowed[id] = 1 for every token mask() would keep, else 0 (sized to the vocabulary).
    void allowed_tokens(std::vector<uint8_t>& allowed);

    // Consumes token `id`. Returns false, changing nothing, when the grammar refuses its
    // bytes (or it ends generation before the grammar is complete). An accepted end token
    // finishes the constraint: nothing else is accepted after it.
    bool accept(int32_t id);
    // How many of `drafts`, from the first, the grammar would accept one after another.
    size_t accepted_prefix(std::span<const int32_t> drafts);

    bool complete() const { return matcher_.complete(); }
    bool finished() const { return finished_; }
    Matcher& matcher() { return matcher_; }
    const TokenTrie& trie() const { return *trie_; }
    void reset();

private:
    // The length rule: a token may leave at most this many bytes to complete.
    uint32_t byte_budget() const;
    // Walks the trie; allowed_ gets 1 for tokens accepted within `budget`. Returns the count;
    // `max_rest` gets the most bytes an allowed token leaves to complete.
    size_t walk(uint32_t budget, uint32_t& max_rest);
    // allowed_ for the committed state without the length rule, from the cache when this
    // state was seen before. Returns the count and the most bytes an allowed token leaves.
    size_t unlimited_mask(uint32_t& max_rest);
    void decide_allowed();

    std::shared_ptr<const TokenTrie> trie_;
    Matcher matcher_;
    int64_t remaining_ = -1;
    int32_t extra_allowed_ = -1;
    bool finished_ = false;
    std::vector<uint8_t> allowed_;    // one per token, from the last walk
    std::vector<StackSet> by_depth_;  // the trie walk's state after each prefix length
    std::vector<size_t> marks_;       // arena marks after each prefix length

    // Masks of recently seen states (inside a JSON string, every character leaves the same
    // stacks), keyed by Matcher::signature(); the least recently used goes first.
    struct CachedMask {
        std::vector<uint32_t> signature;
        std::vector<uint8_t> allowed;  // one per token, without the length rule
        size_t count = 0;
        uint32_t max_rest = 0;
        uint64_t last_used = 0;
    };
    static constexpr size_t kCachedMasks = 16;
    std::vector<CachedMask> cache_;
    uint64_t clock_ = 0;
    std::vector<uint32_t> signature_;
};

}  // namespace ember::grammar
