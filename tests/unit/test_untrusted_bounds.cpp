// Issue 41: every compiler of untrusted input is bounded (depth, size, work, time) and fails
// with one line naming the bound; the store refuses schema versions it does not know; a
// template's lists and dicts count in its memory budget; read_file stays beneath its root
// when a directory on the way is swapped for a link. The inputs that crashed or ran away are
// run in a child process (gtest death-test machinery) under a memory and time limit, so a
// regression fails the test instead of taking the test binary down.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/fs.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "engine/generate/constrained.h"
#include "engine/grammar/gbnf.h"
#include "engine/grammar/json_schema.h"
#include "engine/grammar/matcher.h"
#include "engine/template/template.h"
#include "sessions/schema.h"
#include "sessions/sqlite.h"
#include "tests/support/sanitizers.h"
#include "tests/support/temp_dir.h"
#include "ui/tools/builtin_tools.h"

namespace ember::test {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using ojson = nlohmann::ordered_json;

double seconds_since(Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
}

// Runs `body` in a child limited to `mib` MiB of address space and `seconds` of CPU; the child
// must exit 0 (a crash, an allocation past the limit or a runaway loop fails the test). Under
// AddressSanitizer, whose shadow memory takes terabytes of address space, only the CPU limit.
void in_bounded_child(const std::function<void()>& body, long mib = 2048, long seconds = 20) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    const auto child = [&] {
        if (kMemoryLimitsHold) {
            const auto bytes = static_cast<rlim_t>(mib) << 20;
            const rlimit as{bytes, bytes};
            setrlimit(RLIMIT_AS, &as);
        }
        const auto cpu_seconds = static_cast<rlim_t>(time_limit(static_cast<double>(seconds)));
        const rlimit cpu{cpu_seconds, cpu_seconds};
        setrlimit(RLIMIT_CPU, &cpu);
        body();
        std::fflush(nullptr);
        std::_Exit(0);
    };
    EXPECT_EXIT(child(), ::testing::ExitedWithCode(0), "");
}

std::string gbnf_error(const std::string& text) {
    try {
        grammar::parse_gbnf(text);
    } catch (const grammar::GrammarError& e) {
        return e.what();
    }
    return {};
}

// The error compiling `format` raises (empty: it compiled).
std::string format_error(OutputFormatKind kind, const std::string& text) {
    try {
        compile_output_format(OutputFormat{kind, text});
    } catch (const grammar::GrammarError& e) {
        return e.what();
    }
    return {};
}

// Prints `message` on stderr and exits 1 unless `err` holds `needle` (for child processes).
void require(const std::string& err, const std::string& needle) {
    if (err.find(needle) == std::string::npos) {
        std::fprintf(stderr, "expected \"%s\", got \"%s\"\n", needle.c_str(), err.c_str());
        std::_Exit(1);
    }
}

// --- row 1: a $ref chain 7,000 long --------------------------------------------------------

std::string ref_chain_schema(int n) {
    std::string s = R"({"$ref": "#/$defs/a0", "$defs": {)";
    for (int i = 0; i < n; ++i) {
        s += "\"a" + std::to_string(i) + "\": {\"$ref\": \"#/$defs/a" + std::to_string(i + 1) +
             "\"}, ";
    }
    s += "\"a" + std::to_string(n) + "\": {\"type\": \"integer\"}}}";
    return s;
}

TEST(UntrustedBounds, ARefChainIsRefusedAtTheNestingLimit) {
    const std::string schema = ref_chain_schema(7000);
    ASSERT_GT(schema.size(), 200000u);
    in_bounded_child([&] {
        const std::string err = format_error(OutputFormatKind::JsonSchema, schema);
        require(err, "nests deeper than 256 levels");
        require(err, "$ref hops count");
    });
    // A chain within the limit compiles (each target once).
    EXPECT_EQ(format_error(OutputFormatKind::JsonSchema, ref_chain_schema(200)), "");
}

// --- row 2: anyOf nested 10,000 deep -----------------------------------------------------------

