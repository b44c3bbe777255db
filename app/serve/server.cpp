#include "app/serve/server.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <mutex>
#include <optional>

#include "app/serve/front_door.h"
#include "app/serve/slots.h"
#include "engine/generate/constrained.h"
#include "engine/generate/harmony.h"
#include "engine/generate/tool_calls.h"
#include "engine/model/model.h"
#include "engine/tokenizer/tokenizer.h"

namespace ember::serve {

using json = nlohmann::json;

namespace {

constexpr const char* kJson = "application/json";

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

// An idle kept-alive connection is held this long (seconds).
constexpr int kKeepAliveSeconds = 5;

std::string sse_event(const json& j) {
    return "data: " + dump_json(j) + "\n\n";
}

}  // namespace

// Thrown when a request's client hangs up while it waits for a slot.
struct ClientLeft {};

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
    OutputFormat response_format;                     // as the request gave it
    std::shared_ptr<const grammar::Grammar> grammar;  // ... compiled (null: free text)
    ToolOptions tools;                                // offered functions (chat)
    ToolCallFormat tool_format = ToolCallFormat::None;  // the template's, for tool_grammar
    // The grammar a reply that must call is held to (tool_choice required or a function), or
    // in auto mode the one each call is held to once it starts (null: none).
    std::shared_ptr<const grammar::Grammar> tool_grammar;
    std::string id;
    int64_t created = 0;
};

struct Server::Impl {
    const Model& model;
    ThreadPool& pool;
    ConversationOptions conversation_options;
    PrefixStore* store;
    ServerOptions options;
    FrontDoor http;
    std::unique_ptr<Conversation> renderer;  // renders and tokenizes prompts (under its mutex)
    std::mutex renderer_mutex;
    std::unique_ptr<SlotPool> slots;
    ReplyIds reply_ids{1024};
    std::atomic<uint64_t> next_id{0};
    std::atomic<int> compiling{0};  // requests compiling their grammar (each holds a slot)
    std::string file_name;
    int port = 0;
    // The vocabulary for response_format's grammar mask, built by the first request that
    // needs it and shared by all.
    std::once_flag token_trie_once;
    std::shared_ptr<const grammar::TokenTrie> token_trie;
    // The same for a harmony model's forced tool calls (its markers spelled in the grammar).
    std::once_flag harmony_trie_once;
    std::shared_ptr<const grammar::TokenTrie> harmony_trie;

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

    // The prompt's tokens as the slot will render them; checks the tools against the model's
    // tool-call format (their grammar is compiled later, by compile_grammars).
    std::vector<int32_t> chat_prompt(const std::vector<ChatMessage>& messages, Job& job) {
        std::lock_guard lock(renderer_mutex);
        renderer->clear();
        try {
            renderer->set_tools(job.tools);
            job.tool_format = renderer->tool_call_format();
        } catch (const ToolError& e) {
            throw ApiError(400, e.what(), e.field());
        }
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
        job.response_format = s.response_format;
        if (job.response_format.kind != OutputFormatKind::Free && chat && renderer->harmony()) {
            throw ApiError(400,
                           "'response_format' is not supported for harmony (gpt-oss) models",
                           "response_format");
        }
        job.id = std::string(chat ? "chatcmpl-" : "cmpl-") + std::to_string(++next_id);
        job.created = static_cast<int64_t>(std::time(nullptr));
        return job;
    }

    // Runs the job on a slot; `on_text` gets the reply as it is generated (false: stop).
    TurnResult generate(Job& job, SlotLease& lease, const TextCallback& on_text,
                        const ToolCallCallback& on_tool_call = {}) {
        Conversation& conv = lease.conversation();
        EngineTurn turn(slots->engine_turn());
        conv.set_stop_strings(job.stop);
        Sampler sampler(job.sampling);
        GenerateOptions gen;
        gen.max_tokens = job.max_tokens;
        gen.ignore_eos = job.ignore_eos;
        gen.speculation.enabled = options.speculation;
        gen.speculation.draft_max = options.draft_max;
        std::optional<grammar::GrammarConstraint> constraint;
        if (job.tool_grammar && conv.tool_call_format() == ToolCallFormat::Harmony) {
            std::call_once(harmony_trie_once, [this] {
                const auto markers = HarmonyTokens::find(model.tokenizer());
                if (markers) harmony_trie = make_harmony_token_trie(model.tokenizer(), *markers);
            });
            if (!harmony_trie) throw ApiError(500, "the model's vocabulary lost its harmony markers");
            constraint.emplace(job.tool_grammar, harmony_trie);
            gen.constraint = &*constraint;
        } else if (job.grammar || job.tool_grammar) {
            std::call_once(token_trie_once,
                           [this] { token_trie = make_token_trie(model.tokenizer()); });
            constraint.emplace(job.grammar ? job.grammar : job.tool_grammar, token_trie);
            gen.constraint = &*constraint;
        }
        // Text goes to the client with the turn given up, so a slow reader holds up no one,
        // and the other generating slots take their turns in between.
        // A server told to stop cancels every generation at its next piece of text.
        auto pass_turn = [&](const std::string& text, TextKind kind) {
            turn.release();
            const bool go_on = !http.stopping() && on_text(text, kind);
            turn.acquire();
            return go_on;
        };
        TurnResult result;
        if (job.chat) {
            conv.clear();
            conv.set_tools(job.tools);  // every request sets its own (none included)
            for (auto& m : job.messages) conv.add_message(std::move(m));
            auto pass_call = [&](const ToolCallDelta& delta) {
                turn.release();
                const bool go_on = !http.stopping() && (!on_tool_call || on_tool_call(delta));
                turn.acquire();
                return go_on;
            };
            result = conv.respond(sampler, gen, pass_turn, pass_call);
            if (!conv.messages().empty() && result.tool_calls.empty()) {
                const ChatMessage& reply = conv.messages().back();
                reply_ids.remember(reply.content, reply.ids);
            }
        } else {
            result = conv.complete(job.prompt, sampler, gen, pass_turn);
        }
        return result;
    }

