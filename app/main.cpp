// ember: terminal chat for local LLMs. This is the only place that exits the process.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <sstream>
#include <string>
#include <vector>

#include "app/cli/cli_hints.h"
#include "app/commands/commands.h"
#include "app/models/model_locator.h"
#include "app/store/session_adapter.h"
#include "ui/io/terminal_text.h"

int main(int argc, char** argv) {
    CLI::App app{"ember: fast local LLM inference and chat in the terminal", "ember"};
    app.require_subcommand(1);
    app.set_version_flag("--version", "ember 0.1.0");
    std::vector<ember::app::Command> commands;
    // --help lists the commands in this order: the chat first, then what a user of it needs.
    ember::app::register_chat_command(app, commands);
    ember::app::register_sessions_command(app, commands);
    ember::app::register_replay_command(app, commands);
    ember::app::register_models_command(app, commands);
    ember::app::register_pull_command(app, commands);
    ember::app::register_serve_command(app, commands);
    ember::app::register_model_commands(app, commands);
    ember::app::register_render_command(app, commands);
    ember::app::register_synth_command(app, commands);
    ember::app::register_bench_command(app, commands);
    ember::app::register_bench_resume_command(app, commands);
    ember::app::register_bench_serve_command(app, commands);
    // Bare `ember` and `ember -m MODEL ...` (options first, no subcommand) mean `ember chat`.
    std::vector<std::string> args(argv + 1, argv + argc);
    const bool asks_for_help_or_version =
        !args.empty() && (args[0] == "-h" || args[0] == "--help" || args[0] == "--version");
    if (args.empty() || (args[0].starts_with("-") && !asks_for_help_or_version)) {
        args.insert(args.begin(), "chat");
    }
    // A first word that names no command: say so (CLI11 would only say one is required).
    if (!args.empty() && !args[0].starts_with("-") &&
        app.get_subcommands([&](CLI::App* sub) { return sub->check_name(args[0]); }).empty()) {
        ember::ui::TextWriter(stderr)
            .raw("ember: error: ")
            .text(ember::app::unknown_command_message(app, args[0]))
            .raw("\nRun with --help for more information.\n");
        return 2;
    }
    const std::vector<std::string> typed = args;  // for "did you mean" after a parse error
    std::reverse(args.begin(), args.end());       // CLI11 takes a vector in reverse order
    // One prefix for every error a person sees, usage errors included.
    app.failure_message([](const CLI::App*, const CLI::Error& e) {
        return "ember: error: " + std::string(e.what()) +
               "\nRun with --help for more information.\n";
    });
    try {
        app.parse(std::move(args));
    } catch (const CLI::ParseError& e) {
        // Usage errors quote what was typed (an unknown option, a bad value): on a terminal,
        // control characters in it are shown, not obeyed. A usage error exits 2, as
        // command-line programs do (CLI11's own codes are 100+); --help and --version exit 0.
        // An unknown option or sub-command near a known one: say which ("--tmep": did you
        // mean "--temp"?). --help and --version are not errors.
        if (e.get_exit_code() != 0) {
            if (const std::string hint = ember::app::unknown_option_message(app, typed);
                !hint.empty()) {
                ember::ui::TextWriter(stderr)
                    .raw("ember: error: ")
                    .text(hint)
                    .raw("\nRun with --help for more information.\n");
                return 2;
            }
        }
        std::ostringstream out, err;
        const int status = app.exit(e, out, err);
        ember::ui::TextWriter(stdout).text(out.str());
        std::fflush(stdout);
        ember::ui::TextWriter(stderr).text(err.str());
        return status == 0 ? 0 : 2;
    }
    for (const auto& cmd : commands) {
        if (cmd.cli->parsed()) {
            try {
                return cmd.run();
            } catch (const CLI::Error& e) {
                // A value only checkable once the model is loaded (--ids, --ctx): still usage.
                std::fflush(stdout);
                ember::ui::TextWriter(stderr).raw("ember: error: ").text(e.what()).raw("\n");
                return 2;
            } catch (const std::exception& e) {
                std::fflush(stdout);
                // Errors quote ids, titles, paths and file contents.
                ember::ui::TextWriter(stderr).raw("ember: error: ").text(e.what()).raw("\n");
                return 1;
            }
        }
    }
    return 2;
}
