// Signals to the real binary (issue 30, row 14). `ember serve`: the first SIGTERM/SIGINT
// stops accepting, refuses the waiting requests, cancels the generations (a stream ends with
// an error event) and exits within seconds; a second signal exits at once. `ember chat`
// (scripted) killed by SIGTERM mid-run leaves a store that `sessions check` passes, with
// every turn it had answered.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
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

std::string completion_request(bool stream) {
    const std::string body = json{
        {"prompt", "Once"},
        {"max_tokens", 480},
        {"ignore_eos", true},
        {"stream", stream}}.dump();
    return "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
           "Content-Type: application/json\r\nContent-Length: " +
           std::to_string(body.size()) + "\r\n\r\n" + body;
}

std::vector<std::string> serve_args() {
    return {"-m",      fixture_path("models/stories260K.gguf"),
            "--no-db", "-t",
            "1",       "-c",
            "512",     "--parallel",
            "2",       "--no-spec"};
}

// Sends `n` requests (every other one streamed) on their own connections; returns their
// sockets, to be read by the caller.
std::vector<int> send_requests(int port, int n) {
    std::vector<int> fds;
    for (int i = 0; i < n; ++i) {
        const int fd = connect_loopback(port);
        if (fd < 0) break;
        send_all(fd, completion_request(i % 2 == 1));
        fds.push_back(fd);
    }
    return fds;
}

TEST(ServeSignals, TheFirstSignalCancelsGenerationsAndExitsWithinSeconds) {
    EMBER_REQUIRE_FIXTURE("models/stories260K.gguf");
    TempDir dir;
    ServeProcess server(serve_args(), dir.file("log"));
    ASSERT_GT(server.port(), 0) << server.process().log();
    // 2 slots, 60 requests of 480 tokens each: seconds of work queued.
    std::vector<int> fds = send_requests(server.port(), 60);
    ASSERT_EQ(fds.size(), 60u);
    std::vector<std::string> responses(fds.size());
    std::vector<std::thread> readers;
    for (size_t i = 0; i < fds.size(); ++i) {
        readers.emplace_back([&, i] { responses[i] = read_until_closed(fds[i], 30000); });
    }
    ASSERT_FALSE(server.process().wait_for_line(" generated, length", 20).empty())
        << server.process().log();
    const auto t0 = Clock::now();
    const int status = server.process().stop(SIGTERM, 20);
    const double exit_s = seconds_since(t0);
    for (auto& t : readers) t.join();
    for (int fd : fds) close(fd);
    int complete = 0, refused = 0, stream_cut = 0, other = 0;
    for (const auto& r : responses) {
        const bool streamed = r.find("text/event-stream") != std::string::npos;
        if (r.rfind("HTTP/1.1 200", 0) == 0 && !streamed &&
            r.find("\"completion_tokens\":480") != std::string::npos) {
            ++complete;
        } else if (r.rfind("HTTP/1.1 200", 0) == 0 && streamed &&
                   r.find("\"finish_reason\":\"length\"") != std::string::npos &&
                   r.find("data: [DONE]") != std::string::npos) {
            ++complete;
        } else if (r.rfind("HTTP/1.1 503", 0) == 0 &&
                   r.find("Retry-After: 1") != std::string::npos &&
                   r.find("shutting down") != std::string::npos) {
            ++refused;
        } else if (streamed && r.find("\"error\"") != std::string::npos &&
                   r.find("shutting down") != std::string::npos &&
                   r.find("data: [DONE]") != std::string::npos) {
            ++stream_cut;
        } else {
            ++other;
            std::printf("unexpected response: %s\n", r.substr(0, 400).c_str());
        }
    }
    const std::string log = server.process().log();
    std::printf(
        "[signals] SIGTERM with 60 requests queued: exit %d after %.2f s; %d complete, %d "
        "refused (503), %d streams cut with an error event, %d other\n",
        status, exit_s, complete, refused, stream_cut, other);
    EXPECT_EQ(status, 0) << log;
    EXPECT_LT(exit_s, 3.0);
    EXPECT_EQ(other, 0);
    EXPECT_GE(complete, 1);
    EXPECT_GE(refused, 30);
    EXPECT_NE(log.find("ember serve: stopping (signal 15)"), std::string::npos) << log;
    EXPECT_NE(log.find("ember serve: stopped"), std::string::npos) << log;
    // The listening socket is gone.
    const int late = connect_loopback(server.port());
    EXPECT_LT(late, 0);
    if (late >= 0) close(late);
}

