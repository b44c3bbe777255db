// ember: terminal chat for local LLMs. This is the only place that exits the process.
#include <cstdio>
#include <exception>

#include "app/commands.h"
#include "app/model_locator.h"
#include "app/session_adapter.h"

int main(int argc, char** argv) {
    CLI::App app{"ember: fast local LLM inference and chat in the terminal"};
    app.require_subcommand(1);
    app.set_version_flag("--version", "ember 0.1.0");
    std::vector<ember::app::Command> commands;
    ember::app::register_model_commands(app, commands);
    ember::app::register_synth_command(app, commands);
    ember::app::register_bench_command(app, commands);
    ember::app::register_chat_command(app, commands);
    ember::app::register_render_command(app, commands);
    ember::app::register_sessions_command(app, commands);
    ember::app::register_models_command(app, commands);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    }
    for (const auto& cmd : commands) {
        if (cmd.cli->parsed()) {
            try {
                return cmd.run();
            } catch (const std::exception& e) {
                std::fflush(stdout);
                std::fprintf(stderr, "ember: error: %s\n", e.what());
                return 1;
            }
        }
    }
    return 2;
}
