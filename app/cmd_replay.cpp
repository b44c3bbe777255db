// ember replay ID [--regenerate]: a saved conversation's current branch as a transcript, or
// re-generated turn by turn and compared with what was stored.
//
// Regenerating runs each user turn of the branch through the same Conversation code the chat
// uses, with the sampling settings and seed stored with the conversation, and compares the
// new reply with the stored one. The next turn then continues from the stored reply (its own
// tokens), so every turn is judged on the history it was originally answered from.
//
// When is a replay identical? Greedy decoding (temperature 0, the setting tests use) is
// deterministic: every turn must come out the same. With temperature > 0 the chat draws from
// a generator seeded once per process (the stored seed); replay seeds it once too and runs
// the turns in order, so a conversation generated in one run replays exactly. A conversation
// continued across runs (--resume/--continue) restarted the generator at each run, and its
// later sampled turns may come out different; replay says so instead of guessing where the
// runs began. The chat stores its template switches (--think), thinking budget, stop strings,
// context and KV type with the conversation, and replay uses them; a template override file
// is not stored (replay warns), nor are changes made mid-conversation (/set).
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "app/model_locator.h"
#include "app/session_adapter.h"
#include "engine/generate/conversation.h"
#include "engine/model/model.h"
#include "engine/util/thread_pool.h"
#include "sessions/session_store.h"
#include "ui/terminal_text.h"

