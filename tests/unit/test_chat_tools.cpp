// The tools of `ember chat --tools FILE --builtin-tools NAMES`: the tools file's validation
// (one line naming the file, the tool and the field), the built-in read-only tools (confined
// to their root: "..", absolute paths and symbolic links out are refused; caps on what they
// return) and running a user tool's command (arguments on stdin, time and output limits).
// Expected values come from the files the tests write and from the file system.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/support/temp_dir.h"
#include "ui/tools/builtin_tools.h"
#include "ui/tools/tool_runner.h"
#include "ui/tools/tool_set.h"

namespace ember::ui {
namespace {

namespace fs = std::filesystem;
using test::TempDir;

void write_file(const fs::path& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary);
    out << text;
}

// The error parse_tools_json gives for `text`, or "" when it accepts it.
std::string tools_error(const std::string& text) {
    try {
        parse_tools_json(text, "tools.json", "/base");
    } catch (const ToolsError& e) {
        return e.what();
    }
    return "";
}

const char* const kGoodTool = R"([{"type": "function",
    "function": {"name": "get_weather", "description": "The weather in a city",
                 "parameters": {"type": "object",
                                "properties": {"city": {"type": "string"}},
                                "required": ["city"]}},
    "command": ["./weather.sh", "--metric"], "timeout_seconds": 5}])";

TEST(ToolsFile, AcceptsAValidFileAndResolvesTheProgramFromItsDirectory) {
    const std::vector<ToolSpec> tools = parse_tools_json(kGoodTool, "tools.json", "/base/dir");
    ASSERT_EQ(tools.size(), 1u);
    EXPECT_EQ(tools[0].name, "get_weather");
    EXPECT_EQ(tools[0].description, "The weather in a city");
    EXPECT_EQ(tools[0].kind, ToolKind::Command);
    EXPECT_EQ(tools[0].command, (std::vector<std::string>{"/base/dir/weather.sh", "--metric"}));
    EXPECT_EQ(tools[0].timeout_seconds, 5);
    EXPECT_EQ(tools[0].parameters["required"][0], "city");
}

TEST(ToolsFile, BareProgramNamesStayForPathAndTheTimeoutDefaults) {
    const auto tools = parse_tools_json(
        R"([{"type":"function","function":{"name":"t"},"command":["python3","x.py"]}])", "f",
        "/base");
    ASSERT_EQ(tools.size(), 1u);
    EXPECT_EQ(tools[0].command.front(), "python3");
    EXPECT_EQ(tools[0].timeout_seconds, kDefaultToolTimeoutSeconds);
    // No parameters: an object without properties.
    EXPECT_EQ(tools[0].parameters["type"], "object");
}

TEST(ToolsFile, EachMistakeIsOneLineNamingFileToolAndField) {
    struct Case {
        const char* text;
        const char* expected;
    };
    const Case cases[] = {
        {"[{]", "tools.json: not valid JSON"},
        {R"({"tools": []})", "tools.json: must be a JSON array of tools"},
        {"[]", "tools.json: holds no tools"},
        {"[1]", "tools.json: tool 1: must be an object"},
        {R"([{"type":"function","command":["x"]}])",
         "tools.json: tool 1: \"function\" must be an object"},
        {R"([{"type":"function","function":{"name":"a b"},"command":["x"]}])",
         "tools.json: tool 1: \"function\".\"name\" \"a b\" must be 1 to 64 letters"},
        {R"([{"type":"function","function":{"name":"t"}}])",
         "tools.json: tool 1 (\"t\"): \"command\" is missing"},
        {R"([{"type":"function","function":{"name":"t"},"command":[]}])",
         "tools.json: tool 1 (\"t\"): \"command\" must be a non-empty array of strings"},
        {R"([{"type":"function","function":{"name":"t"},"command":"ls -l"}])",
         "tools.json: tool 1 (\"t\"): \"command\" must be a non-empty array of strings"},
        {R"([{"type":"function","function":{"name":"t"},"command":["ls", 3]}])",
         "tools.json: tool 1 (\"t\"): \"command\"[1] must be a non-empty string"},
        {R"([{"type":"function","function":{"name":"t"},"comand":["ls"]}])",
         "tools.json: tool 1 (\"t\"): unknown field \"comand\""},
        {R"([{"type":"func","function":{"name":"t"},"command":["ls"]}])",
         "tools.json: tool 1 (\"t\"): \"type\" must be \"function\""},
        {R"([{"type":"function","function":{"name":"t","parameters":{"type":"array"}},"command":["ls"]}])",
         "tools.json: tool 1 (\"t\"): \"function\".\"parameters\".\"type\" must be \"object\""},
        {R"([{"type":"function","function":{"name":"t","parameters":[]},"command":["ls"]}])",
         "tools.json: tool 1 (\"t\"): \"function\".\"parameters\" must be a JSON Schema object"},
        {R"([{"type":"function","function":{"name":"t","description":3},"command":["ls"]}])",
         "tools.json: tool 1 (\"t\"): \"function\".\"description\" must be a string"},
        {R"([{"type":"function","function":{"name":"t"},"command":["ls"],"timeout_seconds":0}])",
         "tools.json: tool 1 (\"t\"): \"timeout_seconds\" must be a whole number from 1 to 600"},
        {R"([{"type":"function","function":{"name":"t"},"command":["ls"]},
             {"type":"function","function":{"name":"t"},"command":["ls"]}])",
         "tools.json: tool 2 (\"t\"): the name is taken by an earlier tool"},
    };
    for (const Case& c : cases) {
        const std::string error = tools_error(c.text);
        EXPECT_TRUE(error.starts_with(c.expected)) << c.text << "\n  gave: " << error;
        EXPECT_EQ(error.find('\n'), std::string::npos) << error;
    }
}

