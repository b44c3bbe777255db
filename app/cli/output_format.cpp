#include "app/cli/output_format.h"

#include <fstream>
#include <sstream>

#include "engine/generate/constrained.h"

namespace ember::app {

namespace {

std::string read_text_file(const std::string& path, const std::string& flag) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw CLI::ValidationError(flag, "cannot read '" + path + "'");
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

}  // namespace

void add_output_format_options(CLI::App* cmd, OutputFormatFlags& flags) {
    cmd->add_option("--json-schema", flags.json_schema,
                    "Constrain the answer to JSON valid against this JSON Schema (a file, or "
                    "the schema itself when it starts with '{')");
    cmd->add_option("--grammar", flags.grammar_file,
                    "Constrain the answer to this GBNF grammar (a file; its rule 'root')");
}

std::shared_ptr<const grammar::Grammar> grammar_from_flags(const OutputFormatFlags& flags) {
    if (!flags.json_schema.empty() && !flags.grammar_file.empty()) {
        throw CLI::ValidationError("--json-schema", "and --grammar cannot be used together");
    }
    OutputFormat format;
    std::string flag;
    if (!flags.json_schema.empty()) {
        flag = "--json-schema";
        format.kind = OutputFormatKind::JsonSchema;
        const size_t start = flags.json_schema.find_first_not_of(" \t\r\n");
        const bool inline_json = start != std::string::npos && flags.json_schema[start] == '{';
        format.text = inline_json ? flags.json_schema : read_text_file(flags.json_schema, flag);
    } else if (!flags.grammar_file.empty()) {
        flag = "--grammar";
        format.kind = OutputFormatKind::Grammar;
        format.text = read_text_file(flags.grammar_file, flag);
    } else {
        return nullptr;
    }
    try {
        return compile_output_format(format);
    } catch (const grammar::GrammarError& e) {
        throw CLI::ValidationError(flag, e.what());
    }
}

}  // namespace ember::app
