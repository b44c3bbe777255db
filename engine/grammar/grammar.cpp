#include "engine/grammar/grammar.h"

#include <algorithm>
#include <functional>

#include "engine/util/utf8.h"

namespace ember::grammar {

namespace {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;
constexpr uint32_t kSurrogateFirst = 0xD800;
constexpr uint32_t kSurrogateLast = 0xDFFF;

uint32_t saturating_add(uint32_t a, uint32_t b) {
    return std::min(Grammar::kUnbounded, a + b);  // both <= kUnbounded, so no overflow
}

// Sorted, merged, surrogate-free ranges; the complement within [0, 0x10FFFF] when negated.
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

uint32_t GrammarBuilder::rule(const std::string& name) {
    const auto it = ids_.find(name);
    if (it != ids_.end()) return it->second;
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
    rules_[id] = std::move(alternatives);
    defined_[id] = true;
}

Element GrammarBuilder::bytes(const ByteSet& set) {
    const auto it = std::find(byte_sets_.begin(), byte_sets_.end(), set);
    if (it != byte_sets_.end()) {
        return {ElementKind::Bytes, static_cast<uint32_t>(it - byte_sets_.begin())};
    }
    byte_sets_.push_back(set);
    return {ElementKind::Bytes, static_cast<uint32_t>(byte_sets_.size() - 1)};
}

Element GrammarBuilder::byte(uint8_t b) {
    ByteSet set;
    set.add(b);
    return bytes(set);
}

void GrammarBuilder::append_literal(Sequence& sequence, const std::string& text) {
    for (const char c : text) sequence.push_back(byte(static_cast<uint8_t>(c)));
}

Element GrammarBuilder::char_class(std::vector<CodePointRange> ranges, bool negated) {
    const std::vector<CodePointRange> set = normalize(std::move(ranges), negated);
    if (set.empty()) throw GrammarError("a character class that matches nothing");
    ByteSet ascii;
    bool multibyte = false;
    for (const CodePointRange& r : set) {
        if (r.first < 0x80) ascii.add_range(static_cast<uint8_t>(r.first),
                                            static_cast<uint8_t>(std::min<uint32_t>(r.last, 0x7F)));
        if (r.last >= 0x80) multibyte = true;
    }
    if (!multibyte) return bytes(ascii);
    for (const auto& [known, id] : class_rules_) {
        if (known == set) return ref(id);
    }
    std::vector<Sequence> alternatives;
    if (ascii != ByteSet{}) alternatives.push_back({bytes(ascii)});
    for (const CodePointRange& r : set) {
        if (r.last < 0x80) continue;
        for (const auto& byte_ranges : utf8_sequences({std::max<uint32_t>(r.first, 0x80), r.last})) {
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
    class_rules_.emplace_back(set, id);
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

    // Fewest bytes each rule can match, by fixed point (kUnbounded: never finishes).
    std::vector<uint32_t> min_rule(n_rules, Grammar::kUnbounded);
    const auto sequence_min = [&](const Sequence& s, size_t from) {
        uint32_t total = 0;
        for (size_t i = from; i < s.size(); ++i) {
            total = saturating_add(total, s[i].kind == ElementKind::Bytes ? 1 : min_rule[s[i].value]);
        }
        return total;
    };
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t r = 0; r < n_rules; ++r) {
            for (const Sequence& alt : rules_[r]) {
                const uint32_t m = sequence_min(alt, 0);
                if (m < min_rule[r]) {
                    min_rule[r] = m;
                    changed = true;
                }
            }
        }
    }

    // Left recursion: rule R reaches S at its leftmost position when an alternative of R has
    // only empty-matching rules before S. A cycle there would expand forever.
    std::vector<std::vector<uint32_t>> leftmost(n_rules);
    for (size_t r = 0; r < n_rules; ++r) {
        for (const Sequence& alt : rules_[r]) {
            for (const Element& e : alt) {
                if (e.kind != ElementKind::Rule) break;
                leftmost[r].push_back(e.value);
                if (min_rule[e.value] != 0) break;
            }
        }
    }
    std::vector<uint8_t> color(n_rules, 0);  // 0 unvisited, 1 on the path, 2 done
    const std::function<void(uint32_t)> visit = [&](uint32_t r) {
        color[r] = 1;
        for (const uint32_t s : leftmost[r]) {
            if (color[s] == 1) {
                throw GrammarError("rule '" + names_[s] +
                                   "' can recurse without consuming input (left recursion, or a "
                                   "repetition of something that matches empty)");
            }
            if (color[s] == 0) visit(s);
        }
        color[r] = 2;
    };
    for (uint32_t r = 0; r < n_rules; ++r) {
        if (color[r] == 0) visit(r);
    }

    // The bytes each rule can start with, by fixed point (an empty-matching rule lets the
    // next element's bytes through).
    std::vector<ByteSet> first_rule(n_rules);
    const auto sequence_first = [&](const Sequence& s, size_t from) {
        ByteSet set;
        for (size_t i = from; i < s.size(); ++i) {
            const ByteSet& add = s[i].kind == ElementKind::Bytes ? byte_sets_[s[i].value]
                                                                  : first_rule[s[i].value];
            for (size_t w = 0; w < set.bits.size(); ++w) set.bits[w] |= add.bits[w];
            if (s[i].kind == ElementKind::Bytes || min_rule[s[i].value] != 0) break;
        }
        return set;
    };
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t r = 0; r < n_rules; ++r) {
            ByteSet set = first_rule[r];
            for (const Sequence& alt : rules_[r]) {
                const ByteSet add = sequence_first(alt, 0);
                for (size_t w = 0; w < set.bits.size(); ++w) set.bits[w] |= add.bits[w];
            }
            if (set != first_rule[r]) {
                first_rule[r] = set;
                changed = true;
            }
        }
    }

    Grammar g;
    g.names_ = names_;
    g.byte_sets_ = byte_sets_;
    g.root_ = root_it->second;
    g.rules_.resize(n_rules);
    for (size_t r = 0; r < n_rules; ++r) {
        for (const Sequence& alt : rules_[r]) {
            g.rules_[r].push_back(static_cast<uint32_t>(g.elements_.size()));
            for (size_t i = 0; i < alt.size(); ++i) {
                g.elements_.push_back(alt[i]);
                g.suffix_min_.push_back(sequence_min(alt, i));
                g.first_.push_back(sequence_first(alt, i));
            }
            g.elements_.push_back({ElementKind::End, 0});
            g.suffix_min_.push_back(0);
            g.first_.emplace_back();
        }
    }
    return g;
}

}  // namespace ember::grammar
