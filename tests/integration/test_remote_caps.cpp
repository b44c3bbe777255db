// Issue 41 row 20: `ember chat --remote` against a hostile server (a real HTTP server in
// Python's standard library, tests/integration/py/hostile_stream_server.py, whose replies never
// end). The client stops at -n whatever the server sends, and stops with one line naming the
// limit at 16 MiB for one event line and 64 MiB for one reply: each run ends in seconds with
// bounded memory (it used to grow by hundreds of MB until killed).
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <chrono>
#include <cstdlib>

#include "tests/support/fixtures.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"

namespace ember::test {
namespace {

constexpr double kDeadline = 30;
// Far under what an unbounded reader reaches in the deadline, far over the caps' needs (a
// 64 MiB reply held as text and printed).
constexpr long kMaxRssKib = 512 * 1024;

struct HostileServer {
    TempDir dir{"ember-hostile"};
    std::unique_ptr<BackgroundProcess> process;
    int port = 0;

    explicit HostileServer(const std::string& mode) {
        const std::string python = find_in_path("python3");
        if (python.empty()) return;
        process = std::make_unique<BackgroundProcess>(
            std::vector<std::string>{
                python,
                std::string(EMBER_SOURCE_DIR) + "/tests/integration/py/hostile_stream_server.py",
                mode},
            dir.file("server.log"));
        const std::string line = process->wait_for_line("port ", 20);
        if (!line.empty()) port = std::atoi(line.c_str() + line.find("port ") + 5);
    }
    std::string url() const { return "http://127.0.0.1:" + std::to_string(port) + "/v1"; }
};

struct Timed {
    CommandResult r;
    double seconds = 0;
};

Timed chat(const HostileServer& server, const std::string& n) {
    const auto start = std::chrono::steady_clock::now();
    Timed t;
    t.r = run_command({ember_binary(), "chat", "--remote", server.url(), "--remote-model", "m",
                       "--no-db", "-n", n, "-p", "hello"},
                      "", kDeadline);
    t.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return t;
}

long children_peak_rss_kib() {
    rusage usage{};
    getrusage(RUSAGE_CHILDREN, &usage);
    return usage.ru_maxrss;
}

#define REQUIRE_SERVER(server)                                                         \
    if ((server).port <= 0) {                                                          \
        if (find_in_path("python3").empty()) EMBER_SKIP_OR_FAIL("no python3 on PATH"); \
        FAIL() << "the hostile server did not start: " << (server).process->log();     \
    }

TEST(RemoteCaps, AnEndlessReplyStopsAtTheTokensAsked) {
    HostileServer server("endless");
    REQUIRE_SERVER(server);
    const Timed t = chat(server, "8");
    EXPECT_FALSE(t.r.timed_out) << "the client never stopped reading";
    EXPECT_EQ(t.r.status, 0) << t.r.err;
    EXPECT_LT(t.seconds, 10.0);
    // Exactly eight pieces of "ab", then nothing more.
    EXPECT_NE(t.r.out.find("abababababababab"), std::string::npos) << t.r.out.substr(0, 200);
    EXPECT_EQ(t.r.out.find("ababababababababab"), std::string::npos) << t.r.out.substr(0, 200);
    EXPECT_LT(children_peak_rss_kib(), kMaxRssKib);
}

TEST(RemoteCaps, AnEventLinePast16MiBIsOneErrorLine) {
    HostileServer server("longline");
    REQUIRE_SERVER(server);
    const Timed t = chat(server, "8");
    EXPECT_FALSE(t.r.timed_out) << "the client read the line forever";
    EXPECT_EQ(t.r.status, 1) << t.r.err;
    EXPECT_LT(t.seconds, 20.0);
    const auto lines = split_lines(t.r.err);
    ASSERT_EQ(lines.size(), 1u) << t.r.err;
    EXPECT_NE(lines[0].find("event line longer than 16 MiB"), std::string::npos) << lines[0];
    EXPECT_LT(t.r.out.size(), size_t{1} << 20) << "the line's bytes were printed";
    EXPECT_LT(children_peak_rss_kib(), kMaxRssKib);
}

TEST(RemoteCaps, AReplyPast64MiBIsOneErrorLine) {
    HostileServer server("bigpieces");
    REQUIRE_SERVER(server);
    // 1 MiB a piece: the byte cap comes long before 4,096 pieces.
    const Timed t = chat(server, "4096");
    EXPECT_FALSE(t.r.timed_out) << "the client read the reply forever";
    EXPECT_EQ(t.r.status, 1) << t.r.err;
    EXPECT_LT(t.seconds, 25.0);
    const auto lines = split_lines(t.r.err);
    ASSERT_EQ(lines.size(), 1u) << t.r.err.substr(0, 500);
    EXPECT_NE(lines[0].find("64 MiB"), std::string::npos) << lines[0];
    // What was printed is the reply up to the cap, not more.
    EXPECT_LE(t.r.out.size(), (size_t{64} << 20) + (size_t{2} << 20));
    EXPECT_GE(t.r.out.size(), size_t{60} << 20);
    EXPECT_LT(children_peak_rss_kib(), kMaxRssKib);
}

}  // namespace
}  // namespace ember::test
