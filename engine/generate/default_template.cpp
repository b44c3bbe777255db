#include "engine/generate/default_template.h"

#include "engine/generate/conversation.h"
#include "engine/gguf/gguf.h"
#include "engine/tokenizer/tokenizer.h"

namespace ember {
namespace {

// Gemma's turn format (the published instruction models' template writes the same text): the
// BOS, each message as `<start_of_turn>ROLE\n` + its trimmed text + `<end_of_turn>\n`, the
// assistant's role named "model", a system message folded into the first user turn ahead of a
// blank line, and `<start_of_turn>model\n` to ask for the reply.
const char* const kGemmaTurnTemplate =
    "{{ bos_token }}"
    "{%- set system_prefix = '' -%}"
    "{%- set turns = messages -%}"
    "{%- if messages and messages[0]['role'] == 'system' -%}"
    "{%- set system_prefix = messages[0]['content'] | trim + '\\n\\n' -%}"
    "{%- set turns = messages[1:] -%}"
    "{%- endif -%}"
    "{%- for message in turns -%}"
    "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}"
    "{{ '<start_of_turn>' + role + '\\n' }}"
    "{%- if loop.first -%}{{ system_prefix }}{%- endif -%}"
    "{{ message['content'] | trim }}{{ '<end_of_turn>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\\n' }}{%- endif -%}";

}  // namespace

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
