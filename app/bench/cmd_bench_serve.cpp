// ember bench-serve: throughput and time to first token of `ember serve` (started in this
// process on a loopback port, or any OpenAI-compatible server given with --url) for 1, 4 and
// 16 concurrent clients, each holding a multi-turn conversation, with the prefix hit rate
// the server reports (usage.prompt_tokens_details.cached_tokens). Prints one JSON object: per
// level the throughput (completion tokens over the level's wall time) and its ratio to the
// first level's, time to first token, and for the in-process server the decode steps the
// level took and how many slots a step served on average (decode_batcher.h).
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "app/cli/options.h"
#include "app/commands/commands.h"
#include "app/models/gpu_options.h"
#include "app/models/load_model.h"
#include "app/models/model_locator.h"
#include "app/remote/client.h"
#include "app/serve/decode_batcher.h"
#include "app/serve/server.h"
#include "engine/model/forward.h"
#include "engine/model/model.h"
#include "engine/util/fan_out.h"
#include "engine/util/thread_pool.h"

namespace ember::app {

namespace {

using json = nlohmann::json;

struct BenchServeOptions {
    std::string model;
    std::string url;  // empty: serve the model in this process
    std::string remote_model;
    std::vector<int> clients = {1, 4, 16};
    int parallel = 4;
    int turns = 3;
    int max_tokens = 16;
    int threads = 0;
    int64_t ctx = 4096;
    std::string kv_type = "f16";  // as serve
    std::string activations = "auto";
    GpuOptions gpu;
    int decode_batch = 0;     // the in-process server's --decode-batch (0: its default)
    bool ignore_eos = false;  // every reply max_tokens long
};

struct RequestSample {
    double ttft = -1;
    double engine_ttft = -1;  // ember serve's own: prompt evaluated and first token picked
    double latency = 0;
    double start = 0;  // seconds after the level started
    int64_t prompt_tokens = 0;
    int64_t cached_tokens = 0;
    int64_t completion_tokens = 0;
    std::string error;
};

double percentile(std::vector<double> v, double p) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const double at = p * static_cast<double>(v.size() - 1);
    const size_t lo = static_cast<size_t>(at);
    const size_t hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (v[hi] - v[lo]) * (at - static_cast<double>(lo));
}

json distribution_ms(const std::vector<double>& seconds) {
    std::vector<double> ms;
    for (double s : seconds) ms.push_back(s * 1000.0);
    return json{{"p50", percentile(ms, 0.5)},
                {"p90", percentile(ms, 0.9)},
                {"p99", percentile(ms, 0.99)},
                {"max", ms.empty() ? 0.0 : *std::max_element(ms.begin(), ms.end())}};
}

const char* const kSystem =
    "You are a helpful assistant running inside a benchmark. Answer briefly and stay on the "
    "topic the user gives you; every conversation here has its own topic and several turns.";
const char* const kTopics[] = {"rivers",  "bread",  "violins", "winter", "foxes",    "clocks",
                               "islands", "copper", "bees",    "glass",  "lanterns", "maps",
                               "salt",    "ravens", "bridges", "tea",    "comets",   "wool"};

// One client: `turns` requests of one conversation, each carrying the whole history.
std::vector<RequestSample> run_client(const std::string& url, const std::string& model, int run,
                                      int client, const BenchServeOptions& o,
                                      std::chrono::steady_clock::time_point level_start) {
    serve::ApiClient api(url, "");
    std::vector<RequestSample> samples;
    json messages = json::array({{{"role", "system"}, {"content", kSystem}}});
    const std::string topic = kTopics[static_cast<size_t>(client) % std::size(kTopics)];
    for (int turn = 0; turn < o.turns; ++turn) {
        messages.push_back(
            {{"role", "user"},
             {"content", "Run " + std::to_string(run) + ", client " + std::to_string(client) +
                             ", turn " + std::to_string(turn) + ": tell me about " + topic + "."}});
        json body = {{"model", model},
                     {"messages", messages},
                     {"max_tokens", o.max_tokens},
                     {"temperature", 0}};
        if (o.ignore_eos) body["ignore_eos"] = true;
        const double started =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - level_start).count();
        const serve::StreamResult r = api.stream("chat/completions", body, nullptr);
        RequestSample s;
        s.start = started;
        s.ttft = r.ttft_seconds;
        if (r.ember.is_object()) s.engine_ttft = r.ember.value("ttft_seconds", -1.0);
        s.latency = r.seconds;
        s.error = r.error;
        if (r.usage.is_object()) {
            s.prompt_tokens = r.usage.value("prompt_tokens", int64_t{0});
            s.completion_tokens = r.usage.value("completion_tokens", int64_t{0});
            if (r.usage.contains("prompt_tokens_details") &&
                r.usage["prompt_tokens_details"].is_object()) {
                s.cached_tokens =
                    r.usage["prompt_tokens_details"].value("cached_tokens", int64_t{0});
            }
        }
        samples.push_back(s);
        messages.push_back({{"role", "assistant"}, {"content", r.content}});
    }
    return samples;
}

