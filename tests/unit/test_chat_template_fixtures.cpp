// Chat templates against HF transformers' renderings:
// - fixtures/templates: 13 real model templates, each rendered by jinja2 the way HF does it
//   for 4 conversations with and without add_generation_prompt (expected.json, produced by
//   shared/tools/render_templates.py). Every case must match byte for byte; the cases where
//   jinja2 failed must fail here too, with the template's own message.
// - The chat templates embedded in the architecture GGUFs, against the apply_chat_template
//   renderings stored with the tokenizer references.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "engine/generate/conversation.h"
#include "engine/gguf/gguf.h"
#include "engine/template/template.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/support/fixtures.h"

namespace ember {
namespace {

constexpr TemplateTime kFixtureDate{2026, 11, 21, 12, 0, 0};

struct FixtureCase {
    std::string template_name;
    std::string conversation;
    bool add_generation_prompt = false;
    nlohmann::ordered_json messages;
    std::optional<std::string> text;   // expected rendering
    std::optional<std::string> error;  // or the error jinja2 raised
};

void PrintTo(const FixtureCase& c, std::ostream* os) {
    *os << c.template_name << " / " << c.conversation
        << (c.add_generation_prompt ? " / generation prompt" : "");
}

nlohmann::ordered_json load_json(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return nullptr;
    return nlohmann::ordered_json::parse(in);
}

// Read while tests are being registered, so no gtest assertion may run here; a missing file
// gives no cases and FixtureCount reports it.
std::vector<FixtureCase> load_cases() {
    std::vector<FixtureCase> cases;
    if (!test::fixture_exists("templates/expected.json")) return cases;
    const auto doc = load_json(test::fixture_path("templates/expected.json"));
    if (!doc.is_object()) return cases;
    for (const auto& c : doc["cases"]) {
        FixtureCase fc;
        fc.template_name = c["template"].get<std::string>();
        fc.conversation = c.value("conversation", "");
        fc.add_generation_prompt = c.value("add_generation_prompt", false);
        if (!fc.conversation.empty()) fc.messages = doc["conversations"][fc.conversation];
        if (c.contains("text")) fc.text = c["text"].get<std::string>();
        if (c.contains("error")) fc.error = c["error"].get<std::string>();
        cases.push_back(std::move(fc));
    }
    return cases;
}

std::string case_name(const testing::TestParamInfo<FixtureCase>& info) {
    std::string name = info.param.template_name + "_" + info.param.conversation +
                       (info.param.add_generation_prompt ? "_gen" : "_nogen");
    for (char& c : name) {
        const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        if (!ok) c = '_';
    }
    return name;
}

class ChatTemplateFixture : public testing::TestWithParam<FixtureCase> {};

TEST_P(ChatTemplateFixture, RendersLikeHfTransformers) {
    const FixtureCase& c = GetParam();
    const std::string source =
        test::read_file(test::fixture_path("templates/" + c.template_name + ".jinja"));
    ASSERT_FALSE(source.empty());
    std::optional<ChatTemplate> tpl;
    try {
        tpl.emplace(source);
    } catch (const TemplateError& e) {
        FAIL() << "template does not compile: " << e.what();
    }
    ChatTemplateInputs inputs;
    inputs.messages = c.messages;
    inputs.add_generation_prompt = c.add_generation_prompt;
    inputs.bos_token = "<s>";
    inputs.eos_token = "</s>";
    inputs.now = kFixtureDate;
    if (c.text) {
        try {
            EXPECT_EQ(tpl->render(inputs), *c.text);
        } catch (const TemplateError& e) {
            FAIL() << "render failed: " << e.what();
        }
        return;
    }
    ASSERT_TRUE(c.error.has_value());
    try {
        const std::string out = tpl->render(inputs);
        FAIL() << "expected the error \"" << *c.error << "\", rendered:\n" << out;
    } catch (const TemplateError& e) {
        EXPECT_EQ(e.kind(), TemplateError::Kind::Raised);
        EXPECT_EQ(e.message(), *c.error);
        EXPECT_EQ(std::string(e.what()), *c.error);
        EXPECT_GT(e.line(), 0);
    }
}

INSTANTIATE_TEST_SUITE_P(Templates, ChatTemplateFixture, testing::ValuesIn(load_cases()),
                         case_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(ChatTemplateFixture);

TEST(ChatTemplateFixtures, FixtureCount) {
    EMBER_REQUIRE_FIXTURE("templates/expected.json");
    const auto cases = load_cases();
    // Every template in the fixture directory is rendered for each of the fixture's
    // conversations, with and without the generation prompt (fixtures/README.md).
    const auto doc = load_json(test::fixture_path("templates/expected.json"));
    std::set<std::string> templates_on_disk;
    for (const auto& entry : std::filesystem::directory_iterator(test::fixture_path("templates")))
        if (entry.path().extension() == ".jinja") templates_on_disk.insert(entry.path().stem());
    ASSERT_GE(templates_on_disk.size(), 16u);  // the README names 16 families
    EXPECT_EQ(cases.size(), templates_on_disk.size() * doc["conversations"].size() * 2);
    std::set<std::string> templates_with_cases;
    for (const auto& c : cases) templates_with_cases.insert(c.template_name);
    EXPECT_EQ(templates_with_cases, templates_on_disk);
    std::size_t errors = 0;
    for (const auto& c : cases) errors += c.error ? 1 : 0;
    EXPECT_EQ(errors, 4u);  // Gemma 2 refuses the system role
}

// Every template compiles once and renders repeatedly with the same result.
TEST(ChatTemplateFixtures, CompiledTemplatesAreReusable) {
    EMBER_REQUIRE_FIXTURE("templates/expected.json");
    const auto doc = load_json(test::fixture_path("templates/expected.json"));
    const ChatTemplate tpl(
        test::read_file(test::fixture_path("templates/HuggingFaceTB-SmolLM3-3B.jinja")));
    ChatTemplateInputs inputs;
    inputs.messages = doc["conversations"]["multi"];
    inputs.now = kFixtureDate;
    const std::string first = tpl.render(inputs);
    EXPECT_FALSE(first.empty());
    for (int i = 0; i < 3; ++i) EXPECT_EQ(tpl.render(inputs), first);
}

// Tool calls, tool results, content parts and documents reach template paths that the
// expected.json conversations do not. Expected texts come from jinja2 configured as in
// render_templates.py.
struct ToolCase {
    const char* template_name;
    const char* messages;
    bool with_tools;
    const char* extra;  // further variables, JSON
    const char* expected;
};

// clang-format off
// An OpenAI-style request: tool schemas, then a conversation with a tool call and its result.
const char* const kTools = R"J([
  {
    "type": "function",
    "function": {
      "name": "get_weather",
      "description": "Get the weather «now»",
      "parameters": {
        "type": "object",
        "properties": {
          "location": {
            "type": "string",
            "description": "City"
          },
          "unit": {
            "type": "string",
            "enum": [
              "c",
              "f"
            ]
          },
          "days": {
            "type": "integer",
            "nullable": true
          },
          "tags": {
            "type": "array",
            "items": {
              "type": "string"
            }
          }
        },
        "required": [
          "location"
        ]
      }
    }
  },
  {
    "type": "function",
    "function": {
      "name": "noop",
      "description": "Nothing",
      "parameters": {
        "type": "object",
        "properties": {}
      }
    }
  }
])J";
const char* const kToolConversation = R"J([
  {
    "role": "system",
    "content": "Sys"
  },
  {
    "role": "user",
    "content": "Weather in Paris?"
  },
  {
    "role": "assistant",
    "content": "",
    "tool_calls": [
      {
        "id": "abc123xyz",
        "type": "function",
        "function": {
          "name": "get_weather",
          "arguments": {
            "location": "Paris",
            "unit": "c",
            "days": 3,
            "tags": [
              "a",
              "b"
            ],
            "nested": {
              "x": 1.5,
              "y": null,
              "z": true
            }
          }
        }
      }
    ]
  },
  {
    "role": "tool",
    "tool_call_id": "abc123xyz",
    "name": "get_weather",
    "content": "{\"temp\": 21}"
  },
  {
    "role": "assistant",
    "content": "It is 21."
  },
  {
    "role": "user",
    "content": "Thanks"
  }
])J";
const char* const kPartsConversation = R"J([
  {
    "role": "system",
    "content": [
      {
        "type": "text",
        "text": "Sys part"
      }
    ]
  },
  {
    "role": "user",
    "content": [
      {
        "type": "text",
        "text": "Look"
      },
      {
        "type": "image"
      },
      {
        "type": "text",
        "text": "this"
      }
    ]
  }
])J";

