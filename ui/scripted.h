// Scripted mode: prompts from a stream, answers to another, one conversation across all of
// them with the state kept warm between turns.
#pragma once

#include <cstdio>
#include <istream>
#include <string>

#include "engine/generate/conversation.h"

namespace ember::ui {

struct ScriptedOptions {
    bool jsonl_in = false;   // {"role":"user","content":...} or {"prompt":...} per line
    bool jsonl_out = false;  // one JSON object per reply
    GenerateOptions generation;
};

// Runs prompts from `in` until EOF. Returns 0, or 1 after reporting the first failure on
// `err` (an invalid JSONL line names its line number). A closed output pipe ends quietly.
int run_scripted(Conversation& conversation, Sampler& sampler, std::istream& in, std::FILE* out,
                 std::FILE* err, const ScriptedOptions& options);

// Answers a single prompt (ember chat -p TEXT).
int run_single_prompt(Conversation& conversation, Sampler& sampler, const std::string& prompt,
                      std::FILE* out, std::FILE* err, const ScriptedOptions& options);

}  // namespace ember::ui
