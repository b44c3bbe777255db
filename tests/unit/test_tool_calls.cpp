// Tool calls: each family's call format read from reply text written as that format's public
// documentation shows it (Qwen/Hermes <tool_call> JSON, Llama 3.1+ JSON with "parameters",
// Gemma's documented JSON prompt answer), whole and split at every byte; malformed calls as
// text with a warning; the grammar that forces calls; the messages templates get.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/generate/tool_calls.h"
#include "engine/grammar/matcher.h"
#include "engine/grammar/token_mask.h"

namespace ember {
namespace {

using ojson = nlohmann::ordered_json;

struct Streamed {
    std::string content;
    std::vector<ToolCall> calls;  // rebuilt from the deltas
    std::vector<std::string> warnings;
    bool markup_in_content = false;
};

// Feeds `text` in pieces cut at `cuts` (byte offsets) and rebuilds what the callbacks saw.
Streamed stream(ToolCallFormat format, const std::string& text, const std::vector<size_t>& cuts,
                ToolCallParser::Options options = {}) {
    Streamed s;
    ToolCallParser parser(
        format, std::move(options),
        [&](const std::string& piece) {
            s.content += piece;
            return true;
        },
        [&](const ToolCallDelta& d) {
            if (d.index == s.calls.size()) {
                EXPECT_FALSE(d.name.empty()) << "the first delta of a call names it";
                EXPECT_FALSE(d.id.empty());
                s.calls.push_back({d.id, d.name, {}});
            } else {
                EXPECT_EQ(d.index + 1, s.calls.size()) << "deltas of one call at a time";
                EXPECT_TRUE(d.name.empty());
            }
            s.calls.back().arguments += d.arguments;
            return true;
        });
    size_t from = 0;
    for (size_t cut : cuts) {
        parser.push(std::string_view(text).substr(from, cut - from));
        from = cut;
    }
    parser.push(std::string_view(text).substr(from));
    parser.finish();
    EXPECT_EQ(parser.content(), s.content) << "content() is what was streamed";
    EXPECT_EQ(parser.calls().size(), s.calls.size());
    s.warnings = parser.warnings();
    return s;
}

// The reply as one piece and split at every byte boundary (one cut, then every byte apart)
// gives the same content, calls and warnings.
Streamed check_every_split(ToolCallFormat format, const std::string& text,
                           ToolCallParser::Options options = {}) {
    const Streamed whole = stream(format, text, {}, options);
    std::vector<size_t> every;
    for (size_t cut = 1; cut < text.size(); ++cut) {
        every.push_back(cut);
        const Streamed split = stream(format, text, {cut}, options);
        EXPECT_EQ(split.content, whole.content) << "cut at " << cut;
        EXPECT_EQ(split.calls.size(), whole.calls.size()) << "cut at " << cut;
        for (size_t i = 0; i < std::min(split.calls.size(), whole.calls.size()); ++i) {
            EXPECT_EQ(split.calls[i].name, whole.calls[i].name) << "cut at " << cut;
            EXPECT_EQ(split.calls[i].arguments, whole.calls[i].arguments) << "cut at " << cut;
        }
        EXPECT_EQ(split.warnings, whole.warnings) << "cut at " << cut;
    }
    const Streamed bytes = stream(format, text, every, options);
    EXPECT_EQ(bytes.content, whole.content);
    EXPECT_EQ(bytes.calls.size(), whole.calls.size());
    EXPECT_EQ(bytes.warnings, whole.warnings);
    return whole;
}

ojson args(const ToolCall& call) {
    return ojson::parse(call.arguments);
}

// Qwen's documentation (Qwen2.5/Qwen3 function calling, Hermes style): the template's own
// instructions ask for <tool_call>\n{"name": <function-name>, "arguments":
// <args-json-object>}\n</tool_call>.
TEST(ToolCallsHermes, OneCallAfterText) {
    const std::string reply =
        "Let me check the weather.\n\n<tool_call>\n{\"name\": \"get_current_temperature\", "
        "\"arguments\": {\"location\": \"San Francisco, CA, USA\", \"unit\": \"celsius\"}}\n"
        "</tool_call>";
    const Streamed s = check_every_split(ToolCallFormat::Hermes, reply);
    EXPECT_EQ(s.content, "Let me check the weather.");
    ASSERT_EQ(s.calls.size(), 1u);
    EXPECT_EQ(s.calls[0].name, "get_current_temperature");
    EXPECT_EQ(args(s.calls[0]),
              (ojson{{"location", "San Francisco, CA, USA"}, {"unit", "celsius"}}));
    EXPECT_TRUE(s.warnings.empty());
}

TEST(ToolCallsHermes, ParallelCallsAndNoContent) {
    const std::string reply =
        "<tool_call>\n{\"name\": \"get_current_temperature\", \"arguments\": {\"location\": "
        "\"San Francisco, CA, USA\"}}\n</tool_call>\n<tool_call>\n{\"name\": "
        "\"get_temperature_date\", \"arguments\": {\"location\": \"San Francisco, CA, USA\", "
        "\"date\": \"2024-10-01\"}}\n</tool_call>";
    const Streamed s = check_every_split(ToolCallFormat::Hermes, reply);
    EXPECT_EQ(s.content, "");
    ASSERT_EQ(s.calls.size(), 2u);
    EXPECT_EQ(s.calls[1].name, "get_temperature_date");
    EXPECT_EQ(args(s.calls[1])["date"], "2024-10-01");
    EXPECT_NE(s.calls[0].id, s.calls[1].id);
}

TEST(ToolCallsHermes, ArgumentsWithBracesInStringsAndNesting) {
    const std::string reply =
        "<tool_call>\n{\"name\": \"run\", \"arguments\": {\"code\": \"if (a) { b(\\\"}\\\"); }\", "
        "\"opts\": {\"list\": [1, {\"x\": []}]}}}\n</tool_call>";
    const Streamed s = check_every_split(ToolCallFormat::Hermes, reply);
    ASSERT_EQ(s.calls.size(), 1u);
    EXPECT_EQ(args(s.calls[0])["code"], "if (a) { b(\"}\"); }");
    EXPECT_EQ(args(s.calls[0])["opts"]["list"][1]["x"], ojson::array());
}

TEST(ToolCallsHermes, ArgumentsGivenAsAStringAreDecoded) {
    const std::string reply =
        "<tool_call>\n{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}\n</tool_call>";
    const Streamed s = check_every_split(ToolCallFormat::Hermes, reply);
    ASSERT_EQ(s.calls.size(), 1u);
    EXPECT_EQ(s.calls[0].arguments, "{\"a\": 1}");
}

TEST(ToolCallsHermes, PlainTextIsUntouched) {
    const std::string reply = "No tools needed: 2 < 3 and <tool is not a tag.\n";
    const Streamed s = check_every_split(ToolCallFormat::Hermes, reply);
    EXPECT_EQ(s.content, reply);
    EXPECT_TRUE(s.calls.empty());
    EXPECT_TRUE(s.warnings.empty());
}

TEST(ToolCallsHermes, MalformedCallIsTextWithAWarning) {
    const std::string reply = "<tool_call>\nget_weather(city=Paris)\n</tool_call> done";
    const Streamed s = check_every_split(ToolCallFormat::Hermes, reply);
    EXPECT_TRUE(s.calls.empty());
    EXPECT_EQ(s.content, reply);
    ASSERT_EQ(s.warnings.size(), 1u);
    EXPECT_NE(s.warnings[0].find("cannot be read"), std::string::npos) << s.warnings[0];
}

TEST(ToolCallsHermes, UnknownFunctionIsTextWithAWarning) {
    const std::string reply = "<tool_call>\n{\"name\": \"rm_rf\", \"arguments\": {}}\n</tool_call>";
    ToolCallParser::Options options;
    options.names = {"get_weather"};
    const Streamed s = check_every_split(ToolCallFormat::Hermes, reply, options);
    EXPECT_TRUE(s.calls.empty());
    EXPECT_EQ(s.content, reply);
    ASSERT_EQ(s.warnings.size(), 1u);
    EXPECT_NE(s.warnings[0].find("rm_rf"), std::string::npos);
}

TEST(ToolCallsHermes, InvalidArgumentsKeepTheCallWithAWarning) {
    const std::string reply =
        "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": tru}}\n</tool_call>";
    const Streamed s = check_every_split(ToolCallFormat::Hermes, reply);
    ASSERT_EQ(s.calls.size(), 1u);
    EXPECT_EQ(s.calls[0].arguments, "{\"a\": tru}");
    ASSERT_EQ(s.warnings.size(), 1u);
    EXPECT_NE(s.warnings[0].find("not a valid JSON object"), std::string::npos);
}

