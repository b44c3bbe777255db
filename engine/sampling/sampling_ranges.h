// The values a user may ask of the sampling settings, one table for every way in: the
// command line (--temp 5), the chat's /set and presets, and the server's request fields
// (temperature: 5). Each refuses the same values with the same words, so a setting the
// server rejects is never accepted by the CLI (where it would run to the end of the context).
// These are the user-facing ranges, narrower than SamplingParams::validate(), which only
// guards what the sampler can compute at all.
#pragma once

#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>

namespace ember {

struct SamplingRange {
    std::string_view field;  // the server's request field, SamplingParams' member name
    double lo;
    double hi;
    bool lo_excluded = false;  // the range is (lo, hi] rather than [lo, hi]
    bool whole = false;        // integers only
};

inline constexpr SamplingRange kSamplingRanges[] = {
    {"temperature", 0, 2},           {"top_k", 0, 1 << 20, false, true},
    {"top_p", 0, 1, true},           {"min_p", 0, 1},
    {"repeat_penalty", 0, 10, true}, {"presence_penalty", -2, 2},
    {"frequency_penalty", -2, 2},
};

// The range of `field`; nullopt for a field without one here (seed, penalty_last_n).
inline std::optional<SamplingRange> sampling_range(std::string_view field) {
    for (const SamplingRange& r : kSamplingRanges) {
        if (r.field == field) return r;
    }
    return std::nullopt;
}

// "must be a number between 0 and 2": the words every way in uses for `range`.
inline std::string sampling_rule(const SamplingRange& range) {
    char lo[32], hi[32];
    std::snprintf(lo, sizeof lo, "%.15g", range.lo);
    std::snprintf(hi, sizeof hi, "%.15g", range.hi);
    const char* what = range.whole ? "a whole number" : "a number";
    if (range.lo_excluded) {
        return std::string("must be ") + what + " more than " + lo + " and at most " + hi;
    }
    return std::string("must be ") + what + " between " + lo + " and " + hi;
}

// Whether `value` lies in `range` (NaN and infinities never do).
inline bool in_sampling_range(const SamplingRange& range, double value) {
    if (!std::isfinite(value)) return false;
    if (range.whole && value != std::floor(value)) return false;
    const bool above_lo = range.lo_excluded ? value > range.lo : value >= range.lo;
    return above_lo && value <= range.hi;
}

// Empty when `value` is allowed for `field`, else the rule it breaks ("must be a number
// between 0 and 2"). A field without a range allows every value.
inline std::string sampling_range_problem(std::string_view field, double value) {
    const std::optional<SamplingRange> range = sampling_range(field);
    if (!range || in_sampling_range(*range, value)) return {};
    return sampling_rule(*range);
}

}  // namespace ember
