#include "app/serve/server.h"

#include <dirent.h>
#include <httplib.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <ctime>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <string_view>
#include <thread>

#include "app/serve/slots.h"
#include "engine/model/model.h"
#include "engine/tokenizer/tokenizer.h"

namespace ember::serve {

using json = nlohmann::json;

namespace {

constexpr const char* kJson = "application/json";

void send_error(httplib::Response& res, const ApiError& e) {
    res.status = e.status();
    res.set_content(dump_json(error_json(e)), kJson);
}

// Compares without an early exit, so the time taken does not tell how much of a key matched.
bool same_secret(const std::string& a, const std::string& b) {
    unsigned diff = a.size() == b.size() ? 0 : 1;
    for (size_t i = 0; i < a.size(); ++i) {
        diff |= static_cast<unsigned>(a[i] ^ (i < b.size() ? b[i] : 0));
    }
    return diff == 0;
}

std::string sse_event(const json& j) {
    return "data: " + dump_json(j) + "\n\n";
}

// An address and port as httplib writes them into a Request (numeric host, port).
bool same_endpoint(const sockaddr_storage& addr, socklen_t len, const std::string& host, int port) {
    char name[NI_MAXHOST];
    char service[NI_MAXSERV];
    if (getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, name, sizeof name, service,
                    sizeof service, NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
        return false;
    }
    return host == name && port == std::atoi(service);
}

// The socket a request arrived on, or -1. httplib 0.11 gives a handler neither the socket
// nor a way to ask whether the client is still there, so the socket is found among this
// process's descriptors by its two endpoints. The match is unique (a TCP connection is
// its pair of endpoints) and stays valid while the handler runs: httplib closes the socket
// on this same thread, after the handler returns.
int request_socket(const httplib::Request& req) {
    DIR* dir = opendir("/proc/self/fd");
    if (dir == nullptr) return -1;
    int found = -1;
    const int dir_fd = dirfd(dir);
    while (const dirent* entry = readdir(dir)) {
        const int fd = std::atoi(entry->d_name);
        if (entry->d_name[0] < '0' || entry->d_name[0] > '9' || fd == dir_fd) continue;
        struct stat st {};
        if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
        sockaddr_storage local{}, peer{};
        socklen_t local_len = sizeof local, peer_len = sizeof peer;
        if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0 ||
            getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) {
            continue;
        }
        if (same_endpoint(local, local_len, req.local_addr, req.local_port) &&
            same_endpoint(peer, peer_len, req.remote_addr, req.remote_port)) {
            found = fd;
            break;
        }
    }
    closedir(dir);
    return found;
}

// httplib holds an idle kept-alive connection this long (seconds).
constexpr int kKeepAliveSeconds = 5;

// A connected socket's peer as httplib writes it into Request::remote_addr/remote_port.
std::string peer_text(const sockaddr_storage& addr, socklen_t len) {
    char name[NI_MAXHOST];
    char service[NI_MAXSERV];
    if (getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, name, sizeof name, service,
                    sizeof service, NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
        return {};
    }
    return std::string(name) + " " + service;
}

// Ends connections that take too long to get a request's headers through. httplib 0.11's
// read timeout applies to each read, so a client sending a header line every few seconds
// (slowloris) holds a server thread for as long as it likes, and a few dozen such clients
// hold them all: nothing else, /health included, is answered. httplib gives no hook while
// it reads headers, so a watcher thread looks at the server's sockets once a second: a
// connection that is not inside a request (from its acceptance, or its last response, to
// its next request's headers) for longer than `limit` is shut down, which ends httplib's
// read on it.
class HeaderDeadline {
public:
    explicit HeaderDeadline(std::chrono::seconds limit) : limit_(limit) {}
    ~HeaderDeadline() { stop(); }

    void start(int port) {
        port_ = port;
        thread_ = std::thread([this] {
            std::unique_lock lock(mutex_);
            while (!stopping_) {
                wake_.wait_for(lock, std::chrono::seconds(1));
                if (!stopping_) sweep();
            }
        });
    }

    void stop() {
        {
            std::lock_guard lock(mutex_);
            stopping_ = true;
        }
        wake_.notify_all();
        if (thread_.joinable()) thread_.join();
    }

