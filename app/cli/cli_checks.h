// CLI11 validators for the options the generating commands share. Each checks the text as
// typed (so NaN, overflow and stray characters are caught before any conversion) and says the
// rule and the value; CLI11 puts the option's name in front and main() exits 2 (usage).
// The engine validates the same values again (SamplingParams::validate): these exist so that
// a person sees the flag they typed, not an engine field.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

namespace ember::app {

// A whole number in [min, max]; `rule` says what the value means ("at least 1").
CLI::Validator whole_number(int64_t min, int64_t max, const std::string& rule);
// A finite real number for which `ok` holds; `rule` says what is wanted.
CLI::Validator real_number(bool (*ok)(double), const std::string& rule);
// A seed: a whole number from 0 to 2^64-1 (no sign, no wrap-around).
CLI::Validator seed_number();
// A byte size as parse_byte_size() reads it ("2GiB"), more than 0.
CLI::Validator positive_byte_size();
// A byte size as parse_byte_size() reads it, 0 included.
CLI::Validator byte_size();

// A file path: not empty (an unset variable, `--db "$UNSET"`, must not mean the default
// file) and without a NUL byte.
CLI::Validator file_path();

// Tokens to generate: at least 1, or -1 for until the context is full.
CLI::Validator token_count();

// Threads of the pool: 1 to kMaxThreads (a pool of 100000 threads is a mistake, not a wish).
inline constexpr int64_t kMaxThreads = 1024;
CLI::Validator thread_count();

}  // namespace ember::app
