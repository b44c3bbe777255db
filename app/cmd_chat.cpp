// ember chat: a conversation with the model's chat template, warm across turns.
#include <unistd.h>

#include <fstream>
#include <iostream>
#include <sstream>

#include "app/commands.h"
#include "engine/generate/conversation.h"
#include "engine/model/model.h"
#include "engine/util/thread_pool.h"
#include "ui/scripted.h"

namespace ember::app {

namespace {

struct ChatOptions {
    std::string model;
    std::string prompt;
    std::string system;
    std::string template_file;
    std::vector<std::string> stops;
    SamplingParams sampling;
    int64_t n_predict = 512;
    int64_t ctx = 4096;
    int threads = 0;
    bool script = false;
    bool jsonl = false;
    bool no_prefix_cache = false;
    bool ignore_eos = false;
};

std::string read_text_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("cannot read chat template file '" + path + "'");
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// The plain interactive loop for terminals until the curses and readline front ends land.
int run_interactive(Conversation& conv, Sampler& sampler, const GenerateOptions& gen) {
    std::string line;
    for (;;) {
        std::fputs("\n> ", stdout);
        std::fflush(stdout);
        if (!std::getline(std::cin, line)) break;
        if (line == "/quit" || line == "/exit") break;
        if (line.empty()) continue;
        conv.add_message({"user", line});
        TurnResult r = conv.respond(sampler, gen, [](const std::string& text, TextKind) {
            std::fwrite(text.data(), 1, text.size(), stdout);
            std::fflush(stdout);
            return true;
        });
        std::fprintf(stderr, "\n[reused %lld, evaluated %lld, %lld generated, %s]\n",
                     static_cast<long long>(r.tokens_reused),
                     static_cast<long long>(r.tokens_evaluated),
                     static_cast<long long>(r.ids.size()),
                     std::string(finish_reason_name(r.finish)).c_str());
    }
    std::fputc('\n', stdout);
    return 0;
}

int run_chat(ChatOptions& o) {
    o.sampling.validate();
    auto model = Model::load(o.model);
    ThreadPool pool(o.threads > 0 ? o.threads : default_threads());
    ConversationOptions copts;
    copts.context = std::min<int64_t>(o.ctx, model->config().n_ctx_train);
    copts.prefix_cache = !o.no_prefix_cache;
    copts.stop_strings = o.stops;
    if (!o.template_file.empty()) copts.template_override = read_text_file(o.template_file);
    Conversation conv(*model, pool, copts);
    if (!o.system.empty()) conv.set_system(o.system);
    Sampler sampler(o.sampling);

    ui::ScriptedOptions so;
    so.jsonl_in = o.jsonl;
    so.jsonl_out = o.jsonl;
    so.generation.max_tokens = o.n_predict;
    so.generation.ignore_eos = o.ignore_eos;
    if (!o.prompt.empty()) {
        return ui::run_single_prompt(conv, sampler, o.prompt, stdout, stderr, so);
    }
    if (o.script || !isatty(STDIN_FILENO)) {
        return ui::run_scripted(conv, sampler, std::cin, stdout, stderr, so);
    }
    return run_interactive(conv, sampler, so.generation);
}

}  // namespace

void register_chat_command(CLI::App& app, std::vector<Command>& out) {
    auto o = std::make_shared<ChatOptions>();
    auto* cmd =
        app.add_subcommand("chat", "Chat with a model (scripted when stdin is not a terminal)");
    add_model_option(cmd, o->model);
    cmd->add_option("-p,--prompt", o->prompt, "Answer this one prompt and exit");
    cmd->add_option("--system", o->system, "System prompt");
    cmd->add_option("--chat-template", o->template_file,
                    "Jinja chat template file overriding the model's")
        ->check(CLI::ExistingFile);
    cmd->add_option("--stop", o->stops, "Stop generating at this text (repeatable)");
    cmd->add_option("-n,--n-predict", o->n_predict, "Tokens per reply at most")
        ->capture_default_str();
    cmd->add_option("-c,--ctx", o->ctx, "Context size in tokens")->capture_default_str();
    cmd->add_option("-t,--threads", o->threads, "Threads (default: all cores)");
    cmd->add_flag("--script", o->script, "Scripted mode: prompts from stdin, replies to stdout");
    cmd->add_flag("--jsonl", o->jsonl, "Scripted mode with JSON lines in and out");
    cmd->add_flag("--no-prefix-cache", o->no_prefix_cache, "Recompute every turn from scratch");
    cmd->add_flag("--ignore-eos", o->ignore_eos, "Keep generating past end-of-turn tokens");
    add_sampling_options(cmd, o->sampling);
    out.push_back({cmd, [o] { return run_chat(*o); }});
}

}  // namespace ember::app
