// A context-free grammar over bytes, the form the matcher runs.
//
// GBNF (gbnf.h) and JSON Schema (json_schema.h) both compile to this. Everything is bytes:
// a character class over code points becomes alternatives of UTF-8 byte-range sequences, so
// the matcher advances by one byte at a time and a token that splits a character between
// itself and the next token needs no special handling.
//
// Layout: one flat array of elements. Each alternative of each rule is a run of elements
// ended by an End element; a "position" is an index into that array. A rule is the list of
// positions where its alternatives start.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace ember::grammar {

// A parse or build error. GBNF errors name the line and column; others name the rule.
class GrammarError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// A compilation stopped because the caller asked (CompileLimits::cancelled): a client that
// left, say. Not the input's fault.
class CompileCancelled : public GrammarError {
public:
    using GrammarError::GrammarError;
};

// Bounds on compiling a grammar (GBNF text, or a JSON Schema through it) from untrusted
// input. Every compiler step is linear in its input, so these bound memory and time; past one,
// GrammarError names the bound.
struct CompileLimits {
    // Grammar elements (one per literal byte, class and rule reference, one per alternative's
    // end), all rules together; and rules (repetitions and groups make their own).
    size_t max_elements = size_t{1} << 23;
    size_t max_rules = size_t{1} << 21;
    // GBNF groups inside groups; JSON Schema subschemas inside subschemas, $ref hops counted.
    int max_nesting = 256;
    // Wall-clock time for the whole compilation (zero: none).
    std::chrono::steady_clock::duration max_time = std::chrono::seconds(30);
    // Polled now and then; returning true stops the compilation with CompileCancelled.
    std::function<bool()> cancelled;
};

// One compilation's account against its limits; shared by the stages of one request (the
// schema compiler, then the GBNF parser and the grammar builder).
class CompileBudget {
public:
    explicit CompileBudget(CompileLimits limits = {});
    const CompileLimits& limits() const { return limits_; }
    // Cheap enough for every loop iteration: every 4096th call checks the clock and the
    // cancel callback.
    void tick() {
        if ((++ticks_ & 4095u) == 0) check_now();
    }
    // Throws GrammarError past the time limit, CompileCancelled when cancelled.
    void check_now() const;

private:
    CompileLimits limits_;
    std::chrono::steady_clock::time_point start_;
    uint32_t ticks_ = 0;
};

// A set of byte values, 256 bits.
struct ByteSet {
    std::array<uint64_t, 4> bits{};
    void add(uint8_t b) { bits[b >> 6] |= uint64_t{1} << (b & 63); }
    void add_range(uint8_t lo, uint8_t hi) {
        for (unsigned b = lo; b <= hi; ++b) add(static_cast<uint8_t>(b));
    }
    bool has(uint8_t b) const { return (bits[b >> 6] >> (b & 63)) & 1; }
    bool operator==(const ByteSet&) const = default;
};

enum class ElementKind : uint8_t {
    Bytes,  // match one byte of byte_sets[value]
    Rule,   // expand rule `value`
    End,    // end of an alternative
};

struct Element {
    ElementKind kind = ElementKind::End;
    uint32_t value = 0;
};

// An alternative under construction: the elements without the End.
using Sequence = std::vector<Element>;

class Grammar {
public:
    // Positions where each alternative of `rule` starts.
    const std::vector<uint32_t>& alternatives(uint32_t rule) const { return rules_[rule]; }
    const Element& at(uint32_t position) const { return elements_[position]; }
    const ByteSet& byte_set(uint32_t index) const { return byte_sets_[index]; }
    uint32_t root() const { return root_; }
    size_t rule_count() const { return rules_.size(); }
    const std::string& rule_name(uint32_t rule) const { return names_[rule]; }
    // Fewest bytes that complete the alternative from `position` on (the element there
    // included). Saturates at kUnbounded for a rule that can never finish.
    uint32_t min_bytes_from(uint32_t position) const { return suffix_min_[position]; }
    // The bytes that can come first when matching from `position` to the end of its
    // alternative (what follows the alternative not included, so an alternative that can
    // match empty, min_bytes_from() == 0, must be entered whatever the byte).
    const ByteSet& first_bytes_from(uint32_t position) const {
        return first_sets_[first_[position]];
    }
    size_t element_count() const { return elements_.size(); }

