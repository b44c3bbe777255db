// A real `ember serve` on a free loopback port, for the server's tests (no mock servers).
#pragma once

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/support/fixtures.h"
#include "tests/support/process.h"

namespace ember::test {

class ServeProcess {
public:
    // Starts `ember serve --port 0 ARGS...` and waits until it listens; `port()` is 0 when it
    // did not start (the log says why). Without --db or --no-db in ARGS the server's database
    // is one beside the log, never the user's default (a test must not read or migrate it).
    ServeProcess(const std::vector<std::string>& args, const std::string& log_path) {
        std::vector<std::string> argv = {ember_binary(), "serve", "--port", "0"};
        argv.insert(argv.end(), args.begin(), args.end());
        const auto names = [&](const char* flag) {
            return std::find(args.begin(), args.end(), flag) != args.end();
        };
        if (!names("--db") && !names("--no-db")) {
            argv.push_back("--db");
            argv.push_back(log_path + ".db");
        }
        process_ = std::make_unique<BackgroundProcess>(argv, log_path);
        const std::string line = process_->wait_for_line("listening on http://", 60);
        const size_t colon = line.rfind(':', line.find(" (model"));
        if (!line.empty() && colon != std::string::npos)
            port_ = std::atoi(line.c_str() + colon + 1);
    }

    int port() const { return port_; }
    std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
    BackgroundProcess& process() { return *process_; }
    std::unique_ptr<httplib::Client> client(int read_timeout_seconds = 120) const {
        auto c = std::make_unique<httplib::Client>("127.0.0.1", port_);
        c->set_read_timeout(read_timeout_seconds, 0);
        c->set_connection_timeout(5, 0);
        return c;
    }

private:
    std::unique_ptr<BackgroundProcess> process_;
    int port_ = 0;
};

// The JSON objects of a server-sent-event body ("data: {...}" lines, [DONE] excluded).
// A raw TCP connection to 127.0.0.1:`port` (the caller closes it); -1 when it cannot connect.
inline int connect_loopback(int port) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

inline std::vector<nlohmann::json> sse_events(const std::string& body) {
    std::vector<nlohmann::json> events;
    for (const auto& line : split_lines(body)) {
        if (line.rfind("data: ", 0) != 0 || line == "data: [DONE]") continue;
        events.push_back(nlohmann::json::parse(line.substr(6)));
    }
    return events;
}

// A POST request of a JSON `body` to `path`, as raw HTTP/1.1 bytes.
inline std::string post_raw(const std::string& path, const std::string& body) {
    return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" +
           "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

// Sends all of `data` on `fd`; false when the peer closed or reset first.
inline bool send_all(int fd, const std::string& data) {
    size_t sent = 0;
    while (sent < data.size()) {
        const ssize_t n = send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
        if (n <= 0) return false;
        sent += static_cast<size_t>(n);
    }
    return true;
}

// Everything the server sends on `fd` until it closes the connection or `timeout_ms` passes.
inline std::string read_until_closed(int fd, int timeout_ms) {
    std::string got;
    char buf[8192];
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (std::chrono::steady_clock::now() < deadline) {
        pollfd p{fd, POLLIN, 0};
        if (poll(&p, 1, 20) <= 0) continue;
        const ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n <= 0) break;
        got.append(buf, static_cast<size_t>(n));
    }
    return got;
}

// One response with a Content-Length from `fd`; what came before the connection closed or
// `timeout_ms` passed when it is not complete by then. Bytes read past a complete response
// are kept in `carry` for the next call.
inline std::string read_response(int fd, int timeout_ms, std::string* carry = nullptr) {
    std::string got;
    if (carry != nullptr) got.swap(*carry);
    char buf[8192];
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (std::chrono::steady_clock::now() < deadline) {
        const size_t head_end = got.find("\r\n\r\n");
        if (head_end != std::string::npos) {
            const size_t cl = got.find("Content-Length: ");
            if (cl != std::string::npos && cl < head_end) {
                const size_t end = head_end + 4 + std::stoul(got.substr(cl + 16));
                if (got.size() >= end) {
                    if (carry != nullptr) *carry = got.substr(end);
                    got.resize(end);
                    return got;
                }
            }
        }
        pollfd p{fd, POLLIN, 0};
        if (poll(&p, 1, 20) <= 0) continue;
        const ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n <= 0) break;
        got.append(buf, static_cast<size_t>(n));
    }
    return got;
}

}  // namespace ember::test
