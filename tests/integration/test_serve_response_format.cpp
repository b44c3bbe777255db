// ember serve honours response_format on both endpoints: the answer parses as JSON (and has
// the schema's required shape, streamed too), and an unsupported schema feature is a 400
// naming the keyword, never ignored.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "tests/support/fixtures.h"
#include "tests/support/serve.h"
#include "tests/support/temp_dir.h"

namespace ember::test {
namespace {

using json = nlohmann::json;

const char* const kQwen = "arch/qwen3/qwen3.gguf";

json post(httplib::Client& c, const std::string& path, const json& body, int& status) {
    auto r = c.Post(path.c_str(), body.dump(), "application/json");
    EXPECT_TRUE(r) << "no response from " << path;
    if (!r) return json();
    status = r->status;
    return json::parse(r->body);
}

const json kSchema = json::parse(R"({"type": "object", "properties": {
    "city": {"type": "string", "maxLength": 10}, "rank": {"type": "integer"},
    "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2}},
    "required": ["city", "rank"], "additionalProperties": false})");

void expect_schema_shape(const std::string& text) {
    const json v = json::parse(text);  // throws (fails the test) on anything but JSON
    ASSERT_TRUE(v.is_object()) << text;
    ASSERT_TRUE(v.contains("city") && v["city"].is_string()) << text;
    EXPECT_LE(v["city"].get<std::string>().size(), 40u) << text;  // 10 characters, UTF-8
    ASSERT_TRUE(v.contains("rank") && v["rank"].is_number_integer()) << text;
    for (const auto& [key, value] : v.items()) {
        EXPECT_TRUE(key == "city" || key == "rank" || key == "tags") << text;
    }
}

TEST(ServeResponseFormat, JsonSchemaAndJsonObjectOnBothEndpoints) {
    EMBER_REQUIRE_FIXTURE(kQwen);
    TempDir dir;
    ServeProcess server({"-m", fixture_path(kQwen), "--no-db", "-t", "1"}, dir.file("log"));
    ASSERT_GT(server.port(), 0) << server.process().log();
    auto c = server.client();
    const json format = {
        {"type", "json_schema"},
        {"json_schema", {{"name", "place"}, {"strict", true}, {"schema", kSchema}}}};
    for (const int seed : {1, 2, 3}) {
        int status = 0;
        const json chat = post(*c, "/v1/chat/completions",
                               {{"messages", {{{"role", "user"}, {"content", "A place?"}}}},
                                {"max_tokens", 40},
                                {"temperature", 1.5},
                                {"seed", seed},
                                {"response_format", format}},
                               status);
        ASSERT_EQ(status, 200) << chat.dump();
        expect_schema_shape(chat["choices"][0]["message"]["content"].get<std::string>());
        const json completion = post(*c, "/v1/completions",
                                     {{"prompt", "JSON:"},
                                      {"max_tokens", 30},
                                      {"temperature", 1.5},
                                      {"seed", seed},
                                      {"response_format", format}},
                                     status);
        ASSERT_EQ(status, 200) << completion.dump();
        expect_schema_shape(completion["choices"][0]["text"].get<std::string>());
    }
    int status = 0;
    const json object = post(*c, "/v1/completions",
                             {{"prompt", "JSON:"},
                              {"max_tokens", 24},
                              {"temperature", 1.5},
                              {"response_format", {{"type", "json_object"}}}},
                             status);
    ASSERT_EQ(status, 200) << object.dump();
    EXPECT_TRUE(json::parse(object["choices"][0]["text"].get<std::string>()).is_object());

    // Streamed: the deltas put together are the same kind of JSON.
    json streamed = {{"messages", {{{"role", "user"}, {"content", "A place?"}}}},
                     {"max_tokens", 40},
                     {"temperature", 1.5},
                     {"seed", 9},
                     {"stream", true},
                     {"response_format", format}};
    auto r = c->Post("/v1/chat/completions", streamed.dump(), "application/json");
    ASSERT_TRUE(r);
    std::string text;
    for (const auto& e : sse_events(r->body)) {
        for (const auto& choice : e["choices"]) {
            if (choice.contains("delta") && choice["delta"].contains("content")) {
                text += choice["delta"]["content"].get<std::string>();
            }
        }
    }
    expect_schema_shape(text);
}

TEST(ServeResponseFormat, UnsupportedSchemaFeaturesAre400NamingThem) {
    EMBER_REQUIRE_FIXTURE(kQwen);
    TempDir dir;
    ServeProcess server({"-m", fixture_path(kQwen), "--no-db", "-t", "1"}, dir.file("log"));
    ASSERT_GT(server.port(), 0) << server.process().log();
    auto c = server.client();
    const std::vector<std::pair<json, std::string>> cases = {
        {json::parse(R"({"type": "string", "pattern": "^a+$"})"), "'pattern'"},
        {json::parse(
             R"({"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}}})"),
         "'minimum' at /properties/n"},
        {json::parse(R"({"oneOf": [{"type": "string"}, {"type": "integer"}]})"), "'oneOf'"}};
    for (const auto& [schema, named] : cases) {
        for (const char* path : {"/v1/chat/completions", "/v1/completions"}) {
            json body = {
                {"max_tokens", 8},
                {"response_format",
                 {{"type", "json_schema"}, {"json_schema", {{"name", "s"}, {"schema", schema}}}}}};
            if (std::string(path) == "/v1/completions") {
                body["prompt"] = "x";
            } else {
                body["messages"] = {{{"role", "user"}, {"content", "x"}}};
            }
            int status = 0;
            const json e = post(*c, path, body, status);
            EXPECT_EQ(status, 400) << e.dump();
            const std::string message = e["error"]["message"].get<std::string>();
            EXPECT_NE(message.find(named), std::string::npos) << message;
            EXPECT_EQ(e["error"]["param"], "response_format.json_schema.schema");
        }
    }
    int status = 0;
    const json e = post(*c, "/v1/completions",
                        {{"prompt", "x"}, {"response_format", {{"type", "xml"}}}}, status);
    EXPECT_EQ(status, 400);
    EXPECT_EQ(e["error"]["param"], "response_format.type");
}

}  // namespace
}  // namespace ember::test
