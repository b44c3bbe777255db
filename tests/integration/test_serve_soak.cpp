// The soak test of issue 30 (item 8): 200 clients against a real `ember serve` on loopback
// for EMBER_SOAK_SECONDS (default 300 under CI=true, else 30), mixing well-formed streamed
// and plain requests (some on kept-alive connections), clients that hang up mid-request,
// slowloris sockets and oversized chunked bodies. Afterwards: every well-formed request got
// the greedy answer obtained before the soak, /health answered within 200 ms at the 99th
// percentile throughout, the server's resident memory stayed within 1.2x of its idle size
// plus its KV cache, no slot is left busy, and the state store passes `sessions check`.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
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

int soak_seconds() {
    if (const char* s = std::getenv("EMBER_SOAK_SECONDS"); s != nullptr && *s != '\0') {
        return std::max(1, std::atoi(s));
    }
    const char* ci = std::getenv("CI");
    return ci != nullptr && std::string(ci) == "true" ? 300 : 30;
}

// A field of /proc/PID/status (VmRSS, RssAnon, RssFile: KiB; Threads), or -1.
long status_field(int pid, const std::string& field = "VmRSS") {
    std::ifstream in("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind(field + ":", 0) == 0) return std::atol(line.c_str() + field.size() + 1);
    }
    return -1;
}

long rss_kib(int pid) {
    return status_field(pid);
}

const std::vector<std::string> kPrompts = {"Once upon a time", "The cat sat", "Tom went to",
                                           "She saw a bird",   "A big dog",   "In the park",
                                           "The sun was hot",  "Lily and Ben"};

std::string chat_body(size_t prompt, bool stream) {
    return json{{"messages", {{{"role", "user"}, {"content", kPrompts[prompt]}}}},
                {"max_tokens", 24},
                {"temperature", 0},
                {"stream", stream}}
        .dump();
}

std::string raw_post(const std::string& body, bool close) {
    return std::string("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n") +
           (close ? "Connection: close\r\n" : "") +
           "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
           "\r\n\r\n" + body;
}

// The reply text of a streamed response (its content deltas), or "!error" when it did not
// end properly.
std::string streamed_text(const std::string& response) {
    if (response.rfind("HTTP/1.1 200", 0) != 0 ||
        response.find("data: [DONE]") == std::string::npos)
        return "!error";
    std::string text;
    for (const auto& line : split_lines(response)) {
        if (line.rfind("data: {", 0) != 0) continue;
        const json event = json::parse(line.substr(6), nullptr, false);
        if (event.is_discarded() || event.contains("error")) return "!error";
        const json& delta = event["choices"][0]["delta"];
        if (delta.contains("content")) text += delta["content"].get<std::string>();
    }
    return text;
}

struct Tally {
    std::mutex mutex;
    std::atomic<int> right{0}, wrong{0}, failed{0}, hangups{0}, slowloris_cut{0},
        slowloris_not_cut{0}, oversized_413{0}, oversized_other{0};
    std::vector<std::string> problems;
    void problem(const std::string& what) {
        std::lock_guard lock(mutex);
        if (problems.size() < 20) problems.push_back(what);
    }
};

class Soak {
public:
    Soak(int port, const std::vector<std::string>& reference, Clock::time_point end)
        : port_(port), reference_(reference), end_(end) {}

