// run, eval, tokenize, detokenize, info.
#include <sched.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>

#include "app/cli_checks.h"
#include "app/commands.h"
#include "app/model_locator.h"
#include "app/output_format.h"
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
#include "ui/attachments.h"
#include "ui/chat_engine.h"
#include "ui/terminal_text.h"

namespace ember::app {

namespace {

using json = nlohmann::json;

struct RunOptions {
    std::string model;
    std::string prompt;
    // -f: attached before the prompt (ui/attachments.h).
    std::vector<std::string> files;
    std::string ids;
    bool ids_given = false;  // --ids was on the command line (even as an empty list)
    int64_t n_predict = 128;
    SamplingParams sampling;
    int threads = 0;
    bool json_out = false;
    bool ignore_eos = false;
    bool no_bos = false;
    int64_t ctx = 0;              // 0: context_for() decides
    std::string kv_type = "f16";  // as chat
    std::string activations = "auto";  // --activations
    std::string gpu = "auto";          // --gpu
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
    std::string gpu = "auto";          // --gpu
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

int run_info(const std::string& requested, const std::string& gpu) {
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

std::unique_ptr<Model> load_model(const std::string& path, const std::string& activations,
                                  const std::string& gpu, const std::function<bool()>& stop) {
    LoadOptions options;
    options.stop = stop;
    const std::optional<ActivationChoice> choice = parse_activation_choice(activations);
    if (!choice) throw CLI::ValidationError("--activations", activations + " not in {auto,exact,quantized}");
    options.activations = *choice;
    const std::optional<GpuRequest> request = parse_gpu_request(gpu);
    if (!request) throw CLI::ValidationError("--gpu", gpu + " is not auto, off or a GPU number");
    // EMBER_WEIGHT_PANELS=0 keeps the file's row layout (for measuring the two side by side);
    // a model that may go to a GPU keeps it too (the GPU reads rows).
    const char* panels = std::getenv("EMBER_WEIGHT_PANELS");
    options.weight_panels = (panels == nullptr || std::string_view(panels) != "0") &&
                            !gpu_may_run(*request);
    auto model = Model::load(path, options);
    for (const std::string& w : model->load_warnings()) {
        // Warnings quote the file's metadata.
        ui::TextWriter(stderr).raw("ember: warning: ").text(w).raw("\n");
    }
    // The KV cache of the default context at f16 counts against the card's free memory.
    const ModelConfig& c = model->config();
    const auto kv_bytes = static_cast<uint64_t>(default_context_size(c, KvType::F16)) *
                          static_cast<uint64_t>(c.n_layer * c.n_head_kv * (c.head_dim + c.value_dim)) *
                          2;
    if (stop && stop()) throw LoadStopped(path);  // before the upload to a GPU
    const GpuPlacement placed = place_model(*model, *request, kv_bytes);
    if (!placed.note.empty()) ui::TextWriter(stderr).raw("ember: note: ").text(placed.note).raw("\n");
    return model;
}

std::string model_placement(const Model& model) {
    return model.device() ? model.device()->description() : "CPU";
}

void add_gpu_option(CLI::App* cmd, std::string& gpu) {
    cmd->add_option("--gpu", gpu,
                    "Where the model runs: auto (a GPU when there is one and the model fits "
                    "there), off (the CPU), or a GPU number")
        ->capture_default_str();
}

void add_model_option(CLI::App* cmd, std::string& model) {
    // Not required: without it the model is found as app/model_locator.h describes.
    cmd->add_option("-m,--model", model,
                    "GGUF model file, a found model's name, or OWNER/REPO:QUANT from a hub "
                    "(`ember pull`) (default: EMBER_MODEL, the config file, then `ember models`)");
}

namespace {

// A sampling flag's value in the range the server and /set also hold it to
// (engine/sampling/sampling_ranges.h), refused with the same words: "--temp: must be a
// number between 0 and 2, not '5'".
CLI::Validator sampling_value(std::string_view field) {
    const SamplingRange range = *sampling_range(field);
    return CLI::Validator(
        [range](std::string& text) -> std::string {
            char* end = nullptr;
            const double value = std::strtod(text.c_str(), &end);
            const bool whole = !text.empty() && end == text.c_str() + text.size();
            if (!whole || !in_sampling_range(range, value)) {
                return sampling_rule(range) + ", not '" + text + "'";
            }
            return {};
        },
        "", "sampling_value");
}

}  // namespace

void add_sampling_options(CLI::App* cmd, SamplingParams& sampling) {
    cmd->add_option("--temp", sampling.temperature, "Temperature (0 = greedy)")
        ->capture_default_str()
        ->check(sampling_value("temperature"));
    cmd->add_option("--top-k", sampling.top_k, "Top-k cut (0 = off)")
        ->capture_default_str()
        ->check(sampling_value("top_k"));
    cmd->add_option("--top-p", sampling.top_p, "Top-p (nucleus) cut (1 = off)")
        ->capture_default_str()
        ->check(sampling_value("top_p"));
    cmd->add_option("--min-p", sampling.min_p, "Min-p cut (0 = off)")
        ->capture_default_str()
        ->check(sampling_value("min_p"));
    cmd->add_option("--repeat-penalty", sampling.repeat_penalty, "Repetition penalty (1 = off)")
        ->capture_default_str()
        ->check(sampling_value("repeat_penalty"));
    cmd->add_option("--presence-penalty", sampling.presence_penalty, "Presence penalty")
        ->capture_default_str()
        ->check(sampling_value("presence_penalty"));
    cmd->add_option("--frequency-penalty", sampling.frequency_penalty, "Frequency penalty")
        ->capture_default_str()
        ->check(sampling_value("frequency_penalty"));
    cmd->add_option("--repeat-last-n", sampling.penalty_last_n, "Tokens the penalties look at")
        ->capture_default_str()
        ->check(whole_number(
            0, SamplingParams::kMaxPenaltyLastN,
            "from 0 to " + std::to_string(SamplingParams::kMaxPenaltyLastN) + " (0 = off)"));
    cmd->add_option("--seed", sampling.seed,
                    "Random seed (default: a fresh one each run, in chat each reply; serve: "
                    "each request without a seed)")
        ->check(seed_number());
}

void add_threads_option(CLI::App* cmd, int& threads, const std::string& help) {
    cmd->add_option("-t,--threads", threads, help)->check(thread_count());
}

void add_kv_type_option(CLI::App* cmd, std::string& kv_type) {
    cmd->add_option("--kv-type", kv_type,
                    "KV cache precision: f32, f16 (half the memory) or q8_0 (8-bit blocks, "
                    "about a quarter)")
        ->capture_default_str()
        ->check(CLI::IsMember({"f32", "f16", "q8_0"}));
}

void add_activations_option(CLI::App* cmd, std::string& activations) {
    cmd->add_option("--activations", activations,
                    "How quantized weights meet activations: exact (f32, the float reference's "
                    "numbers), wide (16-bit blocks, within ~1e-2 logits of exact), quantized "
                    "(8-bit blocks: fastest, up to ~2 logits off on trained models) or auto "
                    "(wide where the CPU has AVX-512 VNNI, else exact)")
        ->capture_default_str()
        ->check(CLI::IsMember({"auto", "exact", "wide", "quantized"}));
}

KvType kv_type_of(const std::string& kv_type) {
    const std::optional<KvType> t = parse_kv_type(kv_type);
    if (!t) throw CLI::ValidationError("--kv-type", kv_type + " not in {f32,f16,q8_0}");
    return *t;
}

int default_threads() {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0) {
        return std::max(1u, std::thread::hardware_concurrency());
    }
    // Physical cores: decode streams weights and prefill fills the vector units, so a second
    // hardware thread of a core adds contention, not speed. CPUs that share a core list the
    // same siblings in sysfs; where sysfs says nothing, every allowed CPU counts.
    std::set<std::string> cores;
    int unknown = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
        if (!CPU_ISSET(cpu, &set)) continue;
        std::ifstream in("/sys/devices/system/cpu/cpu" + std::to_string(cpu) +
                         "/topology/thread_siblings_list");
        std::string siblings;
        if (std::getline(in, siblings) && !siblings.empty()) {
            cores.insert(siblings);
        } else {
            ++unknown;
        }
    }
    return std::max(1, static_cast<int>(cores.size()) + unknown);
}

std::vector<int32_t> parse_id_list(const std::string& text, const std::string& what) {
    std::vector<int32_t> ids;
    size_t i = 0;
    while (i < text.size()) {
        size_t end = text.find(',', i);
        if (end == std::string::npos) end = text.size();
        std::string item = text.substr(i, end - i);
        item.erase(0, item.find_first_not_of(" \t\n"));
        item.erase(item.find_last_not_of(" \t\n") + 1);
        if (item.empty()) {
            if (end == text.size() && !ids.empty()) break;
            throw CLI::ValidationError(what, "empty item at character " + std::to_string(i));
        }
        size_t used = 0;
        long long v = 0;
        try {
            v = std::stoll(item, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        if (used != item.size() || v < 0 || v > INT32_MAX) {
            throw CLI::ValidationError(what, "'" + item + "' is not a token id");
        }
        ids.push_back(static_cast<int32_t>(v));
        i = end + 1;
    }
    return ids;
}

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
    out.push_back({run, [run_opts, run, prompt_opt, ids_opt, file_opt] {
                       if (prompt_opt->count() == 0 && ids_opt->count() == 0 &&
                           file_opt->count() == 0) {
                           throw CLI::ValidationError("give a prompt with -p TEXT or --ids 1,2,3");
                       }
                       if (ids_opt->count() == 0) {
                           // Files, then stdin with -p, then the prompt (ui/attachments.h).
                           run_opts->prompt = ui::join_attachments(
                               ui::command_line_attachments(run_opts->files,
                                                            prompt_opt->count() > 0),
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
    auto info_gpu = std::make_shared<std::string>("auto");
    auto* info = app.add_subcommand(
        "info", "Family, hyper-parameters, tensor types, fingerprint, where it runs");
    add_model_option(info, *info_path);
    add_gpu_option(info, *info_gpu);
    out.push_back({info, [info_path, info_gpu] { return run_info(*info_path, *info_gpu); }});
}

}  // namespace ember::app