    // Compiles the request's response_format and its tools' call grammar, once it holds a
    // slot: the work is one of the --parallel generations /health counts as busy, bounded by
    // --max-waiting like them, stops at the compile time limit (400), and stops when the
    // client hangs up or the server stops (the budget's cancel check polls both).
    void compile_grammars(Job& job) {
        if (job.response_format.kind == OutputFormatKind::Free && !job.tools.active()) return;
        Connection* conn = current_connection();
        grammar::CompileLimits limits;
        limits.max_time = options.limits.compile_time;
        limits.cancelled = [this, conn] {
            return http.stopping() || (conn != nullptr && conn->client_closed());
        };
        grammar::CompileBudget budget(std::move(limits));
        ++compiling;
        struct Done {
            std::atomic<int>& n;
            ~Done() { --n; }
        } done{compiling};
        try {
            job.grammar = compile_response_format(job.response_format, &budget);
            // A forced call is held from the reply's start; in auto mode a call is held from
            // its start marker on.
            if (job.tools.active()) {
                const ToolCallFormat f = job.tool_format;
                job.tool_grammar = job.tools.forces_call()
                                       ? tool_call_grammar(f, job.tools, &budget)
                                       : tool_call_lazy_grammar(f, job.tools, &budget);
            }
        } catch (const grammar::CompileCancelled&) {
            if (http.stopping()) throw shutting_down();
            log(job.id + " client left while its grammar was compiled; compiling stopped");
            throw ClientLeft{};
        } catch (const ToolError& e) {
            throw ApiError(400, e.what(), e.field());
        }
    }

    SlotLease take_slot(const std::vector<int32_t>& prompt) {
        Connection* conn = current_connection();
        bool gone = false;
        std::optional<SlotLease> lease = slots->acquire(prompt, [conn, &gone] {
            gone = conn != nullptr && conn->client_closed();
            return gone;
        });
        if (!lease && slots->closed()) throw shutting_down();
        if (!lease && gone) throw ClientLeft{};
        if (!lease) {
            throw ApiError(503, "the server is busy: " + std::to_string(options.max_waiting) +
                                    " requests already wait for a slot; retry later");
        }
        return std::move(*lease);
    }

    static ApiError shutting_down() {
        return ApiError(503, "the server is shutting down; the request was cancelled");
    }

