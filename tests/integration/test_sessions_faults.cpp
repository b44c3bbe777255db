// Faults against real session database files and the real binary: a truncated or bit-flipped
// state blob (dropped, recomputed, reported, same replies), a database from a newer ember
// (refused clearly), two ember processes writing one database at once (both work, nothing
// lost), and ember killed with SIGKILL at random moments while chatting (the database stays
// intact and every reply that was complete before the kill is stored).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "sessions/sqlite.h"
#include "tests/support/fixtures.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"

namespace ember::test {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

const char* const kModel = "arch/llama/llama.gguf";
const std::vector<std::string> kPrompts = {"Hello there", "What is two plus two?",
                                           "And three plus three?", "Name a colour."};

using TempDir = ::ember::test::TempDir;

std::string jsonl_input(const std::vector<std::string>& prompts) {
    std::string input;
    for (const auto& p : prompts) input += json{{"role", "user"}, {"content", p}}.dump() + "\n";
    return input;
}

std::vector<std::string> chat_argv(const std::vector<std::string>& extra, int n_predict = 12) {
    std::vector<std::string> argv = {
        ember_binary(), "chat", "-m", fixture_path(kModel),      "--script", "--jsonl",
        "--temp",       "0",    "-n", std::to_string(n_predict), "-t",       "1"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return argv;
}

struct ChatRun {
    int status = -1;
    std::vector<json> turns;
    std::string err;
};

ChatRun run_chat(const std::vector<std::string>& prompts, const std::vector<std::string>& extra) {
    const auto r = run_command(chat_argv(extra), jsonl_input(prompts));
    ChatRun out;
    out.status = r.status;
    out.err = r.err;
    for (const auto& line : split_lines(r.out)) out.turns.push_back(json::parse(line));
    return out;
}

std::vector<std::string> replies(const ChatRun& run) {
    std::vector<std::string> out;
    for (const auto& t : run.turns) out.push_back(t["reply"].get<std::string>());
    return out;
}

int64_t query_int(const std::string& db, const std::string& sql) {
    sessions::Database d(db);
    auto s = d.prepare(sql);
    s.step();
    return s.column_int(0);
}

std::string query_text(sessions::Database& d, const std::string& sql) {
    auto s = d.prepare(sql);
    std::string out;
    while (s.step()) out += s.column_text(0) + "\n";
    return out;
}

// --- corrupted blobs -------------------------------------------------------------------

struct Corruption {
    const char* name;
    void (*damage)(std::vector<uint8_t>& blob);
};

// Damages the state blob of the first stored block (the chain's root: every later block
// chains to it, so nothing of the saved state is usable).
void damage_first_block(const std::string& db, const Corruption& c) {
    sessions::Database d(db);
    auto read = d.prepare("SELECT block_id, state FROM state_blobs ORDER BY block_id LIMIT 1");
    ASSERT_TRUE(read.step());
    const int64_t id = read.column_int(0);
    std::vector<uint8_t> blob = read.column_blob(1);
    c.damage(blob);
    auto write = d.prepare("UPDATE state_blobs SET state = ? WHERE block_id = ?");
    write.bind_blob(1, blob).bind(2, id).run();
}

class SessionsFaultsBlob : public ::testing::TestWithParam<Corruption> {};

TEST_P(SessionsFaultsBlob, BadBlobIsDroppedRecomputedAndReported) {
    EMBER_REQUIRE_FIXTURE(kModel);
    TempDir dir;
    const std::string db = dir.file("blob.db");
    const auto cold = run_chat(kPrompts, {"--no-db", "--no-prefix-cache"});
    const auto first = run_chat({kPrompts[0], kPrompts[1]}, {"--db", db});
    ASSERT_EQ(first.status, 0) << first.err;
    ASSERT_GE(query_int(db, "SELECT COUNT(*) FROM state_blocks"), 1);
    damage_first_block(db, GetParam());
    // `sessions check` reads the damaged store and reports it whole (a blob's damage is found
    // where state is restored, below): no signal, no hang.
    const auto check = run_command({ember_binary(), "sessions", "--db", db, "check"}, "", 60);
    EXPECT_EQ(check.status, 0) << check.out << check.err;
    const auto second = run_chat({kPrompts[2], kPrompts[3]}, {"--db", db, "--continue"});
    ASSERT_EQ(second.status, 0) << second.err;
    ASSERT_EQ(second.turns.size(), 2u);
    // The user is told, nothing of the bad state is used, and the replies are the cold ones.
    EXPECT_NE(second.err.find("warning"), std::string::npos) << second.err;
    EXPECT_NE(second.err.find("dropped it, recomputing"), std::string::npos) << second.err;
    EXPECT_EQ(second.turns[0]["tokens_reused"].get<int64_t>(), 0);
    EXPECT_EQ(replies(second),
              (std::vector<std::string>{cold.turns[2]["reply"], cold.turns[3]["reply"]}));
    EXPECT_EQ(query_int(db, "SELECT value FROM state_counters WHERE name = 'blobs_dropped'"), 1);
    // The recomputed state was stored again: a third process resumes warm.
    const auto third = run_chat({"Thanks."}, {"--db", db, "--continue"});
    ASSERT_EQ(third.status, 0) << third.err;
    EXPECT_GT(third.turns[0]["tokens_reused"].get<int64_t>(), 0);
    EXPECT_EQ(third.err.find("warning"), std::string::npos) << third.err;
}

INSTANTIATE_TEST_SUITE_P(
    Kinds, SessionsFaultsBlob,
    ::testing::Values(
        Corruption{"truncated", [](std::vector<uint8_t>& b) { b.resize(b.size() / 2); }},
        Corruption{"bit_flip_in_frame", [](std::vector<uint8_t>& b) { b[b.size() / 2] ^= 0x10; }},
        Corruption{"bit_flip_in_checksum", [](std::vector<uint8_t>& b) { b[17] ^= 0x01; }}),
    [](const auto& param_info) { return std::string(param_info.param.name); });

// --- a newer schema ----------------------------------------------------------------------

TEST(SessionsFaults, DatabaseFromNewerEmberIsRefusedClearly) {
    EMBER_REQUIRE_FIXTURE(kModel);
    TempDir dir;
    const std::string db = dir.file("newer.db");
    ASSERT_EQ(run_chat({"hi"}, {"--db", db}).status, 0);
    {
        sessions::Database d(db);
        d.exec("PRAGMA user_version=99");
    }
    const auto chat = run_chat({"hi"}, {"--db", db});
    EXPECT_NE(chat.status, 0);
    EXPECT_TRUE(chat.turns.empty());
    EXPECT_NE(chat.err.find(db), std::string::npos) << chat.err;
    EXPECT_NE(chat.err.find("schema version 99 was written by a newer ember"), std::string::npos)
        << chat.err;
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{"sessions", "--db", db, "list"},
          std::vector<std::string>{"replay", "--db", db, "x"}}) {
        std::vector<std::string> argv = {ember_binary()};
        argv.insert(argv.end(), args.begin(), args.end());
        const auto r = run_command(argv);
        EXPECT_NE(r.status, 0) << args[0];
        EXPECT_NE(r.err.find("newer ember"), std::string::npos) << r.err;
    }
    // Nothing was changed: the version is still the newer one.
    EXPECT_EQ(query_int(db, "PRAGMA user_version"), 99);
}

