// ember chat: a conversation with the model's chat template, warm across turns.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <limits>
#include <sstream>

#include "app/cli/cli_checks.h"
#include "app/cli/output_format.h"
#include "app/cli/stop_signals.h"
#include "app/commands/commands.h"
#include "app/models/chat_models.h"
#include "app/models/model_locator.h"
#include "app/models/recorded_model.h"
#include "app/remote/client.h"
#include "app/remote/remote_chat.h"
#include "app/store/session_adapter.h"
#include "engine/generate/constrained.h"
#include "engine/generate/conversation.h"
#include "engine/model/model.h"
#include "engine/util/thread_pool.h"
#include "ui/chat/chat_controller.h"
#include "ui/chat/chat_engine.h"
#include "ui/chat/presets.h"
#include "ui/chat/session_backend.h"
#include "ui/io/attachments.h"
#include "ui/io/terminal_text.h"
#include "ui/line/line_mode.h"
#include "ui/scripted/scripted.h"
#include "ui/tools/tool_turns.h"
#include "ui/tui/full_screen.h"

namespace ember::app {

namespace {

struct ChatOptions {
    std::string model;
    std::string prompt;
    std::vector<std::string> files;           // -f: attached before the prompt
    std::vector<ui::Attachment> attachments;  // scripted: -f's files and stdin with -p
    std::string system;
    std::string template_file;
    std::vector<std::string> stops;
    SamplingParams sampling;
    bool seed_given = false;      // --seed or the config's seed: replies from it, else fresh seeds
    int64_t n_predict = -1;       // to the end of the turn or the context
    int64_t ctx = 0;              // 0: default_context_size() of the model
    std::string kv_type = "f16";  // f32 | f16 | q8_0 (README: KV precision)
    std::string activations = "auto";  // --activations
    GpuOptions gpu;                    // --gpu
    int threads = 0;
    bool script = false;
    bool jsonl = false;
    bool no_prefix_cache = false;
    bool special_tokens_in_content = false;  // --special-tokens-in-content
    bool ignore_eos = false;
    bool plain = false;    // line mode even where the curses UI could run
    bool verbose = false;  // a line of numbers after each reply (/set stats)
    bool show_thinking = false;
    bool progress = false;            // --progress: a long prompt's evaluation reported as it goes
    OutputFormatFlags output_format;  // --json-schema, --grammar (scripted chats)
    bool no_spec = false;
    int draft_max = 6;
    int64_t max_thinking_tokens = 4096;
    std::string reasoning_effort;  // gpt-oss: low, medium or high; empty: the template's default
    std::string think = "auto";    // on | off | auto (the template's default)
    std::string db;                // session database; empty: the default path
    bool no_db = false;
    std::string resume;
    bool continue_last = false;
    std::string state_cap = kDefaultStateCap;
    std::string state_memory = kDefaultStateMemory;
    std::string remote;  // an OpenAI-compatible API's URL: replies come from there
    std::string api_key_env;
    std::string preset;   // --preset: a named preset of the config file
    ui::Presets presets;  // the config file's, for --preset and /preset
    // What /preset applies a preset over: the settings and system prompt before --preset.
    ui::ChatController::PresetBase preset_base;
    // The settings flags named on the command line, as /set commands: over a resumed
    // conversation's stored settings (which come back with it otherwise).
    std::vector<std::string> settings_given;
    std::string remote_model;
    // Tools (README: Tools): --tools FILE (repeatable), --builtin-tools NAMES, --tool-root,
    // --tool-choice, --yes-tools.
    std::vector<std::string> tool_files;
    std::vector<std::string> builtin_tools;
    std::string tool_root;
    std::string tool_choice = "auto";
    bool yes_tools = false;
    ui::ChatToolSettings tools;  // built from the above by load_tools()
};

// The tools the flags name, checked before anything loads: a bad tools file is one line
// naming the file, the tool and the field (ui::ToolsError). Nothing when no tool is named.
void load_tools(ChatOptions& o) {
    const bool any_tool = !o.tool_files.empty() || !o.builtin_tools.empty();
    if (!any_tool) {
        if (o.tool_choice != "auto" || o.yes_tools || !o.tool_root.empty()) {
            throw CLI::ValidationError("--tool-choice, --tool-root and --yes-tools",
                                       "need tools: --tools FILE or --builtin-tools NAMES");
        }
        return;
    }
    auto tools = std::make_shared<ui::ToolSet>();
    for (const std::string& file : o.tool_files) tools->add_file(file);
    for (const std::string& name : o.builtin_tools) tools->add_builtin(name);
    ui::ChatToolSettings& settings = o.tools;
    if (!o.builtin_tools.empty()) {
        settings.root =
            std::make_shared<const ui::ToolRoot>(o.tool_root.empty() ? "." : o.tool_root);
    } else if (!o.tool_root.empty()) {
        throw CLI::ValidationError("--tool-root",
                                   "applies to the built-in tools (--builtin-tools)");
    }
    if (o.tool_choice == "auto") {
        settings.choice = ToolChoice::Auto;
    } else if (o.tool_choice == "none") {
        settings.choice = ToolChoice::None;
    } else if (o.tool_choice == "required") {
        settings.choice = ToolChoice::Required;
    } else if (tools->find(o.tool_choice) != nullptr) {
        settings.choice = ToolChoice::Named;
        settings.named = o.tool_choice;
    } else {
        throw CLI::ValidationError("--tool-choice", "'" + o.tool_choice +
                                                        "' is not auto, none, required or the "
                                                        "name of a tool offered");
    }
    settings.auto_approve = o.yes_tools;
    settings.tools = std::move(tools);
}

// What the front end records about the conversation and how it finds it again.
ChatSessionOptions session_options_for(const ChatOptions& o, bool scripted) {
    ChatSessionOptions session_options;
    session_options.db_path = o.db;
    session_options.no_db = o.no_db;
    session_options.scripted = scripted;
    session_options.resume_id = o.resume;
    session_options.continue_last = o.continue_last;
    session_options.state_cap = o.state_cap;
    session_options.state_memory = o.state_memory;
    session_options.sampling = o.sampling;
    session_options.max_tokens = o.n_predict;
    session_options.speculation.enabled = !o.no_spec;
    session_options.speculation.draft_max = o.draft_max;
    return session_options;
}

// What the first interactive run (the one that creates the database) says about it.
std::string first_run_notice(const ChatSessions& sessions, const ChatOptions& o) {
    if (!sessions.created()) return {};
    return "conversations and model state are saved in " + sessions.path() + " (state kept under " +
           o.state_cap +
           ", least recently used first: --state-cap; ember sessions stats shows the sizes)";
}

// On leaving: how to come back to the conversation.
void print_way_back(const std::string& id, const ChatOptions& o) {
    if (id.empty()) return;
    std::string db;
    if (!o.db.empty()) {
        // Quoted for a shell where it needs to be.
        const bool plain = o.db.find_first_not_of(
                               "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRS"
                               "TUVWXYZ0123456789/._-+:@%,=") == std::string::npos;
        std::string quoted = "'";
        for (char c : o.db) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
        db = " --db " + (plain ? o.db : quoted + "'");
    }
    const ui::TextWriter out(stdout);
    std::printf("conversation %s saved: ember chat%s --continue (or --resume %s)\n",
                out.shown(id).c_str(), out.shown(db).c_str(), out.shown(id).c_str());
    std::fflush(stdout);
}

// The chat itself, the same whichever engine answers: scripted, the full-screen UI (when
// `screen` is open) or line mode. `models` switches the model (/model); null: it cannot be.
// `constrained`: a scripted chat's grammar (below).
struct Constrained {
    std::shared_ptr<const grammar::Grammar> grammar;
    // The answering model's vocabulary as a trie (empty for a remote engine).
    std::function<std::shared_ptr<const grammar::TokenTrie>()> token_trie;
};

// A scripted --continue/--resume: the settings the conversation went on with (/set, /preset in
// an earlier chat), except those a flag names now.
void apply_resumed_settings(const ui::ChatSettings& stored, const ChatOptions& o, Sampler& sampler,
                            ui::ScriptedOptions& so) {
    const auto given = [&](const std::string& name) {
        return std::any_of(
            o.settings_given.begin(), o.settings_given.end(),
            [&](const std::string& set) { return set.starts_with("/set " + name + " "); });
    };
    SamplingParams p = sampler.params();
    if (!given("temp")) p.temperature = stored.sampling.temperature;
    if (!given("top-k")) p.top_k = stored.sampling.top_k;
    if (!given("top-p")) p.top_p = stored.sampling.top_p;
    if (!given("min-p")) p.min_p = stored.sampling.min_p;
    if (!given("repeat-penalty")) p.repeat_penalty = stored.sampling.repeat_penalty;
    try {
        sampler.set_params(p);
    } catch (const std::invalid_argument&) {
        // A hand-edited record out of range: the flags' and config's settings stay.
    }
    if (!given("seed") && stored.fixed_seed) so.seed = stored.fixed_seed;
    if (!given("n-predict")) so.generation.max_tokens = stored.max_tokens;
    if (!given("ignore-eos")) so.generation.ignore_eos = stored.ignore_eos;
}

int run_front_end(ui::ChatEngine& engine, Sampler& sampler, ChatSessions& sessions,
                  const ChatOptions& o, bool scripted, ui::FullScreen* screen,
                  ui::ModelSwitcher* models, const Constrained& constrained) {
    ui::ScriptedOptions so;
    so.grammar = constrained.grammar;
    so.token_trie = constrained.token_trie;
    so.jsonl_in = o.jsonl;
    so.jsonl_out = o.jsonl;
    so.generation.max_tokens = o.n_predict;
    so.generation.ignore_eos = o.ignore_eos;
    so.show_thinking = o.show_thinking;
    so.generation.speculation.enabled = !o.no_spec;
    so.generation.speculation.draft_max = o.draft_max;
    if (o.seed_given) so.seed = o.sampling.seed;
    so.attachments = o.attachments;
    so.tools = o.tools;
    if (scripted) {
        // Turns are committed as they complete; a resumed conversation continues its branch.
        so.sessions = &sessions.backend();
        if (!sessions.resume_id().empty()) {
            so.parent_id = sessions.load_into(engine);
            if (!o.system.empty()) engine.set_system(o.system);
            if (sessions.resumed_settings()) {
                apply_resumed_settings(*sessions.resumed_settings(), o, sampler, so);
            }
        } else {
            sessions.backend().new_session(o.system);
        }
        // Ctrl-C, SIGTERM, SIGHUP: the reply in progress (or the prompt being read) stops, is
        // saved and reported ("finish": "cancelled"), and the run ends with 128 + the signal.
        const StopSignals stop;
        so.stop_signal = [&stop] { return stop.raised(); };
        so.progress = o.progress;
        // What the replies are generated with, recorded with the conversation and each reply.
        ui::ChatSettings settings;
        settings.sampling = sampler.params();
        settings.fixed_seed = so.seed;
        settings.max_tokens = so.generation.max_tokens;
        settings.ignore_eos = so.generation.ignore_eos;
        settings.think = engine.thinking();
        settings.thinking_budget = engine.thinking_budget();
        settings.reasoning_effort = engine.reasoning_effort();
        settings.context = engine.context_size();
        sessions.backend().record_settings(settings);
        const int status =
            o.prompt.empty() ? ui::run_scripted(engine, sampler, std::cin, stdout, stderr, so)
                             : ui::run_single_prompt(engine, sampler, o.prompt, stdout, stderr, so);
        if (const int signal_number = stop.raised()) {
            std::fprintf(stderr, "ember: stopped by SIG%s%s\n", sigabbrev_np(signal_number),
                         sessions.backend().current_id().empty()
                             ? ""
                             : "; the conversation so far is saved");
        }
        return status;
    }
    // A terminal: the full-screen UI, or line mode.
    ui::ChatController controller(engine, sampler, sessions.backend(), so.generation);
    controller.set_seeds(ui::ReplySeeds(so.seed));
    controller.set_show_stats(o.verbose);
    controller.set_model_switcher(models);
    controller.set_presets(o.presets, config_path(), o.preset_base);
    if (o.tools.enabled()) controller.set_tools(o.tools);
    if (!sessions.resume_id().empty()) {
        // The model is the command line's choice here (-m, else the conversation's own).
        const ui::ChatOutcome loaded =
            controller.load_session(sessions.resume_id(), /*own_model=*/false);
        if (loaded.error) throw std::runtime_error(loaded.message);
        for (const std::string& set : o.settings_given) {
            const ui::ChatOutcome applied = controller.apply_setting(set.substr(5));  // "/set "
            if (applied.error) throw std::runtime_error(applied.message);
        }
    }
    std::string notice = first_run_notice(sessions, o);
    for (const std::string& file : o.files) {
        // -f in an interactive chat: as /file, for the first message.
        const ui::ChatOutcome attached = controller.handle_command("/file " + file, {});
        if (attached.error) {
            const std::string& m = attached.message;
            throw std::runtime_error("-f: " + (m.starts_with("/file: ") ? m.substr(7) : m));
        }
        notice += (notice.empty() ? "" : "\n") + attached.message;
    }
    int status = 0;
    if (screen != nullptr) {
        if (!notice.empty()) screen->add_notice(notice);
        status = screen->run(controller);
    } else {
        if (!notice.empty()) ui::TextWriter(stdout).text(notice).raw("\n");
        ui::LineModeOptions line_options;
        line_options.history_path = ui::default_history_path();
        line_options.color = ui::stdout_wants_color();
        status = ui::run_line_mode(controller, line_options);
    }
    print_way_back(controller.session_id(), o);
    return status;
}

bool chat_is_scripted(const ChatOptions& o) {
    return !o.prompt.empty() || o.script || !isatty(STDIN_FILENO);
}

// -m, else the resumed conversation's own model, else the default one (model_locator.h).
std::string chat_model_path(const ChatOptions& o) {
    const bool resuming = o.continue_last || !o.resume.empty();
    if (!o.model.empty() || !resuming || o.no_db) return model_path_for(o.model);
    const sessions::ConversationInfo info = conversation_to_resume(o.db, o.resume);
    // A conversation held with a remote model has no file here.
    if (parse_remote_fingerprint(info.model_fingerprint)) return model_path_for(o.model);
    return recorded_model_path(info, stderr);
}

// The full-screen UI, or null: line mode is for scripts, --plain and terminals curses cannot
// drive. It names the model by its file (`model_path`) or, for a remote one, by `model_name`.
std::unique_ptr<ui::FullScreen> open_screen(const ChatOptions& o, bool scripted,
                                            const std::string& model_path,
                                            const std::string& model_name) {
    if (scripted || o.plain) return nullptr;
    ui::FullScreenOptions screen_options;
    screen_options.model_path = model_path;
    screen_options.model_name = model_name;
    screen_options.history_path = ui::default_history_path();
    return ui::FullScreen::open(screen_options);
}

// What every model of a local chat runs with: the first one and any /model switches to.
ChatModelSettings model_settings_for(const ChatOptions& o) {
    ChatModelSettings settings;
    settings.activations = o.activations;
    settings.gpu = o.gpu;
    settings.context = o.ctx;
    ConversationOptions& copts = settings.conversation;
    copts.kv_type = kv_type_of(o.kv_type);
    copts.prefix_cache = !o.no_prefix_cache;
    copts.special_tokens_in_content = o.special_tokens_in_content;
    // Every front end shows and commits the reply before the state behind it is stored (a
    // script reads each reply as one piece; the controller commits, then stores).
    copts.defer_state_save = true;
    // A chat's next turn follows this one: its start is evaluated once the reply is out.
    copts.prepare_next_turn = true;
    copts.stop_strings = o.stops;
    copts.max_thinking_tokens = o.max_thinking_tokens;
    if (o.think != "auto") {
        // The template's own switch (Qwen3's enable_thinking); with thinking off, a block the
        // template still opens is closed before the model starts.
        copts.template_vars["enable_thinking"] = o.think == "on";
        if (o.think == "off") copts.max_thinking_tokens = 0;
    }
    if (!o.reasoning_effort.empty()) copts.template_vars["reasoning_effort"] = o.reasoning_effort;
    if (!o.template_file.empty()) copts.template_override = read_template_file(o.template_file);
    return settings;
}

int run_local_chat(ChatOptions& o) {
    const std::string model_path = chat_model_path(o);
    const bool scripted = chat_is_scripted(o);
    Constrained constrained;
    constrained.grammar = grammar_from_flags(o.output_format);  // a bad schema: said at once
    if (constrained.grammar && !scripted) {
        throw CLI::ValidationError("--json-schema",
                                   "and --grammar apply to scripted chats (-p, --script, piped "
                                   "input), not the interactive one");
    }
    if (constrained.grammar && o.tools.enabled()) {
        throw CLI::ValidationError("--json-schema",
                                   "and --grammar exclude --tools: a reply is either the schema's "
                                   "answer or a call");
    }
    // A --db typed wrong is said before the screen takes the terminal (ChatSessions opens it).
    if (!o.no_db) check_named_db(o.db, DbUse::write);
    // The full-screen UI takes the terminal before the model loads, so the load shows at once.
    std::unique_ptr<ui::FullScreen> screen = open_screen(o, scripted, model_path, "");
    ThreadPool pool(o.threads > 0 ? o.threads : default_threads());
    ChatModels models(model_settings_for(o), pool);
    models.open(model_path);
    if (screen) {
        // "GPU 0: NVIDIA H100 80GB HBM3" in the transcript, "GPU 0" in the status line.
        const std::string where = model_placement(models.model());
        screen->set_placement(where.substr(0, where.find(':')));
        if (models.model().device()) screen->add_notice("running on " + where);
    }
    Conversation& conv = models.conversation();
    if (!o.system.empty()) conv.set_system(o.system);
    if (const std::string warning = models.template_warning(); !scripted && !warning.empty()) {
        // A base model without a template may not answer as a chat: the interactive chat
        // says so once (scripted runs keep stderr for errors).
        if (screen) {
            screen->add_notice("warning: " + warning);
        } else {
            ui::TextWriter(stderr).raw("ember: warning: ").text(warning).raw("\n");
        }
    }
    Sampler sampler(o.sampling);

    ChatSessionOptions session_options = session_options_for(o, scripted);
    session_options.kv_type = conv.options().kv_type;
    ChatSessions sessions(session_options, models.model(), conv, stderr);
    ui::LocalChatEngine engine(conv);
    // /model NAME swaps the engine's model and conversation, and the sessions' record of them.
    models.attach(engine, sessions);
    if (o.tools.enabled()) {
        // A model whose template has no tool-call format Ember knows: said before the chat.
        engine.set_tools(ui::tool_options(o.tools, /*first=*/true));
    }
    // The answering model's vocabulary, built by its conversation when a turn first needs it
    // (a JSONL line's schema); a model switched to has its own.
    constrained.token_trie = [&models] { return models.conversation().answer_trie(); };
    return run_front_end(engine, sampler, sessions, o, scripted, screen.get(), &models,
                         constrained);
}

// ember chat --remote URL: the same front ends; replies stream from an OpenAI-compatible
// server, the conversation is saved here as text.
int run_remote_chat(ChatOptions& o) {
    const bool scripted = chat_is_scripted(o);
    // The server holds the model, its template and its context.
    if (!o.model.empty()) throw std::runtime_error("-m and --remote exclude each other");
    if (!o.output_format.json_schema.empty() || !o.output_format.grammar_file.empty()) {
        throw CLI::ValidationError("--json-schema",
                                   "and --grammar need the local engine, not --remote");
    }
    if (o.tools.enabled()) {
        throw CLI::ValidationError("--tools",
                                   "and --builtin-tools need the local engine, not --remote");
    }
    if (!o.template_file.empty() || o.ctx > 0) {
        throw std::runtime_error(
            "--chat-template and --ctx do not apply to --remote: the server decides them");
    }
    serve::ApiClient client(o.remote, api_key_from_env(o.api_key_env));
    std::string model = o.remote_model;
    if (model.empty()) {
        // The server's first model (ember serve and llama.cpp's server have one).
        const std::vector<std::string> ids = client.model_ids();
        if (ids.empty()) {
            throw std::runtime_error(o.remote + " lists no models; name one with --remote-model");
        }
        model = ids.front();
    }
    if (!o.no_db) check_named_db(o.db, DbUse::write);  // before the screen, as above
    std::unique_ptr<ui::FullScreen> screen = open_screen(o, scripted, "", model);
    RemoteChatOptions remote_options;
    remote_options.model = model;
    remote_options.stops = o.stops;
    if (o.think != "auto") remote_options.thinking = o.think == "on";
    remote_options.reasoning_effort = o.reasoning_effort;
    RemoteChatEngine engine(client, remote_options);
    if (!o.system.empty()) engine.set_system(o.system);
    Sampler sampler(o.sampling);

    // What replay needs to ask the same server again: the settings a request carries.
    ConversationOptions recorded;
    recorded.stop_strings = o.stops;
    if (remote_options.thinking)
        recorded.template_vars["enable_thinking"] = *remote_options.thinking;
    recorded.context = 0;  // the server's
    SessionDefaults defaults;
    defaults.model = model;
    defaults.model_fingerprint = remote_fingerprint(client.endpoint(), model);
    defaults.sampling_json = chat_settings_json(o.sampling, recorded, o.n_predict);
    ChatSessions sessions(session_options_for(o, scripted), std::move(defaults), stderr);
    return run_front_end(engine, sampler, sessions, o, scripted, screen.get(), nullptr,
                         Constrained{});
}

int run_chat(ChatOptions& o) {
    o.sampling.validate();
    load_tools(o);
    // Read before the model loads, so a file that is not text fails at once; stdin is
    // attached only with -p (without it, scripted prompts come from stdin).
    if (chat_is_scripted(o)) {
        o.attachments = ui::command_line_attachments(o.files, !o.prompt.empty());
    }
    return o.remote.empty() ? run_local_chat(o) : run_remote_chat(o);
}

// --preset: its sampling over the config's (under the flags), its system prompt unless --system.
void apply_preset(ChatOptions& o, const CLI::App& cmd) {
    const ui::Preset& preset = ui::find_preset(o.presets, o.preset, config_path());
    apply_config_sampling(nlohmann::json{{"sampling", preset.sampling}}, cmd, o.sampling);
    o.seed_given = o.seed_given || preset.sampling.contains("seed");
    if (preset.system && cmd.count("--system") == 0) o.system = *preset.system;
}

// The settings flags given on the command line, as the /set commands that make them: they
// win over what a resumed conversation stored (--continue --temp 0.2).
std::vector<std::string> settings_given(const ChatOptions& o, const CLI::App& cmd) {
    std::vector<std::string> sets;
    const auto given = [&](const char* flag, const std::string& set) {
        if (cmd.count(flag) > 0) sets.push_back("/set " + set);
    };
    const auto number = [](double v) {
        char buffer[32];
        std::snprintf(buffer, sizeof buffer, "%.9g", v);
        return std::string(buffer);
    };
    given("--temp", "temp " + number(o.sampling.temperature));
    given("--top-k", "top-k " + std::to_string(o.sampling.top_k));
    given("--top-p", "top-p " + number(o.sampling.top_p));
    given("--min-p", "min-p " + number(o.sampling.min_p));
    given("--repeat-penalty", "repeat-penalty " + number(o.sampling.repeat_penalty));
    given("--seed", "seed " + std::to_string(o.sampling.seed));
    given("--n-predict", "n-predict " + std::to_string(o.n_predict));
    if (o.ignore_eos) sets.push_back("/set ignore-eos on");
    if (o.think != "auto") sets.push_back("/set think " + o.think);
    given("--reasoning-effort", "reasoning-effort " + o.reasoning_effort);
    given("--ctx", "ctx " + std::to_string(o.ctx));
    return sets;
}

void add_tool_options(CLI::App* cmd, ChatOptions& o) {
    cmd->add_option("--tools", o.tool_files,
                    "Offer the model the tools of this JSON file (repeatable): OpenAI-style "
                    "definitions, each with a \"command\" argv that gets the call's arguments as "
                    "JSON on stdin; every call asks you first (README: Tools)")
        ->type_name("FILE");
    std::string builtins;
    for (const std::string& name : ui::builtin_tool_names()) {
        builtins += (builtins.empty() ? "" : ", ") + name;
    }
    cmd->add_option(
           "--builtin-tools", o.builtin_tools,
           "Offer these built-in read-only tools (" + builtins + "), confined to --tool-root")
        ->delimiter(',')
        ->type_name("NAMES");
    cmd->add_option("--tool-root", o.tool_root,
                    "The directory the built-in tools may read (default: the current one)")
        ->type_name("DIR");
    cmd->add_option("--tool-choice", o.tool_choice,
                    "auto (the model decides), none, required (the first reply to each prompt "
                    "is a call) or a tool's name (that call)")
        ->capture_default_str();
    cmd->add_flag("--yes-tools", o.yes_tools,
                  "Run tool calls without asking (a script has no one to ask: without this "
                  "its calls are printed and not run)");
}

}  // namespace

void register_chat_command(CLI::App& app, std::vector<Command>& out) {
    auto o = std::make_shared<ChatOptions>();
    auto* cmd =
        app.add_subcommand("chat", "Chat with a model (scripted when stdin is not a terminal)");
    add_model_option(cmd, o->model);
    cmd->add_option("-p,--prompt", o->prompt, "Answer this one prompt and exit");
    cmd->add_option("-f,--file", o->files,
                    "Attach a text file before the prompt (repeatable; with -p, stdin that is "
                    "not a terminal is attached too)");
    cmd->add_option("--system", o->system, "System prompt");
    cmd->add_option("--chat-template", o->template_file,
                    "Jinja chat template file overriding the model's")
        ->check(CLI::ExistingFile);
    cmd->add_option("--stop", o->stops, "Stop generating at this text (repeatable)");
    cmd->add_option("-n,--n-predict", o->n_predict,
                    "Tokens per reply at most (-1: to the end of the turn or of the context)")
        ->capture_default_str()
        ->check(token_count());
    cmd->add_option("-c,--ctx", o->ctx,
                    "Context size in tokens (default: the model's, capped at 32768 tokens and "
                    "2 GiB of KV cache)")
        ->check(whole_number(1, std::numeric_limits<int64_t>::max(), "at least 1"));
    add_kv_type_option(cmd, o->kv_type);
    add_activations_option(cmd, o->activations);
    add_gpu_option(cmd, o->gpu);
    add_threads_option(cmd, o->threads, "Threads (default: the physical cores)");
    cmd->add_flag("--script", o->script, "Scripted mode: prompts from stdin, replies to stdout");
    cmd->add_flag("--jsonl", o->jsonl, "Scripted mode with JSON lines in and out");
    cmd->add_flag("--no-prefix-cache", o->no_prefix_cache, "Recompute every turn from scratch");
    cmd->add_flag("--special-tokens-in-content", o->special_tokens_in_content,
                  "Parse control-token text typed in a message (<|im_start|>, <end_of_turn>, ...) "
                  "as the control token; by default it is plain text");
    cmd->add_flag("--ignore-eos", o->ignore_eos, "Keep generating past end-of-turn tokens");
    cmd->add_flag("--plain", o->plain, "Line mode (readline) instead of the full-screen UI");
    cmd->add_flag("-v,--verbose", o->verbose,
                  "A line of numbers (tokens, speeds, reuse) after each reply (/set stats)");
    cmd->add_flag("--no-spec", o->no_spec,
                  "No n-gram speculative decoding (on by default; a gate turns it off where it "
                  "does not pay)");
    cmd->add_option("--draft-max", o->draft_max, "Drafted tokens per verification at most")
        ->capture_default_str()
        ->check(CLI::Range(1, 16));
    cmd->add_flag("--progress", o->progress,
                  "Scripted mode: report a long prompt's evaluation as it goes: with --jsonl, "
                  "{\"event\": \"progress\", ...} lines on stdout before the reply's line; "
                  "otherwise lines on stderr");
    cmd->add_flag("--show-thinking", o->show_thinking,
                  "Scripted mode: print a thinking model's reasoning too");
    cmd->add_option("--reasoning-effort", o->reasoning_effort,
                    "How hard a gpt-oss model reasons (its template's reasoning_effort)")
        ->check(CLI::IsMember({"low", "medium", "high"}));
    cmd->add_option("--max-thinking-tokens", o->max_thinking_tokens,
                    "Tokens a reply may spend thinking before it is asked to answer")
        ->capture_default_str()
        ->check(whole_number(0, std::numeric_limits<int64_t>::max(), "at least 0"));
    cmd->add_option("--think", o->think, "Thinking: on, off, or the template's default")
        ->capture_default_str()
        ->check(CLI::IsMember({"on", "off", "auto"}));
    cmd->add_option("--db", o->db,
                    "Session database (default: $XDG_DATA_HOME/ember/ember.db; scripted runs "
                    "use one only when --db, --resume or --continue is given)")
        ->check(file_path());
    cmd->add_flag("--no-db", o->no_db, "Save nothing: no conversations, no prefix state");
    auto* resume = cmd->add_option("--resume", o->resume, "Continue the saved conversation ID");
    cmd->add_flag("--continue", o->continue_last, "Continue the most recent conversation")
        ->excludes(resume);
    cmd->add_option("--state-cap", o->state_cap,
                    "Stored prefix state kept at most (least recently used goes first)")
        ->capture_default_str()
        ->check(positive_byte_size());
    cmd->add_option("--state-memory", o->state_memory,
                    "Recently used conversations' state kept in memory too, so switching "
                    "between them does not read the database (0: none)")
        ->capture_default_str()
        ->check(byte_size());
    auto* remote = cmd->add_option(
        "--remote", o->remote,
        "Chat with a model on an OpenAI-compatible server (ember serve, vLLM, llama.cpp's "
        "server, ollama), e.g. http://127.0.0.1:8080/v1");
    cmd->add_option("--api-key-env", o->api_key_env,
                    "With --remote: send the API key held in this environment variable")
        ->needs(remote);
    cmd->add_option("--remote-model", o->remote_model,
                    "With --remote: the model to ask for (default: the server's first)")
        ->needs(remote);
    add_sampling_options(cmd, o->sampling);
    add_output_format_options(cmd, o->output_format);
    add_tool_options(cmd, *o);
    cmd->add_option("--preset", o->preset,
                    "A named preset of the config file (\"presets\": {NAME: {\"system\": ..., "
                    "\"sampling\": {...}}}), under the flags")
        ->type_name("NAME");
    out.push_back(
        {cmd, [o, cmd] {
             // Default sampling settings from the config file, under the flags.
             const nlohmann::json config = load_config();
             apply_config_sampling(config, *cmd, o->sampling);
             o->seed_given = cmd->count("--seed") > 0 ||
                             (config.contains("sampling") && config["sampling"].contains("seed"));
             o->presets = ui::parse_presets(config, config_path());
             o->preset_base = {o->sampling,
                               o->seed_given ? std::optional(o->sampling.seed) : std::nullopt,
                               o->system};
             o->settings_given = settings_given(*o, *cmd);
             if (!o->preset.empty()) apply_preset(*o, *cmd);
             return run_chat(*o);
         }});
}

}  // namespace ember::app
