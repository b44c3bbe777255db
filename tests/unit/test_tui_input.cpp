// The full-screen UI's input: the editor's keys and history, Tab completion, and decoding
// terminal bytes into keys (escape sequences, bracketed paste, mouse wheel).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ui/tui/input.h"
#include "ui/tui/keys.h"

namespace ember::ui::tui {
namespace {

std::vector<KeyEvent> decode(const std::string& bytes) {
    KeyDecoder decoder;
    std::vector<KeyEvent> out;
    decoder.feed(bytes, out);
    decoder.flush(out);
    return out;
}

KeyEvent key(Key k) {
    KeyEvent e;
    e.key = k;
    return e;
}

TEST(TuiInputEditor, EditingKeys) {
    InputEditor e;
    e.insert("hello world");
    e.word_left();
    EXPECT_EQ(e.cursor(), 6u);
    e.kill_to_line_end();
    EXPECT_EQ(e.text(), "hello ");
    e.insert("there friend");
    e.kill_word_back();
    EXPECT_EQ(e.text(), "hello there ");
    e.line_start();
    e.delete_forward();
    EXPECT_EQ(e.text(), "ello there ");
    e.line_end();
    e.kill_to_line_start();
    EXPECT_TRUE(e.empty());
}

TEST(TuiInputEditor, CursorStepsOverWideAndCombiningCharacters) {
    InputEditor e;
    e.insert("ae\u0301日");
    e.left();
    EXPECT_EQ(e.cursor(), 4u);
    e.left();
    EXPECT_EQ(e.cursor(), 1u);
    e.backspace();
    EXPECT_EQ(e.text(), "e\u0301日");
    const auto layout = e.layout(10);
    EXPECT_EQ(layout.cursor_column, 0);
    e.line_end();
    EXPECT_EQ(e.layout(10).cursor_column, 3);
}

TEST(TuiInputEditor, MultiLineAndPastedText) {
    InputEditor e;
    e.insert("first\r\nsecond\rthird\tx\x1b");
    EXPECT_EQ(e.text(), "first\nsecond\nthird    x");
    const auto layout = e.layout(4);
    // "first" wraps at 4 columns; each newline starts a row.
    EXPECT_EQ(layout.rows,
              (std::vector<std::string>{"firs", "t", "seco", "nd", "thir", "d   ", " x"}));
    EXPECT_EQ(layout.cursor_row, 6);
    EXPECT_EQ(layout.cursor_column, 2);
    e.up();  // to the line above, same column
    EXPECT_EQ(e.cursor(), std::string("first\nsecond\n").size() - 1);
}

TEST(TuiInputEditor, HistoryKeepsTheDraft) {
    InputEditor e;
    e.remember("one");
    e.remember("two");
    e.remember("two");
    EXPECT_EQ(e.history().size(), 2u);
    e.insert("draft");
    EXPECT_TRUE(e.up());
    EXPECT_EQ(e.text(), "two");
    EXPECT_TRUE(e.up());
    EXPECT_EQ(e.text(), "one");
    EXPECT_FALSE(e.up());
    e.down();
    e.down();
    EXPECT_EQ(e.text(), "draft");
    EXPECT_FALSE(e.down());
}

TEST(TuiCompletion, CommandsAndSessionIds) {
    CompletionSources sources;
    sources.commands = {"/help", "/load", "/new", "/regen", "/rename"};
    sources.session_ids = {"abc123", "abd999"};
    sources.settings = {"temp", "top-k", "top-p"};
    EXPECT_EQ(complete_line("/he", sources).line, "/help ");
    const auto re = complete_line("/re", sources);
    EXPECT_EQ(re.line, "/re");
    EXPECT_EQ(re.candidates, (std::vector<std::string>{"/regen", "/rename"}));
    EXPECT_EQ(complete_line("/load abc", sources).line, "/load abc123 ");
    EXPECT_EQ(complete_line("/load a", sources).line, "/load ab");
    EXPECT_EQ(complete_line("/set to", sources).line, "/set top-");
    EXPECT_EQ(complete_line("hello", sources).line, "hello");
}

TEST(TuiCompletion, ModelNamesAfterModel) {
    CompletionSources sources;
    sources.commands = {"/model"};
    sources.models = {"gemma3", "qwen3", "qwen3:0.6b"};
    EXPECT_EQ(complete_line("/mo", sources).line, "/model ");
    EXPECT_EQ(complete_line("/model g", sources).line, "/model gemma3 ");
    const auto qwen = complete_line("/model q", sources);
    EXPECT_EQ(qwen.line, "/model qwen3");
    EXPECT_EQ(qwen.candidates, (std::vector<std::string>{"qwen3", "qwen3:0.6b"}));
    // Model names are not offered after other commands.
    EXPECT_EQ(complete_line("/load g", sources).line, "/load g");
}

TEST(TuiKeys, PlainKeysAndControls) {
    const auto keys = decode("a\r\x01\x7f\t\n");
    ASSERT_EQ(keys.size(), 6u);
    EXPECT_EQ(keys[0].text, "a");
    EXPECT_EQ(keys[1].key, Key::Enter);
    EXPECT_EQ(keys[2].key, Key::Control);
    EXPECT_EQ(keys[2].letter, 'a');
    EXPECT_EQ(keys[3].key, Key::Backspace);
    EXPECT_EQ(keys[4].key, Key::Tab);
    EXPECT_EQ(keys[5].key, Key::Newline);  // Ctrl-J
}

TEST(TuiKeys, EscapeSequences) {
    auto keys = decode("\x1b[A\x1bOB\x1b[5~\x1b[1;5C\x1b[H\x1b[4~");
    ASSERT_EQ(keys.size(), 6u);
    EXPECT_EQ(keys[0].key, Key::Up);
    EXPECT_EQ(keys[1].key, Key::Down);
    EXPECT_EQ(keys[2].key, Key::PageUp);
    EXPECT_EQ(keys[3].key, Key::Right);
    EXPECT_TRUE(keys[3].ctrl);
    EXPECT_EQ(keys[4].key, Key::Home);
    EXPECT_EQ(keys[5].key, Key::End);
    // Alt-Enter, Shift-Enter (kitty and modifyOtherKeys), Alt-b, Escape alone.
    keys = decode(
        "\x1b\r\x1b[13;2u\x1b[27;2;13~\x1b"
        "b");
    ASSERT_EQ(keys.size(), 4u);
    EXPECT_EQ(keys[0].key, Key::Newline);
    EXPECT_EQ(keys[1].key, Key::Newline);
    EXPECT_EQ(keys[2].key, Key::Newline);
    EXPECT_EQ(keys[3].key, Key::Alt);
    EXPECT_EQ(decode("\x1b"), std::vector<KeyEvent>{key(Key::Escape)});
}

TEST(TuiKeys, LoneEscapeWaitsForMore) {
    KeyDecoder decoder;
    std::vector<KeyEvent> out;
    decoder.feed("\x1b", out);
    EXPECT_TRUE(out.empty());
    EXPECT_TRUE(decoder.pending());
    decoder.feed("[B", out);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].key, Key::Down);
    // Half a UTF-8 character waits too.
    out.clear();
    decoder.feed("\xe6\x97", out);
    EXPECT_TRUE(out.empty());
    decoder.feed("\xa5", out);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].text, "日");
}

TEST(TuiKeys, BracketedPasteIsVerbatimAcrossReads) {
    KeyDecoder decoder;
    std::vector<KeyEvent> out;
    decoder.feed("x\x1b[200~line one\r", out);
    decoder.feed("line \x1b[A two\x1b[20", out);
    EXPECT_EQ(out.size(), 1u);
    EXPECT_FALSE(decoder.pending());
    decoder.feed("1~y", out);
    ASSERT_EQ(out.size(), 3u);
    EXPECT_EQ(out[1].key, Key::Paste);
    EXPECT_EQ(out[1].text, "line one\rline \x1b[A two");
    EXPECT_EQ(out[2].text, "y");
}

TEST(TuiKeys, MouseWheel) {
    const auto keys = decode("\x1b[<64;10;5M\x1b[<65;10;5M\x1b[<0;1;1M\x1b[M`!!");
    ASSERT_EQ(keys.size(), 3u);
    EXPECT_EQ(keys[0].key, Key::WheelUp);
    EXPECT_EQ(keys[1].key, Key::WheelDown);
    EXPECT_EQ(keys[2].key, Key::WheelUp);  // X10 encoding: 32 + 64
}

}  // namespace
}  // namespace ember::ui::tui
