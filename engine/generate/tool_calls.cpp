#include "engine/generate/tool_calls.h"

#include <algorithm>
#include <set>

#include "engine/grammar/gbnf.h"
#include "engine/grammar/json_schema.h"
#include "engine/grammar/token_mask.h"
#include "engine/util/bounded_json.h"

namespace ember {

using ojson = nlohmann::ordered_json;

std::string_view tool_call_format_name(ToolCallFormat format) {
    switch (format) {
        case ToolCallFormat::None:
            return "none";
        case ToolCallFormat::Hermes:
            return "hermes";
        case ToolCallFormat::Llama3:
            return "llama3";
        case ToolCallFormat::Harmony:
            return "harmony";
        case ToolCallFormat::Gemma3:
            return "gemma3";
    }
    return "none";
}

ToolCallFormat detect_tool_call_format(std::string_view source, bool harmony) {
    constexpr auto npos = std::string_view::npos;
    if (harmony) return ToolCallFormat::Harmony;
    if (source.find("<tool_call>") != npos) return ToolCallFormat::Hermes;
    // Llama 3.x: its header markup and the JSON call it describes ("parameters").
    if (source.find("<|start_header_id|>") != npos &&
        (source.find("\"parameters\"") != npos || source.find("<|python_tag|>") != npos)) {
        return ToolCallFormat::Llama3;
    }
    // Gemma's turns, and a template that knows nothing of tools: prompt-based calls.
    if (source.find("<start_of_turn>") != npos && source.find("tool") == npos) {
        return ToolCallFormat::Gemma3;
    }
    return ToolCallFormat::None;
}

namespace {

bool valid_name(const std::string& name) {
    if (name.empty() || name.size() > 64) return false;
    return std::all_of(name.begin(), name.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '_' || c == '-' || c == '.';
    });
}

// A call's arguments as the template gets them: the object they spell, or the text itself.
ojson arguments_value(const std::string& arguments) {
    ojson parsed = try_parse_json_bounded<ojson>(arguments);
    return parsed.is_discarded() ? ojson(arguments) : parsed;
}

ojson plain_message(const ChatMessage& m) {
    ojson j = {{"role", m.role}, {"content", m.content}};
    if (!m.tool_calls.empty()) {
        ojson calls = ojson::array();
        for (const ToolCall& c : m.tool_calls) {
            calls.push_back(
                {{"id", c.id},
                 {"type", "function"},
                 {"function", {{"name", c.name}, {"arguments", arguments_value(c.arguments)}}}});
        }
        j["tool_calls"] = std::move(calls);
    }
    if (m.role == "tool") {
        if (!m.tool_call_id.empty()) j["tool_call_id"] = m.tool_call_id;
        if (!m.name.empty()) j["name"] = m.name;
    }
    return j;
}

// Gemma 3's prompt-based convention (tool_calls.h): the tools' definitions and how to call them
// lead the first user turn.
std::string gemma_tool_preamble(const ojson& tools) {
    ojson functions = ojson::array();
    for (const auto& t : tools) functions.push_back(t.at("function"));
    return "You have access to functions. If you decide to invoke any of the function(s), you "
           "MUST put it in the format of\n"
           "{\"name\": function name, \"parameters\": dictionary of argument name and its "
           "value}\n\n"
           "You SHOULD NOT include any other text in the response if you call a function\n" +
           functions.dump(2) + "\n\n";
}

std::string gemma_call_text(const ToolCall& call) {
    const std::string args = call.arguments.empty() ? "{}" : call.arguments;
    return "{\"name\": " + ojson(call.name).dump() + ", \"parameters\": " + args + "}";
}

ojson gemma_messages(std::span<const ChatMessage> messages, const ToolOptions* tools) {
    ojson out = ojson::array();
    bool preamble_due = tools != nullptr && tools->active();
    for (size_t i = 0; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        if (m.role == "tool") {
            // Consecutive results share one user turn (Gemma's roles must alternate).
            std::string text;
            for (; i < messages.size() && messages[i].role == "tool"; ++i) {
                if (!text.empty()) text += "\n";
                text += "```tool_output\n" + messages[i].content + "\n```";
            }
            --i;
            out.push_back({{"role", "user"}, {"content", text}});
            continue;
        }
        std::string content = m.content;
        if (m.role == "assistant" && !m.tool_calls.empty()) {
            for (const ToolCall& c : m.tool_calls) {
                if (!content.empty()) content += "\n";
                content += gemma_call_text(c);
            }
        }
        if (m.role == "user" && preamble_due) {
            content = gemma_tool_preamble(tools->tools) + content;
            preamble_due = false;
        }
        out.push_back({{"role", m.role}, {"content", content}});
    }
    return out;
}

}  // namespace

