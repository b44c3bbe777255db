// Parsing JSON that Ember did not write itself (a file, a flag, a column of a store someone
// may have edited) without building a document nested deeper than `max_depth`. nlohmann's
// parser is iterative, but copying, converting and dumping a document recurse once per
// level: a 100,000-deep array overflows the stack there. The parser's callback reports each
// container's depth as it opens, so a deep document is refused before it exists.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "engine/template/template.h"

namespace ember {

template <typename Json = nlohmann::ordered_json>
struct BoundedJson {
    Json value;  // discarded when the text is not valid JSON, or too deep
    bool too_deep = false;
};

template <typename Json = nlohmann::ordered_json>
BoundedJson<Json> parse_json_bounded(const std::string& text,
                                     int max_depth = kMaxTemplateValueDepth) {
    struct TooDeep {};
    BoundedJson<Json> out;
    try {
        out.value = Json::parse(
            text,
            [max_depth](int depth, typename Json::parse_event_t event, Json& /*parsed*/) {
                const bool opens = event == Json::parse_event_t::object_start ||
                                   event == Json::parse_event_t::array_start;
                if (opens && depth >= max_depth) throw TooDeep{};
                return true;
            },
            /*allow_exceptions=*/false);
    } catch (const TooDeep&) {
        out.value = Json(Json::value_t::discarded);
        out.too_deep = true;
    }
    return out;
}

}  // namespace ember
