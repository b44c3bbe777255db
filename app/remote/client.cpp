#include "app/remote/client.h"

#include <fcntl.h>
#include <httplib.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>

#include "engine/util/bounded_json.h"

namespace ember::serve {

using json = nlohmann::json;

namespace {
constexpr int kConnectTimeoutSeconds = 10;
}  // namespace

ApiEndpoint parse_api_url(const std::string& url) {
    const size_t scheme_end = url.find("://");
    if (scheme_end == std::string::npos ||
        (url.compare(0, scheme_end, "http") != 0 && url.compare(0, scheme_end, "https") != 0)) {
        throw std::invalid_argument("'" + url +
                                    "' is not an http:// or https:// URL (e.g. "
                                    "http://127.0.0.1:8080/v1)");
    }
    const size_t path_start = url.find('/', scheme_end + 3);
    ApiEndpoint e;
    e.origin = url.substr(0, path_start);
    if (e.origin.size() <= scheme_end + 3)
        throw std::invalid_argument("'" + url + "' names no host");
    std::string path = path_start == std::string::npos ? std::string() : url.substr(path_start);
    while (!path.empty() && path.back() == '/') path.pop_back();
    e.prefix = path.empty() ? "/v1" : path;
    return e;
}

ApiClient::ApiClient(const std::string& url, std::string api_key, int read_timeout_seconds)
    : endpoint_(parse_api_url(url)), api_key_(std::move(api_key)) {
    http_ = std::make_unique<httplib::Client>(endpoint_.origin);
    http_->set_read_timeout(read_timeout_seconds, 0);
    http_->set_connection_timeout(kConnectTimeoutSeconds, 0);
    http_->set_keep_alive(true);
    if (!api_key_.empty()) http_->set_bearer_token_auth(api_key_);
}

ApiClient::~ApiClient() = default;

namespace {

// The error message of an error body, or the body itself (cut short).
std::string error_text(int status, const std::string& body) {
    try {
        const json j = parse_json_bounded<json>(body, {}, "the error body", InvalidJson::Throw);
        if (j.contains("error")) {
            const json& e = j["error"];
            if (e.is_string()) return e.get<std::string>();
            if (e.is_object() && e.contains("message") && e["message"].is_string()) {
                return e["message"].get<std::string>();
            }
        }
    } catch (const std::exception&) {
    }
    return "HTTP " + std::to_string(status) + (body.empty() ? "" : ": " + body.substr(0, 300));
}

// Why a TCP connection to `origin` ("http://host:port") fails, in the system's words
// ("connection refused", "no route to host"); empty when it does not fail now. httplib only
// says "Connection" and keeps no errno, so the connection is tried once more, briefly.
std::string connect_failure(const std::string& origin) {
    const bool https = origin.starts_with("https://");
    std::string host = origin.substr(origin.find("://") + 3);
    std::string port = https ? "443" : "80";
    if (host.starts_with("[")) {  // [::1]:8080
        const size_t close = host.find(']');
        if (close != std::string::npos) {
            if (close + 1 < host.size() && host[close + 1] == ':') port = host.substr(close + 2);
            host = host.substr(1, close - 1);
        }
    } else if (const size_t colon = host.rfind(':'); colon != std::string::npos) {
        port = host.substr(colon + 1);
        host = host.substr(0, colon);
    }
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (const int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0) {
        return "cannot resolve " + host + " (" + ::gai_strerror(rc) + ")";
    }
    std::string reason;
    for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
        const int fd =
            ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) continue;
        int error = 0;
        if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
            error = errno;
            if (error == EINPROGRESS) {
                pollfd p{fd, POLLOUT, 0};
                constexpr int kProbeMs = 3000;
                if (::poll(&p, 1, kProbeMs) <= 0) {
                    error = ETIMEDOUT;
                } else {
                    socklen_t size = sizeof error;
                    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size);
                }
            }
        }
        ::close(fd);
        if (error == 0) {
            reason.clear();
            break;
        }
        if (reason.empty()) {
            reason = std::strerror(error);
            if (!reason.empty()) reason[0] = static_cast<char>(std::tolower(reason[0]));
        }
    }
    ::freeaddrinfo(found);
    return reason;
}

// What went wrong with a request that got no response, in words a user can act on.
std::string failure_reason(httplib::Error error, const std::string& origin) {
    switch (error) {
        case httplib::Error::ConnectionTimeout:
            return "timed out (no connection within " + std::to_string(kConnectTimeoutSeconds) +
                   " s)";
        case httplib::Error::Read:
            return "no answer (the server closed the connection or timed out)";
        case httplib::Error::Connection: {
            const std::string why = connect_failure(origin);
            return why.empty() ? "the connection failed" : why;
        }
        default: {
            std::string text = httplib::to_string(error);
            if (!text.empty()) text[0] = static_cast<char>(std::tolower(text[0]));
            return text;
        }
    }
}

}  // namespace