const ToolCase kToolCases[] = {
    {"Qwen-Qwen3-0.6B", kToolConversation, true, "{}",
     R"X(<|im_start|>system
Sys

# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
<tools>
{"type": "function", "function": {"name": "get_weather", "description": "Get the weather «now»", "parameters": {"type": "object", "properties": {"location": {"type": "string", "description": "City"}, "unit": {"type": "string", "enum": ["c", "f"]}, "days": {"type": "integer", "nullable": true}, "tags": {"type": "array", "items": {"type": "string"}}}, "required": ["location"]}}}
{"type": "function", "function": {"name": "noop", "description": "Nothing", "parameters": {"type": "object", "properties": {}}}}
</tools>

For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:
<tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call><|im_end|>
<|im_start|>user
Weather in Paris?<|im_end|>
<|im_start|>assistant
<tool_call>
{"name": "get_weather", "arguments": {"location": "Paris", "unit": "c", "days": 3, "tags": ["a", "b"], "nested": {"x": 1.5, "y": null, "z": true}}}
</tool_call><|im_end|>
<|im_start|>user
<tool_response>
{"temp": 21}
</tool_response><|im_end|>
<|im_start|>assistant
It is 21.<|im_end|>
<|im_start|>user
Thanks<|im_end|>
<|im_start|>assistant
)X"},
    {"Qwen3.5-4B", kToolConversation, true, "{}",
     R"X(<|im_start|>system
# Tools

You have access to the following functions:

<tools>
{"type": "function", "function": {"name": "get_weather", "description": "Get the weather «now»", "parameters": {"type": "object", "properties": {"location": {"type": "string", "description": "City"}, "unit": {"type": "string", "enum": ["c", "f"]}, "days": {"type": "integer", "nullable": true}, "tags": {"type": "array", "items": {"type": "string"}}}, "required": ["location"]}}}
{"type": "function", "function": {"name": "noop", "description": "Nothing", "parameters": {"type": "object", "properties": {}}}}
</tools>

If you choose to call a function ONLY reply in the following format with NO suffix:

<tool_call>
<function=example_function_name>
<parameter=example_parameter_1>
value_1
</parameter>
<parameter=example_parameter_2>
This is the value for the second parameter
that can span
multiple lines
</parameter>
</function>
</tool_call>

<IMPORTANT>
Reminder:
- Function calls MUST follow the specified format: an inner <function=...></function> block must be nested within <tool_call></tool_call> XML tags
- Required parameters MUST be specified
- You may provide optional reasoning for your function call in natural language BEFORE the function call, but NOT after
- If there is no function call available, answer the question like normal with your current knowledge and do not tell the user about function calls
</IMPORTANT>

Sys<|im_end|>
<|im_start|>user
Weather in Paris?<|im_end|>
<|im_start|>assistant
<tool_call>
<function=get_weather>
<parameter=location>
Paris
</parameter>
<parameter=unit>
c
</parameter>
<parameter=days>
3
</parameter>
<parameter=tags>
["a", "b"]
</parameter>
<parameter=nested>
{"x": 1.5, "y": null, "z": true}
</parameter>
</function>
</tool_call><|im_end|>
<|im_start|>user
<tool_response>
{"temp": 21}
</tool_response><|im_end|>
<|im_start|>assistant
It is 21.<|im_end|>
<|im_start|>user
Thanks<|im_end|>
<|im_start|>assistant
<think>
)X"},
    {"meta-llama-Llama-3.2-3B-Instruct", kToolConversation, true, "{}",
     R"X(<s><|start_header_id|>system<|end_header_id|>

Environment: ipython
Cutting Knowledge Date: December 2023
Today Date: 21 Nov 2026

Sys<|eot_id|><|start_header_id|>user<|end_header_id|>

Given the following functions, please respond with a JSON for a function call with its proper arguments that best answers the given prompt.

Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.Do not use variables.

{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the weather «now»",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {
                    "type": "string",
                    "description": "City"
                },
                "unit": {
                    "type": "string",
                    "enum": [
                        "c",
                        "f"
                    ]
                },
                "days": {
                    "type": "integer",
                    "nullable": true
                },
                "tags": {
                    "type": "array",
                    "items": {
                        "type": "string"
                    }
                }
            },
            "required": [
                "location"
            ]
        }
    }
}

