// `ember pull OWNER/REPO[:QUANT|FILE]` against a local hub (tests/integration/py/hub_server.py,
// Python's standard library: the hub's file listing, redirects to a CDN path, ranges, and
// faults on demand). Nothing here reaches the internet: HF_ENDPOINT points at that server.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "engine/gguf/gguf.h"
#include "tests/support/fixtures.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tmux.h"

namespace ember::test {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kLlama = "arch/llama/llama.gguf";  // 8 MiB, a real GGUF the loader reads

// The local hub, started with `flags` (hub_server.py's faults), serving `root`.
struct Hub {
    TempDir dir{"ember-hub"};
    std::unique_ptr<BackgroundProcess> process;
    int port = 0;

    Hub(const fs::path& root, const std::vector<std::string>& flags) {
        const std::string python = find_in_path("python3");
        if (python.empty()) return;
        std::vector<std::string> argv = {
            python, std::string(EMBER_SOURCE_DIR) + "/tests/integration/py/hub_server.py", "--root",
            root.string()};
        argv.insert(argv.end(), flags.begin(), flags.end());
        process = std::make_unique<BackgroundProcess>(argv, dir.file("hub.log"));
        const std::string line = process->wait_for_line("port ", 20);
        if (!line.empty()) port = std::atoi(line.c_str() + line.find("port ") + 5);
    }
    std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port); }
    std::string log() const { return process ? process->log() : std::string(); }
};

bool same_bytes(const fs::path& a, const fs::path& b) {
    return read_file(a.string()) == read_file(b.string());
}

// Writes `source` as a split model of two parts in llama.cpp's gguf-split layout: the first
// part all the metadata and the first half of the tensors, the second the rest.
void write_split(const std::string& source, const fs::path& first, const fs::path& second) {
    const auto file = GgufFile::open(source);
    const auto& tensors = file->tensors();
    const size_t half = tensors.size() / 2;
    for (int part = 0; part < 2; ++part) {
        GgufWriter w;
        if (part == 0) {
            for (const auto& key : file->metadata_order()) w.copy_from(*file, key);
        }
        w.set("split.no", GgufValue{GgufValueType::U16, uint64_t{static_cast<uint64_t>(part)}});
        w.set("split.count", GgufValue{GgufValueType::U16, uint64_t{2}});
        w.set("split.tensors.count",
              GgufValue{GgufValueType::I32, int64_t{static_cast<int64_t>(tensors.size())}});
        const size_t begin = part == 0 ? 0 : half, end = part == 0 ? half : tensors.size();
        for (size_t i = begin; i < end; ++i) {
            const auto& t = tensors[i];
            w.add_tensor(t.name, t.dims, t.type, std::vector<uint8_t>(t.data, t.data + t.n_bytes));
        }
        w.write((part == 0 ? first : second).string(), file->alignment());
    }
}

class Pull : public ::testing::Test {
protected:
    void SetUp() override {
        EMBER_REQUIRE_FIXTURE(kLlama);
        if (find_in_path("python3").empty()) EMBER_SKIP_OR_FAIL("no python3 on PATH");
        // The hub's repositories.
        const fs::path tiny = repos_.path() / "acme/tiny-GGUF";
        fs::create_directories(tiny / "sub");
        fs::copy_file(fixture_path(kLlama), tiny / "tiny-Q4_K_M.gguf");
        fs::copy_file(fixture_path(kLlama), tiny / "tiny-Q8_0.gguf");
        fs::copy_file(fixture_path(kLlama), tiny / "sub/tiny-IQ4_XS.gguf");
        std::ofstream(tiny / "README.md") << "# tiny\n";
        const fs::path split = repos_.path() / "acme/split-GGUF";
        fs::create_directories(split);
        write_split(fixture_path(kLlama), split / "big-Q4_0-00001-of-00002.gguf",
                    split / "big-Q4_0-00002-of-00002.gguf");
        // Where Ember installs models: a fresh home.
        setenv("HOME", home_.path().c_str(), 1);
        for (const char* v : {"XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "EMBER_MODEL",
                              "HF_TOKEN", "OLLAMA_MODELS", "LLAMA_CACHE"}) {
            unsetenv(v);
        }
    }
    void TearDown() override { unsetenv("HF_ENDPOINT"); }

