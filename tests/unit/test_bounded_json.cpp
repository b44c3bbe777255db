// engine/util/bounded_json.h: the one bounded parse of JSON from outside, and the sites that
// parse untrusted JSON through it refusing deep or oversized documents with the bound named.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "app/serve/api.h"
#include "engine/generate/constrained.h"
#include "engine/grammar/grammar.h"
#include "engine/util/bounded_json.h"
#include "ui/tools/tool_set.h"

namespace ember {
namespace {

using ojson = nlohmann::ordered_json;

std::string nested_arrays(int depth) {
    return std::string(static_cast<size_t>(depth), '[') +
           std::string(static_cast<size_t>(depth), ']');
}

std::string limit_error(const std::string& text, const JsonLimits& limits,
                        JsonLimitError::Bound* bound = nullptr) {
    try {
        parse_json_bounded(text, limits, "input.json");
    } catch (const JsonLimitError& e) {
        if (bound != nullptr) *bound = e.bound();
        return e.what();
    }
    return "";
}

TEST(BoundedJson, DepthIsTheLevelsOfContainers) {
    const JsonLimits three{1024, 3};
    EXPECT_EQ(parse_json_bounded(nested_arrays(3), three, "x"), ojson::parse("[[[]]]"));
    EXPECT_EQ(parse_json_bounded(R"({"a": [{"b": 1}]})", three, "x")["a"][0]["b"], 1);
    // Brackets inside strings are text, not levels.
    EXPECT_EQ(parse_json_bounded(R"(["[[[[[["])", three, "x")[0], "[[[[[[");
    JsonLimitError::Bound bound = JsonLimitError::Bound::Size;
    EXPECT_EQ(limit_error(nested_arrays(4), three, &bound),
              "input.json: JSON nested deeper than 3 levels");
    EXPECT_EQ(bound, JsonLimitError::Bound::Depth);
    EXPECT_EQ(limit_error(R"({"a": {"b": {"c": {}}}})", three),
              "input.json: JSON nested deeper than 3 levels");
}

TEST(BoundedJson, AHundredThousandLevelsAreRefusedBeforeTheyAreBuilt) {
    EXPECT_EQ(limit_error(nested_arrays(100000), {}),
              "input.json: JSON nested deeper than 512 levels");
    EXPECT_EQ(parse_json_bounded(nested_arrays(kMaxJsonDepth), {}, "x").size(), 1u);
    EXPECT_TRUE(try_parse_json_bounded(nested_arrays(100000)).is_discarded());
}

TEST(BoundedJson, SizeIsBoundedBeforeParsing) {
    const JsonLimits small{8, kMaxJsonDepth};
    EXPECT_EQ(parse_json_bounded("[1,2,3]", small, "x").size(), 3u);
    JsonLimitError::Bound bound = JsonLimitError::Bound::Depth;
    EXPECT_EQ(limit_error("[1,2,3,4]", small, &bound), "input.json: JSON larger than 8 bytes");
    EXPECT_EQ(bound, JsonLimitError::Bound::Size);
    EXPECT_EQ(limit_error(std::string((size_t{1} << 20) + 1, ' '), {size_t{1} << 20, 8}),
              "input.json: JSON larger than 1 MiB");
    EXPECT_TRUE(try_parse_json_bounded("[1,2,3,4]", small).is_discarded());
}

TEST(BoundedJson, InvalidTextIsDiscardedOrThrownAsAsked) {
    EXPECT_TRUE(parse_json_bounded("{", {}, "x").is_discarded());
    EXPECT_THROW(parse_json_bounded("{", {}, "x", InvalidJson::Throw), nlohmann::json::parse_error);
    EXPECT_THROW(parse_json_bounded("[1e999]", {}, "x", InvalidJson::Throw),
                 nlohmann::json::out_of_range);
    EXPECT_TRUE(try_parse_json_bounded("not json").is_discarded());
}

TEST(BoundedJson, TheObserverSeesEveryEvent) {
    std::vector<nlohmann::json::parse_event_t> events;
    parse_json_bounded<nlohmann::json>(
        R"({"a": [1]})", {}, "x", InvalidJson::Throw,
        [&](nlohmann::json::parse_event_t e, const nlohmann::json&) { events.push_back(e); });
    using E = nlohmann::json::parse_event_t;
    EXPECT_EQ(events, (std::vector<E>{E::object_start, E::key, E::array_start, E::value,
                                      E::array_end, E::object_end}));
}

TEST(BoundedJson, ReadsAFileNoFurtherThanOneBytePastTheBound) {
    std::istringstream big(std::string(1000000, ' '));
    const JsonLimits limits{100, kMaxJsonDepth};
    const std::string text = read_json_text(big, limits);
    EXPECT_EQ(text.size(), 101u);
    EXPECT_THROW(parse_json_bounded(text, limits, "x"), JsonLimitError);
    std::istringstream small(R"({"a": 1})");
    EXPECT_EQ(read_json_text(small, limits), R"({"a": 1})");
}

// --- the sites ---------------------------------------------------------------------------------

TEST(BoundedJsonSites, TheServerRefusesADeepBodyNamingIt) {
    const std::string body = R"({"messages": )" + nested_arrays(100) + "}";
    try {
        serve::parse_chat_request(body, serve::RequestLimits{});
        FAIL() << "accepted";
    } catch (const serve::ApiError& e) {
        EXPECT_EQ(e.status(), 400);
        EXPECT_STREQ(e.what(), "the request body: JSON nested deeper than 64 levels");
    }
}

TEST(BoundedJsonSites, AToolsFileRefusesDeepNestingNamingTheFile) {
    const std::string tools = R"([{"type": "function", "function": {"name": "f", "parameters": )" +
                              nested_arrays(1000) + "}}]";
    try {
        ui::parse_tools_json(tools, "tools.json", "/tmp");
        FAIL() << "accepted";
    } catch (const ui::ToolsError& e) {
        EXPECT_STREQ(e.what(), "tools.json: JSON nested deeper than 512 levels");
    }
}

TEST(BoundedJsonSites, AJsonSchemaRefusesDeepNesting) {
    try {
        compile_output_format({OutputFormatKind::JsonSchema, nested_arrays(1000)});
        FAIL() << "accepted";
    } catch (const grammar::GrammarError& e) {
        EXPECT_NE(std::string(e.what()).find("the JSON schema: JSON nested deeper than 512 levels"),
                  std::string::npos)
            << e.what();
    }
}

}  // namespace
}  // namespace ember
