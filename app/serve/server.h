// `ember serve`: the OpenAI-compatible HTTP API (cpp-httplib) over one model's slots.
//
//   POST /v1/chat/completions   chat template, streamed (server-sent events) or not
//   POST /v1/completions        raw text completion, streamed or not
//   GET  /v1/models, /health
//
// Requests are parsed by api.h, checked and turned into jobs by routes.h, run on the slots of
// slots.h by jobs.h, answered by streaming.h; errors are OpenAI's JSON shape with
// their status (400 bad request, 401 missing key, 404 unknown model or path, 408 body too
// slow, 413 body too large, 431 headers too long, 503 too many waiting or stopping). The
// engine knows nothing of HTTP; this file knows nothing of the command line.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "app/serve/api.h"
#include "engine/generate/conversation.h"
#include "engine/generate/prefix_store.h"
#include "engine/sampling/sampler.h"

namespace ember {
class Model;
class ThreadPool;
}  // namespace ember

namespace ember::serve {

struct ServerOptions {
    std::string host = "127.0.0.1";
    int port = 8080;               // 0: any free port (bind() says which)
    std::string api_key;           // empty: no key needed; otherwise "Authorization: Bearer KEY"
    int parallel = 1;              // slots
    size_t max_waiting = 64;       // requests waiting for a slot at most; more get 503
    size_t max_connections = 512;  // connections served at once; more get 503 unread
    size_t max_body_bytes = size_t{4} << 20;
    int read_timeout_seconds = 10;  // a read that stalls longer, or headers slower, drop it
    int body_timeout_seconds = 30;  // a body must arrive within this of its headers: 408
    std::string model_id;           // the name /v1/models lists and requests must use
    SamplingParams sampling;        // defaults for fields a request leaves out
    bool speculation = true;
    int draft_max = 6;
    // Generating slots whose next tokens one decode step evaluates together at most
    // (decode_batcher.h), 1 to kMaxDecodeBatch; 0: the slots (up to kMaxDecodeBatch) when the
    // model runs on a GPU, 1 on the CPU (whose steps would go one by one anyway).
    int decode_batch = 0;
    RequestLimits limits;
    // One line per request (method, path, status, tokens); null: silent.
    std::function<void(const std::string&)> log;
};

struct DecodeBatchStats;

class Server {
public:
    // `model`, `pool` and `store` (may be null) must outlive the server. Each slot gets a
    // Conversation with `conversation_options` and `store` as its prefix store.
    Server(const Model& model, ThreadPool& pool, ConversationOptions conversation_options,
           PrefixStore* store, ServerOptions options);
    ~Server();
    Server(const Server&) = delete;
    Server& operator=(const Server&) = delete;

    // Binds the listening socket; returns the port. Throws with the reason on failure.
    int bind();
    // Serves until stop() (from another thread or a signal-watching thread).
    void run();
    // Stops accepting, refuses the requests waiting for a slot (503) and cancels every
    // generation at its next piece of text (a stream ends with an error event); run()
    // returns once the requests being answered have their answers.
    void stop();
    // The decode steps so far (decode_batcher.h) and the most tokens a step takes.
    DecodeBatchStats decode_stats();
    int decode_batch() const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace ember::serve
