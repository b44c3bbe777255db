// A greedy scripted chat through the real binary: one JSONL prompt per turn on stdin, one JSON
// object per reply back (`ember chat --script --jsonl --temp 0 -n 12 -t 2` plus extra flags).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/support/fixtures.h"
#include "tests/support/process.h"

namespace ember::test {

struct ChatRun {
    int status = -1;
    std::vector<nlohmann::json> turns;  // one JSON line per prompt
    std::string err;
};

// `model`: a path under the fixtures; `extra`: database, cache and other flags.
inline ChatRun run_scripted_chat(const std::string& model, const std::vector<std::string>& prompts,
                                 const std::vector<std::string>& extra) {
    std::string input;
    for (const auto& p : prompts) {
        input += nlohmann::json{{"role", "user"}, {"content", p}}.dump() + "\n";
    }
    std::vector<std::string> argv = {ember_binary(), "chat",    "-m",     fixture_path(model),
                                     "--script",     "--jsonl", "--temp", "0",
                                     "-n",           "12",      "-t",     "2"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    const auto r = run_command(argv, input);
    ChatRun out;
    out.status = r.status;
    out.err = r.err;
    for (const auto& line : split_lines(r.out)) out.turns.push_back(nlohmann::json::parse(line));
    return out;
}

}  // namespace ember::test