std::vector<std::string> tool_names(const ojson& tools) {
    std::vector<std::string> names;
    if (!tools.is_array()) return names;
    for (const auto& t : tools) {
        if (t.is_object() && t.contains("function") && t["function"].is_object() &&
            t["function"].contains("name") && t["function"]["name"].is_string()) {
            names.push_back(t["function"]["name"].get<std::string>());
        }
    }
    return names;
}

void validate_tool_options(const ToolOptions& options) {
    if (!options.tools.is_array()) throw ToolError("'tools' must be an array", "tools");
    std::set<std::string> seen;
    for (size_t i = 0; i < options.tools.size(); ++i) {
        const ojson& t = options.tools[i];
        const std::string where = "tools[" + std::to_string(i) + "]";
        if (!t.is_object()) throw ToolError("'" + where + "' must be an object", where);
        if (!t.contains("type") || t["type"] != "function") {
            throw ToolError("'" + where + ".type' must be \"function\"", where + ".type");
        }
        if (!t.contains("function") || !t["function"].is_object()) {
            throw ToolError("'" + where + ".function' must be an object", where + ".function");
        }
        const ojson& f = t["function"];
        if (!f.contains("name") || !f["name"].is_string() ||
            !valid_name(f["name"].get<std::string>())) {
            throw ToolError("'" + where +
                                ".function.name' must be a name of 1 to 64 letters, digits, "
                                "'_', '-' or '.'",
                            where + ".function.name");
        }
        const std::string name = f["name"].get<std::string>();
        if (!seen.insert(name).second) {
            throw ToolError("two tools are named '" + name + "'", where + ".function.name");
        }
        if (f.contains("description") && !f["description"].is_string() &&
            !f["description"].is_null()) {
            throw ToolError("'" + where + ".function.description' must be a string",
                            where + ".function.description");
        }
        if (f.contains("parameters") && !f["parameters"].is_object() &&
            !f["parameters"].is_null()) {
            throw ToolError("'" + where + ".function.parameters' must be a JSON schema object",
                            where + ".function.parameters");
        }
    }
    if (options.choice == ToolChoice::Named && !seen.contains(options.named)) {
        throw ToolError("'tool_choice' names the function '" + options.named +
                            "', which is not among the tools",
                        "tool_choice");
    }
    if ((options.choice == ToolChoice::Required || options.choice == ToolChoice::Named) &&
        options.tools.empty()) {
        throw ToolError("'tool_choice' asks for a call, but no tools are given", "tool_choice");
    }
}

TemplateMessages template_messages(std::span<const ChatMessage> messages, ToolCallFormat format,
                                   const ToolOptions* tools) {
    TemplateMessages out;
    if (format == ToolCallFormat::Gemma3) {
        out.messages = gemma_messages(messages, tools);
        return out;
    }
    for (const ChatMessage& m : messages) out.messages.push_back(plain_message(m));
    if (tools != nullptr && tools->active()) out.tools = tools->tools;
    return out;
}

std::string harmony_sentinel(std::string_view marker) {
    static constexpr std::pair<std::string_view, char> kLetters[] = {
        {"start", 's'},  {"end", 'e'},  {"message", 'm'},   {"channel", 'h'},
        {"return", 'r'}, {"call", 'c'}, {"constrain", 'k'},
    };
    for (const auto& [name, letter] : kLetters) {
        if (name == marker) return std::string{'\x01', letter};
    }
    throw std::invalid_argument("no harmony marker is named " + std::string(marker));
}

namespace {

// `text` as a GBNF string literal.
std::string gbnf_literal(std::string_view text) {
    static constexpr char kHex[] = "0123456789ABCDEF";
    std::string out = "\"";
    for (const char ch : text) {
        const auto c = static_cast<unsigned char>(ch);
        if (c == '"' || c == '\\') {
            out += '\\';
            out += ch;
        } else if (c < 0x20 || c == 0x7F) {
            out += "\\x";
            out += kHex[c >> 4];
            out += kHex[c & 15];
        } else {
            out += ch;
        }
    }
    return out + "\"";
}

bool gbnf_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
}

