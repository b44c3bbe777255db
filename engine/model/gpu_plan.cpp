// Planning a model's split between a GPU and the CPU (gpu_plan.h).
#include "engine/model/gpu_plan.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace ember {

GpuSplit gpu_split_of(const GpuSizes& sizes, int64_t layers) {
    GpuSplit split;
    split.n_layer = static_cast<int64_t>(sizes.layer_bytes.size());
    split.layers = std::clamp<int64_t>(layers, 0, split.n_layer);
    if (split.layers == 0) return split;  // nothing goes to the GPU
    split.weight_bytes = sizes.always + (split.whole() ? sizes.output : 0);
    for (int64_t l = 0; l < split.layers; ++l) {
        split.weight_bytes += sizes.layer_bytes[static_cast<size_t>(l)];
        if (static_cast<size_t>(l) < sizes.layer_kv.size()) {
            split.kv_bytes += sizes.layer_kv[static_cast<size_t>(l)];
        }
    }
    const auto index = static_cast<size_t>(split.layers);
    split.scratch_bytes = split.whole() || index >= sizes.split_scratch.size()
                              ? sizes.scratch
                              : sizes.split_scratch[index];
    split.need_bytes = split.weight_bytes + split.kv_bytes + split.scratch_bytes;
    return split;
}

GpuSplit plan_gpu_split(const GpuSizes& sizes, uint64_t limit) {
    const auto n_layer = static_cast<int64_t>(sizes.layer_bytes.size());
    if (const GpuSplit whole = gpu_split_of(sizes, n_layer); whole.need_bytes <= limit) {
        return whole;
    }
    // Without the output: each added layer only grows the need, so the first that does not
    // fit ends the prefix.
    int64_t fit = 0;
    while (fit + 1 < n_layer && gpu_split_of(sizes, fit + 1).need_bytes <= limit) ++fit;
    return gpu_split_of(sizes, fit);
}

std::optional<uint64_t> parse_memory_size(std::string_view text) {
    // The number: digits with at most one '.', then the unit.
    size_t end = 0;
    bool dot = false;
    while (end < text.size() &&
           (std::isdigit(static_cast<unsigned char>(text[end])) || (text[end] == '.' && !dot))) {
        dot = dot || text[end] == '.';
        ++end;
    }
    if (end == 0 || (end == 1 && dot)) return std::nullopt;
    double value = 0;
    const auto [ptr, err] = std::from_chars(text.data(), text.data() + end, value);
    if (err != std::errc() || ptr != text.data() + end) return std::nullopt;
    std::string unit;
    for (const char ch : text.substr(end)) {
        if (ch == ' ') continue;
        unit += static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    }
    struct Unit {
        const char* name;
        int shift;
    };
    constexpr std::array<Unit, 14> units{{{"", 0},
                                          {"B", 0},
                                          {"K", 10},
                                          {"KB", 10},
                                          {"KIB", 10},
                                          {"M", 20},
                                          {"MB", 20},
                                          {"MIB", 20},
                                          {"G", 30},
                                          {"GB", 30},
                                          {"GIB", 30},
                                          {"T", 40},
                                          {"TB", 40},
                                          {"TIB", 40}}};
    const auto found =
        std::find_if(units.begin(), units.end(), [&](const Unit& u) { return unit == u.name; });
    if (found == units.end()) return std::nullopt;
    const double bytes = std::floor(value * std::ldexp(1.0, found->shift));
    if (!(bytes >= 1) || bytes >= std::ldexp(1.0, 63)) return std::nullopt;
    return static_cast<uint64_t>(bytes);
}

std::string format_memory_size(uint64_t bytes) {
    char text[32];
    if (bytes >= (uint64_t{1} << 30)) {
        std::snprintf(text, sizeof text, "%.1f GiB", static_cast<double>(bytes) / (1 << 30));
    } else {
        std::snprintf(text, sizeof text, "%llu MiB",
                      static_cast<unsigned long long>((bytes + (1 << 20) - 1) >> 20));
    }
    return text;
}

}  // namespace ember
