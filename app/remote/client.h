// A client of any OpenAI-compatible server (ember serve, vLLM, llama.cpp's server, ollama):
// chat completions streamed as server-sent events, parsed as they arrive.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

namespace httplib {
class Client;
}

namespace ember::serve {

// "http://host:port/v1" split into what httplib connects to and the API's path prefix.
// Without a path the prefix is "/v1". Throws std::invalid_argument for a URL it cannot use.
struct ApiEndpoint {
    std::string origin;  // scheme://host[:port]
    std::string prefix;  // e.g. "/v1"
};
ApiEndpoint parse_api_url(const std::string& url);

// What one streamed request produced. `error` is empty when the server finished the reply
// (finish_reason set) and says what went wrong otherwise: the partial text is kept.
// What a remote stream may send: one line of it (an event) at most kMaxEventLineBytes, a
// whole reply at most kMaxRemoteReplyBytes; past either the reply stops with an error naming
// the limit. A reply that goes past the max_tokens asked is cut there (finish "length").
inline constexpr size_t kMaxEventLineBytes = size_t{16} << 20;
inline constexpr size_t kMaxRemoteReplyBytes = size_t{64} << 20;

struct StreamResult {
    int status = 0;  // HTTP status; 0 when no response came
    std::string content;
    std::string reasoning;  // reasoning_content deltas (thinking)
    std::string finish_reason;
    nlohmann::json usage;  // the usage chunk, when the server sent one
    nlohmann::json ember;  // ember serve's own account, when present
    std::string error;
    bool cancelled = false;    // on_delta returned false
    double ttft_seconds = -1;  // request sent to the first content or reasoning text
    double seconds = 0;
};

// Receives text as it arrives (`reasoning`: a reasoning_content delta); false cancels (the
// connection is closed).
using DeltaCallback = std::function<bool(const std::string& text, bool reasoning)>;

class ApiClient {
public:
    // `api_key` empty: no Authorization header.
    ApiClient(const std::string& url, std::string api_key, int read_timeout_seconds = 600);
    ~ApiClient();
    ApiClient(const ApiClient&) = delete;
    ApiClient& operator=(const ApiClient&) = delete;

    // POSTs `body` (stream: true is set) to PREFIX/`endpoint` ("chat/completions" or
    // "completions") and streams the reply.
    StreamResult stream(const std::string& endpoint, nlohmann::json body,
                        const DeltaCallback& on_delta);
    // GET PREFIX/models: the ids, or throws std::runtime_error saying why not.
    std::vector<std::string> model_ids();

    // From another thread: ends the request in progress (its connection is closed, so the
    // server stops generating) and reports it as cancelled. A call before the request has
    // started is forgotten when it starts; call it until the request returns.
    void cancel();

    const ApiEndpoint& endpoint() const { return endpoint_; }

private:
    ApiEndpoint endpoint_;
    std::string api_key_;
    std::unique_ptr<httplib::Client> http_;
    std::atomic<bool> cancel_requested_{false};
};

}  // namespace ember::serve
