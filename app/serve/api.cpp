#include "app/serve/api.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "engine/generate/constrained.h"
#include "engine/sampling/sampling_ranges.h"
#include "engine/util/bounded_json.h"

namespace ember::serve {

using json = nlohmann::json;

ApiError::ApiError(int status, std::string message, std::string param, std::string code,
                   std::string type)
    : std::runtime_error(std::move(message)),
      status_(status),
      param_(std::move(param)),
      code_(std::move(code)),
      type_(std::move(type)) {
    if (type_.empty()) {
        type_ = status_ == 401                     ? "authentication_error"
                : status_ == 404                   ? "not_found_error"
                : status_ == 429 || status_ == 503 ? "server_busy"
                : status_ >= 500                   ? "server_error"
                                                   : "invalid_request_error";
    }
}

json error_json(const ApiError& e) {
    json err = {{"message", e.what()}, {"type", e.type()}, {"param", nullptr}, {"code", nullptr}};
    if (!e.param().empty()) err["param"] = e.param();
    if (!e.code().empty()) err["code"] = e.code();
    return json{{"error", err}};
}

std::string dump_json(const json& j) {
    return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

namespace {

// A body parsed again keeping its keys' order (tools, schemas): its first parse held it to the
// request's bounds (--max-body, --max-nesting), so the second takes it as it is.
constexpr JsonLimits kParsedOnce{std::numeric_limits<size_t>::max(),
                                 std::numeric_limits<int>::max()};

ApiError bad_field(const std::string& field, const std::string& what) {
    return ApiError(400, "'" + field + "' " + what, field);
}

// One open object or array while parsing: the key last seen, or the element's index.
struct JsonFrame {
    bool array = false;
    std::string key;
    size_t index = 0;
};

void track_json_path(std::vector<JsonFrame>& frames, json::parse_event_t event,
                     const json& parsed) {
    using E = json::parse_event_t;
    // A finished value moves its array on to the next index.
    auto element_done = [&frames] {
        if (!frames.empty() && frames.back().array) ++frames.back().index;
    };
    switch (event) {
        case E::object_start:
            frames.push_back({false, {}, 0});
            break;
        case E::array_start:
            frames.push_back({true, {}, 0});
            break;
        case E::key:
            if (!frames.empty() && parsed.is_string())
                frames.back().key = parsed.get<std::string>();
            break;
        case E::object_end:
        case E::array_end:
            if (!frames.empty()) frames.pop_back();
            element_done();
            break;
        case E::value:
            element_done();
            break;
    }
}

std::string json_path(const std::vector<JsonFrame>& frames) {
    std::string path;
    for (const auto& f : frames) {
        if (f.array) {
            path += "[" + std::to_string(f.index) + "]";
        } else if (!f.key.empty()) {
            path += (path.empty() ? "" : ".") + f.key;
        }
    }
    return path;
}

json parse_body(const std::string& body, const RequestLimits& limits) {
    if (body.empty()) throw ApiError(400, "the request body is empty (a JSON object is expected)");
    json j;
    // Where the parser is, as a field path ("messages[2].content"): nlohmann reports a number
    // too large for a double (1e309) without a position, so the error would not name the
    // field otherwise.
    std::vector<JsonFrame> where;
    // The body's size was bounded before it was read (--max-body); its depth is bounded here.
    const JsonLimits bounds{std::numeric_limits<size_t>::max(),
                            static_cast<int>(std::clamp<int64_t>(limits.max_nesting, 0, INT_MAX))};
    try {
        j = parse_json_bounded<json>(body, bounds, "the request body", InvalidJson::Throw,
                                     [&where](json::parse_event_t event, const json& parsed) {
                                         track_json_path(where, event, parsed);
                                     });
    } catch (const JsonLimitError& e) {
        throw ApiError(400, e.what());
    } catch (const json::parse_error& e) {
        // e.byte is 1-based: the offset where parsing failed.
        throw ApiError(400, "the request body is not valid JSON (at byte " +
                                std::to_string(e.byte) + "): " + e.what());
    } catch (const json::out_of_range& e) {
        // Only number overflow (406) is thrown while parsing; its message quotes the number.
        const std::string field = json_path(where);
        std::string number = e.what();
        const size_t open = number.find('\'');
        const size_t close = number.rfind('\'');
        number = open != std::string::npos && close > open
                     ? number.substr(open + 1, close - open - 1)
                     : std::string();
        if (number.size() > 40) number = number.substr(0, 40) + "...";
        throw ApiError(400,
                       (field.empty() ? std::string("a number in the body") : "'" + field + "'") +
                           " is out of range (" + (number.empty() ? "a number" : number) +
                           " overflows a double)",
                       field);
    } catch (const json::exception& e) {
        throw ApiError(400, std::string("the request body cannot be read as JSON: ") + e.what());
    }
    if (!j.is_object()) throw ApiError(400, "the request body must be a JSON object");
    return j;
}

// A sampling field checked against the range every way in shares (sampling_ranges.h).
std::optional<double> sampling_field(const json& j, const char* name) {
    auto it = j.find(name);
    if (it == j.end() || it->is_null()) return std::nullopt;
    if (!it->is_number()) throw bad_field(name, "must be a number");
    const double v = it->get<double>();
    if (const std::string rule = sampling_range_problem(name, v); !rule.empty()) {
        throw bad_field(name, rule + ", not " + it->dump());
    }
    return v;
}

std::optional<int64_t> integer_field(const json& j, const char* name, int64_t lo, int64_t hi) {
    auto it = j.find(name);
    if (it == j.end() || it->is_null()) return std::nullopt;
    if (!it->is_number_integer()) throw bad_field(name, "must be an integer");
    if (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(hi)) {
        throw bad_field(name, "must be at most " + std::to_string(hi));
    }
    const int64_t v = it->get<int64_t>();
    if (v < lo || v > hi) {
        throw bad_field(name, "must be between " + std::to_string(lo) + " and " +
                                  std::to_string(hi) + ", not " + std::to_string(v));
    }
    return v;
}

bool bool_field(const json& j, const char* name) {
    auto it = j.find(name);
    if (it == j.end() || it->is_null()) return false;
    if (!it->is_boolean()) throw bad_field(name, "must be true or false");
    return it->get<bool>();
}

std::string string_field(const json& j, const char* name) {
    auto it = j.find(name);
    if (it == j.end() || it->is_null()) return {};
    if (!it->is_string()) throw bad_field(name, "must be a string");
    return it->get<std::string>();
}

SamplingRequest parse_sampling(const json& j, const RequestLimits& limits) {
    SamplingRequest s;
    s.temperature = sampling_field(j, "temperature");
    s.top_p = sampling_field(j, "top_p");
    s.min_p = sampling_field(j, "min_p");
    s.presence_penalty = sampling_field(j, "presence_penalty");
    s.frequency_penalty = sampling_field(j, "frequency_penalty");
    s.repeat_penalty = sampling_field(j, "repeat_penalty");
    s.top_k = integer_field(j, "top_k", 0, static_cast<int64_t>(sampling_range("top_k")->hi));
    if (auto seed = integer_field(j, "seed", std::numeric_limits<int64_t>::min(),
                                  std::numeric_limits<int64_t>::max())) {
        s.seed = static_cast<uint64_t>(*seed);
    }
    const int64_t max_int = std::numeric_limits<int32_t>::max();
    s.max_tokens = integer_field(j, "max_tokens", 1, max_int);
    if (auto m = integer_field(j, "max_completion_tokens", 1, max_int)) s.max_tokens = m;
    if (auto n = integer_field(j, "n", 1, 128); n && *n != 1) {
        throw bad_field("n", "must be 1 (one choice per request is supported)");
    }
    if (auto it = j.find("stop"); it != j.end() && !it->is_null()) {
        if (it->is_string()) {
            s.stop.push_back(it->get<std::string>());
        } else if (it->is_array()) {
            for (const auto& e : *it) {
                if (!e.is_string()) throw bad_field("stop", "must be a string or strings");
                s.stop.push_back(e.get<std::string>());
            }
        } else {
            throw bad_field("stop", "must be a string or an array of strings");
        }
        if (static_cast<int64_t>(s.stop.size()) > limits.max_stop_strings) {
            throw bad_field(
                "stop", "holds more than " + std::to_string(limits.max_stop_strings) + " strings");
        }
        for (const auto& text : s.stop) {
            if (text.empty()) throw bad_field("stop", "must not hold an empty string");
            if (static_cast<int64_t>(text.size()) > limits.max_stop_bytes) {
                throw bad_field("stop", "strings are limited to " +
                                            std::to_string(limits.max_stop_bytes) + " bytes");
            }
        }
    }
    s.stream = bool_field(j, "stream");
    s.ignore_eos = bool_field(j, "ignore_eos");
    if (auto it = j.find("stream_options"); it != j.end() && !it->is_null()) {
        if (!it->is_object()) throw bad_field("stream_options", "must be an object");
        if (auto u = it->find("include_usage"); u != it->end() && !u->is_null()) {
            if (!u->is_boolean()) throw bad_field("stream_options.include_usage", "must be a bool");
            s.include_usage = u->get<bool>();
        }
    }
    if (bool_field(j, "logprobs")) {
        throw bad_field("logprobs", "is not supported by this server");
    }
    return s;
}

// response_format: {"type": "text"}, {"type": "json_object"} or {"type": "json_schema",
// "json_schema": {"name", "schema", "strict"}} (Free for text). Strict or not, the schema is
// enforced. The schema is read again from `body` keeping its properties' order, which the
// output follows. Compiled later, under the request's slot (compile_response_format).
OutputFormat parse_response_format(const json& j, const std::string& body) {
    OutputFormat format;
    auto it = j.find("response_format");
    if (it == j.end() || it->is_null()) return format;
    if (!it->is_object()) throw bad_field("response_format", "must be an object");
    const std::string type = it->value("type", std::string());
    if (type == "text") return format;
    if (type == "json_object") {
        format.kind = OutputFormatKind::JsonObject;
    } else if (type == "json_schema") {
        auto spec = it->find("json_schema");
        if (spec == it->end() || !spec->is_object()) {
            throw bad_field("response_format.json_schema", "must be an object");
        }
        if (auto strict = spec->find("strict");
            strict != spec->end() && !strict->is_null() && !strict->is_boolean()) {
            throw bad_field("response_format.json_schema.strict", "must be true or false");
        }
        format.kind = OutputFormatKind::JsonSchema;
        format.text = "{}";  // no schema: any JSON value
        if (spec->contains("schema")) {
            // Again keeping the properties' order (the output follows it).
            const auto ordered = parse_json_bounded(body, kParsedOnce, "the request body");
            format.text = ordered.at("response_format").at("json_schema").at("schema").dump();
        }
    } else {
        throw bad_field("response_format.type",
                        "must be text, json_object or json_schema, not '" + type + "'");
    }
    return format;
}

// A message's content: a string, null (an assistant turn with nothing to say), or an array
// of {"type": "text", "text": ...} parts, concatenated.
std::string message_content(const json& content, const std::string& field) {
    if (content.is_null()) return {};
    if (content.is_string()) return content.get<std::string>();
    if (!content.is_array()) throw bad_field(field, "must be a string or an array of parts");
    std::string text;
    for (size_t i = 0; i < content.size(); ++i) {
        const json& part = content[i];
        const std::string where = field + "[" + std::to_string(i) + "]";
        if (!part.is_object()) throw bad_field(where, "must be an object");
        const std::string type = part.value("type", std::string());
        if (type != "text") {
            throw bad_field(where + ".type", "'" + type + "' is not supported (only text parts)");
        }
        auto t = part.find("text");
        if (t == part.end() || !t->is_string())
            throw bad_field(where + ".text", "must be a string");
        text += t->get<std::string>();
    }
    return text;
}

std::string model_field(const json& j) {
    return string_field(j, "model");
}

// An assistant message's tool_calls: [{"id", "type": "function", "function": {"name",
// "arguments"}}], arguments a JSON string (an object is taken too, as some clients send).
std::vector<ToolCall> parse_message_tool_calls(const json& calls, const std::string& field) {
    if (!calls.is_array()) throw bad_field(field, "must be an array");
    std::vector<ToolCall> out;
    for (size_t i = 0; i < calls.size(); ++i) {
        const json& c = calls[i];
        const std::string where = field + "[" + std::to_string(i) + "]";
        if (!c.is_object()) throw bad_field(where, "must be an object");
        if (c.contains("type") && c["type"] != "function") {
            throw bad_field(where + ".type", "must be \"function\"");
        }
        auto f = c.find("function");
        if (f == c.end() || !f->is_object())
            throw bad_field(where + ".function", "must be an object");
        auto name = f->find("name");
        if (name == f->end() || !name->is_string() || name->get<std::string>().empty()) {
            throw bad_field(where + ".function.name", "must be a non-empty string");
        }
        ToolCall call;
        call.id = string_field(c, "id");
        call.name = name->get<std::string>();
        auto args = f->find("arguments");
        if (args == f->end() || args->is_null()) {
            call.arguments = "{}";
        } else if (args->is_string()) {
            call.arguments = args->get<std::string>();
        } else if (args->is_object()) {
            call.arguments = args->dump();
        } else {
            throw bad_field(where + ".function.arguments", "must be a string of JSON");
        }
        out.push_back(std::move(call));
    }
    return out;
}

// tools, tool_choice and parallel_tool_calls. The tools are read again from `body` keeping
// their key order (templates print them).
ToolOptions parse_tools(const json& j, const std::string& body) {
    ToolOptions t;
    auto tools = j.find("tools");
    const bool given = tools != j.end() && !tools->is_null();
    if (given && !tools->is_array()) throw bad_field("tools", "must be an array");
    if (given) t.tools = parse_json_bounded(body, kParsedOnce, "the request body").at("tools");
    if (auto choice = j.find("tool_choice"); choice != j.end() && !choice->is_null()) {
        if (choice->is_string()) {
            const std::string c = choice->get<std::string>();
            if (c == "auto") {
                t.choice = ToolChoice::Auto;
            } else if (c == "none") {
                t.choice = ToolChoice::None;
            } else if (c == "required") {
                t.choice = ToolChoice::Required;
            } else {
                throw bad_field("tool_choice",
                                "must be auto, none, required or a function, not '" + c + "'");
            }
        } else if (choice->is_object()) {
            auto f = choice->find("function");
            if (choice->value("type", std::string()) != "function" || f == choice->end() ||
                !f->is_object() || !f->contains("name") || !(*f)["name"].is_string()) {
                throw bad_field("tool_choice",
                                "must be {\"type\": \"function\", \"function\": {\"name\": ...}}");
            }
            t.choice = ToolChoice::Named;
            t.named = (*f)["name"].get<std::string>();
        } else {
            throw bad_field("tool_choice", "must be a string or an object");
        }
    }
    if (auto p = j.find("parallel_tool_calls"); p != j.end() && !p->is_null()) {
        if (!p->is_boolean()) throw bad_field("parallel_tool_calls", "must be true or false");
        t.parallel = p->get<bool>();
    }
    try {
        validate_tool_options(t);
    } catch (const ToolError& e) {
        throw ApiError(400, e.what(), e.field());
    }
    return t;
}

}  // namespace

ChatRequest parse_chat_request(const std::string& body, const RequestLimits& limits) {
    const json j = parse_body(body, limits);
    ChatRequest r;
    r.model = model_field(j);
    auto it = j.find("messages");
    if (it == j.end()) throw bad_field("messages", "is required");
    if (!it->is_array()) throw bad_field("messages", "must be an array");
    if (it->empty()) throw bad_field("messages", "must hold at least one message");
    if (static_cast<int64_t>(it->size()) > limits.max_messages) {
        throw bad_field("messages",
                        "holds more than " + std::to_string(limits.max_messages) + " messages");
    }
    for (size_t i = 0; i < it->size(); ++i) {
        const json& m = (*it)[i];
        const std::string where = "messages[" + std::to_string(i) + "]";
        if (!m.is_object()) throw bad_field(where, "must be an object");
        auto role = m.find("role");
        if (role == m.end() || !role->is_string()) {
            throw bad_field(where + ".role", "must be a string");
        }
        std::string name = role->get<std::string>();
        if (name == "developer") name = "system";  // the newer name for the system role
        if (name != "system" && name != "user" && name != "assistant" && name != "tool") {
            throw bad_field(
                where + ".role",
                "must be system, developer, user, assistant or tool, not '" + name + "'");
        }
        auto content = m.find("content");
        const bool calls =
            name == "assistant" && m.contains("tool_calls") && !m["tool_calls"].is_null();
        if ((content == m.end() || (content->is_null() && name == "tool")) && name != "assistant") {
            throw bad_field(where + ".content", "is required");
        }
        ChatMessage msg;
        msg.role = name;
        if (content != m.end()) msg.content = message_content(*content, where + ".content");
        if (calls)
            msg.tool_calls = parse_message_tool_calls(m["tool_calls"], where + ".tool_calls");
        if (name == "tool") {
            auto id = m.find("tool_call_id");
            if (id == m.end() || !id->is_string() || id->get<std::string>().empty()) {
                throw bad_field(where + ".tool_call_id",
                                "is required in a tool message (the id of the call it answers)");
            }
            msg.tool_call_id = id->get<std::string>();
            msg.name = string_field(m, "name");
        }
        r.messages.push_back(std::move(msg));
    }
    r.sampling = parse_sampling(j, limits);
    r.sampling.response_format = parse_response_format(j, body);
    r.tools = parse_tools(j, body);
    if (r.tools.active() && r.sampling.response_format.kind != OutputFormatKind::Free) {
        throw bad_field("response_format",
                        "cannot be combined with tools (a call's arguments follow the tool's "
                        "schema already)");
    }
    return r;
}

CompletionRequest parse_completion_request(const std::string& body, const RequestLimits& limits) {
    const json j = parse_body(body, limits);
    CompletionRequest r;
    r.model = model_field(j);
    auto it = j.find("prompt");
    if (it == j.end()) throw bad_field("prompt", "is required");
    if (it->is_string()) {
        r.prompt = it->get<std::string>();
    } else if (it->is_array() && it->size() == 1 && (*it)[0].is_string()) {
        r.prompt = (*it)[0].get<std::string>();
    } else {
        throw bad_field("prompt", "must be a string (or an array of one string)");
    }
    if (bool_field(j, "echo")) throw bad_field("echo", "is not supported by this server");
    if (auto s = j.find("suffix"); s != j.end() && !s->is_null()) {
        throw bad_field("suffix", "is not supported by this server");
    }
    r.sampling = parse_sampling(j, limits);
    r.sampling.response_format = parse_response_format(j, body);
    return r;
}

std::shared_ptr<const grammar::Grammar> compile_response_format(const OutputFormat& format,
                                                                grammar::CompileBudget* budget) {
    try {
        return compile_output_format(format, budget);
    } catch (const grammar::CompileCancelled&) {
        throw;
    } catch (const grammar::GrammarError& e) {
        throw bad_field(format.kind == OutputFormatKind::JsonSchema
                            ? "response_format.json_schema.schema"
                            : "response_format",
                        std::string("is not supported: ") + e.what());
    }
}

SamplingParams sampling_for(const SamplingRequest& r, const SamplingParams& defaults) {
    SamplingParams p = defaults;
    if (r.temperature) p.temperature = static_cast<float>(*r.temperature);
    if (r.top_p) p.top_p = static_cast<float>(*r.top_p);
    if (r.min_p) p.min_p = static_cast<float>(*r.min_p);
    if (r.presence_penalty) p.presence_penalty = static_cast<float>(*r.presence_penalty);
    if (r.frequency_penalty) p.frequency_penalty = static_cast<float>(*r.frequency_penalty);
    if (r.repeat_penalty) p.repeat_penalty = static_cast<float>(*r.repeat_penalty);
    if (r.top_k) p.top_k = static_cast<int32_t>(*r.top_k);
    // Without a seed in the request each request samples afresh (as OpenAI's API does).
    p.seed = r.seed
                 ? *r.seed
                 : (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
    try {
        p.validate();
    } catch (const std::invalid_argument& e) {
        throw ApiError(400, e.what());
    }
    return p;
}

std::string finish_reason_text(FinishReason reason) {
    return reason == FinishReason::Stop ? "stop" : "length";
}

std::string finish_reason_text(const TurnResult& turn) {
    if (!turn.tool_calls.empty() && turn.finish == FinishReason::Stop) return "tool_calls";
    return finish_reason_text(turn.finish);
}

json tool_calls_json(const std::vector<ToolCall>& calls) {
    json out = json::array();
    for (const ToolCall& c : calls) {
        out.push_back({{"id", c.id},
                       {"type", "function"},
                       {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
    }
    return out;
}

json tool_call_delta_json(const ToolCallDelta& d) {
    json call = {{"index", d.index}};
    if (!d.name.empty()) {
        call["id"] = d.id;
        call["type"] = "function";
        call["function"] = {{"name", d.name}, {"arguments", d.arguments}};
    } else {
        call["function"] = {{"arguments", d.arguments}};
    }
    return json::array({call});
}

json usage_json(const TurnResult& turn) {
    const auto completion = static_cast<int64_t>(turn.ids.size());
    return json{{"prompt_tokens", turn.prompt_tokens},
                {"completion_tokens", completion},
                {"total_tokens", turn.prompt_tokens + completion},
                {"prompt_tokens_details", {{"cached_tokens", turn.tokens_reused}}}};
}

json ember_json(const TurnResult& turn, int slot) {
    return json{{"slot", slot},
                {"prompt_tokens_reused", turn.tokens_reused},
                {"prompt_tokens_restored", turn.tokens_restored},
                // restore, recompute, partial (the store held more than the slot), or none
                {"prompt_resume", std::string(resume_path_name(turn.resume.path))},
                {"prompt_restored_from", turn.restored_from},
                {"prompt_tokens_evaluated", turn.tokens_evaluated},
                {"ttft_seconds", turn.stats.ttft_seconds},
                {"decode_seconds", turn.stats.decode_seconds},
                {"completion_ids", turn.ids},
                {"warnings", turn.warnings}};
}

}  // namespace ember::serve
