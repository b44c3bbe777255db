// What a daily user of `ember chat` relies on, through the real binary and real SQLite files:
// a fresh seed per run unless --seed (chat, run, serve), the seed stored with each reply so
// `ember replay --regenerate` samples it again; a conversation reopening its own model without
// -m (found again by fingerprint when the file moved, one clear line when it is gone); replies
// running to the end of the context by default; `ember sessions stats` splitting messages from
// state, and `ember sessions prune --state` trimming state without touching messages.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "sessions/sqlite.h"
#include "tests/support/fixtures.h"
#include "tests/support/process.h"
#include "tests/support/serve.h"
#include "tests/support/temp_dir.h"

namespace ember::test {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// A small random-weight model with a large vocabulary: sampled at temperature 1.5, two runs
// agree on 16 tokens only by a vanishing chance.
constexpr const char* kModel = "arch/qwen2/qwen2.gguf";

std::vector<json> json_lines(const std::string& text) {
    std::vector<json> out;
    for (const auto& line : split_lines(text)) {
        if (!line.empty()) out.push_back(json::parse(line));
    }
    return out;
}

// A scripted chat of `prompts` (JSONL in and out) with `extra` flags; no -m unless given.
CommandResult chat(const std::vector<std::string>& prompts, const std::vector<std::string>& extra) {
    std::string input;
    for (const auto& p : prompts) input += json{{"role", "user"}, {"content", p}}.dump() + "\n";
    std::vector<std::string> argv = {ember_binary(), "chat", "--script", "--jsonl", "-t", "2"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return run_command(argv, input, 300);
}

CommandResult ember(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {ember_binary()};
    argv.insert(argv.end(), args.begin(), args.end());
    return run_command(argv, "", 300);
}

std::vector<int64_t> ids_of(const CommandResult& r) {
    const json j = json::parse(r.out);
    return j["ids"].get<std::vector<int64_t>>();
}

std::string conversation_id(const std::string& db) {
    sessions::Database d(db);
    auto s = d.prepare("SELECT public_id FROM conversations ORDER BY activity DESC");
    return s.step() ? s.column_text(0) : std::string();
}

// Every stored reply's seed, oldest first (NULL as -1).
std::vector<int64_t> stored_seeds(const std::string& db) {
    sessions::Database d(db);
    auto s = d.prepare("SELECT COALESCE(seed, -1) FROM reply_stats ORDER BY message_id");
    std::vector<int64_t> out;
    while (s.step()) out.push_back(s.column_int(0));
    return out;
}

TEST(ChatSeeds, RunSamplesAfreshUnlessSeeded) {
    EMBER_REQUIRE_FIXTURE(kModel);
    const std::vector<std::string> run = {
        "run", "-m", fixture_path(kModel), "-p", "Hello", "-n", "16", "--temp", "1.5", "--json",
        "-t",  "2",  "--ignore-eos"};
    const auto a = ember(run);
    const auto b = ember(run);
    ASSERT_EQ(a.status, 0) << a.err;
    ASSERT_EQ(b.status, 0) << b.err;
    EXPECT_NE(ids_of(a), ids_of(b)) << a.out << b.out;
    EXPECT_NE(json::parse(a.out)["seed"], json::parse(b.out)["seed"]);
    auto seeded = run;
    seeded.insert(seeded.end(), {"--seed", "7"});
    const auto c = ember(seeded);
    const auto d = ember(seeded);
    ASSERT_EQ(c.status, 0) << c.err;
    EXPECT_EQ(ids_of(c), ids_of(d));
    EXPECT_EQ(json::parse(c.out)["seed"], 7);
    // The seed a run reports gives that run again.
    auto again = run;
    again.insert(again.end(), {"--seed", json::parse(a.out)["seed"].dump()});
    EXPECT_EQ(ids_of(ember(again)), ids_of(a));
}

TEST(ChatSeeds, ChatSamplesAfreshAndReplayRegeneratesStoredSeeds) {
    EMBER_REQUIRE_FIXTURE(kModel);
    TempDir dir;
    const std::vector<std::string> sampled = {"-m", fixture_path(kModel), "--temp", "1.5", "-n",
                                              "16", "--ignore-eos"};
    const auto one = chat({"Tell me a story"}, sampled);
    const auto two = chat({"Tell me a story"}, sampled);
    ASSERT_EQ(one.status, 0) << one.err;
    ASSERT_EQ(two.status, 0) << two.err;
    const json r1 = json_lines(one.out).at(0), r2 = json_lines(two.out).at(0);
    EXPECT_NE(r1["reply"], r2["reply"]);
    EXPECT_NE(r1["seed"], r2["seed"]);
    auto seeded = sampled;
    seeded.insert(seeded.end(), {"--seed", "42"});
    const auto s1 = json_lines(chat({"Tell me a story", "More"}, seeded).out);
    const auto s2 = json_lines(chat({"Tell me a story", "More"}, seeded).out);
    ASSERT_EQ(s1.size(), 2u);
    ASSERT_EQ(s2.size(), 2u);
    EXPECT_EQ(s1[0]["reply"], s2[0]["reply"]);
    EXPECT_EQ(s1[1]["reply"], s2[1]["reply"]);
    // A run's replies take the seed and the numbers after it.
    EXPECT_EQ(s1[0]["seed"], 42);
    EXPECT_EQ(s1[1]["seed"], 43);

    // Sampled turns over two processes (the second without -m) replay identically: each reply
    // is stored with its seed.
    const std::string db = dir.file("chat.db");
    auto first = sampled;
    first.insert(first.end(), {"--db", db});
    const auto a = chat({"Tell me a story", "What happened next?"}, first);
    ASSERT_EQ(a.status, 0) << a.err;
    const auto b = chat({"And then?"},
                        {"--db", db, "--continue", "--temp", "1.5", "-n", "16", "--ignore-eos"});
    ASSERT_EQ(b.status, 0) << b.err;
    std::vector<int64_t> printed;
    for (const auto& j : json_lines(a.out)) printed.push_back(j["seed"].get<uint64_t>());
    for (const auto& j : json_lines(b.out)) printed.push_back(j["seed"].get<uint64_t>());
    ASSERT_EQ(printed.size(), 3u);
    EXPECT_EQ(stored_seeds(db), printed);
    // Not greedy: the greedy replies to the same turns differ.
    const auto greedy =
        chat({"Tell me a story"}, {"-m", fixture_path(kModel), "--temp", "0", "-n", "16"});
    EXPECT_NE(json_lines(greedy.out).at(0)["reply"], json_lines(a.out).at(0)["reply"]);
    const auto replayed =
        ember({"replay", conversation_id(db), "--regenerate", "--db", db, "-t", "2"});
    EXPECT_EQ(replayed.status, 0) << replayed.out << replayed.err;
    EXPECT_NE(replayed.out.find("all 3 turns identical"), std::string::npos) << replayed.out;
}

TEST(ChatSeeds, ServeSamplesAfreshWithoutARequestSeed) {
    EMBER_REQUIRE_FIXTURE(kModel);
    TempDir dir;
    ServeProcess server({"-m", fixture_path(kModel), "-t", "2", "--parallel", "1"},
                        dir.file("serve.log"));
    ASSERT_NE(server.port(), 0) << server.process().log();
    const auto complete = [&](const json& extra) {
        json body = {{"model", "qwen2"},
                     {"messages", json::array({{{"role", "user"}, {"content", "Hello"}}})},
                     {"max_tokens", 16},
                     {"temperature", 1.5}};
        body.update(extra);
        auto response =
            server.client()->Post("/v1/chat/completions", body.dump(), "application/json");
        EXPECT_TRUE(response);
        if (!response) return std::string();
        EXPECT_EQ(response->status, 200) << response->body;
        return json::parse(response->body)["choices"][0]["message"]["content"].get<std::string>();
    };
    const std::string a = complete(json::object());
    const std::string b = complete(json::object());
    EXPECT_NE(a, b);
    EXPECT_EQ(complete({{"seed", 5}}), complete({{"seed", 5}}));
}

// A fake home: Ember's models dir holds what the test puts there; nothing else is found.
class ConversationModel : public ::testing::Test {
protected:
    void SetUp() override {
        EMBER_REQUIRE_FIXTURE(kModel);
        EMBER_REQUIRE_FIXTURE("arch/llama/llama.gguf");
        home_ = std::make_unique<TempDir>("ember-daily-home");
        models_ = home_->path() / ".local/share/ember/models";
        fs::create_directories(models_);
        fs::create_directories(home_->path() / "work");
        setenv("HOME", home_->path().c_str(), 1);
        for (const char* name : {"XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME",
                                 "EMBER_MODEL", "OLLAMA_MODELS", "LLAMA_CACHE"}) {
            unsetenv(name);
        }
        db_ = (home_->path() / "chats.db").string();
    }
    // `ember ARGS` run from `cwd`.
    CommandResult ember_in(const fs::path& cwd, const std::vector<std::string>& args,
                           const std::string& input = "") const {
        // Built by appending: GCC 12 warns (-Wrestrict) about " " + string.
        std::string command = "cd ";
        command += shell_quote(cwd.string());
        command += " && exec ";
        command += shell_quote(ember_binary());
        for (const auto& a : args) {
            command += ' ';
            command += shell_quote(a);
        }
        return run_command({"/bin/sh", "-c", command}, input, 300);
    }
    std::string reply_of(const CommandResult& r) const {
        const auto lines = json_lines(r.out);
        return lines.empty() ? std::string() : lines.back()["reply"].get<std::string>();
    }
    static std::string prompt(const std::string& text) {
        return json{{"role", "user"}, {"content", text}}.dump() + "\n";
    }

    std::unique_ptr<TempDir> home_;
    fs::path models_;
    std::string db_;
};

TEST_F(ConversationModel, ContinueResumeAndReplayReopenTheirOwnModel) {
    const fs::path work = home_->path() / "work";
    fs::copy_file(fixture_path(kModel), work / "mine.gguf");
    const std::vector<std::string> greedy = {"--script", "--jsonl", "--temp", "0",    "-n",
                                             "8",        "-t",      "2",      "--db", db_};
    // Started with a relative path; the conversation stores it absolute.
    std::vector<std::string> first = {"chat", "-m", "mine.gguf"};
    first.insert(first.end(), greedy.begin(), greedy.end());
    ASSERT_EQ(ember_in(work, first, prompt("Hello there")).status, 0);
    {
        sessions::Database d(db_);
        auto s = d.prepare("SELECT model_path FROM conversations");
        ASSERT_TRUE(s.step());
        EXPECT_EQ(s.column_text(0), (work / "mine.gguf").string());
    }
    const std::string id = conversation_id(db_);
    // The same turn as a reference: the model named, no store.
    const auto reference = ember_in(work,
                                    {"chat", "-m", "mine.gguf", "--script", "--jsonl", "--temp",
                                     "0", "-n", "8", "-t", "2", "--no-db"},
                                    prompt("Hello there") + prompt("Name a colour."));
    ASSERT_EQ(reference.status, 0) << reference.err;

    // --continue from elsewhere, no -m, and a newer model in Ember's dir that would be the
    // default: the conversation's own model answers.
    fs::copy_file(fixture_path("arch/llama/llama.gguf"), models_ / "newer.gguf");
    std::vector<std::string> cont = {"chat", "--continue"};
    cont.insert(cont.end(), greedy.begin(), greedy.end());
    const auto continued = ember_in(home_->path(), cont, prompt("Name a colour."));
    ASSERT_EQ(continued.status, 0) << continued.err;
    EXPECT_EQ(reply_of(continued), reply_of(reference));

    // Moved into Ember's models dir under another name: found by its fingerprint.
    fs::rename(work / "mine.gguf", models_ / "renamed.gguf");
    std::vector<std::string> resume = {"chat", "--resume", id};
    resume.insert(resume.end(), greedy.begin(), greedy.end());
    const auto resumed = ember_in(home_->path(), resume, prompt("Name a colour."));
    ASSERT_EQ(resumed.status, 0) << resumed.err;
    EXPECT_NE(resumed.err.find("found the same model at " + (models_ / "renamed.gguf").string()),
              std::string::npos)
        << resumed.err;
    EXPECT_FALSE(reply_of(resumed).empty());
    // Replay without -m finds the moved file too, and its three turns come out the same.
    const auto replayed =
        ember_in(home_->path(), {"replay", id, "--regenerate", "--db", db_, "-t", "2"});
    EXPECT_EQ(replayed.status, 0) << replayed.out << replayed.err;
    EXPECT_NE(replayed.out.find("all 3 turns identical"), std::string::npos) << replayed.out;

    // Gone: one line naming where it was.
    fs::remove(models_ / "renamed.gguf");
    const auto gone = ember_in(home_->path(), cont, prompt("Hi"));
    EXPECT_EQ(gone.status, 1);
    EXPECT_EQ(split_lines(gone.err).size(), 1u) << gone.err;
    EXPECT_NE(gone.err.find("recorded with " + (work / "mine.gguf").string()), std::string::npos)
        << gone.err;
    EXPECT_NE(gone.err.find("-m"), std::string::npos) << gone.err;
}

TEST(ChatDefaults, RepliesRunToTheEndOfTheContext) {
    const char* const model = "arch/llama/llama.gguf";
    EMBER_REQUIRE_FIXTURE(model);
    // No -n: past the old 512-token default, to the end of the context.
    const auto r = chat({"Hello"}, {"-m", fixture_path(model), "--temp", "0", "--ignore-eos", "-c",
                                    "700", "--no-spec"});
    ASSERT_EQ(r.status, 0) << r.err;
    const json j = json_lines(r.out).at(0);
    const int64_t generated = j["tokens_generated"].get<int64_t>();
    EXPECT_GT(generated, 512);
    // The prompt and the reply fill the context: every position holds a token, and the
    // reply's last token, sampled from the last position, needs none.
    EXPECT_EQ(j["tokens_evaluated"].get<int64_t>() + generated, 700 + 1) << j.dump();
    EXPECT_EQ(j["finish"], "context") << j.dump();
}

// Bytes of the messages as the chat printed them: prompts and replies (UTF-8) and 4 bytes per
// generated token id.
int64_t expected_message_bytes(const std::vector<std::string>& prompts,
                               const std::vector<json>& replies) {
    int64_t bytes = 0;
    for (const auto& p : prompts) bytes += static_cast<int64_t>(p.size());
    for (const auto& r : replies) {
        bytes += static_cast<int64_t>(r["reply"].get<std::string>().size()) +
                 4 * r["tokens_generated"].get<int64_t>();
    }
    return bytes;
}

int64_t number_after(const std::string& text, const std::string& label) {
    std::smatch m;
    if (!std::regex_search(text, m, std::regex(label + R"(\s+(\d+) bytes)"))) return -1;
    return std::stoll(m[1].str());
}

TEST(SessionsSpace, StatsSplitMessagesFromStateAndPruneKeepsMessages) {
    EMBER_REQUIRE_FIXTURE(kModel);
    TempDir dir;
    const std::string db = dir.file("store.db");
    const std::vector<std::string> prompts = {"Tell me a story about a lighthouse keeper",
                                              "Why did the light go out?", "Végül mi történt?"};
    // Long replies, so the state fills pages of its own (64 KiB each).
    const auto r = chat(prompts, {"-m", fixture_path(kModel), "--temp", "0", "-n", "300",
                                  "--ignore-eos", "--db", db});
    ASSERT_EQ(r.status, 0) << r.err;
    const auto replies = json_lines(r.out);
    ASSERT_EQ(replies.size(), 3u);
    const auto sessions = [&](std::vector<std::string> args) {
        args.insert(args.begin(), "sessions");
        args.insert(args.end(), {"--db", db});
        return ember(args);
    };
    const auto before = sessions({"stats"});
    ASSERT_EQ(before.status, 0) << before.err;
    EXPECT_EQ(number_after(before.out, "messages:"), expected_message_bytes(prompts, replies))
        << before.out;
    const int64_t state_bytes = number_after(before.out, "state:");
    EXPECT_GT(state_bytes, 0) << before.out;
    const std::string id = conversation_id(db);
    const std::string exported = sessions({"export", id, "--format", "json"}).out;

    // State unused for a day: nothing.
    const auto none = sessions({"prune", "--state", "--older-than", "1d"});
    ASSERT_EQ(none.status, 0) << none.err;
    EXPECT_NE(none.out.find("pruned 0 state blocks"), std::string::npos) << none.out;
    EXPECT_EQ(number_after(sessions({"stats"}).out, "state:"), state_bytes);

    const auto on_disk = [&] {
        std::error_code ec;
        const uint64_t wal = fs::exists(db + "-wal") ? fs::file_size(db + "-wal", ec) : 0;
        return fs::file_size(db) + wal;
    };
    const uint64_t file_before = on_disk();
    const auto pruned = sessions({"prune", "--state"});
    ASSERT_EQ(pruned.status, 0) << pruned.err;
    EXPECT_NE(pruned.out.find("(VACUUM)"), std::string::npos) << pruned.out;
    const auto after = sessions({"stats"});
    EXPECT_EQ(number_after(after.out, "state:"), 0) << after.out;
    EXPECT_EQ(number_after(after.out, "messages:"), expected_message_bytes(prompts, replies));
    EXPECT_EQ(sessions({"export", id, "--format", "json"}).out, exported);
    EXPECT_LT(on_disk(), file_before);
    // The conversation goes on, cold.
    const auto more = chat({"And then?"}, {"-m", fixture_path(kModel), "--temp", "0", "-n", "8",
                                           "--db", db, "--continue"});
    ASSERT_EQ(more.status, 0) << more.err;
    EXPECT_EQ(json_lines(more.out).at(0)["tokens_reused"], 0);

    // Bad input: one line, usage status.
    const auto bad = sessions({"prune", "--state", "--older-than", "soon"});
    EXPECT_EQ(bad.status, 2);
    EXPECT_NE(bad.err.find("--older-than: 'soon' is not a duration"), std::string::npos) << bad.err;
    const auto nothing = sessions({"prune"});
    EXPECT_EQ(nothing.status, 2);
    EXPECT_NE(nothing.err.find("--state"), std::string::npos) << nothing.err;
}

}  // namespace
}  // namespace ember::test
