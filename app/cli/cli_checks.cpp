#include "app/cli/cli_checks.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "app/store/session_adapter.h"

namespace ember::app {

namespace {

// The whole of `text` as a signed 64-bit number, or false.
bool parse_whole(const std::string& text, int64_t& value) {
    const char* end = text.data() + text.size();
    const auto [ptr, ec] = std::from_chars(text.data(), end, value);
    return ec == std::errc() && ptr == end && !text.empty();
}

std::string in_quotes(const std::string& text) {
    return "'" + text + "'";
}

}  // namespace

CLI::Validator whole_number(int64_t min, int64_t max, const std::string& rule) {
    return CLI::Validator(
        [min, max, rule](std::string& text) -> std::string {
            int64_t value = 0;
            if (!parse_whole(text, value) || value < min || value > max) {
                return "must be " + rule + ", not " + in_quotes(text);
            }
            return {};
        },
        "", "whole_number");
}

CLI::Validator real_number(bool (*ok)(double), const std::string& rule) {
    return CLI::Validator(
        [ok, rule](std::string& text) -> std::string {
            char* end = nullptr;
            const double value = std::strtod(text.c_str(), &end);
            const bool whole = !text.empty() && end == text.c_str() + text.size();
            if (!whole || !std::isfinite(value) || !ok(value)) {
                return "must be " + rule + ", not " + in_quotes(text);
            }
            return {};
        },
        "", "real_number");
}

CLI::Validator seed_number() {
    return CLI::Validator(
        [](std::string& text) -> std::string {
            uint64_t value = 0;
            const char* end = text.data() + text.size();
            const auto [ptr, ec] = std::from_chars(text.data(), end, value);
            if (text.empty() || ec != std::errc() || ptr != end) {
                return "must be a whole number from 0 to " +
                       std::to_string(std::numeric_limits<uint64_t>::max()) + ", not " +
                       in_quotes(text);
            }
            return {};
        },
        "", "seed");
}

CLI::Validator file_path() {
    return CLI::Validator(
        [](std::string& text) -> std::string {
            if (text.empty()) return "the path is empty (an unset variable?)";
            if (text.find('\0') != std::string::npos) return "the path holds a NUL byte";
            return {};
        },
        "", "path");
}

CLI::Validator byte_size() {
    return CLI::Validator(
        [](std::string& text) -> std::string {
            try {
                parse_byte_size(text);
            } catch (const std::invalid_argument& e) {
                return e.what();
            }
            return {};
        },
        "", "byte_size");
}

CLI::Validator positive_byte_size() {
    return CLI::Validator(
        [](std::string& text) -> std::string {
            try {
                if (parse_byte_size(text) == 0) {
                    return "must be more than 0 (--no-db keeps no state at all), not " +
                           in_quotes(text);
                }
            } catch (const std::invalid_argument& e) {
                return e.what();
            }
            return {};
        },
        "", "byte_size");
}

CLI::Validator token_count() {
    return CLI::Validator(
        [](std::string& text) -> std::string {
            int64_t value = 0;
            if (!parse_whole(text, value) || (value < 1 && value != -1)) {
                return "must be at least 1, or -1 for until the context is full, not " +
                       in_quotes(text);
            }
            return {};
        },
        "", "token_count");
}

CLI::Validator thread_count() {
    return whole_number(1, kMaxThreads, "from 1 to " + std::to_string(kMaxThreads));
}

}  // namespace ember::app
