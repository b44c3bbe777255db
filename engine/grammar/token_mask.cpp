#include "engine/grammar/token_mask.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <stdexcept>

namespace ember::grammar {

TokenTrie::TokenTrie(std::vector<std::string> pieces, std::vector<int32_t> end_ids)
    : pieces_(std::move(pieces)), is_end_(pieces_.size(), 0) {
    for (const int32_t id : end_ids) {
        if (id < 0 || static_cast<size_t>(id) >= pieces_.size()) {
            throw std::invalid_argument("TokenTrie: end token id " + std::to_string(id) +
                                        " outside the vocabulary");
        }
        if (!is_end_[static_cast<size_t>(id)]) end_ids_.push_back(id);
        is_end_[static_cast<size_t>(id)] = 1;
    }
    // Tokens in byte order: a token's prefixes come before it, and tokens sharing a prefix
    // sit together, so one pass lays the trie out in preorder.
    for (size_t id = 0; id < pieces_.size(); ++id) {
        if (!pieces_[id].empty() && !is_end_[id]) token_ids_.push_back(static_cast<int32_t>(id));
    }
    std::sort(token_ids_.begin(), token_ids_.end(), [this](int32_t a, int32_t b) {
        return pieces_[static_cast<size_t>(a)] < pieces_[static_cast<size_t>(b)] ||
               (pieces_[static_cast<size_t>(a)] == pieces_[static_cast<size_t>(b)] && a < b);
    });
    std::vector<uint32_t> path;  // node index at each depth of the current prefix
    const std::string* previous = nullptr;
    for (size_t i = 0; i < token_ids_.size(); ++i) {
        const std::string& piece = pieces_[static_cast<size_t>(token_ids_[i])];
        size_t common = 0;
        if (previous != nullptr) {
            const size_t limit = std::min(previous->size(), piece.size());
            while (common < limit && (*previous)[common] == piece[common]) ++common;
        }
        // Close the subtrees the new token leaves.
        while (path.size() > common) {
            nodes_[path.back()].subtree_end = static_cast<uint32_t>(nodes_.size());
            path.pop_back();
        }
        for (size_t d = common; d < piece.size(); ++d) {
            Node node;
            node.byte = static_cast<uint8_t>(piece[d]);
            node.depth = static_cast<uint32_t>(d + 1);
            node.tokens_begin = node.tokens_end = 0;
            path.push_back(static_cast<uint32_t>(nodes_.size()));
            nodes_.push_back(node);
        }
        Node& last = nodes_[path.back()];
        if (last.tokens_end == 0) last.tokens_begin = static_cast<uint32_t>(i);
        last.tokens_end = static_cast<uint32_t>(i + 1);
        max_depth_ = std::max(max_depth_, piece.size());
        previous = &piece;
    }
    while (!path.empty()) {
        nodes_[path.back()].subtree_end = static_cast<uint32_t>(nodes_.size());
        path.pop_back();
    }
}

GrammarConstraint::GrammarConstraint(std::shared_ptr<const Grammar> grammar,
                                     std::shared_ptr<const TokenTrie> trie)
    : trie_(std::move(trie)), matcher_(std::move(grammar)) {
    allowed_.assign(trie_->vocab_size(), 0);
    by_depth_.resize(trie_->max_depth() + 1);
    marks_.resize(trie_->max_depth() + 1);
}

void GrammarConstraint::reset() {
    matcher_.reset();
    finished_ = false;
}

uint32_t GrammarConstraint::byte_budget() const {
    if (remaining_ < 0) return Grammar::kUnbounded;
    // When even the limit cannot complete the input, every token that makes progress (one
    // byte on the shortest completion leaves one less) is still allowed.
    const uint32_t current = matcher_.min_bytes_to_complete();
    const uint32_t progress = current > 0 ? current - 1 : 0;
    return static_cast<uint32_t>(
        std::max<int64_t>(std::min<int64_t>(remaining_, Grammar::kUnbounded), progress));
}

bool GrammarConstraint::allows(int32_t id) {
    if (id < 0 || static_cast<size_t>(id) >= trie_->vocab_size() || finished_) return false;
    if (id == extra_allowed_) return true;
    if (trie_->is_end(id)) return matcher_.complete();
    const std::string& piece = trie_->piece(id);
    if (piece.empty()) return false;
    const uint32_t budget = byte_budget();
    const size_t m = matcher_.mark();
    const StackSet* from = &matcher_.state();
    bool ok = true;
    for (size_t i = 0; i < piece.size(); ++i) {
        StackSet& to = by_depth_[i + 1];
        matcher_.step(*from, static_cast<uint8_t>(piece[i]), to);
        if (!to.alive()) {
            ok = false;
            break;
        }
        from = &to;
    }
    if (ok) ok = matcher_.min_bytes(*from) <= budget;
    matcher_.truncate(m);
    return ok;
}

size_t GrammarConstraint::walk(uint32_t budget, uint32_t& max_rest) {
    max_rest = 0;
    std::fill(allowed_.begin(), allowed_.end(), 0);
    const auto& nodes = trie_->nodes();
    const auto& ids = trie_->token_ids();
    size_t count = 0;
    marks_[0] = matcher_.mark();
    const StackSet& root = matcher_.state();
    for (size_t i = 0; i < nodes.size();) {
        const TokenTrie::Node& node = nodes[i];
        const size_t depth = node.depth;
        // Nodes made for the previous sibling's subtree are garbage now.
        matcher_.truncate(marks_[depth - 1]);
        StackSet& here = by_depth_[depth];
        matcher_.step(depth == 1 ? root : by_depth_[depth - 1], node.byte, here);
        if (!here.alive()) {
            i = node.subtree_end;
            continue;
        }
        marks_[depth] = matcher_.mark();
        const uint32_t rest = node.tokens_end > node.tokens_begin ? matcher_.min_bytes(here) : 0;
        if (node.tokens_end > node.tokens_begin && rest <= budget) {
            max_rest = std::max(max_rest, rest);
            for (uint32_t t = node.tokens_begin; t < node.tokens_end; ++t) {
                allowed_[static_cast<size_t>(ids[t])] = 1;
            }
            count += node.tokens_end - node.tokens_begin;
        }
        i = here.tops.empty() ? node.subtree_end : i + 1;
    }
    matcher_.truncate(marks_[0]);
    return count;
}

size_t GrammarConstraint::unlimited_mask(uint32_t& max_rest) {
    matcher_.signature(signature_);
    ++clock_;
    for (CachedMask& c : cache_) {
        if (c.signature == signature_) {
            c.last_used = clock_;
            allowed_ = c.allowed;
            max_rest = c.max_rest;
            return c.count;
        }
    }
    const size_t count = walk(Grammar::kUnbounded, max_rest);
    CachedMask* slot = nullptr;
    if (cache_.size() < kCachedMasks) {
        slot = &cache_.emplace_back();
    } else {
        slot = &*std::min_element(cache_.begin(), cache_.end(), [](const auto& a, const auto& b) {
            return a.last_used < b.last_used;
        });
    }
    slot->signature = signature_;
    slot->allowed = allowed_;
    slot->count = count;
    slot->max_rest = max_rest;
    slot->last_used = clock_;
    return count;
}

void GrammarConstraint::decide_allowed() {
    if (finished_) {
        std::fill(allowed_.begin(), allowed_.end(), 0);
        return;
    }
    uint32_t max_rest = 0;
    size_t count = unlimited_mask(max_rest);
    // The length rule binds only where some allowed token leaves more than the budget.
    const uint32_t budget = byte_budget();
    if (budget < max_rest) {
        count = walk(budget, max_rest);
        // Nothing fits the length rule (a vocabulary without the needed single bytes): any
        // accepted token, then, and failing that the end tokens, so sampling always has a
        // choice.
        if (count == 0) count = unlimited_mask(max_rest);
    }
    const bool ends = matcher_.complete() || count == 0;
    for (const int32_t id : trie_->end_ids()) allowed_[static_cast<size_t>(id)] = ends ? 1 : 0;
    if (extra_allowed_ >= 0 && static_cast<size_t>(extra_allowed_) < allowed_.size()) {
        allowed_[static_cast<size_t>(extra_allowed_)] = 1;
    }
}

void GrammarConstraint::allowed_tokens(std::vector<uint8_t>& allowed) {
    decide_allowed();
    allowed = allowed_;
}

void GrammarConstraint::mask(std::span<float> logits) {
    decide_allowed();
    const size_t n = std::min(logits.size(), allowed_.size());
    constexpr float kNegInf = -std::numeric_limits<float>::infinity();
    for (size_t i = 0; i < n; ++i) {
        if (!allowed_[i]) logits[i] = kNegInf;
    }
    // Ids past the vocabulary the trie knows (padded output rows) are never allowed.
    for (size_t i = n; i < logits.size(); ++i) logits[i] = kNegInf;
}

bool GrammarConstraint::accept(int32_t id) {
    if (id < 0 || static_cast<size_t>(id) >= trie_->vocab_size() || finished_) return false;
    if (id == extra_allowed_) return true;
    if (trie_->is_end(id)) {
        if (!matcher_.complete()) return false;
        finished_ = true;
        return true;
    }
    const std::string& piece = trie_->piece(id);
    return !piece.empty() && matcher_.accept(piece);
}

size_t GrammarConstraint::accepted_prefix(std::span<const int32_t> drafts) {
    std::string bytes;
    for (size_t i = 0; i < drafts.size(); ++i) {
        const int32_t id = drafts[i];
        if (id < 0 || static_cast<size_t>(id) >= trie_->vocab_size() || trie_->is_end(id)) {
            return i;
        }
        const std::string& piece = trie_->piece(id);
        if (piece.empty()) return i;
        bytes += piece;
        if (!matcher_.can_accept(bytes)) return i;
    }
    return drafts.size();
}

}  // namespace ember::grammar
