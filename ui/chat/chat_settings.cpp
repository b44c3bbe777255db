// /set, /preset and the settings kept with a conversation: what later replies are generated
// with, recorded with the conversation (and each reply) so --continue, --resume, /load and
// replay come back to them; and /load reopening a conversation's own model.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <filesystem>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include "engine/sampling/sampling_ranges.h"
#include "ui/chat/chat_controller.h"
#include "ui/chat/chat_text.h"

namespace ember::ui {

namespace {

using chat_text::answers_to;
using chat_text::failure;
using chat_text::format;
using chat_text::info;
using chat_text::split_command;

// Whole-string numeric parsing: "12x", "" and out-of-range values are rejected.
template <class T>
std::optional<T> parse_number(const std::string& text) {
    T value{};
    const char* first = text.data();
    const char* last = first + text.size();
    if (first != last && *first == '+') ++first;
    const auto [end, error] = std::from_chars(first, last, value);
    if (error != std::errc() || end != last || first == last) return std::nullopt;
    return value;
}

std::optional<bool> parse_switch(const std::string& text) {
    if (text == "on" || text == "true" || text == "1" || text == "yes") return true;
    if (text == "off" || text == "false" || text == "0" || text == "no") return false;
    return std::nullopt;
}

ChatOutcome not_a(const std::string& name, const std::string& value, const char* what) {
    return failure("/set " + name + ": '" + value + "' is not " + what);
}

const char* on_off(bool on) {
    return on ? "on" : "off";
}

// "Top_K" and "top-k" name the same setting.
std::string normalize_setting(std::string name) {
    for (char& c : name) {
        c = c == '_' ? '-' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    while (!name.empty() && name.front() == '-') name.erase(name.begin());
    return name;
}

// SamplingParams::validate() says "SamplingParams.top_p = 2: must lie in (0, 1]"; the user
// typed "top-p", so keep only the rule.
std::string rule_of(const std::invalid_argument& e) {
    const std::string what = e.what();
    const size_t colon = what.find(": ");
    return colon == std::string::npos ? what : what.substr(colon + 2);
}

// The first of `p`'s settings outside the range every way in shares (sampling_ranges.h), as
// "temperature 5: must be a number between 0 and 2"; empty when all are in range.
std::string range_problem(const SamplingParams& p) {
    const std::pair<const char*, double> values[] = {{"temperature", p.temperature},
                                                     {"top_k", p.top_k},
                                                     {"top_p", p.top_p},
                                                     {"min_p", p.min_p},
                                                     {"repeat_penalty", p.repeat_penalty},
                                                     {"presence_penalty", p.presence_penalty},
                                                     {"frequency_penalty", p.frequency_penalty}};
    for (const auto& [field, value] : values) {
        if (const std::string rule = sampling_range_problem(field, value); !rule.empty()) {
            return format("%s %.9g: %s", field, value, rule.c_str());
        }
    }
    return {};
}

}  // namespace

std::string ChatController::settings_text() const {
    const SamplingParams& p = sampler_.params();
    std::ostringstream text;
    text << "settings (/set NAME VALUE changes one):\n";
    text << "  temp " << p.temperature << ", top-k " << p.top_k << ", top-p " << p.top_p
         << ", min-p " << p.min_p << ", repeat-penalty " << p.repeat_penalty << ", seed ";
    if (seeds_.next()) {
        text << *seeds_.next() << " (the next reply's)";
    } else {
        text << "random (a fresh one per reply)";
    }
    text << "\n  n-predict " << generation_.max_tokens
         << (generation_.max_tokens < 0 ? " (to the end of the turn or the context)" : "")
         << ", ignore-eos " << (generation_.ignore_eos ? "on" : "off") << ", stats "
         << (show_stats_ ? "on" : "off") << "\n  think ";
    if (const std::optional<bool> think = engine_.thinking()) {
        text << (*think ? "on" : "off");
    } else {
        text << "auto (the template's default)";
    }
    text << ", thinking-budget ";
    if (engine_.thinking_budget() >= 0) {
        text << engine_.thinking_budget();
    } else {
        text << "(the server's)";
    }
    text << ", reasoning-effort ";
    const std::string effort = engine_.reasoning_effort();
    text << (effort.empty() ? std::string("(the template's default)") : effort) << ", ctx ";
    if (engine_.context_size() > 0) {
        text << engine_.context_size();
    } else {
        text << "(the server's)";
    }
    return text.str();
}

ChatOutcome ChatController::command_set(const std::string& args) {
    if (args.empty()) return info(settings_text());
    ChatOutcome outcome = set_one(args);
    // Kept with the conversation, so --continue, --resume and /load come back to them.
    if (!outcome.error) record_settings(outcome);
    return outcome;
}

template <auto Field>
ChatOutcome ChatController::set_sampling(ChatController& chat, const std::string& name,
                                         const std::string& value) {
    using Value = std::remove_cvref_t<decltype(SamplingParams{}.*Field)>;
    const auto parsed = parse_number<Value>(value);
    if (!parsed) {
        return not_a(name, value, std::is_integral_v<Value> ? "a whole number" : "a number");
    }
    SamplingParams params = chat.sampler_.params();
    params.*Field = *parsed;
    if (const std::string rule = range_problem(params); !rule.empty()) {
        // The words the command line and the server use for the same value.
        return failure("/set " + name + " " + value + ": " + rule.substr(rule.find(": ") + 2));
    }
    try {
        chat.sampler_.set_params(params);  // validates; on error nothing changes
    } catch (const std::invalid_argument& e) {
        return failure("/set " + name + " " + value + ": " + rule_of(e));
    }
    return info(name + " = " + value);
}

template <auto Field>
std::string ChatController::sampling_value(const ChatController& chat) {
    const auto value = chat.sampler_.params().*Field;
    if constexpr (std::is_integral_v<decltype(value)>) {
        return std::to_string(value);
    } else {
        return format("%g", static_cast<double>(value));
    }
}

// A /set setting: the names it answers to, how a value is set and how the value now reads.
struct ChatController::Setting {
    const char* name;
    const char* aliases;  // the other names it answers to, space-separated ("" for none)
    // A preset of the config file sets it too, named with '_' for '-' (presets.h).
    bool in_presets;
    // Sets it to `value` (`name`: as the user typed it, normalized).
    ChatOutcome (*set)(ChatController& chat, const std::string& name, const std::string& value);
    // The value now, as /set takes it back; empty when it has none to give.
    std::string (*value)(const ChatController& chat);
};

std::span<const ChatController::Setting> ChatController::setting_table() {
    using Chat = ChatController;
    using Text = const std::string&;
    static constexpr Setting kSettings[] = {
        {"temp", "temperature", true, &Chat::set_sampling<&SamplingParams::temperature>,
         &Chat::sampling_value<&SamplingParams::temperature>},
        {"top-k", "", true, &Chat::set_sampling<&SamplingParams::top_k>,
         &Chat::sampling_value<&SamplingParams::top_k>},
        {"top-p", "", true, &Chat::set_sampling<&SamplingParams::top_p>,
         &Chat::sampling_value<&SamplingParams::top_p>},
        {"min-p", "", true, &Chat::set_sampling<&SamplingParams::min_p>,
         &Chat::sampling_value<&SamplingParams::min_p>},
        {"repeat-penalty", "", true, &Chat::set_sampling<&SamplingParams::repeat_penalty>,
         &Chat::sampling_value<&SamplingParams::repeat_penalty>},
        {"seed", "", true,
         [](Chat& c, Text n, Text v) {
             const auto seed = parse_number<uint64_t>(v);
             if (!seed) return not_a(n, v, "a whole number >= 0");
             c.sampler_.reset(*seed);
             c.seeds_.fix(*seed);
             return info("seed = " + std::to_string(*seed) + " (the next reply starts from it)");
         },
         [](const Chat& c) {
             return c.seeds_.next() ? std::to_string(*c.seeds_.next()) : std::string();
         }},
        {"n-predict", "n max-tokens", false,
         [](Chat& c, Text n, Text v) {
             const auto tokens = parse_number<int64_t>(v);
             if (!tokens) return not_a(n, v, "a whole number");
             if (*tokens == 0 || *tokens < -1) {
                 return failure(
                     "/set n-predict: must be > 0, or -1 for as many as the context holds");
             }
             c.generation_.max_tokens = *tokens;
             return info("n-predict = " + v);
         },
         [](const Chat& c) { return std::to_string(c.generation_.max_tokens); }},
        {"ignore-eos", "", false,
         [](Chat& c, Text n, Text v) {
             const auto on = parse_switch(v);
             if (!on) return not_a(n, v, "on or off");
             c.generation_.ignore_eos = *on;
             return info(std::string("ignore-eos = ") + on_off(*on));
         },
         [](const Chat& c) { return std::string(on_off(c.generation_.ignore_eos)); }},
        {"stats", "", false,
         [](Chat& c, Text n, Text v) {
             const auto on = parse_switch(v);
             if (!on) return not_a(n, v, "on or off");
             c.show_stats_ = *on;
             return info(*on ? "stats = on (a line of numbers after each reply)"
                             : "stats = off (the status line keeps the numbers)");
         },
         [](const Chat& c) { return std::string(on_off(c.show_stats_)); }},
        {"think", "", false,
         [](Chat& c, Text n, Text v) {
             const auto on = parse_switch(v);
             if (!on) return not_a(n, v, "on or off");
             c.engine_.set_thinking(*on);
             return info(std::string("think = ") + on_off(*on));
         },
         [](const Chat& c) {
             const std::optional<bool> on = c.engine_.thinking();
             return on ? std::string(on_off(*on)) : std::string();
         }},
        {"thinking-budget", "max-thinking-tokens", false,
         [](Chat& c, Text n, Text v) {
             const auto budget = parse_number<int64_t>(v);
             if (!budget || *budget < 0) return not_a(n, v, "a whole number >= 0");
             c.engine_.set_thinking(*budget > 0, *budget);
             return info("thinking-budget = " + v);
         },
         [](const Chat& c) {
             const int64_t budget = c.engine_.thinking_budget();
             return budget >= 0 ? std::to_string(budget) : std::string();
         }},
        {"reasoning-effort", "", false,
         [](Chat& c, Text n, Text v) {
             // gpt-oss's system message says how hard to think: low, medium or high.
             if (v != "low" && v != "medium" && v != "high") {
                 return not_a(n, v, "low, medium or high");
             }
             c.engine_.set_reasoning_effort(v);
             return info("reasoning-effort = " + v);
         },
         [](const Chat& c) { return c.engine_.reasoning_effort(); }},
        {"ctx", "context", false,
         [](Chat& c, Text n, Text v) {
             const auto tokens = parse_number<int64_t>(v);
             if (!tokens) return not_a(n, v, "a whole number");
             try {
                 c.engine_.set_context(*tokens);
             } catch (const std::invalid_argument& e) {
                 return failure("/set ctx " + v + ": " + e.what());
             }
             return info("ctx = " + v + " (the next turn is evaluated afresh)");
         },
         [](const Chat& c) {
             const int64_t tokens = c.engine_.context_size();
             return tokens > 0 ? std::to_string(tokens) : std::string();
         }},
    };
    return kSettings;
}

const ChatController::Setting* ChatController::find_setting(const std::string& name) {
    for (const Setting& s : setting_table()) {
        if (answers_to(s.name, s.aliases, name)) return &s;
    }
    return nullptr;
}

const std::vector<std::string>& ChatController::setting_names() {
    static const std::vector<std::string> names = [] {
        std::vector<std::string> out;
        for (const Setting& s : setting_table()) out.push_back(s.name);
        return out;
    }();
    return names;
}

std::string ChatController::setting_value(const std::string& name) const {
    const Setting* setting = find_setting(normalize_setting(name));
    return setting != nullptr ? setting->value(*this) : std::string();
}

namespace {

// The settings' names as a list in a sentence: "temp, top-k, ..., ctx".
std::string setting_list() {
    std::string list;
    for (const std::string& name : ChatController::setting_names()) {
        list += (list.empty() ? "" : ", ") + name;
    }
    return list;
}

}  // namespace

ChatOutcome ChatController::set_one(const std::string& args) {
    const auto [raw_name, value] = split_command(args);
    const std::string name = normalize_setting(raw_name);
    if (value.empty()) {
        return failure("usage: /set PARAM VALUE, PARAM one of: " + setting_list());
    }
    const Setting* setting = find_setting(name);
    if (setting == nullptr) {
        return failure("/set: unknown setting '" + raw_name + "'; settings: " + setting_list());
    }
    return setting->set(*this, name, value);
}

void ChatController::set_seeds(ReplySeeds seeds) {
    seeds_ = seeds;
    ChatOutcome ignored;
    record_settings(ignored);
}

ChatSettings ChatController::settings() const {
    ChatSettings s;
    s.sampling = sampler_.params();
    s.fixed_seed = seeds_.next();
    s.max_tokens = generation_.max_tokens;
    s.ignore_eos = generation_.ignore_eos;
    s.think = engine_.thinking();
    s.thinking_budget = engine_.thinking_budget();
    s.reasoning_effort = engine_.reasoning_effort();
    s.context = engine_.context_size();
    return s;
}

std::string ChatController::apply_settings(const ChatSettings& s) {
    std::string not_taken;
    const auto note = [&](const std::string& what) {
        not_taken += (not_taken.empty() ? "" : "; ") + what;
    };
    // The stored values were checked when they were set, but the file may have been edited:
    // each is checked as /set checks it, and one that fails leaves the current value.
    if (const std::string rule = range_problem(s.sampling); !rule.empty()) {
        note("its stored settings were not used (" + rule + ")");
    } else {
        try {
            SamplingParams p = s.sampling;
            p.seed = sampler_.params().seed;
            sampler_.set_params(p);
        } catch (const std::invalid_argument& e) {
            note(std::string("its stored settings were not used (") + rule_of(e) + ")");
        }
    }
    if (s.fixed_seed) {
        sampler_.reset(*s.fixed_seed);
        seeds_.fix(*s.fixed_seed);
    } else {
        seeds_ = ReplySeeds();
    }
    generation_.max_tokens = s.max_tokens == 0 || s.max_tokens < -1 ? -1 : s.max_tokens;
    generation_.ignore_eos = s.ignore_eos;
    try {
        if (s.think && (engine_.thinking() != s.think || s.thinking_budget >= 0)) {
            engine_.set_thinking(*s.think, s.thinking_budget);
        }
        if (!s.reasoning_effort.empty() && s.reasoning_effort != engine_.reasoning_effort()) {
            engine_.set_reasoning_effort(s.reasoning_effort);
        }
    } catch (const std::invalid_argument&) {
        // A model without a thinking switch: the setting has nothing to act on.
    }
    if (s.context > 0 && engine_.context_size() > 0 && s.context != engine_.context_size()) {
        try {
            engine_.set_context(s.context);
        } catch (const std::invalid_argument& e) {
            note("ctx stays " + std::to_string(engine_.context_size()) + " (" + e.what() + ")");
        }
    }
    return not_taken;
}

void ChatController::record_settings(ChatOutcome& outcome) {
    try {
        backend_.record_settings(settings());
    } catch (const std::exception& e) {
        outcome.error = true;
        outcome.message += std::string(outcome.message.empty() ? "" : "; ") +
                           "the settings were not saved: " + e.what();
    }
}

std::vector<MessageNotes> ChatController::message_notes() const {
    std::vector<MessageNotes> out;
    out.reserve(message_ids_.size());
    for (const int64_t id : message_ids_) {
        const auto it = notes_.find(id);
        out.push_back(it == notes_.end() || id == 0 ? MessageNotes{} : it->second);
    }
    return out;
}

void ChatController::set_presets(Presets presets, std::string config_path, PresetBase base) {
    presets_ = std::move(presets);
    config_path_ = std::move(config_path);
    preset_base_ = std::move(base);
}

namespace {

// The key a preset of the config file gives a setting: its /set name with '_' for '-'.
std::string preset_key(std::string name) {
    std::replace(name.begin(), name.end(), '-', '_');
    return name;
}

}  // namespace

ChatOutcome ChatController::command_preset(const std::string& name) {
    if (name.empty()) {
        std::string names;
        for (const auto& [n, p] : presets_) names += (names.empty() ? "" : ", ") + n;
        if (names.empty()) {
            return failure("/preset: no presets in " +
                           (config_path_.empty() ? std::string("the config file") : config_path_));
        }
        return info("/preset NAME: " + names);
    }
    const Preset& preset = find_preset(presets_, name, config_path_);
    // Over the settings the chat had before any preset, not over the last preset's: a
    // setting this preset does not name goes back to what it was.
    const PresetBase base = preset_base_.value_or(PresetBase{sampler_.params(), seeds_.next(), {}});
    // The settings a preset sets, with their values now ("random": a seed not fixed).
    const auto preset_values = [this] {
        std::vector<std::pair<std::string, std::string>> values;
        for (const Setting& s : setting_table()) {
            if (!s.in_presets) continue;
            const std::string value = s.value(*this);
            values.emplace_back(s.name, value.empty() ? "random" : value);
        }
        return values;
    };
    const auto before = preset_values();
    const std::string system_before = system_prompt();
    ChatSettings s = settings();
    s.sampling = base.sampling;
    s.fixed_seed = base.fixed_seed;
    apply_preset_sampling(preset, s.sampling, s.fixed_seed);
    const std::string not_taken = apply_settings(s);
    if (!not_taken.empty()) return failure("/preset " + name + ": " + not_taken);
    const std::string system = preset.system.value_or(base.system);
    if (system != system_before) {
        backend_.set_system_prompt(system);
        if (system.empty()) {
            // No system prompt: the leading system message goes.
            std::vector<ChatMessage> messages = engine_.messages();
            if (!messages.empty() && messages.front().role == "system") {
                messages.erase(messages.begin());
            }
            replace_messages(messages);
        } else {
            engine_.set_system(system);
        }
    }
    // What the preset set, then what went back to the chat's own.
    const auto after = preset_values();
    std::string applied = preset.system ? "system prompt" : "";
    std::string restored;
    const auto add = [](std::string& list, const std::string& item) {
        list += (list.empty() ? "" : ", ") + item;
    };
    for (size_t k = 0; k < after.size(); ++k) {
        const std::string item = after[k].first + " " + after[k].second;
        if (preset.sampling.contains(preset_key(after[k].first))) {
            add(applied, item);
        } else if (after[k].second != before[k].second) {
            add(restored, item);
        }
    }
    if (!preset.system && system != system_before) {
        add(restored, system.empty() ? "no system prompt" : "its system prompt");
    }
    ChatOutcome outcome =
        info("preset " + name + ": " + (applied.empty() ? std::string("nothing to set") : applied) +
             (restored.empty() ? "" : "; back to the chat's own: " + restored));
    record_settings(outcome);
    return outcome;
}

std::string ChatController::reopen_model_of(const LoadedSession& loaded) {
    const SessionSummary& s = loaded.summary;
    if (switcher_ == nullptr || (s.model_path.empty() && s.model.empty())) return {};
    std::error_code ec;
    const std::string current = switcher_->current_path();
    if (!s.model_path.empty() && std::filesystem::equivalent(s.model_path, current, ec)) return {};
    if (s.model_path.empty() && std::filesystem::path(current).filename().string() == s.model) {
        return {};
    }
    cancel_requested_.store(false, std::memory_order_relaxed);  // Esc from here on stops the load
    // The conversation's record must not change to the model answering now: it is left
    // before the switch, which then records nothing for it.
    backend_.new_session(system_prompt());
    const std::string wanted =
        !s.model_path.empty() && std::filesystem::exists(s.model_path, ec) ? s.model_path : s.model;
    try {
        switcher_->switch_to(wanted, [this] { return stop_requested(); });
    } catch (const std::exception& e) {
        return "its model " + s.model + " could not be opened (" + e.what() + "); " +
               switcher_->current_name() + " answers";
    }
    return "its model " + switcher_->current_name() + " answers again";
}

}  // namespace ember::ui