    static constexpr uint32_t kUnbounded = 1u << 30;

private:
    friend class GrammarBuilder;
    std::vector<Element> elements_;
    std::vector<std::vector<uint32_t>> rules_;
    std::vector<std::string> names_;
    std::vector<ByteSet> byte_sets_;
    std::vector<uint32_t> suffix_min_;  // one per element
    std::vector<uint32_t> first_;       // one per element: an index into first_sets_
    std::vector<ByteSet> first_sets_;   // distinct first-byte sets
    uint32_t root_ = 0;
};

// A range of Unicode code points, both ends included.
struct CodePointRange {
    uint32_t first = 0;
    uint32_t last = 0;
    bool operator==(const CodePointRange&) const = default;
    auto operator<=>(const CodePointRange&) const = default;
};

// Builds a Grammar rule by rule. Rules are referred to by id before they are defined (a
// reference creates the rule), and build() checks that every one was.
class GrammarBuilder {
public:
    // Counts against `budget` (which must outlive the builder); null: default limits.
    explicit GrammarBuilder(CompileBudget* budget = nullptr);
    GrammarBuilder(const GrammarBuilder&) = delete;
    GrammarBuilder& operator=(const GrammarBuilder&) = delete;
    CompileBudget& budget() { return *budget_; }
    // The id of the rule named `name`, creating an undefined rule on first use.
    uint32_t rule(const std::string& name);
    // A new rule with a name not used before, derived from `base` (for groups, repetitions).
    uint32_t fresh_rule(const std::string& base);
    bool defined(uint32_t rule) const { return defined_[rule]; }
    // Sets the alternatives of `rule`. Throws GrammarError when it was defined before.
    void define(uint32_t rule, std::vector<Sequence> alternatives);

    // Elements for building sequences.
    Element bytes(const ByteSet& set);
    Element byte(uint8_t b);
    Element ref(uint32_t rule) const { return {ElementKind::Rule, rule}; }
    // Appends the UTF-8 bytes of `text` as single-byte elements.
    void append_literal(Sequence& sequence, const std::string& text);
    // One code point out of `ranges` (need not be sorted or disjoint; surrogates and NUL are
    // never matched), as a single element: a byte set when all are ASCII, else a rule of
    // UTF-8 byte-range sequences (shared by equal classes).
    Element char_class(std::vector<CodePointRange> ranges, bool negated);
    // Repetition of `item` between min and max times (max < 0: unbounded), as one element.
    Element repeat(const Sequence& item, int min, int max, const std::string& base);

    // Checks the grammar (every rule defined, no left recursion, `root_name` exists) and
    // lays it out. Throws GrammarError naming the rule at fault. Linear in the grammar's size.
    Grammar build(const std::string& root_name) const;

private:
    Element as_single(const Sequence& item, const std::string& base);
    // Throws GrammarError when `more` elements and `rules` rules would pass the limits.
    void reserve(size_t more, size_t rules = 0);
    struct ByteSetHash {
        size_t operator()(const ByteSet& s) const;
    };
    CompileBudget own_budget_;
    CompileBudget* budget_;
    size_t elements_ = 0;  // counted as rules are defined
    std::vector<std::vector<Sequence>> rules_;
    std::vector<std::string> names_;
    std::unordered_map<std::string, uint32_t> ids_;  // name -> rule id
    std::vector<bool> defined_;
    std::vector<ByteSet> byte_sets_;
    std::unordered_map<ByteSet, uint32_t, ByteSetHash> byte_set_ids_;
    std::map<std::vector<CodePointRange>, uint32_t> class_rules_;  // class -> its rule
};

// Code point ranges [first, last] (surrogates removed) as UTF-8: each inner vector is one
// sequence of byte ranges {lo, hi} per byte position. Exposed for tests.
struct ByteRange {
    uint8_t lo = 0;
    uint8_t hi = 0;
};
std::vector<std::vector<ByteRange>> utf8_sequences(CodePointRange range);
// The UTF-8 encoding of one code point (no validation beyond the 0x10FFFF limit).
std::string encode_utf8(uint32_t code_point);

}  // namespace ember::grammar
