#include "engine/grammar/grammar.h"

#include <algorithm>
#include <functional>
#include <queue>

#include "engine/util/utf8.h"

namespace ember::grammar {

namespace {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;
constexpr uint32_t kSurrogateFirst = 0xD800;
constexpr uint32_t kSurrogateLast = 0xDFFF;

uint32_t saturating_add(uint32_t a, uint32_t b) {
    return std::min(Grammar::kUnbounded, a + b);  // both <= kUnbounded, so no overflow
}

// Sorted, merged ranges without surrogates or NUL; the complement within [0, 0x10FFFF] when
// negated.
std::vector<CodePointRange> normalize(std::vector<CodePointRange> ranges, bool negated) {
    std::sort(ranges.begin(), ranges.end());
    std::vector<CodePointRange> merged;
    for (const CodePointRange& r : ranges) {
        if (!merged.empty() && r.first <= merged.back().last + 1) {
            merged.back().last = std::max(merged.back().last, r.last);
        } else {
            merged.push_back(r);
        }
    }
    if (negated) {
        std::vector<CodePointRange> complement;
        uint32_t next = 0;
        for (const CodePointRange& r : merged) {
            if (r.first > next) complement.push_back({next, r.first - 1});
            next = r.last + 1;
        }
        if (next <= kMaxCodePoint) complement.push_back({next, kMaxCodePoint});
        merged = std::move(complement);
    }
    // Never NUL either: what a grammar makes the model write is text.
    if (!merged.empty() && merged.front().first == 0) {
        if (merged.front().last == 0) {
            merged.erase(merged.begin());
        } else {
            merged.front().first = 1;
        }
    }
    std::vector<CodePointRange> out;
    for (const CodePointRange& r : merged) {
        if (r.last < kSurrogateFirst || r.first > kSurrogateLast) {
            out.push_back(r);
            continue;
        }
        if (r.first < kSurrogateFirst) out.push_back({r.first, kSurrogateFirst - 1});
        if (r.last > kSurrogateLast) out.push_back({kSurrogateLast + 1, r.last});
    }
    return out;
}

size_t encoded_length(uint32_t cp) {
    return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
}

void split_utf8(uint32_t first, uint32_t last, std::vector<std::vector<ByteRange>>& out) {
    if (first > last) return;
    if (first <= kSurrogateLast && last >= kSurrogateFirst) {
        if (first < kSurrogateFirst) split_utf8(first, kSurrogateFirst - 1, out);
        if (last > kSurrogateLast) split_utf8(kSurrogateLast + 1, last, out);
        return;
    }
    // Both ends must encode to the same length.
    for (const uint32_t boundary : {0x7Fu, 0x7FFu, 0xFFFFu}) {
        if (first <= boundary && last > boundary) {
            split_utf8(first, boundary, out);
            split_utf8(boundary + 1, last, out);
            return;
        }
    }
    const size_t n = encoded_length(first);
    // Each continuation byte must span its full 0x80-0xBF range unless all earlier bytes are
    // fixed: split off the ragged ends until the range is a product of byte ranges.
    for (size_t i = 1; i < n; ++i) {
        const uint32_t low_bits = (uint32_t{1} << (6 * i)) - 1;
        if ((first & ~low_bits) != (last & ~low_bits)) {
            if ((first & low_bits) != 0) {
                split_utf8(first, first | low_bits, out);
                split_utf8((first | low_bits) + 1, last, out);
                return;
            }
            if ((last & low_bits) != low_bits) {
                split_utf8(first, (last & ~low_bits) - 1, out);
                split_utf8(last & ~low_bits, last, out);
                return;
            }
        }
    }
    const std::string a = encode_utf8(first);
    const std::string b = encode_utf8(last);
    std::vector<ByteRange> sequence;
    for (size_t i = 0; i < n; ++i) {
        sequence.push_back({static_cast<uint8_t>(a[i]), static_cast<uint8_t>(b[i])});
    }
    out.push_back(std::move(sequence));
}

}  // namespace

std::string encode_utf8(uint32_t cp) {
    std::string out;
    append_utf8(out, cp);
    return out;
}

std::vector<std::vector<ByteRange>> utf8_sequences(CodePointRange range) {
    std::vector<std::vector<ByteRange>> out;
    split_utf8(range.first, std::min(range.last, kMaxCodePoint), out);
    return out;
}

CompileBudget::CompileBudget(CompileLimits limits)
    : limits_(std::move(limits)), start_(std::chrono::steady_clock::now()) {}

void CompileBudget::check_now() const {
    if (limits_.cancelled && limits_.cancelled()) {
        throw CompileCancelled("compiling the grammar was cancelled");
    }
    const auto spent = std::chrono::steady_clock::now() - start_;
    if (limits_.max_time.count() > 0 && spent > limits_.max_time) {
        const auto ms =
            std::chrono::duration_cast<std::chrono::milliseconds>(limits_.max_time).count();
        std::string limit = std::to_string(ms / 1000);
        if (ms % 1000 != 0) limit += "." + std::to_string(ms % 1000 + 1000).substr(1);
        throw GrammarError("compiling the grammar took longer than its time limit of " + limit +
                           " s");
    }
}

size_t GrammarBuilder::ByteSetHash::operator()(const ByteSet& s) const {
    uint64_t h = 0x9E3779B97F4A7C15ull;
    for (const uint64_t w : s.bits) h = (h ^ w) * 0x100000001B3ull + (h >> 29);
    return static_cast<size_t>(h);
}

GrammarBuilder::GrammarBuilder(CompileBudget* budget)
    : budget_(budget != nullptr ? budget : &own_budget_) {}

void GrammarBuilder::reserve(size_t more, size_t rules) {
    const CompileLimits& l = budget_->limits();
    if (more > l.max_elements - std::min(elements_, l.max_elements)) {
        throw GrammarError("the grammar is too large: more than " + std::to_string(l.max_elements) +
                           " elements (the limit on a grammar's size)");
    }
    if (rules > l.max_rules - std::min(names_.size(), l.max_rules)) {
        throw GrammarError("the grammar is too large: more than " + std::to_string(l.max_rules) +
                           " rules (the limit on a grammar's rules, repetitions included)");
    }
    budget_->tick();
}

uint32_t GrammarBuilder::rule(const std::string& name) {
    const auto it = ids_.find(name);
    if (it != ids_.end()) return it->second;
    reserve(0, 1);
    ids_.emplace(name, static_cast<uint32_t>(names_.size()));
    names_.push_back(name);
    rules_.emplace_back();
    defined_.push_back(false);
    return static_cast<uint32_t>(names_.size() - 1);
}

uint32_t GrammarBuilder::fresh_rule(const std::string& base) {
    for (size_t n = names_.size();; ++n) {
        const std::string name = base + "-" + std::to_string(n);
        if (!ids_.contains(name)) return rule(name);
    }
}

void GrammarBuilder::define(uint32_t id, std::vector<Sequence> alternatives) {
    if (defined_[id]) throw GrammarError("rule '" + names_[id] + "' is defined twice");
    size_t count = 0;
    for (const Sequence& alt : alternatives) count += alt.size() + 1;  // + its End
    reserve(count);
    elements_ += count;
    rules_[id] = std::move(alternatives);
    defined_[id] = true;
}

Element GrammarBuilder::bytes(const ByteSet& set) {
    const auto it = byte_set_ids_.find(set);
    if (it != byte_set_ids_.end()) return {ElementKind::Bytes, it->second};
    const auto id = static_cast<uint32_t>(byte_sets_.size());
    byte_sets_.push_back(set);
    byte_set_ids_.emplace(set, id);
    return {ElementKind::Bytes, id};
}

Element GrammarBuilder::byte(uint8_t b) {
    ByteSet set;
    set.add(b);
    return bytes(set);
}

void GrammarBuilder::append_literal(Sequence& sequence, const std::string& text) {
    reserve(sequence.size() + text.size());
    for (const char c : text) sequence.push_back(byte(static_cast<uint8_t>(c)));
}

Element GrammarBuilder::char_class(std::vector<CodePointRange> ranges, bool negated) {
    const std::vector<CodePointRange> set = normalize(std::move(ranges), negated);
    if (set.empty()) throw GrammarError("a character class that matches nothing");
    ByteSet ascii;
    bool multibyte = false;
    for (const CodePointRange& r : set) {
        if (r.first < 0x80)
            ascii.add_range(static_cast<uint8_t>(r.first),
                            static_cast<uint8_t>(std::min<uint32_t>(r.last, 0x7F)));
        if (r.last >= 0x80) multibyte = true;
    }
    if (!multibyte) return bytes(ascii);
    if (const auto known = class_rules_.find(set); known != class_rules_.end()) {
        return ref(known->second);
    }
    std::vector<Sequence> alternatives;
    if (ascii != ByteSet{}) alternatives.push_back({bytes(ascii)});
    for (const CodePointRange& r : set) {
        if (r.last < 0x80) continue;
        for (const auto& byte_ranges :
             utf8_sequences({std::max<uint32_t>(r.first, 0x80), r.last})) {
            Sequence sequence;
            for (const ByteRange& br : byte_ranges) {
                ByteSet s;
                s.add_range(br.lo, br.hi);
                sequence.push_back(bytes(s));
            }
            alternatives.push_back(std::move(sequence));
        }
    }
    const uint32_t id = fresh_rule("char");
    define(id, std::move(alternatives));
    class_rules_.emplace(set, id);
    return ref(id);
}

Element GrammarBuilder::as_single(const Sequence& item, const std::string& base) {
    if (item.size() == 1) return item[0];
    const uint32_t id = fresh_rule(base);
    define(id, {item});
    return ref(id);
}

Element GrammarBuilder::repeat(const Sequence& item, int min, int max, const std::string& base) {
    if (min < 0 || (max >= 0 && max < min)) {
        throw GrammarError("bad repetition {" + std::to_string(min) + "," + std::to_string(max) +
                           "}");
    }
    const Element x = as_single(item, base);
    // Checked before anything is laid out: what follows adds about this much.
    const auto optional = static_cast<size_t>(max < 0 ? 1 : max - min);
    reserve(static_cast<size_t>(min) + 2 + 4 * optional, optional + 1);
    // The tail after the required copies: x* is  T ::= x T | ()  (right recursive, so the
    // matcher's stack does not grow with the count); a bounded tail nests optionals,
    // T_k ::= x T_(k-1) | (), which keeps the grammar linear in max - min.
    Sequence whole(static_cast<size_t>(min), x);
    if (max < 0) {
        const uint32_t tail = fresh_rule(base);
        define(tail, {{x, ref(tail)}, {}});
        whole.push_back(ref(tail));
    } else if (max > min) {
        uint32_t inner = fresh_rule(base);
        define(inner, {{x}, {}});
        for (int k = 1; k < max - min; ++k) {
            const uint32_t outer = fresh_rule(base);
            define(outer, {{x, ref(inner)}, {}});
            inner = outer;
        }
        whole.push_back(ref(inner));
    }
    const uint32_t id = fresh_rule(base);
    define(id, {whole});
    return ref(id);
}

Grammar GrammarBuilder::build(const std::string& root_name) const {
    const auto root_it = ids_.find(root_name);
    if (root_it == ids_.end() || !defined_[root_it->second]) {
        throw GrammarError("the grammar has no rule '" + root_name + "'");
    }
    const size_t n_rules = rules_.size();
    for (size_t r = 0; r < n_rules; ++r) {
        if (!defined_[r]) throw GrammarError("rule '" + names_[r] + "' is used but not defined");
    }
    // Every pass below is linear in the grammar (a few are n log n): a grammar of millions of
    // elements (a long literal, a schema's big "const") builds in about a second.

    // Fewest bytes each rule can match (kUnbounded: never finishes), by Knuth's generalization
    // of Dijkstra's algorithm: an alternative's value is known once all its rules' are, and
    // the smallest value not yet final is final (a sum is never below its parts).
    struct Alt {
        uint32_t rule = 0;
        uint32_t pending = 0;  // references to rules whose value is not final yet
        uint32_t sum = 0;      // bytes, plus the final values of the rules seen so far
    };
    std::vector<Alt> alts;
    std::vector<std::vector<uint32_t>> uses(n_rules);  // rule -> alternatives, per reference
    for (size_t r = 0; r < n_rules; ++r) {
        for (const Sequence& seq : rules_[r]) {
            Alt a;
            a.rule = static_cast<uint32_t>(r);
            for (const Element& e : seq) {
                if (e.kind == ElementKind::Bytes) {
                    a.sum = saturating_add(a.sum, 1);
                } else {
                    ++a.pending;
                    uses[e.value].push_back(static_cast<uint32_t>(alts.size()));
                }
            }
            alts.push_back(a);
            budget_->tick();
        }
    }
    std::vector<uint32_t> min_rule(n_rules, Grammar::kUnbounded);
    {
        using Entry = std::pair<uint32_t, uint32_t>;  // (value, rule)
        std::priority_queue<Entry, std::vector<Entry>, std::greater<>> queue;
        for (const Alt& a : alts) {
            if (a.pending == 0) queue.emplace(a.sum, a.rule);
        }
        std::vector<uint8_t> final_value(n_rules, 0);
        while (!queue.empty()) {
            const auto [value, r] = queue.top();
            queue.pop();
            if (final_value[r]) continue;
            final_value[r] = 1;
            min_rule[r] = value;
            for (const uint32_t a : uses[r]) {
                alts[a].sum = saturating_add(alts[a].sum, value);
                if (--alts[a].pending == 0) queue.emplace(alts[a].sum, alts[a].rule);
            }
            budget_->tick();
        }
    }

    // Left recursion: rule R reaches S at its leftmost position when an alternative of R has
    // only empty-matching rules before S. A cycle there would expand forever. The same edges
    // carry first bytes (below).
    std::vector<std::vector<uint32_t>> leftmost(n_rules);
    std::vector<ByteSet> first_rule(n_rules);  // first the bytes that come before any rule
    for (size_t r = 0; r < n_rules; ++r) {
        for (const Sequence& alt : rules_[r]) {
            for (const Element& e : alt) {
                if (e.kind != ElementKind::Rule) {
                    const ByteSet& add = byte_sets_[e.value];
                    for (size_t w = 0; w < add.bits.size(); ++w) {
                        first_rule[r].bits[w] |= add.bits[w];
                    }
                    break;
                }
                leftmost[r].push_back(e.value);
                if (min_rule[e.value] != 0) break;
            }
        }
    }
    {
        // Depth-first, with an explicit stack (a chain of a million rules is no deeper for it).
        std::vector<uint8_t> color(n_rules, 0);         // 0 unvisited, 1 on the path, 2 done
        std::vector<std::pair<uint32_t, size_t>> path;  // (rule, next edge to follow)
        for (uint32_t start = 0; start < n_rules; ++start) {
            if (color[start] != 0) continue;
            color[start] = 1;
            path.emplace_back(start, 0);
            while (!path.empty()) {
                auto& [r, next] = path.back();
                if (next == leftmost[r].size()) {
                    color[r] = 2;
                    path.pop_back();
                    continue;
                }
                const uint32_t s = leftmost[r][next++];
                if (color[s] == 1) {
                    throw GrammarError("rule '" + names_[s] +
                                       "' can recurse without consuming input (left recursion, "
                                       "or a repetition of something that matches empty)");
                }
                if (color[s] == 0) {
                    color[s] = 1;
                    path.emplace_back(s, 0);
                }
                budget_->tick();
            }
        }
    }

    // The bytes each rule can start with: a rule's set flows into every rule that has it at a
    // leftmost position, until nothing changes (a set grows at most 256 times).
    {
        std::vector<std::vector<uint32_t>> feeds(n_rules);  // s -> rules with s leftmost
        for (uint32_t r = 0; r < n_rules; ++r) {
            for (const uint32_t s : leftmost[r]) feeds[s].push_back(r);
        }
        std::vector<uint32_t> work(n_rules);
        for (uint32_t r = 0; r < n_rules; ++r) work[r] = r;
        std::vector<uint8_t> queued(n_rules, 1);
        while (!work.empty()) {
            const uint32_t s = work.back();
            work.pop_back();
            queued[s] = 0;
            for (const uint32_t r : feeds[s]) {
                ByteSet merged = first_rule[r];
                for (size_t w = 0; w < merged.bits.size(); ++w) {
                    merged.bits[w] |= first_rule[s].bits[w];
                }
                if (merged == first_rule[r]) continue;
                first_rule[r] = merged;
                if (!queued[r]) {
                    queued[r] = 1;
                    work.push_back(r);
                }
            }
            budget_->tick();
        }
    }

    Grammar g;
    g.names_ = names_;
    g.byte_sets_ = byte_sets_;
    g.root_ = root_it->second;
    g.rules_.resize(n_rules);
    std::unordered_map<ByteSet, uint32_t, ByteSetHash> first_ids;
    const auto first_id = [&](const ByteSet& set) {
        const auto next = static_cast<uint32_t>(g.first_sets_.size());
        const auto [it, added] = first_ids.emplace(set, next);
        if (added) g.first_sets_.push_back(set);
        return it->second;
    };
    const uint32_t empty_first = first_id(ByteSet{});
    std::vector<uint32_t> suffix_min;
    std::vector<ByteSet> suffix_first;
    for (size_t r = 0; r < n_rules; ++r) {
        for (const Sequence& alt : rules_[r]) {
            // From the end back: what completes the alternative from each element on, and the
            // bytes that can come first there (an empty-matching rule lets the next through).
            suffix_min.assign(alt.size() + 1, 0);
            suffix_first.assign(alt.size() + 1, ByteSet{});
            for (size_t i = alt.size(); i-- > 0;) {
                const Element& e = alt[i];
                const bool bytes = e.kind == ElementKind::Bytes;
                suffix_min[i] = saturating_add(bytes ? 1 : min_rule[e.value], suffix_min[i + 1]);
                ByteSet set = bytes ? byte_sets_[e.value] : first_rule[e.value];
                if (!bytes && min_rule[e.value] == 0) {
                    for (size_t w = 0; w < set.bits.size(); ++w) {
                        set.bits[w] |= suffix_first[i + 1].bits[w];
                    }
                }
                suffix_first[i] = set;
            }
            g.rules_[r].push_back(static_cast<uint32_t>(g.elements_.size()));
            for (size_t i = 0; i < alt.size(); ++i) {
                g.elements_.push_back(alt[i]);
                g.suffix_min_.push_back(suffix_min[i]);
                g.first_.push_back(first_id(suffix_first[i]));
            }
            g.elements_.push_back({ElementKind::End, 0});
            g.suffix_min_.push_back(0);
            g.first_.push_back(empty_first);
            budget_->tick();
        }
    }
    return g;
}

}  // namespace ember::grammar
