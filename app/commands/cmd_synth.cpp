// synth: write a random-weight GGUF of a real model's shape (for benchmarks).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "app/commands/commands.h"
#include "engine/synth/synth.h"
#include "engine/tensor/types.h"
#include "engine/util/thread_pool.h"

namespace ember::app {

namespace {

struct SynthArgs {
    std::string shape;
    std::string type;
    std::string vocab_from;
    std::string output;
    uint64_t seed = 1;
    int threads = 0;
};

int run_synth(const SynthArgs& a) {
    SynthOptions o;
    o.shape = find_synth_shape(a.shape);
    const SynthRecipeInfo* recipe = find_synth_recipe(a.type);
    // CLI11 already restricted both to known names; this guards against the lists drifting.
    if (o.shape == nullptr || recipe == nullptr) {
        throw std::runtime_error("unknown shape '" + a.shape + "' or type '" + a.type + "'");
    }
    o.recipe = recipe->recipe;
    o.vocab_from = a.vocab_from;
    o.output = a.output;
    o.seed = a.seed;
    ThreadPool pool(a.threads > 0 ? a.threads : default_threads());
    const SynthSummary s = write_synth_model(o, pool);
    std::printf(
        "wrote %s: %s %s, %zu tensors, %.1fM parameters, %.1f MiB of tensor data in %.1f s\n",
        a.output.c_str(), a.shape.c_str(), a.type.c_str(), s.n_tensors,
        static_cast<double>(s.n_params) / 1e6, static_cast<double>(s.tensor_bytes) / 1048576.0,
        s.seconds);
    return 0;
}

}  // namespace

void register_synth_command(CLI::App& app, std::vector<Command>& out) {
    auto args = std::make_shared<SynthArgs>();
    auto* cmd = app.add_subcommand(
        "synth", "Write a GGUF with random weights in the exact layout of a real model");
    std::vector<std::string> shapes, types;
    for (const auto& s : synth_shapes()) shapes.emplace_back(s.name);
    for (const auto& r : synth_recipes()) types.emplace_back(r.name);
    cmd->add_option("--shape", args->shape, "Model shape")
        ->required()
        ->check(CLI::IsMember(shapes));
    cmd->add_option("--type", args->type,
                    "Weight types (q4_k_m mixes Q4_K/Q6_K like the reference)")
        ->required()
        ->check(CLI::IsMember(types));
    cmd->add_option("--vocab-from", args->vocab_from,
                    "GGUF whose tokenizer is copied (its vocabulary must match the shape)")
        ->required()
        ->check(CLI::ExistingFile);
    cmd->add_option("-o,--output", args->output, "Output GGUF file")->required();
    cmd->add_option("--seed", args->seed, "Random seed of the weights")->capture_default_str();
    add_threads_option(cmd, args->threads, "Threads (default: the physical cores)");
    out.push_back({cmd, [args] { return run_synth(*args); }});
}

}  // namespace ember::app
