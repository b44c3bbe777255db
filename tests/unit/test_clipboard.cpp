// What /copy picks from a reply and how OSC 52 carries it (the tmux test covers the terminal).
#include <gtest/gtest.h>

#include "ui/io/clipboard.h"

namespace ember::ui {
namespace {

const char* const kReply =
    "Two ways:\n"
    "```python\n"
    "print('a')\n"
    "```\n"
    "and\n"
    "~~~~\n"
    "```not a fence end\n"
    "x = 1\n"
    "~~~~\n"
    "   ```\n"
    "unclosed\n";

TEST(Clipboard, CodeBlocksAreTheFencedContents) {
    const auto blocks = code_blocks(kReply);
    ASSERT_EQ(blocks.size(), 3u);
    EXPECT_EQ(blocks[0], "print('a')\n");
    EXPECT_EQ(blocks[1], "```not a fence end\nx = 1\n");
    EXPECT_EQ(blocks[2], "unclosed\n");
    EXPECT_TRUE(code_blocks("no code here\n``inline``\n").empty());
}

TEST(Clipboard, SelectionIsTheReplyOrBlockN) {
    std::string error;
    EXPECT_EQ(copy_selection(kReply, "", error).value(), kReply);
    EXPECT_EQ(copy_selection(kReply, "2", error).value(), "```not a fence end\nx = 1\n");
    EXPECT_FALSE(copy_selection(kReply, "4", error).has_value());
    EXPECT_EQ(error, "/copy 4: the last reply has 3 code blocks");
    for (const char* bad : {"0", "-1", "2x", "two"}) {
        error.clear();
        EXPECT_FALSE(copy_selection(kReply, bad, error).has_value()) << bad;
        EXPECT_NE(error.find("expected a code block's number"), std::string::npos) << bad;
    }
}

TEST(Clipboard, Osc52IsBase64BetweenTheMarkers) {
    EXPECT_EQ(osc52_sequence(""), "\x1b]52;c;\a");
    EXPECT_EQ(osc52_sequence("f"), "\x1b]52;c;Zg==\a");
    EXPECT_EQ(osc52_sequence("fo"), "\x1b]52;c;Zm8=\a");
    EXPECT_EQ(osc52_sequence("foo"), "\x1b]52;c;Zm9v\a");
    EXPECT_EQ(osc52_sequence("foob\xff"), "\x1b]52;c;Zm9vYv8=\a");
}

}  // namespace
}  // namespace ember::ui
