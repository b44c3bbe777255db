// Models without -m: EMBER_MODEL, then the config file, then GGUF files in Ember's models dir
// and other tools' stores (ollama's manifests and blobs), as `ember models` lists them.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/support/fixtures.h"
#include "tests/support/process.h"

namespace ember::test {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// A fake home with one model in Ember's dir and one in an ollama store; the environment of
// this test process (inherited by the binary) points at it.
class ModelLocator : public ::testing::Test {
protected:
    void SetUp() override {
        EMBER_REQUIRE_FIXTURE("arch/llama/llama.gguf");
        EMBER_REQUIRE_FIXTURE("arch/qwen3/qwen3.gguf");
        home_ = fs::temp_directory_path() / ("ember-locator-" + std::to_string(getpid()));
        fs::remove_all(home_);
        const fs::path models = home_ / ".local/share/ember/models";
        const fs::path ollama = home_ / ".ollama/models";
        fs::create_directories(models);
        fs::create_directories(ollama / "manifests/registry.ollama.ai/library/qwen3");
        fs::create_directories(ollama / "blobs");
        fs::copy_file(fixture_path("arch/llama/llama.gguf"), models / "tiny-llama.gguf");
        fs::copy_file(fixture_path("arch/qwen3/qwen3.gguf"), ollama / "blobs/sha256-0123abcd");
        std::ofstream(ollama / "blobs/sha256-feed") << "{\"not\": \"a model\"}";
        std::ofstream(ollama / "manifests/registry.ollama.ai/library/qwen3/0.6b")
            << R"({"layers":[{"mediaType":"application/vnd.ollama.image.template","digest":"sha256:feed"},)"
            << R"({"mediaType":"application/vnd.ollama.image.model","digest":"sha256:0123abcd"}]})";
        // The llama file is the newest, so it is the implicit choice.
        fs::last_write_time(
            models / "tiny-llama.gguf",
            fs::last_write_time(ollama / "blobs/sha256-0123abcd") + std::chrono::hours(1));
        setenv("HOME", home_.c_str(), 1);
        unsetenv("XDG_DATA_HOME");
        unsetenv("XDG_CONFIG_HOME");
        unsetenv("XDG_CACHE_HOME");
        unsetenv("EMBER_MODEL");
        unsetenv("OLLAMA_MODELS");
        unsetenv("LLAMA_CACHE");
    }
    void TearDown() override {
        unsetenv("EMBER_MODEL");
        if (!home_.empty()) fs::remove_all(home_);
    }
    // The "file:" line of `ember info` names the model that was picked.
    std::string picked(const std::vector<std::string>& extra = {}) {
        std::vector<std::string> argv = {ember_binary(), "info"};
        argv.insert(argv.end(), extra.begin(), extra.end());
        const auto r = run_command(argv);
        EXPECT_EQ(r.status, 0) << r.err;
        const auto lines = split_lines(r.out);
        return lines.empty() ? std::string() : lines[0];
    }
    void write_config(const std::string& text) {
        fs::create_directories(home_ / ".config/ember");
        std::ofstream(home_ / ".config/ember/config.json") << text;
    }
    fs::path home_;
};

TEST_F(ModelLocator, ListsEmberAndOllamaModels) {
    const auto r = run_command({ember_binary(), "models", "--json"});
    ASSERT_EQ(r.status, 0) << r.err;
    const json list = json::parse(r.out);
    ASSERT_EQ(list.size(), 2u) << r.out;  // the template blob is not a model
    EXPECT_EQ(list[0]["name"], "tiny-llama");
    EXPECT_EQ(list[0]["source"], "ember");
    EXPECT_EQ(list[1]["name"], "qwen3:0.6b");
    EXPECT_EQ(list[1]["source"], "ollama");
    EXPECT_EQ(list[1]["bytes"].get<uint64_t>(),
              fs::file_size(fixture_path("arch/qwen3/qwen3.gguf")));
}

TEST_F(ModelLocator, SearchOrder) {
    EXPECT_NE(picked().find("tiny-llama.gguf"), std::string::npos);                 // newest found
    EXPECT_NE(picked({"-m", "qwen3"}).find("sha256-0123abcd"), std::string::npos);  // by name
    write_config(R"({"model": "qwen3:0.6b"})");
    EXPECT_NE(picked().find("sha256-0123abcd"), std::string::npos);  // config beats the dirs
    setenv("EMBER_MODEL", fixture_path("arch/llama/llama.gguf").c_str(), 1);
    EXPECT_NE(picked().find(fixture_path("arch/llama/llama.gguf")), std::string::npos);
}

TEST_F(ModelLocator, ClearErrors) {
    auto r = run_command({ember_binary(), "info", "-m", "no-such-model"});
    EXPECT_NE(r.status, 0);
    EXPECT_NE(r.err.find("'no-such-model'"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("tiny-llama"), std::string::npos) << r.err;  // says what exists

    write_config("{\"model\": ");
    r = run_command({ember_binary(), "info"});
    EXPECT_NE(r.status, 0);
    EXPECT_NE(r.err.find("config.json"), std::string::npos) << r.err;

    write_config(R"({"sampling": {"temp": "hot"}})");
    r = run_command({ember_binary(), "chat", "-p", "hi", "-n", "2"});
    EXPECT_NE(r.status, 0);
    EXPECT_NE(r.err.find("sampling.temp"), std::string::npos) << r.err;

    fs::remove_all(home_ / ".local");
    fs::remove_all(home_ / ".ollama");
    fs::remove_all(home_ / ".config");
    r = run_command({ember_binary(), "info"});
    EXPECT_NE(r.status, 0);
    EXPECT_NE(r.err.find((home_ / ".local/share/ember/models").string()), std::string::npos)
        << r.err;  // says where to put one
}

TEST_F(ModelLocator, ConfigSamplingAppliesUnderTheFlags) {
    // Greedy from the config gives the same reply as greedy from the flag.
    write_config(R"({"sampling": {"temp": 0}})");
    const auto from_config = run_command({ember_binary(), "chat", "-p", "hi", "-n", "8"});
    const auto from_flag =
        run_command({ember_binary(), "chat", "-p", "hi", "-n", "8", "--temp", "0"});
    ASSERT_EQ(from_config.status, 0) << from_config.err;
    EXPECT_EQ(from_config.out, from_flag.out);
    // A flag beats the config: a different seed at temperature 1 changes the reply (of 8
    // random-weight tokens, equal by chance with negligible probability).
    const auto hot1 = run_command(
        {ember_binary(), "chat", "-p", "hi", "-n", "8", "--temp", "1.5", "--seed", "1"});
    const auto hot2 = run_command(
        {ember_binary(), "chat", "-p", "hi", "-n", "8", "--temp", "1.5", "--seed", "2"});
    EXPECT_NE(hot1.out, hot2.out);
}

}  // namespace
}  // namespace ember::test
