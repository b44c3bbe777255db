// The n-gram table: drafts what followed the current context before, longest context first,
// chained through its own drafts, only when confident, within a bounded size.
#include <gtest/gtest.h>

#include "engine/generate/ngram.h"

namespace ember {
namespace {

TEST(NgramTable, DraftsARepeatedSequenceInOrder) {
    NgramTable table;
    const std::vector<int32_t> sentence = {10, 11, 12, 13, 14, 15, 16, 17};
    table.add(sentence);
    table.add(std::vector<int32_t>{99, 10, 11});  // the sentence starts again
    std::vector<int32_t> drafts;
    table.draft(4, drafts);
    EXPECT_EQ(drafts, (std::vector<int32_t>{12, 13, 14, 15}));
    table.draft(9, drafts);  // chained through its own drafts, round the loop it saw
    EXPECT_EQ(drafts, (std::vector<int32_t>{12, 13, 14, 15, 16, 17, 99, 10, 11}));
}

TEST(NgramTable, LongestContextWins) {
    NgramTable table;
    // After (5, 6) came 7 twice; after (1, 5, 6) came 8 once.
    table.add(std::vector<int32_t>{5, 6, 7, 0, 5, 6, 7, 0, 1, 5, 6, 8, 0, 1, 5, 6});
    std::vector<int32_t> drafts;
    table.draft(1, drafts);
    EXPECT_EQ(drafts, (std::vector<int32_t>{8}));
}

TEST(NgramTable, NoDraftWithoutConfidence) {
    NgramOptions o;
    o.min_confidence = 0.6f;
    NgramTable table(o);
    // After (1, 2): 3, 4, 3, 4 — a 50/50 split, below 0.6; the longer contexts ending in
    // (1, 2) were each seen once and the final one (5, 1, 2) never.
    const std::vector<int32_t> split = {7, 1, 2, 3, 8, 1, 2, 4, 9, 1, 2, 3, 6, 1, 2, 4, 5, 1, 2};
    table.add(split);
    std::vector<int32_t> drafts = {42};
    table.draft(4, drafts);
    EXPECT_TRUE(drafts.empty());

    o.min_confidence = 0.0f;
    o.min_support = 3;  // seen twice each: not enough support either way
    NgramTable strict(o);
    strict.add(split);
    strict.draft(4, drafts);
    EXPECT_TRUE(drafts.empty());
}

TEST(NgramTable, FreshTextDraftsNothing) {
    NgramTable table;
    std::vector<int32_t> fresh;
    for (int32_t i = 0; i < 500; ++i) fresh.push_back(i);
    table.add(fresh);
    std::vector<int32_t> drafts;
    table.draft(8, drafts);
    EXPECT_TRUE(drafts.empty());
}

TEST(NgramTable, StaysWithinItsBoundAndKeepsRecentContexts) {
    NgramOptions o;
    o.max_contexts = 1000;
    NgramTable table(o);
    std::vector<int32_t> stream;
    for (int32_t i = 0; i < 20000; ++i) stream.push_back((i * 7919) % 100003);
    table.add(stream);
    EXPECT_LE(table.contexts(), o.max_contexts);
    // The most recent contexts survive eviction: repeating the last few tokens drafts on.
    const std::vector<int32_t> tail(stream.end() - 6, stream.end() - 3);
    table.add(tail);
    std::vector<int32_t> drafts;
    table.draft(2, drafts);
    EXPECT_EQ(drafts, (std::vector<int32_t>(stream.end() - 3, stream.end() - 1)));
}

TEST(NgramTable, RejectsBadOptions) {
    NgramOptions o;
    o.min_context = 3;
    o.max_context = 2;
    EXPECT_THROW(NgramTable{o}, std::invalid_argument);
}

}  // namespace
}  // namespace ember
