// Parser for chat templates: tokens → syntax tree, following jinja2's grammar and operator
// precedence, with jinja2's wording for syntax errors.
#pragma once

#include <memory>
#include <string_view>

#include "engine/template/template_ast.h"

namespace ember::jinja {

// Tokenizes and parses `source`; throws TemplateError (Kind::Syntax) with a line number.
std::unique_ptr<Program> parse_template(std::string_view source);

}  // namespace ember::jinja