TEST(ToolCallsHermes, ReplyCutInsideACall) {
    const std::string reply = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1, 2";
    const Streamed s = check_every_split(ToolCallFormat::Hermes, reply);
    ASSERT_EQ(s.calls.size(), 1u);
    EXPECT_EQ(s.calls[0].arguments, "{\"a\": [1, 2");
    EXPECT_EQ(s.content, "");
    EXPECT_EQ(s.warnings.size(), 2u);  // ended inside; not valid JSON
}

TEST(ToolCallsHermes, ReplyCutInsideTheHeaderIsText) {
    const std::string reply = "Sure.<tool_call>\n{\"na";
    const Streamed s = check_every_split(ToolCallFormat::Hermes, reply);
    EXPECT_TRUE(s.calls.empty());
    EXPECT_EQ(s.content, reply);
    EXPECT_EQ(s.warnings.size(), 1u);
}

TEST(ToolCallsHermes, OneCallAtMostWhenNotParallel) {
    const std::string reply =
        "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": "
        "\"b\", \"arguments\": {}}\n</tool_call>";
    ToolCallParser::Options options;
    options.max_calls = 1;
    ToolCallParser parser(ToolCallFormat::Hermes, options, nullptr, nullptr);
    parser.push(reply);
    EXPECT_TRUE(parser.done());
    parser.finish();
    ASSERT_EQ(parser.calls().size(), 1u);
    EXPECT_EQ(parser.calls()[0].name, "a");
}

