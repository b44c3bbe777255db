// Small text helpers the chat controller's files share (ui/chat/chat_controller.cpp,
// ui/chat/chat_settings.cpp). Internal to ui/.
#pragma once

#include <cstdarg>
#include <cstdio>
#include <string>
#include <string_view>
#include <utility>

#include "ui/chat/chat_controller.h"

namespace ember::ui::chat_text {

inline std::string trim(const std::string& s) {
    const size_t begin = s.find_first_not_of(" \t\r\n");
    if (begin == std::string::npos) return {};
    const size_t end = s.find_last_not_of(" \t\r\n");
    return s.substr(begin, end - begin + 1);
}

// Splits "/name rest of line" into "/name" and the trimmed rest.
inline std::pair<std::string, std::string> split_command(const std::string& line) {
    const std::string text = trim(line);
    const size_t space = text.find_first_of(" \t");
    if (space == std::string::npos) return {text, {}};
    return {text.substr(0, space), trim(text.substr(space))};
}

// Whether `typed` is `name` or one of the space-separated `aliases` (a command's or a
// setting's other names).
inline bool answers_to(const char* name, const char* aliases, std::string_view typed) {
    if (typed == name) return true;
    std::string_view rest = aliases;
    while (!rest.empty()) {
        const size_t space = rest.find(' ');
        if (rest.substr(0, space) == typed) return true;
        rest = space == std::string_view::npos ? std::string_view() : rest.substr(space + 1);
    }
    return false;
}

inline ChatOutcome info(std::string message) {
    ChatOutcome outcome;
    outcome.message = std::move(message);
    return outcome;
}

inline ChatOutcome failure(std::string message) {
    ChatOutcome outcome;
    outcome.message = std::move(message);
    outcome.error = true;
    return outcome;
}

inline __attribute__((format(printf, 1, 2))) std::string format(const char* fmt, ...) {
    std::va_list args;
    va_start(args, fmt);
    std::va_list copy;
    va_copy(copy, args);
    const int size = std::vsnprintf(nullptr, 0, fmt, copy);
    va_end(copy);
    std::string text(size > 0 ? static_cast<size_t>(size) : 0, '\0');
    if (size > 0) std::vsnprintf(text.data(), text.size() + 1, fmt, args);
    va_end(args);
    return text;
}

}  // namespace ember::ui::chat_text
