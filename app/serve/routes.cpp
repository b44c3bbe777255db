#include "app/serve/routes.h"

#include <cctype>
#include <chrono>
#include <ctime>

#include "app/serve/front_door.h"

namespace ember::serve {

using json = nlohmann::json;

namespace {

constexpr const char* kJson = "application/json";

// An idle kept-alive connection is held this long (seconds).
constexpr int kKeepAliveSeconds = 5;

void send_error(httplib::Response& res, const ApiError& e) {
    res.status = e.status();
    // Every 503 is a passing state (too many requests waiting, or the server stopping).
    if (e.status() == 503) res.set_header("Retry-After", "1");
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

httplib::Server::Handler wrong_method(const std::string& allowed) {
    return [allowed](const httplib::Request& req, httplib::Response& res) {
        res.set_header("Allow", allowed);
        send_error(res, ApiError(405, req.method + " is not allowed on " + req.path + " (use " +
                                          allowed + ")"));
    };
}

}  // namespace

Routes::Routes(FrontDoor& http, JobRunner& jobs, ReplyWriter& replies, const ServerOptions& options,
               std::string model_file_name)
    : http_(http),
      jobs_(jobs),
      replies_(replies),
      options_(options),
      file_name_(std::move(model_file_name)) {
    install();
}

void Routes::check_model(const std::string& requested) const {
    if (requested.empty() || requested == options_.model_id || requested == file_name_) return;
    throw ApiError(404,
                   "the model '" + requested + "' does not exist (this server serves '" +
                       options_.model_id + "')",
                   "model", "model_not_found");
}

int64_t Routes::max_tokens_for(const std::optional<int64_t>& asked, size_t prompt_tokens) const {
    const int64_t context = jobs_.context();
    const int64_t room = context - static_cast<int64_t>(prompt_tokens);
    if (room < 1 || (asked && *asked > room)) {
        throw ApiError(
            400,
            "this model's context holds " + std::to_string(context) + " tokens; the prompt has " +
                std::to_string(prompt_tokens) +
                (asked ? " and " + std::to_string(*asked) + " more were asked for" : std::string()),
            asked ? "max_tokens" : "messages", "context_length_exceeded");
    }
    return asked ? *asked : room;
}

Job Routes::make_job(bool chat, const SamplingRequest& s) {
    Job job;
    job.chat = chat;
    job.stop = s.stop;
    job.sampling = sampling_for(s, options_.sampling);
    job.stream = s.stream;
    job.include_usage = s.include_usage;
    job.ignore_eos = s.ignore_eos;
    job.response_format = s.response_format;
    if (job.response_format.kind != OutputFormatKind::Free && chat && jobs_.harmony()) {
        throw ApiError(400, "'response_format' is not supported for harmony (gpt-oss) models",
                       "response_format");
    }
    job.id = std::string(chat ? "chatcmpl-" : "cmpl-") + std::to_string(++next_id_);
    job.created = static_cast<int64_t>(std::time(nullptr));
    return job;
}

void Routes::handle_chat(const httplib::Request&, const std::string& body, httplib::Response& res) {
    ChatRequest r = parse_chat_request(body, options_.limits);
    check_model(r.model);
    auto job = std::make_shared<Job>(make_job(true, r.sampling));
    job->tools = std::move(r.tools);
    jobs_.attach_reply_ids(r.messages);
    job->prompt = jobs_.chat_prompt(r.messages, *job);
    job->max_tokens = max_tokens_for(r.sampling.max_tokens, job->prompt.size());
    job->messages = std::move(r.messages);
    if (job->stream) {
        replies_.respond_stream(job, res);
    } else {
        replies_.respond_plain(*job, res);
    }
}

void Routes::handle_completion(const httplib::Request&, const std::string& body,
                               httplib::Response& res) {
    CompletionRequest r = parse_completion_request(body, options_.limits);
    check_model(r.model);
    auto job = std::make_shared<Job>(make_job(false, r.sampling));
    job->prompt = jobs_.completion_prompt(r.prompt);
    job->max_tokens = max_tokens_for(r.sampling.max_tokens, job->prompt.size());
    if (job->stream) {
        replies_.respond_stream(job, res);
    } else {
        replies_.respond_plain(*job, res);
    }
}

json Routes::models_json() const {
    return json{{"object", "list"},
                {"data", json::array({json{{"id", options_.model_id},
                                           {"object", "model"},
                                           {"created", 0},
                                           {"owned_by", "ember"}}})}};
}

json Routes::health_json() const {
    const SlotPoolStats s = jobs_.stats();
    const DecodeBatchStats d = jobs_.decode_stats();
    return json{{"status", "ok"},
                {"model", options_.model_id},
                {"slots", s.slots},
                {"slots_busy", s.busy},
                {"requests_waiting", s.waiting},
                // Of the busy slots, those compiling a request's grammar.
                {"requests_compiling", jobs_.compiling()},
                // The decode steps since the start (decode_batcher.h): tokens / steps is the
                // mean number of slots a step served.
                {"decode_batch",
                 {{"max", jobs_.decode_batch()},
                  {"steps", d.steps},
                  {"tokens", d.tokens},
                  {"largest", d.largest}}}};
}

template <typename F>
httplib::Server::Handler Routes::guarded(F handler) {
    return [handler](const httplib::Request& req, httplib::Response& res) {
        try {
            handler(req, res);
        } catch (const ApiError& e) {
            send_error(res, e);
        } catch (const ClientLeft&) {
            // Gone while waiting for a slot: its place went to the next in line. 499
            // (nginx's "client closed request") makes the request log say so.
            res.status = 499;
        } catch (const ContextOverflow& e) {
            send_error(res, ApiError(400, e.what(), "messages", "context_length_exceeded"));
        } catch (const std::bad_alloc&) {
            send_error(res, ApiError(500, "out of memory"));
        } catch (const std::exception& e) {
            send_error(res, ApiError(500, e.what()));
        }
    };
}

// httplib 0.11 holds a body to its payload limit only when a Content-Length announces it: a
// chunked body would be buffered whole, however large. So the POST routes read their body
// themselves and stop at the limit.
std::string Routes::read_body(httplib::Response& res, const httplib::ContentReader& read) const {
    const size_t limit = options_.max_body_bytes;
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
    Connection* conn = current_connection();
    // 413 from httplib: a Content-Length over its payload limit (the same limit).
    if (too_large || res.status == 413) {
        // The unread rest of the body would be taken for the next request.
        res.set_header("Connection", "close");
        if (conn != nullptr) conn->close_after_response();
        throw ApiError(413, "the request body is larger than the server's limit of " +
                                std::to_string(limit) + " bytes");
    }
    if (!complete) {
        res.set_header("Connection", "close");
        if (conn != nullptr) conn->close_after_response();
        if (http_.stopping()) throw shutting_down();
        if (conn != nullptr && conn->timed_out()) {
            throw ApiError(408, "the request body did not arrive within " +
                                    std::to_string(options_.body_timeout_seconds) +
                                    " s (--body-timeout)");
        }
        throw ApiError(400,
                       "the request body could not be read (malformed chunked "
                       "encoding, or the client stopped sending)");
    }
    return body;
}

template <typename F>
void Routes::post_route(const std::string& path, F handler) {
    http_.Post(path,
               guarded([handler](const auto& req, auto& res) { handler(req, req.body, res); }));
    http_.Post(path, [this, handler](const httplib::Request& req, httplib::Response& res,
                                     const httplib::ContentReader& read) {
        guarded([&](const httplib::Request& r, httplib::Response& s) {
            const std::string body = read_body(s, read);
            handler(r, body, s);
        })(req, res);
    });
}

bool Routes::authorized(const httplib::Request& req, httplib::Response& res) const {
    if (options_.api_key.empty()) return true;
    // Read from the header map itself: get_header_value() goes through a C string and would
    // stop at a NUL ("Bearer KEY\0junk" would pass as "Bearer KEY").
    const auto header = req.headers.find("Authorization");
    const std::string given = header == req.headers.end() ? std::string() : header->second;
    // "Bearer" in any case (RFC 9110: schemes are case-insensitive), then the whole rest
    // compared with the key, bytes past a NUL included, in constant time. A header of several
    // values or with a NUL anywhere never matches.
    const size_t space = given.find(' ');
    std::string scheme = given.substr(0, space);
    for (char& c : scheme) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const std::string token = space == std::string::npos ? std::string() : given.substr(space + 1);
    if (scheme == "bearer" && req.get_header_value_count("Authorization") == 1 &&
        given.find('\0') == std::string::npos && same_secret(token, options_.api_key)) {
        return true;
    }
    send_error(res, ApiError(401,
                             given.empty() ? "an API key is required (Authorization: Bearer KEY)"
                                           : "the API key is not valid",
                             {}, "invalid_api_key"));
    return false;
}

void Routes::install() {
    http_.set_payload_max_length(options_.max_body_bytes);
    http_.set_read_timeout(options_.read_timeout_seconds, 0);
    http_.set_write_timeout(options_.read_timeout_seconds, 0);
    http_.set_keep_alive_timeout(kKeepAliveSeconds);
    // httplib closes a kept-alive connection after 5 requests by default; a client that
    // sends many short requests would pay a new connection every fifth one.
    http_.set_keep_alive_max_count(1000);
    // httplib writes a response's headers and body in separate sends: with Nagle's
    // algorithm the body waits for the client's delayed ACK of the headers, about 40 ms
    // on every request after the first on a kept-alive connection.
    http_.set_tcp_nodelay(true);
    // Each connection has its own thread (a request that generates or waits for a slot
    // holds one), so /health and the 503s past --max-waiting never queue behind them.
    FrontDoorLimits limits;
    limits.header_time = std::chrono::seconds(options_.read_timeout_seconds);
    limits.body_time = std::chrono::seconds(options_.body_timeout_seconds);
    limits.stall = std::chrono::seconds(options_.read_timeout_seconds);
    limits.keep_alive = std::chrono::seconds(kKeepAliveSeconds);
    limits.max_body = options_.max_body_bytes;
    limits.max_connections = options_.max_connections;
    http_.set_limits(limits);
    http_.set_refusal_body(dump_json(
        error_json(ApiError(503, "the server has " + std::to_string(options_.max_connections) +
                                     " connections open (--max-connections); retry later"))));
    // Called once a request's headers are in, before its body is read.
    http_.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
        return authorized(req, res) ? httplib::Server::HandlerResponse::Unhandled
                                    : httplib::Server::HandlerResponse::Handled;
    });
    post_route("/v1/chat/completions",
               [this](const auto& q, const auto& b, auto& s) { handle_chat(q, b, s); });
    post_route("/v1/completions",
               [this](const auto& q, const auto& b, auto& s) { handle_completion(q, b, s); });
    http_.Get("/v1/models", guarded([this](const auto&, auto& s) {
                  s.set_content(dump_json(models_json()), kJson);
              }));
    http_.Get("/health", guarded([this](const auto&, auto& s) {
                  s.set_content(dump_json(health_json()), kJson);
              }));
    http_.Get("/v1/chat/completions", wrong_method("POST"));
    http_.Get("/v1/completions", wrong_method("POST"));
    http_.Post("/v1/models", wrong_method("GET"));
    http_.Post("/health", wrong_method("GET"));
    // Whatever httplib refuses itself (no route, a body too large, a malformed request
    // line) gets the API's error shape too.
    http_.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty() || res.status == 499) return;  // 499: no one is listening
        std::string message = "no such endpoint: " + req.method + " " + req.path;
        if (res.status == 413) message = "the request body is too large";
        if (res.status == 400) message = "malformed HTTP request";
        const Connection* conn = current_connection();
        if (conn != nullptr && conn->headers_too_long()) {
            res.status = 431;
            message = "the request line and headers are longer than " +
                      std::to_string(conn->limits().header_bytes) + " bytes";
        }
        send_error(res, ApiError(res.status, message));
    });
    http_.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
        log_line(options_, req.method + " " + req.path + " " + std::to_string(res.status));
    });
}

}  // namespace ember::serve
