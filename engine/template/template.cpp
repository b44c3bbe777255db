#include "engine/template/template.h"

#include <ctime>

#include "engine/template/template_interp.h"
#include "engine/template/template_parser.h"

namespace ember {

namespace {

std::string describe(TemplateError::Kind kind, const std::string& message, int line) {
    if (kind == TemplateError::Kind::Raised) return message;
    std::string out =
        kind == TemplateError::Kind::Syntax ? "chat template syntax error" : "chat template error";
    if (line > 0) out += " at line " + std::to_string(line);
    return out + ": " + message;
}

jinja::CivilTime civil_time(const std::optional<TemplateTime>& fixed) {
    jinja::CivilTime t;
    if (fixed) {
        t = {fixed->year, fixed->month, fixed->day, fixed->hour, fixed->minute, fixed->second};
        return t;
    }
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    t = {local.tm_year + 1900, local.tm_mon + 1, local.tm_mday,
         local.tm_hour,        local.tm_min,     local.tm_sec};
    return t;
}

}  // namespace

TemplateError::TemplateError(Kind kind, std::string message, int line)
    : std::runtime_error(describe(kind, message, line)),
      kind_(kind),
      line_(line),
      message_(std::move(message)) {}

ChatTemplate::ChatTemplate(std::string_view source)
    : source_(source), program_(jinja::parse_template(source)) {}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

std::string ChatTemplate::render(const ChatTemplateInputs& inputs) const {
    nlohmann::ordered_json vars = nlohmann::ordered_json::object();
    vars["messages"] = inputs.messages;
    if (!inputs.tools.is_null()) vars["tools"] = inputs.tools;
    vars["add_generation_prompt"] = inputs.add_generation_prompt;
    vars["bos_token"] = inputs.bos_token;
    vars["eos_token"] = inputs.eos_token;
    if (inputs.extra.is_object()) {
        for (const auto& [key, value] : inputs.extra.items()) vars[key] = value;
    }
    return render_variables(vars, inputs.now);
}

std::string ChatTemplate::render_variables(const nlohmann::ordered_json& variables,
                                           const std::optional<TemplateTime>& now) const {
    if (!variables.is_object()) {
        throw TemplateError(TemplateError::Kind::Render,
                            "template variables must be a JSON object");
    }
    jinja::Interpreter interp(*program_, civil_time(now));
    return interp.render(jinja::from_json(variables));
}

}  // namespace ember