    // ember pull ARGS... against `hub`.
    CommandResult pull(const Hub& hub, std::vector<std::string> args) {
        setenv("HF_ENDPOINT", hub.endpoint().c_str(), 1);
        args.insert(args.begin(), {ember_binary(), "pull"});
        return run_command(args, "", 120);
    }
    fs::path installed(const std::string& repo, const std::string& name) const {
        return home_.path() / ".local/share/ember/models/hf" / repo / name;
    }
    fs::path source(const std::string& repo, const std::string& name) const {
        return repos_.path() / repo / name;
    }

    TempDir repos_{"ember-hub-repos"};
    TempDir home_{"ember-pull-home"};
};

#define START_HUB(hub, ...)              \
    Hub hub(repos_.path(), __VA_ARGS__); \
    ASSERT_GT(hub.port, 0) << "the hub did not start: " << hub.log()

TEST_F(Pull, FetchesTheNamedQuantThroughTheRedirectAndChecksItsSha256) {
    START_HUB(hub, {});
    const auto r = pull(hub, {"acme/tiny-GGUF:Q8_0"});
    ASSERT_EQ(r.status, 0) << r.err;
    const fs::path path = installed("acme/tiny-GGUF", "tiny-Q8_0.gguf");
    EXPECT_EQ(r.out, path.string() + "\n");
    EXPECT_TRUE(same_bytes(path, source("acme/tiny-GGUF", "tiny-Q8_0.gguf")));
    EXPECT_NE(r.err.find("tiny-Q8_0.gguf: SHA-256 checked"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(path.string() + ".part"));
    // The listing, the resolve URL, then the CDN path it redirected to.
    const std::string log = hub.log();
    EXPECT_NE(log.find("REQ GET /api/models/acme/tiny-GGUF/tree/main"), std::string::npos) << log;
    EXPECT_NE(log.find("REQ GET /acme/tiny-GGUF/resolve/main/tiny-Q8_0.gguf"), std::string::npos);
    EXPECT_NE(log.find("REQ GET /cdn/acme/tiny-GGUF/tiny-Q8_0.gguf range=-"), std::string::npos);
    // `ember models` lists it by its file name, and -m finds it by that name.
    const auto models = run_command({ember_binary(), "models", "--json"});
    ASSERT_EQ(models.status, 0) << models.err;
    const json listed = json::parse(models.out);
    ASSERT_EQ(listed.size(), 1u) << models.out;
    EXPECT_EQ(listed[0]["name"], "tiny-Q8_0");
    EXPECT_EQ(listed[0]["path"], path.string());
    const auto info = run_command({ember_binary(), "info", "-m", "tiny-Q8_0"});
    EXPECT_EQ(info.status, 0) << info.err;
    // Pulled once: the second pull downloads nothing.
    const auto again = pull(hub, {"acme/tiny-GGUF:q8_0"});
    ASSERT_EQ(again.status, 0) << again.err;
    EXPECT_NE(again.err.find("already pulled"), std::string::npos) << again.err;
    const std::string log2 = hub.log();
    EXPECT_EQ(log2.find("/cdn/", log2.find("/cdn/") + 1), std::string::npos) << log2;
}

TEST_F(Pull, WithoutAQuantTakesQ4KMAndAFileNameNamesOneFile) {
    START_HUB(hub, {});
    const auto r = pull(hub, {"acme/tiny-GGUF"});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out, installed("acme/tiny-GGUF", "tiny-Q4_K_M.gguf").string() + "\n");
    // A file in a folder of the repository, by its path; a quant inside a longer word
    // (IQ4_XS holds Q4_XS) does not match.
    const auto by_path = pull(hub, {"acme/tiny-GGUF:sub/tiny-IQ4_XS.gguf"});
    ASSERT_EQ(by_path.status, 0) << by_path.err;
    EXPECT_TRUE(fs::exists(installed("acme/tiny-GGUF", "tiny-IQ4_XS.gguf")));
    const auto inner = pull(hub, {"acme/tiny-GGUF:Q4_XS"});
    EXPECT_EQ(inner.status, 1);
    EXPECT_NE(inner.err.find("no model in acme/tiny-GGUF matches 'Q4_XS'; its models: "
                             "tiny-IQ4_XS.gguf, tiny-Q4_K_M.gguf, tiny-Q8_0.gguf"),
              std::string::npos)
        << inner.err;
}

