// /model NAME in `ember chat`, through the real binary on a real terminal (tmux), with two
// fixture models whose chat templates differ (Qwen3's ChatML, Gemma 3's turns), both found by
// name in the test's own models directory:
// - line mode: Tab completes the name; a bad file and an unknown name are one line each and
//   the old model answers on, exactly as it would have without them; after the switch the
//   new model evaluates the whole history from nothing, rendered with its own template, and
//   answers exactly what a fresh process of that model answers on the same history; back on
//   the first model, its own stored state is restored; the two models' state rows never mix;
//   the conversation records the model it went on with.
// - full screen: the status line names the new model, /model lists the candidates, /help
//   lists /model, and --continue reopens the conversation with the model last switched to.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "sessions/sqlite.h"
#include "tests/support/fixtures.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tmux.h"

namespace ember::test {
namespace {

namespace fs = std::filesystem;

const char* const kShellPrompt = "SHELL$";
const char* const kFirst = "arch/qwen3/qwen3.gguf";     // found as "qwen3"
const char* const kSecond = "arch/gemma3/gemma3.gguf";  // found as "gemma3"
// Greedy, one thread (the same numbers in every process), short replies.
const std::vector<std::string> kChatFlags = {"-t", "1", "--temp", "0", "-n", "6", "-c", "1024"};

std::string shell_flags() {
    std::string out;
    for (const auto& flag : kChatFlags) out += " " + flag;
    return out;
}

bool shows(const std::string& screen, const std::string& text) {
    return screen.find(text) != std::string::npos;
}

std::string last_line(const std::string& screen) {
    const auto lines = screen_lines(screen);
    return lines.empty() ? std::string() : lines.back();
}

bool at_shell(const std::string& screen) {
    return last_line(screen) == kShellPrompt;
}

// Line mode: the stats line --verbose prints after each reply.
struct TurnStats {
    int64_t reused = 0;
    int64_t evaluated = 0;
};

std::vector<TurnStats> stats_lines(const std::string& screen) {
    static const std::regex pattern(R"(^\[\d+ tokens, .* prompt (\d+) reused \+ (\d+) evaluated)");
    std::vector<TurnStats> out;
    for (const auto& line : screen_lines(screen)) {
        std::smatch m;
        if (std::regex_search(line, m, pattern))
            out.push_back({std::stoll(m[1]), std::stoll(m[2])});
    }
    return out;
}

// Line mode: `count` replies done and the prompt back.
auto turns_done(size_t count) {
    return [count](const std::string& s) {
        return stats_lines(s).size() >= count && last_line(s) == ">";
    };
}

// Full screen: the status line is the row above the input box.
std::string status_row(const std::string& screen) {
    const auto rows = screen_lines(screen);
    for (size_t i = 1; i < rows.size(); ++i) {
        if (rows[i].starts_with("» ")) return rows[i - 1];
    }
    return {};
}

// Whether a line of `screen`, blanks around it dropped, is `text`.
bool has_line(const std::string& screen, const std::string& text) {
    for (const auto& line : screen_lines(screen)) {
        const size_t begin = line.find_first_not_of(' ');
        if (begin != std::string::npos && line.substr(begin) == text) return true;
    }
    return false;
}

bool idle(const std::string& s) {
    return shows(s, "» Type a message") && !shows(s, "replying ");
}

struct StoredMessage {
    std::string role;
    std::string content;
};

class ModelSwitch : public ::testing::Test {
protected:
    void SetUp() override {
        EMBER_REQUIRE_TMUX(tmux);
        EMBER_REQUIRE_FIXTURE(kFirst);
        EMBER_REQUIRE_FIXTURE(kSecond);
        dir_ = std::make_unique<TempDir>("ember-model-switch");
        db_ = dir_->file("chat.db");
        // Ember's own models directory, where /model NAME finds both by name.
        models_ = dir_->path() / "data" / "ember" / "models";
        fs::create_directories(models_);
        fs::create_symlink(fixture_path(kFirst), models_ / "qwen3.gguf");
        fs::create_symlink(fixture_path(kSecond), models_ / "gemma3.gguf");
        tmux_ = std::make_unique<TmuxSession>(tmux, "ember-model-switch");
        const std::string shell =
            "env PS1=" + shell_quote(std::string(kShellPrompt) + " ") +
            " LANG=C.UTF-8 XDG_DATA_HOME=" + shell_quote(data_home()) +
            " XDG_CONFIG_HOME=" + shell_quote(dir_->file("config")) +
            " EMBER_MODEL= LLAMA_CACHE=/nonexistent OLLAMA_MODELS=/nonexistent"
            " HOME=" +
            shell_quote(dir_->path().string()) + " /bin/sh";
        ASSERT_EQ(tmux_->start(shell, 120, 40).status, 0);
        std::string screen;
        ASSERT_TRUE(wait_for(at_shell, screen)) << screen;
    }