// Llama 3.1+ (Meta's prompt format documentation): the model answers a JSON function call
// {"name": "function_name", "parameters": {...}}, possibly after <|python_tag|>.
TEST(ToolCallsLlama3, JsonCall) {
    const std::string reply =
        "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"San Francisco\", \"metric\": "
        "\"celsius\"}}";
    const Streamed s = check_every_split(ToolCallFormat::Llama3, reply);
    EXPECT_EQ(s.content, "");
    ASSERT_EQ(s.calls.size(), 1u);
    EXPECT_EQ(s.calls[0].name, "get_weather");
    EXPECT_EQ(args(s.calls[0])["metric"], "celsius");
    EXPECT_TRUE(s.warnings.empty());
}

TEST(ToolCallsLlama3, PythonTagAndTwoCalls) {
    const std::string reply =
        "<|python_tag|>{\"name\": \"a\", \"parameters\": {\"x\": 1}}; {\"name\": \"b\", "
        "\"parameters\": {}}";
    const Streamed s = check_every_split(ToolCallFormat::Llama3, reply);
    ASSERT_EQ(s.calls.size(), 2u);
    EXPECT_EQ(s.calls[1].name, "b");
    EXPECT_EQ(s.content, "");
}

TEST(ToolCallsLlama3, TextAndJsonThatIsNotACall) {
    const Streamed text = check_every_split(ToolCallFormat::Llama3, "The answer is {x}.");
    EXPECT_EQ(text.content, "The answer is {x}.");
    EXPECT_TRUE(text.calls.empty());
    const Streamed json = check_every_split(ToolCallFormat::Llama3, "{\"answer\": 42}");
    EXPECT_EQ(json.content, "{\"answer\": 42}");
    EXPECT_TRUE(json.warnings.empty()) << "JSON that never claimed to be a call";
    const Streamed broken = check_every_split(ToolCallFormat::Llama3, "{\"name\": get_weather}");
    EXPECT_EQ(broken.content, "{\"name\": get_weather}");
    EXPECT_EQ(broken.warnings.size(), 1u);
}