TEST(ToolsFile, AMissingFileAndADirectoryAreNamed) {
    TempDir dir;
    try {
        read_tools_file(dir.file("absent.json"));
        FAIL() << "no error";
    } catch (const ToolsError& e) {
        EXPECT_EQ(std::string(e.what()),
                  dir.file("absent.json") + ": cannot be read (does it exist?)");
    }
    EXPECT_THROW(read_tools_file(dir.path().string()), ToolsError);
}

TEST(ToolSet, BuiltinsAreOfferedOnlyByNameAndNamesStayUnique) {
    TempDir dir;
    write_file(dir.file("tools.json"),
               R"([{"type":"function","function":{"name":"read_file"},"command":["cat"]}])");
    ToolSet set;
    EXPECT_TRUE(set.empty());
    set.add_builtin("read_file");
    set.add_builtin("list_directory");
    EXPECT_THROW(set.add_builtin("write_file"), ToolsError);
    EXPECT_THROW(set.add_builtin("read_file"), ToolsError);
    try {
        set.add_file(dir.file("tools.json"));
        FAIL() << "a user tool took a built-in's name";
    } catch (const ToolsError& e) {
        EXPECT_NE(std::string(e.what()).find("\"read_file\""), std::string::npos) << e.what();
    }
    ASSERT_EQ(set.tools().size(), 2u);
    const nlohmann::ordered_json defs = set.definitions();
    ASSERT_EQ(defs.size(), 2u);
    EXPECT_EQ(defs[0]["type"], "function");
    EXPECT_EQ(defs[0]["function"]["name"], "read_file");
    EXPECT_EQ(defs[0]["function"]["parameters"]["required"][0], "path");
    EXPECT_FALSE(defs[0].contains("command"));
    EXPECT_EQ(defs[1]["function"]["name"], "list_directory");
}

// A tool root with files in and around it: root/notes.txt, root/sub/deep.txt, a secret
// beside the root, and links pointing in and out.
struct RootTree {
    TempDir dir;
    fs::path root;
    std::string notes = "first line\nsecond line\nthird line\n";
    RootTree() {
        root = dir.path() / "root";
        fs::create_directories(root / "sub");
        write_file(root / "notes.txt", notes);
        write_file(root / "sub" / "deep.txt", "deep\n");
        write_file(dir.path() / "secret.txt", "the secret\n");
        fs::create_symlink(dir.path() / "secret.txt", root / "link_out.txt");
        fs::create_symlink(dir.path(), root / "dir_out");
        fs::create_symlink(root / "notes.txt", root / "link_in.txt");
    }
};

ToolOutput read(const RootTree& t, const nlohmann::json& arguments) {
    return read_file_tool(ToolRoot(t.root.string()), arguments);
}

TEST(BuiltinReadFile, ReadsATextFileInsideTheRoot) {
    RootTree t;
    const ToolOutput out = read(t, {{"path", "notes.txt"}});
    EXPECT_FALSE(out.error) << out.content;
    EXPECT_EQ(out.content, t.notes);
    EXPECT_EQ(read(t, {{"path", "sub/deep.txt"}}).content, "deep\n");
    EXPECT_EQ(read(t, {{"path", "sub/../notes.txt"}}).content, t.notes);
    EXPECT_EQ(read(t, {{"path", (t.root / "notes.txt").string()}}).content, t.notes);
    // A link that stays inside is followed.
    EXPECT_EQ(read(t, {{"path", "link_in.txt"}}).content, t.notes);
}