// --- two processes at once -----------------------------------------------------------------

TEST(SessionsFaults, TwoProcessesShareOneDatabase) {
    EMBER_REQUIRE_FIXTURE(kModel);
    TempDir dir;
    const std::string db = dir.file("shared.db");  // created by whichever process is first
    std::vector<std::string> a_prompts, b_prompts;
    for (int i = 0; i < 6; ++i) {
        a_prompts.push_back("Process A asks question " + std::to_string(i));
        b_prompts.push_back("Process B asks question " + std::to_string(i));
    }
    const auto a_cold = run_chat(a_prompts, {"--no-db", "--no-prefix-cache"});
    const auto b_cold = run_chat(b_prompts, {"--no-db", "--no-prefix-cache"});
    ChatRun a, b;
    std::thread ta([&] { a = run_chat(a_prompts, {"--db", db, "--system", "Shared system."}); });
    std::thread tb([&] { b = run_chat(b_prompts, {"--db", db, "--system", "Shared system."}); });
    ta.join();
    tb.join();
    ASSERT_EQ(a.status, 0) << a.err;
    ASSERT_EQ(b.status, 0) << b.err;
    EXPECT_EQ(a.err.find("warning"), std::string::npos) << a.err;
    EXPECT_EQ(b.err.find("warning"), std::string::npos) << b.err;
    ASSERT_EQ(a.turns.size(), a_prompts.size());
    ASSERT_EQ(b.turns.size(), b_prompts.size());
    // The system prompt differs from the cold runs', so compare with warm solo runs instead.
    const auto a_solo = run_chat(a_prompts, {"--no-db", "--system", "Shared system."});
    const auto b_solo = run_chat(b_prompts, {"--no-db", "--system", "Shared system."});
    EXPECT_EQ(replies(a), replies(a_solo));
    EXPECT_EQ(replies(b), replies(b_solo));
    // Nothing lost: two conversations, every prompt and reply stored.
    EXPECT_EQ(query_int(db, "SELECT COUNT(*) FROM conversations"), 2);
    EXPECT_EQ(query_int(db, "SELECT COUNT(*) FROM messages"), 24);
    sessions::Database d(db);
    EXPECT_EQ(query_text(d, "PRAGMA integrity_check"), "ok\n");
    for (const auto& [run, prompts] : {std::pair{&a, &a_prompts}, std::pair{&b, &b_prompts}}) {
        for (size_t i = 0; i < prompts->size(); ++i) {
            auto s = d.prepare(
                "SELECT COUNT(*) FROM messages a JOIN messages u ON a.parent_id = u.id "
                "WHERE a.role = 'assistant' AND u.content = ? AND a.content = ?");
            s.bind(1, (*prompts)[i]).bind(2, run->turns[i]["reply"].get<std::string>());
            ASSERT_TRUE(s.step());
            EXPECT_EQ(s.column_int(0), 1) << (*prompts)[i];
        }
    }
    (void)a_cold;
    (void)b_cold;
}

