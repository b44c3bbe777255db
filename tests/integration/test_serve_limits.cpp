// The server's bounds under load and hostile clients, over real sockets against a real
// `ember serve` (only 127.0.0.1): 80 generation requests at once (issue 30, row 3: /health
// answered at once, --max-waiting a real bound with 503 + Retry-After), connections past
// --max-connections refused unread, an endless request line or header block cut at 64 KiB
// (431), a body that drips cut at --body-timeout (408), a declared body over --max-body
// refused without reading it.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/fixtures.h"
#include "tests/support/process.h"
#include "tests/support/serve.h"
#include "tests/support/temp_dir.h"

namespace ember::test {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

int status_of(const std::string& response) {
    return response.rfind("HTTP/1.1 ", 0) == 0 ? std::atoi(response.c_str() + 9) : 0;
}

// GET /health on a new connection: the response and how long it took.
std::pair<std::string, double> health(int port) {
    const auto t0 = Clock::now();
    const int fd = connect_loopback(port);
    if (fd < 0) return {"", seconds_since(t0)};
    send_all(fd, "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    std::string r = read_response(fd, 10000);
    close(fd);
    return {r, seconds_since(t0)};
}

std::vector<std::string> base_args() {
    return {"-m",     fixture_path("models/stories260K.gguf"), "--no-db", "-t", "1", "-c", "512",
            "--quiet"};
}

// Row 3 as written: 80 parallel generation requests against the defaults (4 slots, 64 may
// wait). Before: /health answered after 7.6 s, and --max-waiting never triggered.
TEST(ServeLimits, HealthIsAnsweredWhileEightyGenerationsAreInFlight) {
    EMBER_REQUIRE_FIXTURE("models/stories260K.gguf");
    TempDir dir;
    ServeProcess server(base_args(), dir.file("log"));
    ASSERT_GT(server.port(), 0) << server.process().log();
    const std::string request =
        post_raw("/v1/completions", R"({"prompt":"Once","max_tokens":480,"ignore_eos":true})");
    // Every connection first, then every request at once.
    std::vector<int> fds;
    for (int i = 0; i < 80; ++i) {
        fds.push_back(connect_loopback(server.port()));
        ASSERT_GE(fds.back(), 0);
    }
    const auto t0 = Clock::now();
    for (int fd : fds) ASSERT_TRUE(send_all(fd, request));
    std::vector<std::string> responses(fds.size());
    std::vector<double> answered_at(fds.size());
    std::vector<std::thread> readers;
    for (size_t i = 0; i < fds.size(); ++i) {
        readers.emplace_back([&, i] {
            responses[i] = read_response(fds[i], 120000);
            answered_at[i] = seconds_since(t0);
        });
    }
    // /health meanwhile, ten times.
    std::vector<double> health_s;
    int busy_seen = 0, waiting_seen = 0;
    for (int i = 0; i < 10; ++i) {
        const auto [r, s] = health(server.port());
        ASSERT_EQ(status_of(r), 200) << r;
        health_s.push_back(s);
        const json h = json::parse(r.substr(r.find("\r\n\r\n") + 4));
        busy_seen = std::max(busy_seen, h["slots_busy"].get<int>());
        waiting_seen = std::max(waiting_seen, h["requests_waiting"].get<int>());
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    for (auto& t : readers) t.join();
    for (int fd : fds) close(fd);
    int ok = 0, refused = 0;
    double slowest_refusal = 0;
    for (size_t i = 0; i < responses.size(); ++i) {
        const int status = status_of(responses[i]);
        if (status == 200) {
            ++ok;
            EXPECT_NE(responses[i].find("\"completion_tokens\":480"), std::string::npos);
        } else {
            ASSERT_EQ(status, 503) << responses[i];
            ++refused;
            EXPECT_NE(responses[i].find("Retry-After: 1\r\n"), std::string::npos) << responses[i];
            EXPECT_NE(responses[i].find("64 requests already wait"), std::string::npos);
            slowest_refusal = std::max(slowest_refusal, answered_at[i]);
        }
    }
    std::sort(health_s.begin(), health_s.end());
    std::printf(
        "[limits] 80 generation requests: %d answered, %d refused (503, the slowest after "
        "%.3f s); /health under load: median %.1f ms, max %.1f ms (slots busy %d, %d waiting)\n",
        ok, refused, slowest_refusal, health_s[5] * 1000, health_s.back() * 1000, busy_seen,
        waiting_seen);
    EXPECT_EQ(ok + refused, 80);
    // 4 generate and 64 wait; the rest are refused, unless a reply ended before they came.
    EXPECT_GE(ok, 68);
    EXPECT_GE(refused, 1);
    EXPECT_LT(slowest_refusal, 1.0);
    EXPECT_EQ(busy_seen, 4);
    EXPECT_GT(waiting_seen, 0);
    EXPECT_LT(health_s.back(), 0.2);
}

TEST(ServeLimits, ConnectionsPastMaxConnectionsAreRefusedAtOnce) {
    EMBER_REQUIRE_FIXTURE("models/stories260K.gguf");
    TempDir dir;
    auto args = base_args();
    args.insert(args.end(), {"--max-connections", "12", "--parallel", "1", "--max-waiting", "2"});
    ServeProcess server(args, dir.file("log"));
    ASSERT_GT(server.port(), 0) << server.process().log();
    // 12 connections that send nothing hold every place (each for its keep-alive wait).
    std::vector<int> idle;
    for (int i = 0; i < 12; ++i) idle.push_back(connect_loopback(server.port()));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const auto [refused, refused_s] = health(server.port());
    for (int fd : idle) close(fd);
    std::printf("[limits] a 13th connection: %d after %.1f ms\n", status_of(refused),
                refused_s * 1000);
    EXPECT_EQ(status_of(refused), 503) << refused;
    EXPECT_NE(refused.find("Retry-After: 1\r\n"), std::string::npos) << refused;
    EXPECT_NE(refused.find("--max-connections"), std::string::npos) << refused;
    EXPECT_LT(refused_s, 0.5);
    // Places free again once they close.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_EQ(status_of(health(server.port()).first), 200);
    // A usage error: no room for the slots and the waiting requests.
    const CommandResult bad =
        run_command({ember_binary(), "serve", "-m", fixture_path("models/stories260K.gguf"),
                     "--max-connections", "10", "--max-waiting", "64"});
    EXPECT_EQ(bad.status, 2) << bad.err;
    EXPECT_NE(bad.err.find("--max-connections"), std::string::npos) << bad.err;
}

// Sends `head` and then `filler` repeatedly (up to `total` bytes) while reading; returns the
// response, the bytes the server took, and the seconds until it answered.
struct Flood {
    std::string response;
    size_t sent = 0;
    double seconds = 0;
};

Flood flood(int port, const std::string& head, const std::string& filler, size_t total) {
    Flood f;
    const int fd = connect_loopback(port);
    if (fd < 0) return f;
    const auto t0 = Clock::now();
    std::atomic<bool> answered{false};
    std::thread reader([&] {
        f.response = read_response(fd, 20000);
        f.seconds = seconds_since(t0);
        answered = true;
    });
    send_all(fd, head);
    f.sent = head.size();
    while (f.sent < total && !answered) {
        if (!send_all(fd, filler)) break;
        f.sent += filler.size();
    }
    reader.join();
    close(fd);
    return f;
}

TEST(ServeLimits, AnEndlessRequestLineOrHeaderBlockIsCutAt64KiB) {
    EMBER_REQUIRE_FIXTURE("models/stories260K.gguf");
    TempDir dir;
    ServeProcess server(base_args(), dir.file("log"));
    ASSERT_GT(server.port(), 0) << server.process().log();
    const size_t total = size_t{256} << 20;
    // A request line that never ends; headers that never end (each line short).
    const Flood line = flood(server.port(), "GET /", std::string(64 << 10, 'a'), total);
    std::string header_lines;
    while (header_lines.size() < (64 << 10)) header_lines += "X-Filler: 0123456789abcdef\r\n";
    const Flood headers =
        flood(server.port(), "GET /health HTTP/1.1\r\nHost: x\r\n", header_lines, total);
    const long peak_kib = server.process().peak_rss_kib();
    std::printf(
        "[limits] endless request line: %d after %.2f s (%.1f MiB sent); endless headers: %d "
        "after %.2f s (%.1f MiB sent); server peak RSS %.1f MiB\n",
        status_of(line.response), line.seconds, line.sent / 1048576.0, status_of(headers.response),
        headers.seconds, headers.sent / 1048576.0, peak_kib / 1024.0);
    for (const Flood* f : {&line, &headers}) {
        EXPECT_EQ(status_of(f->response), 431) << f->response;
        EXPECT_NE(f->response.find("longer than 65536 bytes"), std::string::npos) << f->response;
        EXPECT_LT(f->seconds, 5.0);
        EXPECT_LT(f->sent, size_t{64} << 20);
    }
    EXPECT_GT(peak_kib, 0);
    EXPECT_LT(peak_kib, 64 * 1024);
    EXPECT_EQ(status_of(health(server.port()).first), 200);
}

TEST(ServeLimits, ABodyThatDripsIsCutAtTheBodyDeadline) {
    EMBER_REQUIRE_FIXTURE("models/stories260K.gguf");
    TempDir dir;
    auto args = base_args();
    args.insert(args.end(), {"--body-timeout", "2", "--read-timeout", "5"});
    ServeProcess server(args, dir.file("log"));
    ASSERT_GT(server.port(), 0) << server.process().log();
    // One byte every 0.4 s: no read ever stalls past --read-timeout, and the body would take
    // 400 s.
    const std::string body(1000, ' ');
    const int fd = connect_loopback(server.port());
    ASSERT_GE(fd, 0);
    const auto t0 = Clock::now();
    ASSERT_TRUE(send_all(fd,
                         "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000"
                         "\r\n\r\n"));
    std::string response;
    for (size_t i = 0; i < body.size() && seconds_since(t0) < 20; ++i) {
        if (!send_all(fd, " ")) break;
        pollfd p{fd, POLLIN, 0};
        if (poll(&p, 1, 400) > 0) {
            response = read_response(fd, 2000);
            break;
        }
    }
    const double cut_after = seconds_since(t0);
    close(fd);
    std::printf("[limits] a dripping body: %d after %.2f s (--body-timeout 2)\n",
                status_of(response), cut_after);
    EXPECT_EQ(status_of(response), 408) << response;
    EXPECT_NE(response.find("--body-timeout"), std::string::npos) << response;
    EXPECT_GE(cut_after, 1.9);
    EXPECT_LT(cut_after, 4.0);

    // A declared body over --max-body is refused at once, unread (it was read and discarded
    // until the client stopped).
    const int big = connect_loopback(server.port());
    ASSERT_GE(big, 0);
    const auto t1 = Clock::now();
    ASSERT_TRUE(send_all(big,
                         "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: "
                         "107374182400\r\n\r\n{\"prompt\":"));
    const std::string too_large = read_response(big, 10000);
    const double refused_after = seconds_since(t1);
    close(big);
    std::printf("[limits] a declared 100 GiB body: %d after %.3f s\n", status_of(too_large),
                refused_after);
    EXPECT_EQ(status_of(too_large), 413) << too_large;
    EXPECT_LT(refused_after, 1.0);
    EXPECT_EQ(status_of(health(server.port()).first), 200);
}

// A client that hangs up while its request waits for a slot gives its place back at once
// (it used to hold it until a slot came free, a request beyond it getting 503 meanwhile).
TEST(ServeLimits, AClientThatHangsUpWhileWaitingGivesItsPlaceBack) {
    EMBER_REQUIRE_FIXTURE("arch/qwen3/qwen3.gguf");
    TempDir dir;
    ServeProcess server({"-m", fixture_path("arch/qwen3/qwen3.gguf"), "--no-db", "-t", "1",
                         "--no-spec", "-c", "4096", "--parallel", "1", "--max-waiting", "1"},
                        dir.file("log"));
    ASSERT_GT(server.port(), 0) << server.process().log();
    auto health_field = [&](const char* field) {
        const std::string r = health(server.port()).first;
        return json::parse(r.substr(r.find("\r\n\r\n") + 4))[field].get<int>();
    };
    // A holds the one slot for seconds (3,500 tokens at ~1,000 a second).
    const int a = connect_loopback(server.port());
    ASSERT_TRUE(send_all(a, post_raw("/v1/completions",
                                     R"({"prompt":"Once","max_tokens":3500,"ignore_eos":true})")));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    ASSERT_EQ(health_field("slots_busy"), 1);
    const std::string plain = post_raw("/v1/completions", R"({"prompt":"Once","max_tokens":4})");
    // B waits for the slot, then hangs up.
    const int b = connect_loopback(server.port());
    ASSERT_TRUE(send_all(b, plain));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    ASSERT_EQ(health_field("requests_waiting"), 1);
    close(b);
    const auto t0 = Clock::now();
    while (health_field("requests_waiting") != 0 && seconds_since(t0) < 5) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    const double freed_after = seconds_since(t0);
    std::printf("[limits] a waiting client's place freed %.3f s after it hung up\n", freed_after);
    EXPECT_LT(freed_after, 1.0);
    EXPECT_FALSE(server.process().wait_for_line("POST /v1/completions 499", 5).empty())
        << server.process().log();
    // C takes the place (no 503) and is answered after A.
    const int c = connect_loopback(server.port());
    ASSERT_TRUE(send_all(c, plain));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_EQ(health_field("slots_busy"), 1);
    EXPECT_EQ(health_field("requests_waiting"), 1);
    EXPECT_EQ(status_of(read_response(a, 60000)), 200);
    close(a);
    const std::string answer = read_response(c, 60000);
    close(c);
    EXPECT_EQ(status_of(answer), 200) << answer;
}

}  // namespace
}  // namespace ember::test
