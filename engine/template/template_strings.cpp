#include "engine/template/template_strings.h"

#include <algorithm>
#include <array>
#include <cstdio>

#include "engine/util/utf8.h"

namespace ember::jinja {

namespace {

// Upper/lower mappings for the scripts chat messages commonly use (Latin, Greek, Cyrillic,
// Armenian, full-width Latin). Python maps all of Unicode; outside these blocks characters
// are left unchanged.
char32_t lower_cp(char32_t c) {
    if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + 32 : c;
    if ((c >= 0xC0 && c <= 0xDE && c != 0xD7)) return c + 32;
    if (c == 0x178) return 0xFF;
    if ((c >= 0x100 && c <= 0x12F) || (c >= 0x132 && c <= 0x137) || (c >= 0x14A && c <= 0x177)) {
        return (c % 2 == 0) ? c + 1 : c;
    }
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c % 2 == 1) ? c + 1 : c;
    if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 32;
    if (c == 0x386) return 0x3AC;
    if (c >= 0x388 && c <= 0x38A) return c + 37;
    if (c == 0x38C) return 0x3CC;
    if (c == 0x38E || c == 0x38F) return c + 63;
    if (c >= 0x410 && c <= 0x42F) return c + 32;
    if (c >= 0x400 && c <= 0x40F) return c + 80;
    if ((c >= 0x460 && c <= 0x481) || (c >= 0x48A && c <= 0x4BF)) return (c % 2 == 0) ? c + 1 : c;
    if (c >= 0x531 && c <= 0x556) return c + 48;
    if (c >= 0xFF21 && c <= 0xFF3A) return c + 32;
    return c;
}

char32_t upper_cp(char32_t c) {
    if (c < 0x80) return (c >= 'a' && c <= 'z') ? c - 32 : c;
    if (c >= 0xE0 && c <= 0xFE && c != 0xF7) return c - 32;
    if (c == 0xFF) return 0x178;
    if (c == 0xB5) return 0x39C;
    if ((c >= 0x100 && c <= 0x12F) || (c >= 0x132 && c <= 0x137) || (c >= 0x14A && c <= 0x177)) {
        return (c % 2 == 1) ? c - 1 : c;
    }
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c % 2 == 0) ? c - 1 : c;
    if (c == 0x131) return 'I';
    if (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) return c - 32;
    if (c == 0x3C2) return 0x3A3;
    if (c == 0x3AC) return 0x386;
    if (c >= 0x3AD && c <= 0x3AF) return c - 37;
    if (c == 0x3CC) return 0x38C;
    if (c == 0x3CD || c == 0x3CE) return c - 63;
    if (c >= 0x430 && c <= 0x44F) return c - 32;
    if (c >= 0x450 && c <= 0x45F) return c - 80;
    if ((c >= 0x460 && c <= 0x481) || (c >= 0x48A && c <= 0x4BF)) return (c % 2 == 1) ? c - 1 : c;
    if (c >= 0x561 && c <= 0x586) return c - 48;
    if (c >= 0xFF41 && c <= 0xFF5A) return c - 32;
    return c;
}

bool is_upper_cp(char32_t c) {
    return lower_cp(c) != c;
}
bool is_lower_cp(char32_t c) {
    return upper_cp(c) != c || c == 0xDF;
}
bool is_cased_cp(char32_t c) {
    return is_upper_cp(c) || is_lower_cp(c);
}

void append_upper(std::u32string& out, char32_t c) {
    if (c == 0xDF) {  // ß has no single-character upper case; Python gives "SS".
        out += U"SS";
    } else {
        out.push_back(upper_cp(c));
    }
}

bool is_line_break(char32_t c) {
    return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D ||
           c == 0x1E || c == 0x85 || c == 0x2028 || c == 0x2029;
}

}  // namespace

std::u32string utf8_decode(std::string_view s) {
    std::u32string out;
    out.reserve(s.size());
    std::size_t i = 0;
    while (i < s.size()) {
        const Utf8Step step = utf8_step(s.substr(i));
        if (step.status == Utf8Status::Valid) {
            out.push_back(step.code_point);
            i += step.length;
        } else {
            // Python's "surrogateescape": each byte of an ill-formed part on its own.
            out.push_back(0xDC00 + static_cast<unsigned char>(s[i]));
            ++i;
        }
    }
    return out;
}

void utf8_append(std::string& out, char32_t cp) {
    if (cp >= 0xDC80 && cp <= 0xDCFF) {  // an escaped invalid byte: write it back raw
        out.push_back(static_cast<char>(cp - 0xDC00));
    } else {
        append_utf8(out, cp);
    }
}

std::string utf8_encode(std::u32string_view s) {
    std::string out;
    out.reserve(s.size());
    for (char32_t cp : s) utf8_append(out, cp);
    return out;
}

std::size_t utf8_length(std::string_view s) {
    bool ascii = std::all_of(s.begin(), s.end(), [](char c) { return (c & 0x80) == 0; });
    return ascii ? s.size() : utf8_decode(s).size();
}

