#include "ui/presets.h"

#include <stdexcept>
#include <utility>

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

std::vector<std::string> preset_commands(const Preset& preset) {
    std::vector<std::string> commands;
    if (preset.system) commands.push_back("/system " + *preset.system);
    for (const auto& [key, setting] : sampling_keys()) {
        if (preset.sampling.contains(key)) {
            commands.push_back("/set " + setting + " " + preset.sampling[key].dump());
        }
    }
    return commands;
}

}  // namespace ember::ui