    // Well-formed requests, each checked against the reference; plain ones on a kept-alive
    // connection (httplib's client), streamed ones on their own.
    void well_formed(int id, Tally& t) {
        std::mt19937 rng(static_cast<unsigned>(id));
        httplib::Client client("127.0.0.1", port_);
        client.set_keep_alive(true);
        client.set_read_timeout(120, 0);
        for (int n = 0; Clock::now() < end_; ++n) {
            const size_t prompt = rng() % kPrompts.size();
            if (id % 2 == 0) {
                auto res = client.Post("/v1/chat/completions", chat_body(prompt, false),
                                       "application/json");
                if (!res || res->status != 200) {
                    ++t.failed;
                    t.problem("plain: " + (res ? std::to_string(res->status) + " " + res->body
                                               : std::string("no answer")));
                    continue;
                }
                const json j = json::parse(res->body, nullptr, false);
                const bool same = !j.is_discarded() &&
                                  j["choices"][0]["message"]["content"] == reference_[prompt];
                same ? ++t.right : ++t.wrong;
                if (!same) t.problem("plain answer differs: " + res->body);
            } else {
                const int fd = connect_loopback(port_);
                if (fd < 0 || !send_all(fd, raw_post(chat_body(prompt, true), true))) {
                    ++t.failed;
                    if (fd >= 0) close(fd);
                    continue;
                }
                const std::string text = streamed_text(read_until_closed(fd, 120000));
                close(fd);
                if (text == "!error") {
                    ++t.failed;
                    t.problem("stream did not end properly");
                } else {
                    text == reference_[prompt] ? ++t.right : ++t.wrong;
                    if (text != reference_[prompt]) t.problem("stream differs: " + text);
                }
            }
        }
    }

