// ember serve: the OpenAI-compatible API over one model (app/serve/), with the session
// database's prefix-state store behind its slots.
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <thread>

#include "app/cli/cli_checks.h"
#include "app/commands/commands.h"
#include "app/models/model_locator.h"
#include "app/serve/server.h"
#include "app/store/session_adapter.h"
#include "engine/model/forward.h"
#include "engine/model/model.h"
#include "engine/util/thread_pool.h"
#include "sessions/state_tier.h"
#include "sessions/tiered_state_store.h"
#include "ui/io/terminal_text.h"

namespace ember::app {

namespace {

struct ServeOptions {
    std::string model;
    std::string host = "127.0.0.1";
    int port = 8080;
    std::string api_key_env;
    int parallel = 4;
    int64_t ctx = 0;
    std::string kv_type = "f16";       // as chat
    std::string activations = "auto";  // --activations
    GpuOptions gpu;                    // --gpu
    int threads = 0;
    std::string db;
    bool no_db = false;
    bool special_tokens_in_content = false;  // --special-tokens-in-content
    std::string state_cap = kDefaultStateCap;
    std::string state_memory = kDefaultStateMemory;
    std::string max_body = "4MiB";
    int max_waiting = 64;
    int max_connections = 512;
    int read_timeout = 10;
    int body_timeout = 30;
    int stop_timeout = 5;
    bool no_spec = false;
    int draft_max = 6;
    int decode_batch = 0;
    std::string model_id;
    std::string template_file;
    int64_t max_thinking_tokens = 4096;
    bool quiet = false;
    SamplingParams sampling;
};

// The first SIGINT/SIGTERM stops the server: no new connections, the waiting requests
// refused, every generation cancelled at its next token; a second signal, or `stop_timeout`
// seconds without the server done, ends the process at once (128 + the signal's number, as
// if it had killed it; the session database is left as a crash leaves it, which SQLite's
// journal makes whole again). Returns once `finished` is set and the thread is signalled.
void watch_signals(serve::Server& server, const std::atomic<bool>& finished,
                   const sigset_t& stop_signals, int stop_timeout) {
    int signal_number = 0;
    sigwait(&stop_signals, &signal_number);
    if (finished) return;
    std::fprintf(stderr,
                 "ember serve: stopping (signal %d): generations cancelled; a second signal "
                 "exits at once\n",
                 signal_number);
    server.stop();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(stop_timeout);
    for (;;) {
        const auto left = deadline - std::chrono::steady_clock::now();
        if (left <= std::chrono::steady_clock::duration::zero()) {
            std::fprintf(stderr, "ember serve: not stopped after %d s; exiting now\n",
                         stop_timeout);
            std::fflush(stderr);
            _exit(128 + signal_number);
        }
        const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
        const timespec wait{static_cast<time_t>(ns / 1000000000),
                            static_cast<long>(ns % 1000000000)};
        const int got = sigtimedwait(&stop_signals, nullptr, &wait);
        if (finished) return;
        if (got > 0) {
            std::fprintf(stderr, "ember serve: second signal (%d); exiting now\n", got);
            std::fflush(stderr);
            _exit(128 + got);
        }
    }
}

bool is_loopback(const std::string& host) {
    return host == "127.0.0.1" || host == "localhost" || host == "::1" || host.starts_with("127.");
}

int run_serve(const ServeOptions& o) {
    o.sampling.validate();
    if (static_cast<int64_t>(o.max_connections) <=
        static_cast<int64_t>(o.parallel) + o.max_waiting) {
        throw CLI::ValidationError(
            "--max-connections",
            std::to_string(o.max_connections) + " leaves no room beside --parallel " +
                std::to_string(o.parallel) + " and --max-waiting " + std::to_string(o.max_waiting) +
                " (each request holds a connection)");
    }
    serve::ServerOptions so;
    so.host = o.host;
    so.port = o.port;
    so.parallel = o.parallel;
    so.max_waiting = static_cast<size_t>(o.max_waiting);
    so.max_body_bytes = parse_byte_size(o.max_body);
    so.read_timeout_seconds = o.read_timeout;
    so.body_timeout_seconds = o.body_timeout;
    so.max_connections = static_cast<size_t>(o.max_connections);
    so.speculation = !o.no_spec;
    so.draft_max = o.draft_max;
    so.decode_batch = o.decode_batch;
    so.model_id = o.model_id;
    so.sampling = o.sampling;
    if (!o.api_key_env.empty()) {
        const char* key = std::getenv(o.api_key_env.c_str());
        if (key == nullptr || *key == '\0') {
            throw std::runtime_error("--api-key-env " + o.api_key_env +
                                     ": that environment variable is unset or empty");
        }
        so.api_key = key;
    }
    if (!is_loopback(o.host) && so.api_key.empty()) {
        std::fprintf(stderr,
                     "ember: warning: listening on %s without --api-key-env: anyone who can "
                     "reach this address can use the model\n",
                     o.host.c_str());
    }
    if (!o.quiet) {
        // Log lines quote what clients sent (a request path, a model name, an error about a
        // body): their control characters are shown, not obeyed, whatever stderr is (a log
        // file is read with tail -f on a terminal later), and a newline in them cannot forge
        // a line. One fprintf per line, so lines from the server's threads do not interleave.
        so.log = [](const std::string& line) {
            std::string shown;
            for (const char c : ui::terminal_safe(line)) {
                if (c == '\n') {
                    shown += "\xE2\x90\xA4";  // U+2424, the newline's picture
                } else {
                    shown += c;
                }
            }
            std::fprintf(stderr, "ember serve: %s\n", shown.c_str());
        };
    }

    // SIGINT/SIGTERM are taken by one thread (below) that stops the server; every other
    // thread, created after this, inherits the mask. A client that closes its connection
    // makes writes fail with EPIPE rather than kill the process.
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
    signal(SIGPIPE, SIG_IGN);

    const std::string model_path = model_path_for(o.model);
    auto model = load_model(model_path, o.activations, o.gpu.for_server(o.parallel));
    ThreadPool pool(o.threads > 0 ? o.threads : default_threads());
    ConversationOptions copts;
    copts.kv_type = kv_type_of(o.kv_type);
    copts.context = o.ctx > 0 ? o.ctx : default_context_size(model->config(), copts.kv_type);
    if (copts.context > model->config().n_ctx_train) {
        throw std::runtime_error("--ctx " + std::to_string(o.ctx) + " is more than the " +
                                 std::to_string(model->config().n_ctx_train) +
                                 " tokens the model was trained for");
    }
    copts.max_thinking_tokens = o.max_thinking_tokens;
    copts.special_tokens_in_content = o.special_tokens_in_content;
    if (!o.template_file.empty()) copts.template_override = read_template_file(o.template_file);

    std::unique_ptr<sessions::Database> db;
    std::unique_ptr<sessions::StateStore> state;
    // Requests that come back to a conversation (the next turn, a retry) find its state in
    // memory: the slots hold --parallel of them, the tier the recently used others.
    std::unique_ptr<sessions::StateTier> tier;
    std::unique_ptr<sessions::TieredStateStore> tiered;
    if (!o.no_db) {
        check_named_db(o.db, DbUse::write);
        db = open_session_db(o.db.empty() ? default_db_path() : o.db);
        sessions::StateStoreOptions state_options;
        state_options.cap_bytes = parse_byte_size(o.state_cap);
        state_options.on_warning = [shown = ui::TextWriter(stderr)](const std::string& message) {
            std::fprintf(stderr, "ember serve: warning: %s\n", shown.shown(message).c_str());
        };
        state = std::make_unique<sessions::StateStore>(*db, *model, copts.kv_type, state_options);
        if (const uint64_t memory = parse_byte_size(o.state_memory); memory > 0) {
            tier = std::make_unique<sessions::StateTier>(memory);
            tier->pin_rows(model->device() != nullptr);  // on a GPU: restored by copy engine
            tiered = std::make_unique<sessions::TieredStateStore>(*state, *tier);
        }
    }
    PrefixStore* store =
        tiered ? static_cast<PrefixStore*>(tiered.get()) : static_cast<PrefixStore*>(state.get());

    serve::Server server(*model, pool, copts, store, so);
    const int port = server.bind();
    // The paths are whatever the files are called (a name may hold an escape sequence):
    // shown, not obeyed, on a terminal.
    const ui::TextWriter listening(stderr);
    std::fprintf(
        stderr,
        "ember serve: listening on http://%s:%d (model %s, %d slots, context %lld, "
        "state store %s%s)\n",
        listening.shown(o.host).c_str(), port, listening.shown(model_path).c_str(), o.parallel,
        static_cast<long long>(copts.context), db ? listening.shown(db->path()).c_str() : "off",
        tier ? (", up to " + listening.shown(o.state_memory) + " of recent state in memory").c_str()
             : "");
    std::fflush(stderr);

    std::atomic<bool> finished{false};
    std::thread watcher([&server, &finished, stop_signals, stop_timeout = o.stop_timeout] {
        watch_signals(server, finished, stop_signals, stop_timeout);
    });
    server.run();
    // The server may have stopped by itself: wake the watcher so it can be joined.
    finished = true;
    pthread_kill(watcher.native_handle(), SIGTERM);
    watcher.join();
    std::fprintf(stderr, "ember serve: stopped\n");
    return 0;
}

}  // namespace

void register_serve_command(CLI::App& app, std::vector<Command>& out) {
    auto o = std::make_shared<ServeOptions>();
    auto* cmd = app.add_subcommand(
        "serve", "Serve a model over the OpenAI-compatible HTTP API (/v1/chat/completions)");
    add_model_option(cmd, o->model);
    cmd->add_option("--host", o->host, "Address to listen on (loopback unless told otherwise)")
        ->capture_default_str();
    cmd->add_option("--port", o->port, "Port (0: any free port, printed at start)")
        ->capture_default_str()
        ->check(CLI::Range(0, 65535));
    cmd->add_option("--api-key-env", o->api_key_env,
                    "Require 'Authorization: Bearer KEY' with KEY from this environment variable");
    cmd->add_option("--parallel", o->parallel,
                    "Slots: conversations kept warm and generated at once")
        ->capture_default_str()
        ->check(CLI::Range(1, 256));
    cmd->add_option("-c,--ctx", o->ctx, "Context size per slot (default: as ember chat)")
        ->check(CLI::PositiveNumber);
    add_kv_type_option(cmd, o->kv_type);
    add_activations_option(cmd, o->activations);
    add_gpu_option(cmd, o->gpu);
    add_threads_option(cmd, o->threads, "Threads (default: the physical cores)");
    cmd->add_option("--chat-template", o->template_file,
                    "Jinja chat template file overriding the model's")
        ->check(CLI::ExistingFile);
    cmd->add_option("--max-thinking-tokens", o->max_thinking_tokens,
                    "Tokens a reply may spend thinking before it is asked to answer")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber);
    cmd->add_option("--db", o->db,
                    "Database whose prefix-state store the slots share (default: "
                    "$XDG_DATA_HOME/ember/ember.db)")
        ->check(file_path());
    cmd->add_flag("--no-db", o->no_db, "No state store: only the slots keep prefixes");
    cmd->add_flag("--special-tokens-in-content", o->special_tokens_in_content,
                  "Parse control-token text in a request's messages (<|im_start|>, ...) as the "
                  "control token; by default it is plain text");
    cmd->add_option("--state-cap", o->state_cap, "Stored prefix state kept at most")
        ->capture_default_str()
        ->check(positive_byte_size());
    cmd->add_option("--state-memory", o->state_memory,
                    "Recently used conversations' state kept in memory too, so a request "
                    "coming back to one does not read the database (0: none)")
        ->capture_default_str()
        ->check(byte_size());
    cmd->add_option("--max-body", o->max_body, "Largest request body accepted")
        ->capture_default_str();
    cmd->add_option("--max-waiting", o->max_waiting,
                    "Requests that may wait for a slot; more are refused with 503")
        ->capture_default_str()
        ->check(CLI::Range(0, 100000));
    cmd->add_option("--max-connections", o->max_connections,
                    "Connections served at once; more are refused at once with 503")
        ->capture_default_str()
        ->check(CLI::Range(1, 100000));
    cmd->add_option("--read-timeout", o->read_timeout,
                    "Seconds a client may stall while sending a request, and may take to send "
                    "its headers")
        ->capture_default_str()
        ->check(CLI::Range(1, 3600));
    cmd->add_option("--body-timeout", o->body_timeout,
                    "Seconds a request's body may take to arrive after its headers (then 408)")
        ->capture_default_str()
        ->check(CLI::Range(1, 3600));
    cmd->add_option("--stop-timeout", o->stop_timeout,
                    "Seconds the first SIGINT/SIGTERM waits for requests to end before exiting")
        ->capture_default_str()
        ->check(CLI::Range(1, 3600));
    cmd->add_flag("--no-spec", o->no_spec, "No n-gram speculative decoding");
    cmd->add_option("--draft-max", o->draft_max, "Drafted tokens per verification at most")
        ->capture_default_str()
        ->check(CLI::Range(1, 16));
    cmd->add_option("--decode-batch", o->decode_batch,
                    "Generating slots one decode step evaluates together at most (default: "
                    "--parallel up to " +
                        std::to_string(kMaxDecodeBatch) + " on a GPU, 1 on the CPU)")
        ->check(CLI::Range(1, static_cast<int>(kMaxDecodeBatch)));
    cmd->add_option("--model-id", o->model_id,
                    "Name the API lists and requests use (default: the file's stem)");
    cmd->add_flag("-q,--quiet", o->quiet, "No line per request on stderr");
    add_sampling_options(cmd, o->sampling);
    out.push_back({cmd, [o, cmd] {
                       apply_config_sampling(load_config(), *cmd, o->sampling);
                       return run_serve(*o);
                   }});
}

}  // namespace ember::app
