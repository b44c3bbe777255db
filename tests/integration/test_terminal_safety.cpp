// Hostile text never reaches the terminal raw (issue 18). A conversation is made the way a
// user gets one: `ember chat --script` with prompts holding a clear-screen (ESC [ 2 J), a
// window-title change (OSC 0), an OSC 52 clipboard write, C1 controls (U+009B CSI), a raw
// 0x9B byte, a cut UTF-8 sequence, DEL and other C0 controls, a hostile system prompt, a
// hostile title (`sessions rename`), and replies sampled hot from a model whose vocabulary has
// a token for every byte (so the replies carry control bytes of the model's own). Then every
// path that shows it runs on a real terminal (a pseudo-terminal; tmux for the full-screen UI)
// and the bytes that reached the terminal are checked: valid UTF-8, no C0 control but newline
// and tab, no DEL, no C1, and the visible stand-ins present. Files and pipes get the stored
// bytes exactly; the database (read here with plain SQL) keeps the text exactly as typed.
// `ember run`, `detokenize` and `render` (model and file text) are checked the same way.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "sessions/sqlite.h"
#include "tests/support/fixtures.h"
#include "tests/support/process.h"
#include "tests/support/pty.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tmux.h"

namespace ember::test {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const char* const kModel = "quant/qfix-F32.gguf";  // SPM vocabulary with all 256 byte tokens

// Valid UTF-8 throughout, so JSON carries it exactly.
const std::string kPrompt =
    "clear \x1b[2J title \x1b]0;pwned-title\x07 clip \x1b]52;c;cHduZWQ=\x07 csi \xc2\x9b"
    "31m osc \xc2\x9d"
    "0;c1-title\x07 del \x7f bs \x08 soh \x01 cr \r vt \x0b end";
// Not UTF-8: a raw CSI byte and a three-byte sequence cut after two bytes.
const std::string kRawPrompt =
    "raw \x9b"
    "31m byte, cut \xe2\x82 sequence";
const std::string kSystem = "system \x1b[2J\x1b]0;sys-title\x07";
const std::string kTitle = "T\x1b]0;evil-title\x07\x1b[2J\xc2\x9d";

// What a terminal must show for valid UTF-8 `text`, by the rules of issue 18 written out
// here on their own: C0 but '\n' and '\t' as U+2400 + c, DEL as U+2421, C1 as "<U+00XX>".
std::string expected_visible(const std::string& text) {
    std::string out;
    for (size_t i = 0; i < text.size(); ++i) {
        const auto b = static_cast<unsigned char>(text[i]);
        if (b < 0x20 && b != '\n' && b != '\t') {
            out += "\xe2\x90";
            out += static_cast<char>(0x80 + b);
        } else if (b == 0x7f) {
            out += "\xe2\x90\xa1";
        } else if (b == 0xc2 && i + 1 < text.size() &&
                   static_cast<unsigned char>(text[i + 1]) < 0xa0) {
            const char* hex = "0123456789ABCDEF";
            const auto c = static_cast<unsigned char>(text[++i]);
            out += std::string("<U+00") + hex[c >> 4] + hex[c & 15] + ">";
        } else {
            out += text[i];
        }
    }
    return out;
}

bool valid_utf8(const std::string& s) {
    size_t i = 0;
    while (i < s.size()) {
        const auto b = static_cast<unsigned char>(s[i]);
        const size_t n = b < 0x80    ? 1
                         : b >= 0xf5 ? 0
                         : b >= 0xf0 ? 4
                         : b >= 0xe0 ? 3
                         : b >= 0xc2 ? 2
                                     : 0;
        if (n == 0 || i + n > s.size()) return false;
        for (size_t k = 1; k < n; ++k) {
            if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) return false;
        }
        i += n;
    }
    return true;
}

bool has_control(const std::string& s) {
    return expected_visible(s) != s;
}