StreamResult ApiClient::stream(const std::string& endpoint, json body,
                               const DeltaCallback& on_delta) {
    cancel_requested_.store(false);
    body["stream"] = true;
    if (!body.contains("stream_options")) body["stream_options"] = {{"include_usage", true}};
    StreamResult result;
    const auto start = std::chrono::steady_clock::now();
    auto seconds_since_start = [&] {
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    };
    std::string pending;   // received bytes not yet split into lines
    std::string raw_body;  // kept (bounded) for an error response
    bool done = false;
    // The reply's length as asked (-n): the client holds the server to it, one piece of text
    // an event counting as a token, whatever the server does.
    const int64_t max_pieces = body.contains("max_tokens") && body["max_tokens"].is_number_integer()
                                   ? body["max_tokens"].get<int64_t>()
                                   : -1;
    int64_t pieces = 0;
    bool at_limit = false;
    auto handle_line = [&](const std::string& line) -> bool {
        if (line.rfind("data:", 0) != 0) return true;  // comments, event names, blank lines
        std::string data = line.substr(5);
        if (!data.empty() && data[0] == ' ') data.erase(0, 1);
        if (data == "[DONE]") {
            done = true;
            return true;
        }
        json event;
        try {
            event = parse_json_bounded<json>(data, {}, "the event", InvalidJson::Throw);
        } catch (const std::exception&) {
            result.error = "the server sent an event that is not JSON: " + data.substr(0, 200);
            return false;
        }
        if (event.contains("error")) {
            result.error = "the server reported: " + error_text(500, data);
            return false;
        }
        if (event.contains("usage") && event["usage"].is_object()) result.usage = event["usage"];
        if (event.contains("ember")) result.ember = event["ember"];
        if (!event.contains("choices") || !event["choices"].is_array()) return true;
        for (const auto& choice : event["choices"]) {
            if (!choice.is_object()) continue;
            if (choice.contains("finish_reason") && choice["finish_reason"].is_string()) {
                result.finish_reason = choice["finish_reason"].get<std::string>();
            }
            const json* delta = choice.contains("delta") ? &choice["delta"] : &choice;
            for (const char* field : {"reasoning_content", "reasoning", "content", "text"}) {
                if (!delta->contains(field) || !(*delta)[field].is_string()) continue;
                const std::string text = (*delta)[field].get<std::string>();
                if (text.empty()) continue;
                const bool reasoning = field[0] == 'r';
                // The answer's pieces count (a thinking reply's reasoning has its own budget
                // on Ember's server; the byte cap below bounds it whatever the server).
                if (!reasoning && max_pieces > 0 && ++pieces > max_pieces) {
                    result.finish_reason = "length";  // the server went past -n: cut here
                    at_limit = true;
                    return false;
                }
                if (result.content.size() + result.reasoning.size() + text.size() >
                    kMaxRemoteReplyBytes) {
                    result.error = "the server's reply passed " +
                                   std::to_string(kMaxRemoteReplyBytes >> 20) +
                                   " MiB (the limit on a remote reply); it stops here";
                    return false;
                }
                (reasoning ? result.reasoning : result.content) += text;
                if (result.ttft_seconds < 0) result.ttft_seconds = seconds_since_start();
                if (on_delta && !on_delta(text, reasoning)) {
                    result.cancelled = true;
                    return false;
                }
            }
        }
        return true;
    };

    httplib::Request req;
    req.method = "POST";
    req.path = endpoint_.prefix + "/" + endpoint;
    req.set_header("Content-Type", "application/json");
    req.set_header("Accept", "text/event-stream");
    req.body = body.dump(-1, ' ', false, json::error_handler_t::replace);
    int status = 0;
    req.response_handler = [&](const httplib::Response& response) {
        status = response.status;
        return !cancel_requested_.load();
    };
    req.content_receiver = [&](const char* data, size_t length, uint64_t, uint64_t) {
        if (cancel_requested_.load()) return false;
        if (status != 200) {
            if (raw_body.size() < 65536) raw_body.append(data, length);
            return true;
        }
        pending.append(data, length);
        size_t eol;
        while ((eol = pending.find('\n')) != std::string::npos) {
            std::string line = pending.substr(0, eol);
            pending.erase(0, eol + 1);
            if (!line.empty() && line.back() == '\r') line.pop_back();
            if (!handle_line(line)) return false;
        }
        if (pending.size() > kMaxEventLineBytes) {
            result.error = "the server sent an event line longer than " +
                           std::to_string(kMaxEventLineBytes >> 20) +
                           " MiB (the limit on one line of a stream); the reply stops here";
            return false;
        }
        return true;
    };
    httplib::Result res = http_->send(req);
    result.seconds = seconds_since_start();
    result.status = status;
    if (cancel_requested_.load()) {
        result.cancelled = true;
        result.error.clear();
    }
    if (at_limit) return result;  // complete as far as -n asked
    if (result.cancelled || !result.error.empty()) return result;
    if (!res) {
        result.error = status == 0 ? "cannot reach " + endpoint_.origin + ": " +
                                         failure_reason(res.error(), endpoint_.origin)
                                   : "the connection was lost mid-reply (" +
                                         failure_reason(res.error(), endpoint_.origin) + ")";
        return result;
    }
    if (status != 200) {
        result.error = error_text(status, raw_body);
        return result;
    }
    if (!pending.empty()) handle_line(pending);
    if (result.finish_reason.empty() && !done) {
        result.error = "the server closed the reply before it finished";
    }
    return result;
}

void ApiClient::cancel() {
    cancel_requested_.store(true);
    http_->stop();  // shuts the socket down; httplib allows this from another thread
}

std::vector<std::string> ApiClient::model_ids() {
    auto res = http_->Get((endpoint_.prefix + "/models").c_str());
    if (!res) {
        throw std::runtime_error("cannot reach " + endpoint_.origin + ": " +
                                 failure_reason(res.error(), endpoint_.origin));
    }
    if (res->status != 200) throw std::runtime_error(error_text(res->status, res->body));
    std::vector<std::string> ids;
    try {
        // Parsed into a variable first: a range-for over a member of a temporary would
        // outlive the temporary.
        const json list =
            parse_json_bounded<json>(res->body, {}, "the model list", InvalidJson::Throw);
        for (const auto& m : list.at("data")) ids.push_back(m.at("id").get<std::string>());
    } catch (const std::exception& e) {
        throw std::runtime_error(std::string("the model list is not what the API returns: ") +
                                 e.what());
    }
    return ids;
}

}  // namespace ember::serve
