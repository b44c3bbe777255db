#include "ui/chat/presets.h"

#include <stdexcept>
#include <utility>

#include "engine/sampling/sampling_ranges.h"

namespace ember::ui {

namespace {

using json = nlohmann::json;

// Config key -> /set name.
const std::vector<std::pair<std::string, std::string>>& sampling_keys() {
    static const std::vector<std::pair<std::string, std::string>> keys = {
        {"temp", "temp"},
        {"top_k", "top-k"},
        {"top_p", "top-p"},
        {"min_p", "min-p"},
        {"repeat_penalty", "repeat-penalty"},
        {"seed", "seed"}};
    return keys;
}

Preset parse_one(const std::string& name, const json& value, const std::string& path) {
    const std::string where = path + ": presets." + name;
    if (!value.is_object()) throw std::runtime_error(where + " must be an object");
    Preset preset;
    for (const auto& [key, item] : value.items()) {
        if (key == "system") {
            if (!item.is_string()) throw std::runtime_error(where + ".system must be a string");
            preset.system = item.get<std::string>();
        } else if (key == "sampling") {
            if (!item.is_object()) throw std::runtime_error(where + ".sampling must be an object");
            for (const auto& [setting, number] : item.items()) {
                bool known = false;
                for (const auto& k : sampling_keys()) known = known || k.first == setting;
                if (!known) {
                    throw std::runtime_error(where + ": unknown sampling setting \"" + setting +
                                             "\" (known: temp, top_k, top_p, min_p, "
                                             "repeat_penalty, seed)");
                }
                if (!number.is_number() || (setting == "seed" && !number.is_number_unsigned())) {
                    throw std::runtime_error(where + ".sampling." + setting + " must be a " +
                                             (setting == "seed" ? "whole number >= 0" : "number"));
                }
                // The ranges the command line, /set and the server hold values to.
                const std::string field = setting == "temp" ? "temperature" : setting;
                if (const std::string rule = sampling_range_problem(field, number.get<double>());
                    !rule.empty()) {
                    throw std::runtime_error(where + ".sampling." + setting + " " + rule +
                                             ", not " + number.dump());
                }
            }
            preset.sampling = item;
        } else {
            throw std::runtime_error(where + ": unknown key \"" + key +
                                     "\" (a preset holds \"system\" and \"sampling\")");
        }
    }
    return preset;
}

}  // namespace

Presets parse_presets(const json& config, const std::string& config_path) {
    Presets presets;
    if (!config.is_object() || !config.contains("presets")) return presets;
    const json& all = config["presets"];
    if (!all.is_object()) throw std::runtime_error(config_path + ": \"presets\" must be an object");
    for (const auto& [name, value] : all.items()) {
        presets.emplace(name, parse_one(name, value, config_path));
    }
    return presets;
}

const Preset& find_preset(const Presets& presets, const std::string& name,
                          const std::string& config_path) {
    const auto it = presets.find(name);
    if (it != presets.end()) return it->second;
    std::string names;
    for (const auto& [n, p] : presets) names += (names.empty() ? "" : ", ") + n;
    throw std::runtime_error(
        "no preset '" + name + "' in " + config_path +
        (names.empty() ? std::string(" (it defines none)") : " (presets: " + names + ")"));
}

void apply_preset_sampling(const Preset& preset, SamplingParams& sampling,
                           std::optional<uint64_t>& fixed_seed) {
    const json& j = preset.sampling;
    if (j.contains("temp")) sampling.temperature = j["temp"].get<float>();
    if (j.contains("top_k")) sampling.top_k = j["top_k"].get<int32_t>();
    if (j.contains("top_p")) sampling.top_p = j["top_p"].get<float>();
    if (j.contains("min_p")) sampling.min_p = j["min_p"].get<float>();
    if (j.contains("repeat_penalty")) sampling.repeat_penalty = j["repeat_penalty"].get<float>();
    if (j.contains("seed")) {
        fixed_seed = j["seed"].get<uint64_t>();
        sampling.seed = *fixed_seed;
    }
}

}  // namespace ember::ui
