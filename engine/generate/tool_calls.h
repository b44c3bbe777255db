// Tool calls (OpenAI's `tools`): how each model family is told about functions, how it writes
// a call, and how a reply is split into its text and its calls, whole or as it streams.
//
// Formats, chosen from the chat template (detect_tool_call_format):
//   Hermes   Qwen2.5/Qwen3, Granite, SmolLM3, ...: the template lists the tools, the model writes
//            <tool_call>\n{"name": "NAME", "arguments": {...}}\n</tool_call> (several in a row
//            for parallel calls), text may come before them.
//   Llama3   Llama 3.1-3.3: the template lists the tools; the whole reply is one JSON object
//            {"name": "NAME", "parameters": {...}}, perhaps after <|python_tag|> (a control
//            token the detokenizer drops).
//   Harmony  gpt-oss: a commentary message addressed to the function,
//            <|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}<|call|>;
//            HarmonyRouter (harmony.h) reads it from the tokens, this file gives the grammar.
//   Gemma3   Gemma 3's template knows no tools: function calling is prompt-based (Google's
//            "Function calling with Gemma" guide). Ember uses the guide's JSON variant: the
//            instructions and the tools' JSON are put at the start of the first user turn, the
//            model answers {"name": NAME, "parameters": {...}} (a ```tool_code or ```json fence
//            around it is accepted), and a tool's result goes back in a user turn as a
//            ```tool_output fenced block (the convention of Gemma's cookbook).
//
// Arguments reach the template as a JSON object where they parse as one (most templates write
// `arguments | tojson`, which would quote a string a second time), as HF's documentation
// shapes them; text that does not parse is passed as the string it is.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "engine/generate/conversation.h"

namespace ember {

namespace grammar {
class Grammar;
class GrammarConstraint;
class CompileBudget;
}  // namespace grammar

enum class ToolCallFormat { None, Hermes, Llama3, Harmony, Gemma3 };
std::string_view tool_call_format_name(ToolCallFormat format);

// The format a chat template's model writes calls in; `harmony`: the template writes harmony
// channels and the vocabulary has their markers. None: a template whose tool support Ember
// does not know (a request with tools is then refused, never silently ignored).
ToolCallFormat detect_tool_call_format(std::string_view template_source, bool harmony);

// OpenAI's tool_choice.
enum class ToolChoice {
    Auto,      // the model may answer or call
    None,      // the model must not call: tools are not shown to it, replies are text
    Required,  // the reply is one call or more (constrained)
    Named,     // the reply is a call of ToolOptions::named (constrained)
};

// What a request offers the model.
struct ToolOptions {
    // OpenAI's shape, passed to the template as given:
    // [{"type": "function", "function": {"name", "description", "parameters"}}, ...]
    nlohmann::ordered_json tools = nlohmann::ordered_json::array();
    ToolChoice choice = ToolChoice::Auto;
    std::string named;     // the function for ToolChoice::Named
    bool parallel = true;  // false: one call per reply at most