// The bytes a terminal received hold nothing it would obey: the first offender, or "".
std::string terminal_offence(const std::string& bytes) {
    for (size_t i = 0; i < bytes.size(); ++i) {
        const auto b = static_cast<unsigned char>(bytes[i]);
        if ((b < 0x20 && b != '\n' && b != '\t') || b == 0x7f) {
            return "control byte " + std::to_string(b) + " at " + std::to_string(i);
        }
        if (b == 0xc2 && i + 1 < bytes.size() && static_cast<unsigned char>(bytes[i + 1]) >= 0x80 &&
            static_cast<unsigned char>(bytes[i + 1]) < 0xa0) {
            return "C1 control at " + std::to_string(i);
        }
    }
    return valid_utf8(bytes) ? std::string() : "invalid UTF-8";
}

#define EXPECT_TERMINAL_SAFE(bytes)                                   \
    do {                                                              \
        const std::string offence_ = terminal_offence(bytes);         \
        EXPECT_EQ(offence_, "") << "terminal received:\n" << (bytes); \
    } while (0)

bool shows(const std::string& output, const std::string& text) {
    return output.find(text) != std::string::npos;
}

struct StoredMessage {
    std::string role;
    std::string content;
};

struct Stored {
    std::string id;
    std::string title;
    std::string system;
    std::vector<StoredMessage> messages;
};

// One conversation as the database holds it, read with plain SQL.
Stored read_stored(const std::string& db_path, const std::string& id) {
    sessions::Database db(db_path);
    Stored out;
    auto c = db.prepare(
        "SELECT id, public_id, title, system_prompt FROM conversations WHERE public_id = ?");
    c.bind(1, id);
    if (!c.step()) return out;
    const int64_t row = c.column_int(0);
    out.id = c.column_text(1);
    out.title = c.column_text(2);
    out.system = c.column_text(3);
    auto m = db.prepare("SELECT role, content FROM messages WHERE conversation_id = ? ORDER BY id");
    m.bind(1, row);
    while (m.step()) out.messages.push_back({m.column_text(0), m.column_text(1)});
    return out;
}

std::vector<std::string> conversation_ids(const std::string& db_path) {
    sessions::Database db(db_path);
    auto s = db.prepare("SELECT public_id FROM conversations ORDER BY id");
    std::vector<std::string> ids;
    while (s.step()) ids.push_back(s.column_text(0));
    return ids;
}

class TerminalSafety : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        if (!fixture_exists(kModel)) return;
        dir_ = new TempDir("ember-termsafe");
        db_ = dir_->file("hostile.db");
        const CommandResult made = run_command(chat({"--script", "--system", kSystem}),
                                               kPrompt + "\n" + kRawPrompt + "\n");
        ASSERT_EQ(made.status, 0) << made.err;
        const auto ids = conversation_ids(db_);
        ASSERT_EQ(ids.size(), 1u);
        id_ = ids[0];
        const CommandResult renamed =
            run_command({ember_binary(), "sessions", "--db", db_, "rename", id_, kTitle});
        ASSERT_EQ(renamed.status, 0) << renamed.err;
        // The pipe got the replies exactly as they were stored.
        const Stored s = read_stored(db_, id_);
        ASSERT_EQ(s.messages.size(), 4u);
        EXPECT_EQ(made.out, s.messages[1].content + "\n" + s.messages[3].content + "\n");
    }
    static void TearDownTestSuite() {
        delete dir_;
        dir_ = nullptr;
    }
    void SetUp() override { EMBER_REQUIRE_FIXTURE(kModel); }

    // `ember chat` on the test's database, sampling hot (the hottest the command line takes,
    // the server's limit) from a fixed seed.
    static std::vector<std::string> chat(const std::vector<std::string>& extra) {
        std::vector<std::string> argv = {ember_binary(), "chat", "-m",     fixture_path(kModel),
                                         "--db",         db_,    "-t",     "1",
                                         "--temp",       "2",    "--seed", "7",
                                         "-n",           "48"};
        argv.insert(argv.end(), extra.begin(), extra.end());
        return argv;
    }
    static std::vector<std::string> sessions(const std::vector<std::string>& args) {
        std::vector<std::string> argv = {ember_binary(), "sessions", "--db", db_};
        argv.insert(argv.end(), args.begin(), args.end());
        return argv;
    }
    static TerminalProcess::Options terminal() {
        TerminalProcess::Options o;
        o.env = {"TERM=xterm-256color", "LANG=C.UTF-8", "NO_COLOR=1"};
        return o;
    }

    static TempDir* dir_;
    static std::string db_;
    static std::string id_;
};

