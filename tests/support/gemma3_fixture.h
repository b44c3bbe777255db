// The gemma3 fixture as its HF config describes it. The converted file has no sliding-window
// pattern key, so a reader takes the published models' rule (every 6th layer global) and all
// three of its layers slide; the HF reference was made with the config's layer types (the third
// layer global). The tests write that pattern into a copy.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "engine/gguf/gguf.h"
#include "tests/support/fixtures.h"

namespace ember::test {

inline constexpr const char* kGemma3Gguf = "arch/gemma3/gemma3.gguf";

// Writes the fixture with the HF config's layer types as the pattern key to `dst`; returns dst.
inline std::string gemma3_with_config_pattern(const std::string& dst) {
    const auto config =
        nlohmann::json::parse(read_file(fixture_path("arch/gemma3/hf/config.json")));
    GgufArray pattern;
    pattern.elem_type = GgufValueType::BOOL;
    for (const auto& type : config["layer_types"]) {
        pattern.ints.push_back(type.get<std::string>() == "sliding_attention" ? 1 : 0);
    }
    const auto src = GgufFile::open(fixture_path(kGemma3Gguf));
    GgufWriter w;
    for (const std::string& key : src->metadata_order()) w.copy_from(*src, key);
    w.set("gemma3.attention.sliding_window_pattern",
          GgufValue{GgufValueType::ARRAY, std::move(pattern)});
    for (const GgufTensorInfo& t : src->tensors()) {
        w.add_tensor(t.name, t.dims, t.type, std::vector<uint8_t>(t.data, t.data + t.n_bytes));
    }
    w.write(dst);
    return dst;
}

}  // namespace ember::test