    // The request's headers are in: its connection is busy until the response is written.
    void request_started(const httplib::Request& req) {
        std::lock_guard lock(mutex_);
        busy_.insert(key(req));
    }

    // The response is written: the connection may now wait for its next request.
    void request_done(const httplib::Request& req) {
        std::lock_guard lock(mutex_);
        const std::string k = key(req);
        busy_.erase(k);
        idle_since_[k] = std::chrono::steady_clock::now();
    }

private:
    bool headers_waiting(int fd) {
        const ssize_t n = recv(fd, peek_.data(), peek_.size(), MSG_PEEK | MSG_DONTWAIT);
        return n > 0 && std::string_view(peek_.data(), static_cast<size_t>(n)).find("\r\n\r\n") !=
                            std::string_view::npos;
    }

    static std::string key(const httplib::Request& req) {
        return req.remote_addr + " " + std::to_string(req.remote_port);
    }

    void sweep() {
        DIR* dir = opendir("/proc/self/fd");
        if (dir == nullptr) return;
        const auto now = std::chrono::steady_clock::now();
        std::map<std::string, std::chrono::steady_clock::time_point> still_open;
        const int dir_fd = dirfd(dir);
        while (const dirent* entry = readdir(dir)) {
            if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
            const int fd = std::atoi(entry->d_name);
            struct stat st {};
            if (fd == dir_fd || fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
            sockaddr_storage local{}, peer{};
            socklen_t local_len = sizeof local, peer_len = sizeof peer;
            // The listening socket has no peer; other sockets are not the server's.
            if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0 ||
                getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) {
                continue;
            }
            const auto* local_in = reinterpret_cast<const sockaddr_in*>(&local);
            if ((local.ss_family != AF_INET && local.ss_family != AF_INET6) ||
                ntohs(local_in->sin_port) != port_) {  // sin6_port lies at the same offset
                continue;
            }
            const std::string k = peer_text(peer, peer_len);
            if (k.empty() || busy_.count(k) != 0) continue;
            auto since = idle_since_.find(k);
            const auto idle_from = since != idle_since_.end() ? since->second : now;
            // A connection still waiting for a free thread holds its request unread: if the
            // headers are all there, the client is not slow, the server is busy.
            if (now - idle_from > limit_ && !headers_waiting(fd)) {
                shutdown(fd, SHUT_RDWR);
                continue;
            }
            still_open[k] = idle_from;
        }
        closedir(dir);
        idle_since_ = std::move(still_open);  // forgets closed connections
    }

