#include "engine/util/utc_time.h"

#include <cstdio>
#include <ctime>

namespace ember {

std::string format_utc(std::chrono::system_clock::time_point when, UtcFormat format) {
    using namespace std::chrono;
    const std::time_t t = system_clock::to_time_t(when);
    std::tm tm{};
    gmtime_r(&t, &tm);  // not std::gmtime: its buffer is shared between threads
    char buf[40] = {};
    switch (format) {
        case UtcFormat::Iso8601Seconds:
            std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
            break;
        case UtcFormat::Iso8601Milliseconds: {
            const auto ms = duration_cast<milliseconds>(when.time_since_epoch()).count() % 1000;
            const size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
            std::snprintf(buf + n, sizeof buf - n, ".%03dZ", static_cast<int>(ms));
            break;
        }
        case UtcFormat::FileNameStamp:
            std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &tm);
            break;
    }
    return buf;
}

std::string utc_now(UtcFormat format) {
    return format_utc(std::chrono::system_clock::now(), format);
}

}  // namespace ember