TEST(UntrustedBounds, DeeplyNestedAnyOfIsRefused) {
    std::string schema;
    for (int i = 0; i < 10000; ++i) schema += R"({"anyOf": [)";
    schema += R"({"type": "integer"})";
    for (int i = 0; i < 10000; ++i) schema += "]}";
    in_bounded_child([&] {
        // Deeper than the JSON bound: refused before the compiler walks it.
        require(format_error(OutputFormatKind::JsonSchema, schema),
                "the JSON schema: JSON nested deeper than 512 levels");
        // Past the compiler's own bound (256), under the JSON one (512): its error.
        std::string mid;
        for (int i = 0; i < 300; ++i) mid += R"({"items": )";
        mid += R"({"type": "integer"})";
        for (int i = 0; i < 300; ++i) mid += "}";
        require(format_error(OutputFormatKind::JsonSchema, mid),
                "the JSON schema nests deeper than 256 levels at /items/items/items");
    });
}

// --- rows 3 and 4: nested repetitions ----------------------------------------------------------

TEST(UntrustedBounds, NestedRepetitionsStopAtTheWorkBound) {
    in_bounded_child([] {
        // 40 bytes that recursed 74,770 frames deep in Matcher::advance.
        require(format_error(OutputFormatKind::Grammar, R"(root ::= (("a"{0,300}){0,300}){0,300})"),
                "too ambiguous");
    });
    in_bounded_child(
        [] {
            // The one that reached 3.2 GB: refused at compile time, or at the latest by the
            // first bytes, within the bounds.
            const std::string g = R"(root ::= (("a"{0,10}){0,10}){0,10})";
            std::string err = format_error(OutputFormatKind::Grammar, g);
            if (err.empty()) {
                grammar::Matcher m(
                    std::make_shared<const grammar::Grammar>(grammar::parse_gbnf(g)));
                try {
                    for (int i = 0; i < 1000 && m.accept("a"); ++i) {
                    }
                    err = "accepted";  // bounded either way: what matters is the exit
                } catch (const grammar::GrammarError& e) {
                    err = e.what();
                }
            }
            require(err, err == "accepted" ? "accepted" : "too ambiguous");
        },
        1024, 20);
    // Plain repetitions stay fine.
    grammar::Matcher m(std::make_shared<const grammar::Grammar>(
        grammar::parse_gbnf(R"(root ::= ("ab"{0,300} "c"){0,3})")));
    EXPECT_TRUE(m.accept("ababc"));
}

TEST(UntrustedBounds, GroupsNestedTooDeepAreRefused) {
    std::string g = "root ::= ";
    for (int i = 0; i < 100000; ++i) g += '(';
    g += "\"a\"";
    for (int i = 0; i < 100000; ++i) g += ')';
    in_bounded_child([&] { require(gbnf_error(g), "groups nested deeper than 256 levels"); });
}

// --- row 5: a big const compiles in linear time ------------------------------------------------

TEST(UntrustedBounds, ABigConstCompilesInLinearTime) {
    const auto start = Clock::now();
    const std::string schema = ojson{{"const", std::string(3 << 20, 'x')}}.dump();
    const auto g = compile_output_format(OutputFormat{OutputFormatKind::JsonSchema, schema});
    EXPECT_LT(seconds_since(start), time_limit(10.0));  // 14 s for 100 KB before, none for 3 MB
    grammar::Matcher m(g);
    EXPECT_TRUE(m.accept("\"xxxx"));
    EXPECT_FALSE(m.accept("y"));
    // A chain of rules in the order the old fixed point liked least also builds in time.
    std::string chain;
    for (int i = 0; i < 50000; ++i) {
        // Appended piece by piece: GCC 12 warns (-Wrestrict, wrongly) on "literal" + string.
        chain.append("r").append(std::to_string(i)).append(" ::= r");
        chain.append(std::to_string(i + 1)).append(" \"a\"\n");
    }
    chain += "r50000 ::= \"b\"\nroot ::= r0\n";
    const auto again = Clock::now();
    EXPECT_EQ(gbnf_error(chain), "");
    EXPECT_LT(seconds_since(again), time_limit(10.0));
}