TEST(BuiltinReadFile, RefusesEveryWayOutOfTheRoot) {
    RootTree t;
    const std::vector<std::string> escapes = {
        "../secret.txt",  "sub/../../secret.txt", (t.dir.path() / "secret.txt").string(),
        "/etc/passwd",    "link_out.txt",         "dir_out/secret.txt",
        "../no-such-file"};
    for (const std::string& path : escapes) {
        const ToolOutput out = read(t, {{"path", path}});
        EXPECT_TRUE(out.error) << path;
        EXPECT_NE(out.content.find("outside the directory tools may read"), std::string::npos)
            << path << ": " << out.content;
        EXPECT_EQ(out.content.find("the secret"), std::string::npos) << path;
    }
}

TEST(BuiltinReadFile, LineRangesAndBadArguments) {
    RootTree t;
    EXPECT_EQ(read(t, {{"path", "notes.txt"}, {"start_line", 2}}).content,
              "second line\nthird line\n");
    EXPECT_EQ(read(t, {{"path", "notes.txt"}, {"start_line", 2}, {"end_line", 2}}).content,
              "second line\n");
    EXPECT_EQ(read(t, {{"path", "notes.txt"}, {"end_line", 1}}).content, "first line\n");
    EXPECT_TRUE(read(t, {{"path", "notes.txt"}, {"start_line", 9}}).error);
    EXPECT_TRUE(read(t, {{"path", "notes.txt"}, {"start_line", 0}}).error);
    EXPECT_TRUE(read(t, {{"path", "notes.txt"}, {"start_line", 3}, {"end_line", 2}}).error);
    EXPECT_TRUE(read(t, {{"path", 7}}).error);
    EXPECT_TRUE(read(t, nlohmann::json::object()).error);
    EXPECT_TRUE(read(t, {{"path", "absent.txt"}}).error);
    EXPECT_TRUE(read(t, {{"path", "sub"}}).error);
}

TEST(BuiltinReadFile, RefusesBinaryAndFifosAndCapsWhatItReturns) {
    RootTree t;
    write_file(t.root / "binary.bin", std::string("ab\0cd", 5));
    const ToolOutput binary = read(t, {{"path", "binary.bin"}});
    EXPECT_TRUE(binary.error);
    EXPECT_NE(binary.content.find("not text"), std::string::npos) << binary.content;
    ASSERT_EQ(::mkfifo((t.root / "fifo").c_str(), 0600), 0);
    EXPECT_TRUE(read(t, {{"path", "fifo"}}).error);  // and it did not block

    // 3,000 lines of 40 bytes: 120,000 bytes, past the cap.
    std::string big;
    for (int i = 1; i <= 3000; ++i) {
        std::string line = "line " + std::to_string(i);
        line.resize(39, '.');
        big += line + "\n";
    }
    write_file(t.root / "big.txt", big);
    const ToolOutput first = read(t, {{"path", "big.txt"}});
    EXPECT_FALSE(first.error);
    EXPECT_LE(first.content.size(), kReadFileMaxBytes + 200);
    const size_t whole_lines = kReadFileMaxBytes / 40;
    EXPECT_EQ(first.content.substr(0, whole_lines * 40), big.substr(0, whole_lines * 40));
    const std::string note = "[lines 1-" + std::to_string(whole_lines) + " of 3000 shown";
    EXPECT_NE(first.content.find(note), std::string::npos)
        << first.content.substr(whole_lines * 40);
    const ToolOutput rest =
        read(t, {{"path", "big.txt"}, {"start_line", static_cast<int>(whole_lines) + 1}});
    EXPECT_EQ(rest.content.substr(0, 40), big.substr(whole_lines * 40, 40));
}

TEST(BuiltinListDirectory, ListsSortedWithKindsAndStaysInside) {
    RootTree t;
    const ToolRoot root(t.root.string());
    const ToolOutput out = list_directory_tool(root, nlohmann::json::object());
    EXPECT_FALSE(out.error) << out.content;
    EXPECT_EQ(out.content, "dir_out@\nlink_in.txt@\nlink_out.txt@\nnotes.txt\nsub/\n");
    EXPECT_EQ(list_directory_tool(root, {{"path", "sub"}}).content, "deep.txt\n");
    for (const char* path : {"..", "../root/..", "/", "dir_out"}) {
        const ToolOutput refused = list_directory_tool(root, {{"path", path}});
        EXPECT_TRUE(refused.error) << path;
        EXPECT_EQ(refused.content.find("secret.txt"), std::string::npos) << path;
    }
    EXPECT_TRUE(list_directory_tool(root, {{"path", "notes.txt"}}).error);
}