    const std::chrono::steady_clock::duration limit_;
    int port_ = 0;
    std::mutex mutex_;
    std::condition_variable wake_;
    bool stopping_ = false;
    std::set<std::string> busy_;
    std::map<std::string, std::chrono::steady_clock::time_point> idle_since_;
    std::thread thread_;
    std::vector<char> peek_ = std::vector<char>(64 * 1024);  // used by the watcher thread only
};

// Set by a handler that refused a body it did not read to the end; the logger, which httplib
// calls on the same thread once the response is written, then ends the connection.
thread_local bool t_end_connection = false;

// httplib 0.11 keeps a connection open whatever the response's Connection header says, and
// would parse the unread rest of a refused body as the next request (and buffer a line of
// it without bound). So: send FIN after the response, discard what the client still sends
// for a moment (closing a socket with unread data resets it, which can destroy the
// response before the client reads it), then put a descriptor that reads end-of-file in
// the socket's place. httplib's next read on it ends the connection quietly, and httplib
// closes that descriptor as it would have closed the socket.
void end_connection(int fd) {
    if (fd < 0) return;
    shutdown(fd, SHUT_WR);
    char discard[16384];
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
    size_t drained = 0;
    while (std::chrono::steady_clock::now() < deadline && drained < (size_t{16} << 20)) {
        pollfd p{fd, POLLIN, 0};
        if (poll(&p, 1, 50) <= 0) continue;
        const ssize_t n = recv(fd, discard, sizeof discard, MSG_DONTWAIT);
        if (n <= 0) break;
        drained += static_cast<size_t>(n);
    }
    int pair[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
        shutdown(fd, SHUT_RD);
        return;
    }
    close(pair[1]);  // pair[0] now reads end-of-file
    dup2(pair[0], fd);
    close(pair[0]);
}

// Whether the client of a request still waiting for its (non-streamed) answer has closed
// the connection: the socket reads end-of-file, or fails. Bytes waiting to be read (a
// pipelined request) mean it is still there. A client that only shuts down its sending
// side also reads as gone: HTTP clients close, rather than half-close, a connection
// they are done with.
bool client_closed(int fd) {
    if (fd < 0) return false;
    pollfd p{fd, POLLIN | POLLRDHUP, 0};
    if (poll(&p, 1, 0) <= 0) return false;
    if ((p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0) return true;
    char byte;
    return recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

}  // namespace

// One generation request after parsing: what to run and how.
struct Job {
    bool chat = true;
    std::vector<ChatMessage> messages;  // chat
    std::vector<int32_t> prompt;        // the prompt's tokens (chat: as rendered)
    std::vector<std::string> stop;
    SamplingParams sampling;
    int64_t max_tokens = 0;
    bool stream = false;
    bool include_usage = false;
    bool ignore_eos = false;
    std::string id;
    int64_t created = 0;
};

struct Server::Impl {
    const Model& model;
    ThreadPool& pool;
    ConversationOptions conversation_options;
    PrefixStore* store;
    ServerOptions options;
    httplib::Server http;
    std::unique_ptr<Conversation> renderer;  // renders and tokenizes prompts (under its mutex)
    std::mutex renderer_mutex;
    std::unique_ptr<SlotPool> slots;
    ReplyIds reply_ids{1024};
    std::atomic<uint64_t> next_id{0};
    std::string file_name;
    // Once a kept-alive connection's idle wait is over, its next request's headers get
    // the read timeout too.
    HeaderDeadline header_deadline{
        std::chrono::seconds(kKeepAliveSeconds + std::max(1, options.read_timeout_seconds))};
    int port = 0;

    Impl(const Model& m, ThreadPool& p, ConversationOptions co, PrefixStore* s, ServerOptions o)
        : model(m), pool(p), conversation_options(std::move(co)), store(s), options(std::move(o)) {
        file_name = std::filesystem::path(model.path()).filename().string();
        if (options.model_id.empty()) {
            options.model_id = std::filesystem::path(model.path()).stem().string();
        }
        ConversationOptions small = conversation_options;
        small.context = 16;  // the renderer never evaluates anything
        renderer = std::make_unique<Conversation>(model, pool, small);
        slots = std::make_unique<SlotPool>(options.parallel, options.max_waiting, [this] {
            auto conv = std::make_unique<Conversation>(model, pool, conversation_options);
            conv->set_prefix_store(store);
            return conv;
        });
        setup_routes();
    }

    void log(const std::string& line) const {
        if (options.log) options.log(line);
    }

    void check_model(const std::string& requested) const {
        if (requested.empty() || requested == options.model_id || requested == file_name) return;
        throw ApiError(404,
                       "the model '" + requested + "' does not exist (this server serves '" +
                           options.model_id + "')",
                       "model", "model_not_found");
    }

    std::vector<int32_t> chat_prompt(const std::vector<ChatMessage>& messages) {
        std::lock_guard lock(renderer_mutex);
        renderer->clear();
        for (const auto& m : messages) renderer->add_message(m);
        try {
            return renderer->prompt_tokens();
        } catch (const std::exception& e) {
            throw ApiError(
                400, std::string("the chat template cannot render these messages: ") + e.what(),
                "messages");
        }
    }

    std::vector<int32_t> completion_prompt(const std::string& text) const {
        const Tokenizer& tok = model.tokenizer();
        EncodeOptions enc;  // as `ember run` tokenizes a prompt
        enc.add_bos = tok.add_bos() && tok.bos_id() != kNoToken;
        std::vector<int32_t> ids = tok.encode(text, enc);
        if (ids.empty()) throw ApiError(400, "the prompt is empty (no tokens)", "prompt");
        return ids;
    }

    // The reply's length limit: what was asked, within the room the context leaves.
    int64_t max_tokens_for(const std::optional<int64_t>& asked, size_t prompt_tokens) const {
        const int64_t context = conversation_options.context;
        const int64_t room = context - static_cast<int64_t>(prompt_tokens);
        if (room < 1 || (asked && *asked > room)) {
            throw ApiError(400,
                           "this model's context holds " + std::to_string(context) +
                               " tokens; the prompt has " + std::to_string(prompt_tokens) +
                               (asked ? " and " + std::to_string(*asked) + " more were asked for"
                                      : std::string()),
                           asked ? "max_tokens" : "messages", "context_length_exceeded");
        }
        return asked ? *asked : room;
    }

    Job make_job(bool chat, const SamplingRequest& s) {
        Job job;
        job.chat = chat;
        job.stop = s.stop;
        job.sampling = sampling_for(s, options.sampling);
        job.stream = s.stream;
        job.include_usage = s.include_usage;
        job.ignore_eos = s.ignore_eos;
        job.id = std::string(chat ? "chatcmpl-" : "cmpl-") + std::to_string(++next_id);
        job.created = static_cast<int64_t>(std::time(nullptr));
        return job;
    }

    // Runs the job on a slot; `on_text` gets the reply as it is generated (false: stop).
    TurnResult generate(Job& job, SlotLease& lease, const TextCallback& on_text) {
        Conversation& conv = lease.conversation();
        EngineTurn turn(slots->engine_turn());
        conv.set_stop_strings(job.stop);
        Sampler sampler(job.sampling);
        GenerateOptions gen;
        gen.max_tokens = job.max_tokens;
        gen.ignore_eos = job.ignore_eos;
        gen.speculation.enabled = options.speculation;
        gen.speculation.draft_max = options.draft_max;
        // Text goes to the client with the turn given up, so a slow reader holds up no one,
        // and the other generating slots take their turns in between.
        auto pass_turn = [&](const std::string& text, TextKind kind) {
            turn.release();
            const bool go_on = on_text(text, kind);
            turn.acquire();
            return go_on;
        };
        TurnResult result;
        if (job.chat) {
            conv.clear();
            for (auto& m : job.messages) conv.add_message(std::move(m));
            result = conv.respond(sampler, gen, pass_turn);
            if (!conv.messages().empty()) {
                const ChatMessage& reply = conv.messages().back();
                reply_ids.remember(reply.content, reply.ids);
            }
        } else {
            result = conv.complete(job.prompt, sampler, gen, pass_turn);
        }
        return result;
    }

    SlotLease take_slot(const std::vector<int32_t>& prompt) {
        std::optional<SlotLease> lease = slots->acquire(prompt);
        if (!lease) {
            throw ApiError(503, "the server is busy: " + std::to_string(options.max_waiting) +
                                    " requests already wait for a slot; retry later");
        }
        return std::move(*lease);
    }

    json choice_json(const Job& job, const TurnResult& r) const {
        json choice = {{"index", 0}, {"finish_reason", finish_reason_text(r.finish)}};
        if (job.chat) {
            json message = {{"role", "assistant"}, {"content", r.reply}};
            if (!r.thinking.empty()) message["reasoning_content"] = r.thinking;
            choice["message"] = message;
        } else {
            choice["text"] = r.reply;
            choice["logprobs"] = nullptr;
        }
        return choice;
    }

    json envelope(const Job& job, bool chunk) const {
        return json{{"id", job.id},
                    {"object", job.chat ? (chunk ? "chat.completion.chunk" : "chat.completion")
                                        : "text_completion"},
                    {"created", job.created},
                    {"model", options.model_id}};
    }

    void respond_plain(Job& job, const httplib::Request& req, httplib::Response& res) {
        SlotLease lease = take_slot(job.prompt);
        // Nothing is written until the reply is done, so a client that hangs up is only
        // seen by looking at its socket; each piece of text is a chance to stop.
        const int fd = request_socket(req);
        bool client_gone = false;
        const TurnResult r = generate(job, lease, [&](const std::string&, TextKind) {
            client_gone = client_closed(fd);
            return !client_gone;
        });
        if (client_gone) {
            log(job.id + " client disconnected after " + std::to_string(r.ids.size()) +
                " tokens; generation cancelled (slot " + std::to_string(lease.index()) + ")");
            // No one reads this; 499 (nginx's "client closed request") makes the request log
            // line say what happened.
            res.status = 499;
            return;
        }
        json body = envelope(job, false);
        body["choices"] = json::array({choice_json(job, r)});
        body["usage"] = usage_json(r);
        body["ember"] = ember_json(r, lease.index());
        res.set_content(dump_json(body), kJson);
        log_turn(job, r, lease.index());
    }

    void respond_stream(std::shared_ptr<Job> job, httplib::Response& res) {
        // The slot is taken before the headers go out, so a full queue is still a 503.
        auto lease = std::make_shared<std::optional<SlotLease>>(take_slot(job->prompt));
        res.set_header("Cache-Control", "no-cache");
        res.set_chunked_content_provider(
            "text/event-stream", [this, job, lease](size_t, httplib::DataSink& sink) {
                const bool complete = stream_job(*job, **lease, sink);
                lease->reset();  // free the slot now, not when the connection closes
                // true after sink.done() ends the response; false drops the connection.
                return complete;
            });
    }

    json delta_chunk(const Job& job, json delta, const json& finish) const {
        json chunk = envelope(job, true);
        json choice = {{"index", 0}, {"finish_reason", finish}};
        if (job.chat) {
            choice["delta"] = std::move(delta);
        } else {
            choice["text"] = delta.value("content", std::string());
            choice["logprobs"] = nullptr;
        }
        chunk["choices"] = json::array({choice});
        return chunk;
    }

    // Returns whether the response was completed (false: the connection is to be dropped).
    bool stream_job(Job& job, SlotLease& lease, httplib::DataSink& sink) {
        auto send = [&](const std::string& text) { return sink.write(text.data(), text.size()); };
        bool client_gone = !send(
            sse_event(delta_chunk(job, json{{"role", "assistant"}, {"content", ""}}, nullptr)));
        if (client_gone) {
            log(job.id + " client left before generation started");
            return false;
        }
        TurnResult r;
        try {
            r = generate(job, lease, [&](const std::string& text, TextKind kind) {
                if (text.empty()) return true;
                const char* field = kind == TextKind::Thinking ? "reasoning_content" : "content";
                if (!send(sse_event(delta_chunk(job, json{{field, text}}, nullptr)))) {
                    client_gone = true;
                    return false;  // stops generating: the client closed the connection
                }
                return true;
            });
        } catch (const std::exception& e) {
            send(sse_event(error_json(ApiError(500, e.what()))));
            log(job.id + " failed: " + e.what());
            return false;
        }
        if (client_gone) {
            log(job.id + " client disconnected after " + std::to_string(r.ids.size()) +
                " tokens; generation cancelled (slot " + std::to_string(lease.index()) + ")");
            return false;
        }
        send(sse_event(delta_chunk(job, json::object(), finish_reason_text(r.finish))));
        if (job.include_usage) {
            json chunk = envelope(job, true);
            chunk["choices"] = json::array();
            chunk["usage"] = usage_json(r);
            chunk["ember"] = ember_json(r, lease.index());
            send(sse_event(chunk));
        }
        send("data: [DONE]\n\n");
        sink.done();
        log_turn(job, r, lease.index());
        return true;
    }

    void log_turn(const Job& job, const TurnResult& r, int slot) const {
        log(job.id + " slot " + std::to_string(slot) + ": prompt " +
            std::to_string(r.prompt_tokens) + " tokens (" + std::to_string(r.tokens_reused) +
            " reused, " + std::to_string(r.tokens_restored) + " of them from the state store), " +
            std::to_string(r.ids.size()) + " generated, " + finish_reason_text(r.finish));
    }

    void handle_chat(const httplib::Request& req, const std::string& body, httplib::Response& res) {
        ChatRequest r = parse_chat_request(body, options.limits);
        check_model(r.model);
        auto job = std::make_shared<Job>(make_job(true, r.sampling));
        reply_ids.attach(r.messages);
        job->prompt = chat_prompt(r.messages);
        job->max_tokens = max_tokens_for(r.sampling.max_tokens, job->prompt.size());
        job->messages = std::move(r.messages);
        if (job->stream) {
            respond_stream(job, res);
        } else {
            respond_plain(*job, req, res);
        }
    }

    void handle_completion(const httplib::Request& req, const std::string& body,
                           httplib::Response& res) {
        CompletionRequest r = parse_completion_request(body, options.limits);
        check_model(r.model);
        auto job = std::make_shared<Job>(make_job(false, r.sampling));
        job->prompt = completion_prompt(r.prompt);
        job->max_tokens = max_tokens_for(r.sampling.max_tokens, job->prompt.size());
        if (job->stream) {
            respond_stream(job, res);
        } else {
            respond_plain(*job, req, res);
        }
    }

    json models_json() const {
        return json{{"object", "list"},
                    {"data", json::array({json{{"id", options.model_id},
                                               {"object", "model"},
                                               {"created", 0},
                                               {"owned_by", "ember"}}})}};
    }

    json health_json() const {
        const SlotPoolStats s = slots->stats();
        return json{{"status", "ok"},
                    {"model", options.model_id},
                    {"slots", s.slots},
                    {"slots_busy", s.busy},
                    {"requests_waiting", s.waiting}};
    }

    // Runs a handler, turning its errors into API errors (never an escaped exception).
    template <typename F>
    httplib::Server::Handler guarded(F handler) {
        return [this, handler](const httplib::Request& req, httplib::Response& res) {
            try {
                handler(req, res);
            } catch (const ApiError& e) {
                send_error(res, e);
            } catch (const ContextOverflow& e) {
                send_error(res, ApiError(400, e.what(), "messages", "context_length_exceeded"));
            } catch (const std::bad_alloc&) {
                send_error(res, ApiError(500, "out of memory"));
            } catch (const std::exception& e) {
                send_error(res, ApiError(500, e.what()));
            }
        };
    }

    // The request body, read up to --max-body. httplib 0.11 holds a body to its payload
    // limit only when a Content-Length announces it: a chunked body would be buffered whole,
    // however large. So the POST routes read their body themselves and stop at the limit.
    std::string read_body(httplib::Response& res, const httplib::ContentReader& read) const {
        const size_t limit = options.max_body_bytes;
        std::string body;
        bool too_large = false;
        const bool complete = read([&](const char* data, size_t n) {
            if (n > limit - body.size()) {
                too_large = true;
                return false;  // stops reading: the rest of the body is never received
            }
            body.append(data, n);
            return true;
        });
        // 413 from httplib: a Content-Length over its payload limit (the same limit).
        if (too_large || res.status == 413) {
            // The unread rest of the body would be taken for the next request.
            res.set_header("Connection", "close");
            t_end_connection = true;
            throw ApiError(413, "the request body is larger than the server's limit of " +
                                    std::to_string(limit) + " bytes");
        }
        if (!complete) {
            res.set_header("Connection", "close");
            t_end_connection = true;
            throw ApiError(400,
                           "the request body could not be read (malformed chunked "
                           "encoding, or the client stopped sending)");
        }
        return body;
    }

    // A POST route: `handler(req, body, res)`, with the body read by read_body() when the
    // request has one (httplib passes a reader), or empty.
    template <typename F>
    void post_route(const std::string& path, F handler) {
        http.Post(path, guarded([this, handler](const auto& req, auto& res) {
                      handler(req, req.body, res);
                  }));
        http.Post(path, [this, handler](const httplib::Request& req, httplib::Response& res,
                                        const httplib::ContentReader& read) {
            guarded([&](const httplib::Request& r, httplib::Response& s) {
                const std::string body = read_body(s, read);
                handler(r, body, s);
            })(req, res);
        });
    }

    httplib::Server::Handler wrong_method(const std::string& allowed) {
        return [allowed](const httplib::Request& req, httplib::Response& res) {
            res.set_header("Allow", allowed);
            send_error(res, ApiError(405, req.method + " is not allowed on " + req.path + " (use " +
                                              allowed + ")"));
        };
    }

    void setup_routes() {
        http.set_payload_max_length(options.max_body_bytes);
        http.set_read_timeout(options.read_timeout_seconds, 0);
        http.set_write_timeout(options.read_timeout_seconds, 0);
        http.set_keep_alive_timeout(kKeepAliveSeconds);
        // httplib closes a kept-alive connection after 5 requests by default; a client that
        // sends many short requests would pay a new connection every fifth one.
        http.set_keep_alive_max_count(1000);
        // httplib writes a response's headers and body in separate sends: with Nagle's
        // algorithm the body waits for the client's delayed ACK of the headers, about 40 ms
        // on every request after the first on a kept-alive connection.
        http.set_tcp_nodelay(true);
        // A connection holds a thread while its request generates or waits for a slot, so
        // every slot and every waiting request may hold one; 32 more answer /health, the
        // models list, the 503s past --max-waiting and idle kept-alive clients meanwhile.
        const size_t wanted = static_cast<size_t>(options.parallel) + options.max_waiting + 32;
        const int threads = options.http_threads > 0
                                ? options.http_threads
                                : static_cast<int>(std::min<size_t>(wanted, 1024));
        http.new_task_queue = [threads] {
            return new httplib::ThreadPool(static_cast<size_t>(threads));
        };
        // Called once a request's headers are in, before its body is read.
        http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
            header_deadline.request_started(req);
            if (!options.api_key.empty()) {
                const std::string given = req.get_header_value("Authorization");
                if (same_secret(given, "Bearer " + options.api_key)) {
                    return httplib::Server::HandlerResponse::Unhandled;
                }
                send_error(res, ApiError(401,
                                         given.empty() ? "an API key is required (Authorization: "
                                                         "Bearer KEY)"
                                                       : "the API key is not valid",
                                         {}, "invalid_api_key"));
                return httplib::Server::HandlerResponse::Handled;
            }
            return httplib::Server::HandlerResponse::Unhandled;
        });
        post_route("/v1/chat/completions",
                   [this](const auto& q, const auto& b, auto& s) { handle_chat(q, b, s); });
        post_route("/v1/completions",
                   [this](const auto& q, const auto& b, auto& s) { handle_completion(q, b, s); });
        http.Get("/v1/models", guarded([this](const auto&, auto& s) {
                     s.set_content(dump_json(models_json()), kJson);
                 }));
        http.Get("/health", guarded([this](const auto&, auto& s) {
                     s.set_content(dump_json(health_json()), kJson);
                 }));
        http.Get("/v1/chat/completions", wrong_method("POST"));
        http.Get("/v1/completions", wrong_method("POST"));
        http.Post("/v1/models", wrong_method("GET"));
        http.Post("/health", wrong_method("GET"));
        // Whatever httplib refuses itself (no route, a body too large, a malformed request
        // line) gets the API's error shape too.
        http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
            if (!res.body.empty()) return;
            std::string message = "no such endpoint: " + req.method + " " + req.path;
            if (res.status == 413) message = "the request body is too large";
            if (res.status == 400) message = "malformed HTTP request";
            send_error(res, ApiError(res.status, message));
        });
        http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
            log(req.method + " " + req.path + " " + std::to_string(res.status));
            header_deadline.request_done(req);
            if (t_end_connection) {
                t_end_connection = false;
                end_connection(request_socket(req));
            }
        });
    }
};

Server::Server(const Model& model, ThreadPool& pool, ConversationOptions conversation_options,
               PrefixStore* store, ServerOptions options)
    : impl_(std::make_unique<Impl>(model, pool, std::move(conversation_options), store,
                                   std::move(options))) {}

Server::~Server() = default;

int Server::bind() {
    const auto& o = impl_->options;
    int port = o.port;
    if (port == 0) {
        port = impl_->http.bind_to_any_port(o.host);
        if (port < 0) throw std::runtime_error("cannot listen on " + o.host);
    } else if (!impl_->http.bind_to_port(o.host, port)) {
        throw std::runtime_error("cannot listen on " + o.host + ":" + std::to_string(port) +
                                 " (in use, or not an address of this machine)");
    }
    impl_->port = port;
    return port;
}

void Server::run() {
    impl_->header_deadline.start(impl_->port);
    impl_->http.listen_after_bind();
    impl_->header_deadline.stop();
}

void Server::stop() {
    impl_->http.stop();
}

}  // namespace ember::serve