// Found by tests/fuzz (fuzz_tool_calls): text after a call's arguments that is not its closing
// brace was dropped only as far as it had arrived, and what came later became content.
TEST(ToolCallsLlama3, TextAfterTheArgumentsIsDroppedHoweverItStreams) {
    for (const ToolCallFormat format : {ToolCallFormat::Llama3, ToolCallFormat::Gemma3}) {
        const Streamed s = check_every_split(
            format, "{\"name\": \"add\", \"parameters\": {\"a\": 1}.5e3, \"b\": \"x\"}}");
        ASSERT_EQ(s.calls.size(), 1u);
        EXPECT_EQ(args(s.calls[0]), ojson({{"a", 1}}));
        EXPECT_EQ(s.content, "");
        ASSERT_EQ(s.warnings.size(), 1u);
        EXPECT_NE(s.warnings[0].find("unexpected text after the arguments"), std::string::npos);
    }
}

// Gemma (Google's "Function calling with Gemma" guide, JSON variant): {"name": function name,
// "parameters": dictionary of argument name and its value}; a fence around it is accepted.
TEST(ToolCallsGemma3, JsonCallBareAndFenced) {
    const std::string bare =
        "{\"name\": \"get_product_name_by_PID\", \"parameters\": {\"PID\": \"807ZPKBL9V\"}}";
    const Streamed a = check_every_split(ToolCallFormat::Gemma3, bare);
    ASSERT_EQ(a.calls.size(), 1u);
    EXPECT_EQ(args(a.calls[0])["PID"], "807ZPKBL9V");
    const Streamed b =
        check_every_split(ToolCallFormat::Gemma3, "```tool_code\n" + bare + "\n```\n");
    ASSERT_EQ(b.calls.size(), 1u);
    EXPECT_EQ(b.calls[0].name, "get_product_name_by_PID");
    EXPECT_EQ(b.content, "");
    EXPECT_TRUE(b.warnings.empty());
    const Streamed c = check_every_split(ToolCallFormat::Gemma3, "The name is Pixel 9.");
    EXPECT_EQ(c.content, "The name is Pixel 9.");
}

ojson weather_tools() {
    return ojson::parse(R"([{"type": "function", "function": {"name": "get_weather",
        "description": "Weather in a city", "parameters": {"type": "object", "properties":
        {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}},
        "required": ["city"]}}},
        {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object",
        "properties": {"zone": {"type": "string"}}, "required": ["zone"]}}}])");
}

bool grammar_accepts(const std::shared_ptr<const grammar::Grammar>& g, const std::string& text) {
    grammar::Matcher m(g);
    return m.accept(text) && m.complete();
}

