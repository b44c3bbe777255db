// Loading a model file and placing it on the CPU or a GPU: every command loads models through
// load_model(), which also prints the load's warnings and the placement's note.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <memory>
#include <string>

#include "app/models/gpu_options.h"

namespace ember {
class Model;
}

namespace ember::app {

// Model::load(path), printing the load's warnings (metadata the file disagrees with) to
// stderr.
// `activations`: the --activations value (auto, exact, quantized; LoadOptions::activations).
// `gpu`: --gpu (auto, off, N; engine/model/gpu.h), --gpu-layers and --gpu-memory: the model is
// placed there, and why `auto` left it on the CPU, or how it was split between a GPU and the
// CPU, is printed as a note.
// `stop` (may be empty): asked during the load (LoadOptions::stop); true ends it with
// LoadStopped.
std::unique_ptr<Model> load_model(const std::string& path, const std::string& activations = "auto",
                                  const GpuOptions& gpu = {},
                                  const std::function<bool()>& stop = {});
// --gpu auto|off|N, --gpu-layers N|all and --gpu-memory SIZE (load_model's `gpu`).
void add_gpu_option(CLI::App* cmd, GpuOptions& gpu);
// --activations auto|exact|wide|quantized (load_model's `activations`).
void add_activations_option(CLI::App* cmd, std::string& activations);
// Where the model runs: "CPU" or the GPU's description.
std::string model_placement(const Model& model);

}  // namespace ember::app