TempDir* TerminalSafety::dir_ = nullptr;
std::string TerminalSafety::db_;
std::string TerminalSafety::id_;

TEST_F(TerminalSafety, TheDatabaseKeepsTheTextExactly) {
    const Stored s = read_stored(db_, id_);
    EXPECT_EQ(s.title, kTitle);
    EXPECT_EQ(s.system, kSystem);
    ASSERT_EQ(s.messages.size(), 4u);
    EXPECT_EQ(s.messages[0].content, kPrompt);
    EXPECT_EQ(s.messages[2].content, kRawPrompt);
    // The hot replies hold control characters of the model's own making, or the streaming
    // checks below would prove nothing.
    EXPECT_TRUE(has_control(s.messages[1].content) || has_control(s.messages[3].content))
        << s.messages[1].content << "\n"
        << s.messages[3].content;
}

TEST_F(TerminalSafety, SessionsShowListSearchRenameAndReplayOnATerminal) {
    const Stored s = read_stored(db_, id_);
    const auto expect_conversation = [&](const std::string& out) {
        EXPECT_TRUE(shows(out, expected_visible(kPrompt))) << out;
        EXPECT_TRUE(shows(out, "\xe2\x90\x9b]52;c;cHduZWQ=\xe2\x90\x87")) << out;  // ␛]52;...␇
        EXPECT_TRUE(shows(out, "<U+009B>31m")) << out;
        // The raw byte and the cut sequence: one U+FFFD each.
        EXPECT_TRUE(shows(out,
                          "raw \xef\xbf\xbd"
                          "31m byte, cut \xef\xbf\xbd sequence"))
            << out;
        EXPECT_TRUE(shows(out, expected_visible(kSystem))) << out;
        EXPECT_TRUE(shows(out, expected_visible(kTitle))) << out;
        EXPECT_TRUE(shows(out, expected_visible(s.messages[1].content))) << out;
        EXPECT_TRUE(shows(out, expected_visible(s.messages[3].content))) << out;
    };
    {
        SCOPED_TRACE("sessions show");
        const auto [status, out] = run_on_terminal(sessions({"show", id_}), terminal());
        EXPECT_EQ(status, 0);
        EXPECT_TERMINAL_SAFE(out);
        expect_conversation(out);
    }
    {
        SCOPED_TRACE("replay");
        const auto [status, out] =
            run_on_terminal({ember_binary(), "replay", id_, "--db", db_}, terminal());
        EXPECT_EQ(status, 0);
        EXPECT_TERMINAL_SAFE(out);
        expect_conversation(out);
    }
    {
        SCOPED_TRACE("sessions list");
        const auto [status, out] = run_on_terminal(sessions({"list"}), terminal());
        EXPECT_EQ(status, 0);
        EXPECT_TERMINAL_SAFE(out);
        EXPECT_TRUE(shows(out, expected_visible(kTitle))) << out;
    }
    {
        SCOPED_TRACE("sessions search");
        const auto [status, out] = run_on_terminal(sessions({"search", "clip"}), terminal());
        EXPECT_EQ(status, 0);
        EXPECT_TERMINAL_SAFE(out);
        EXPECT_TRUE(shows(out, "\xe2\x90\x9b")) << out;  // the snippet's ESC, shown
        EXPECT_TRUE(shows(out, "T\xe2\x90\x9b]0;evil-title\xe2\x90\x87")) << out;  // cut at 30
    }
    {
        SCOPED_TRACE("sessions search with no match echoes the query");
        const auto [status, out] =
            run_on_terminal(sessions({"search", "zzqx\x1b]0;q-title\x07"}), terminal());
        EXPECT_TERMINAL_SAFE(out);
        EXPECT_TRUE(shows(out, "\xe2\x90\x9b]0;q-title\xe2\x90\x87")) << out;
    }
    {
        SCOPED_TRACE("sessions rename echoes the title");
        const auto [status, out] = run_on_terminal(sessions({"rename", id_, kTitle}), terminal());
        EXPECT_EQ(status, 0);
        EXPECT_TERMINAL_SAFE(out);
        EXPECT_TRUE(shows(out, "to '" + expected_visible(kTitle) + "'")) << out;
    }
}