TEST(ServeSignals, ASecondSignalExitsAtOnce) {
    EMBER_REQUIRE_FIXTURE("models/stories260K.gguf");
    TempDir dir;
    auto args = serve_args();
    args.insert(args.end(), {"--stop-timeout", "60"});
    ServeProcess server(args, dir.file("log"));
    ASSERT_GT(server.port(), 0) << server.process().log();
    std::vector<int> fds = send_requests(server.port(), 20);
    ASSERT_FALSE(server.process().wait_for_line(" generated, length", 20).empty())
        << server.process().log();
    // Two different signals, so the second is not merged into the first while pending.
    const auto t0 = Clock::now();
    kill(server.process().pid(), SIGINT);
    const int status = server.process().stop(SIGTERM, 20);
    const double exit_s = seconds_since(t0);
    for (int fd : fds) close(fd);
    const std::string log = server.process().log();
    std::printf("[signals] SIGINT then SIGTERM: exit %d after %.3f s\n", status, exit_s);
    EXPECT_EQ(status, 128 + SIGTERM) << log;
    EXPECT_LT(exit_s, 1.0);
    EXPECT_NE(log.find("ember serve: second signal (15); exiting now"), std::string::npos) << log;
}

TEST(ChatSignals, SigtermMidScriptLeavesEveryAnsweredTurnStored) {
    EMBER_REQUIRE_FIXTURE("models/stories260K.gguf");
    TempDir dir;
    const std::string db = dir.file("chat.db");
    const std::string prompts = dir.file("prompts.jsonl");
    {
        std::ofstream out(prompts);
        for (int i = 0; i < 400; ++i)
            out << json{{"prompt", "Tell me story " + std::to_string(i)}}.dump() << "\n";
    }
    const std::string command = "exec " + shell_quote(ember_binary()) + " chat -m " +
                                shell_quote(fixture_path("models/stories260K.gguf")) +
                                " --script --jsonl --temp 0 -n 200 --ignore-eos -c 512 -t 1 --db " +
                                shell_quote(db) + " < " + shell_quote(prompts);
    BackgroundProcess chat({"/bin/sh", "-c", command}, dir.file("log"));
    // A few turns answered (one JSON line each), then SIGTERM mid-run.
    const auto t0 = Clock::now();
    size_t answered = 0;
    while (seconds_since(t0) < 60 && chat.running()) {
        answered = 0;
        for (const auto& line : split_lines(chat.log())) answered += line.rfind("{", 0) == 0;
        if (answered >= 5) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ASSERT_GE(answered, 5u) << chat.log();
    const int status = chat.stop(SIGTERM, 10);
    size_t printed = 0;
    for (const auto& line : split_lines(chat.log())) printed += line.rfind("{", 0) == 0;
    EXPECT_EQ(status, 128 + SIGTERM);
    ASSERT_LT(printed, 400u) << "the run ended before the signal";
    const CommandResult check =
        run_command({ember_binary(), "sessions", "--db", db, "check"}, "", 60);
    EXPECT_EQ(check.status, 0) << check.out << check.err;
    const CommandResult list =
        run_command({ember_binary(), "sessions", "--db", db, "list"}, "", 60);
    ASSERT_EQ(list.status, 0) << list.err;
    const auto rows = split_lines(list.out);
    ASSERT_EQ(rows.size(), 2u) << list.out;
    std::string id = rows[1].substr(0, rows[1].find(' '));
    const CommandResult exported = run_command(
        {ember_binary(), "sessions", "--db", db, "export", id, "--format", "json"}, "", 60);
    ASSERT_EQ(exported.status, 0) << exported.err;
    const json conv = json::parse(exported.out);
    size_t replies = 0;
    for (const auto& m : conv["messages"]) replies += m["role"] == "assistant";
    std::printf(
        "[signals] chat --script: SIGTERM after %zu printed replies; %zu stored, check %d\n",
        printed, replies, check.status);
    // Every reply printed was committed before it was printed.
    EXPECT_GE(replies, printed);
    EXPECT_LE(replies, printed + 1);
}

}  // namespace
}  // namespace ember::test