// GBNF text with every rule name prefixed, so the grammars of several tools live side by side.
// Literals, character classes and comments are copied as they are.
std::string prefix_rules(std::string_view gbnf, const std::string& prefix) {
    std::string out;
    for (size_t i = 0; i < gbnf.size();) {
        const char c = gbnf[i];
        if (c == '"' || c == '[') {
            const char close = c == '"' ? '"' : ']';
            size_t j = i + 1;
            while (j < gbnf.size() && gbnf[j] != close) j += gbnf[j] == '\\' ? 2 : 1;
            j = std::min(j + 1, gbnf.size());
            out.append(gbnf.substr(i, j - i));
            i = j;
        } else if (c == '#') {
            const size_t j = std::min(gbnf.find('\n', i), gbnf.size());
            out.append(gbnf.substr(i, j - i));
            i = j;
        } else if (c == '{') {  // a repetition count {m,n}
            const size_t j = std::min(gbnf.find('}', i) + 1, gbnf.size());
            out.append(gbnf.substr(i, j - i));
            i = j;
        } else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') {
            size_t j = i;
            while (j < gbnf.size() && gbnf_name_char(gbnf[j])) ++j;
            out += prefix;
            out.append(gbnf.substr(i, j - i));
            i = j;
        } else {
            out += c;
            ++i;
        }
    }
    return out;
}

}  // namespace

namespace {

// The grammar of a whole forced reply, or (`lazy`) of one call's rest after its start marker.
std::shared_ptr<const grammar::Grammar> build_call_grammar(ToolCallFormat format,
                                                           const ToolOptions& options, bool lazy,
                                                           grammar::CompileBudget* budget) {
    if (format == ToolCallFormat::None) {
        throw ToolError("this model's chat template has no tool-call format Ember knows", "tools");
    }
    const bool hermes = format == ToolCallFormat::Hermes;
    const bool harmony = format == ToolCallFormat::Harmony;
    const std::string key = hermes ? "arguments" : "parameters";
    std::string rules, alternatives;
    for (size_t i = 0; i < options.tools.size(); ++i) {
        const ojson& f = options.tools[i].at("function");
        const std::string name = f.at("name").get<std::string>();
        if (options.choice == ToolChoice::Named && name != options.named) continue;
        ojson schema = f.contains("parameters") && f["parameters"].is_object()
                           ? f["parameters"]
                           : ojson{{"type", "object"}};
        std::string gbnf;
        try {
            gbnf = grammar::json_schema_to_gbnf(schema, budget);
        } catch (const grammar::CompileCancelled&) {
            throw;
        } catch (const grammar::GrammarError& e) {
            throw ToolError("the parameters of tool '" + name + "' cannot be enforced: " + e.what(),
                            "tools[" + std::to_string(i) + "].function.parameters");
        }
        std::string prefix = std::to_string(i);
        prefix.insert(prefix.begin(), 't');
        prefix += '-';
        rules += prefix_rules(gbnf, prefix) + "\n";
        if (!alternatives.empty()) alternatives += " | ";
        // Blanks may come before the arguments, as in the JSON of the template's own examples
        // (json_schema_to_gbnf's root starts at the value itself: --json-schema answers do).
        const std::string arguments = prefix + "ws " + prefix + "root";
        if (harmony && lazy) {  // engaged at <|message|>, the name fed by hand
            alternatives += gbnf_literal(name) + " " + arguments;
        } else if (harmony) {
            alternatives +=
                gbnf_literal(name + " ") + " " +
                gbnf_literal(harmony_sentinel("constrain") + "json" + harmony_sentinel("message")) +
                " " + arguments;
        } else {
            alternatives += gbnf_literal(name + "\", \"" + key + "\": ") + " " + arguments;
        }
    }
    // Built by appending: GCC 12 warns falsely (-Wrestrict) on "literal" + std::string&&.
    std::string top = "root ::= ";
    if (harmony && lazy) {
        top.append("( ").append(alternatives).append(" ) ");
        top.append(gbnf_literal(harmony_sentinel("call"))).append("\n");
    } else if (harmony) {
        // One call per reply: <|call|> ends it, and the tool's answer comes in the next turn.
        top.append(gbnf_literal(harmony_sentinel("channel") + "commentary to=functions."))
            .append(" ( ")
            .append(alternatives)
            .append(" ) ")
            .append(gbnf_literal(harmony_sentinel("call")))
            .append("\n");
    } else if (lazy) {
        // Hermes: after <tool_call>, which the model wrote itself; the others: from the "{"
        // that opens the reply.
        top.append(hermes ? "\"\\n\"? " : "")
            .append(gbnf_literal("{\"name\": \""))
            .append(" ( ")
            .append(alternatives)
            .append(" ) ")
            .append(gbnf_literal(hermes ? "}\n</tool_call>" : "}"))
            .append("\n");
    } else {
        const std::string open = hermes ? "<tool_call>\n{\"name\": \"" : "{\"name\": \"";
        const std::string close = hermes ? "}\n</tool_call>" : "}";
        // Llama 3's template renders one call per turn, so its replies hold one.
        const bool several = options.parallel && format != ToolCallFormat::Llama3;
        top.append("call").append(several ? " ( \"\\n\" call )*" : "").append("\ncall ::= ");
        top.append(gbnf_literal(open))
            .append(" ( ")
            .append(alternatives)
            .append(" ) ")
            .append(gbnf_literal(close))
            .append("\n");
    }
    try {
        return std::make_shared<const grammar::Grammar>(
            grammar::parse_gbnf(top + rules, "root", budget));
    } catch (const grammar::CompileCancelled&) {
        throw;
    } catch (const grammar::GrammarError& e) {
        throw ToolError(std::string("the tools' call grammar cannot be built: ") + e.what(),
                        "tools");
    }
}

}  // namespace