TEST_F(Pull, AnUnknownRepositoryOrQuantIsOneLineNamingIt) {
    START_HUB(hub, {});
    const auto missing = pull(hub, {"acme/nothing-here"});
    EXPECT_EQ(missing.status, 1);
    EXPECT_NE(missing.err.find("/api/models/acme/nothing-here/tree/main?recursive=true: HTTP 404 "
                               "(not found)"),
              std::string::npos)
        << missing.err;
    EXPECT_EQ(split_lines(missing.err).size(), 1u) << missing.err;
}

TEST_F(Pull, AWrongChecksumDeletesTheDownloadAndInstallsNothing) {
    START_HUB(hub, {"--wrong-sha", "acme/tiny-GGUF/tiny-Q8_0.gguf"});
    const auto r = pull(hub, {"acme/tiny-GGUF:Q8_0"});
    EXPECT_EQ(r.status, 1);
    EXPECT_NE(r.err.find("tiny-Q8_0.gguf: its SHA-256 is "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("the download was deleted"), std::string::npos) << r.err;
    const fs::path path = installed("acme/tiny-GGUF", "tiny-Q8_0.gguf");
    EXPECT_FALSE(fs::exists(path));
    EXPECT_FALSE(fs::exists(path.string() + ".part"));
    const auto models = run_command({ember_binary(), "models", "--json"});
    EXPECT_EQ(json::parse(models.out).size(), 0u) << models.out;
}

TEST_F(Pull, ACutConnectionIsResumedWithARangeRequest) {
    START_HUB(hub, {"--cut-once", "acme/tiny-GGUF/tiny-Q8_0.gguf:1000000"});
    const auto r = pull(hub, {"acme/tiny-GGUF:Q8_0", "--no-progress"});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.err.find("the download was cut at 1.0 MiB"), std::string::npos) << r.err;
    EXPECT_NE(hub.log().find("/cdn/acme/tiny-GGUF/tiny-Q8_0.gguf range=bytes=1000000-"),
              std::string::npos)
        << hub.log();
    EXPECT_TRUE(same_bytes(installed("acme/tiny-GGUF", "tiny-Q8_0.gguf"),
                           source("acme/tiny-GGUF", "tiny-Q8_0.gguf")));
}

TEST_F(Pull, APartKeptByAFailedRunIsResumedByTheNextOne) {
    const fs::path part = installed("acme/tiny-GGUF", "tiny-Q8_0.gguf").string() + ".part";
    {
        START_HUB(cutting, {"--cut-always", "acme/tiny-GGUF/tiny-Q8_0.gguf:1000000"});
        const auto r = pull(cutting, {"acme/tiny-GGUF:Q8_0", "--retries", "1"});
        EXPECT_EQ(r.status, 1);
        EXPECT_NE(r.err.find("after 2 tries; " + part.string() +
                             " is kept: run the same command again to resume"),
                  std::string::npos)
            << r.err;
        ASSERT_TRUE(fs::exists(part));
        EXPECT_EQ(fs::file_size(part), 2000000u);
    }
    START_HUB(hub, {});
    const auto r = pull(hub, {"acme/tiny-GGUF:Q8_0"});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.err.find("resuming tiny-Q8_0.gguf at 1.9 MiB"), std::string::npos) << r.err;
    EXPECT_NE(hub.log().find("range=bytes=2000000-"), std::string::npos) << hub.log();
    EXPECT_TRUE(same_bytes(installed("acme/tiny-GGUF", "tiny-Q8_0.gguf"),
                           source("acme/tiny-GGUF", "tiny-Q8_0.gguf")));
}

