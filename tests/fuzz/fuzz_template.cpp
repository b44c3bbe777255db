// libFuzzer target for the chat template engine (engine/template): a GGUF's
// tokenizer.chat_template is whatever the file's maker wrote. The input is the template's
// source; compiling it and rendering a conversation with tools must end in text or a
// TemplateError, within the render's step and text budgets (template_builtins.h).
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

#include "engine/template/template.h"

namespace {

ember::ChatTemplateInputs conversation() {
    using ojson = nlohmann::ordered_json;
    ember::ChatTemplateInputs in;
    in.messages = ojson::parse(R"([
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is 2+2? <b>\"quoted\"</b>"},
        {"role": "assistant", "content": "",
         "tool_calls": [{"id": "call_1", "type": "function",
                         "function": {"name": "add", "arguments": {"a": 2, "b": 2}}}]},
        {"role": "tool", "content": "4", "tool_call_id": "call_1", "name": "add"},
        {"role": "assistant", "content": "4", "reasoning_content": "2 and 2"},
        {"role": "user", "content": [{"type": "text", "text": "thanks"}]}
    ])");
    in.tools = ojson::parse(R"([{"type": "function", "function": {"name": "add",
        "description": "Adds", "parameters": {"type": "object",
        "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}}}])");
    in.bos_token = "<s>";
    in.eos_token = "</s>";
    in.extra = {{"enable_thinking", false}};
    in.now = ember::TemplateTime{2025, 1, 2, 3, 4, 5};  // strftime_now stays deterministic
    return in;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const ember::ChatTemplateInputs inputs = conversation();
    try {
        const ember::ChatTemplate tmpl(std::string_view(reinterpret_cast<const char*>(data), size));
        (void)tmpl.render(inputs);
    } catch (const ember::TemplateError&) {
    }
    return 0;
}
