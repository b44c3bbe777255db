// A real `ember serve` on a free loopback port, for the server's tests (no mock servers).
#pragma once

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

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
    // did not start (the log says why).
    ServeProcess(const std::vector<std::string>& args, const std::string& log_path) {
        std::vector<std::string> argv = {ember_binary(), "serve", "--port", "0"};
        argv.insert(argv.end(), args.begin(), args.end());
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

}  // namespace ember::test