TEST_F(TerminalSafety, ErrorsQuotingUserInputOnATerminal) {
    {
        SCOPED_TRACE("unknown conversation id");
        const auto [status, out] =
            run_on_terminal(sessions({"show", "\x1b]0;id-title\x07\x1b[2J"}), terminal());
        EXPECT_EQ(status, 1);
        EXPECT_TERMINAL_SAFE(out);
        EXPECT_TRUE(shows(out, "'\xe2\x90\x9b]0;id-title\xe2\x90\x87\xe2\x90\x9b[2J'")) << out;
    }
    {
        SCOPED_TRACE("usage error");
        const auto [status, out] =
            run_on_terminal(sessions({"list", "--bogus\x1b]52;c;eA==\x07"}), terminal());
        EXPECT_NE(status, 0);
        EXPECT_TERMINAL_SAFE(out);
        EXPECT_TRUE(shows(out, "--bogus\xe2\x90\x9b]52;c;eA==\xe2\x90\x87")) << out;
    }
    {
        SCOPED_TRACE("unknown command");
        const auto [status, out] =
            run_on_terminal({ember_binary(), "bogus\x1b]0;cmd-title\x07"}, terminal());
        EXPECT_EQ(status, 2);
        EXPECT_TERMINAL_SAFE(out);
        EXPECT_TRUE(shows(out, "'bogus\xe2\x90\x9b]0;cmd-title\xe2\x90\x87'")) << out;
    }
    {
        SCOPED_TRACE("a bad option value");
        const auto [status, out] =
            run_on_terminal({ember_binary(), "run", "-m", fixture_path(kModel), "-p", "x", "--temp",
                             "1\x1b]0;temp-title\x07"},
                            terminal());
        EXPECT_EQ(status, 2);
        EXPECT_TERMINAL_SAFE(out);
        EXPECT_TRUE(shows(out, "'1\xe2\x90\x9b]0;temp-title\xe2\x90\x87'")) << out;
    }
    {
        SCOPED_TRACE("a bad token id, checked once the model is loaded");
        const auto [status, out] = run_on_terminal(
            {ember_binary(), "run", "-m", fixture_path(kModel), "--ids", "1,\x1b]0;ids-title\x07"},
            terminal());
        EXPECT_EQ(status, 2);
        EXPECT_TERMINAL_SAFE(out);
        EXPECT_TRUE(shows(out, "'\xe2\x90\x9b]0;ids-title\xe2\x90\x87' is not a token id")) << out;
    }
}

// Sends `request` to 127.0.0.1:`port` and reads the answer to its end ("" when no connection).
std::string http_exchange(int port, const std::string& request) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    std::string answer;
    if (fd >= 0 && connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
        write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size())) {
        char buffer[4096];
        for (ssize_t n; (n = read(fd, buffer, sizeof buffer)) > 0;) answer.append(buffer, n);
    }
    if (fd >= 0) close(fd);
    return answer;
}

