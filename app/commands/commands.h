// Sub-commands of the `ember` binary, one file each in this folder (the benchmarks' in
// app/bench/). Each registers its options on the CLI11 app and returns the process exit
// status from its run function; only main() exits. The options they share are in
// app/cli/options.h, loading and placing a model in app/models/load_model.h.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "app/cli/options.h"
#include "app/models/load_model.h"

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

// ember pull: a GGUF model from a Hugging Face-style hub (app/models/hub_pull.h).
void register_pull_command(CLI::App& app, std::vector<Command>& out);

// ember serve: the OpenAI-compatible HTTP API (cmd_serve.cpp, app/serve/).
void register_serve_command(CLI::App& app, std::vector<Command>& out);
// ember models: the GGUF models Ember can find by itself (cmd_models.cpp).
void register_models_command(CLI::App& app, std::vector<Command>& out);

// ember sessions list|show|search|export|rm|rename|stats (cmd_sessions.cpp).
void register_sessions_command(CLI::App& app, std::vector<Command>& out);

// ember bench-serve: throughput and TTFT of the server under concurrent clients.
void register_bench_serve_command(CLI::App& app, std::vector<Command>& out);

}  // namespace ember::app
