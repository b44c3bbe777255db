// --json-schema FILE|JSON and --grammar FILE: constrained output for `ember run` and
// `ember chat` (engine/grammar).
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "engine/grammar/grammar.h"

namespace ember::app {

struct OutputFormatFlags {
    std::string json_schema;   // a file, or the schema itself when it starts with '{'
    std::string grammar_file;  // GBNF
};

void add_output_format_options(CLI::App* cmd, OutputFormatFlags& flags);

// The grammar the flags ask for; null when neither is given. Throws CLI::ValidationError
// naming the flag: an unreadable file, a grammar's syntax error (line and column), a schema
// feature Ember does not support (the keyword), both flags at once.
std::shared_ptr<const grammar::Grammar> grammar_from_flags(const OutputFormatFlags& flags);

}  // namespace ember::app
