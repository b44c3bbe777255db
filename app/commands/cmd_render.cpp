// ember render: prints a chat template's rendering of a conversation, for people debugging
// templates.
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "app/commands/commands.h"
#include "app/serve/api.h"
#include "engine/generate/default_template.h"
#include "engine/generate/tool_calls.h"
#include "engine/gguf/gguf.h"
#include "engine/template/template.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/util/bounded_json.h"
#include "ui/io/terminal_text.h"

namespace ember::app {

namespace {

using ojson = nlohmann::ordered_json;

struct RenderOptions {
    std::string model;
    std::string template_file;
    std::string messages_file;
    bool no_generation_prompt = false;
    bool as_request = false;  // the messages file is an OpenAI chat request
    std::string date;         // YYYY-MM-DD for strftime_now (empty: today)
    std::string bos, eos;
    std::vector<std::string> vars;
};

std::string slurp(const std::string& path, const std::string& what) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("cannot read " + what + " '" + path + "'");
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// Parses JSON given on the command line or in a file, refusing arrays and objects nested
// deeper than the template engine accepts while parsing, so that the deep document is never
// built: copying or converting one recurses once per level and a 100,000-deep one overflows
// the stack. `what` names the file or flag in the one-line error.
ojson parse_json_input(const std::string& text, const std::string& what) {
    ojson j = parse_json_bounded(text, {}, what);
    if (j.is_discarded()) throw std::runtime_error(what + ": not valid JSON");
    return j;
}

int run_render(const RenderOptions& o, bool bos_given, bool eos_given) {
    std::string source;
    std::string bos = o.bos, eos = o.eos;
    if (!o.template_file.empty()) {
        source = slurp(o.template_file, "chat template");
    } else {
        auto file = GgufFile::open(o.model);
        const Tokenizer tok(*file);
        ChatTemplateChoice choice = choose_chat_template(*file, tok);
        source = std::move(choice.source);
        if (!choice.from_file) {
            ui::TextWriter(stderr)
                .raw("ember: ")
                .text(o.model)
                .raw(" has no chat template (")
                .text(choice.description)
                .raw(")\n");
        }
        if (!bos_given && tok.bos_id() != kNoToken) bos = tok.token_to_piece(tok.bos_id(), true);
        if (!eos_given && tok.eos_id() != kNoToken) eos = tok.token_to_piece(tok.eos_id(), true);
    }
    const std::string text = slurp(o.messages_file, "messages file");
    ChatTemplateInputs in;
    ojson messages;
    if (o.as_request) {
        // As `ember serve` renders a request: messages and tools read by its parser, shaped for
        // the template by the engine (tool_calls.h).
        serve::ChatRequest request;
        try {
            request = serve::parse_chat_request(text, serve::RequestLimits{});
        } catch (const serve::ApiError& e) {
            throw std::runtime_error(o.messages_file + ": " + e.what());
        }
        const bool harmony = source.find("<|channel|>") != std::string::npos;
        TemplateMessages shaped = template_messages(
            request.messages, detect_tool_call_format(source, harmony), &request.tools);
        messages = std::move(shaped.messages);
        in.tools = std::move(shaped.tools);
    } else {
        messages = parse_json_input(text, o.messages_file);
    }
    if (!o.as_request && messages.is_object() && messages.contains("messages")) {
        if (messages.contains("tools")) in.tools = messages["tools"];
        messages = messages["messages"];
    }
    if (!messages.is_array()) {
        throw std::runtime_error(o.messages_file +
                                 ": expected an array of {\"role\", \"content\"} objects");
    }
    in.messages = messages;
    in.add_generation_prompt = !o.no_generation_prompt;
    if (!o.date.empty()) {
        TemplateTime t;
        char dash1 = 0, dash2 = 0;
        std::istringstream date(o.date);
        if (!(date >> t.year >> dash1 >> t.month >> dash2 >> t.day) || dash1 != '-' ||
            dash2 != '-' || t.month < 1 || t.month > 12 || t.day < 1 || t.day > 31) {
            throw std::runtime_error("--date '" + o.date + "': expected YYYY-MM-DD");
        }
        t.hour = 12;  // noon, as the fixtures' references fix it
        in.now = t;
    }
    in.bos_token = bos;
    in.eos_token = eos;
    for (const auto& v : o.vars) {
        const size_t eq = v.find('=');
        if (eq == std::string::npos || eq == 0) {
            throw std::runtime_error("--var '" + v + "': expected NAME=JSON");
        }
        // Named by NAME alone: the value may be a 100 KB one-line document.
        const ojson value = parse_json_input(v.substr(eq + 1), "--var " + v.substr(0, eq));
        in.extra[v.substr(0, eq)] = value;
    }
    const ChatTemplate tmpl(source);
    // The rendering quotes the messages file: exact to a pipe, made visible on a terminal.
    ui::TextWriter(stdout).text(tmpl.render(in));
    std::fflush(stdout);
    return 0;
}

}  // namespace

void register_render_command(CLI::App& app, std::vector<Command>& out) {
    auto o = std::make_shared<RenderOptions>();
    auto* cmd =
        app.add_subcommand("render", "Print the chat template's rendering of a conversation");
    auto* m = cmd->add_option("-m,--model", o->model, "GGUF model whose template to use")
                  ->check(CLI::ExistingFile);
    auto* t = cmd->add_option("--chat-template", o->template_file, "Jinja template file")
                  ->check(CLI::ExistingFile);
    m->excludes(t);
    cmd->add_option("--messages", o->messages_file, "JSON file: [{\"role\",\"content\"}, ...]")
        ->required()
        ->check(CLI::ExistingFile);
    cmd->add_flag("--request", o->as_request,
                  "The messages file is an OpenAI chat request ({\"messages\", \"tools\", "
                  "\"tool_choice\"}): rendered as ember serve renders it");
    cmd->add_flag("--no-generation-prompt", o->no_generation_prompt,
                  "Do not open an assistant turn at the end");
    auto* bos = cmd->add_option("--bos", o->bos, "bos_token text (default: the model's)");
    auto* eos = cmd->add_option("--eos", o->eos, "eos_token text (default: the model's)");
    cmd->add_option("--date", o->date,
                    "The date strftime_now() gives, YYYY-MM-DD (default: today)");
    cmd->add_option("--var", o->vars, "Template variable NAME=JSON (repeatable)");
    out.push_back({cmd, [o, m, t, bos, eos] {
                       if (m->count() == 0 && t->count() == 0) {
                           throw std::runtime_error("give -m MODEL or --chat-template FILE");
                       }
                       return run_render(*o, bos->count() > 0, eos->count() > 0);
                   }});
}

}  // namespace ember::app
