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
#include <utility>
#include <vector>

#include "engine/sampling/sampling_ranges.h"
#include "ui/chat_controller.h"
#include "ui/chat_text.h"

namespace ember::ui {

namespace {

using chat_text::failure;
using chat_text::format;
using chat_text::info;
using chat_text::split_command;

const char* const kSettingNames =
    "temp, top-k, top-p, min-p, repeat-penalty, seed, n-predict, ignore-eos, stats, think, "
    "thinking-budget, reasoning-effort, ctx";

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

ChatOutcome ChatController::set_one(const std::string& args) {
    const auto [raw_name, value] = split_command(args);
    const std::string name = normalize_setting(raw_name);
    if (value.empty()) {
        return failure("usage: /set PARAM VALUE, PARAM one of: " + std::string(kSettingNames));
    }
    const auto not_a = [&](const char* what) {
        return failure("/set " + name + ": '" + value + "' is not " + what);
    };
    SamplingParams params = sampler_.params();
    if (name == "temp" || name == "temperature") {
        const auto v = parse_number<float>(value);
        if (!v) return not_a("a number");
        params.temperature = *v;
    } else if (name == "top-k") {
        const auto v = parse_number<int32_t>(value);
        if (!v) return not_a("a whole number");
        params.top_k = *v;
    } else if (name == "top-p") {
        const auto v = parse_number<float>(value);
        if (!v) return not_a("a number");
        params.top_p = *v;
    } else if (name == "min-p") {
        const auto v = parse_number<float>(value);
        if (!v) return not_a("a number");
        params.min_p = *v;
    } else if (name == "repeat-penalty") {
        const auto v = parse_number<float>(value);
        if (!v) return not_a("a number");
        params.repeat_penalty = *v;
    } else if (name == "seed") {
        const auto v = parse_number<uint64_t>(value);
        if (!v) return not_a("a whole number >= 0");
        sampler_.reset(*v);
        seeds_.fix(*v);
        return info("seed = " + std::to_string(*v) + " (the next reply starts from it)");
    } else if (name == "n-predict" || name == "n" || name == "max-tokens") {
        const auto v = parse_number<int64_t>(value);
        if (!v) return not_a("a whole number");
        if (*v == 0 || *v < -1) {
            return failure("/set n-predict: must be > 0, or -1 for as many as the context holds");
        }
        generation_.max_tokens = *v;
        return info("n-predict = " + value);
    } else if (name == "stats") {
        const auto v = parse_switch(value);
        if (!v) return not_a("on or off");
        show_stats_ = *v;
        return info(*v ? "stats = on (a line of numbers after each reply)"
                       : "stats = off (the status line keeps the numbers)");
    } else if (name == "ignore-eos") {
        const auto v = parse_switch(value);
        if (!v) return not_a("on or off");
        generation_.ignore_eos = *v;
        return info(std::string("ignore-eos = ") + (*v ? "on" : "off"));
    } else if (name == "think") {
        const auto v = parse_switch(value);
        if (!v) return not_a("on or off");
        engine_.set_thinking(*v);
        return info(std::string("think = ") + (*v ? "on" : "off"));
    } else if (name == "thinking-budget" || name == "max-thinking-tokens") {
        const auto v = parse_number<int64_t>(value);
        if (!v || *v < 0) return not_a("a whole number >= 0");
        engine_.set_thinking(*v > 0, *v);
        return info("thinking-budget = " + value);
    } else if (name == "reasoning-effort") {
        // gpt-oss's system message says how hard to think: low, medium or high.
        if (value != "low" && value != "medium" && value != "high") {
            return not_a("low, medium or high");
        }
        engine_.set_reasoning_effort(value);
        return info("reasoning-effort = " + value);
    } else if (name == "ctx" || name == "context") {
        const auto v = parse_number<int64_t>(value);
        if (!v) return not_a("a whole number");
        try {
            engine_.set_context(*v);
        } catch (const std::invalid_argument& e) {
            return failure("/set ctx " + value + ": " + e.what());
        }
        return info("ctx = " + value + " (the next turn is evaluated afresh)");
    } else {
        return failure("/set: unknown setting '" + raw_name + "'; settings: " + kSettingNames);
    }
    if (const std::string rule = range_problem(params); !rule.empty()) {
        // The words the command line and the server use for the same value.
        return failure("/set " + name + " " + value + ": " + rule.substr(rule.find(": ") + 2));
    }
    try {
        sampler_.set_params(params);  // validates; on error nothing changes
    } catch (const std::invalid_argument& e) {
        return failure("/set " + name + " " + value + ": " + rule_of(e));
    }
    return info(name + " = " + value);
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

// A preset's sampling keys as /set names them, with the value each has in `p` (and the seed
// `seed` when fixed), in kPresetKeys' order.
std::vector<std::pair<std::string, std::string>> sampling_values(
    const SamplingParams& p, const std::optional<uint64_t>& seed) {
    return {{"temp", format("%g", static_cast<double>(p.temperature))},
            {"top-k", std::to_string(p.top_k)},
            {"top-p", format("%g", static_cast<double>(p.top_p))},
            {"min-p", format("%g", static_cast<double>(p.min_p))},
            {"repeat-penalty", format("%g", static_cast<double>(p.repeat_penalty))},
            {"seed", seed ? std::to_string(*seed) : std::string("random")}};
}

const char* const kPresetKeys[] = {"temp", "top_k", "top_p", "min_p", "repeat_penalty", "seed"};

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
    const auto before = sampling_values(sampler_.params(), seeds_.next());
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
    const auto after = sampling_values(sampler_.params(), seeds_.next());
    std::string applied = preset.system ? "system prompt" : "";
    std::string restored;
    const auto add = [](std::string& list, const std::string& item) {
        list += (list.empty() ? "" : ", ") + item;
    };
    for (size_t k = 0; k < after.size(); ++k) {
        const std::string item = after[k].first + " " + after[k].second;
        if (preset.sampling.contains(kPresetKeys[k])) {
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
