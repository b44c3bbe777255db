// engine/util/utc_time.h: the timestamp formats the sessions database stores (and compares as
// text) stay byte for byte what they were.
#include <gtest/gtest.h>

#include <chrono>
#include <regex>

#include "engine/util/utc_time.h"

namespace ember {
namespace {

const std::chrono::system_clock::time_point kMay1st{std::chrono::milliseconds(1714566896789)};

TEST(UtcTime, FormatsEachStoredFormat) {
    EXPECT_EQ(format_utc(kMay1st, UtcFormat::Iso8601Seconds), "2024-05-01T12:34:56Z");
    EXPECT_EQ(format_utc(kMay1st, UtcFormat::Iso8601Milliseconds), "2024-05-01T12:34:56.789Z");
    EXPECT_EQ(format_utc(kMay1st, UtcFormat::FileNameStamp), "20240501-123456");
    EXPECT_EQ(format_utc(std::chrono::system_clock::time_point{}, UtcFormat::Iso8601Milliseconds),
              "1970-01-01T00:00:00.000Z");
}

TEST(UtcTime, NowHasTheFormsShape) {
    EXPECT_TRUE(std::regex_match(utc_now(UtcFormat::Iso8601Seconds),
                                 std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)")));
    EXPECT_TRUE(std::regex_match(utc_now(UtcFormat::Iso8601Milliseconds),
                                 std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)")));
    EXPECT_TRUE(std::regex_match(utc_now(UtcFormat::FileNameStamp), std::regex(R"(\d{8}-\d{6})")));
}

}  // namespace
}  // namespace ember
