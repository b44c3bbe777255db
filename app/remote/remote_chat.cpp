#include "app/remote/remote_chat.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <thread>

namespace ember::app {

using json = nlohmann::json;

namespace {

constexpr const char* kFingerprintPrefix = "remote ";

// How often a stop request is looked for while the server has sent nothing: short enough that
// Ctrl-C feels immediate, long enough to cost nothing.
constexpr auto kStopPollInterval = std::chrono::milliseconds(20);

// Polls `stop_requested` on its own thread while a request runs and cancels the request (the
// connection is closed) once it says so. The request itself blocks in the HTTP client, where
// no text callback runs until the server sends something.
class StopWatcher {
public:
    StopWatcher(serve::ApiClient& client, const ui::StopRequested& stop_requested) {
        if (!stop_requested) return;
        thread_ = std::thread([this, &client, stop_requested] {
            std::unique_lock lock(mutex_);
            while (!done_) {
                // Cancelled again on every poll: a cancel before the request started is
                // forgotten when it starts.
                if (stop_requested()) client.cancel();
                wake_.wait_for(lock, kStopPollInterval);
            }
        });
    }
    ~StopWatcher() {
        if (!thread_.joinable()) return;
        {
            std::lock_guard lock(mutex_);
            done_ = true;
        }
        wake_.notify_one();
        thread_.join();
    }
    StopWatcher(const StopWatcher&) = delete;
    StopWatcher& operator=(const StopWatcher&) = delete;

private:
    std::mutex mutex_;
    std::condition_variable wake_;
    bool done_ = false;
    std::thread thread_;
};

int64_t usage_number(const json& usage, const char* field, const char* inner = nullptr) {
    if (!usage.is_object() || !usage.contains(field)) return -1;
    const json* value = &usage[field];
    if (inner != nullptr) {
        if (!value->is_object() || !value->contains(inner)) return -1;
        value = &(*value)[inner];
    }
    return value->is_number_integer() ? value->get<int64_t>() : -1;
}

FinishReason finish_from(const serve::StreamResult& r) {
    if (r.cancelled || !r.error.empty()) return FinishReason::Cancelled;
    if (r.finish_reason == "length") return FinishReason::Length;
    return FinishReason::Stop;  // "stop", and what other servers say for a reply that ended
}

// The stats a chat turn records, from what the server told: its usage chunk (when sent) and
// the times seen here. Token ids stay empty: the server's tokens are not ours to know.
TurnResult turn_from(const serve::StreamResult& r, int64_t text_pieces) {
    TurnResult t;
    t.reply = r.content;
    t.thinking = r.reasoning;
    t.finish = finish_from(r);
    const int64_t prompt = usage_number(r.usage, "prompt_tokens");
    const int64_t completion = usage_number(r.usage, "completion_tokens");
    const int64_t cached = usage_number(r.usage, "prompt_tokens_details", "cached_tokens");
    const int64_t reasoning =
        usage_number(r.usage, "completion_tokens_details", "reasoning_tokens");
    t.prompt_tokens = std::max<int64_t>(0, prompt);
    t.tokens_reused = std::max<int64_t>(0, cached);
    t.tokens_evaluated = std::max<int64_t>(0, t.prompt_tokens - t.tokens_reused);
    // Without a usage chunk (a cancelled or broken reply) each streamed piece counts as one
    // token, as servers send them.
    t.stats.generated_tokens = completion >= 0 ? completion : text_pieces;
    t.stats.prompt_tokens = t.prompt_tokens;
    if (reasoning >= 0) {
        t.thinking_tokens = reasoning;
        t.answer_tokens = std::max<int64_t>(0, t.stats.generated_tokens - reasoning);
    } else {
        t.answer_tokens = t.stats.generated_tokens;
    }
    if (!t.thinking.empty()) t.thinking_end = ThinkingEnd::Model;
    const double ttft = r.ttft_seconds >= 0 ? r.ttft_seconds : r.seconds;
    t.stats.ttft_seconds = ttft;
    t.stats.prefill_seconds = ttft;
    t.stats.decode_seconds = std::max(0.0, r.seconds - ttft);
    return t;
}

}  // namespace

std::string remote_fingerprint(const serve::ApiEndpoint& endpoint, const std::string& model) {
    return kFingerprintPrefix + endpoint.origin + endpoint.prefix + " " + model;
}

std::optional<RemoteIdentity> parse_remote_fingerprint(const std::string& fingerprint) {
    const std::string prefix = kFingerprintPrefix;
    if (fingerprint.rfind(prefix, 0) != 0) return std::nullopt;
    const size_t space = fingerprint.find(' ', prefix.size());
    if (space == std::string::npos) return std::nullopt;
    RemoteIdentity id;
    id.url = fingerprint.substr(prefix.size(), space - prefix.size());
    id.model = fingerprint.substr(space + 1);
    if (id.url.empty() || id.model.empty()) return std::nullopt;
    return id;
}

std::string api_key_from_env(const std::string& variable) {
    if (variable.empty()) return {};
    const char* value = std::getenv(variable.c_str());
    if (value == nullptr || *value == '\0') {
        throw std::runtime_error("--api-key-env " + variable +
                                 ": the environment variable is not set (or empty)");
    }
    return value;
}

RemoteChatEngine::RemoteChatEngine(serve::ApiClient& client, RemoteChatOptions options)
    : client_(client), options_(std::move(options)) {}

void RemoteChatEngine::set_system(std::string text) {
    if (!messages_.empty() && messages_.front().role == "system") {
        messages_.front().content = std::move(text);
    } else {
        messages_.insert(messages_.begin(), ChatMessage{"system", std::move(text), {}, {}});
    }
}

void RemoteChatEngine::pop_message() {
    if (!messages_.empty()) messages_.pop_back();
}

bool RemoteChatEngine::pop_assistant() {
    if (messages_.empty() || messages_.back().role != "assistant") return false;
    messages_.pop_back();
    return true;
}

void RemoteChatEngine::set_thinking(bool on, int64_t /*budget*/) {
    // A thinking budget is the server's to enforce; the switch goes with every request.
    options_.thinking = on;
}

void RemoteChatEngine::set_context(int64_t /*tokens*/) {
    throw std::invalid_argument("the server decides the context of a remote model");
}

json RemoteChatEngine::request_body(const SamplingParams& p, const GenerateOptions& o) const {
    json messages = json::array();
    for (const auto& m : messages_) {
        // Reasoning is not sent back, as the local chat does not render it into the prompt.
        messages.push_back({{"role", m.role}, {"content", m.content}});
    }
    json body = {{"model", options_.model},
                 {"messages", std::move(messages)},
                 {"temperature", p.temperature},
                 {"top_p", p.top_p},
                 {"top_k", p.top_k},
                 {"min_p", p.min_p},
                 {"repeat_penalty", p.repeat_penalty},
                 {"presence_penalty", p.presence_penalty},
                 {"frequency_penalty", p.frequency_penalty},
                 {"seed", p.seed}};
    if (o.max_tokens > 0) body["max_tokens"] = o.max_tokens;
    if (o.ignore_eos) body["ignore_eos"] = true;
    if (!options_.stops.empty()) body["stop"] = options_.stops;
    if (!options_.reasoning_effort.empty()) body["reasoning_effort"] = options_.reasoning_effort;
    if (options_.thinking) {
        body["chat_template_kwargs"] = {{"enable_thinking", *options_.thinking}};
    }
    return body;
}

ui::ChatReply RemoteChatEngine::respond(Sampler& sampler, const GenerateOptions& options,
                                        const TextCallback& on_text,
                                        const ui::StopRequested& stop_requested) {
    if (messages_.empty() || messages_.back().role != "user") {
        throw std::runtime_error("the conversation does not end with a prompt to answer");
    }
    int64_t pieces = 0;
    serve::StreamResult r;
    {
        const StopWatcher watcher(client_, stop_requested);
        r = client_.stream(
            "chat/completions", request_body(sampler.params(), options),
            [&](const std::string& text, bool reasoning) {
                ++pieces;
                return !on_text || on_text(text, reasoning ? TextKind::Thinking : TextKind::Answer);
            });
    }
    const bool got_text = !r.content.empty() || !r.reasoning.empty();
    // Nothing arrived: no reply to keep; the caller reports the error and the messages stay
    // as they were. (A reply stopped before its first text is an empty cancelled reply.)
    if (!r.error.empty() && !got_text) throw std::runtime_error(r.error);
    ui::ChatReply reply;
    reply.turn = turn_from(r, pieces);
    reply.interruption = r.error;
    const int64_t total = usage_number(r.usage, "total_tokens");
    context_used_ =
        total >= 0 ? total : reply.turn.prompt_tokens + reply.turn.stats.generated_tokens;
    messages_.push_back(ChatMessage{"assistant", r.content, {}, r.reasoning});
    return reply;
}

}  // namespace ember::app
