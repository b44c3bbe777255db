// String helpers for the chat-template interpreter. Templates are written against Python's
// `str`, which counts and slices code points and knows Unicode whitespace; these helpers give
// UTF-8 strings the same behaviour so renderings match HF transformers byte for byte.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ember::jinja {

// Decodes UTF-8 into code points. Invalid bytes become U+DC80..U+DCFF (Python's
// "surrogateescape"), so that encode(decode(s)) == s for any byte string.
std::u32string utf8_decode(std::string_view s);
std::string utf8_encode(std::u32string_view s);
void utf8_append(std::string& out, char32_t cp);
// Number of code points (what Python's len() reports for a str).
std::size_t utf8_length(std::string_view s);

// Python's str.isspace() for one code point.
bool py_isspace(char32_t cp);

// str.strip / lstrip / rstrip. With `chars` unset, strips Unicode whitespace.
std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                     bool right);
// str.split(sep, maxsplit) / str.rsplit; with `sep` unset, splits on whitespace runs.
std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep,
                                  std::int64_t maxsplit, bool from_right);
// str.splitlines() (without keepends).
std::vector<std::string> py_splitlines(std::string_view s);
// str.replace(old, new, count); count < 0 replaces every occurrence.
std::string py_replace(std::string_view s, std::string_view old_text, std::string_view new_text,
                       std::int64_t count);

std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
// str.title(): upper-cases a cased character that follows an uncased one.
std::string py_title(std::string_view s);
// str.capitalize(): first character upper case, the rest lower case.
std::string py_capitalize(std::string_view s);
bool py_isupper_str(std::string_view s);
bool py_islower_str(std::string_view s);

// Code-point index of the first (or last) occurrence of `needle`, or -1.
std::int64_t py_find(std::string_view s, std::string_view needle, bool from_right);

// A broken-down calendar time for strftime_now().
struct CivilTime {
    int year = 1970;
    int month = 1;  // 1..12
    int day = 1;    // 1..31
    int hour = 0;
    int minute = 0;
    int second = 0;
};
// strftime with the C locale's English names, independent of the process locale (a terminal
// app may call setlocale, which must not change what the model is prompted with).
std::string format_time(std::string_view fmt, const CivilTime& t);

}  // namespace ember::jinja
