// The full-screen chat's ways out, through tmux and the real binary: composing a message in
// $EDITOR (Ctrl-X Ctrl-E; a failing or missing editor is one line), /copy to a clipboard tool
// found on PATH or, without one, to the terminal through OSC 52 (tmux's own clipboard here),
// and the config file's presets (--preset NAME, /preset NAME). Also `ember --help`, whose first
// command is chat.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/fixtures.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tmux.h"

namespace ember::test {
namespace {

namespace fs = std::filesystem;

const char* const kShellPrompt = "SHELL$";
const char* const kModel = "models/stories260K.gguf";

TEST(Help, ListsChatFirst) {
    const CommandResult help = run_command({ember_binary(), "--help"});
    ASSERT_EQ(help.status, 0) << help.err;
    const auto lines = split_lines(help.out);
    size_t i = 0;
    while (i < lines.size() && !lines[i].starts_with("Subcommands:")) ++i;
    ASSERT_LT(i + 1, lines.size()) << help.out;
    std::istringstream first(lines[i + 1]);
    std::string name;
    first >> name;
    EXPECT_EQ(name, "chat") << help.out;
}

bool shows(const std::string& screen, const std::string& text) {
    return screen.find(text) != std::string::npos;
}

bool idle(const std::string& s) {
    return shows(s, "» ") && !shows(s, "replying ");
}

bool at_shell(const std::string& screen) {
    std::vector<std::string> rows;
    std::stringstream in(screen);
    std::string row;
    while (std::getline(in, row)) {
        while (!row.empty() && row.back() == ' ') row.pop_back();
        rows.push_back(row);
    }
    for (auto it = rows.rbegin(); it != rows.rend(); ++it) {
        if (!it->empty()) return *it == kShellPrompt;
    }
    return false;
}

void write_script(const std::string& path, const std::string& body) {
    std::ofstream(path) << "#!/bin/sh\n" << body;
    chmod(path.c_str(), 0755);
}

class TuiCompose : public ::testing::Test {
protected:
    void SetUp() override {
        EMBER_REQUIRE_TMUX(tmux);
        EMBER_REQUIRE_FIXTURE(kModel);
        dir_ = std::make_unique<TempDir>("ember-tui-compose");
        db_ = dir_->file("chat.db");
        tmux_ = std::make_unique<TmuxSession>(tmux, "ember-tui-compose");
        const std::string shell = "env PS1=" + shell_quote(std::string(kShellPrompt) + " ") +
                                  " LANG=C.UTF-8 XDG_DATA_HOME=" + shell_quote(dir_->path()) +
                                  " XDG_CONFIG_HOME=" + shell_quote(dir_->file("config")) +
                                  " EMBER_MODEL= VISUAL= EDITOR= /bin/sh";
        ASSERT_EQ(tmux_->start(shell, 100, 30).status, 0);
        std::string screen;
        ASSERT_TRUE(wait_for(at_shell, screen)) << screen;
    }

    bool wait_for(const std::function<bool(const std::string&)>& done, std::string& screen,
                  double seconds = 20.0) const {
        return TmuxSession::poll([this] { return tmux_->capture(); }, done, screen, seconds);
    }
    void line(const std::string& text) const {
        tmux_->text(text);
        tmux_->keys("Enter");
    }
    // Opens the chat with `env` (NAME=VALUE words) in its environment.
    void open_chat(const std::string& env) const {
        line("clear; env " + env + " " + shell_quote(ember_binary()) + " chat -m " +
             shell_quote(fixture_path(kModel)) + " --db " + shell_quote(db_) +
             " -t 1 --temp 0 -n 12 -c 1024");
        std::string screen;
        ASSERT_TRUE(
            wait_for([](const std::string& s) { return shows(s, "Type a message"); }, screen))
            << screen;
    }
    void leave() const {
        tmux_->keys("C-d");
        std::string screen;
        ASSERT_TRUE(wait_for(at_shell, screen)) << screen;
    }
    std::string show_first() const {
        const auto rows =
            split_lines(run_command({ember_binary(), "sessions", "list", "--db", db_}).out);
        if (rows.size() < 2) return {};
        const std::string id = rows[1].substr(0, rows[1].find(' '));
        return run_command({ember_binary(), "sessions", "show", id, "--db", db_}).out;
    }
    // The greedy reply the chat gives to `prompt` as its first turn.
    std::string expected_reply(const std::string& prompt) const {
        const CommandResult r =
            run_command({ember_binary(), "chat", "-m", fixture_path(kModel), "--no-db", "--temp",
                         "0", "-n", "12", "-t", "1", "-p", prompt});
        std::string text = r.out;
        while (!text.empty() && text.back() == '\n') text.pop_back();
        return text;
    }