    std::string data_home() const { return (dir_->path() / "data").string(); }

    // The whole history with wrapped lines joined (line mode); the visible screen otherwise.
    std::string history() const { return tmux_->capture({"-J", "-S", "-"}); }
    bool wait_for(const std::function<bool(const std::string&)>& done, std::string& screen,
                  double seconds = 30.0) const {
        return TmuxSession::poll([this] { return history(); }, done, screen, seconds);
    }
    bool wait_for_screen(const std::function<bool(const std::string&)>& done, std::string& screen,
                         double seconds = 30.0) const {
        return TmuxSession::poll([this] { return tmux_->capture(); }, done, screen, seconds);
    }
    void line(const std::string& text) const {
        tmux_->text(text);
        tmux_->keys("Enter");
    }

    // The first column of the first row `sql` gives, as text ("" when no row).
    std::string query_text(const std::string& db, const std::string& sql) const {
        sessions::Database d(db);
        auto s = d.prepare(sql);
        return s.step() ? s.column_text(0) : std::string();
    }
    int64_t query_int(const std::string& sql) const {
        sessions::Database d(db_);
        auto s = d.prepare(sql);
        return s.step() ? s.column_int(0) : -1;
    }
    // The messages of the most recent conversation in `db`, in order (a single branch).
    std::vector<StoredMessage> stored_messages(const std::string& db) const {
        sessions::Database d(db);
        auto s = d.prepare(
            "SELECT role, content FROM messages WHERE conversation_id = (SELECT id FROM "
            "conversations ORDER BY activity DESC LIMIT 1) ORDER BY id");
        std::vector<StoredMessage> out;
        while (s.step()) out.push_back({s.column_text(0), s.column_text(1)});
        return out;
    }

    // The tokens `model` is given for `messages` and a reply to follow: its own template
    // rendered by `ember render`, tokenized as a chat prompt (control-token text parsed).
    std::vector<int32_t> prompt_ids(const char* model,
                                    const std::vector<StoredMessage>& messages) const {
        nlohmann::json list = nlohmann::json::array();
        for (const auto& m : messages) list.push_back({{"role", m.role}, {"content", m.content}});
        const std::string file = dir_->file("messages.json");
        std::ofstream(file) << list.dump();
        const CommandResult rendered =
            run_command({ember_binary(), "render", "-m", fixture_path(model), "--messages", file});
        EXPECT_EQ(rendered.status, 0) << rendered.err;
        const CommandResult ids = run_command(
            {ember_binary(), "tokenize", "-m", fixture_path(model), "--special", rendered.out});
        EXPECT_EQ(ids.status, 0) << ids.err;
        return nlohmann::json::parse(ids.out).get<std::vector<int32_t>>();
    }

    // Per seed of the state store (one per model): the tokens of the blocks that start at
    // position 0, i.e. how each model's stored prompts begin.
    std::vector<std::pair<std::string, std::vector<std::vector<int32_t>>>> first_blocks() const {
        sessions::Database d(db_);
        auto s = d.prepare(
            "SELECT hex(seed), tokens FROM state_blocks WHERE begin_pos = 0 ORDER BY seed, id");
        std::vector<std::pair<std::string, std::vector<std::vector<int32_t>>>> out;
        while (s.step()) {
            const std::string seed = s.column_text(0);
            if (out.empty() || out.back().first != seed) out.push_back({seed, {}});
            out.back().second.push_back(sessions::blob_to_tokens(s.column_blob(1)));
        }
        return out;
    }

