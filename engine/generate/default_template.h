// Which chat template a model is rendered with: its own (`tokenizer.chat_template`) when the
// file has one, else the turn format its family was trained on, else ChatML.
//
// Base models are often converted without a template (gemma-3-270m, a real-weights test model, is
// one): rendering Gemma with ChatML would feed it markers it has never seen as turns, so a
// family whose turn format is known and whose vocabulary holds its markers gets that format.
#pragma once

#include <string>

namespace ember {

class GgufFile;
class Tokenizer;

// Gemma's turn format (the published instruction models' template writes the same text): the
// BOS, each message as `<start_of_turn>ROLE\n` + its trimmed text + `<end_of_turn>\n`, the
// assistant's role named "model", a system message folded into the first user turn ahead of a
// blank line, and `<start_of_turn>model\n` to ask for the reply
// (assets/templates/gemma_turns.jinja, compiled in).
extern const char* const kGemmaTurnTemplate;

struct ChatTemplateChoice {
    std::string source;      // Jinja source
    bool from_file = false;  // the file's own template
    // For `ember info` and warnings: "from the model", or which fallback and why.
    std::string description;
};

// `tokenizer` is the file's (the model keeps it; the file's own vocabulary array may be dropped).
ChatTemplateChoice choose_chat_template(const GgufFile& file, const Tokenizer& tokenizer);

}  // namespace ember