    std::unique_ptr<TempDir> dir_;
    std::string db_;
    std::unique_ptr<TmuxSession> tmux_;
};

TEST_F(TuiCompose, CtrlXCtrlEComposesInTheEditor) {
    // The editor sees what was typed and adds a line of its own.
    const std::string editor = dir_->file("editor.sh");
    write_script(editor,
                 "{ cat \"$1\"; printf ' and more\\nfrom the editor\\n'; } > \"$1.new\" && "
                 "mv \"$1.new\" \"$1\"\n");
    std::string screen;
    open_chat("EDITOR=" + shell_quote(editor));
    tmux_->text("Once upon");
    tmux_->keys("C-x");
    tmux_->keys("C-e");
    ASSERT_TRUE(wait_for([](const std::string& s) { return shows(s, "Enter sends it"); }, screen))
        << screen;
    EXPECT_TRUE(shows(screen, "» Once upon and more")) << screen;
    EXPECT_TRUE(shows(screen, "from the editor")) << screen;
    tmux_->keys("Enter");
    ASSERT_TRUE(wait_for([](const std::string& s) { return shows(s, "│ 12 tok") && idle(s); },
                         screen, 30.0))
        << screen;
    EXPECT_TRUE(shows(show_first(), "Once upon and more\nfrom the editor")) << show_first();
    leave();

    // An editor that fails: one line, the input kept as it was.
    const std::string failing = dir_->file("failing.sh");
    write_script(failing, "exit 3\n");
    open_chat("EDITOR=" + shell_quote(failing));
    tmux_->text("keep me");
    tmux_->keys("C-x");
    tmux_->keys("C-e");
    ASSERT_TRUE(wait_for([](const std::string& s) { return shows(s, "exit status 3"); }, screen))
        << screen;
    EXPECT_TRUE(shows(screen, "failed (exit status 3); the input is unchanged")) << screen;
    EXPECT_TRUE(shows(screen, "» keep me")) << screen;
    tmux_->keys("C-u");
    leave();

    // One that is not there, and none at all.
    open_chat("EDITOR=" + shell_quote(dir_->file("no-such-editor")));
    tmux_->keys("C-x");
    tmux_->keys("C-e");
    ASSERT_TRUE(wait_for([](const std::string& s) { return shows(s, "not found"); }, screen))
        << screen;
    leave();
    open_chat("EDITOR=");
    tmux_->keys("C-x");
    tmux_->keys("C-e");
    ASSERT_TRUE(
        wait_for([](const std::string& s) { return shows(s, "no editor; set $EDITOR"); }, screen))
        << screen;
    leave();
}

TEST_F(TuiCompose, CopyGoesToAClipboardToolOrThroughOsc52) {
    const std::string reply = expected_reply("Once upon a time");
    ASSERT_FALSE(reply.empty());
    // A clipboard tool first on PATH: an executable that keeps what it is given.
    const std::string bin = dir_->file("bin");
    fs::create_directories(bin);
    const std::string clip = dir_->file("clipboard.txt");
    write_script(bin + "/xclip", "cat > " + shell_quote(clip) + "\n");
    std::string screen;
    open_chat("PATH=" + shell_quote(bin) + ":\"$PATH\"");
    line("/copy");
    ASSERT_TRUE(wait_for([](const std::string& s) { return shows(s, "no reply to copy"); }, screen))
        << screen;
    line("Once upon a time");
    ASSERT_TRUE(wait_for([](const std::string& s) { return shows(s, "│ 12 tok") && idle(s); },
                         screen, 30.0))
        << screen;
    line("/copy");
    ASSERT_TRUE(wait_for([](const std::string& s) { return shows(s, "with xclip"); }, screen))
        << screen;
    EXPECT_EQ(read_file(clip), reply);
    line("/copy 1");
    ASSERT_TRUE(
        wait_for([](const std::string& s) { return shows(s, "has 0 code blocks"); }, screen))
        << screen;
    line("/copy x");
    ASSERT_TRUE(
        wait_for([](const std::string& s) { return shows(s, "expected a code block's"); }, screen))
        << screen;
    leave();

    // No tool on PATH: the terminal's clipboard, here tmux's, gets it through OSC 52.
    ASSERT_EQ(tmux_->run({"set-option", "-s", "set-clipboard", "on"}).status, 0);
    const std::string empty = dir_->file("empty-bin");
    fs::create_directories(empty);
    open_chat("PATH=" + shell_quote(empty));
    line("Once upon a time");
    ASSERT_TRUE(wait_for([](const std::string& s) { return shows(s, "│ 12 tok") && idle(s); },
                         screen, 30.0))
        << screen;
    line("/copy");
    ASSERT_TRUE(wait_for([](const std::string& s) { return shows(s, "OSC 52"); }, screen))
        << screen;
    const CommandResult buffer = tmux_->run({"show-buffer"});
    EXPECT_EQ(buffer.status, 0) << buffer.err;
    EXPECT_EQ(buffer.out, reply);
    leave();
}

const char* const kPresets =
    R"({"sampling": {"temp": 0.5},
        "presets": {"terse": {"system": "Be brief.", "sampling": {"temp": 0.8, "seed": 7}},
                    "cold": {"sampling": {"top_k": 3}}}})";

