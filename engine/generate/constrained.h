// Constrained output for a model: its vocabulary as the grammar mask sees it, and the
// grammar a caller's request compiles to.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "engine/grammar/grammar.h"
#include "engine/grammar/token_mask.h"

namespace ember {

class Tokenizer;

// Every token's bytes (control, unknown and unused tokens have none, so they are never
// allowed under a grammar) and the end-of-generation tokens. Built once per model (a sort of
// the vocabulary: ~0.1 s for 152k tokens) and shared by every constrained request.
std::shared_ptr<const grammar::TokenTrie> make_token_trie(const Tokenizer& tokenizer);

// What a request asks its output to be.
enum class OutputFormatKind { Free, Grammar, JsonSchema, JsonObject };
struct OutputFormat {
    OutputFormatKind kind = OutputFormatKind::Free;
    std::string text;  // GBNF for Grammar, the schema's JSON text for JsonSchema
};

// The grammar of `format` (null for Free). Throws grammar::GrammarError (a SchemaError naming
// the keyword for an unsupported schema feature; a schema that is not JSON is a SchemaError
// too).
std::shared_ptr<const grammar::Grammar> compile_output_format(const OutputFormat& format);

}  // namespace ember