    std::unique_ptr<TempDir> dir_;
    fs::path models_;
    std::string db_;
    std::unique_ptr<TmuxSession> tmux_;
};

// Whether `block` begins `prompt` or `prompt` begins `block` (a block holds the prompt and
// the reply after it, or the prompt's first 64 tokens), over at least `at_least` tokens.
bool agrees(const std::vector<int32_t>& block, const std::vector<int32_t>& prompt,
            size_t at_least) {
    const size_t n = std::min(block.size(), prompt.size());
    return n >= at_least &&
           std::equal(block.begin(), block.begin() + static_cast<ptrdiff_t>(n), prompt.begin());
}

// The seed whose first blocks begin with `prompt`; empty when none does.
std::string seed_holding(
    const std::vector<std::pair<std::string, std::vector<std::vector<int32_t>>>>& seeds,
    const std::vector<int32_t>& prompt) {
    for (const auto& [seed, blocks] : seeds) {
        for (const auto& block : blocks) {
            if (agrees(block, prompt, std::min<size_t>(prompt.size(), 64))) return seed;
        }
    }
    return {};
}

TEST_F(ModelSwitch, LineModeSwitchesRerendersTheHistoryAndKeepsEachModelsStateApart) {
    std::string screen;
    const std::string broken = dir_->file("broken.gguf");
    std::ofstream(broken) << "not a model";
    line(shell_quote(ember_binary()) + " chat --plain -v -m qwen3 --db " + shell_quote(db_) +
         shell_flags());
    ASSERT_TRUE(wait_for([](const std::string& s) { return last_line(s) == ">"; }, screen))
        << screen;
    line("hello one");
    ASSERT_TRUE(wait_for(turns_done(1), screen)) << screen;

    // A file that is not a model and a name that is none: one line each, the chat goes on.
    line("/model " + broken);
    ASSERT_TRUE(wait_for(
        [](const std::string& s) { return shows(s, "/model: ") && last_line(s) == ">"; }, screen))
        << screen;
    EXPECT_TRUE(shows(screen, "/model: " + broken + ": ")) << screen;
    line("/model no-such-model");
    ASSERT_TRUE(wait_for(
        [](const std::string& s) {
            return shows(s, "/model: model 'no-such-model': no such file") && last_line(s) == ">";
        },
        screen))
        << screen;
    EXPECT_TRUE(shows(screen, "found: ")) << screen;
    // The old model answers on, from the state it holds.
    line("second prompt");
    ASSERT_TRUE(wait_for(turns_done(2), screen)) << screen;
    EXPECT_GT(stats_lines(screen)[1].reused, 0) << screen;

    // Tab completes the name; the switch says what happens to the history.
    tmux_->text("/model gem");
    tmux_->keys("Tab");
    ASSERT_TRUE(
        wait_for([](const std::string& s) { return last_line(s) == "> /model gemma3"; }, screen))
        << screen;
    tmux_->keys("Enter");
    ASSERT_TRUE(wait_for(
        [](const std::string& s) {
            return shows(s, "now chatting with gemma3.gguf: the 4 messages so far go to it") &&
                   last_line(s) == ">";
        },
        screen))
        << screen;
    // Nothing of qwen3's state is used for gemma3: the whole history is evaluated.
    line("third prompt");
    ASSERT_TRUE(wait_for(turns_done(3), screen)) << screen;
    EXPECT_EQ(stats_lines(screen)[2].reused, 0) << screen;

    // Back to the first model: its own rows in the store bring it back warm.
    line("/model qwen3");
    ASSERT_TRUE(wait_for(
        [](const std::string& s) { return shows(s, "now chatting with qwen3.gguf"); }, screen))
        << screen;
    line("fourth prompt");
    ASSERT_TRUE(wait_for(turns_done(4), screen)) << screen;
    EXPECT_GT(stats_lines(screen)[3].reused, 0) << screen;
    tmux_->keys("C-d");
    ASSERT_TRUE(wait_for(at_shell, screen)) << screen;

    const std::vector<StoredMessage> messages = stored_messages(db_);
    ASSERT_EQ(messages.size(), 8u);
    // The conversation goes on with the model last switched to.
    EXPECT_EQ(query_text(db_, "SELECT model FROM conversations"), "qwen3.gguf");
    EXPECT_EQ(query_text(db_, "SELECT model_path FROM conversations"),
              (models_ / "qwen3.gguf").string());
    // The last reply restored stored state (the first model's own), and gemma3's reply saw
    // the history rendered by gemma3's template: its prompt has exactly those tokens.
    const std::vector<int32_t> gemma_prompt =
        prompt_ids(kSecond, {messages.begin(), messages.begin() + 5});
    const std::vector<int32_t> qwen_prompt = prompt_ids(kFirst, {messages.front()});
    EXPECT_GT(query_int("SELECT tokens_restored FROM reply_stats ORDER BY message_id DESC LIMIT 1"),
              0);
    EXPECT_EQ(query_int("SELECT prompt_tokens FROM reply_stats ORDER BY message_id LIMIT 1 "
                        "OFFSET 2"),
              static_cast<int64_t>(gemma_prompt.size()));

    // Two models, two key chains: no block follows a block of the other model, and each
    // model's stored prompt begins with its own template's rendering.
    EXPECT_EQ(query_int("SELECT COUNT(DISTINCT seed) FROM state_blocks"), 2);
    EXPECT_EQ(query_int("SELECT COUNT(*) FROM state_blocks c JOIN state_blocks p ON "
                        "c.parent_id = p.id WHERE c.seed != p.seed"),
              0);
    const auto seeds = first_blocks();
    const std::string gemma_seed = seed_holding(seeds, gemma_prompt);
    const std::string qwen_seed = seed_holding(seeds, qwen_prompt);
    EXPECT_FALSE(gemma_seed.empty()) << "no stored gemma3 prompt in gemma3's template";
    EXPECT_FALSE(qwen_seed.empty()) << "no stored qwen3 prompt in qwen3's template";
    EXPECT_NE(gemma_seed, qwen_seed);

    // The old model's replies around the failed switches, and the new model's first reply,
    // are what fresh processes answer on the same history: nothing was lost or carried over.
    const std::string reference = dir_->file("reference.db");
    const auto chat = [&](const char* model, std::vector<std::string> args,
                          const std::string& input) {
        std::vector<std::string> argv = {ember_binary(),      "chat", "-m",
                                         fixture_path(model), "--db", reference};
        argv.insert(argv.end(), kChatFlags.begin(), kChatFlags.end());
        argv.insert(argv.end(), args.begin(), args.end());
        return run_command(argv, input);
    };
    const CommandResult first = chat(kFirst, {"--script"}, "hello one\nsecond prompt\n");
    ASSERT_EQ(first.status, 0) << first.err;
    const CommandResult second = chat(kSecond, {"--continue", "-p", "third prompt"}, "");
    ASSERT_EQ(second.status, 0) << second.err;
    const std::vector<StoredMessage> expected = stored_messages(reference);
    ASSERT_EQ(expected.size(), 6u);
    for (size_t i = 0; i < expected.size(); ++i) {
        EXPECT_EQ(messages[i].content, expected[i].content) << "message " << i;
    }
}

TEST_F(ModelSwitch, FullScreenNamesTheNewModelAndContinueReopensIt) {
    std::string screen;
    line(shell_quote(ember_binary()) + " chat -m qwen3 --db " + shell_quote(db_) + shell_flags());
    ASSERT_TRUE(wait_for_screen(idle, screen)) << screen;
    EXPECT_TRUE(status_row(screen).starts_with(" qwen3.gguf")) << screen;
    line("hello one");
    ASSERT_TRUE(wait_for_screen(
        [](const std::string& s) { return idle(s) && shows(status_row(s), " tok "); }, screen))
        << screen;

    // /help lists it; /model alone shows the model and the candidates.
    line("/help");
    ASSERT_TRUE(
        wait_for_screen([](const std::string& s) { return shows(s, "/model [NAME]"); }, screen))
        << screen;
    line("/model");
    ASSERT_TRUE(wait_for_screen(
        [](const std::string& s) { return shows(s, "model: qwen3.gguf (") && idle(s); }, screen))
        << screen;
    EXPECT_TRUE(has_line(screen, "gemma3")) << screen;

    // Tab completes the name; the status line names the new model.
    tmux_->text("/model g");
    tmux_->keys("Tab");
    ASSERT_TRUE(
        wait_for_screen([](const std::string& s) { return shows(s, "» /model gemma3"); }, screen))
        << screen;
    tmux_->keys("Enter");
    ASSERT_TRUE(wait_for_screen(
        [](const std::string& s) {
            return idle(s) && status_row(s).starts_with(" gemma3.gguf") &&
                   shows(s, "now chatting with gemma3.gguf");
        },
        screen))
        << screen;
    EXPECT_TRUE(shows(screen, "hello one")) << "the history stays on screen\n" << screen;

    // An unknown name: an error line, and gemma3 stays.
    line("/model no-such-model");
    ASSERT_TRUE(wait_for_screen(
        [](const std::string& s) { return shows(s, "/model: model 'no-such-model'") && idle(s); },
        screen))
        << screen;
    EXPECT_TRUE(status_row(screen).starts_with(" gemma3.gguf")) << screen;
    line("after the switch");
    ASSERT_TRUE(wait_for_screen(
        [](const std::string& s) { return idle(s) && shows(status_row(s), " tok "); }, screen))
        << screen;
    tmux_->keys("C-d");
    ASSERT_TRUE(wait_for(at_shell, screen)) << screen;
    EXPECT_EQ(query_text(db_, "SELECT model FROM conversations"), "gemma3.gguf");
    EXPECT_EQ(query_int("SELECT COUNT(*) FROM messages"), 4);

    // --continue without -m: the model the conversation went on with.
    line("clear; " + shell_quote(ember_binary()) + " chat --db " + shell_quote(db_) +
         " -t 1 --continue");
    ASSERT_TRUE(wait_for_screen(
        [](const std::string& s) { return idle(s) && shows(s, "after the switch"); }, screen))
        << screen;
    EXPECT_TRUE(status_row(screen).starts_with(" gemma3.gguf")) << screen;
    EXPECT_FALSE(shows(screen, "was recorded with")) << screen;
    tmux_->keys("C-d");
    ASSERT_TRUE(wait_for(at_shell, screen)) << screen;
}

}  // namespace
}  // namespace ember::test
