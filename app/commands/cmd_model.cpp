// run, eval, tokenize, detokenize, info.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "app/cli/cli_checks.h"
#include "app/cli/output_format.h"
#include "app/commands/commands.h"
#include "app/models/model_locator.h"
#include "engine/generate/constrained.h"
#include "engine/generate/conversation.h"
#include "engine/generate/default_template.h"
#include "engine/generate/generate.h"
#include "engine/generate/ngram.h"
#include "engine/model/forward.h"
#include "engine/model/gpu.h"
#include "engine/model/model.h"
#include "engine/model/state.h"
#include "engine/sampling/sampling_ranges.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/util/thread_pool.h"
#include "ui/chat/chat_engine.h"
#include "ui/io/attachments.h"
#include "ui/io/terminal_text.h"

namespace ember::app {

namespace {

using json = nlohmann::json;

struct RunOptions {
    std::string model;
    std::string prompt;
    // -f: attached before the prompt (ui/io/attachments.h).
    std::vector<std::string> files;
    std::string ids;
    bool ids_given = false;  // --ids was on the command line (even as an empty list)
    int64_t n_predict = 128;
    SamplingParams sampling;
    int threads = 0;
    bool json_out = false;
    bool ignore_eos = false;
    bool no_bos = false;
    int64_t ctx = 0;                   // 0: context_for() decides
    std::string kv_type = "f16";       // as chat
    std::string activations = "auto";  // --activations
    GpuOptions gpu;                    // --gpu
    bool no_spec = false;
    int draft_max = SpeculationOptions{}.draft_max;
    OutputFormatFlags output_format;  // --json-schema, --grammar
};

// Context size for one-shot commands: what the prompt and generation need (at least 4096),
// within the model's training context. Past it the positions are ones the model never saw.
int64_t context_for(const Model& model, int64_t prompt, int64_t n_predict, int64_t requested) {
    const int64_t trained = model.config().n_ctx_train;
    if (requested > 0) {
        if (requested > trained) {
            throw CLI::ValidationError("--ctx", std::to_string(requested) + " is more than the " +
                                                    std::to_string(trained) +
                                                    " tokens the model was trained for");
        }
        return requested;
    }
    const int64_t want = prompt + std::max<int64_t>(n_predict, 0) + 1;
    return std::min(trained, std::max<int64_t>(want, 4096));
}

int run_completion(const RunOptions& o) {
    // Checked before the model loads: a bad schema is a usage error, said at once.
    const auto grammar = grammar_from_flags(o.output_format);
    auto model = load_model(model_path_for(o.model), o.activations, o.gpu);
    const Tokenizer& tok = model->tokenizer();
    std::vector<int32_t> prompt;
    if (o.ids_given) {
        prompt = parse_id_list(o.ids);
        if (prompt.empty()) throw CLI::ValidationError("--ids", "no token ids given");
        const int64_t n_vocab = model->config().n_vocab;
        for (const int32_t id : prompt) {
            if (id >= n_vocab) {
                throw CLI::ValidationError("--ids",
                                           "token id " + std::to_string(id) +
                                               " is outside the model's vocabulary (ids 0 to " +
                                               std::to_string(n_vocab - 1) + ")");
            }
        }
    } else {
        EncodeOptions enc;
        enc.add_bos = tok.add_bos() && !o.no_bos && tok.bos_id() != kNoToken;
        prompt = tok.encode(o.prompt, enc);
    }
    if (prompt.empty()) throw std::runtime_error("the prompt is empty (no tokens)");
    o.sampling.validate();
    const int64_t ctx =
        context_for(*model, static_cast<int64_t>(prompt.size()), o.n_predict, o.ctx);
    if (static_cast<int64_t>(prompt.size()) >= ctx) {
        throw std::runtime_error("the prompt has " + std::to_string(prompt.size()) +
                                 " tokens, more than the context of " + std::to_string(ctx));
    }
    auto state = make_state(model->config(), ctx, kv_type_of(o.kv_type));
    ThreadPool pool(o.threads > 0 ? o.threads : default_threads());
    Sampler sampler(o.sampling);
    // The generated text continues the prompt: keep its leading space.
    DecodeOptions dec;
    dec.strip_leading_space = false;
    StreamingDetokenizer detok(tok, dec);
    // A terminal sees the prompt and the completion with control characters made visible
    // (a byte token can produce ESC); a pipe gets the exact bytes.
    ui::TextWriter out(stdout);
    ui::TerminalTextStream shown;
    const auto print = [&](const std::string& piece) {
        out.raw(out.terminal() ? shown.feed(piece) : piece);
    };
    if (!o.ids_given && !o.json_out) {
        // Echo the prompt as given, like a completion: the user sees what was continued.
        print(o.prompt);
        std::fflush(stdout);
    }
    GenerateOptions gen;
    gen.max_tokens = o.n_predict;
    gen.ignore_eos = o.ignore_eos;
    // N-gram self-speculation as chat has it: drafts from the prompt and the output so far
    // (a completion often copies its prompt: code, quotes), verified bit-exactly.
    NgramTable ngram;
    gen.speculation.enabled = !o.no_spec;
    gen.speculation.draft_max = o.draft_max;
    if (gen.speculation.enabled) {
        ngram.add(prompt);
        gen.ngram = &ngram;
    }
    std::optional<grammar::GrammarConstraint> constraint;
    if (grammar) {
        constraint.emplace(grammar, make_token_trie(tok));
        gen.constraint = &*constraint;
    }
    std::string text;
    auto result = generate(*model, *state, pool, sampler, prompt, gen, [&](int32_t id) {
        std::string piece = detok.push(id);
        text += piece;
        if (!o.json_out && !piece.empty()) {
            print(piece);
            std::fflush(stdout);
        }
        return true;
    });
    std::string rest = detok.flush();
    text += rest;
    if (o.json_out) {
        json j;
        j["prompt_ids"] = prompt;
        j["ids"] = result.ids;
        j["text"] = text;
        j["finish"] = std::string(finish_reason_name(result.finish));
        j["seed"] = o.sampling.seed;
        const SpeculationStats& spec = result.stats.speculation;
        j["decode_tps"] = result.stats.decode_seconds > 0 && result.stats.generated_tokens > 1
                              ? static_cast<double>(result.stats.generated_tokens - 1) /
                                    result.stats.decode_seconds
                              : 0.0;
        j["spec_drafted"] = spec.drafted;
        j["spec_accepted"] = spec.accepted;
        j["acceptance_rate"] = spec.acceptance_rate();
        // ASCII-escaped on a terminal: nothing in it acts there, and it parses to the same.
        out.raw(j.dump(-1, ' ', out.terminal(), json::error_handler_t::replace) + "\n");
    } else {
        print(rest);
        out.raw(shown.finish()).raw("\n");
    }
    const auto& s = result.stats;
    std::string spec_note;
    if (s.speculation.drafted > 0) {
        spec_note = " | speculation: " + std::to_string(s.speculation.accepted) + " of " +
                    std::to_string(s.speculation.drafted) + " drafts accepted";
    }
    std::fprintf(
        stderr, "\n[prompt %lld tokens, %.1f tok/s | generated %lld tokens, %.1f tok/s%s | %s]\n",
        static_cast<long long>(s.prompt_tokens),
        s.prefill_seconds > 0 ? s.prompt_tokens / s.prefill_seconds : 0.0,
        static_cast<long long>(s.generated_tokens),
        s.decode_seconds > 0 && s.generated_tokens > 1 ? (s.generated_tokens - 1) / s.decode_seconds
                                                       : 0.0,
        spec_note.c_str(), std::string(finish_reason_name(result.finish)).c_str());
    return 0;
}

struct EvalOptions {
    std::string model;
    std::string ids;
    int top_k = 5;
    int threads = 0;
    // f32: eval reports logits for fidelity checks, so by default it keeps the cache exact.
    std::string kv_type = "f32";
    std::string activations = "auto";  // --activations
    GpuOptions gpu;                    // --gpu
};

int run_eval(const EvalOptions& o) {
    auto model = load_model(model_path_for(o.model), o.activations, o.gpu);
    const std::vector<int32_t> ids = parse_id_list(o.ids);
    if (ids.empty()) throw std::runtime_error("--ids is empty");
    const int64_t n_vocab = model->config().n_vocab;
    const int k = std::clamp<int>(o.top_k, 1, static_cast<int>(n_vocab));
    auto state =
        make_state(model->config(), static_cast<int64_t>(ids.size()), kv_type_of(o.kv_type));
    ThreadPool pool(o.threads > 0 ? o.threads : default_threads());
    std::vector<int32_t> order(static_cast<size_t>(n_vocab));
    for (size_t b = 0; b < ids.size(); b += kMaxBatch) {
        const size_t len = std::min<size_t>(kMaxBatch, ids.size() - b);
        auto logits =
            forward(*model, *state, pool, std::span(ids).subspan(b, len), LogitsWanted::All);
        for (size_t t = 0; t < len; ++t) {
            const float* row = logits.data() + t * n_vocab;
            double max = row[0];
            for (int64_t i = 1; i < n_vocab; ++i) max = std::max<double>(max, row[i]);
            double sum = 0;
            for (int64_t i = 0; i < n_vocab; ++i) sum += std::exp(row[i] - max);
            for (int64_t i = 0; i < n_vocab; ++i)
                order[static_cast<size_t>(i)] = static_cast<int32_t>(i);
            std::partial_sort(order.begin(), order.begin() + k, order.end(),
                              [&](int32_t a, int32_t c) {
                                  return row[a] > row[c] || (row[a] == row[c] && a < c);
                              });
            json top = json::array();
            for (int i = 0; i < k; ++i)
                top.push_back({order[static_cast<size_t>(i)], row[order[static_cast<size_t>(i)]]});
            json line = {{"pos", b + t}, {"top", top}, {"logsumexp", max + std::log(sum)}};
            std::cout << line.dump() << "\n";
        }
    }
    return 0;
}

// Tensor count and bytes by type, then the total.
void print_tensor_types(const GgufFile& f) {
    std::map<std::string, std::pair<int, uint64_t>> by_type;
    uint64_t total = 0;
    for (const auto& t : f.tensors()) {
        auto& e = by_type[std::string(type_info(t.type).name)];
        e.first += 1;
        e.second += t.n_bytes;
        total += t.n_bytes;
    }
    std::printf("tensors:       %zu, %.1f MiB\n", f.tensors().size(), total / 1048576.0);
    for (const auto& [name, e] : by_type) {
        std::printf("  %-8s %4d tensors, %9.2f MiB\n", name.c_str(), e.first, e.second / 1048576.0);
    }
}

// A file without tensors (a vocabulary-only GGUF, as tokenizer tests use): what it holds,
// read from the metadata alone.
int run_info_vocabulary_only(const std::string& path, const GgufFile& f) {
    const Tokenizer tok(f);
    const ui::TextWriter out(stdout);  // metadata strings are the file's: shown, not obeyed
    std::printf("file:          %s (%.1f MiB, GGUF v%u)\n", out.shown(path).c_str(),
                f.file_size() / 1048576.0, f.version());
    if (auto name = f.get_string("general.name")) {
        std::printf("name:          %s\n", out.shown(*name).c_str());
    }
    if (auto arch = f.get_string("general.architecture")) {
        std::printf("architecture:  %s\n", out.shown(*arch).c_str());
    }
    std::printf("vocab:         %zu (%s tokenizer, pre '%s')\n", tok.vocab_size(),
                out.shown(tok.model_name()).c_str(), out.shown(tok.pre_name()).c_str());
    std::printf(
        "weights:       none (vocabulary-only file: tokenize and detokenize work, "
        "run and chat need a model)\n");
    std::printf("chat template: %s\n",
                f.find("tokenizer.chat_template") ? "from the file" : "none");
    return 0;
}

int run_info(const std::string& requested, const GpuOptions& gpu) {
    const std::string path = model_path_for(requested);
    // The header alone first: a file without weights is described, not refused.
    if (const auto header = GgufFile::open_metadata(path); header->tensors().empty()) {
        return run_info_vocabulary_only(path, *header);
    }
    auto model = load_model(path, "auto", gpu);
    const ModelConfig& c = model->config();
    const GgufFile& f = model->gguf();
    const ui::TextWriter out(stdout);  // metadata strings are the file's: shown, not obeyed
    std::printf("file:          %s (%.1f MiB, GGUF v%u)\n", out.shown(path).c_str(),
                f.file_size() / 1048576.0, f.version());
    if (auto name = f.get_string("general.name")) {
        std::printf("name:          %s\n", out.shown(*name).c_str());
    }
    std::printf("family:        %s\n", std::string(family_name(c.family)).c_str());
    std::printf("vocab:         %lld (%s tokenizer, pre '%s')\n", static_cast<long long>(c.n_vocab),
                out.shown(model->tokenizer().model_name()).c_str(),
                out.shown(model->tokenizer().pre_name()).c_str());
    std::printf("embedding:     %lld\nlayers:        %lld\n", static_cast<long long>(c.n_embd),
                static_cast<long long>(c.n_layer));
    std::printf("heads:         %lld (kv %lld, head dim %lld)\n", static_cast<long long>(c.n_head),
                static_cast<long long>(c.n_head_kv), static_cast<long long>(c.head_dim));
    std::printf("ffn:           %lld\ncontext:       %lld\n", static_cast<long long>(c.n_ff),
                static_cast<long long>(c.n_ctx_train));
    if (c.n_expert > 0) {
        std::printf("experts:       %lld, %lld per token, expert ffn %lld, weights %s\n",
                    static_cast<long long>(c.n_expert), static_cast<long long>(c.n_expert_used),
                    static_cast<long long>(c.n_ff_exp),
                    c.expert_weights_norm ? "renormalised" : "as routed");
    }
    std::printf("rope:          base %g, %lld dims, %s pairs\n", c.rope_base,
                static_cast<long long>(c.rope_dims),
                c.rope_layout == RopeLayout::Halves ? "half-split" : "adjacent");
    if (c.rope_yarn_factor > 0) {
        std::printf("rope scaling:  yarn x%g over %lld positions (beta %g/%g, attention x%g)\n",
                    c.rope_yarn_factor, static_cast<long long>(c.rope_yarn_orig_ctx),
                    c.rope_yarn_beta_fast, c.rope_yarn_beta_slow, c.rope_attn_factor);
    }
    if (c.sliding_window > 0) {
        const auto n_sliding = std::count(c.sliding.begin(), c.sliding.end(), true);
        std::printf("window:        %lld positions on %lld of %lld layers\n",
                    static_cast<long long>(c.sliding_window), static_cast<long long>(n_sliding),
                    static_cast<long long>(c.n_layer));
    }
    std::printf("rms eps:       %g\noutput:        %s\n", c.rms_eps,
                c.tied_output ? "tied to token embedding" : "separate");
    print_tensor_types(f);
    std::printf("activations:   %s\n", activations_name(model->activations()));
    std::printf("chat template: %s\n",
                out.shown(choose_chat_template(f, model->tokenizer()).description).c_str());
    std::printf("fingerprint:   %s\n", model->fingerprint().c_str());
    std::printf("runs on:       %s\n", model_placement(*model).c_str());
    return 0;
}

}  // namespace

void register_model_commands(CLI::App& app, std::vector<Command>& out) {
    auto run_opts = std::make_shared<RunOptions>();
    auto* run = app.add_subcommand("run", "Raw completion of a prompt (no chat template)");
    add_model_option(run, run_opts->model);
    auto* prompt_opt = run->add_option("-p,--prompt", run_opts->prompt, "Prompt text");
    auto* ids_opt = run->add_option("--ids", run_opts->ids, "Prompt as token ids: 1,2,3");
    prompt_opt->excludes(ids_opt);
    auto* file_opt = run->add_option("-f,--file", run_opts->files,
                                     "Attach a text file before the prompt (repeatable; with "
                                     "-p, stdin that is not a terminal is attached too)");
    file_opt->excludes(ids_opt);
    run->add_option("-n,--n-predict", run_opts->n_predict,
                    "Tokens to generate (-1: until the context is full)")
        ->capture_default_str()
        ->check(token_count());
    add_sampling_options(run, run_opts->sampling);
    add_threads_option(run, run_opts->threads, "Threads (default: the physical cores)");
    run->add_option("-c,--ctx", run_opts->ctx,
                    "Context size (default: prompt + n, at least 4096, at most the model's)")
        ->check(whole_number(1, std::numeric_limits<int64_t>::max(), "at least 1"));
    add_kv_type_option(run, run_opts->kv_type);
    add_activations_option(run, run_opts->activations);
    add_gpu_option(run, run_opts->gpu);
    run->add_flag("--json", run_opts->json_out, "Print one JSON object at the end");
    run->add_flag("--ignore-eos", run_opts->ignore_eos, "Keep generating past end-of-text");
    run->add_flag("--no-bos", run_opts->no_bos, "Do not add the BOS token the model asks for");
    run->add_flag("--no-spec", run_opts->no_spec,
                  "No n-gram speculative decoding (on by default, as in chat; a gate turns it "
                  "off where it does not pay)");
    run->add_option("--draft-max", run_opts->draft_max, "Drafted tokens per verification at most")
        ->capture_default_str()
        ->check(CLI::Range(1, 16));
    add_output_format_options(run, run_opts->output_format);
    out.push_back(
        {run, [run_opts, run, prompt_opt, ids_opt, file_opt] {
             if (prompt_opt->count() == 0 && ids_opt->count() == 0 && file_opt->count() == 0) {
                 throw CLI::ValidationError("give a prompt with -p TEXT or --ids 1,2,3");
             }
             if (ids_opt->count() == 0) {
                 // Files, then stdin with -p, then the prompt (ui/io/attachments.h).
                 run_opts->prompt = ui::join_attachments(
                     ui::command_line_attachments(run_opts->files, prompt_opt->count() > 0),
                     run_opts->prompt);
             }
             run_opts->ids_given = ids_opt->count() > 0;
             // Sampled output differs from run to run unless --seed is given.
             if (run->count("--seed") == 0) {
                 run_opts->sampling.seed = ui::ReplySeeds().take();
             }
             return run_completion(*run_opts);
         }});

    auto eval_opts = std::make_shared<EvalOptions>();
    auto* eval =
        app.add_subcommand("eval", "Top logits at every position of a token sequence (JSON lines)");
    add_model_option(eval, eval_opts->model);
    eval->add_option("--ids", eval_opts->ids, "Token ids: 1,2,3")->required();
    eval->add_option("--top-k", eval_opts->top_k, "Logits per position")->capture_default_str();
    add_threads_option(eval, eval_opts->threads, "Threads (default: the physical cores)");
    add_kv_type_option(eval, eval_opts->kv_type);
    add_activations_option(eval, eval_opts->activations);
    add_gpu_option(eval, eval_opts->gpu);
    out.push_back({eval, [eval_opts] { return run_eval(*eval_opts); }});

    struct TokOpts {
        std::string model, text;
        bool bos = false, special = false;
    };
    auto tok_opts = std::make_shared<TokOpts>();
    auto* tokc = app.add_subcommand("tokenize", "Print the token ids of TEXT as a JSON array");
    add_model_option(tokc, tok_opts->model);
    tokc->add_option("text", tok_opts->text, "Text to tokenize")->required();
    tokc->add_flag("--bos", tok_opts->bos, "Add the BOS token as the model's metadata says");
    tokc->add_flag("--special", tok_opts->special, "Parse special-token text such as <|im_start|>");
    out.push_back({tokc, [tok_opts] {
                       // The vocabulary alone: no weights are mapped, and files without
                       // any (vocabulary-only GGUFs) work.
                       const Tokenizer tok = load_tokenizer(model_path_for(tok_opts->model));
                       EncodeOptions enc;
                       enc.add_bos = tok_opts->bos && tok.add_bos() && tok.bos_id() != kNoToken;
                       enc.parse_special = tok_opts->special;
                       std::cout << json(tok.encode(tok_opts->text, enc)).dump() << "\n";
                       return 0;
                   }});

    auto detok_opts = std::make_shared<TokOpts>();
    auto* detokc = app.add_subcommand("detokenize", "Print the text of token ids 1,2,3");
    add_model_option(detokc, detok_opts->model);
    detokc->add_option("ids", detok_opts->text, "Token ids: 1,2,3")->required();
    out.push_back({detokc, [detok_opts] {
                       const Tokenizer tok = load_tokenizer(model_path_for(detok_opts->model));
                       const std::string text = tok.decode(parse_id_list(detok_opts->text));
                       ui::TextWriter(stdout).text(text).raw("\n");
                       return 0;
                   }});

    auto info_path = std::make_shared<std::string>();
    auto info_gpu = std::make_shared<GpuOptions>();
    auto* info = app.add_subcommand(
        "info", "Family, hyper-parameters, tensor types, fingerprint, where it runs");
    add_model_option(info, *info_path);
    add_gpu_option(info, *info_gpu);
    out.push_back({info, [info_path, info_gpu] { return run_info(*info_path, *info_gpu); }});
}

}  // namespace ember::app