TEST(ToolCallGrammar, RequiredCallsInEachFormat) {
    ToolOptions options;
    options.tools = weather_tools();
    options.choice = ToolChoice::Required;
    const auto hermes = tool_call_grammar(ToolCallFormat::Hermes, options);
    EXPECT_TRUE(grammar_accepts(hermes,
                                "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                                "{\"city\":\"Oslo\"}}\n</tool_call>"));
    EXPECT_TRUE(grammar_accepts(
        hermes,
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
        "{\"city\":\"Oslo\"}}\n</tool_call>\n"
        "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\":\"UTC\"}}\n</tool_call>"));
    EXPECT_FALSE(grammar_accepts(hermes,
                                 "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                                 "{\"town\":\"Oslo\"}}\n</tool_call>"));
    EXPECT_FALSE(grammar_accepts(hermes, "Sure!"));
    const auto llama = tool_call_grammar(ToolCallFormat::Llama3, options);
    EXPECT_TRUE(grammar_accepts(
        llama, "{\"name\": \"get_weather\", \"parameters\": {\"city\":\"Oslo\",\"unit\":\"c\"}}"));
    EXPECT_FALSE(grammar_accepts(
        llama, "{\"name\": \"get_weather\", \"parameters\": {\"city\":\"Oslo\",\"unit\":\"k\"}}"));
    const auto harmony = tool_call_grammar(ToolCallFormat::Harmony, options);
    EXPECT_TRUE(grammar_accepts(
        harmony, harmony_sentinel("channel") + "commentary to=functions.get_time " +
                     harmony_sentinel("constrain") + "json" + harmony_sentinel("message") +
                     "{\"zone\":\"UTC\"}" + harmony_sentinel("call")));
}

TEST(ToolCallGrammar, NamedChoiceAndOneCallWithoutParallel) {
    ToolOptions options;
    options.tools = weather_tools();
    options.choice = ToolChoice::Named;
    options.named = "get_time";
    options.parallel = false;
    const auto g = tool_call_grammar(ToolCallFormat::Hermes, options);
    EXPECT_TRUE(grammar_accepts(
        g,
        "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\":\"UTC\"}}\n</tool_call>"));
    EXPECT_FALSE(grammar_accepts(g,
                                 "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                                 "{\"city\":\"Oslo\"}}\n</tool_call>"));
    EXPECT_FALSE(grammar_accepts(
        g,
        "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\":\"UTC\"}}\n</tool_call>\n"
        "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\":\"UTC\"}}\n</tool_call>"));
}

TEST(ToolCallGrammar, UnsupportedSchemaFeatureNamesTheToolAndKeyword) {
    ToolOptions options;
    options.tools = ojson::parse(R"([{"type": "function", "function": {"name": "f",
        "parameters": {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}}}}}])");
    options.choice = ToolChoice::Required;
    try {
        tool_call_grammar(ToolCallFormat::Hermes, options);
        FAIL() << "minimum is not enforceable";
    } catch (const ToolError& e) {
        EXPECT_NE(std::string(e.what()).find("'f'"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("minimum"), std::string::npos) << e.what();
        EXPECT_EQ(e.field(), "tools[0].function.parameters");
    }
}

TEST(ToolOptionsCheck, MalformedToolsAreRefusedByField) {
    ToolOptions options;
    options.tools = ojson::parse(R"([{"type": "function", "function": {"name": "has space"}}])");
    EXPECT_THROW(validate_tool_options(options), ToolError);
    options.tools = ojson::parse(R"([{"type": "retrieval"}])");
    EXPECT_THROW(validate_tool_options(options), ToolError);
    options.tools = weather_tools();
    options.choice = ToolChoice::Named;
    options.named = "nope";
    try {
        validate_tool_options(options);
        FAIL();
    } catch (const ToolError& e) {
        EXPECT_EQ(e.field(), "tool_choice");
    }
}

TEST(ToolCallFormats, DetectedFromTemplates) {
    EXPECT_EQ(detect_tool_call_format("{{ '<tool_call>' }}", false), ToolCallFormat::Hermes);
    EXPECT_EQ(detect_tool_call_format("<|start_header_id|>... '\"parameters\": '", false),
              ToolCallFormat::Llama3);
    EXPECT_EQ(detect_tool_call_format("<start_of_turn>user", false), ToolCallFormat::Gemma3);
    EXPECT_EQ(detect_tool_call_format("<|channel|>", true), ToolCallFormat::Harmony);
    EXPECT_EQ(detect_tool_call_format("<|im_start|>", false), ToolCallFormat::None);
}