    json choice_json(const Job& job, const TurnResult& r) const {
        json choice = {{"index", 0}, {"finish_reason", finish_reason_text(r)}};
        if (job.chat) {
            json message = {{"role", "assistant"}, {"content", r.reply}};
            if (!r.tool_calls.empty()) {
                message["tool_calls"] = tool_calls_json(r.tool_calls);
                if (r.reply.empty()) message["content"] = nullptr;  // as OpenAI's API answers
            }
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

    void respond_plain(Job& job, httplib::Response& res) {
        SlotLease lease = take_slot(job.prompt);
        compile_grammars(job);
        // Nothing is written until the reply is done, so a client that hangs up is only
        // seen by looking at its socket; each piece of text is a chance to stop.
        Connection* conn = current_connection();
        bool client_gone = false;
        const TurnResult r = generate(job, lease, [&](const std::string&, TextKind) {
            client_gone = conn != nullptr && conn->client_closed();
            return !client_gone;
        });
        if (r.finish == FinishReason::Cancelled && !client_gone && http.stopping()) {
            log(job.id + " cancelled after " + std::to_string(r.ids.size()) +
                " tokens: the server is stopping (slot " + std::to_string(lease.index()) + ")");
            throw shutting_down();
        }
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
        compile_grammars(*job);  // before the headers too: a bad schema is still a 400
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
            }, [&](const ToolCallDelta& delta) {
                const json piece = {{"tool_calls", tool_call_delta_json(delta)}};
                if (!send(sse_event(delta_chunk(job, piece, nullptr)))) {
                    client_gone = true;
                    return false;
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
        if (r.finish == FinishReason::Cancelled && http.stopping()) {
            // What was sent stands; the stream ends with an error saying why it is cut short.
            log(job.id + " cancelled after " + std::to_string(r.ids.size()) +
                " tokens: the server is stopping (slot " + std::to_string(lease.index()) + ")");
            send(sse_event(error_json(shutting_down())));
            send("data: [DONE]\n\n");
            sink.done();
            return true;
        }
        send(sse_event(delta_chunk(job, json::object(), finish_reason_text(r))));
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
            std::to_string(r.ids.size()) + " generated, " + finish_reason_text(r) +
            (r.tool_calls.empty() ? std::string() : ", " + std::to_string(r.tool_calls.size()) +
                                                       " tool call(s)"));
        for (const auto& w : r.warnings) log(job.id + " warning: " + w);
    }

    void handle_chat(const httplib::Request&, const std::string& body, httplib::Response& res) {
        ChatRequest r = parse_chat_request(body, options.limits);
        check_model(r.model);
        auto job = std::make_shared<Job>(make_job(true, r.sampling));
        job->tools = std::move(r.tools);
        reply_ids.attach(r.messages);
        job->prompt = chat_prompt(r.messages, *job);
        job->max_tokens = max_tokens_for(r.sampling.max_tokens, job->prompt.size());
        job->messages = std::move(r.messages);
        if (job->stream) {
            respond_stream(job, res);
        } else {
            respond_plain(*job, res);
        }
    }

    void handle_completion(const httplib::Request&, const std::string& body,
                           httplib::Response& res) {
        CompletionRequest r = parse_completion_request(body, options.limits);
        check_model(r.model);
        auto job = std::make_shared<Job>(make_job(false, r.sampling));
        job->prompt = completion_prompt(r.prompt);
        job->max_tokens = max_tokens_for(r.sampling.max_tokens, job->prompt.size());
        if (job->stream) {
            respond_stream(job, res);
        } else {
            respond_plain(*job, res);
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
                    {"requests_waiting", s.waiting},
                    // Of the busy slots, those compiling a request's grammar.
                    {"requests_compiling", compiling.load()}};
    }

    // Runs a handler, turning its errors into API errors (never an escaped exception).
    template <typename F>
    httplib::Server::Handler guarded(F handler) {
        return [this, handler](const httplib::Request& req, httplib::Response& res) {
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
            if (http.stopping()) throw shutting_down();
            if (conn != nullptr && conn->timed_out()) {
                throw ApiError(408, "the request body did not arrive within " +
                                        std::to_string(options.body_timeout_seconds) +
                                        " s (--body-timeout)");
            }
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
        // Each connection has its own thread (a request that generates or waits for a slot
        // holds one), so /health and the 503s past --max-waiting never queue behind them.
        FrontDoorLimits limits;
        limits.header_time = std::chrono::seconds(options.read_timeout_seconds);
        limits.body_time = std::chrono::seconds(options.body_timeout_seconds);
        limits.stall = std::chrono::seconds(options.read_timeout_seconds);
        limits.keep_alive = std::chrono::seconds(kKeepAliveSeconds);
        limits.max_body = options.max_body_bytes;
        limits.max_connections = options.max_connections;
        http.set_limits(limits);
        http.set_refusal_body(dump_json(error_json(
            ApiError(503, "the server has " + std::to_string(options.max_connections) +
                              " connections open (--max-connections); retry later"))));
        // Called once a request's headers are in, before its body is read.
        http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
            if (!options.api_key.empty()) {
                // Read from the header map itself: get_header_value() goes through a C string
                // and would stop at a NUL ("Bearer KEY\0junk" would pass as "Bearer KEY").
                const auto header = req.headers.find("Authorization");
                const std::string given =
                    header == req.headers.end() ? std::string() : header->second;
                // "Bearer" in any case (RFC 9110: schemes are case-insensitive), then the
                // whole rest compared with the key, bytes past a NUL included, in constant
                // time. A header of several values or with a NUL anywhere never matches.
                const size_t space = given.find(' ');
                std::string scheme = given.substr(0, space);
                for (char& c : scheme) {
                    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
                }
                const std::string token =
                    space == std::string::npos ? std::string() : given.substr(space + 1);
                if (scheme == "bearer" && req.get_header_value_count("Authorization") == 1 &&
                    given.find('\0') == std::string::npos && same_secret(token, options.api_key)) {
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
        http.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
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
        http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
            log(req.method + " " + req.path + " " + std::to_string(res.status));
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
    impl_->http.widen_listen_queue();
    impl_->port = port;
    return port;
}

void Server::run() {
    impl_->http.listen_after_bind();
}

void Server::stop() {
    // No new connection, no new slot; every generation stops at its next piece of text.
    impl_->slots->close();
    impl_->http.begin_stop();
}

}  // namespace ember::serve