TEST_F(Pull, ASplitModelIsFetchedPartByPartAndJoinedIntoOneFile) {
    START_HUB(hub, {"--page-size", "1"});  // the listing in pages of one entry, too
    const auto r = pull(hub, {"acme/split-GGUF:Q4_0"});
    ASSERT_EQ(r.status, 0) << r.err;
    const fs::path path = installed("acme/split-GGUF", "big-Q4_0.gguf");
    EXPECT_EQ(r.out, path.string() + "\n");
    EXPECT_NE(r.err.find("joining 2 parts into big-Q4_0.gguf"), std::string::npos) << r.err;
    // Only the joined file is left, with the original's tensors byte for byte.
    size_t files = 0;
    for (const auto& e : fs::directory_iterator(path.parent_path())) files += e.is_regular_file();
    EXPECT_EQ(files, 1u);
    const auto joined = GgufFile::open(path.string());
    const auto original = GgufFile::open(fixture_path(kLlama));
    ASSERT_EQ(joined->tensors().size(), original->tensors().size());
    for (const auto& t : original->tensors()) {
        const GgufTensorInfo* j = joined->find_tensor(t.name);
        ASSERT_NE(j, nullptr) << t.name;
        ASSERT_EQ(j->n_bytes, t.n_bytes);
        EXPECT_EQ(std::memcmp(j->data, t.data, t.n_bytes), 0) << t.name;
    }
    EXPECT_FALSE(joined->find("split.count"));
    const auto info = run_command({ember_binary(), "info", "-m", path.string()});
    EXPECT_EQ(info.status, 0) << info.err;
}

TEST_F(Pull, TheTokenGoesToTheHubAndNotToTheCdn) {
    START_HUB(hub, {"--require-token", "sekrit", "--cdn-host", "localhost"});
    const auto refused = pull(hub, {"acme/tiny-GGUF:Q8_0"});
    EXPECT_EQ(refused.status, 1);
    EXPECT_NE(refused.err.find("HTTP 401 (access refused: a private or gated repository needs "
                               "HF_TOKEN"),
              std::string::npos)
        << refused.err;
    setenv("HF_TOKEN", "sekrit", 1);
    const auto r = pull(hub, {"acme/tiny-GGUF:Q8_0"});
    unsetenv("HF_TOKEN");
    ASSERT_EQ(r.status, 0) << r.err;
    const std::string log = hub.log();
    EXPECT_NE(log.find("/resolve/main/tiny-Q8_0.gguf range=- auth=Bearer sekrit"),
              std::string::npos)
        << log;
    EXPECT_NE(log.find("/cdn/acme/tiny-GGUF/tiny-Q8_0.gguf range=- auth=-"), std::string::npos)
        << log;
    EXPECT_EQ(log.find("/cdn/acme/tiny-GGUF/tiny-Q8_0.gguf range=- auth=Bearer"),
              std::string::npos);
}

