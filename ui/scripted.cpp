#include "ui/scripted.h"

#include <cerrno>
#include <nlohmann/json.hpp>

namespace ember::ui {

namespace {

using json = nlohmann::json;

// Writes everything or reports that the reader went away (EPIPE).
bool write_all(std::FILE* out, const std::string& s) {
    if (s.empty()) return true;
    if (std::fwrite(s.data(), 1, s.size(), out) != s.size()) return false;
    return std::fflush(out) == 0;
}

double rate(int64_t tokens, double seconds) {
    return seconds > 0 ? tokens / seconds : 0.0;
}

json turn_json(const TurnResult& r) {
    json j;
    j["reply"] = r.reply;
    j["thinking"] = nullptr;
    j["tokens_reused"] = r.tokens_reused;
    j["tokens_evaluated"] = r.tokens_evaluated;
    j["tokens_generated"] = static_cast<int64_t>(r.ids.size());
    j["prefill_tps"] = rate(r.tokens_evaluated, r.stats.prefill_seconds);
    j["decode_tps"] =
        rate(std::max<int64_t>(0, r.stats.generated_tokens - 1), r.stats.decode_seconds);
    j["ttft_ms"] = r.stats.ttft_seconds * 1000.0;
    j["finish"] = std::string(finish_reason_name(r.finish));
    if (r.tokens_dropped > 0) {
        j["context_dropped_tokens"] = r.tokens_dropped;
        j["context_dropped_messages"] = r.messages_dropped;
    }
    return j;
}

// One turn: add the user message, stream or collect the reply, print it.
// Returns false when the output is gone (quiet end).
bool answer(Conversation& conv, Sampler& sampler, const std::string& prompt, std::FILE* out,
            std::FILE* err, const ScriptedOptions& o, bool& out_gone) {
    conv.add_message({"user", prompt});
    TurnResult r = conv.respond(sampler, o.generation, [&](const std::string& text, TextKind kind) {
        if (kind == TextKind::Thinking) return true;
        if (o.jsonl_out) return true;
        if (!write_all(out, text)) {
            out_gone = true;
            return false;
        }
        return true;
    });
    if (out_gone) return false;
    if (r.tokens_dropped > 0 && !o.jsonl_out) {
        std::fprintf(
            err, "ember: context full: dropped %lld tokens (%lld messages) of the oldest turns\n",
            static_cast<long long>(r.tokens_dropped), static_cast<long long>(r.messages_dropped));
    }
    const std::string tail = o.jsonl_out ? turn_json(r).dump() + "\n" : std::string("\n");
    if (!write_all(out, tail)) {
        out_gone = true;
        return false;
    }
    return true;
}

}  // namespace

int run_single_prompt(Conversation& conversation, Sampler& sampler, const std::string& prompt,
                      std::FILE* out, std::FILE* err, const ScriptedOptions& options) {
    bool gone = false;
    answer(conversation, sampler, prompt, out, err, options, gone);
    return 0;
}

int run_scripted(Conversation& conversation, Sampler& sampler, std::istream& in, std::FILE* out,
                 std::FILE* err, const ScriptedOptions& options) {
    std::string line;
    int64_t line_no = 0;
    bool gone = false;
    while (std::getline(in, line)) {
        ++line_no;
        if (!line.empty() && line.back() == '\r') line.pop_back();
        std::string prompt = line;
        if (options.jsonl_in) {
            if (line.find_first_not_of(" \t") == std::string::npos) continue;
            json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
            if (j.is_discarded() || !j.is_object()) {
                std::fprintf(err, "ember: stdin line %lld: not a JSON object\n",
                             static_cast<long long>(line_no));
                return 1;
            }
            if (j.contains("prompt") && j["prompt"].is_string()) {
                prompt = j["prompt"].get<std::string>();
            } else if (j.contains("content") && j["content"].is_string()) {
                const std::string role = j.value("role", std::string("user"));
                if (role == "system") {
                    conversation.set_system(j["content"].get<std::string>());
                    continue;
                }
                if (role != "user") {
                    std::fprintf(err, "ember: stdin line %lld: role '%s' is not user or system\n",
                                 static_cast<long long>(line_no), role.c_str());
                    return 1;
                }
                prompt = j["content"].get<std::string>();
            } else {
                std::fprintf(err,
                             "ember: stdin line %lld: expected {\"prompt\": TEXT} or "
                             "{\"role\": \"user\", \"content\": TEXT}\n",
                             static_cast<long long>(line_no));
                return 1;
            }
        } else if (line.empty()) {
            continue;
        }
        if (!answer(conversation, sampler, prompt, out, err, options, gone)) break;
    }
    return 0;
}

}  // namespace ember::ui