TEST(Presets, ChosenOnTheCommandLineUnderTheFlags) {
    EMBER_REQUIRE_FIXTURE(kModel);
    TempDir dir("ember-presets");
    fs::create_directories(dir.file("config/ember"));
    std::ofstream(dir.file("config/ember/config.json")) << kPresets;
    const std::string env_config = "XDG_CONFIG_HOME=" + dir.file("config");
    const auto chat = [&](std::vector<std::string> extra) {
        std::vector<std::string> argv = {
            "/usr/bin/env", env_config,       ember_binary(), "chat", "-m", fixture_path(kModel),
            "--db",         dir.file("c.db"), "-n",           "4",    "-t", "1",
            "--jsonl"};
        argv.insert(argv.end(), extra.begin(), extra.end());
        return run_command(argv, "{\"prompt\": \"Once upon a time\"}\n");
    };
    // The preset's seed and system prompt; --seed over the preset's.
    const CommandResult terse = chat({"--preset", "terse"});
    ASSERT_EQ(terse.status, 0) << terse.err;
    EXPECT_NE(terse.out.find("\"seed\":7"), std::string::npos) << terse.out;
    const CommandResult flagged = chat({"--preset", "terse", "--seed", "9"});
    ASSERT_EQ(flagged.status, 0) << flagged.err;
    EXPECT_NE(flagged.out.find("\"seed\":9"), std::string::npos) << flagged.out;
    const auto rows = split_lines(
        run_command({ember_binary(), "sessions", "list", "--db", dir.file("c.db")}).out);
    ASSERT_GE(rows.size(), 2u);
    const std::string shown =
        run_command({ember_binary(), "sessions", "show", rows[1].substr(0, rows[1].find(' ')),
                     "--db", dir.file("c.db")})
            .out;
    EXPECT_NE(shown.find("system:  Be brief."), std::string::npos) << shown;

    // No such preset, and a malformed one: one line each, naming the file.
    const CommandResult missing = chat({"--preset", "nope"});
    EXPECT_EQ(missing.status, 1);
    EXPECT_EQ(missing.err, "ember: error: no preset 'nope' in " +
                               dir.file("config/ember/config.json") + " (presets: cold, terse)\n");
    std::ofstream(dir.file("config/ember/config.json"))
        << R"({"presets": {"x": {"sampling": {"temp": "hot"}}}})";
    const CommandResult bad = chat({});
    EXPECT_EQ(bad.status, 1);
    EXPECT_EQ(bad.err, "ember: error: " + dir.file("config/ember/config.json") +
                           ": presets.x.sampling.temp must be a number\n");
}

TEST_F(TuiCompose, PresetCommandSetsSystemAndSampling) {
    fs::create_directories(dir_->file("config/ember"));
    std::ofstream(dir_->file("config/ember/config.json")) << kPresets;
    std::string screen;
    open_chat("LANG=C.UTF-8");
    line("/preset");
    ASSERT_TRUE(wait_for([](const std::string& s) { return shows(s, "/preset NAME: cold, terse"); },
                         screen))
        << screen;
    line("/preset warm");
    ASSERT_TRUE(wait_for([](const std::string& s) { return shows(s, "no preset 'warm'"); }, screen))
        << screen;
    line("/preset terse");
    ASSERT_TRUE(wait_for(
        [](const std::string& s) {
            return shows(s, "preset terse: system prompt, temp 0.8, seed 7");
        },
        screen))
        << screen;
    line("/system");
    ASSERT_TRUE(
        wait_for([](const std::string& s) { return shows(s, "system prompt: Be brief."); }, screen))
        << screen;
    line("/set");
    ASSERT_TRUE(wait_for([](const std::string& s) { return shows(s, "thinking-budget"); }, screen))
        << screen;
    EXPECT_TRUE(shows(screen, "temp 0.8")) << screen;
    EXPECT_TRUE(shows(screen, "seed 7")) << screen;
    leave();
}

}  // namespace
}  // namespace ember::test
