// Bad input, measured: well over 1,000 malformed or hostile requests (truncated JSON, bodies
// over the limit, wrong types, invalid UTF-8, deep nesting, garbage HTTP, slow partial
// requests) against a real `ember serve`. Each must get a 4xx or a closed connection, never
// a 2xx or 5xx; the server stays up and answers a valid request between the batches; its
// peak resident memory stays bounded. Only 127.0.0.1 is contacted.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "tests/support/fixtures.h"
#include "tests/support/process.h"
#include "tests/support/serve.h"
#include "tests/support/temp_dir.h"

namespace ember::test {
namespace {

using json = nlohmann::json;

// The status of the response to `raw` (0: the server closed without answering; -1: no
// connection). Reads until the server closes or `timeout_ms` passes.
int send_raw(int port, const std::string& raw, int timeout_ms = 10000, int pause_after_bytes = -1,
             int pause_ms = 0) {
    const int fd = connect_loopback(port);
    if (fd < 0) return -1;
    size_t sent = 0;
    const size_t first =
        pause_after_bytes >= 0 ? static_cast<size_t>(pause_after_bytes) : raw.size();
    while (sent < first) {
        const ssize_t n = send(fd, raw.data() + sent, first - sent, MSG_NOSIGNAL);
        if (n <= 0) break;
        sent += static_cast<size_t>(n);
    }
    if (pause_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
    while (sent < raw.size()) {
        const ssize_t n = send(fd, raw.data() + sent, raw.size() - sent, MSG_NOSIGNAL);
        if (n <= 0) break;  // the server gave up on us: fine
        sent += static_cast<size_t>(n);
    }
    std::string got;
    char buf[8192];
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (std::chrono::steady_clock::now() < deadline) {
        pollfd p{fd, POLLIN, 0};
        if (poll(&p, 1, 100) <= 0) continue;
        const ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n <= 0) break;
        got.append(buf, static_cast<size_t>(n));
        // One response is enough (the connection may stay open for keep-alive).
        const size_t head_end = got.find("\r\n\r\n");
        if (head_end != std::string::npos) {
            const size_t cl = got.find("Content-Length: ");
            if (cl != std::string::npos && cl < head_end &&
                got.size() >= head_end + 4 + std::stoul(got.substr(cl + 16))) {
                break;
            }
        }
    }
    close(fd);
    if (got.rfind("HTTP/1.1 ", 0) != 0) return 0;
    return std::atoi(got.c_str() + 9);
}

std::string post_raw(const std::string& path, const std::string& body,
                     const std::string& extra_headers = {}) {
    return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" +
           "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
           "\r\n" + extra_headers + "\r\n" + body;
}

// Sends each request on its own connection, `width` at a time (requests the server can only
// refuse after its read timeout would otherwise take a second each); returns the statuses.
std::vector<int> send_all(int port, const std::vector<std::string>& raws, int width = 16) {
    std::vector<int> status(raws.size(), -2);
    std::atomic<size_t> next{0};
    std::vector<std::thread> workers;
    for (int w = 0; w < width; ++w) {
        workers.emplace_back([&] {
            for (size_t i = next++; i < raws.size(); i = next++)
                status[i] = send_raw(port, raws[i], 5000);
        });
    }
    for (auto& t : workers) t.join();
    return status;
}

struct Tally {
    std::map<int, int> by_status;  // 0: closed without an answer
    int total = 0;
    void add(int status) {
        ++by_status[status];
        ++total;
    }
    std::string text() const {
        std::string s;
        for (const auto& [status, n] : by_status) {
            s += (s.empty() ? "" : ", ") +
                 (status == 0 ? std::string("closed") : std::to_string(status)) + ": " +
                 std::to_string(n);
        }
        return s;
    }
};

TEST(ServeHostile, ThousandsOfBadRequestsLeaveTheServerUpAndBounded) {
    EMBER_REQUIRE_FIXTURE("models/stories260K.gguf");
    TempDir dir;
    ServeProcess server({"-m", fixture_path("models/stories260K.gguf"), "--no-db", "-t", "1", "-c",
                         "512", "--max-body", "64KiB", "--read-timeout", "1", "--quiet"},
                        dir.file("log"));
    ASSERT_GT(server.port(), 0) << server.process().log();
    const int port = server.port();
    const std::string chat = "/v1/chat/completions";
    const json valid = {{"messages", json::array({{{"role", "user"}, {"content", "Hi there"}}})},
                        {"max_tokens", 2},
                        {"temperature", 0}};
    const std::string valid_text = valid.dump();
    std::mt19937 rng(1234);
    Tally tally;
    int valid_ok = 0;
    const auto t0 = std::chrono::steady_clock::now();
    auto check_alive = [&] {
        const int status = send_raw(port, post_raw(chat, valid_text));
        if (status == 200) ++valid_ok;
        std::printf("[hostile] after %d requests (%.1f s): a valid request got %d\n", tally.total,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                    status);
    };

    // 1. Truncated JSON: every cut of a valid body.
    for (size_t cut = 0; cut < valid_text.size(); ++cut) {
        tally.add(send_raw(port, post_raw(chat, valid_text.substr(0, cut))));
    }
    check_alive();
    // 2. Wrong types and out-of-range values in each field.
    const std::vector<std::pair<std::string, json>> wrong = {
        {"messages", 5},
        {"messages", "hi"},
        {"messages", json::object()},
        {"messages", json::array()},
        {"temperature", "hot"},
        {"temperature", -1},
        {"temperature", 1e300},
        {"top_p", 3},
        {"top_p", "x"},
        {"max_tokens", 0},
        {"max_tokens", 1.5},
        {"max_tokens", "ten"},
        {"max_tokens", 1e12},
        {"max_tokens", 100000},
        {"seed", "s"},
        {"seed", 0.5},
        {"stop", 5},
        {"stop", json::array({1, 2})},
        {"stop", json::array({"a", "b", "c", "d", "e"})},
        {"stop", ""},
        {"stream", "yes"},
        {"stream_options", 1},
        {"n", 3},
        {"logprobs", true},
        {"presence_penalty", 9},
        {"frequency_penalty", "f"},
        {"model", 7},
        {"model", "other-model"},
        {"top_k", -4},
        {"min_p", 2}};
    for (int round = 0; round < 10; ++round) {
        for (const auto& [field, value] : wrong) {
            json body = valid;
            body[field] = value;
            tally.add(send_raw(port, post_raw(chat, body.dump())));
        }
    }
    check_alive();
    // 3. Bad messages: wrong roles, content types, missing fields, non-text parts.
    const std::vector<json> bad_messages = {
        json::array({5}),
        json::array({{{"role", "user"}}}),
        json::array({{{"content", "x"}}}),
        json::array({{{"role", 1}, {"content", "x"}}}),
        json::array({{{"role", "tool"}, {"content", "x"}}}),
        json::array({{{"role", "user"}, {"content", json::array({{{"type", "image_url"}}})}}}),
        json::array({{{"role", "user"}, {"content", json::array({5})}}}),
        json::array({{{"role", "user"}, {"content", json::object()}}})};
    for (int round = 0; round < 20; ++round) {
        for (const auto& m : bad_messages) {
            json body = valid;
            body["messages"] = m;
            tally.add(send_raw(port, post_raw(chat, body.dump())));
        }
    }
    check_alive();
    // 4. Invalid UTF-8 in strings, and random bytes as bodies.
    std::uniform_int_distribution<int> byte(0, 255);
    for (int i = 0; i < 150; ++i) {
        std::string bad = "Hello ";
        for (int k = 0; k < 4; ++k) bad += static_cast<char>(0x80 + byte(rng) % 64);
        tally.add(send_raw(port, post_raw(chat, R"({"messages":[{"role":"user","content":")" + bad +
                                                    R"("}],"max_tokens":2})")));
    }
    for (int i = 0; i < 150; ++i) {
        std::string junk(static_cast<size_t>(1 + byte(rng) * 4), '\0');
        for (auto& ch : junk) ch = static_cast<char>(byte(rng));
        tally.add(send_raw(port, post_raw(i % 2 ? chat : "/v1/completions", junk)));
    }
    check_alive();
    // 5. Deep nesting, too many messages, bodies over --max-body (declared and real).
    for (int i = 0; i < 20; ++i) {
        tally.add(send_raw(port, post_raw(chat, std::string(1000 + 5000 * i, '['))));
        tally.add(send_raw(port, post_raw(chat, "{\"messages\":" + std::string(100 + i, '{'))));
    }
    json many = valid;
    many["messages"] = json::array();
    for (int i = 0; i < 5000; ++i) many["messages"].push_back({{"role", "user"}, {"content", ""}});
    for (int i = 0; i < 10; ++i) tally.add(send_raw(port, post_raw(chat, many.dump())));
    std::vector<std::string> oversized;
    for (int i = 0; i < 40; ++i) {
        oversized.push_back(post_raw(chat, std::string(70 * 1024 + i * 4096, ' ')));
        // Claims 1 GiB and sends little: refused (after the read timeout) without buffering.
        oversized.push_back("POST " + chat +
                            " HTTP/1.1\r\nHost: x\r\nContent-Length: "
                            "1073741824\r\n\r\n{\"messages\":");
    }
    for (int status : send_all(port, oversized)) tally.add(status);
    // A prompt longer than the context.
    std::string long_text;
    for (int i = 0; i < 600; ++i) long_text += "word ";
    for (int i = 0; i < 20; ++i) {
        tally.add(send_raw(port, post_raw("/v1/completions", json{{"prompt", long_text}}.dump())));
    }
    check_alive();
    // 6. Garbage HTTP: bad request lines, bad headers, lying lengths, unknown paths/methods.
    const std::vector<std::string> garbage = {
        "GARBAGE\r\n\r\n",
        "GET\r\n\r\n",
        "POST /v1/chat/completions HTTP/9.9\r\n\r\n",
        "POST /v1/chat/completions HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
        "POST /v1/chat/completions HTTP/1.1\r\nContent-Length: abc\r\n\r\n",
        "POST /v1/chat/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + std::string(20000, 'A') + "\r\n\r\n",
        "GET /" + std::string(20000, 'a') + " HTTP/1.1\r\n\r\n",
        "DELETE /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        "GET /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        "GET /etc/passwd HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        "GET /../../etc/passwd HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        std::string("\x00\x01\x02\x03", 4),
    };
    std::vector<std::string> garbage_requests;
    for (int round = 0; round < 20; ++round) {
        garbage_requests.insert(garbage_requests.end(), garbage.begin(), garbage.end());
    }
    for (int status : send_all(port, garbage_requests)) tally.add(status);
    check_alive();
    // 7. Slow partial requests: a body stalls past --read-timeout (1 s); 24 at once.
    std::vector<int> slow_status(24, -2);
    std::vector<std::thread> slow;
    for (size_t i = 0; i < slow_status.size(); ++i) {
        slow.emplace_back([&, i] {
            const std::string raw = post_raw(chat, valid_text);
            slow_status[i] = send_raw(port, raw, 10000, static_cast<int>(raw.size() - 10), 2500);
        });
    }
    // Meanwhile a normal client is still served.
    check_alive();
    for (auto& t : slow) t.join();
    for (int s : slow_status) tally.add(s);
    check_alive();

    const long peak_kib = server.process().peak_rss_kib();
    std::printf(
        "[hostile] %d bad requests: %s; valid requests answered in between: %d/8; "
        "server peak RSS %.1f MiB\n",
        tally.total, tally.text().c_str(), valid_ok, peak_kib / 1024.0);
    EXPECT_GE(tally.total, 1000);
    for (const auto& [status, n] : tally.by_status) {
        EXPECT_TRUE(status == 0 || (status >= 400 && status < 500))
            << n << " requests got status " << status;
    }
    EXPECT_EQ(valid_ok, 8);
    ASSERT_TRUE(server.process().running()) << server.process().log();
    // Bounded: the model is 1 MiB; a leak per request or a buffered 1 GiB body would show.
    EXPECT_GT(peak_kib, 0);
    EXPECT_LT(peak_kib, 256 * 1024);
    EXPECT_EQ(server.process().stop(SIGTERM), 0) << server.process().log();
}

}  // namespace
}  // namespace ember::test
