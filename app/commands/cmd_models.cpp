// ember models: the GGUF files find_models() sees (app/models/model_locator.h).
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "app/commands/commands.h"
#include "app/models/model_locator.h"
#include "ui/io/terminal_text.h"

namespace ember::app {

using nlohmann::json;

void register_models_command(CLI::App& app, std::vector<Command>& out) {
    auto* cmd = app.add_subcommand("models", "List the GGUF models Ember can find by itself");
    auto json_out = std::make_shared<bool>(false);
    cmd->add_flag("--json", *json_out, "One JSON array");
    out.push_back({cmd, [json_out] {
                       const ModelDirs dirs = model_dirs();
                       const auto found = find_models(dirs);
                       if (*json_out) {
                           json arr = json::array();
                           for (const auto& m : found) {
                               arr.push_back({{"name", m.name},
                                              {"path", m.path},
                                              {"source", m.source},
                                              {"bytes", m.bytes}});
                           }
                           // File names may hold anything: escaped on a terminal.
                           const bool ascii = ui::is_terminal(stdout);
                           std::printf(
                               "%s\n",
                               arr.dump(-1, ' ', ascii, json::error_handler_t::replace).c_str());
                           return 0;
                       }
                       if (found.empty()) {
                           std::fprintf(stderr, "%s\n", where_to_put_models(dirs).c_str());
                           return 0;
                       }
                       const ui::TextWriter shown(stdout);  // file names may hold anything
                       for (const auto& m : found) {
                           std::printf("%-32s %9.1f MiB  %-9s  %s\n", shown.shown(m.name).c_str(),
                                       static_cast<double>(m.bytes) / (1024.0 * 1024.0),
                                       m.source.c_str(), shown.shown(m.path).c_str());
                       }
                       return 0;
                   }});
}

}  // namespace ember::app