TEST(TemplateMessages, ToolCallsAndResultsInOpenAiShape) {
    std::vector<ChatMessage> messages(3);
    messages[0].role = "user";
    messages[0].content = "Weather in Oslo?";
    messages[1].role = "assistant";
    messages[1].tool_calls = {{"call_1", "get_weather", "{\"city\": \"Oslo\"}"}};
    messages[2].role = "tool";
    messages[2].content = "{\"temp\": 3}";
    messages[2].tool_call_id = "call_1";
    messages[2].name = "get_weather";
    ToolOptions tools;
    tools.tools = weather_tools();
    const TemplateMessages t = template_messages(messages, ToolCallFormat::Hermes, &tools);
    EXPECT_EQ(t.tools, tools.tools);
    EXPECT_EQ(t.messages[1]["tool_calls"][0],
              ojson::parse(R"({"id": "call_1", "type": "function", "function":
                  {"name": "get_weather", "arguments": {"city": "Oslo"}}})"));
    EXPECT_FALSE(t.messages[0].contains("tool_calls")) << "templates test 'tool_calls' in message";
    EXPECT_EQ(t.messages[2]["tool_call_id"], "call_1");
    tools.choice = ToolChoice::None;
    EXPECT_TRUE(template_messages(messages, ToolCallFormat::Hermes, &tools).tools.is_null());
}

TEST(TemplateMessages, GemmaGetsItsPromptConvention) {
    std::vector<ChatMessage> messages(4);
    messages[0] = {"user", "Weather in Oslo?"};
    messages[1].role = "assistant";
    messages[1].tool_calls = {{"call_1", "get_weather", "{\"city\": \"Oslo\"}"}};
    messages[2] = {"tool", "{\"temp\": 3}"};
    messages[3] = {"tool", "sunny"};
    ToolOptions tools;
    tools.tools = weather_tools();
    const TemplateMessages t = template_messages(messages, ToolCallFormat::Gemma3, &tools);
    EXPECT_TRUE(t.tools.is_null());
    ASSERT_EQ(t.messages.size(), 3u) << "the two results share one user turn";
    const std::string first = t.messages[0]["content"];
    EXPECT_NE(first.find("\"get_weather\""), std::string::npos);
    EXPECT_TRUE(first.ends_with("Weather in Oslo?"));
    EXPECT_EQ(t.messages[1]["content"],
              "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}");
    EXPECT_EQ(t.messages[2]["role"], "user");
    EXPECT_EQ(t.messages[2]["content"],
              "```tool_output\n{\"temp\": 3}\n```\n```tool_output\nsunny\n```");
}

// tool_choice auto: free text until <tool_call>, then the call's syntax and its arguments'
// schema hold, until </tool_call>; then free again. A vocabulary of every printable ASCII
// character plus the two tags (as Qwen's has them as single tokens).
TEST(LazyToolConstraint, HoldsACallFromItsStartMarkerToItsEnd) {
    std::vector<std::string> pieces;
    for (char c = ' '; c <= '~'; ++c) pieces.emplace_back(1, c);
    pieces.emplace_back("\n");
    const auto open = static_cast<int32_t>(pieces.size());
    pieces.emplace_back("<tool_call>");
    const auto close = static_cast<int32_t>(pieces.size());
    pieces.emplace_back("</tool_call>");
    auto trie = std::make_shared<const grammar::TokenTrie>(pieces, std::vector<int32_t>{});
    auto id_of = [&](char c) {
        return c == '\n' ? static_cast<int32_t>(pieces.size() - 3) : c - ' ';
    };

    ToolOptions options;
    options.tools = weather_tools();
    grammar::GrammarConstraint constraint(tool_call_lazy_grammar(ToolCallFormat::Hermes, options),
                                          trie);
    LazyToolConstraint lazy(ToolCallFormat::Hermes, constraint);
    // Runs `ids` as generate() would: sampled through the constraint while engaged.
    std::vector<bool> engaged;
    auto run = [&](const std::vector<int32_t>& ids) {
        for (const int32_t id : ids) {
            const bool on = lazy.engaged();
            engaged.push_back(on);
            if (on) {
                EXPECT_TRUE(constraint.allows(id)) << "token " << pieces[static_cast<size_t>(id)];
                EXPECT_TRUE(constraint.accept(id));
            }
            lazy.on_answer_text(pieces[static_cast<size_t>(id)]);
        }
    };
    std::vector<int32_t> ids;
    for (char c : std::string("ok ")) ids.push_back(id_of(c));
    ids.push_back(open);
    run(ids);
    EXPECT_EQ(engaged, std::vector<bool>(4, false)) << "text before the call is free";
    ASSERT_TRUE(lazy.engaged());
    EXPECT_FALSE(constraint.allows(id_of('Z'))) << "the call's syntax holds";
    ids.clear();
    for (char c : std::string("\n{\"name\": \"get_time\", \"arguments\": {\"zone\":\"UTC\"}}\n")) {
        ids.push_back(id_of(c));
    }
    engaged.clear();
    run(ids);
    EXPECT_EQ(engaged, std::vector<bool>(ids.size(), true));
    ASSERT_TRUE(lazy.engaged());
    EXPECT_TRUE(constraint.allows(close));
    run({close});
    EXPECT_FALSE(lazy.engaged()) << "free again after </tool_call>";
    EXPECT_EQ(lazy.engagements(), 1);
}