bool py_isspace(char32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                     bool right) {
    const std::u32string cps = utf8_decode(s);
    const std::u32string set = chars ? utf8_decode(*chars) : std::u32string();
    auto strip_it = [&](char32_t c) {
        return chars ? set.find(c) != std::u32string::npos : py_isspace(c);
    };
    std::size_t b = 0;
    std::size_t e = cps.size();
    if (left) {
        while (b < e && strip_it(cps[b])) ++b;
    }
    if (right) {
        while (e > b && strip_it(cps[e - 1])) --e;
    }
    return utf8_encode(std::u32string_view(cps).substr(b, e - b));
}

std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep,
                                  std::int64_t maxsplit, bool from_right) {
    std::vector<std::string> parts;
    if (sep) {
        // An explicit separator: exact matches, empty fields kept.
        std::int64_t splits = 0;
        if (from_right) {
            std::size_t end = s.size();
            while (maxsplit < 0 || splits < maxsplit) {
                if (end < sep->size()) break;
                const std::size_t pos = s.rfind(*sep, end - sep->size());
                if (pos == std::string_view::npos) break;
                parts.emplace_back(s.substr(pos + sep->size(), end - pos - sep->size()));
                end = pos;
                ++splits;
            }
            parts.emplace_back(s.substr(0, end));
            std::reverse(parts.begin(), parts.end());
        } else {
            std::size_t start = 0;
            while (maxsplit < 0 || splits < maxsplit) {
                const std::size_t pos = s.find(*sep, start);
                if (pos == std::string_view::npos) break;
                parts.emplace_back(s.substr(start, pos - start));
                start = pos + sep->size();
                ++splits;
            }
            parts.emplace_back(s.substr(start));
        }
        return parts;
    }
    // No separator: runs of whitespace split, and leading/trailing whitespace is dropped.
    std::u32string cps = utf8_decode(s);
    if (from_right) std::reverse(cps.begin(), cps.end());
    std::size_t i = 0;
    std::int64_t splits = 0;
    while (i < cps.size()) {
        while (i < cps.size() && py_isspace(cps[i])) ++i;
        if (i >= cps.size()) break;
        std::size_t j = i;
        if (maxsplit >= 0 && splits >= maxsplit) {
            j = cps.size();  // Python keeps the remainder verbatim
        } else {
            while (j < cps.size() && !py_isspace(cps[j])) ++j;
        }
        std::u32string word = cps.substr(i, j - i);
        if (from_right) std::reverse(word.begin(), word.end());
        parts.push_back(utf8_encode(word));
        ++splits;
        i = j;
        if (maxsplit >= 0 && splits > maxsplit) break;
    }
    if (from_right) std::reverse(parts.begin(), parts.end());
    return parts;
}