// --- SIGKILL at random moments ------------------------------------------------------------

// A chat process whose stdout is read as it comes, killed at a chosen moment.
class KilledChat {
public:
    KilledChat(const std::vector<std::string>& argv, const std::string& input) {
        int in[2], out[2];
        if (pipe(in) != 0 || pipe(out) != 0) throw std::runtime_error("pipe failed");
        pid_ = fork();
        if (pid_ == 0) {
            dup2(in[0], 0);
            dup2(out[1], 1);
            const int devnull = open("/dev/null", O_WRONLY);
            dup2(devnull, 2);
            for (int fd : {in[0], in[1], out[0], out[1], devnull}) close(fd);
            std::vector<char*> args;
            for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
            args.push_back(nullptr);
            execv(args[0], args.data());
            _exit(127);
        }
        close(in[0]);
        close(out[1]);
        signal(SIGPIPE, SIG_IGN);
        // The prompts are small: they fit the pipe at once.
        if (write(in[1], input.data(), input.size()) != static_cast<ssize_t>(input.size())) {
            throw std::runtime_error("writing the prompts failed");
        }
        close(in[1]);
        out_ = out[0];
    }
    ~KilledChat() {
        if (out_ >= 0) close(out_);
    }

    // Reads stdout until `deadline` (or the end), then kills the process with SIGKILL.
    // Returns whether the process was still running when killed.
    bool run_until(Clock::time_point deadline) {
        bool exited = false;
        while (Clock::now() < deadline) {
            const auto left =
                std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now())
                    .count();
            pollfd p{out_, POLLIN, 0};
            if (poll(&p, 1, static_cast<int>(std::max<int64_t>(1, left))) <= 0) continue;
            char buf[4096];
            const ssize_t n = read(out_, buf, sizeof buf);
            if (n <= 0) {
                exited = true;
                break;
            }
            out_text_.append(buf, static_cast<size_t>(n));
        }
        kill(pid_, SIGKILL);
        int status = 0;
        waitpid(pid_, &status, 0);
        return !exited;
    }
    // The reply lines received in full before the kill.
    std::vector<json> complete_lines() const {
        std::vector<json> out;
        size_t start = 0;
        for (size_t nl; (nl = out_text_.find('\n', start)) != std::string::npos; start = nl + 1) {
            out.push_back(json::parse(out_text_.substr(start, nl - start)));
        }
        return out;
    }