TEST(LazyToolConstraint, ArgumentsFollowTheSchemaOnceEngaged) {
    std::vector<std::string> pieces;
    for (char c = ' '; c <= '~'; ++c) pieces.emplace_back(1, c);
    auto trie = std::make_shared<const grammar::TokenTrie>(pieces, std::vector<int32_t>{});
    ToolOptions options;
    options.tools = weather_tools();
    grammar::GrammarConstraint constraint(tool_call_lazy_grammar(ToolCallFormat::Llama3, options),
                                          trie);
    LazyToolConstraint lazy(ToolCallFormat::Llama3, constraint);
    const std::string text = "{\"name\": \"get_weather\", \"parameters\": {\"unit\"";
    for (char c : text) {
        if (lazy.engaged()) {
            if (!constraint.accept(c - ' ')) {
                // "unit" before the required "city": the schema's property order refuses it.
                EXPECT_EQ(c, 'u');
                return;
            }
        }
        lazy.on_answer_text(std::string(1, c));
    }
    FAIL() << "the schema should refuse \"unit\" before \"city\"";
}

// Harmony in auto mode: free until a message to functions.NAME opens, then that function's
// arguments and <|call|> (its sentinel in a harmony trie) hold.
TEST(LazyToolConstraint, HarmonyHoldsTheArgumentsOfTheCalledFunction) {
    std::vector<std::string> pieces;
    for (char c = ' '; c <= '~'; ++c) pieces.emplace_back(1, c);
    const auto call = static_cast<int32_t>(pieces.size());
    pieces.push_back(harmony_sentinel("call"));
    auto trie = std::make_shared<const grammar::TokenTrie>(pieces, std::vector<int32_t>{});
    ToolOptions options;
    options.tools = weather_tools();
    grammar::GrammarConstraint constraint(tool_call_lazy_grammar(ToolCallFormat::Harmony, options),
                                          trie);
    LazyToolConstraint lazy(ToolCallFormat::Harmony, constraint);
    EXPECT_FALSE(lazy.engaged());
    lazy.on_call_start("get_time");
    ASSERT_TRUE(lazy.engaged());
    EXPECT_FALSE(constraint.allows(call)) << "arguments first";
    for (char c : std::string("{\"zone\":\"UTC\"}")) {
        ASSERT_TRUE(lazy.engaged());
        ASSERT_TRUE(constraint.accept(c - ' ')) << c;
    }
    ASSERT_TRUE(lazy.engaged());
    EXPECT_TRUE(constraint.allows(call));
    EXPECT_TRUE(constraint.accept(call));
    EXPECT_FALSE(lazy.engaged());
    lazy.on_call_start("no_such_tool");
    EXPECT_FALSE(lazy.engaged()) << "an unknown function is left to the router's warning";
}

}  // namespace
}  // namespace ember
