// `ember serve --parallel 1` answering two conversations in turn: the one slot holds one of
// them, so each request switches. With the host-memory tier (--state-memory, on by default)
// the state of the conversation coming back is restored from memory: the database's restore
// counters do not move while its writes go on. With --state-memory 0 the same requests
// restore from the database, as before the tier, and give the same replies; and the first
// conversation's second reply equals that of a server that never switched (no state store).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "sessions/sqlite.h"
#include "sessions/state_store.h"
#include "tests/support/fixtures.h"
#include "tests/support/process.h"
#include "tests/support/serve.h"
#include "tests/support/temp_dir.h"

namespace ember::test {
namespace {

using json = nlohmann::json;
using Messages = std::vector<std::pair<std::string, std::string>>;

const char* const kQwen = "arch/qwen3/qwen3.gguf";

json chat_body(const Messages& messages) {
    json m = json::array();
    for (const auto& [role, content] : messages)
        m.push_back({{"role", role}, {"content", content}});
    return json{{"model", "qwen3"}, {"messages", m}, {"max_tokens", 10}, {"temperature", 0}};
}

json post(httplib::Client& c, const json& body) {
    auto r = c.Post("/v1/chat/completions", body.dump(), "application/json");
    EXPECT_TRUE(r) << "no response";
    if (!r) return json();
    EXPECT_EQ(r->status, 200) << r->body;
    return json::parse(r->body);
}

std::string content(const json& reply) {
    return reply["choices"][0]["message"]["content"].get<std::string>();
}

int64_t db_restores(const std::string& path) {
    sessions::Database db(path, sessions::OpenMode::read_only);
    return sessions::read_state_stats(db).restores;
}

struct Switches {
    std::vector<json> second_turns;  // each conversation's second request
    std::vector<Messages> prompts;   // ... and its messages
    int64_t restores_before = 0;     // the database's restore count before them
    int64_t restores_after = 0;
};

// Two conversations' first turns, then their second turns: every request after the first
// finds the slot holding the other conversation.
Switches run_switches(const std::vector<std::string>& memory_flag, const std::string& db,
                      const std::string& log) {
    std::vector<std::string> args = {"-m", fixture_path(kQwen), "--db", db, "-t",
                                     "1",  "--parallel",        "1"};
    args.insert(args.end(), memory_flag.begin(), memory_flag.end());
    ServeProcess server(args, log);
    EXPECT_GT(server.port(), 0) << server.process().log();
    auto c = server.client();
    std::vector<Messages> conversations = {
        {{"system", "You are a terse assistant."}, {"user", "Tell me about the rivers of Europe."}},
        {{"system", "You answer every question in one short line, politely."},
         {"user", "What colour are ripe apples?"}}};
    const std::vector<std::string> next = {"Which one is the longest?", "Why that colour?"};
    for (Messages& m : conversations) {
        const json first = post(*c, chat_body(m));
        m.emplace_back("assistant", content(first));
    }
    Switches s;
    s.restores_before = db_restores(db);
    for (size_t i = 0; i < conversations.size(); ++i) {
        conversations[i].emplace_back("user", next[i]);
        s.second_turns.push_back(post(*c, chat_body(conversations[i])));
        s.prompts.push_back(conversations[i]);
    }
    s.restores_after = db_restores(db);
    EXPECT_EQ(server.process().stop(SIGTERM), 0) << server.process().log();
    return s;
}

TEST(ServeStateMemory, SwitchingRequestsRestoreFromMemoryNotTheDatabase) {
    EMBER_REQUIRE_FIXTURE(kQwen);
    TempDir dir;
    const Switches tiered = run_switches({}, dir.file("tier.db"), dir.file("log1"));
    const Switches plain =
        run_switches({"--state-memory", "0"}, dir.file("plain.db"), dir.file("log2"));
    ASSERT_EQ(tiered.second_turns.size(), 2u);
    ASSERT_EQ(plain.second_turns.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
        const json& t = tiered.second_turns[i]["ember"];
        EXPECT_GT(t["prompt_tokens_restored"].get<int64_t>(), 0) << t.dump();
        EXPECT_EQ(t["prompt_restored_from"], "memory") << t.dump();
        EXPECT_EQ(t["prompt_resume"], "restore") << t.dump();
        const json& p = plain.second_turns[i]["ember"];
        EXPECT_EQ(p["prompt_tokens_restored"], t["prompt_tokens_restored"]) << p.dump();
        EXPECT_EQ(p["prompt_restored_from"], "database") << p.dump();
        EXPECT_EQ(content(tiered.second_turns[i]), content(plain.second_turns[i]));
    }
    // The tier read nothing of the database's state; without it, both switches did.
    EXPECT_EQ(tiered.restores_after, tiered.restores_before);
    EXPECT_EQ(plain.restores_after, plain.restores_before + 2);

    // The first conversation as a server that never switches answers it (no state store,
    // its one slot holding it throughout): the same second reply. (The second conversation's
    // first turn started from the first one's slot, so only the server without the tier,
    // above, evaluated it in the same pieces.)
    ServeProcess own({"-m", fixture_path(kQwen), "--no-db", "-t", "1", "--parallel", "1"},
                     dir.file("log3"));
    ASSERT_GT(own.port(), 0) << own.process().log();
    auto c = own.client();
    Messages first_turn(tiered.prompts[0].begin(), tiered.prompts[0].begin() + 2);
    const json first = post(*c, chat_body(first_turn));
    EXPECT_EQ(content(first), tiered.prompts[0][2].second);
    EXPECT_EQ(content(post(*c, chat_body(tiered.prompts[0]))), content(tiered.second_turns[0]));
}

TEST(ServeStateMemory, TheBoundIsAByteSize) {
    EMBER_REQUIRE_FIXTURE(kQwen);
    const auto r = run_command(
        {ember_binary(), "serve", "-m", fixture_path(kQwen), "--state-memory", "lots"}, "");
    EXPECT_EQ(r.status, 2) << r.err;
    EXPECT_NE(r.err.find("--state-memory"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace ember::test