TEST_F(Pull, NamesAndListingsPastTheBoundsAreRefusedSayingWhichBound) {
    START_HUB(hub, {});
    const struct {
        std::string spec, message;
    } bad[] = {
        {"acme/../tiny", "name a model as OWNER/REPO[:QUANT|FILE]"},
        {"acme/x..y", "the repository name holds '..'"},
        {"acme/tiny-GGUF:../../etc/passwd.gguf", "the file name holds '..'"},
        {"acme/tiny-GGUF:/etc/x.gguf", "the file name is absolute"},
        {"acme/" + std::string(97, 'r'), "the repository name is longer than 96 characters"},
        {"acme/tiny-GGUF:" + std::string(65, 'Q'), "the quantization is longer than 64"},
        {"acme/tiny;rm", "may hold only letters, digits"},
    };
    for (const auto& b : bad) {
        const auto r = pull(hub, {b.spec});
        EXPECT_EQ(r.status, 2) << b.spec;
        EXPECT_NE(r.err.find(b.message), std::string::npos) << b.spec << ": " << r.err;
    }
    EXPECT_EQ(hub.log().find("REQ"), std::string::npos) << "a bad name reached the hub";
    {
        START_HUB(evil, {"--evil-path"});
        const auto r = pull(evil, {"acme/tiny-GGUF:Q8_0"});
        EXPECT_EQ(r.status, 1);
        EXPECT_NE(r.err.find("acme/tiny-GGUF: the hub lists a file whose path holds '..'"),
                  std::string::npos)
            << r.err;
    }
    START_HUB(huge, {"--huge"});
    const auto r = pull(huge, {"acme/tiny-GGUF:Q8_0"});
    EXPECT_EQ(r.status, 1);
    EXPECT_NE(r.err.find("huge.gguf at 2199023255552 bytes, past the 1 TiB bound"),
              std::string::npos)
        << r.err;
    EXPECT_FALSE(fs::exists(home_.path() / ".local/share/ember/models/hf/escape.gguf"));
}

TEST_F(Pull, DashMWithAHubNameUsesThePulledFileAndRefusesToDownloadWithoutATerminal) {
    START_HUB(hub, {});
    setenv("HF_ENDPOINT", hub.endpoint().c_str(), 1);
    const auto refused = run_command({ember_binary(), "info", "-m", "acme/tiny-GGUF:Q8_0"});
    EXPECT_EQ(refused.status, 1);
    EXPECT_NE(refused.err.find("model 'acme/tiny-GGUF:Q8_0': no such file, and not pulled from " +
                               hub.endpoint() +
                               " yet; there is no terminal to ask on, so run `ember pull "
                               "acme/tiny-GGUF:Q8_0` first"),
              std::string::npos)
        << refused.err;
    EXPECT_EQ(hub.log().find("REQ"), std::string::npos) << "downloaded unasked";
    ASSERT_EQ(pull(hub, {"acme/tiny-GGUF:Q8_0"}).status, 0);
    const auto info = run_command({ember_binary(), "info", "-m", "acme/tiny-GGUF:Q8_0"});
    EXPECT_EQ(info.status, 0) << info.err;
    EXPECT_NE(info.out.find("tiny-Q8_0.gguf"), std::string::npos) << info.out;
}

TEST_F(Pull, DashMWithAHubNameAsksOnATerminalAndPullsOnYes) {
    EMBER_REQUIRE_TMUX(tmux);
    START_HUB(hub, {});
    TmuxSession session(tmux, "ember-pull");
    const std::string command =
        "env HOME=" + shell_quote(home_.path().string()) + " HF_ENDPOINT=" + hub.endpoint() + " " +
        shell_quote(ember_binary()) + " info -m acme/tiny-GGUF:Q4_K_M; echo EXIT=$?; sleep 30";
    ASSERT_EQ(session.start(command, 120, 30).status, 0);
    std::string screen;
    ASSERT_TRUE(TmuxSession::poll(
        [&] { return session.capture(); },
        [](const std::string& s) { return s.find("now? [y/N]") != std::string::npos; }, screen, 20))
        << screen;
    EXPECT_NE(screen.find("acme/tiny-GGUF:Q4_K_M is not on this machine. Download it from " +
                          hub.endpoint() + " now? [y/N]"),
              std::string::npos)
        << screen;
    session.text("y");
    session.keys("Enter");
    ASSERT_TRUE(TmuxSession::poll(
        [&] { return session.capture({"-J"}); },
        [](const std::string& s) { return s.find("EXIT=") != std::string::npos; }, screen, 60))
        << screen;
    EXPECT_NE(screen.find("EXIT=0"), std::string::npos) << screen;
    EXPECT_NE(screen.find("100% [########################]"), std::string::npos) << screen;
    EXPECT_TRUE(fs::exists(installed("acme/tiny-GGUF", "tiny-Q4_K_M.gguf")));
}

}  // namespace
}  // namespace ember::test