    bool active() const { return !tools.empty() && choice != ToolChoice::None; }
    bool forces_call() const {
        return active() && (choice == ToolChoice::Required || choice == ToolChoice::Named);
    }
};

// A malformed `tools` list or tool choice; the message names the field at fault.
class ToolError : public std::invalid_argument {
public:
    ToolError(const std::string& message, std::string field)
        : std::invalid_argument(message), field_(std::move(field)) {}
    const std::string& field() const { return field_; }

private:
    std::string field_;
};

// Checks every tool (type "function", a name of letters, digits, '_', '-' and '.' up to 64,
// parameters an object schema when given) and that a named choice names one of them.
void validate_tool_options(const ToolOptions& options);
std::vector<std::string> tool_names(const nlohmann::ordered_json& tools);

// The `messages` (and `tools`, null for none) a chat template gets for `messages` in `format`:
// assistant tool_calls as [{"id", "type": "function", "function": {"name", "arguments"}}],
// tool results as {"role": "tool", "content", "tool_call_id", "name"}. Gemma3 has them
// rewritten as its prompt convention wants (and `tools` null: they are in the first user turn).
struct TemplateMessages {
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    nlohmann::ordered_json tools;  // null: leave `tools` undefined
};
TemplateMessages template_messages(std::span<const ChatMessage> messages, ToolCallFormat format,
                                   const ToolOptions* tools);

// The grammar a reply that must call (Required, Named) is held to: the format's call syntax
// with each function's arguments valid against its `parameters` schema. Harmony's markers are
// spelled with harmony_sentinel() (see make_harmony_token_trie). Throws ToolError naming the
// tool and the schema keyword Ember cannot constrain, or the limit of `budget` (null: the
// defaults of grammar::CompileLimits) the schemas pass; grammar::CompileCancelled passes
// through.
std::shared_ptr<const grammar::Grammar> tool_call_grammar(ToolCallFormat format,
                                                          const ToolOptions& options,
                                                          grammar::CompileBudget* budget = nullptr);
// The grammar of one call's rest, for tool_choice auto: Hermes from after <tool_call>,
// Llama3/Gemma3 from the "{" that opens the reply, Harmony from the function's name (fed by
// LazyToolConstraint when the header is complete) through the arguments to <|call|>.
// LazyToolConstraint engages it where a call starts.
std::shared_ptr<const grammar::Grammar> tool_call_lazy_grammar(
    ToolCallFormat format, const ToolOptions& options, grammar::CompileBudget* budget = nullptr);

// tool_choice auto: the reply is free text until a call starts (the format's start marker in
// the answer), then the constraint (over tool_call_lazy_grammar) holds the call to its syntax
// and its arguments to the tool's schema, until the call is complete; then text is free again.
// Fed the answer's text as generated (thinking excluded); engaged() is asked before each
// token is sampled and says whether to sample it through the constraint (which then accepts
// it: generate() does that).
class LazyToolConstraint {
public:
    LazyToolConstraint(ToolCallFormat format, grammar::GrammarConstraint& constraint);
    void on_answer_text(std::string_view piece);
    // Harmony: a message to functions.NAME opened (its arguments come next).
    void on_call_start(const std::string& name);
    bool engaged();
    int engagements() const { return engagements_; }  // calls the constraint held

private:
    ToolCallFormat format_;
    grammar::GrammarConstraint& constraint_;
    std::string answer_;
    size_t scan_from_ = 0;      // where the next start marker is looked for
    bool tried_start_ = false;  // Llama3/Gemma3: the reply's start was looked at
    std::string pending_call_;  // Harmony: the function whose arguments start next
    bool engaged_ = false;
    int engagements_ = 0;
};

// The text a harmony marker stands for inside a grammar: byte 0x01 and a letter, which no
// ordinary token of a harmony trie holds. `marker`: one of "start", "end", "message",
// "channel", "return", "call", "constrain".
std::string harmony_sentinel(std::string_view marker);

// One piece of a call as it streams: the first piece of call `index` carries its id and name
// (arguments empty), later pieces fragments of its arguments' JSON text, in order.
struct ToolCallDelta {
    size_t index = 0;
    std::string id;
    std::string name;
    std::string arguments;
};
// Return false to stop generating.
using ToolCallCallback = std::function<bool(const ToolCallDelta& delta)>;

// A call id as OpenAI writes them ("call_" and 24 random letters and digits).
std::string new_tool_call_id();

// Splits reply text in a text format (Hermes, Llama3, Gemma3) into content and calls as it
// streams. Content goes to `on_content` as soon as it cannot be the start of a call; call
// markup never does. A call whose start cannot be read (a <tool_call> block without
// {"name": ..., "arguments": ...}, an unknown function) is handed on as content with a
// warning; arguments that turn out not to be valid JSON keep their call and get a warning
// (as OpenAI's API, which asks clients to validate arguments). The result does not depend
// on how the text is split.
class ToolCallParser {
public:
    struct Options {
        std::vector<std::string> names;  // the functions offered; empty: any name is taken
        size_t max_calls = SIZE_MAX;     // calls after this many are not started: done()
    };
    ToolCallParser(ToolCallFormat format, Options options,
                   std::function<bool(const std::string&)> on_content, ToolCallCallback on_call);

    void push(std::string_view text);
    void finish();  // the reply is over: what was held back is decided

    const std::string& content() const { return content_; }
    const std::vector<ToolCall>& calls() const { return calls_; }
    const std::vector<std::string>& warnings() const { return warnings_; }
    bool cancelled() const { return cancelled_; }
    // max_calls calls are complete: the reply need not go on.
    bool done() const { return done_; }

private:
    // Skip: a Hermes call's unreadable rest, up to its </tool_call>. Drop: the rest of a
    // Llama3/Gemma3 reply after a call whose end cannot be read (the call is the reply).
    enum class State { Start, Content, Header, Arguments, Trailer, Skip, Drop };
    bool step(bool at_end);  // one transition over buf_; false: needs more text
    bool step_start(bool at_end);
    bool step_content(bool at_end);
    bool step_header(bool at_end);
    bool step_arguments(bool at_end);
    bool step_trailer(bool at_end);
    void emit_content(std::string_view text);
    void header_failed(bool warn, const std::string& why);
    void begin_call(const std::string& name);
    void call_arguments(std::string_view fragment);
    void end_call();
    void warn(const std::string& message);

    ToolCallFormat format_;
    Options options_;
    std::function<bool(const std::string&)> on_content_;
    ToolCallCallback on_call_;
    State state_;
    std::string buf_;                // text not yet decided
    std::string held_space_;         // whitespace after content, dropped if a call follows
    std::string header_text_;        // the markup of the call being read, for a failed header
    bool fenced_ = false;            // Gemma3: the call sits in a ``` fence
    bool after_call_ = false;        // a call ended: Start may see another
    bool string_arguments_ = false;  // arguments written as a JSON string (decoded at its end)
    size_t scanned_ = 0;             // bytes of buf_ a string's scan has passed
    int depth_ = 0;                  // nesting inside the arguments
    bool in_string_ = false, escaped_ = false;
    std::string content_;
    std::vector<ToolCall> calls_;
    std::vector<std::string> warnings_;
    bool cancelled_ = false;
    bool done_ = false;
};

// A whole reply split at once (the streaming parser fed all of it).
struct ParsedReply {
    std::string content;
    std::vector<ToolCall> calls;
    std::vector<std::string> warnings;
};
ParsedReply parse_tool_calls(ToolCallFormat format, std::string_view text,
                             ToolCallParser::Options options = {});

}  // namespace ember
