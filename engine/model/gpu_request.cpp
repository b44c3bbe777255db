// Parsing --gpu (gpu.h); the placement itself is in cuda/ (or cuda/no_cuda.cpp).
#include <charconv>
#include <cstdint>

#include "engine/model/gpu.h"

namespace ember {

std::optional<GpuRequest> parse_gpu_request(std::string_view text) {
    if (text == "auto") return GpuRequest{GpuRequest::Mode::Auto, 0};
    if (text == "off" || text == "cpu" || text == "none")
        return GpuRequest{GpuRequest::Mode::Off, 0};
    int index = -1;
    const auto [end, err] = std::from_chars(text.data(), text.data() + text.size(), index);
    if (err != std::errc() || end != text.data() + text.size() || index < 0) return std::nullopt;
    return GpuRequest{GpuRequest::Mode::Index, index};
}

std::optional<int64_t> parse_gpu_layers(std::string_view text) {
    if (text == "all") return INT64_MAX;
    int64_t layers = -1;
    const auto [end, err] = std::from_chars(text.data(), text.data() + text.size(), layers);
    if (err != std::errc() || end != text.data() + text.size() || layers < 0) return std::nullopt;
    return layers;
}

}  // namespace ember
