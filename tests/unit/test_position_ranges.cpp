// PositionRanges (engine/util/position_ranges.h): the host rows a GPU mirror holds.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "engine/util/position_ranges.h"

namespace ember {
namespace {

using Ranges = std::vector<PositionRanges::Range>;

TEST(PositionRanges, AddMergesOverlappingAndTouchingRanges) {
    PositionRanges set;
    set.add(10, 20);
    set.add(30, 40);
    EXPECT_EQ(set.ranges(), (Ranges{{10, 20}, {30, 40}}));
    set.add(20, 25);  // touches the first
    EXPECT_EQ(set.ranges(), (Ranges{{10, 25}, {30, 40}}));
    set.add(0, 5);
    set.add(24, 31);  // bridges two
    EXPECT_EQ(set.ranges(), (Ranges{{0, 5}, {10, 40}}));
    set.add(7, 7);  // empty: nothing
    EXPECT_EQ(set.ranges(), (Ranges{{0, 5}, {10, 40}}));
}

TEST(PositionRanges, RemoveSplitsAndRemoveFromCuts) {
    PositionRanges set;
    set.add(0, 100);
    set.remove(40, 60);
    EXPECT_EQ(set.ranges(), (Ranges{{0, 40}, {60, 100}}));
    EXPECT_FALSE(set.covers(30, 50));
    EXPECT_TRUE(set.covers(60, 100));
    EXPECT_EQ(set.gaps(0, 120), (Ranges{{40, 60}, {100, 120}}));
    set.remove_from(70);
    EXPECT_EQ(set.ranges(), (Ranges{{0, 40}, {60, 70}}));
    set.remove_from(0);
    EXPECT_TRUE(set.ranges().empty());
    EXPECT_EQ(set.gaps(5, 9), (Ranges{{5, 9}}));
    EXPECT_TRUE(set.covers(3, 3));
}

// Against a plain bitmap under a random sequence of the three edits.
TEST(PositionRanges, AgreesWithABitmapUnderRandomEdits) {
    constexpr int kPositions = 96;
    std::mt19937 rng(7);
    std::uniform_int_distribution<int> pos(0, kPositions);
    std::uniform_int_distribution<int> op(0, 2);
    PositionRanges set;
    std::vector<bool> held(kPositions, false);
    for (int step = 0; step < 2000; ++step) {
        int a = pos(rng);
        int b = pos(rng);
        if (a > b) std::swap(a, b);
        switch (op(rng)) {
            case 0:
                set.add(a, b);
                for (int p = a; p < b; ++p) held[static_cast<size_t>(p)] = true;
                break;
            case 1:
                set.remove(a, b);
                for (int p = a; p < b; ++p) held[static_cast<size_t>(p)] = false;
                break;
            default:
                set.remove_from(a);
                for (int p = a; p < kPositions; ++p) held[static_cast<size_t>(p)] = false;
                break;
        }
        std::vector<bool> from_gaps(kPositions, true);
        for (const auto& [g0, g1] : set.gaps(0, kPositions)) {
            for (int64_t p = g0; p < g1; ++p) from_gaps[static_cast<size_t>(p)] = false;
        }
        ASSERT_EQ(from_gaps, held) << "step " << step;
        for (size_t i = 1; i < set.ranges().size(); ++i) {
            ASSERT_LT(set.ranges()[i - 1].second, set.ranges()[i].first) << "ranges touch";
        }
    }
}

}  // namespace
}  // namespace ember
