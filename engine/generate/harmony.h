// The harmony chat format (gpt-oss): a reply is a sequence of messages, each
//
//     <|start|>assistant<|channel|>NAME[ to=RECIPIENT][<|constrain|>TYPE]<|message|>TEXT<|end|>
//
// where the generation prompt already wrote the first `<|start|>assistant`. The channel says
// what the text is: `analysis` is the model's reasoning, `commentary` a preamble or a tool
// call, `final` the answer. The last message ends with `<|return|>` (the answer is done) or
// `<|call|>` (a tool call waits for its result) instead of `<|end|>`; a `final` message ended
// by `<|end|>` ends the reply too.
//
// HarmonyRouter reads the generated tokens (the markers are single special tokens, so the
// router works on ids, not on text that might split them) and hands the text to a
// TextCallback as Thinking (analysis) or Answer (everything shown to the user), never the
// markup. Output that breaks the format (an unknown channel, a header without
// `<|message|>`, text outside any message) is shown as plain answer text with a warning:
// nothing the model wrote is dropped. With tool calls enabled, a commentary message addressed
// `to=functions.NAME` is a call: its text is the call's arguments, handed on as ToolCallDeltas.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "engine/generate/conversation.h"
#include "engine/generate/reply_router.h"
#include "engine/generate/tool_calls.h"
#include "engine/tokenizer/tokenizer.h"

namespace ember {

// The ids of the harmony markers in a vocabulary.
struct HarmonyTokens {
    TokenId start = kNoToken;      // <|start|>
    TokenId end = kNoToken;        // <|end|>
    TokenId message = kNoToken;    // <|message|>
    TokenId channel = kNoToken;    // <|channel|>
    TokenId ret = kNoToken;        // <|return|>
    TokenId call = kNoToken;       // <|call|>
    TokenId constrain = kNoToken;  // <|constrain|> (optional)

    // The markers when the vocabulary has all of start, end, message, channel, return and
    // call as special tokens; nothing otherwise.
    static std::optional<HarmonyTokens> find(const Tokenizer& tokenizer);
};

// What is appended to the prompt to start the answer at once (no reasoning wanted), and what
// closes an analysis message cut short (after the transition words) to go on with the answer.
inline constexpr const char* kHarmonyOpenFinal = "<|channel|>final<|message|>";
inline constexpr const char* kHarmonyCloseAnalysis =
    "<|end|><|start|>assistant<|channel|>final<|message|>";

class HarmonyRouter {
public:
    // starts_in_final: the prompt already opened the final message (kHarmonyOpenFinal).
    // stop_at_end: the reply's end markers stop generation (false with --ignore-eos).
    HarmonyRouter(const Tokenizer& tokenizer, const HarmonyTokens& markers,
                  const std::vector<std::string>& stop_strings, bool starts_in_final,
                  bool stop_at_end, const TextCallback& on_text);

    // Messages to functions.NAME become calls (to `on_call`, which must outlive the router)
    // instead of text shown with a warning. `names`: the functions offered (a call of another
    // is shown as text with a warning); empty: any.
    void enable_tool_calls(std::vector<std::string> names, const ToolCallCallback& on_call);
    const std::vector<ToolCall>& tool_calls() const { return calls_; }

    // One generated token.
    void push(TokenId id);
    // End of generation: flushes what was held back (an unfinished header as plain text).
    void finish();
    // Ends an analysis message from outside (budget or loop): `transition` is shown as the
    // last words of the thinking, and the caller feeds kHarmonyCloseAnalysis to the model.
    void force_end_thinking(const std::string& transition);

    // Thinking inside an analysis message, Answer inside any other message or when done,
    // Undecided between messages (in a header).
    ReplyRouter::Phase phase() const;
    // The reply is over: an end marker, or a stop string in the answer.
    bool done() const { return done_ || answer_.stopped_by_string(); }
    bool stopped_by_string() const { return answer_.stopped_by_string(); }
    bool cancelled() const { return cancelled_ || answer_.cancelled(); }
    const std::string& answer() const { return answer_.answer(); }
    const std::string& thinking() const { return thinking_; }
    // Departures from the format, each once, for the user to see.
    const std::vector<std::string>& warnings() const { return warnings_; }

private:
    enum class Part { Header, Body, Between };
    enum class Body { Thinking, Answer, Call };

    void on_marker(TokenId id);
    void open_body();                             // at <|message|>: the header decides the channel
    void header_as_text(const std::string& why);  // a broken header is shown, not dropped
    void text(const std::string& piece);
    void flush_text();
    void warn(const std::string& message);
    void answer_text(const std::string& text);
    bool open_call(const std::string& recipient);  // false: not a call Ember takes
    void call_text(const std::string& text);
    void close_call();
    bool is_marker(TokenId id) const;
    std::string marker_text(TokenId id) const;

    const Tokenizer& tok_;
    HarmonyTokens m_;
    const TextCallback& on_text_;
    bool stop_at_end_;
    std::vector<std::string> stops_;  // a copy: answer_ refers to it
    StreamingDetokenizer detok_;
    // Answer text goes through a router without thinking, for its stop strings.
    ReplyRouter answer_;
    Part part_ = Part::Header;
    Body body_ = Body::Answer;
    bool body_is_final_ = false;
    bool answer_started_ = false;  // an earlier message already showed answer text
    std::string header_;           // header text with its markers, as written
    std::string thinking_;
    std::vector<std::string> warnings_;
    bool tools_enabled_ = false;
    std::vector<std::string> tool_names_;
    const ToolCallCallback* on_call_ = nullptr;
    std::vector<ToolCall> calls_;
    bool done_ = false;
    bool cancelled_ = false;
};

}  // namespace ember
