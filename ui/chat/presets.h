// Named presets from the config file: a system prompt and sampling settings under a name,
//   "presets": {"code": {"system": "You write C++.", "sampling": {"temp": 0.2, "top_k": 20}}}
// chosen with `ember chat --preset NAME` or, in the full-screen chat, `/preset NAME`.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/sampling/sampler.h"

namespace ember::ui {

struct Preset {
    std::optional<std::string> system;
    // The config's sampling keys (temp, top_k, top_p, min_p, repeat_penalty, seed), checked.
    nlohmann::json sampling = nlohmann::json::object();
};

using Presets = std::map<std::string, Preset>;

// The config's "presets" object (none: empty). Throws one line naming `config_path` and the
// key at fault for anything malformed: a preset that is not an object, an unknown key, a
// system prompt that is not a string, an unknown or non-numeric sampling setting.
Presets parse_presets(const nlohmann::json& config, const std::string& config_path);

// The preset called `name`; throws naming the presets there are when none is.
const Preset& find_preset(const Presets& presets, const std::string& name,
                          const std::string& config_path);

// Writes `preset`'s sampling settings over `sampling` (a seed it names becomes `fixed_seed`).
void apply_preset_sampling(const Preset& preset, SamplingParams& sampling,
                           std::optional<uint64_t>& fixed_seed);

}  // namespace ember::ui
