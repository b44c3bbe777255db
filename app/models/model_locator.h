// Finding a model when the user did not give a path: EMBER_MODEL, then the config file, then
// GGUF files in Ember's models directory and in the stores of other local-model tools.
//
// Search order (first hit wins):
//   1. -m/--model: a path, or a name matching a found model (file stem or ollama tag);
//   2. $EMBER_MODEL (a path or a name);
//   3. "model" in $XDG_CONFIG_HOME/ember/config.json (default ~/.config/ember/config.json);
//   4. the most recently modified GGUF among the found models (see find_models()).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/sampling/sampler.h"

namespace ember::app {

struct FoundModel {
    std::string name;    // what -m NAME matches: file stem, or ollama's "model:tag"
    std::string path;    // the GGUF file
    std::string source;  // "ember", "llama.cpp", "ollama", "lm-studio"
    uint64_t bytes = 0;
    std::filesystem::file_time_type modified;
};

// Where each tool keeps its models, from the environment (HOME, XDG_*, LLAMA_CACHE,
// OLLAMA_MODELS). Directories that do not exist are listed too, so `ember models` can say
// where it looked.
struct ModelDirs {
    std::string ember;                   // $XDG_DATA_HOME/ember/models
    std::string llama_cpp;               // $LLAMA_CACHE or ~/.cache/llama.cpp
    std::string ollama;                  // $OLLAMA_MODELS or ~/.ollama/models
    std::vector<std::string> lm_studio;  // ~/.lmstudio/models, ~/.cache/lm-studio/models
};
ModelDirs model_dirs();

// Every GGUF model found in those directories, newest first. Unreadable entries are skipped.
std::vector<FoundModel> find_models(const ModelDirs& dirs);

// $XDG_CONFIG_HOME/ember/config.json, parsed; an empty object when the file does not exist.
// Throws with the file and the parser's position when it exists but is not valid JSON.
nlohmann::json load_config();
std::string config_path();

// Resolves `requested` (may be empty) to a model file by the order above. Throws a message
// that says where to put a model when nothing is found, or which names exist (and the nearest
// one) when a name matches none. `note` receives a line for stderr when a model was picked
// implicitly. A hub name, OWNER/REPO[:QUANT|FILE] (app/models/hub_pull.h), is the file `ember pull`
// installed for it; one not pulled yet is pulled after a yes on the terminal when
// `may_ask_to_pull` (not from inside the full-screen chat, which owns the terminal), and is
// otherwise an error saying to run `ember pull` first.
std::string resolve_model(const std::string& requested, std::string* note = nullptr,
                          bool may_ask_to_pull = true);

// What to say when no model was given and none is found: the ways to give one, and where
// `ember models` looked.
std::string where_to_put_models(const ModelDirs& dirs);

// resolve_model(), printing the note (if any) to stderr: for the commands' run functions.
std::string model_path_for(const std::string& requested);

// Applies the config's "sampling" object ({"temp":..,"top_k":..,"top_p":..,"min_p":..,
// "repeat_penalty":..,"seed":..}) to `params` for every option not given on `cmd`'s
// command line. Throws naming the key when a value has the wrong type.
void apply_config_sampling(const nlohmann::json& config, const CLI::App& cmd,
                           SamplingParams& params);

}  // namespace ember::app
