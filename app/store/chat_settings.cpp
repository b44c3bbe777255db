#include "app/store/chat_settings.h"

#include <charconv>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "engine/util/bounded_json.h"

namespace ember::app {

namespace {

using json = nlohmann::ordered_json;

// The columns are text anyone with the file can edit: parsed with a depth bound; what does
// not parse is discarded.
json parse_stored(const std::string& text) {
    if (text.empty()) return json();
    json parsed = try_parse_json_bounded<json>(text);
    return parsed.is_discarded() ? json() : parsed;
}

template <class T>
T value_or(const json& object, const char* key, T fallback) {
    if (!object.is_object() || !object.contains(key)) return fallback;
    const json& v = object[key];
    if constexpr (std::is_same_v<T, bool>) {
        return v.is_boolean() ? v.get<bool>() : fallback;
    } else if constexpr (std::is_same_v<T, std::string>) {
        return v.is_string() ? v.get<std::string>() : fallback;
    } else if constexpr (std::is_integral_v<T>) {
        return v.is_number_integer() ? v.get<T>() : fallback;
    } else {
        return v.is_number() ? static_cast<T>(v.get<double>()) : fallback;
    }
}

}  // namespace

double decimal(float value) {
    // The shortest text that reads back as the same float, read as a double.
    char buffer[32];
    const auto [end, error] = std::to_chars(buffer, buffer + sizeof buffer - 1, value);
    if (error != std::errc()) return value;
    *end = '\0';
    return std::strtod(buffer, nullptr);
}

std::string settings_with(const std::string& stored, const ui::ChatSettings& s) {
    json j = parse_stored(stored);
    if (!j.is_object()) j = json::object();
    const SamplingParams& p = s.sampling;
    j["temperature"] = decimal(p.temperature);
    j["top_k"] = p.top_k;
    j["top_p"] = decimal(p.top_p);
    j["min_p"] = decimal(p.min_p);
    j["repeat_penalty"] = decimal(p.repeat_penalty);
    j["presence_penalty"] = decimal(p.presence_penalty);
    j["frequency_penalty"] = decimal(p.frequency_penalty);
    j["penalty_last_n"] = p.penalty_last_n;
    j["seed"] = s.fixed_seed ? *s.fixed_seed : p.seed;
    if (!j.contains("chat") || !j["chat"].is_object()) j["chat"] = json::object();
    json& chat = j["chat"];
    chat["seed_fixed"] = s.fixed_seed.has_value();
    chat["max_tokens"] = s.max_tokens;
    chat["ignore_eos"] = s.ignore_eos;
    if (!chat.contains("template_vars") || !chat["template_vars"].is_object()) {
        chat["template_vars"] = json::object();
    }
    json& vars = chat["template_vars"];
    if (s.think) {
        vars["enable_thinking"] = *s.think;
    } else {
        vars.erase("enable_thinking");
    }
    if (!s.reasoning_effort.empty()) {
        vars["reasoning_effort"] = s.reasoning_effort;
    } else {
        vars.erase("reasoning_effort");
    }
    if (s.thinking_budget >= 0) chat["max_thinking_tokens"] = s.thinking_budget;
    if (s.context > 0) chat["context"] = s.context;
    return j.dump();
}

std::optional<ui::ChatSettings> settings_from(const std::string& stored) {
    const json j = parse_stored(stored);
    if (!j.is_object()) return std::nullopt;
    ui::ChatSettings s;
    SamplingParams& p = s.sampling;
    p.temperature = value_or(j, "temperature", p.temperature);
    p.top_k = value_or(j, "top_k", p.top_k);
    p.top_p = value_or(j, "top_p", p.top_p);
    p.min_p = value_or(j, "min_p", p.min_p);
    p.repeat_penalty = value_or(j, "repeat_penalty", p.repeat_penalty);
    p.presence_penalty = value_or(j, "presence_penalty", p.presence_penalty);
    p.frequency_penalty = value_or(j, "frequency_penalty", p.frequency_penalty);
    p.penalty_last_n = value_or(j, "penalty_last_n", p.penalty_last_n);
    p.seed = value_or<uint64_t>(j, "seed", p.seed);
    const json chat = j.contains("chat") ? j["chat"] : json();
    if (value_or(chat, "seed_fixed", false)) s.fixed_seed = p.seed;
    s.max_tokens = value_or<int64_t>(chat, "max_tokens", -1);
    if (s.max_tokens == 0 || s.max_tokens < -1) s.max_tokens = -1;
    s.ignore_eos = value_or(chat, "ignore_eos", false);
    s.thinking_budget = value_or<int64_t>(chat, "max_thinking_tokens", -1);
    s.context = value_or<int64_t>(chat, "context", 0);
    const json vars =
        chat.is_object() && chat.contains("template_vars") ? chat["template_vars"] : json();
    if (vars.is_object() && vars.contains("enable_thinking") &&
        vars["enable_thinking"].is_boolean()) {
        s.think = vars["enable_thinking"].get<bool>();
    }
    s.reasoning_effort = value_or(vars, "reasoning_effort", std::string());
    return s;
}

std::string attachments_to_json(const std::vector<ui::AttachmentNote>& attachments) {
    if (attachments.empty()) return {};
    json list = json::array();
    for (const auto& a : attachments) {
        list.push_back({{"heading", a.heading}, {"bytes", a.bytes}, {"length", a.length}});
    }
    return list.dump();
}

std::vector<ui::AttachmentNote> attachments_from_json(const std::string& stored) {
    std::vector<ui::AttachmentNote> out;
    const json list = parse_stored(stored);
    if (!list.is_array()) return out;
    for (const json& a : list) {
        if (!a.is_object()) continue;
        out.push_back({value_or(a, "heading", std::string()), value_or<int64_t>(a, "bytes", 0),
                       value_or<int64_t>(a, "length", 0)});
    }
    return out;
}

}  // namespace ember::app