json run_level(const std::string& url, const std::string& model, int run, int n_clients,
               const BenchServeOptions& o) {
    std::vector<std::vector<RequestSample>> per_client(static_cast<size_t>(n_clients));
    const auto start = std::chrono::steady_clock::now();
    fan_out(n_clients, [&](int c) {
        per_client[static_cast<size_t>(c)] = run_client(url, model, run, c, o, start);
    });
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::vector<double> ttft, latency;
    std::vector<double> engine_ttft;  // ember serve's account, where the server gave one
    // The decode window: from the first streamed token of any request to the last request's
    // end; the tokens after each request's first are the decode steps' work.
    double first_token = -1, last_end = 0;
    int64_t decoded = 0;
    int64_t prompt = 0, cached = 0, completion = 0, hits = 0, errors = 0, requests = 0;
    std::string first_error;
    for (const auto& samples : per_client) {
        for (const auto& s : samples) {
            ++requests;
            if (!s.error.empty()) {
                ++errors;
                if (first_error.empty()) first_error = s.error;
                continue;
            }
            if (s.ttft >= 0) {
                ttft.push_back(s.ttft);
                if (s.engine_ttft >= 0) engine_ttft.push_back(s.engine_ttft);
                const double at = s.start + s.ttft;
                first_token = first_token < 0 ? at : std::min(first_token, at);
                decoded += std::max<int64_t>(0, s.completion_tokens - 1);
            }
            last_end = std::max(last_end, s.start + s.latency);
            latency.push_back(s.latency);
            prompt += s.prompt_tokens;
            cached += s.cached_tokens;
            completion += s.completion_tokens;
            hits += s.cached_tokens > 0 ? 1 : 0;
        }
    }
    json j = {
        {"clients", n_clients},
        {"requests", requests},
        {"errors", errors},
        {"wall_seconds", wall},
        {"completion_tokens", completion},
        {"throughput_tokens_per_second", wall > 0 ? completion / wall : 0.0},
        {"decode_tokens_per_second",
         last_end > first_token && first_token >= 0 ? decoded / (last_end - first_token) : 0.0},
        {"requests_per_second", wall > 0 ? requests / wall : 0.0},
        {"ttft_ms", distribution_ms(ttft)},
        {"latency_ms", distribution_ms(latency)},
        {"prompt_tokens", prompt},
        {"cached_prompt_tokens", cached},
        {"prefix_hit_rate", prompt > 0 ? static_cast<double>(cached) / prompt : 0.0},
        {"requests_with_prefix_hit", requests > 0 ? static_cast<double>(hits) / requests : 0.0}};
    // ember serve's own TTFT (its prompt's evaluation and first pick, under the engine turn):
    // what the prompts, evaluated one at a time, take of the decode window.
    if (!engine_ttft.empty()) {
        double total = 0;
        for (const double t : engine_ttft) total += t;
        j["engine_ttft_ms"] = distribution_ms(engine_ttft);
        j["engine_ttft_total_ms"] = 1e3 * total;
    }
    if (!first_error.empty()) j["first_error"] = first_error;
    return j;
}

