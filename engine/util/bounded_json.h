// Parsing JSON that Ember did not write itself (a request body, a file, a flag, a stdin line,
// a column of a store someone may have edited, a hub's listing, a model's tool call) within a
// size and a depth bound, the one way every such site does it.
//
// Why a depth bound: nlohmann's parser keeps its own stack and does not recurse, but copying,
// comparing, converting and dumping a document recurse once per level, so a 100,000-deep array
// that parses fine overflows the stack later. The parser's callback reports each container's
// depth as it opens, and a document deeper than the bound is refused there, before it exists.
// Why a size bound: a document takes several times its text in memory once built.
#pragma once

#include <cstddef>
#include <cstdint>
#include <istream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace ember {

// Real documents (tool schemas, settings, requests) nest a dozen levels; 512 leaves room for
// odd ones while keeping every recursive walk far from the end of a thread's stack.
inline constexpr int kMaxJsonDepth = 512;
inline constexpr size_t kMaxJsonBytes = size_t{64} << 20;

struct JsonLimits {
    size_t max_bytes = kMaxJsonBytes;
    int max_depth = kMaxJsonDepth;  // levels of arrays and objects; 1 for "[1, 2]"
};

// A document past one of its bounds: "WHAT: JSON larger than 64 MiB", "WHAT: JSON nested
// deeper than 512 levels", WHAT naming the input.
class JsonLimitError : public std::runtime_error {
public:
    enum class Bound { Size, Depth };
    JsonLimitError(Bound bound, std::string_view what, const JsonLimits& limits);
    Bound bound() const { return bound_; }

private:
    Bound bound_;
};

// What a text that is not JSON gives: a discarded value, or nlohmann's exception (parse_error,
// or out_of_range for a number past a double) for callers that report where it failed.
enum class InvalidJson { Discard, Throw };

// Parses `text` within `limits`, or throws JsonLimitError naming `what`. `observe(event,
// parsed)`, when given, sees every parse event too (the server tracks the path of a failing
// field with it).
template <class Json = nlohmann::ordered_json, class Observe>
Json parse_json_bounded(std::string_view text, const JsonLimits& limits, std::string_view what,
                        InvalidJson invalid, Observe&& observe) {
    if (text.size() > limits.max_bytes) {
        throw JsonLimitError(JsonLimitError::Bound::Size, what, limits);
    }
    struct TooDeep {};  // leaves the parser at once; becomes the JsonLimitError below
    const int max_depth = limits.max_depth;
    try {
        return Json::parse(
            text,
            [max_depth, &observe](int depth, typename Json::parse_event_t event, Json& parsed) {
                // `depth` counts the containers around the one that opens.
                const bool opens = event == Json::parse_event_t::object_start ||
                                   event == Json::parse_event_t::array_start;
                if (opens && depth >= max_depth) throw TooDeep{};
                observe(event, static_cast<const Json&>(parsed));
                return true;
            },
            /*allow_exceptions=*/invalid == InvalidJson::Throw);
    } catch (const TooDeep&) {
        throw JsonLimitError(JsonLimitError::Bound::Depth, what, limits);
    }
}

template <class Json = nlohmann::ordered_json>
Json parse_json_bounded(std::string_view text, const JsonLimits& limits, std::string_view what,
                        InvalidJson invalid = InvalidJson::Discard) {
    return parse_json_bounded<Json>(text, limits, what, invalid,
                                    [](typename Json::parse_event_t, const Json&) {});
}

// For text where a document past the bounds is worth no more than one that does not parse (a
// stored column read leniently, a model's tool call): a discarded value for both.
template <class Json = nlohmann::ordered_json>
Json try_parse_json_bounded(std::string_view text, const JsonLimits& limits = {}) {
    try {
        return parse_json_bounded<Json>(text, limits, "", InvalidJson::Discard);
    } catch (const JsonLimitError&) {
        return Json(Json::value_t::discarded);
    }
}

// Reads `in` to its end, or to one byte past `limits.max_bytes` (which parse_json_bounded then
// refuses by its size), so a huge file is never read whole.
std::string read_json_text(std::istream& in, const JsonLimits& limits);

}  // namespace ember
