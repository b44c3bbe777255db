// Running the real binary from tests: fork/exec with captured stdout and stderr.
#pragma once

#include <string>
#include <vector>

namespace ember::test {

struct CommandResult {
    int status = -1;  // exit status, or 128 + signal number when killed by a signal
    std::string out;
    std::string err;
};

// Runs argv[0] with the arguments (no shell), feeding `input` on stdin.
CommandResult run_command(const std::vector<std::string>& argv, const std::string& input = "");

std::vector<std::string> split_lines(const std::string& text);

// The full path of an executable found on $PATH, or empty.
std::string find_in_path(const std::string& program);
// `s` quoted for a POSIX shell command line.
std::string shell_quote(const std::string& s);

}  // namespace ember::test