{
    "type": "function",
    "function": {
        "name": "noop",
        "description": "Nothing",
        "parameters": {
            "type": "object",
            "properties": {}
        }
    }
}

Weather in Paris?<|eot_id|><|start_header_id|>assistant<|end_header_id|>

{"name": "get_weather", "parameters": {"location": "Paris", "unit": "c", "days": 3, "tags": ["a", "b"], "nested": {"x": 1.5, "y": null, "z": true}}}<|eot_id|><|start_header_id|>ipython<|end_header_id|>

"{\"temp\": 21}"<|eot_id|><|start_header_id|>assistant<|end_header_id|>

It is 21.<|eot_id|><|start_header_id|>user<|end_header_id|>

Thanks<|eot_id|><|start_header_id|>assistant<|end_header_id|>

)X"},
    {"google-gemma-4-31B-it", kToolConversation, true, "{}",
     R"X(<s><|turn>system
Sys<|tool>declaration:get_weather{description:<|"|>Get the weather «now»<|"|>,parameters:{properties:{days:{nullable:true,type:<|"|>INTEGER<|"|>},location:{description:<|"|>City<|"|>,type:<|"|>STRING<|"|>},tags:{items:{type:<|"|>STRING<|"|>},type:<|"|>ARRAY<|"|>},unit:{enum:[<|"|>c<|"|>,<|"|>f<|"|>],type:<|"|>STRING<|"|>}},required:[<|"|>location<|"|>],type:<|"|>OBJECT<|"|>}}<tool|><|tool>declaration:noop{description:<|"|>Nothing<|"|>,parameters:{type:<|"|>OBJECT<|"|>}}<tool|><turn|>
<|turn>user
Weather in Paris?<turn|>
<|turn>model
<|tool_call>call:get_weather{days:3,location:<|"|>Paris<|"|>,nested:{x:1.5,y:None,z:true},tags:[<|"|>a<|"|>,<|"|>b<|"|>],unit:<|"|>c<|"|>}<tool_call|><|tool_response>response:get_weather{value:<|"|>{"temp": 21}<|"|>}<tool_response|>It is 21.<turn|>
<|turn>user
Thanks<turn|>
<|turn>model
<|channel>thought
<channel|>)X"},
    {"mistralai-Mistral-Nemo-Instruct-2407", kToolConversation, true, "{}",
     R"X(<s>[INST]Weather in Paris?[/INST][TOOL_CALLS][{"name": "get_weather", "arguments": {"location": "Paris", "unit": "c", "days": 3, "tags": ["a", "b"], "nested": {"x": 1.5, "y": null, "z": true}}, "id": "abc123xyz"}]</s>[TOOL_RESULTS]{"content": {"temp": 21}, "call_id": "abc123xyz"}[/TOOL_RESULTS]It is 21.</s>[AVAILABLE_TOOLS][{"type": "function", "function": {"name": "get_weather", "description": "Get the weather «now»", "parameters": {"type": "object", "properties": {"location": {"type": "string", "description": "City"}, "unit": {"type": "string", "enum": ["c", "f"]}, "days": {"type": "integer", "nullable": true}, "tags": {"type": "array", "items": {"type": "string"}}}, "required": ["location"]}}}, {"type": "function", "function": {"name": "noop", "description": "Nothing", "parameters": {"type": "object", "properties": {}}}}][/AVAILABLE_TOOLS][INST]Sys

Thanks[/INST])X"},
    {"ibm-granite-granite-4.0", kPartsConversation, false, R"X({"documents": [{"title": "T", "text": "body"}]})X",
     R"X(<|start_of_role|>system<|end_of_role|>Sys part

You are a helpful assistant with access to the following documents. You may use one or more documents to assist with the user query.

You are given a list of documents within <documents></documents> XML tags:
<documents>
{"title": "T", "text": "body"}
</documents>

Write the response to the user's input by strictly aligning with the facts in the provided documents. If the information needed to answer the question is not available in the documents, inform the user that the question cannot be answered based on the available data.<|end_of_text|>
<|start_of_role|>user<|end_of_role|>Look
this<|end_of_text|>
<|start_of_role|>assistant<|end_of_role|>)X"},
};
// clang-format on

