#include "app/cli/cli_hints.h"

#include <algorithm>

#include "app/cli/did_you_mean.h"

namespace ember::app {

namespace {

std::vector<std::string> command_names(CLI::App& app) {
    std::vector<std::string> names;
    for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
        names.push_back(sub->get_name());
    }
    return names;
}

void add_option_names(const CLI::App& app, std::vector<std::string>& names) {
    for (const CLI::Option* option : app.get_options()) {
        for (const auto& name : option->get_lnames()) names.push_back("--" + name);
        for (const auto& name : option->get_snames()) names.push_back("-" + name);
    }
}

}  // namespace

std::string unknown_command_message(CLI::App& app, const std::string& typed) {
    std::string message = "unknown command '" + typed + "'";
    if (const std::string near = nearest_name(typed, command_names(app)); !near.empty()) {
        message += "; did you mean '" + near + "'?";
    }
    return message;
}

std::string unknown_option_message(CLI::App& app, const std::vector<std::string>& args) {
    if (args.empty()) return {};
    std::vector<std::string> known;
    add_option_names(app, known);
    CLI::App* command = nullptr;
    for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
        if (sub->check_name(args[0])) command = sub;
    }
    if (command == nullptr) return {};
    add_option_names(*command, known);
    // A sub-command of the command (`sessions export`) brings its own options.
    for (const auto& arg : args) {
        for (CLI::App* sub : command->get_subcommands([](CLI::App*) { return true; })) {
            if (sub->check_name(arg)) add_option_names(*sub, known);
        }
    }
    // `ember sessions lst`: the word after a command that has sub-commands names one of them.
    std::vector<std::string> sub_names;
    for (CLI::App* sub : command->get_subcommands([](CLI::App*) { return true; })) {
        sub_names.push_back(sub->get_name());
    }
    if (!sub_names.empty() && args.size() > 1 && !args[1].starts_with("-") &&
        std::find(sub_names.begin(), sub_names.end(), args[1]) == sub_names.end()) {
        const std::string near = nearest_name(args[1], sub_names);
        if (!near.empty()) {
            return "unknown command '" + args[0] + " " + args[1] + "'; did you mean '" + args[0] +
                   " " + near + "'?";
        }
    }
    for (size_t i = 1; i < args.size(); ++i) {
        const std::string& arg = args[i];
        if (arg == "--") break;
        if (!arg.starts_with("--") || arg.size() < 3) continue;
        const std::string name = arg.substr(0, arg.find('='));
        if (std::find(known.begin(), known.end(), name) != known.end()) continue;
        const std::string near = nearest_name(name, known);
        if (near.empty()) return {};
        return "unknown option '" + name + "'; did you mean '" + near + "'?";
    }
    return {};
}

}  // namespace ember::app