TEST(BuiltinListDirectory, CapsTheEntries) {
    TempDir dir;
    for (size_t i = 0; i < kListDirectoryMaxEntries + 5; ++i) {
        write_file(dir.path() / std::to_string(100000 + i), "");
    }
    const ToolOutput out = list_directory_tool(ToolRoot(dir.path().string()), {});
    EXPECT_NE(out.content.find("[5 more entries not shown]"), std::string::npos);
}

TEST(ToolRoot, MustBeADirectory) {
    TempDir dir;
    write_file(dir.path() / "file", "x");
    EXPECT_THROW(ToolRoot(dir.file("file")), ToolsError);
    EXPECT_THROW(ToolRoot(dir.file("absent")), ToolsError);
}

ToolSpec command_tool(std::vector<std::string> argv, int timeout_seconds = 5) {
    return ToolSpec{.name = std::string("t"),
                    .kind = ToolKind::Command,
                    .command = std::move(argv),
                    .timeout_seconds = timeout_seconds};
}

TEST(UserTool, GetsTheArgumentsOnStdinAndReturnsItsStdout) {
    TempDir dir;
    const ToolRoot root(dir.path().string());
    const ToolOutput out = run_tool(command_tool({"cat"}), R"({"city": "Oslo"})", &root);
    EXPECT_FALSE(out.error) << out.content;
    EXPECT_EQ(nlohmann::json::parse(out.content), nlohmann::json({{"city", "Oslo"}}));
    // No shell: the metacharacters are one argument.
    const ToolOutput echo = run_tool(command_tool({"echo", "a;b $(x)"}), "{}", &root);
    EXPECT_EQ(echo.content, "a;b $(x)\n");
}

TEST(UserTool, FailuresComeBackAsErrorsTheModelReads) {
    TempDir dir;
    const ToolRoot root(dir.path().string());
    const ToolOutput missing = run_tool(command_tool({dir.file("no-such-program")}), "{}", &root);
    EXPECT_TRUE(missing.error);
    EXPECT_NE(missing.content.find("cannot run"), std::string::npos) << missing.content;

    const ToolOutput failed =
        run_tool(command_tool({"sh", "-c", "echo oops >&2; exit 3"}), "{}", &root);
    EXPECT_TRUE(failed.error);
    EXPECT_NE(failed.content.find("exit status 3"), std::string::npos) << failed.content;
    EXPECT_NE(failed.content.find("oops"), std::string::npos) << failed.content;

    const ToolOutput not_object = run_tool(command_tool({"cat"}), "[1, 2]", &root);
    EXPECT_TRUE(not_object.error);
    EXPECT_TRUE(run_tool(command_tool({"cat"}), "{not json", &root).error);
}

TEST(UserTool, TimeAndOutputAreBounded) {
    TempDir dir;
    const ToolRoot root(dir.path().string());
    const auto start = std::chrono::steady_clock::now();
    const ToolOutput slow = run_tool(command_tool({"sleep", "30"}, 1), "{}", &root);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_TRUE(slow.error);
    EXPECT_NE(slow.content.find("ran past its 1 second"), std::string::npos) << slow.content;
    EXPECT_LT(seconds, 10.0);

    // Closing its output does not let a command outlive its time.
    const ToolOutput quiet =
        run_tool(command_tool({"sh", "-c", "exec >&- 2>&-; sleep 30"}, 1), "{}", &root);
    EXPECT_TRUE(quiet.error);

    const ToolOutput loud = run_tool(command_tool({"yes"}), "{}", &root);
    EXPECT_TRUE(loud.error);
    EXPECT_NE(loud.content.find("wrote more than"), std::string::npos) << loud.content;

    // A command that never reads its stdin does not hurt ember (no SIGPIPE).
    std::string big_arguments = R"({"x": ")" + std::string(1 << 20, 'a') + "\"}";
    const ToolOutput deaf = run_tool(command_tool({"true"}), big_arguments, &root);
    EXPECT_FALSE(deaf.error) << deaf.content;
}

}  // namespace
}  // namespace ember::ui