TEST(ChatTemplateFixtures, ToolCallingConversations) {
    for (const auto& c : kToolCases) {
        SCOPED_TRACE(c.template_name);
        const std::string path = std::string("templates/") + c.template_name + ".jinja";
        EMBER_REQUIRE_FIXTURE(path);
        const ChatTemplate tpl(test::read_file(test::fixture_path(path)));
        ChatTemplateInputs inputs;
        inputs.messages = nlohmann::ordered_json::parse(c.messages);
        if (c.with_tools) inputs.tools = nlohmann::ordered_json::parse(kTools);
        inputs.extra = nlohmann::ordered_json::parse(c.extra);
        inputs.bos_token = "<s>";
        inputs.eos_token = "</s>";
        inputs.now = kFixtureDate;
        try {
            EXPECT_EQ(tpl.render(inputs), c.expected);
        } catch (const TemplateError& e) {
            ADD_FAILURE() << e.what();
        }
    }
}

struct EmbeddedTemplate {
    const char* tokref;  // tokenizers/ref/tokref_<name>.json
    const char* gguf;    // the model whose GGUF carries that tokenizer and chat template
};

std::string vocab_token(const GgufFile& file, const char* id_key) {
    const auto id = file.get_int(id_key);
    const GgufArray* tokens = file.get_array("tokenizer.ggml.tokens");
    if (!id || tokens == nullptr || *id < 0 ||
        static_cast<std::size_t>(*id) >= tokens->strings.size()) {
        return "";
    }
    return tokens->strings[static_cast<std::size_t>(*id)];
}

