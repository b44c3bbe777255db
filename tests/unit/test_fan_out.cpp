// engine/util/fan_out.h: the one-off fan-out and its one rule for the thread count.
#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "engine/util/fan_out.h"

namespace ember {
namespace {

TEST(FanOut, ThreadsFollowTheMachineAndTheWork) {
    const int machine = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    EXPECT_EQ(fan_out_threads(), machine);
    EXPECT_EQ(fan_out_threads(1), 1);
    EXPECT_EQ(fan_out_threads(0), 1);
    EXPECT_EQ(fan_out_threads(-5), 1);
    EXPECT_EQ(fan_out_threads(1'000'000), machine);
    EXPECT_EQ(fan_out_threads(2), std::min(2, machine));
}

TEST(FanOut, RunsEveryJobOnceTheFirstOnTheCaller) {
    std::vector<std::atomic<int>> ran(8);
    std::thread::id first;
    fan_out(8, [&](int i) {
        ran[static_cast<size_t>(i)]++;
        if (i == 0) first = std::this_thread::get_id();
    });
    for (const auto& r : ran) EXPECT_EQ(r.load(), 1);
    EXPECT_EQ(first, std::this_thread::get_id());
    int calls = 0;
    fan_out(0, [&](int) { ++calls; });
    EXPECT_EQ(calls, 0);
}

TEST(FanOut, AJobsExceptionComesBackAfterAllHaveEnded) {
    std::atomic<int> ended{0};
    EXPECT_THROW(fan_out(4,
                         [&](int i) {
                             ++ended;
                             if (i == 2) throw std::runtime_error("job 2");
                         }),
                 std::runtime_error);
    EXPECT_EQ(ended.load(), 4);
}

}  // namespace
}  // namespace ember