std::shared_ptr<const grammar::Grammar> tool_call_grammar(ToolCallFormat format,
                                                          const ToolOptions& options,
                                                          grammar::CompileBudget* budget) {
    return build_call_grammar(format, options, /*lazy=*/false, budget);
}

std::shared_ptr<const grammar::Grammar> tool_call_lazy_grammar(ToolCallFormat format,
                                                               const ToolOptions& options,
                                                               grammar::CompileBudget* budget) {
    if (!options.active()) return nullptr;
    return build_call_grammar(format, options, /*lazy=*/true, budget);
}

LazyToolConstraint::LazyToolConstraint(ToolCallFormat format,
                                       grammar::GrammarConstraint& constraint)
    : format_(format), constraint_(constraint) {}

void LazyToolConstraint::on_answer_text(std::string_view piece) {
    answer_ += piece;
}

void LazyToolConstraint::on_call_start(const std::string& name) {
    pending_call_ = name;
}

bool LazyToolConstraint::engaged() {
    if (engaged_) {
        if (constraint_.matcher().can_continue()) return true;
        engaged_ = false;  // the call is complete: free text again, until the next call
        scan_from_ = answer_.size();
        return false;
    }
    if (format_ == ToolCallFormat::Harmony) {
        if (pending_call_.empty()) return false;
        // The header named the function; its arguments and <|call|> follow the grammar.
        constraint_.reset();
        const bool known = constraint_.matcher().accept(pending_call_);
        pending_call_.clear();
        engaged_ = known && constraint_.matcher().can_continue();
        engagements_ += engaged_ ? 1 : 0;
        return engaged_;
    }
    size_t at = std::string::npos, rest = 0;
    if (format_ == ToolCallFormat::Hermes) {
        constexpr std::string_view kOpen = "<tool_call>";
        at = answer_.find(kOpen, scan_from_);
        rest = at + kOpen.size();
    } else if (!tried_start_) {
        // A call is the whole reply: it opens with "{", after whitespace at most.
        const size_t first = answer_.find_first_not_of(" \t\r\n");
        if (first == std::string::npos) return false;
        tried_start_ = true;
        if (answer_[first] == '{') at = rest = first;
    }
    if (at == std::string::npos) return false;
    scan_from_ = rest;
    constraint_.reset();
    // What the model already wrote of the call must fit the grammar; if not, the call is left
    // to the parser (it may turn out text).
    if (!constraint_.matcher().accept(std::string_view(answer_).substr(rest))) return false;
    engaged_ = constraint_.matcher().can_continue();
    ++engagements_;
    return engaged_;
}

}  // namespace ember
