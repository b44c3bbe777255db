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

struct ChatTemplateChoice {
    std::string source;     // Jinja source
    bool from_file = false;  // the file's own template
    // For `ember info` and warnings: "from the model", or which fallback and why.
    std::string description;
};

// `tokenizer` is the file's (the model keeps it; the file's own vocabulary array may be dropped).
ChatTemplateChoice choose_chat_template(const GgufFile& file, const Tokenizer& tokenizer);

}  // namespace ember
