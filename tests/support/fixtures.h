// Locating the shared fixtures. Tests that need them skip with a message when the fixtures
// are absent, except under CI=true, where a missing fixture is a failure.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

namespace ember::test {

// Root of ../shared/fixtures as configured by CMake (EMBER_FIXTURES_DIR).
std::string fixtures_dir();
// fixtures_dir() + "/" + relative.
std::string fixture_path(const std::string& relative);
bool fixture_exists(const std::string& relative);
bool running_in_ci();
// Path of the built `ember` binary.
std::string ember_binary();
// Reads a whole file; fails the test if it cannot.
std::string read_file(const std::string& path);

// The trained models the real-weights tests run on, which scripts/get-model.sh installs (and
// scripts/test.sh fetches before the suite runs). Each has its HF references in the repository,
// tests/data/<name>/ (made by scripts/real_model_refs.py from the very file).
struct RealModel {
    const char* name;       // get-model.sh's name for it, and its folder under tests/data
    const char* file_name;  // as installed in $XDG_DATA_HOME/ember/models
    const char* env;        // the variable naming another copy of the file
};
// Gemma 3 270M, the base model (Q4_K_M): $EMBER_REAL_MODEL names another copy.
inline constexpr RealModel kGemma3_270m{"gemma-3-270m", "gemma-3-270m-q4_k_m.gguf",
                                        "EMBER_REAL_MODEL"};
// SmolLM2 135M Instruct (Q4_1), the default model: $EMBER_SMOLLM2_MODEL names another copy.
inline constexpr RealModel kSmolLM2_135m{"smollm2-135m-instruct", "SmolLM2-135M-Instruct.Q4_1.gguf",
                                         "EMBER_SMOLLM2_MODEL"};

// $<model.env>, else $XDG_DATA_HOME/ember/models/<model.file_name> (XDG_DATA_HOME defaulting to
// ~/.local/share).
std::string real_model_path(const RealModel& model = kGemma3_270m);
bool real_model_exists(const RealModel& model = kGemma3_270m);
// tests/data/<model.name>/<relative>: its float64 and tokenizer references.
std::string real_model_reference(const std::string& relative,
                                 const RealModel& model = kGemma3_270m);

}  // namespace ember::test

// The one way a test leaves for want of a file, a model, data or a tool it needs: a skip that
// says why, and under CI=true (where scripts/test.sh has installed and fetched everything) a
// failure, so nothing skips silently there. `why` is a stream expression ("no " << path).
// Not for hardware (no GPU, no AVX-512): those stay plain GTEST_SKIPs, in CI too.
#define EMBER_SKIP_OR_FAIL(why)                           \
    do {                                                  \
        if (::ember::test::running_in_ci()) {             \
            FAIL() << why << " (required under CI=true)"; \
        }                                                 \
        GTEST_SKIP() << why;                              \
    } while (0)

// EMBER_SKIP_OR_FAIL naming `path` (a file or folder) when it does not exist.
#define EMBER_SKIP_OR_FAIL_WITHOUT(path)                         \
    do {                                                         \
        const std::string required_path_ = (path);               \
        if (!std::filesystem::exists(required_path_)) {          \
            EMBER_SKIP_OR_FAIL("not found: " << required_path_); \
        }                                                        \
    } while (0)

// Use at the top of a test: skips (or fails under CI=true) when the fixture is missing.
#define EMBER_REQUIRE_FIXTURE(relative) \
    EMBER_SKIP_OR_FAIL_WITHOUT(::ember::test::fixture_path(relative))

// Use at the top of a test that needs a real model (a RealModel): skips without it (fails under
// CI=true, where scripts/test.sh has fetched it).
#define EMBER_REQUIRE_REAL_MODEL_OF(model)                                               \
    do {                                                                                 \
        const ::ember::test::RealModel& required_model_ = (model);                       \
        if (!::ember::test::real_model_exists(required_model_)) {                        \
            EMBER_SKIP_OR_FAIL(                                                          \
                required_model_.name                                                     \
                << " not found: " << ::ember::test::real_model_path(required_model_)     \
                << " (scripts/get-model.sh " << required_model_.name << " installs it; " \
                << required_model_.env << " names another copy)");                       \
        }                                                                                \
    } while (0)
// The same for Gemma 3 270M.
#define EMBER_REQUIRE_REAL_MODEL() EMBER_REQUIRE_REAL_MODEL_OF(::ember::test::kGemma3_270m)
