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
