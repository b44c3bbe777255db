// The real binary against hostile structure in what it is given: a chat template that never
// ends or grows without bound, JSON nested 100,000 deep, invisible bidi controls in text, and
// a model file whose name holds escape sequences. Each must end in a one-line error or show
// safely, never in a signal, a hang or a terminal that obeys the text.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/support/fixtures.h"
#include "tests/support/process.h"
#include "tests/support/pty.h"
#include "tests/support/temp_dir.h"

namespace ember::test {
namespace {

void write_file(const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::binary) << text;
}

std::string nested_arrays(size_t depth) {
    return std::string(depth, '[') + std::string(depth, ']');
}

// stderr holds exactly one line (the error), and it says `needle`.
void expect_one_line_error(const CommandResult& r, const std::string& needle) {
    EXPECT_EQ(r.status, 1) << r.err;
    EXPECT_FALSE(r.timed_out);
    EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
    ASSERT_FALSE(r.err.empty());
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << r.err;
}

class UntrustedStructure : public ::testing::Test {
protected:
    TempDir dir_{"ember-untrusted"};
    std::string messages_ = dir_.file("messages.json");
    std::string echo_ = dir_.file("echo.jinja");

    void SetUp() override {
        write_file(messages_, R"([{"role": "user", "content": "hi"}])");
        write_file(echo_, "{{ messages | tojson }}");
    }

    CommandResult render(const std::string& template_path, const std::string& messages,
                         const std::vector<std::string>& extra = {}) {
        std::vector<std::string> argv = {ember_binary(), "render",     "--chat-template",
                                         template_path,  "--messages", messages};
        argv.insert(argv.end(), extra.begin(), extra.end());
        return run_command(argv, "", 60);
    }
};

TEST_F(UntrustedStructure, DeepMessagesFileIsRefused) {
    const std::string deep = dir_.file("deep.json");
    write_file(deep, nested_arrays(100000));
    const CommandResult r = render(echo_, deep);
    expect_one_line_error(r, "deep.json: JSON nested deeper than 512 levels");
}

TEST_F(UntrustedStructure, DeepMessageContentIsRefused) {
    // Deep inside an otherwise ordinary message, and in the {"messages": ...} form.
    const std::string deep = dir_.file("deep-object.json");
    write_file(deep,
               R"({"messages": [{"role": "user", "content": )" + nested_arrays(100000) + "}]}");
    expect_one_line_error(render(echo_, deep), "JSON nested deeper than 512 levels");
}

TEST_F(UntrustedStructure, DeepVarIsRefused) {
    // 50,000 levels: 100 KB, under the kernel's limit on one argument's length.
    const CommandResult r = render(echo_, messages_, {"--var", "x=" + nested_arrays(50000)});
    expect_one_line_error(r, "--var x: JSON nested deeper than 512 levels");
    // The error names the variable, not its 100 KB value.
    EXPECT_LT(r.err.size(), 200u) << r.err.size();
}

TEST_F(UntrustedStructure, NestingAtTheLimitStillRenders) {
    const std::string ok = dir_.file("ok.json");
    write_file(ok, R"([{"role": "user", "content": "hi", "x": )" + nested_arrays(510) + "}]");
    const CommandResult r = render(echo_, ok);
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("\"x\": [[[["), std::string::npos);
}

TEST_F(UntrustedStructure, RunawayTemplatesEndWithTheBudgetError) {
    const std::string loops = dir_.file("loops.jinja");
    write_file(loops,
               "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}");
    const auto start = std::chrono::steady_clock::now();
    expect_one_line_error(render(loops, messages_), "10,000,000 evaluation steps");
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
              20.0);

    const std::string doubling = dir_.file("doubling.jinja");
    write_file(doubling,
               "{% set ns = namespace(s='ab') %}{% for i in range(64) %}"
               "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}");
    expect_one_line_error(render(doubling, messages_), "MiB of text");
}

TerminalProcess::Options terminal() {
    TerminalProcess::Options o;
    o.env = {"TERM=xterm-256color", "LANG=C.UTF-8", "NO_COLOR=1"};
    return o;
}

TEST_F(UntrustedStructure, BidiControlsShowAsStandInsOnATerminal) {
    const std::string content = dir_.file("bidi.json");
    // JSON escapes, so the file itself is ASCII: RLO, LRI, PDI, ZWSP, BOM.
    write_file(content,
               R"([{"role": "user", "content": "x\u202Eevil\u2066y\u2069\u200Bz\uFEFF"}])");
    const std::string print = dir_.file("print.jinja");
    write_file(print, "{{ messages[0].content }}");
    const auto [status, out] = run_on_terminal(
        {ember_binary(), "render", "--chat-template", print, "--messages", content}, terminal());
    EXPECT_EQ(status, 0) << out;
    EXPECT_NE(out.find("x<U+202E>evil<U+2066>y<U+2069><U+200B>z<U+FEFF>"), std::string::npos)
        << out;
    EXPECT_EQ(out.find("\xE2\x80\xAE"), std::string::npos);
    EXPECT_EQ(out.find("\xEF\xBB\xBF"), std::string::npos);
}

TEST_F(UntrustedStructure, ServeShowsAnEscapeNamedModelSafely) {
    const std::string model = "arch/llama/llama.gguf";
    EMBER_REQUIRE_FIXTURE(model);
    const std::string evil = dir_.file("evil\x1B]0;pwned\x07\x1B[2J.gguf");
    std::filesystem::copy_file(fixture_path(model), evil);
    TerminalProcess server({ember_binary(), "serve", "-m", evil, "--port", "0", "--no-db", "-t",
                            "1", "--parallel", "1"},
                           terminal());
    ASSERT_TRUE(server.wait_for("listening on http://", 0, 60)) << server.output();
    ASSERT_TRUE(server.wait_for("slots", 0, 30)) << server.output();
    const std::string& out = server.output();
    const size_t at = out.find("listening on");
    const std::string line = out.substr(at, out.find('\n', at) - at);
    EXPECT_EQ(line.find('\x1B'), std::string::npos) << line;
    EXPECT_EQ(line.find('\x07'), std::string::npos) << line;
    EXPECT_NE(line.find("evil\xE2\x90\x9B]0;pwned\xE2\x90\x87\xE2\x90\x9B[2J.gguf"),
              std::string::npos)
        << line;
}

}  // namespace
}  // namespace ember::test