    // Sends a request (streamed or not, with a long reply) and hangs up within 50 ms.
    void hang_up(int id, Tally& t) {
        std::mt19937 rng(static_cast<unsigned>(1000 + id));
        while (Clock::now() < end_) {
            const int fd = connect_loopback(port_);
            if (fd < 0) continue;
            const std::string body = json{
                {"messages", {{{"role", "user"}, {"content", "Go"}}}},
                {"max_tokens", 400},
                {"ignore_eos", true},
                {"stream",
                 rng() % 2 == 0}}.dump();
            send_all(fd, raw_post(body, false));
            std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 50));
            close(fd);
            ++t.hangups;
            std::this_thread::sleep_for(std::chrono::milliseconds(300 + rng() % 500));
        }
    }

    // Headers that never end: a line every second, until the server cuts the connection.
    void slowloris(Tally& t) {
        while (Clock::now() < end_) {
            const int fd = connect_loopback(port_);
            if (fd < 0) continue;
            send_all(fd, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n");
            const auto t0 = Clock::now();
            bool cut = false;
            for (int line = 0; seconds_since(t0) < 10; ++line) {
                pollfd p{fd, POLLIN, 0};
                if (poll(&p, 1, 1000) > 0) {
                    char c;
                    cut = recv(fd, &c, 1, MSG_DONTWAIT) <= 0;
                    break;
                }
                if (!send_all(fd, "X-Slow-" + std::to_string(line) + ": 1\r\n")) {
                    cut = true;
                    break;
                }
            }
            close(fd);
            cut ? ++t.slowloris_cut : ++t.slowloris_not_cut;
        }
    }

    // A chunked body past --max-body (64 KiB): sent until the server answers, 413.
    void oversized(int id, Tally& t) {
        std::mt19937 rng(static_cast<unsigned>(2000 + id));
        const std::string piece(32 << 10, 'a');
        char size_line[32];
        std::snprintf(size_line, sizeof size_line, "%zx\r\n", piece.size());
        const std::string chunk = size_line + piece + "\r\n";
        while (Clock::now() < end_) {
            const int fd = connect_loopback(port_);
            if (fd < 0) continue;
            send_all(fd,
                     "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                     "Transfer-Encoding: chunked\r\n\r\n");
            std::string response;
            for (int i = 0; i < 64 && response.empty(); ++i) {  // up to 2 MiB
                if (!send_all(fd, chunk)) break;
                pollfd p{fd, POLLIN, 0};
                if (poll(&p, 1, 0) > 0) response = read_until_closed(fd, 2000);
            }
            if (response.empty()) response = read_until_closed(fd, 5000);
            close(fd);
            response.rfind("HTTP/1.1 413", 0) == 0 ? ++t.oversized_413 : ++t.oversized_other;
            std::this_thread::sleep_for(std::chrono::milliseconds(200 + rng() % 300));
        }
    }

private:
    int port_;
    const std::vector<std::string>& reference_;
    Clock::time_point end_;
};

// The 200 clients: 100 well-formed (half plain on kept-alive connections, half streamed),
// 40 that hang up, 40 slowloris sockets, 20 oversized chunked bodies.
std::vector<std::thread> start_clients(Soak& soak, Tally& tally) {
    std::vector<std::thread> clients;
    for (int i = 0; i < 100; ++i) clients.emplace_back([&, i] { soak.well_formed(i, tally); });
    for (int i = 0; i < 40; ++i) clients.emplace_back([&, i] { soak.hang_up(i, tally); });
    for (int i = 0; i < 40; ++i) clients.emplace_back([&] { soak.slowloris(tally); });
    for (int i = 0; i < 20; ++i) clients.emplace_back([&, i] { soak.oversized(i, tally); });
    return clients;
}

json health_of(int port, double* seconds = nullptr) {
    const auto t0 = Clock::now();
    const int fd = connect_loopback(port);
    if (fd < 0) return json();
    send_all(fd, "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    const std::string r = read_until_closed(fd, 10000);
    close(fd);
    if (seconds != nullptr) *seconds = seconds_since(t0);
    const size_t body = r.find("\r\n\r\n");
    if (r.rfind("HTTP/1.1 200", 0) != 0 || body == std::string::npos) return json();
    return json::parse(r.substr(body + 4), nullptr, false);
}

TEST(ServeSoak, TwoHundredHostileAndWellFormedClients) {
    EMBER_REQUIRE_FIXTURE("models/stories260K.gguf");
    const int duration = soak_seconds();
    TempDir dir;
    const std::string db = dir.file("state.db");
    ServeProcess server({"-m", fixture_path("models/stories260K.gguf"), "--db", db, "-t", "1", "-c",
                         "512", "--parallel", "4", "--max-waiting", "256", "--read-timeout", "3",
                         "--body-timeout", "5", "--max-body", "64KiB", "--quiet"},
                        dir.file("log"));
    ASSERT_GT(server.port(), 0) << server.process().log();
    const int pid = server.process().pid();
    const long fresh_kib = rss_kib(pid);
    // The references: each prompt's greedy reply.
    std::vector<std::string> reference;
    {
        auto client = server.client(60);
        for (size_t i = 0; i < kPrompts.size(); ++i) {
            auto res =
                client->Post("/v1/chat/completions", chat_body(i, false), "application/json");
            ASSERT_TRUE(res && res->status == 200) << (res ? res->body : "no answer");
            reference.push_back(json::parse(res->body)["choices"][0]["message"]["content"]);
        }
    }
    // What the KV cache takes: every slot filled to its whole context once.
    const long before_kv_kib = rss_kib(pid);
    {
        std::vector<std::thread> fill;
        for (int s = 0; s < 4; ++s) {
            fill.emplace_back([&, s] {
                auto client = server.client(120);
                client->Post(
                    "/v1/completions",
                    json{{"prompt", "Fill " + std::to_string(s)}, {"ignore_eos", true}}.dump(),
                    "application/json");
            });
        }
        for (auto& t : fill) t.join();
    }
    const long kv_kib = std::max(0L, rss_kib(pid) - before_kv_kib);
    // Idle: at rest after a first 5 s of the same 200 clients, whose connections each had a
    // thread (its touched stack stays resident while the thread waits 30 s for the next one),
    // with the KV cache above included. The soak must stay within 1.2x of it: what grows
    // with time or with abuse (a leak, a buffered body, a thread per stuck socket) shows.
    Tally warm_tally;
    {
        Soak warm(server.port(), reference, Clock::now() + std::chrono::seconds(5));
        std::vector<std::thread> clients = start_clients(warm, warm_tally);
        for (auto& t : clients) t.join();
        std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    ASSERT_EQ(warm_tally.wrong.load() + warm_tally.failed.load(), 0);
    const long idle_kib = rss_kib(pid);
    const long idle_file_kib = status_field(pid, "RssFile");
    const long limit_kib = static_cast<long>(1.2 * static_cast<double>(idle_kib));

    const auto start = Clock::now();
    const auto end = start + std::chrono::seconds(duration);
    Tally tally;
    Soak soak(server.port(), reference, end);
    std::vector<std::thread> clients = start_clients(soak, tally);
    // /health every 100 ms, and the server's memory every probe.
    std::vector<double> health_s;
    int health_failed = 0;
    long peak_kib = 0, peak_file_kib = 0, peak_threads = 0;
    while (Clock::now() < end) {
        double s = 0;
        const json h = health_of(server.port(), &s);
        if (h.is_object()) {
            health_s.push_back(s);
        } else {
            ++health_failed;
        }
        const long rss = rss_kib(pid);
        if (rss > peak_kib) {
            peak_kib = rss;
            peak_file_kib = status_field(pid, "RssFile");
            peak_threads = status_field(pid, "Threads");
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    for (auto& t : clients) t.join();
    // Quiet again: no slot left busy, nothing waiting (hang-ups are noticed at their first
    // token, slowloris sockets at their deadline).
    json after;
    for (int i = 0; i < 100; ++i) {
        after = health_of(server.port());
        if (after.is_object() && after["slots_busy"] == 0 && after["requests_waiting"] == 0) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    std::sort(health_s.begin(), health_s.end());
    const double p50 = health_s.empty() ? 0 : health_s[health_s.size() / 2];
    const double p99 = health_s.empty() ? 0 : health_s[health_s.size() * 99 / 100];
    const double worst = health_s.empty() ? 0 : health_s.back();
    std::printf(
        "[soak] %d s, 200 clients: %d well-formed answers right, %d wrong, %d failed; %d "
        "hang-ups; slowloris cut %d (not cut %d); oversized chunked 413 %d (other %d)\n",
        duration, tally.right.load(), tally.wrong.load(), tally.failed.load(), tally.hangups.load(),
        tally.slowloris_cut.load(), tally.slowloris_not_cut.load(), tally.oversized_413.load(),
        tally.oversized_other.load());
    std::printf(
        "[soak] /health: %zu probes, p50 %.1f ms, p99 %.1f ms, max %.1f ms, %d failed; RSS "
        "fresh %.1f MiB, KV %.1f MiB, idle after warm-up %.1f MiB, peak %.1f MiB (limit %.1f "
        "MiB; file pages %.1f MiB idle, %.1f MiB at the peak; %ld threads then)\n",
        health_s.size(), p50 * 1000, p99 * 1000, worst * 1000, health_failed, fresh_kib / 1024.0,
        kv_kib / 1024.0, idle_kib / 1024.0, peak_kib / 1024.0, limit_kib / 1024.0,
        idle_file_kib / 1024.0, peak_file_kib / 1024.0, peak_threads);
    for (const auto& p : tally.problems)
        std::printf("[soak] problem: %s\n", p.substr(0, 300).c_str());

    EXPECT_GT(tally.right.load(), 100);
    EXPECT_EQ(tally.wrong.load(), 0);
    EXPECT_EQ(tally.failed.load(), 0);
    EXPECT_GT(tally.hangups.load(), 0);
    EXPECT_GT(tally.slowloris_cut.load(), 0);
    EXPECT_EQ(tally.slowloris_not_cut.load(), 0);
    EXPECT_GT(tally.oversized_413.load(), 0);
    EXPECT_EQ(tally.oversized_other.load(), 0);
    EXPECT_EQ(health_failed, 0);
    EXPECT_LT(p99, 0.2);
    EXPECT_LE(peak_kib, limit_kib);
    ASSERT_TRUE(after.is_object());
    EXPECT_EQ(after["slots_busy"], 0) << after.dump();
    EXPECT_EQ(after["requests_waiting"], 0) << after.dump();
    // Still right after the soak.
    {
        auto client = server.client(60);
        auto res = client->Post("/v1/chat/completions", chat_body(0, false), "application/json");
        ASSERT_TRUE(res && res->status == 200);
        EXPECT_EQ(json::parse(res->body)["choices"][0]["message"]["content"], reference[0]);
    }
    EXPECT_EQ(server.process().stop(SIGTERM, 20), 0) << server.process().log();
    std::error_code ec;
    std::printf("[soak] state store: %.1f MiB\n",
                static_cast<double>(std::filesystem::file_size(db, ec)) / 1048576.0);
    const CommandResult check =
        run_command({ember_binary(), "sessions", "--db", db, "check"}, "", 120);
    EXPECT_EQ(check.status, 0) << check.out << check.err;
}

}  // namespace
}  // namespace ember::test
