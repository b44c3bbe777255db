// The chat's host-memory tier through the real binary (line mode in tmux): two conversations
// in one chat, then /load of the first and a question. With the tier (on by default) the
// first conversation's state comes back from memory (/stats: "resume: restore from memory")
// and the database's restore counters do not move; with --state-memory 0 it comes from the
// database, as before the tier; the reply is the same either way.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "sessions/sqlite.h"
#include "tests/support/fixtures.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tmux.h"

namespace ember::test {
namespace {

namespace fs = std::filesystem;

const char* const kModel = "arch/llama/llama.gguf";
const char* const kShellPrompt = "SHELL$";

bool at_prompt(const std::string& screen) {
    const auto lines = screen_lines(screen);
    return !lines.empty() && lines.back() == ">";
}

bool shows(const std::string& screen, const std::string& text) {
    return screen.find(text) != std::string::npos;
}

size_t count(const std::string& screen, const std::string& text) {
    size_t n = 0;
    for (size_t at = screen.find(text); at != std::string::npos; at = screen.find(text, at + 1)) {
        ++n;
    }
    return n;
}

int64_t query_number(const std::string& db, const std::string& sql) {
    sessions::Database d(db, sessions::OpenMode::read_only);
    auto s = d.prepare(sql);
    return s.step() ? s.column_int(0) : -1;
}

std::string query_text(const std::string& db, const std::string& sql) {
    sessions::Database d(db, sessions::OpenMode::read_only);
    auto s = d.prepare(sql);
    return s.step() ? s.column_text(0) : std::string();
}

int64_t restores(const std::string& db) {
    return query_number(db,
                        "SELECT COALESCE(MAX(value), 0) FROM state_counters WHERE name = "
                        "'restores'");
}

struct Switched {
    std::string stats;  // the screen after /stats
    std::string reply;  // the reply after /load
    int64_t restores_before = 0;
    int64_t restores_after = 0;
};

// One chat: a conversation, /new and another, /load of the first and a question, /stats.
Switched switch_back(const std::string& tmux_binary, const TempDir& dir, const std::string& name,
                     const std::string& flags) {
    Switched out;
    TmuxSession tmux(tmux_binary, "ember-state-memory-" + name);
    const std::string db = dir.file(name + ".db");
    const std::string shell = "env PS1=" + shell_quote(std::string(kShellPrompt) + " ") +
                              " XDG_DATA_HOME=" + shell_quote(dir.file("data-" + name)) +
                              " /bin/sh";
    EXPECT_EQ(tmux.start(shell, 100, 40).status, 0);
    std::string screen;
    const auto screen_now = [&tmux] { return tmux.capture({"-J", "-S", "-"}); };
    const auto wait_for = [&](const std::function<bool(const std::string&)>& done) {
        return TmuxSession::poll(screen_now, done, screen, 60.0);
    };
    const auto type = [&tmux](const std::string& text) {
        tmux.text(text);
        tmux.keys("Enter");
    };
    EXPECT_TRUE(wait_for([](const std::string& s) { return shows(s, kShellPrompt); })) << screen;
    type(shell_quote(ember_binary()) + " chat --plain --verbose -m " +
         shell_quote(fixture_path(kModel)) + " --db " + shell_quote(db) + " --temp 0 -n 8 -t 1 " +
         flags);
    EXPECT_TRUE(wait_for(at_prompt)) << screen;
    const auto turn = [&](const std::string& text, size_t done) {
        type(text);
        EXPECT_TRUE(wait_for([done](const std::string& s) {
            return count(s, " tokens, ") >= done && at_prompt(s);
        })) << screen;
    };
    turn("Tell me about the rivers of Europe.", 1);
    type("/new");
    EXPECT_TRUE(wait_for([](const std::string& s) { return shows(s, "new conversation"); }))
        << screen;
    turn("What colour are ripe apples?", 2);
    const std::string first =
        query_text(db, "SELECT public_id FROM conversations ORDER BY activity ASC LIMIT 1");
    out.restores_before = restores(db);
    type("/load " + first);
    EXPECT_TRUE(wait_for([](const std::string& s) { return shows(s, "loaded '"); })) << screen;
    turn("Which one is the longest?", 3);
    out.reply = reply_after(screen, "Which one is the longest?");
    out.restores_after = restores(db);
    type("/stats");
    EXPECT_TRUE(wait_for([](const std::string& s) { return shows(s, "resume: "); })) << screen;
    out.stats = screen;
    tmux.keys("C-d");
    EXPECT_TRUE(wait_for([](const std::string& s) {
        const auto lines = screen_lines(s);
        return !lines.empty() && lines.back() == kShellPrompt;
    })) << screen;
    return out;
}

TEST(ChatStateMemory, LoadingAnotherConversationRestoresItFromMemory) {
    EMBER_REQUIRE_FIXTURE(kModel);
    EMBER_REQUIRE_TMUX(tmux);
    TempDir dir;
    const Switched tiered = switch_back(tmux, dir, "tier", "");
    EXPECT_TRUE(shows(tiered.stats, "resume: restore from memory")) << tiered.stats;
    EXPECT_TRUE(shows(tiered.stats, "memory: ")) << tiered.stats;
    EXPECT_EQ(tiered.restores_after, tiered.restores_before) << tiered.stats;

    const Switched plain = switch_back(tmux, dir, "plain", "--state-memory 0");
    EXPECT_TRUE(shows(plain.stats, "resume: restore from database")) << plain.stats;
    EXPECT_FALSE(shows(plain.stats, "memory: ")) << plain.stats;
    EXPECT_EQ(plain.restores_after, plain.restores_before + 1) << plain.stats;

    EXPECT_FALSE(tiered.reply.empty());
    EXPECT_EQ(tiered.reply, plain.reply);
}

}  // namespace
}  // namespace ember::test
