// Sub-commands of the `ember` binary. Each registers its options on the CLI11 app and
// returns the process exit status from its run function; only main() exits.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace ember::app {

// A registered sub-command: its CLI11 node and what runs when it is chosen.
struct Command {
    CLI::App* cli = nullptr;
    std::function<int()> run;
};

// Model inspection and raw completion: run, eval, tokenize, detokenize, info.
void register_model_commands(CLI::App& app, std::vector<Command>& out);

// Parses "1,2,3" (spaces allowed) into token ids; throws CLI::ValidationError naming the
// bad item.
std::vector<int32_t> parse_id_list(const std::string& text);

// Default thread count: the cores this process may run on.
int default_threads();

}  // namespace ember::app