TEST(UntrustedBounds, SizeTimeAndCancelLimitsNameThemselves) {
    grammar::CompileLimits small;
    small.max_elements = 1000;
    grammar::CompileBudget budget(small);
    try {
        grammar::parse_gbnf("root ::= \"" + std::string(2000, 'a') + "\"", "root", &budget);
        ADD_FAILURE() << "compiled past max_elements";
    } catch (const grammar::GrammarError& e) {
        EXPECT_NE(std::string(e.what()).find("more than 1000 elements"), std::string::npos)
            << e.what();
    }
    grammar::CompileLimits cancel;
    cancel.cancelled = [] { return true; };
    grammar::CompileBudget cancelled(cancel);
    std::string many;
    for (int i = 0; i < 20000; ++i) {
        many.append("r").append(std::to_string(i)).append(" ::= \"a\"\n");
    }
    EXPECT_THROW(grammar::parse_gbnf(many + "root ::= r0\n", "root", &cancelled),
                 grammar::CompileCancelled);
    grammar::CompileLimits quick;
    quick.max_time = std::chrono::milliseconds(1);
    grammar::CompileBudget timed(quick);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    try {
        grammar::parse_gbnf(many + "root ::= r0\n", "root", &timed);
        ADD_FAILURE() << "compiled past max_time";
    } catch (const grammar::GrammarError& e) {
        EXPECT_NE(std::string(e.what()).find("time limit of 0.001 s"), std::string::npos)
            << e.what();
    }
}

// --- row 17: literals are text -----------------------------------------------------------------

TEST(UntrustedBounds, GrammarLiteralsMustBeText) {
    EXPECT_NE(gbnf_error(R"(root ::= "a\x00b")").find("a NUL character in a string literal"),
              std::string::npos);
    EXPECT_NE(gbnf_error(R"(root ::= "\uD800")").find("a surrogate code point"), std::string::npos);
    EXPECT_NE(gbnf_error("root ::= \"\xC0\x80\"").find("invalid UTF-8"), std::string::npos);
    EXPECT_NE(gbnf_error("root ::= \"\xED\xA0\x80\"").find("invalid UTF-8"), std::string::npos);
    // A class never yields NUL: [\x00-\x01] matches \x01 only.
    grammar::Matcher m(
        std::make_shared<const grammar::Grammar>(grammar::parse_gbnf(R"(root ::= [\x00-\x01])")));
    EXPECT_FALSE(m.can_accept(std::string(1, '\0')));
    EXPECT_TRUE(m.can_accept("\x01"));
}

// --- row 6: template lists and dicts -------------------------------------------------------------

std::string render_error(const std::string& source) {
    ojson vars = ojson::object();
    vars["messages"] = ojson::array({{{"role", "user"}, {"content", "hi"}}});
    try {
        ChatTemplate(source).render_variables(vars);
    } catch (const TemplateError& e) {
        return e.what();
    }
    return {};
}

TEST(UntrustedBounds, DoublingAListOrADictStopsAtTheBudget) {
    const char* const runaways[] = {
        "{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}"
        "{% endfor %}{{ ns.l | length }}",
        "{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l * 2 %}"
        "{% endfor %}{{ ns.l | length }}",
        "{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = [ns.l, ns.l] | "
        "map('list') | sum(start=[]) %}{% endfor %}",
        // a dict whose two keys hold the dict before: printing it doubles 64 times
        "{% set ns = namespace(d={'x': 1}) %}{% for i in range(64) %}"
        "{% set ns.d = {'a': ns.d, 'b': ns.d} %}{% endfor %}{{ ns.d | tojson }}",
        // a dict of a list that doubles
        "{% set ns = namespace(d={'a': [1]}) %}{% for i in range(64) %}"
        "{% set ns.d = {'a': ns.d.a + ns.d.a} %}{% endfor %}",
    };
    for (const char* source : runaways) {
        in_bounded_child(
            [&] {
                const std::string err = render_error(source);
                if (err.find("MiB of text and containers") == std::string::npos &&
                    err.find("evaluation steps") == std::string::npos &&
                    err.find("result too large") == std::string::npos) {
                    std::fprintf(stderr, "%s -> %s\n", source, err.c_str());
                    std::_Exit(1);
                }
            },
            1536, 30);
    }
    // Ordinary list building is untouched.
    EXPECT_EQ(render_error("{% set l = [1, 2] + [3] %}{{ l | length }}{{ (l * 3) | length }}"), "");
}

