// `ember serve` as a real process on a free loopback port: answers equal the CLI's greedy
// output, concurrent clients get their own answers, a disconnect frees its slot, later turns
// and restarted servers reuse prompt state, and bad requests get OpenAI-shaped 4xx errors.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "tests/support/fixtures.h"
#include "tests/support/process.h"
#include "tests/support/serve.h"
#include "tests/support/temp_dir.h"

namespace ember::test {
namespace {

using json = nlohmann::json;

const char* const kQwen = "arch/qwen3/qwen3.gguf";
const char* const kStories = "models/stories260K.gguf";

json post(httplib::Client& c, const std::string& path, const json& body, int* status = nullptr) {
    auto r = c.Post(path.c_str(), body.dump(), "application/json");
    EXPECT_TRUE(r) << "no response from " << path;
    if (!r) return json();
    if (status != nullptr) *status = r->status;
    return json::parse(r->body);
}

// A chat request body; greedy unless told otherwise.
json chat_body(const std::vector<std::pair<std::string, std::string>>& messages,
               int max_tokens = 12) {
    json m = json::array();
    for (const auto& [role, content] : messages)
        m.push_back({{"role", role}, {"content", content}});
    return json{
        {"model", "qwen3"}, {"messages", m}, {"max_tokens", max_tokens}, {"temperature", 0}};
}

struct Answer {
    int status = 0;  // 0: no response
    std::string body;
};

// Each body POSTed to /v1/chat/completions at once, one client thread apiece.
std::vector<Answer> post_concurrently(ServeProcess& server, const std::vector<json>& bodies) {
    std::vector<Answer> answers(bodies.size());
    std::vector<std::thread> clients;
    for (size_t i = 0; i < bodies.size(); ++i) {
        clients.emplace_back([&, i] {
            auto c = server.client();
            auto r = c->Post("/v1/chat/completions", bodies[i].dump(), "application/json");
            if (r) answers[i] = {r->status, r->body};
        });
    }
    for (auto& t : clients) t.join();
    return answers;
}

std::string streamed_text(const std::string& body, json* usage = nullptr,
                          std::string* finish = nullptr) {
    std::string text;
    for (const auto& e : sse_events(body)) {
        if (e.contains("usage") && usage != nullptr) *usage = e["usage"];
        for (const auto& c : e["choices"]) {
            if (c.contains("delta") && c["delta"].contains("content")) {
                text += c["delta"]["content"].get<std::string>();
            }
            if (c.contains("text")) text += c["text"].get<std::string>();
            if (finish != nullptr && !c["finish_reason"].is_null()) *finish = c["finish_reason"];
        }
    }
    return text;
}

TEST(Serve, CompletionsEqualEmberRunGreedy) {
    for (const char* model : {kStories, kQwen}) {
        EMBER_REQUIRE_FIXTURE(model);
        const std::string prompt = "Once upon a time";
        const auto run = run_command({ember_binary(), "run", "-m", fixture_path(model), "-p",
                                      prompt, "-n", "24", "--temp", "0", "--json", "-t", "1"});
        ASSERT_EQ(run.status, 0) << run.err;
        const json expected = json::parse(run.out);

        TempDir dir;
        ServeProcess server({"-m", fixture_path(model), "--no-db", "-t", "1"}, dir.file("log"));
        ASSERT_GT(server.port(), 0) << server.process().log();
        auto c = server.client();
        const json request = {{"prompt", prompt}, {"max_tokens", 24}, {"temperature", 0}};
        const json plain = post(*c, "/v1/completions", request);
        EXPECT_EQ(plain["object"], "text_completion");
        EXPECT_EQ(plain["choices"][0]["text"], expected["text"]) << model;
        EXPECT_EQ(plain["ember"]["completion_ids"], expected["ids"]) << model;
        EXPECT_EQ(plain["usage"]["prompt_tokens"], expected["prompt_ids"].size());
        EXPECT_EQ(plain["usage"]["completion_tokens"], expected["ids"].size());

        json streamed_request = request;
        streamed_request["stream"] = true;
        streamed_request["stream_options"] = {{"include_usage", true}};
        auto r = c->Post("/v1/completions", streamed_request.dump(), "application/json");
        ASSERT_TRUE(r);
        EXPECT_EQ(r->status, 200);
        EXPECT_NE(r->get_header_value("Content-Type").find("text/event-stream"), std::string::npos);
        json usage;
        EXPECT_EQ(streamed_text(r->body, &usage), expected["text"]) << model;
        EXPECT_EQ(usage["completion_tokens"], expected["ids"].size());
        // The second request repeats the first one's prompt: the slot holds it.
        EXPECT_EQ(usage["prompt_tokens_details"]["cached_tokens"].get<int64_t>(),
                  static_cast<int64_t>(expected["prompt_ids"].size()) - 1);
        EXPECT_NE(r->body.find("data: [DONE]"), std::string::npos);
    }
}

TEST(Serve, ChatEqualsEmberChatGreedy) {
    EMBER_REQUIRE_FIXTURE(kQwen);
    const std::string prompt = "What is two plus two?";
    const auto chat = run_command({ember_binary(), "chat", "-m", fixture_path(kQwen), "--script",
                                   "--jsonl", "--temp", "0", "-n", "16", "-t", "1"},
                                  json{{"role", "user"}, {"content", prompt}}.dump() + "\n");
    ASSERT_EQ(chat.status, 0) << chat.err;
    const json expected = json::parse(split_lines(chat.out).at(0));

    TempDir dir;
    ServeProcess server({"-m", fixture_path(kQwen), "--no-db", "-t", "1"}, dir.file("log"));
    ASSERT_GT(server.port(), 0) << server.process().log();
    auto c = server.client();
    const json body = chat_body({{"user", prompt}}, 16);
    const json plain = post(*c, "/v1/chat/completions", body);
    EXPECT_EQ(plain["object"], "chat.completion");
    EXPECT_EQ(plain["choices"][0]["message"]["role"], "assistant");
    EXPECT_EQ(plain["choices"][0]["message"]["content"], expected["reply"]);
    EXPECT_EQ(plain["usage"]["completion_tokens"], expected["tokens_generated"]);
    EXPECT_EQ(plain["choices"][0]["finish_reason"],
              expected["finish"] == "stop" ? "stop" : "length");

    json streamed = body;
    streamed["stream"] = true;
    auto r = c->Post("/v1/chat/completions", streamed.dump(), "application/json");
    ASSERT_TRUE(r);
    std::string finish;
    EXPECT_EQ(streamed_text(r->body, nullptr, &finish), expected["reply"]);
    EXPECT_EQ(finish, plain["choices"][0]["finish_reason"]);
    const auto events = sse_events(r->body);
    ASSERT_FALSE(events.empty());
    EXPECT_EQ(events[0]["object"], "chat.completion.chunk");
    EXPECT_EQ(events[0]["choices"][0]["delta"]["role"], "assistant");
}

TEST(Serve, ConcurrentClientsGetTheirOwnAnswers) {
    EMBER_REQUIRE_FIXTURE(kQwen);
    TempDir dir;
    // Fewer slots than clients: some requests wait for a slot, the rest share the engine.
    ServeProcess server({"-m", fixture_path(kQwen), "--no-db", "-t", "1", "--parallel", "4"},
                        dir.file("log"));
    ASSERT_GT(server.port(), 0) << server.process().log();
    const char* const topics[] = {"the sea",  "a red fox", "mountains", "bread",
                                  "the moon", "a violin",  "winter",    "an old clock"};
    std::vector<json> bodies;
    for (const char* t : topics) {
        bodies.push_back(chat_body(
            {{"system", "You write one line."}, {"user", std::string("Tell me about ") + t}}, 10));
    }
    bodies[3]["stream"] = true;  // streamed and plain requests mixed
    bodies[6]["stream"] = true;
    auto ids_of = [](const std::string& body, bool stream) {
        if (!stream) return json::parse(body)["ember"]["completion_ids"];
        // Streamed replies are compared by text (the ids travel only in the usage chunk).
        return json(streamed_text(body));
    };
    auto text_of = [](const std::string& body, bool stream) {
        return stream ? streamed_text(body)
                      : json::parse(body)["choices"][0]["message"]["content"].get<std::string>();
    };
    std::vector<json> serial_ids(bodies.size());
    std::vector<std::string> serial_text(bodies.size());
    {
        auto c = server.client();
        for (size_t i = 0; i < bodies.size(); ++i) {
            json b = bodies[i];
            b.erase("stream");
            auto r = c->Post("/v1/chat/completions", b.dump(), "application/json");
            ASSERT_TRUE(r);
            serial_ids[i] = ids_of(r->body, false);
            serial_text[i] = text_of(r->body, false);
        }
    }
    // Different prompts give different answers, or the comparison below proves little.
    EXPECT_NE(serial_text[0], serial_text[1]);
    const std::vector<Answer> answers = post_concurrently(server, bodies);
    for (size_t i = 0; i < bodies.size(); ++i) {
        ASSERT_EQ(answers[i].status, 200) << i << ": " << answers[i].body;
        const bool stream = bodies[i].value("stream", false);
        EXPECT_EQ(text_of(answers[i].body, stream), serial_text[i]) << "client " << i;
        if (!stream) {
            EXPECT_EQ(ids_of(answers[i].body, false), serial_ids[i]) << "client " << i;
        }
    }
}

// Four clients at once on a server whose decode steps take up to four generating slots
// (--decode-batch 4; on the CPU a step evaluates them one by one, but the gathering, the turn
// given up while stepping and the rows handed back are the GPU's): each client gets the ids it
// gets alone, and /health shows steps that served several slots.
TEST(Serve, BatchedDecodeStepsGiveEachClientTheReplyItGetsAlone) {
    EMBER_REQUIRE_FIXTURE(kQwen);
    TempDir dir;
    ServeProcess server(
        {"-m", fixture_path(kQwen), "--no-db", "-t", "1", "--parallel", "4", "--decode-batch", "4"},
        dir.file("log"));
    ASSERT_GT(server.port(), 0) << server.process().log();
    const char* const topics[] = {"the sea", "a red fox", "mountains", "bread"};
    std::vector<json> bodies;
    for (const char* t : topics) {
        json b = chat_body({{"user", std::string("Tell me about ") + t}}, 24);
        b["ignore_eos"] = true;  // every reply 24 tokens: long enough to share steps
        bodies.push_back(b);
    }
    std::vector<json> alone(bodies.size());
    {
        auto c = server.client();
        for (size_t i = 0; i < bodies.size(); ++i) {
            auto r = c->Post("/v1/chat/completions", bodies[i].dump(), "application/json");
            ASSERT_TRUE(r);
            ASSERT_EQ(r->status, 200) << r->body;
            alone[i] = json::parse(r->body)["ember"]["completion_ids"];
            ASSERT_EQ(alone[i].size(), 24u);
        }
    }
    EXPECT_NE(alone[0], alone[1]);
    const json before = json::parse(server.client()->Get("/health")->body)["decode_batch"];
    EXPECT_EQ(before["max"], 4);
    const std::vector<Answer> answers = post_concurrently(server, bodies);
    for (size_t i = 0; i < bodies.size(); ++i) {
        ASSERT_EQ(answers[i].status, 200) << i << ": " << answers[i].body;
        EXPECT_EQ(json::parse(answers[i].body)["ember"]["completion_ids"], alone[i])
            << "client " << i;
    }
    const json after = json::parse(server.client()->Get("/health")->body)["decode_batch"];
    EXPECT_GE(after["largest"].get<int>(), 2) << after.dump();
    EXPECT_GT(after["tokens"].get<int>() - before["tokens"].get<int>(),
              after["steps"].get<int>() - before["steps"].get<int>())
        << "no step served more than one slot: " << after.dump();
}

// Opens a raw connection, sends `request` and returns the socket (the caller closes it).
int raw_connect(int port) {
    return connect_loopback(port);
}

std::string http_post_text(const std::string& path, const std::string& body) {
    return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" +
           "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

TEST(Serve, DisconnectMidStreamCancelsAndFreesTheSlot) {
    EMBER_REQUIRE_FIXTURE(kQwen);
    TempDir dir;
    ServeProcess server(
        {"-m", fixture_path(kQwen), "--no-db", "-t", "1", "--parallel", "1", "-c", "4096"},
        dir.file("log"));
    ASSERT_GT(server.port(), 0) << server.process().log();
    json body = {
        {"prompt", "Once upon a time"}, {"max_tokens", 3000}, {"temperature", 0}, {"stream", true}};
    const int fd = raw_connect(server.port());
    ASSERT_GE(fd, 0);
    const std::string request = http_post_text("/v1/completions", body.dump());
    ASSERT_EQ(write(fd, request.data(), request.size()), static_cast<ssize_t>(request.size()));
    // Read until a few text chunks have arrived, then hang up mid-reply.
    std::string got;
    char buf[4096];
    while (std::count(got.begin(), got.end(), '\n') < 20) {
        const ssize_t n = read(fd, buf, sizeof buf);
        ASSERT_GT(n, 0) << got;
        got.append(buf, static_cast<size_t>(n));
    }
    close(fd);
    const std::string cancelled = server.process().wait_for_line("client disconnected", 60);
    ASSERT_FALSE(cancelled.empty()) << server.process().log();
    // The one slot is free again: a new request is answered at once, long before the
    // abandoned 3000 tokens could have been generated.
    auto c = server.client(60);
    const json health = json::parse(c->Get("/health")->body);
    EXPECT_EQ(health["slots_busy"], 0);
    const json next =
        post(*c, "/v1/completions", {{"prompt", "The end"}, {"max_tokens", 4}, {"temperature", 0}});
    EXPECT_EQ(next["usage"]["completion_tokens"], 4);
    const size_t at = cancelled.find("after ");
    ASSERT_NE(at, std::string::npos);
    EXPECT_LT(std::atoi(cancelled.c_str() + at + 6), 3000) << cancelled;
}

TEST(Serve, LaterTurnsReuseAndARestartedServerIsWarm) {
    EMBER_REQUIRE_FIXTURE(kQwen);
    TempDir dir;
    const std::string db = dir.file("state.db");
    const std::vector<std::string> args = {"-m", fixture_path(kQwen), "--db", db, "-t",
                                           "1",  "--parallel",        "2"};
    std::vector<std::pair<std::string, std::string>> messages = {
        {"system", "You are a terse assistant who answers in one line."},
        {"user", "Name three rivers of Europe and say which is the longest."}};
    json first;
    json second;
    {
        ServeProcess server(args, dir.file("log1"));
        ASSERT_GT(server.port(), 0) << server.process().log();
        auto c = server.client();
        first = post(*c, "/v1/chat/completions", chat_body(messages));
        ASSERT_TRUE(first.contains("choices")) << first.dump();
        EXPECT_EQ(first["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
        messages.emplace_back("assistant",
                              first["choices"][0]["message"]["content"].get<std::string>());
        messages.emplace_back("user", "And the shortest?");
        second = post(*c, "/v1/chat/completions", chat_body(messages));
        // The second turn reuses the first turn's prompt (and reply) from its slot.
        const int64_t first_prompt = first["usage"]["prompt_tokens"];
        EXPECT_GE(second["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>(),
                  first_prompt);
        EXPECT_EQ(second["ember"]["prompt_tokens_restored"], 0);
        EXPECT_EQ(server.process().stop(SIGTERM), 0) << server.process().log();
    }
    // A new process: the slots are empty, the state store answers.
    ServeProcess server(args, dir.file("log2"));
    ASSERT_GT(server.port(), 0) << server.process().log();
    auto c = server.client();
    const json again = post(*c, "/v1/chat/completions", chat_body(messages));
    const int64_t prompt = again["usage"]["prompt_tokens"];
    const int64_t cached = again["usage"]["prompt_tokens_details"]["cached_tokens"];
    EXPECT_EQ(prompt, second["usage"]["prompt_tokens"].get<int64_t>());
    // All of it came from the store (which may have restored the last prompt token too, which
    // is evaluated again for the first reply token's logits).
    EXPECT_GE(again["ember"]["prompt_tokens_restored"].get<int64_t>(), cached);
    EXPECT_GE(cached, prompt - 1) << again.dump();
    // Warm or cold, greedy answers are the same.
    EXPECT_EQ(again["choices"][0]["message"]["content"],
              second["choices"][0]["message"]["content"]);
}

void expect_error(const httplib::Result& r, int status, const std::string& param = {},
                  const std::string& code = {}) {
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, status) << r->body;
    const json j = json::parse(r->body);
    ASSERT_TRUE(j.contains("error")) << r->body;
    EXPECT_TRUE(j["error"]["message"].is_string());
    EXPECT_FALSE(j["error"]["message"].get<std::string>().empty());
    EXPECT_TRUE(j["error"]["type"].is_string());
    if (!param.empty()) {
        EXPECT_EQ(j["error"]["param"], param) << r->body;
    }
    if (!code.empty()) {
        EXPECT_EQ(j["error"]["code"], code) << r->body;
    }
}

TEST(Serve, BadRequestsGetClearErrors) {
    EMBER_REQUIRE_FIXTURE(kStories);
    TempDir dir;
    ServeProcess server(
        {"-m", fixture_path(kStories), "--no-db", "-t", "1", "-c", "256", "--max-body", "64KiB"},
        dir.file("log"));
    ASSERT_GT(server.port(), 0) << server.process().log();
    auto c = server.client();
    const std::string chat = "/v1/chat/completions";
    expect_error(c->Post(chat.c_str(), "{\"messages\": [", "application/json"), 400);
    expect_error(c->Post(chat.c_str(), "[1,2]", "application/json"), 400);
    expect_error(c->Post(chat.c_str(), "{\"messages\": \"hi\"}", "application/json"), 400,
                 "messages");
    expect_error(c->Post(chat.c_str(), R"({"messages": [{"role": "user", "content": 5}]})",
                         "application/json"),
                 400, "messages[0].content");
    expect_error(c->Post(chat.c_str(), R"({"messages": [{"role": "wizard", "content": "x"}]})",
                         "application/json"),
                 400, "messages[0].role");
    expect_error(
        c->Post(chat.c_str(),
                R"({"messages": [{"role": "user", "content": "x"}], "temperature": "hot"})",
                "application/json"),
        400, "temperature");
    expect_error(c->Post(chat.c_str(),
                         R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": -3})",
                         "application/json"),
                 400, "max_tokens");
    expect_error(c->Post(chat.c_str(),
                         R"({"model": "gpt-9", "messages": [{"role": "user", "content": "x"}]})",
                         "application/json"),
                 404, "model", "model_not_found");
    // Context overflow: the prompt alone is longer than the 256-token context.
    std::string long_text;
    for (int i = 0; i < 300; ++i) long_text += "lorem ipsum ";
    expect_error(c->Post("/v1/completions", json{{"prompt", long_text}}.dump(), "application/json"),
                 400, "", "context_length_exceeded");
    expect_error(c->Post("/v1/completions", json{{"prompt", "Once"}, {"max_tokens", 100000}}.dump(),
                         "application/json"),
                 400, "max_tokens", "context_length_exceeded");
    // A body over --max-body, an unknown path, a wrong method, invalid UTF-8, deep nesting.
    expect_error(c->Post("/v1/completions", std::string(100 * 1024, ' '), "application/json"), 413);
    expect_error(c->Get("/v1/nothing"), 404);
    expect_error(c->Get(chat.c_str()), 405);
    expect_error(c->Post("/v1/completions", "{\"prompt\": \"\xff\xfe\"}", "application/json"), 400);
    expect_error(c->Post(chat.c_str(), std::string(5000, '['), "application/json"), 400);
    // Still serving.
    auto health = c->Get("/health");
    ASSERT_TRUE(health);
    EXPECT_EQ(health->status, 200);
    const json models = json::parse(c->Get("/v1/models")->body);
    EXPECT_EQ(models["data"][0]["id"], "stories260K");
}

TEST(Serve, ApiKeyIsRequiredWhenConfigured) {
    EMBER_REQUIRE_FIXTURE(kStories);
    TempDir dir;
    setenv("EMBER_TEST_SERVE_KEY", "sesame-123", 1);
    ServeProcess server({"-m", fixture_path(kStories), "--no-db", "-t", "1", "--api-key-env",
                         "EMBER_TEST_SERVE_KEY"},
                        dir.file("log"));
    ASSERT_GT(server.port(), 0) << server.process().log();
    auto c = server.client();
    expect_error(c->Get("/v1/models"), 401, "", "invalid_api_key");
    expect_error(c->Get("/v1/models", {{"Authorization", "Bearer sesame-12"}}), 401, "",
                 "invalid_api_key");
    auto ok = c->Get("/v1/models", {{"Authorization", "Bearer sesame-123"}});
    ASSERT_TRUE(ok);
    EXPECT_EQ(ok->status, 200);
    c->set_bearer_token_auth("sesame-123");
    const json done =
        post(*c, "/v1/completions", {{"prompt", "Once"}, {"max_tokens", 3}, {"temperature", 0}});
    EXPECT_EQ(done["usage"]["completion_tokens"], 3);
}

}  // namespace
}  // namespace ember::test