namespace ember::app {

namespace {

namespace fs = std::filesystem;

struct ReplayOptions {
    std::string id;
    std::string db;
    std::string model;  // empty: the model the conversation names, found like -m NAME
    bool regenerate = false;
    int threads = 0;
    int64_t ctx = 0;  // 0: the chat's default for the model
};

SamplingParams stored_sampling(const std::string& text) {
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    SamplingParams p;
    if (!j.is_object()) return p;
    p.temperature = j.value("temperature", p.temperature);
    p.top_k = j.value("top_k", p.top_k);
    p.top_p = j.value("top_p", p.top_p);
    p.min_p = j.value("min_p", p.min_p);
    p.repeat_penalty = j.value("repeat_penalty", p.repeat_penalty);
    p.presence_penalty = j.value("presence_penalty", p.presence_penalty);
    p.frequency_penalty = j.value("frequency_penalty", p.frequency_penalty);
    p.penalty_last_n = j.value("penalty_last_n", p.penalty_last_n);
    p.seed = j.value("seed", p.seed);
    return p;
}

// The chat settings stored beside the sampling ones (absent in older conversations: then
// the defaults stay).
void apply_stored_chat_settings(const std::string& text, ConversationOptions& c) {
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("chat") || !j["chat"].is_object()) return;
    const nlohmann::json& chat = j["chat"];
    if (chat.contains("template_vars") && chat["template_vars"].is_object()) {
        c.template_vars = chat["template_vars"];
    }
    c.max_thinking_tokens = chat.value("max_thinking_tokens", c.max_thinking_tokens);
    if (chat.contains("stop_strings") && chat["stop_strings"].is_array()) {
        c.stop_strings = chat["stop_strings"].get<std::vector<std::string>>();
    }
    c.context = chat.value("context", c.context);
    c.kv_type = chat.value("kv_type", std::string("f32")) == "f16" ? KvType::F16 : KvType::F32;
    if (chat.value("template_override", false)) {
        std::printf(
            "note: the conversation was generated with a template override file, which "
            "is not stored; the model's own template is used\n");
    }
}

// The reply's token limit: what the original run had where it stopped for length, else one
// token more than it generated (an identical reply ends where the stored one did).
int64_t token_limit(const sessions::StoredMessage& reply) {
    if (!reply.stats) return 4096;
    const int64_t generated = reply.stats->tokens_generated;
    return reply.stats->finish == "length" ? generated : generated + 1;
}

std::string quoted_excerpt(const std::string& text, size_t from) {
    std::string out = text.substr(from, 60);
    for (char& c : out) {
        if (c == '\n') c = ' ';
    }
    return "\"" + out + (text.size() > from + 60 ? "...\"" : "\"");
}

// Stored text goes through ui::TextWriter: exact to a pipe, control characters made visible
// on a terminal (a shared database may hold anything).
int print_transcript(sessions::SessionStore& store, const sessions::ConversationInfo& info) {
    ui::TextWriter out(stdout);
    out.raw("conversation ").text(info.public_id).raw(": ").text(info.title).raw(" (");
    out.text(info.model);
    std::printf(", %lld turns)\n", static_cast<long long>(info.turns));
    if (!info.system_prompt.empty()) out.raw("\n[system]\n").text(info.system_prompt).raw("\n");
    for (const auto& m : store.branch(info)) {
        out.raw("\n[").text(m.role).raw("]\n");
        if (!m.thinking.empty()) out.raw("<think>\n").text(m.thinking).raw("\n</think>\n");
        out.text(m.content).raw("\n");
    }
    return 0;
}

struct ReplayCounts {
    int turns = 0;
    int identical = 0;
};

// Regenerates the reply to the user message at `branch[i]` and compares it with the stored
// reply after it; leaves the stored reply in the conversation.
void replay_turn(Conversation& conv, Sampler& sampler, const sessions::StoredMessage& user,
                 const sessions::StoredMessage& stored, bool same_model, ReplayCounts& counts) {
    conv.add_message(ChatMessage{"user", user.content, {}, {}});
    GenerateOptions generation;
    generation.max_tokens = token_limit(stored);
    const TurnResult r = conv.respond(sampler, generation, nullptr);
    ++counts.turns;
    const bool same = r.reply == stored.content && r.thinking == stored.thinking;
    if (same) {
        ++counts.identical;
        std::printf("turn %d: identical (%zu tokens)\n", counts.turns, r.ids.size());
    } else {
        const std::string& a = stored.content;
        const std::string& b = r.reply;
        size_t at = 0;
        while (at < a.size() && at < b.size() && a[at] == b[at]) ++at;
        const ui::TextWriter out(stdout);
        std::printf(
            "turn %d: different%s at character %zu\n  stored:      %s\n"
            "  regenerated: %s\n",
            counts.turns, r.thinking != stored.thinking ? " (thinking too)" : "", at,
            out.shown(quoted_excerpt(a, at)).c_str(), out.shown(quoted_excerpt(b, at)).c_str());
    }
    // Later turns continue from what was stored, as the original run did.
    conv.pop_assistant();
    ChatMessage kept{"assistant", stored.content, {}, stored.thinking};
    if (same_model) kept.ids = stored.token_ids;
    conv.add_message(std::move(kept));
}

int run_regenerate(sessions::SessionStore& store, const sessions::ConversationInfo& info,
                   const ReplayOptions& o) {
    const std::string requested = o.model.empty() ? info.model : o.model;
    auto model = load_model(model_path_for(requested));
    const bool same_model = model->fingerprint() == info.model_fingerprint;
    if (!same_model) {
        const ui::TextWriter out(stdout);
        std::printf(
            "note: %s is not the model the conversation was recorded with (%s); its "
            "replies will likely differ\n",
            out.shown(model->path()).c_str(), out.shown(info.model).c_str());
    }
    ThreadPool pool(o.threads > 0 ? o.threads : default_threads());
    ConversationOptions copts;
    copts.context = default_context_size(model->config(), copts.kv_type);
    apply_stored_chat_settings(info.sampling_json, copts);
    if (o.ctx > 0) copts.context = o.ctx;
    copts.context = std::min<int64_t>(copts.context, model->config().n_ctx_train);
    Conversation conv(*model, pool, copts);
    if (!info.system_prompt.empty()) conv.set_system(info.system_prompt);
    const SamplingParams sampling = stored_sampling(info.sampling_json);
    Sampler sampler(sampling);
    const ui::TextWriter out(stdout);
    std::printf("replaying %s: %lld turns with %s, temperature %g, seed %llu\n",
                out.shown(info.public_id).c_str(), static_cast<long long>(info.turns),
                out.shown(fs::path(model->path()).filename().string()).c_str(),
                static_cast<double>(sampling.temperature),
                static_cast<unsigned long long>(sampling.seed));

    const std::vector<sessions::StoredMessage> branch = store.branch(info);
    ReplayCounts counts;
    for (size_t i = 0; i < branch.size(); ++i) {
        const auto& m = branch[i];
        if (m.role == "user" && i + 1 < branch.size() && branch[i + 1].role == "assistant") {
            replay_turn(conv, sampler, m, branch[i + 1], same_model, counts);
            ++i;
        } else if (m.role == "user") {
            std::printf("turn %d: no stored reply (the run ended before it); not compared\n",
                        counts.turns + 1);
        } else {
            ChatMessage kept{m.role, m.content, {}, m.thinking};
            if (same_model) kept.ids = m.token_ids;
            conv.add_message(std::move(kept));
        }
    }
    const int different = counts.turns - counts.identical;
    if (different == 0) {
        std::printf("all %d turns identical\n", counts.turns);
        return 0;
    }
    std::printf("%d of %d turns different%s\n", different, counts.turns,
                sampling.temperature > 0
                    ? " (sampled turns of a conversation continued across runs may differ: "
                      "each run restarted the generator from the seed)"
                    : "");
    return 1;
}

int run_replay(const ReplayOptions& o) {
    const std::string path = o.db.empty() ? default_db_path() : o.db;
    std::error_code ec;
    if (!fs::exists(path, ec)) throw std::runtime_error("no session database at " + path);
    auto db = open_session_db(path);
    sessions::SessionStore store(*db);
    const auto info = store.find(o.id);
    if (!info) {
        throw std::runtime_error("no saved conversation '" + o.id + "' in " + path +
                                 " (ember sessions list shows them)");
    }
    return o.regenerate ? run_regenerate(store, *info, o) : print_transcript(store, *info);
}

}  // namespace

void register_replay_command(CLI::App& app, std::vector<Command>& out) {
    auto o = std::make_shared<ReplayOptions>();
    auto* cmd = app.add_subcommand(
        "replay",
        "Print a saved conversation, or regenerate its turns and compare (exit 1 when "
        "any differs)");
    cmd->add_option("id", o->id, "Conversation id (a unique prefix will do)")->required();
    cmd->add_option("--db", o->db, "Session database (default: $XDG_DATA_HOME/ember/ember.db)");
    cmd->add_flag("--regenerate", o->regenerate,
                  "Regenerate every reply with the stored settings and compare it with the stored "
                  "one");
    cmd->add_option("-m,--model", o->model,
                    "Model file or name (default: the one the conversation was recorded with)");
    add_threads_option(cmd, o->threads, "Threads (default: the physical cores)");
    cmd->add_option("-c,--ctx", o->ctx, "Context size in tokens (default: the chat's default)");
    out.push_back({cmd, [o] { return run_replay(*o); }});
}

}  // namespace ember::app
