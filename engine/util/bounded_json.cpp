#include "engine/util/bounded_json.h"

namespace ember {

namespace {

std::string size_text(size_t bytes) {
    constexpr size_t kMiB = size_t{1} << 20;
    return bytes % kMiB == 0 && bytes > 0 ? std::to_string(bytes / kMiB) + " MiB"
                                          : std::to_string(bytes) + " bytes";
}

std::string limit_message(JsonLimitError::Bound bound, std::string_view what,
                          const JsonLimits& limits) {
    const std::string bound_text =
        bound == JsonLimitError::Bound::Size
            ? "JSON larger than " + size_text(limits.max_bytes)
            : "JSON nested deeper than " + std::to_string(limits.max_depth) + " levels";
    return what.empty() ? bound_text : std::string(what) + ": " + bound_text;
}

}  // namespace

JsonLimitError::JsonLimitError(Bound bound, std::string_view what, const JsonLimits& limits)
    : std::runtime_error(limit_message(bound, what, limits)), bound_(bound) {}

std::string read_json_text(std::istream& in, const JsonLimits& limits) {
    std::string text;
    char buffer[1 << 16];
    while (in && text.size() <= limits.max_bytes) {
        in.read(buffer, sizeof buffer);
        text.append(buffer, static_cast<size_t>(in.gcount()));
    }
    if (text.size() > limits.max_bytes + 1) text.resize(limits.max_bytes + 1);
    return text;
}

}  // namespace ember
