// "Did you mean" for the command line: a mistyped command (`ember caht`) or option
// (`--tmep`), answered with the nearest name the command knows (app/cli/did_you_mean.h).
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace ember::app {

// For a first word that names no command: "unknown command 'caht'; did you mean 'chat'?" (the
// hint only when one command is near).
std::string unknown_command_message(CLI::App& app, const std::string& typed);

// After a parse error, for `args` (in the order typed): a sub-command the chosen command does
// not have ("unknown command 'sessions lst'; did you mean 'sessions list'?"), or the first
// option it (and its sub-command, if one was named) does not know, with the nearest one it
// does: "unknown option '--tmep'; did you mean '--temp'?". Empty when nothing is unknown or
// nothing is near (CLI11's own message is then the better one).
std::string unknown_option_message(CLI::App& app, const std::vector<std::string>& args);

}  // namespace ember::app
