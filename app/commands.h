// Sub-commands of the `ember` binary. Each registers its options on the CLI11 app and
// returns the process exit status from its run function; only main() exits.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/model/kv_type.h"
#include "engine/sampling/sampler.h"

namespace ember {
class Model;
}

namespace ember::app {

// A registered sub-command: its CLI11 node and what runs when it is chosen.
struct Command {
    CLI::App* cli = nullptr;
    std::function<int()> run;
};

// Model inspection and raw completion: run, eval, tokenize, detokenize, info.
void register_model_commands(CLI::App& app, std::vector<Command>& out);

// Random-weight GGUF of a real model's shape: synth.
void register_synth_command(CLI::App& app, std::vector<Command>& out);

// Prefill/decode speed, peak memory and the bandwidth roofline: bench.
void register_bench_command(CLI::App& app, std::vector<Command>& out);

// Chat: scripted mode (stdin/stdout, JSONL) and a plain interactive loop.
void register_chat_command(CLI::App& app, std::vector<Command>& out);

// ember render: a chat template's output for a messages file.
void register_render_command(CLI::App& app, std::vector<Command>& out);

// ember replay: a saved conversation's transcript, or its turns regenerated and compared.
void register_replay_command(CLI::App& app, std::vector<Command>& out);

// ember bench-resume: warm resume in a new process against recomputing (real processes).
void register_bench_resume_command(CLI::App& app, std::vector<Command>& out);

// ember pull: a GGUF model from a Hugging Face-style hub (app/hub_pull.h).
void register_pull_command(CLI::App& app, std::vector<Command>& out);

// ember serve: the OpenAI-compatible HTTP API (cmd_serve.cpp, app/serve/).
void register_serve_command(CLI::App& app, std::vector<Command>& out);
// ember bench-serve: throughput and TTFT of the server under concurrent clients.
void register_bench_serve_command(CLI::App& app, std::vector<Command>& out);

// Options shared by the generating commands.
void add_model_option(CLI::App* cmd, std::string& model);
void add_sampling_options(CLI::App* cmd, SamplingParams& sampling);
// -t,--threads, checked to lie in 1..kMaxThreads (app/cli_checks.h).
void add_threads_option(CLI::App* cmd, int& threads, const std::string& help);
// --kv-type f32|f16|q8_0, its default the value `kv_type` holds; kv_type_of() reads the value.
void add_kv_type_option(CLI::App* cmd, std::string& kv_type);
KvType kv_type_of(const std::string& kv_type);
// --activations auto|exact|quantized (load_model's `activations`).
void add_activations_option(CLI::App* cmd, std::string& activations);
// A chat template file's text (--chat-template); throws naming the file.
std::string read_template_file(const std::string& path);

// Parses "1,2,3" (spaces allowed) into token ids; throws CLI::ValidationError naming `what`
// (the option) and the bad item.
std::vector<int32_t> parse_id_list(const std::string& text, const std::string& what = "--ids");

// Model::load(path), printing the load's warnings (metadata the file disagrees with) to
// stderr: every command loads models through this.
// `activations`: the --activations value (auto, exact, quantized; LoadOptions::activations).
// `gpu`: the --gpu value (auto, off, N; engine/model/gpu.h): the model is placed there, and
// why `auto` left it on the CPU is printed as a note.
// `stop` (may be empty): asked during the load (LoadOptions::stop); true ends it with
// LoadStopped.
std::unique_ptr<Model> load_model(const std::string& path, const std::string& activations = "auto",
                                  const std::string& gpu = "auto",
                                  const std::function<bool()>& stop = {});
// --gpu auto|off|N (load_model's `gpu`).
void add_gpu_option(CLI::App* cmd, std::string& gpu);
// Where the model runs: "CPU" or the GPU's description.
std::string model_placement(const Model& model);

// Default thread count: the physical cores among the CPUs this process may run on.
int default_threads();

}  // namespace ember::app