std::vector<std::string> py_splitlines(std::string_view s) {
    const std::u32string cps = utf8_decode(s);
    std::vector<std::string> lines;
    std::size_t start = 0;
    std::size_t i = 0;
    while (i < cps.size()) {
        if (!is_line_break(cps[i])) {
            ++i;
            continue;
        }
        lines.push_back(utf8_encode(std::u32string_view(cps).substr(start, i - start)));
        if (cps[i] == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') ++i;
        ++i;
        start = i;
    }
    if (start < cps.size()) lines.push_back(utf8_encode(std::u32string_view(cps).substr(start)));
    return lines;
}

std::string py_replace(std::string_view s, std::string_view old_text, std::string_view new_text,
                       std::int64_t count) {
    std::string out;
    if (old_text.empty()) {
        // Python inserts the replacement before every code point and at the end.
        const std::u32string cps = utf8_decode(s);
        std::int64_t done = 0;
        for (char32_t c : cps) {
            if (count < 0 || done < count) {
                out += new_text;
                ++done;
            }
            utf8_append(out, c);
        }
        if (count < 0 || done < count) out += new_text;
        return out;
    }
    std::size_t start = 0;
    std::int64_t done = 0;
    while (count < 0 || done < count) {
        const std::size_t pos = s.find(old_text, start);
        if (pos == std::string_view::npos) break;
        out.append(s.substr(start, pos - start));
        out.append(new_text);
        start = pos + old_text.size();
        ++done;
    }
    out.append(s.substr(start));
    return out;
}

std::string py_upper(std::string_view s) {
    std::u32string out;
    for (char32_t c : utf8_decode(s)) append_upper(out, c);
    return utf8_encode(out);
}

std::string py_lower(std::string_view s) {
    std::u32string cps = utf8_decode(s);
    for (char32_t& c : cps) c = lower_cp(c);
    return utf8_encode(cps);
}

std::string py_title(std::string_view s) {
    std::u32string out;
    bool previous_cased = false;
    for (char32_t c : utf8_decode(s)) {
        if (previous_cased) {
            out.push_back(lower_cp(c));
        } else {
            append_upper(out, c);
        }
        previous_cased = is_cased_cp(c);
    }
    return utf8_encode(out);
}

std::string py_capitalize(std::string_view s) {
    std::u32string out;
    bool first = true;
    for (char32_t c : utf8_decode(s)) {
        if (first) {
            append_upper(out, c);
            first = false;
        } else {
            out.push_back(lower_cp(c));
        }
    }
    return utf8_encode(out);
}

bool py_isupper_str(std::string_view s) {
    bool any_cased = false;
    for (char32_t c : utf8_decode(s)) {
        if (is_lower_cp(c)) return false;
        if (is_upper_cp(c)) any_cased = true;
    }
    return any_cased;
}

bool py_islower_str(std::string_view s) {
    bool any_cased = false;
    for (char32_t c : utf8_decode(s)) {
        if (is_upper_cp(c)) return false;
        if (is_lower_cp(c)) any_cased = true;
    }
    return any_cased;
}

std::int64_t py_find(std::string_view s, std::string_view needle, bool from_right) {
    const std::size_t pos = from_right ? s.rfind(needle) : s.find(needle);
    if (pos == std::string_view::npos) return -1;
    return static_cast<std::int64_t>(utf8_length(s.substr(0, pos)));
}

namespace {

// Days since 1970-01-01 of a proleptic Gregorian date.
std::int64_t days_from_civil(int y, int m, int d) {
    y -= m <= 2 ? 1 : 0;
    const std::int64_t era = (y >= 0 ? y : y - 399) / 400;
    const std::int64_t yoe = y - era * 400;
    const std::int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    const std::int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

std::string two_digits(int v, char pad = '0') {
    char buf[16];
    if (pad == '0') {
        std::snprintf(buf, sizeof buf, "%02d", v);
    } else {
        std::snprintf(buf, sizeof buf, "%2d", v);
    }
    return buf;
}

}  // namespace

std::string format_time(std::string_view fmt, const CivilTime& t) {
    static constexpr std::array<const char*, 7> kDays = {
        "Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"};
    static constexpr std::array<const char*, 12> kMonths = {
        "January", "February", "March",     "April",   "May",      "June",
        "July",    "August",   "September", "October", "November", "December"};
    const std::int64_t days = days_from_civil(t.year, t.month, t.day);
    const int wday = static_cast<int>(((days % 7) + 11) % 7);  // 1970-01-01 was a Thursday
    const int yday = static_cast<int>(days - days_from_civil(t.year, 1, 1));
    const int month_index = std::clamp(t.month, 1, 12) - 1;
    const int hour12 = t.hour % 12 == 0 ? 12 : t.hour % 12;
    std::string out;
    for (std::size_t i = 0; i < fmt.size(); ++i) {
        if (fmt[i] != '%' || i + 1 == fmt.size()) {
            out.push_back(fmt[i]);
            continue;
        }
        const char spec = fmt[++i];
        char buf[32];
        switch (spec) {
            case 'a':
                out.append(kDays[static_cast<std::size_t>(wday)], 3);
                break;
            case 'A':
                out += kDays[static_cast<std::size_t>(wday)];
                break;
            case 'b':
            case 'h':
                out.append(kMonths[static_cast<std::size_t>(month_index)], 3);
                break;
            case 'B':
                out += kMonths[static_cast<std::size_t>(month_index)];
                break;
            case 'd':
                out += two_digits(t.day);
                break;
            case 'e':
                out += two_digits(t.day, ' ');
                break;
            case 'H':
                out += two_digits(t.hour);
                break;
            case 'I':
                out += two_digits(hour12);
                break;
            case 'j':
                std::snprintf(buf, sizeof buf, "%03d", yday + 1);
                out += buf;
                break;
            case 'm':
                out += two_digits(t.month);
                break;
            case 'M':
                out += two_digits(t.minute);
                break;
            case 'p':
                out += t.hour < 12 ? "AM" : "PM";
                break;
            case 'S':
                out += two_digits(t.second);
                break;
            case 'U':
                out += two_digits((yday + 7 - wday) / 7);
                break;
            case 'W':
                out += two_digits((yday + 7 - (wday + 6) % 7) / 7);
                break;
            case 'w':
                out += std::to_string(wday);
                break;
            case 'u':
                out += std::to_string(wday == 0 ? 7 : wday);
                break;
            case 'y':
                out += two_digits(((t.year % 100) + 100) % 100);
                break;
            case 'Y':
                out += std::to_string(t.year);
                break;
            case 'F':
                std::snprintf(buf, sizeof buf, "%d-%02d-%02d", t.year, t.month, t.day);
                out += buf;
                break;
            case 'D':
                std::snprintf(buf, sizeof buf, "%02d/%02d/%02d", t.month, t.day,
                              ((t.year % 100) + 100) % 100);
                out += buf;
                break;
            case 'T':
                std::snprintf(buf, sizeof buf, "%02d:%02d:%02d", t.hour, t.minute, t.second);
                out += buf;
                break;
            case 'R':
                std::snprintf(buf, sizeof buf, "%02d:%02d", t.hour, t.minute);
                out += buf;
                break;
            case 'Z':
            case 'z':
                break;  // a naive time has no zone, as with Python's datetime
            case 'n':
                out.push_back('\n');
                break;
            case 't':
                out.push_back('\t');
                break;
            case '%':
                out.push_back('%');
                break;
            default:
                out.push_back('%');
                out.push_back(spec);
                break;
        }
    }
    return out;
}

}  // namespace ember::jinja