private:
    pid_t pid_ = -1;
    int out_ = -1;
    std::string out_text_;
};

TEST(SessionsFaults, KilledAtRandomMomentsLosesNoCompleteReply) {
    EMBER_REQUIRE_FIXTURE(kModel);
    TempDir dir;
    const std::string db = dir.file("killed.db");
    constexpr int kRuns = 24;
    constexpr int kTurns = 5;
    // How long an undisturbed run takes, to spread the kills over a whole run: the fastest of
    // three, so that a probe slowed by a neighbouring test (ctest -j) does not push most kills
    // past the end of the runs.
    std::vector<std::string> probe;
    for (int t = 0; t < kTurns; ++t) probe.push_back("Probe question " + std::to_string(t));
    double run_ms = 0;
    for (int p = 0; p < 3; ++p) {
        const auto started = Clock::now();
        ASSERT_EQ(
            run_command(chat_argv({"--db", dir.file("probe.db")}, 40), jsonl_input(probe)).status,
            0);
        const double ms = std::chrono::duration<double, std::milli>(Clock::now() - started).count();
        run_ms = p == 0 ? ms : std::min(run_ms, ms);
    }

    std::mt19937 rng(20261122);
    int killed_running = 0;
    size_t replies_checked = 0;
    for (int run = 0; run < kRuns; ++run) {
        std::vector<std::string> prompts;
        for (int t = 0; t < kTurns; ++t) {
            prompts.push_back("Run " + std::to_string(run) + " question " + std::to_string(t));
        }
        std::vector<std::string> extra = {"--db", db};
        // Half the runs continue the latest conversation, so kills also land in restores.
        // (A run killed while creating the database may leave a file without the schema yet;
        // the next run migrates it.)
        if (run % 2 == 1 && fs::exists(db) &&
            query_int(db, "SELECT COUNT(*) FROM sqlite_master WHERE name = 'conversations'") > 0 &&
            query_int(db, "SELECT COUNT(*) FROM conversations") > 0) {
            extra.push_back("--continue");
        }
        KilledChat chat(chat_argv(extra, 40), jsonl_input(prompts));
        const double at_ms = std::uniform_real_distribution<double>(0, run_ms * 1.1)(rng);
        if (chat.run_until(Clock::now() +
                           std::chrono::microseconds(static_cast<int64_t>(at_ms * 1000)))) {
            ++killed_running;
        }
        if (!fs::exists(db)) continue;  // killed before the database was created
        sessions::Database d(db);
        ASSERT_EQ(query_text(d, "PRAGMA integrity_check"), "ok\n") << "run " << run;
        ASSERT_EQ(query_text(d, "PRAGMA foreign_key_check"), "") << "run " << run;
        // A store killed at any moment passes `sessions check` (exit 0: nothing to report).
        const auto check = run_command({ember_binary(), "sessions", "--db", db, "check"}, "", 60);
        EXPECT_EQ(check.status, 0) << "run " << run << ": " << check.out << check.err;
        const auto lines = chat.complete_lines();
        for (size_t i = 0; i < lines.size(); ++i) {
            auto s = d.prepare(
                "SELECT COUNT(*) FROM messages a JOIN messages u ON a.parent_id = u.id "
                "WHERE a.role = 'assistant' AND u.content = ? AND a.content = ?");
            s.bind(1, prompts[i]).bind(2, lines[i]["reply"].get<std::string>());
            ASSERT_TRUE(s.step());
            EXPECT_EQ(s.column_int(0), 1) << "run " << run << " reply " << i << " is missing";
            ++replies_checked;
        }
    }
    // The kills were spread: most hit a running process, and some replies came out first.
    EXPECT_GE(killed_running, kRuns / 2) << "an undisturbed run took " << run_ms << " ms";
    EXPECT_GT(replies_checked, 0u);
    // And the database still works for a normal run.
    const auto after = run_chat({"Still there?"}, {"--db", db, "--continue"});
    EXPECT_EQ(after.status, 0) << after.err;
    EXPECT_EQ(after.turns.size(), 1u);
}

}  // namespace
}  // namespace ember::test