// HF renders with add_generation_prompt=True and the tokenizer's special tokens.
TEST(ChatTemplateFixtures, GgufTemplatesMatchTokenizerReferences) {
    const EmbeddedTemplate models[] = {
        {"qwen3", "arch/qwen3/qwen3.gguf"},
        {"llama3", "arch/lfm2/lfm2.gguf"},
    };
    for (const auto& m : models) {
        SCOPED_TRACE(m.gguf);
        const std::string ref_path = std::string("tokenizers/ref/tokref_") + m.tokref + ".json";
        EMBER_REQUIRE_FIXTURE(ref_path);
        EMBER_REQUIRE_FIXTURE(m.gguf);
        const auto file = GgufFile::open(test::fixture_path(m.gguf));
        const auto source = file->get_string("tokenizer.chat_template");
        ASSERT_TRUE(source.has_value());
        const ChatTemplate tpl(*source);
        const auto ref = load_json(test::fixture_path(ref_path));
        ASSERT_TRUE(ref.contains("chat"));
        ASSERT_FALSE(ref["chat"].empty());
        for (const auto& chat : ref["chat"]) {
            ChatTemplateInputs inputs;
            inputs.messages = chat["messages"];
            inputs.add_generation_prompt = true;
            inputs.bos_token = vocab_token(*file, "tokenizer.ggml.bos_token_id");
            inputs.eos_token = vocab_token(*file, "tokenizer.ggml.eos_token_id");
            inputs.extra = chat["kwargs"];
            const std::string text = tpl.render(inputs);
            EXPECT_EQ(text, chat["text"].get<std::string>()) << chat["kwargs"].dump();
            // And tokenized the way a conversation tokenizes its prompt: identical ids.
            const Tokenizer tokenizer(*file);
            const auto ids = tokenize_rendered(tokenizer, text, inputs.bos_token);
            EXPECT_EQ(ids, chat["ids"].get<std::vector<int32_t>>()) << text;
        }
    }
}

}  // namespace
}  // namespace ember
