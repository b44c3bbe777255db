// Constrained output for a model: its vocabulary as the grammar mask sees it, and the
// grammar a caller's request compiles to.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "engine/grammar/grammar.h"
#include "engine/grammar/token_mask.h"

namespace ember {

class Tokenizer;
struct HarmonyTokens;

// Every token's bytes (control, unknown and unused tokens have none, so they are never
// allowed under a grammar) and the end-of-generation tokens. Built once per model (a sort of
// the vocabulary: ~0.1 s for 152k tokens) and shared by every constrained request.
std::shared_ptr<const grammar::TokenTrie> make_token_trie(const Tokenizer& tokenizer);

// The trie for grammars over harmony replies (tool_call_grammar for gpt-oss): the harmony
// markers, control tokens the plain trie leaves out, stand for harmony_sentinel() text, and
// no ordinary token may spell a sentinel (those holding byte 0x01 are left out). The markers
// are not end tokens here, so a grammar decides where the reply's markup goes.
std::shared_ptr<const grammar::TokenTrie> make_harmony_token_trie(const Tokenizer& tokenizer,
                                                                  const HarmonyTokens& markers);

// A model's vocabulary as the grammar masks see it, each trie built the first time it is asked
// for and kept: every constrained reply over the model (a conversation's, a server's slots')
// shares one. Safe to ask from several threads.
class VocabularyTries {
public:
    // `tokenizer` must outlive the tries.
    explicit VocabularyTries(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}
    // make_token_trie: for a caller's grammar or JSON schema, and for tool calls that are text.
    std::shared_ptr<const grammar::TokenTrie> plain() const;
    // make_harmony_token_trie: for a harmony model's tool calls; null when the vocabulary has
    // no harmony markers.
    std::shared_ptr<const grammar::TokenTrie> harmony() const;

private:
    const Tokenizer& tokenizer_;
    mutable std::once_flag plain_once_;
    mutable std::shared_ptr<const grammar::TokenTrie> plain_;
    mutable std::once_flag harmony_once_;
    mutable std::shared_ptr<const grammar::TokenTrie> harmony_;
};

// What a request asks its output to be.
enum class OutputFormatKind { Free, Grammar, JsonSchema, JsonObject };
struct OutputFormat {
    OutputFormatKind kind = OutputFormatKind::Free;
    std::string text;  // GBNF for Grammar, the schema's JSON text for JsonSchema
};

// The grammar of `format` (null for Free). Throws grammar::GrammarError (a SchemaError naming
// the keyword for an unsupported schema feature; a schema that is not JSON, or nested deeper
// than kMaxJsonDepth, is a SchemaError too), naming the limit of `budget` (null: the
// defaults of grammar::CompileLimits) that it passes; grammar::CompileCancelled when the
// budget's cancel callback says so. A grammar so ambiguous that the matcher gives up on its
// first byte is refused here, not at the first token.
std::shared_ptr<const grammar::Grammar> compile_output_format(
    const OutputFormat& format, grammar::CompileBudget* budget = nullptr);

// Throws grammar::GrammarError when the matcher cannot take a first byte of `grammar`
// within its bounds (Matcher::kMaxStepWork, kMaxStacks): 256 steps, cheap for any sane grammar.
void check_first_byte(const std::shared_ptr<const grammar::Grammar>& grammar);

}  // namespace ember