// ember serve logs each request's path, which a client chose (percent-decoded, so any byte):
// on the operator's terminal it is shown, not obeyed.
TEST_F(TerminalSafety, ServeLogsRequestPathsSafelyOnATerminal) {
    TerminalProcess server({ember_binary(), "serve", "-m", fixture_path(kModel), "--port", "0",
                            "--no-db", "-t", "1", "--parallel", "1"},
                           terminal());
    const std::string listening = "listening on http://127.0.0.1:";
    ASSERT_TRUE(server.wait_for(listening, 0, 30)) << server.output();
    ASSERT_TRUE(server.wait_for(" (model", 0, 30)) << server.output();
    const std::string& out = server.output();
    const int port = std::stoi(out.substr(out.find(listening) + listening.size()));
    const std::string answer = http_exchange(
        port, "GET /%1B]0;srv-title%07%1B[2J HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    EXPECT_TRUE(answer.starts_with("HTTP/1.1 404")) << answer;
    EXPECT_TRUE(server.wait_for(" 404", 0, 30)) << server.output();
    EXPECT_TERMINAL_SAFE(server.output());
    EXPECT_TRUE(
        shows(server.output(), "GET /\xe2\x90\x9b]0;srv-title\xe2\x90\x87\xe2\x90\x9b[2J 404"))
        << server.output();
}

TEST_F(TerminalSafety, ExportToATerminalAFileAndAPipe) {
    const Stored s = read_stored(db_, id_);
    {
        SCOPED_TRACE("export md to a terminal");
        const auto [status, out] = run_on_terminal(sessions({"export", id_}), terminal());
        EXPECT_EQ(status, 0);
        EXPECT_TERMINAL_SAFE(out);
        EXPECT_TRUE(shows(out, "# " + expected_visible(kTitle))) << out;
        EXPECT_TRUE(shows(out, expected_visible(kPrompt))) << out;
    }
    {
        SCOPED_TRACE("export json to a terminal: escaped, so still exact");
        const auto [status, out] =
            run_on_terminal(sessions({"export", id_, "--format", "json"}), terminal());
        EXPECT_EQ(status, 0);
        EXPECT_TERMINAL_SAFE(out);
        const json doc = json::parse(out, nullptr, false);
        ASSERT_FALSE(doc.is_discarded()) << out;
        EXPECT_EQ(doc["title"].get<std::string>(), kTitle);
        EXPECT_EQ(doc["messages"][0]["content"].get<std::string>(), kPrompt);
        EXPECT_EQ(doc["messages"][1]["content"].get<std::string>(), s.messages[1].content);
    }
    // A file gets the exact bytes, the raw 0x9B byte included.
    const std::string file = dir_->file("export.md");
    const CommandResult exported = run_command(sessions({"export", id_, "-o", file}));
    ASSERT_EQ(exported.status, 0) << exported.err;
    const std::string md = read_file(file);
    EXPECT_TRUE(md.starts_with("# " + kTitle + "\n")) << md;
    EXPECT_TRUE(shows(md, "\n" + kSystem + "\n"));
    for (const auto& m : s.messages) EXPECT_TRUE(shows(md, "\n" + m.content + "\n")) << m.content;
    // Byte for byte after the metadata lines: the stored rows under their headings.
    std::string body = "\n## System\n\n" + kSystem + "\n";
    for (const auto& m : s.messages) {
        body += std::string("\n## ") + (m.role == "user" ? "User" : "Assistant") + "\n\n" +
                m.content + "\n";
    }
    const size_t body_at = md.find("\n\n## System\n");
    ASSERT_NE(body_at, std::string::npos) << md;
    EXPECT_EQ(md.substr(body_at + 1), body);
    // The same through a pipe.
    EXPECT_EQ(run_command(sessions({"export", id_})).out, md);
    // JSON through a pipe round-trips every string that is UTF-8 byte for byte; JSON cannot
    // carry the raw byte and the cut sequence, which come out as U+FFFD.
    const CommandResult j = run_command(sessions({"export", id_, "--format", "json"}));
    ASSERT_EQ(j.status, 0) << j.err;
    const json doc = json::parse(j.out);
    EXPECT_EQ(doc["title"].get<std::string>(), kTitle);
    EXPECT_EQ(doc["system_prompt"].get<std::string>(), kSystem);
    ASSERT_EQ(doc["messages"].size(), 4u);
    EXPECT_EQ(doc["messages"][0]["content"].get<std::string>(), kPrompt);
    EXPECT_EQ(doc["messages"][1]["content"].get<std::string>(), s.messages[1].content);
    EXPECT_EQ(doc["messages"][2]["content"].get<std::string>(),
              "raw \xef\xbf\xbd"
              "31m byte, cut \xef\xbf\xbd sequence");
    EXPECT_EQ(doc["messages"][3]["content"].get<std::string>(), s.messages[3].content);
}

// The newest conversation's last reply, as stored.
std::string last_reply(const std::string& db) {
    const auto ids = conversation_ids(db);
    if (ids.empty()) return {};
    const Stored s = read_stored(db, ids.back());
    return s.messages.empty() ? std::string() : s.messages.back().content;
}

TEST_F(TerminalSafety, StreamedRepliesOnATerminalAndThroughAPipe) {
    {
        SCOPED_TRACE("chat -p on a terminal");
        const auto [status, out] = run_on_terminal(chat({"-p", kPrompt}), terminal());
        EXPECT_EQ(status, 0) << out;
        EXPECT_TERMINAL_SAFE(out);
        const std::string reply = last_reply(db_);
        EXPECT_TRUE(has_control(reply)) << "seed 7 no longer makes a reply with controls";
        EXPECT_TRUE(out.ends_with(expected_visible(reply) + "\n")) << out;
        // Through a pipe the same run prints the stored bytes exactly.
        const CommandResult piped = run_command(chat({"-p", kPrompt}));
        EXPECT_EQ(piped.out, last_reply(db_) + "\n");
        EXPECT_EQ(last_reply(db_), reply);
    }
    {
        SCOPED_TRACE("chat --script, prompts from a pipe, answers on a terminal");
        TerminalProcess::Options o = terminal();
        o.piped_input = kRawPrompt + "\n";
        const auto [status, out] = run_on_terminal(chat({"--script"}), o);
        EXPECT_EQ(status, 0) << out;
        EXPECT_TERMINAL_SAFE(out);
        EXPECT_TRUE(out.ends_with(expected_visible(last_reply(db_)) + "\n")) << out;
    }
    {
        SCOPED_TRACE("chat --jsonl on a terminal and through a pipe");
        TerminalProcess::Options o = terminal();
        o.piped_input = json{{"prompt", kPrompt}}.dump() + "\n";
        const auto [status, out] = run_on_terminal(chat({"--jsonl"}), o);
        EXPECT_EQ(status, 0) << out;
        EXPECT_TERMINAL_SAFE(out);
        const json line = json::parse(out.substr(out.find('{')), nullptr, false);
        ASSERT_FALSE(line.is_discarded()) << out;
        // Escaped on a terminal, so parsing the line gives the exact reply.
        EXPECT_EQ(line["reply"].get<std::string>(), last_reply(db_));
        const CommandResult piped = run_command(chat({"--jsonl"}), o.piped_input);
        ASSERT_EQ(piped.status, 0) << piped.err;
        EXPECT_EQ(json::parse(piped.out)["reply"].get<std::string>(), last_reply(db_));
    }
}

TEST_F(TerminalSafety, RunDetokenizeAndRenderOnATerminal) {
    {
        SCOPED_TRACE("run: the echoed prompt and the completion");
        const std::vector<std::string> argv = {
            ember_binary(), "run",  "-m",     fixture_path(kModel),
            "-t",           "1",    "--temp", "2",
            "--seed",       "7",    "-n",     "48",
            "-p",           kPrompt};
        const CommandResult piped = run_command(argv);
        ASSERT_EQ(piped.status, 0) << piped.err;
        EXPECT_TRUE(piped.out.starts_with(kPrompt)) << piped.out;  // a pipe: exact bytes
        EXPECT_TRUE(has_control(piped.out.substr(kPrompt.size())))
            << "seed 7 no longer makes a completion with controls";
        const auto [status, out] = run_on_terminal(argv, terminal());
        EXPECT_EQ(status, 0) << out;
        EXPECT_TERMINAL_SAFE(out);
        EXPECT_TRUE(out.starts_with(expected_visible(piped.out))) << out;
    }
    {
        SCOPED_TRACE("detokenize: byte tokens for ESC [ 2 J BEL and U+009B");
        // In this vocabulary byte b is token 3 + b: 0x1B -> 30, '[' -> 94, '2' -> 53,
        // 'J' -> 77, BEL -> 10, 0xC2 0x9B -> 197, 158.
        const std::vector<std::string> argv = {ember_binary(), "detokenize", "-m",
                                               fixture_path(kModel), "30,94,53,77,10,197,158"};
        EXPECT_EQ(run_command(argv).out, "\x1b[2J\x07\xc2\x9b\n");
        const auto [status, out] = run_on_terminal(argv, terminal());
        EXPECT_EQ(status, 0);
        EXPECT_EQ(out, "\xe2\x90\x9b[2J\xe2\x90\x87<U+009B>\n");
    }
    {
        SCOPED_TRACE("render: a messages file quoting the sequences");
        const std::string messages = dir_->file("messages.json");
        std::ofstream(messages) << json::array({{{"role", "user"}, {"content", kPrompt}}}).dump();
        const std::vector<std::string> argv = {ember_binary(),       "render",     "-m",
                                               fixture_path(kModel), "--messages", messages};
        EXPECT_TRUE(shows(run_command(argv).out, kPrompt));
        const auto [status, out] = run_on_terminal(argv, terminal());
        EXPECT_EQ(status, 0) << out;
        EXPECT_TERMINAL_SAFE(out);
        EXPECT_TRUE(shows(out, expected_visible(kPrompt))) << out;
    }
}

TEST_F(TerminalSafety, LineModeShowsLoadedAndStreamedTextSafely) {
    // A copy of the database: this test adds a turn to the conversation.
    const std::string db = dir_->file("line-mode.db");
    for (const std::string suffix : {"", "-wal"}) {
        std::error_code ignored;
        fs::copy_file(db_ + suffix, db + suffix, fs::copy_options::overwrite_existing, ignored);
    }
    std::vector<std::string> argv = chat({"--plain", "--verbose"});
    for (auto& a : argv) {
        if (a == db_) a = db;
    }
    TerminalProcess::Options o;
    o.env = {"TERM=dumb", "LANG=C.UTF-8", "XDG_DATA_HOME=" + dir_->file("xdg")};
    o.stdin_is_terminal = true;
    TerminalProcess p(argv, o);
    ASSERT_TRUE(p.wait_for("> ")) << p.output();
    size_t from = p.output().size();
    p.type("/load " + id_ + "\n");
    ASSERT_TRUE(p.wait_for("\n> ", from)) << p.output();
    from = p.output().size();
    p.type("tell me\n");
    ASSERT_TRUE(p.wait_for(" tokens, ", from)) << p.output();
    ASSERT_TRUE(p.wait_for("> ", from)) << p.output();
    const size_t reply_end = p.output().size();
    // /sessions lists the stored title.
    p.type("/sessions\n");
    ASSERT_TRUE(p.wait_for("\n> ", reply_end)) << p.output();
    p.type("\x04");
    EXPECT_EQ(p.finish(), 0);
    const std::string out = p.output();
    EXPECT_TERMINAL_SAFE(out);
    const Stored s = read_stored(db, id_);
    ASSERT_EQ(s.messages.size(), 6u);
    EXPECT_TRUE(shows(out, "> " + expected_visible(kPrompt))) << out;
    EXPECT_TRUE(shows(out, expected_visible(s.messages[1].content))) << out;
    const std::string reply = s.messages.back().content;
    EXPECT_TRUE(shows(out.substr(from, reply_end - from), expected_visible(reply))) << out;
    EXPECT_TRUE(shows(out.substr(reply_end), expected_visible(kTitle))) << out;
}

// The full-screen UI under tmux: the transcript shows the stand-ins in a style of their own,
// the window title did not change, no OSC 52 reached tmux's clipboard, and none of the
// content's sequences are in the bytes the pane received (tmux pipe-pane keeps them).
TEST_F(TerminalSafety, FullScreenUiShowsTheSequencesWithoutObeyingThem) {
    const std::string tmux_binary = find_in_path("tmux");
    if (tmux_binary.empty()) EMBER_SKIP_OR_FAIL("tmux not found in PATH");
    TmuxSession tmux(tmux_binary, "ember-termsafe");
    const std::string log = dir_->file("pane.bytes");
    // ember starts once the pane's settings are in place (the shell waits for a line).
    const std::string command =
        "read go; exec env LANG=C.UTF-8 XDG_DATA_HOME=" + shell_quote(dir_->file("xdg")) + " " +
        shell_quote(ember_binary()) + " chat -m " + shell_quote(fixture_path(kModel)) + " --db " +
        shell_quote(db_) + " -t 1 --resume " + id_;
    ASSERT_EQ(tmux.start("sh -c " + shell_quote(command), 120, 40).status, 0);
    tmux.run({"set-option", "-g", "set-clipboard", "on"});
    tmux.run({"set-option", "-g", "allow-rename", "on"});
    tmux.run({"pipe-pane", "-t", "t", "-o", "cat > " + shell_quote(log)});
    const std::string title_before =
        tmux.run({"display-message", "-p", "-t", "t", "#{pane_title}"}).out;
    tmux.keys("Enter");
    std::string screen;
    const bool shown = TmuxSession::poll(
        [&] { return tmux.capture({"-e"}); },
        [](const std::string& s) { return shows(s, "clip") && shows(s, "<U+009B>"); }, screen, 30);
    EXPECT_TRUE(shown) << screen;
    // ␛ drawn in reverse video: the stand-in's own style.
    EXPECT_TRUE(shows(screen, "\x1b[7m\xe2\x90\x9b")) << screen;
    EXPECT_TRUE(shows(screen, "]52;c;cHduZWQ=")) << screen;
    const std::string title_after =
        tmux.run({"display-message", "-p", "-t", "t", "#{pane_title}"}).out;
    EXPECT_EQ(title_after, title_before);
    EXPECT_FALSE(shows(title_after, "title")) << title_after;
    EXPECT_EQ(tmux.run({"list-buffers"}).out, "");
    // The stored title, listed by /sessions: shown, not obeyed (the pane's bytes are checked
    // below).
    tmux.text("/sessions");
    tmux.keys("Enter");
    EXPECT_TRUE(TmuxSession::poll([&] { return tmux.capture({}); },
                                  [](const std::string& s) { return shows(s, " turns "); }, screen,
                                  30))
        << screen;
    EXPECT_TRUE(shows(screen, expected_visible(kTitle))) << screen;
    EXPECT_EQ(tmux.run({"display-message", "-p", "-t", "t", "#{pane_title}"}).out, title_before);
    tmux.text("/quit");
    tmux.keys("Enter");
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    const std::string bytes = read_file(log);
    EXPECT_FALSE(bytes.empty());
    const std::vector<std::pair<const char*, std::string>> raw = {{"OSC 0", "\x1b]0;"},
                                                                  {"OSC 52", "\x1b]52;"},
                                                                  {"any OSC", "\x1b]"},
                                                                  {"C1 CSI", "\xc2\x9b"},
                                                                  {"C1 OSC", "\xc2\x9d"},
                                                                  {"raw CSI byte",
                                                                   "\x9b"
                                                                   "31m"},
                                                                  {"DEL", "\x7f"},
                                                                  {"BEL", "\x07"}};
    for (const auto& [name, sequence] : raw) {
        EXPECT_FALSE(shows(bytes, sequence)) << "the pane received a raw " << name;
    }
}

}  // namespace
}  // namespace ember::test