// --- row 7: schema versions outside the known range ---------------------------------------------

TEST(UntrustedBounds, ANegativeOrFutureSchemaVersionIsRefusedBeforeAnyLookup) {
    TempDir dir;
    for (const int version : {-1, -3, -2147483647 - 1, sessions::kSchemaVersion + 1}) {
        const std::string path = dir.file("v" + std::to_string(version) + ".db");
        {
            sessions::Database db(path);
            db.exec("PRAGMA user_version=" + std::to_string(version));
        }
        sessions::Database db(path);
        try {
            sessions::migrate(db);
            ADD_FAILURE() << "version " << version << " migrated";
        } catch (const sessions::SqliteError& e) {
            const std::string what = e.what();
            EXPECT_NE(what.find("schema version " + std::to_string(version)), std::string::npos)
                << what;
            EXPECT_NE(what.find(path), std::string::npos) << what;
        }
        EXPECT_EQ(db.user_version(), version);  // nothing written
    }
}

// --- row 10: read_file while a directory is swapped for a link out of the root ------------------

void race_read_file(bool component_walk) {
    ui::ToolRoot::force_component_walk(component_walk);
    TempDir dir;
    const fs::path root = dir.path() / "root";
    fs::create_directories(root / "d");
    std::ofstream(root / "d" / "f.txt") << "inside\n";
    fs::create_directories(dir.path() / "out");
    std::ofstream(dir.path() / "out" / "f.txt") << "the secret\n";
    fs::create_directory_symlink(dir.path() / "out", root / "link");
    const ui::ToolRoot tool_root(root.string());
    std::atomic<bool> stop{false};
    std::atomic<int64_t> swaps{0};
    // Swaps root/d and root/link back and forth (renameat2 RENAME_EXCHANGE), as the attack did.
    std::thread swapper([&] {
        while (!stop.load()) {
            if (syscall(SYS_renameat2, AT_FDCWD, (root / "d").c_str(), AT_FDCWD,
                        (root / "link").c_str(), RENAME_EXCHANGE) == 0) {
                ++swaps;
            }
        }
    });
    int inside = 0;
    int control_escapes = 0;  // the check-then-open the tool did before: it does escape
    for (int i = 0; i < 4000; ++i) {
        const ui::ToolOutput out = ui::read_file_tool(tool_root, {{"path", "d/f.txt"}});
        EXPECT_EQ(out.content.find("the secret"), std::string::npos)
            << "read outside the root on call " << i
            << (component_walk ? " (component walk)" : " (openat2)");
        if (!out.error) ++inside;
        try {
            const fs::path checked = tool_root.resolve("d/f.txt");
            const int fd = ::open(checked.c_str(), O_RDONLY | O_NOFOLLOW);
            if (fd >= 0) {
                char buf[64] = {};
                if (::read(fd, buf, sizeof buf - 1) > 0 &&
                    std::string(buf).find("the secret") != std::string::npos) {
                    ++control_escapes;
                }
                ::close(fd);
            }
        } catch (const ui::ToolsError&) {
        }
    }
    stop = true;
    swapper.join();
    ui::ToolRoot::force_component_walk(false);
    EXPECT_GT(swaps.load(), 100);  // the race was run
    EXPECT_GT(inside, 0);          // and the file was read inside whenever it was there
    // Not asserted (timing), but reported: how often the old way left the root.
    std::printf("swaps %lld, read inside %d of 4000, the old check-then-open escaped %d times\n",
                static_cast<long long>(swaps.load()), inside, control_escapes);
}

TEST(UntrustedBounds, ReadFileNeverLeavesTheRootWhileADirectoryIsSwappedOpenat2) {
    race_read_file(false);
}

TEST(UntrustedBounds, ReadFileNeverLeavesTheRootWhileADirectoryIsSwappedComponentWalk) {
    race_read_file(true);
}

}  // namespace
}  // namespace ember::test
