// Locating the shared fixtures. Tests that need them skip with a message when the fixtures
// are absent, except under CI=true, where a missing fixture is a failure.
#pragma once

#include <gtest/gtest.h>

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

// The default model, a trained Gemma 3 270M (Q4_K_M) that scripts/get-model.sh installs:
// $EMBER_REAL_MODEL, else $XDG_DATA_HOME/ember/models/gemma-3-270m-q4_k_m.gguf (XDG_DATA_HOME
// defaulting to ~/.local/share). scripts/test.sh fetches it before the suite runs.
std::string real_model_path();
bool real_model_exists();
// tests/data/gemma-3-270m/<relative>: its float64 and tokenizer references (in the repository).
std::string real_model_reference(const std::string& relative);

}  // namespace ember::test

// Use at the top of a test: skips (or fails under CI=true) when the fixture is missing.
#define EMBER_REQUIRE_FIXTURE(relative)                                                    \
    do {                                                                                    \
        if (!::ember::test::fixture_exists(relative)) {                                     \
            if (::ember::test::running_in_ci()) {                                           \
                FAIL() << "fixture missing under CI=true: "                                 \
                       << ::ember::test::fixture_path(relative);                            \
            }                                                                               \
            GTEST_SKIP() << "fixture not found: " << ::ember::test::fixture_path(relative); \
        }                                                                                   \
    } while (0)

// Use at the top of a test that needs the default model: skips without it (fails under CI=true,
// where scripts/test.sh has fetched it).
#define EMBER_REQUIRE_REAL_MODEL()                                                            \
    do {                                                                                      \
        if (!::ember::test::real_model_exists()) {                                            \
            if (::ember::test::running_in_ci()) {                                             \
                FAIL() << "the default model is missing under CI=true: "                      \
                       << ::ember::test::real_model_path() << " (run scripts/get-model.sh)";  \
            }                                                                                 \
            GTEST_SKIP() << "default model not found: " << ::ember::test::real_model_path()   \
                         << " (scripts/get-model.sh installs it)";                            \
        }                                                                                     \
    } while (0)
