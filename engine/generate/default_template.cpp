#include "engine/generate/default_template.h"

#include "engine/generate/conversation.h"
#include "engine/gguf/gguf.h"
#include "engine/tokenizer/tokenizer.h"

namespace ember {

ChatTemplateChoice choose_chat_template(const GgufFile& file, const Tokenizer& tokenizer) {
    if (auto own = file.get_string("tokenizer.chat_template")) {
        return {*own, true, "from the model"};
    }
    const std::string arch = file.get_string("general.architecture").value_or("");
    const bool gemma_family = arch == "gemma" || arch == "gemma2" || arch == "gemma3";
    if (gemma_family && tokenizer.find_token("<start_of_turn>") &&
        tokenizer.find_token("<end_of_turn>")) {
        return {kGemmaTurnTemplate, false,
                "none in the file; Gemma's turn format (<start_of_turn>, the " + arch +
                    " family's own)"};
    }
    return {kChatMlTemplate, false, "none in the file; ChatML fallback"};
}

}  // namespace ember
