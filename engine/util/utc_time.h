// UTC timestamps as text, each format written once. The sessions database stores them and
// compares them as strings (prune --older-than), so a format here must never change: the
// same bytes for the same instant.
#pragma once

#include <chrono>
#include <string>

namespace ember {

enum class UtcFormat {
    Iso8601Seconds,       // "2024-05-01T12:34:56Z": state chunks, model hashes, pruning cutoffs
    Iso8601Milliseconds,  // "2024-05-01T12:34:56.789Z": conversations' and messages' times
    FileNameStamp,        // "20240501-123456": no ':' (a file name on every file system)
};

std::string format_utc(std::chrono::system_clock::time_point when, UtcFormat format);

// format_utc() of the current time.
std::string utc_now(UtcFormat format);

}  // namespace ember