int run_bench_serve(const BenchServeOptions& o) {
    signal(SIGPIPE, SIG_IGN);
    std::unique_ptr<Model> model;
    std::unique_ptr<ThreadPool> pool;
    std::unique_ptr<serve::Server> server;
    std::thread server_thread;
    std::string url = o.url;
    std::string model_id = o.remote_model;
    json setup = {{"turns", o.turns}, {"max_tokens", o.max_tokens}};
    if (url.empty()) {
        const std::string path = model_path_for(o.model);
        model = load_model(path, o.activations, o.gpu.for_server(o.parallel));
        const int threads = o.threads > 0 ? o.threads : default_threads();
        pool = std::make_unique<ThreadPool>(threads);
        ConversationOptions copts;
        copts.context = std::min<int64_t>(o.ctx, model->config().n_ctx_train);
        copts.kv_type = kv_type_of(o.kv_type);
        serve::ServerOptions so;
        so.decode_batch = o.decode_batch;
        so.host = "127.0.0.1";
        so.port = 0;
        so.parallel = o.parallel;
        so.max_waiting = 1024;
        so.model_id = "bench";
        server = std::make_unique<serve::Server>(*model, *pool, copts, nullptr, so);
        url = "http://127.0.0.1:" + std::to_string(server->bind()) + "/v1";
        server_thread = std::thread([&] { server->run(); });
        model_id = "bench";
        setup["model"] = path;
        setup["parallel"] = o.parallel;
        setup["threads"] = threads;
        setup["context"] = copts.context;
        setup["kv_type"] = o.kv_type;
        setup["placement"] = model_placement(*model);
        setup["decode_batch"] = server->decode_batch();
        setup["scheduler"] =
            "continuous batching: the generating slots' next tokens go through the model "
            "together, up to decode_batch a step; prompts one at a time between steps";
    } else {
        setup["url"] = url;
        if (model_id.empty()) {
            serve::ApiClient api(url, "");
            const auto ids = api.model_ids();
            if (ids.empty()) throw std::runtime_error(url + " lists no models");
            model_id = ids.front();
        }
        setup["model"] = model_id;
    }
    setup["ignore_eos"] = o.ignore_eos;
    json runs = json::array();
    for (size_t i = 0; i < o.clients.size(); ++i) {
        std::fprintf(stderr, "bench-serve: %d concurrent clients...\n", o.clients[i]);
        const serve::DecodeBatchStats before =
            server ? server->decode_stats() : serve::DecodeBatchStats{};
        json level = run_level(url, model_id, static_cast<int>(i), o.clients[i], o);
        if (server) {
            const serve::DecodeBatchStats after = server->decode_stats();
            const int64_t steps = after.steps - before.steps;
            level["decode_steps"] = steps;
            level["mean_decode_batch"] =
                steps > 0 ? static_cast<double>(after.tokens - before.tokens) / steps : 0.0;
        }
        // Each rate against the first level's (one client, by default).
        for (const char* rate : {"throughput_tokens_per_second", "decode_tokens_per_second"}) {
            const double first = (runs.empty() ? level : runs[0])[rate].get<double>();
            const std::string name = std::string(rate).substr(0, std::string(rate).find('_'));
            level[name + "_vs_first_level"] = first > 0 ? level[rate].get<double>() / first : 0.0;
        }
        runs.push_back(level);
    }
    if (server) {
        server->stop();
        server_thread.join();
    }
    std::cout << json{{"bench", "serve"}, {"setup", setup}, {"runs", runs}}.dump(2) << "\n";
    return 0;
}

}  // namespace

void register_bench_serve_command(CLI::App& app, std::vector<Command>& out) {
    auto o = std::make_shared<BenchServeOptions>();
    auto* cmd = app.add_subcommand(
        "bench-serve",
        "Throughput and time to first token of ember serve under 1, 4 and 16 concurrent "
        "clients (JSON)");
    add_model_option(cmd, o->model);
    cmd->add_option("--url", o->url,
                    "Benchmark this OpenAI-compatible server instead of serving -m here");
    cmd->add_option("--remote-model", o->remote_model, "Model name for --url (default: its first)");
    cmd->add_option("--clients", o->clients, "Concurrent client counts to run")
        ->delimiter(',')
        ->capture_default_str();
    cmd->add_option("--parallel", o->parallel, "Slots of the in-process server")
        ->capture_default_str()
        ->check(CLI::Range(1, 256));
    cmd->add_option("--turns", o->turns, "Turns per client conversation")
        ->capture_default_str()
        ->check(CLI::Range(1, 100));
    cmd->add_option("--max-tokens", o->max_tokens, "Tokens per reply")
        ->capture_default_str()
        ->check(CLI::Range(1, 100000));
    cmd->add_option("-c,--ctx", o->ctx, "Context per slot")->capture_default_str();
    add_kv_type_option(cmd, o->kv_type);
    add_activations_option(cmd, o->activations);
    add_gpu_option(cmd, o->gpu);
    cmd->add_option("--decode-batch", o->decode_batch,
                    "The in-process server's --decode-batch (default: its own)")
        ->check(CLI::Range(1, static_cast<int>(kMaxDecodeBatch)));
    cmd->add_flag("--ignore-eos", o->ignore_eos,
                  "Ask every reply to run to --max-tokens (the server's ignore_eos)");
    add_threads_option(cmd, o->threads, "Engine threads (default: the physical cores)");
    out.push_back({cmd, [o] { return run_bench_serve(*o); }});
}

}  // namespace ember::app
