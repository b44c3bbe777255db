// Chat templates: the Jinja subset that model chat templates (tokenizer.chat_template in GGUF
// files) are written in, rendered the way HF transformers renders them — jinja2 with
// trim_blocks, lstrip_blocks and loop controls in an immutable sandbox, plus the globals
// `raise_exception(msg)` and `strftime_now(fmt)` and a `tojson` filter that is Python's
// json.dumps. A template is compiled once (lexer → parser → AST) and rendered many times;
// a compiled template may be rendered from several threads at once.
//
// Left out because chat templates do not use them: {% include/extends/import/block %},
// recursive loops, `*args`/`**kwargs` in calls, tuple subscripts (x[1, 2]), the filters
// groupby/slice/urlencode/xmlattr/striptags/wordwrap, "\N{name}" escapes. Case mapping covers
// Latin, Greek, Cyrillic and Armenian. Unlike jinja2, a macro accepts extra arguments into
// varargs/kwargs even when its body does not mention them.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "engine/util/bounded_json.h"

namespace ember {

namespace jinja {
struct Program;
}

// Every failure of a template, with jinja2's wording where jinja2 has one.
class TemplateError : public std::runtime_error {
public:
    enum class Kind {
        Syntax,  // the template does not parse
        Render,  // rendering failed: undefined value misused, type error, unknown filter...
        Raised,  // the template called raise_exception(message)
    };
    TemplateError(Kind kind, std::string message, int line = 0);

    Kind kind() const noexcept { return kind_; }
    // 1-based line of the template the error belongs to; 0 when unknown.
    int line() const noexcept { return line_; }
    // The bare complaint. what() adds the kind and line, except for Kind::Raised, where what()
    // is exactly the template's own message (it is meant for the user).
    const std::string& message() const noexcept { return message_; }

private:
    Kind kind_;
    int line_;
    std::string message_;
};

// The clock strftime_now() reads. Tests fix it; left unset, renders use the local time.
struct TemplateTime {
    int year = 1970;
    int month = 1;  // 1..12
    int day = 1;
    int hour = 0;
    int minute = 0;
    int second = 0;
};

// Deepest nesting of arrays and objects accepted in template variables, and that tojson or
// printing will walk: the JSON bound (engine/util/bounded_json.h), so that whatever JSON is
// parsed with the default limits converts.
constexpr int kMaxTemplateValueDepth = kMaxJsonDepth;

// The variables HF transformers passes to a chat template.
struct ChatTemplateInputs {
    // [{"role": ..., "content": ...}, ...]; ordered_json keeps key order, which tojson shows.
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    // Tool schemas. Null leaves `tools` undefined in the template (what templates test for).
    nlohmann::ordered_json tools;
    bool add_generation_prompt = true;
    std::string bos_token;
    std::string eos_token;
    // Further variables, e.g. {"enable_thinking": false}. They may override the ones above.
    nlohmann::ordered_json extra = nlohmann::ordered_json::object();
    std::optional<TemplateTime> now;
};

class ChatTemplate {
public:
    // Compiles the template; throws TemplateError (Kind::Syntax) with the line of the problem.
    explicit ChatTemplate(std::string_view source);
    ~ChatTemplate();
    ChatTemplate(ChatTemplate&&) noexcept;
    ChatTemplate& operator=(ChatTemplate&&) noexcept;
    ChatTemplate(const ChatTemplate&) = delete;
    ChatTemplate& operator=(const ChatTemplate&) = delete;

    // Renders a conversation. Throws TemplateError (Kind::Render or Kind::Raised).
    std::string render(const ChatTemplateInputs& inputs) const;
    // Renders with each key of `variables` (a JSON object) as a template variable.
    std::string render_variables(const nlohmann::ordered_json& variables,
                                 const std::optional<TemplateTime>& now = std::nullopt) const;

    const std::string& source() const noexcept { return source_; }

private:
    std::string source_;
    std::unique_ptr<const jinja::Program> program_;
};

}  // namespace ember
