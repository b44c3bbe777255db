// JSON Schema compiled to GBNF: which texts the compiled grammar accepts, and which schemas
// are refused (naming the keyword).
#include <gtest/gtest.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/grammar/gbnf.h"
#include "engine/grammar/json_schema.h"
#include "engine/grammar/matcher.h"

using namespace ember::grammar;
using json = nlohmann::ordered_json;

namespace {

class Schema {
public:
    explicit Schema(const std::string& schema)
        : grammar_(std::make_shared<const Grammar>(
              parse_gbnf(json_schema_to_gbnf(json::parse(schema))))) {}
    bool accepts(const std::string& text) const {
        Matcher m(grammar_);
        return m.accept(text) && m.complete();
    }

private:
    std::shared_ptr<const Grammar> grammar_;
};

std::string refusal(const std::string& schema) {
    try {
        json_schema_to_gbnf(json::parse(schema));
    } catch (const SchemaError& e) {
        return e.keyword() + " @ " + e.path() + " | " + e.what();
    }
    return "";
}

}  // namespace

TEST(JsonSchema, ObjectsWithRequiredAndOptionalProperties) {
    const Schema s(R"({"type": "object", "properties": {
        "name": {"type": "string"}, "age": {"type": "integer"}, "ok": {"type": "boolean"}},
        "required": ["name"]})");
    EXPECT_TRUE(s.accepts(R"({"name":"x"})"));
    EXPECT_TRUE(s.accepts(R"({"name": "x", "age": 3, "ok": true})"));
    EXPECT_TRUE(s.accepts(R"({"name":"x","ok":false})"));
    EXPECT_TRUE(s.accepts("{\n  \"name\": \"x\",\n  \"age\": -12\n}"));
    EXPECT_FALSE(s.accepts(R"({"age":3})"));  // required name missing
    EXPECT_FALSE(s.accepts(R"({})"));
    EXPECT_FALSE(s.accepts(R"({"name":"x",})"));           // trailing comma
    EXPECT_FALSE(s.accepts(R"({"name":"x","age":3.5})"));  // not an integer
    EXPECT_FALSE(s.accepts(R"({"name":"x","age":03})"));   // leading zero
    EXPECT_FALSE(s.accepts(R"({"name":"x","other":1})"));  // undeclared
    EXPECT_FALSE(s.accepts(R"({"name":"x"} )"));           // nothing after the value
    // Nor before it: a program reading the answer gets JSON from its first byte.
    EXPECT_FALSE(s.accepts(R"( {"name":"x"})"));
}

TEST(JsonSchema, OnlyOptionalPropertiesNeedNoCommaBeforeTheFirst) {
    const Schema s(R"({"properties": {"a": {"type": "null"}, "b": {"type": "null"}}})");
    EXPECT_TRUE(s.accepts("{}"));
    EXPECT_TRUE(s.accepts(R"({"b":null})"));
    EXPECT_TRUE(s.accepts(R"({"a":null,"b":null})"));
    EXPECT_FALSE(s.accepts(R"({,"b":null})"));
    EXPECT_FALSE(s.accepts(R"({"b":null,"a":null})"));  // declared order
}

TEST(JsonSchema, StringsEscapesAndLengths) {
    const Schema any(R"({"type": "string"})");
    EXPECT_TRUE(any.accepts(R"("a \"quoted\" \\ \u00e9 \n é ✓")"));
    EXPECT_FALSE(any.accepts("\"raw\nnewline\""));
    EXPECT_FALSE(any.accepts(R"("\x")"));
    EXPECT_FALSE(any.accepts(R"("\ud800")"));  // a lone surrogate escape
    const Schema len(R"({"type": "string", "minLength": 2, "maxLength": 3})");
    EXPECT_FALSE(len.accepts(R"("a")"));
    EXPECT_TRUE(len.accepts(R"("ab")"));
    EXPECT_TRUE(len.accepts(R"("a\nb")"));  // an escape is one character
    EXPECT_TRUE(len.accepts(R"("éé✓")"));   // characters, not bytes
    EXPECT_FALSE(len.accepts(R"("abcd")"));
}

TEST(JsonSchema, NumbersEnumsConstAndNull) {
    const Schema n(R"({"type": "number"})");
    EXPECT_TRUE(n.accepts("-0.5e+10"));
    EXPECT_TRUE(n.accepts("12"));
    EXPECT_FALSE(n.accepts("1."));
    EXPECT_FALSE(n.accepts(".5"));
    EXPECT_FALSE(n.accepts("+1"));
    const Schema e(R"({"enum": ["red", 3, null, {"k": [1]}]})");
    EXPECT_TRUE(e.accepts(R"("red")"));
    EXPECT_TRUE(e.accepts("3"));
    EXPECT_TRUE(e.accepts("null"));
    EXPECT_TRUE(e.accepts(R"({"k":[1]})"));
    EXPECT_FALSE(e.accepts(R"("blue")"));
    const Schema typed_enum(R"({"type": "string", "enum": ["a", 1]})");
    EXPECT_TRUE(typed_enum.accepts(R"("a")"));
    EXPECT_FALSE(typed_enum.accepts("1"));  // not a string: invalid against the type
    const Schema c(R"({"const": "x\"y"})");
    EXPECT_TRUE(c.accepts(R"("x\"y")"));
    EXPECT_FALSE(c.accepts(R"("xy")"));
    const Schema types(R"({"type": ["integer", "null"]})");
    EXPECT_TRUE(types.accepts("7"));
    EXPECT_TRUE(types.accepts("null"));
    EXPECT_FALSE(types.accepts("true"));
}

TEST(JsonSchema, ArraysWithItemCounts) {
    const Schema a(
        R"({"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 3})");
    EXPECT_FALSE(a.accepts("[]"));
    EXPECT_FALSE(a.accepts("[1]"));
    EXPECT_TRUE(a.accepts("[1,2]"));
    EXPECT_TRUE(a.accepts("[1, 2, 3]"));
    EXPECT_FALSE(a.accepts("[1,2,3,4]"));
    EXPECT_FALSE(a.accepts("[1,\"2\"]"));
    const Schema free(R"({"type": "array"})");
    EXPECT_TRUE(free.accepts("[]"));
    EXPECT_TRUE(free.accepts(R"([1, "a", {"b": [null]}, true])"));
    const Schema none(R"({"type": "array", "maxItems": 0})");
    EXPECT_TRUE(none.accepts("[]"));
    EXPECT_FALSE(none.accepts("[1]"));
}

TEST(JsonSchema, RefsDefsRecursionAndAnyOf) {
    const Schema tree(R"({"$defs": {"node": {"type": "object", "properties": {
        "v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
        "required": ["v"]}}, "$ref": "#/$defs/node"})");
    EXPECT_TRUE(tree.accepts(R"({"v":1,"kids":[{"v":2},{"v":3,"kids":[{"v":4}]}]})"));
    EXPECT_FALSE(tree.accepts(R"({"v":1,"kids":[{"kids":[]}]})"));
    const Schema any(R"({"anyOf": [{"type": "string", "format": "date"}, {"type": "integer"}]})");
    EXPECT_TRUE(any.accepts(R"("2024-02-28")"));
    EXPECT_TRUE(any.accepts(R"("2024-12-31")"));
    EXPECT_FALSE(any.accepts(R"("2024-02-30")"));  // only real dates (Feb 29 is left out)
    EXPECT_FALSE(any.accepts(R"("2024-04-31")"));
    EXPECT_FALSE(any.accepts(R"("0000-01-01")"));
    EXPECT_TRUE(any.accepts("5"));
    EXPECT_FALSE(any.accepts(R"("2024-13-01")"));
    const Schema uuid(R"({"type": "string", "format": "uuid"})");
    EXPECT_TRUE(uuid.accepts(R"("123e4567-e89b-12d3-a456-426614174000")"));
    EXPECT_FALSE(uuid.accepts(R"("123e4567e89b12d3a456426614174000")"));
    const Schema dt(R"({"format": "date-time"})");
    EXPECT_TRUE(dt.accepts(R"("2024-01-02T03:04:05.123Z")"));
    EXPECT_TRUE(dt.accepts(R"("2024-01-02T23:59:59+05:30")"));
    EXPECT_FALSE(dt.accepts(R"("2024-01-02 03:04:05Z")"));
}

TEST(JsonSchema, EmptySchemaAndJsonObjectAcceptAnyJson) {
    const Schema s("{}");
    EXPECT_TRUE(s.accepts(R"([{"a": [1, 2.5e3, "x", null, false]}])"));
    EXPECT_FALSE(s.accepts(R"({"a" 1})"));
    Matcher m(std::make_shared<const Grammar>(parse_gbnf(json_object_gbnf())));
    EXPECT_FALSE(m.can_accept("[1]"));  // an object, not any value
    EXPECT_TRUE(m.accept(R"({"k": {"n": []}})"));
    EXPECT_TRUE(m.complete());
}

TEST(JsonSchema, UnsupportedKeywordsAreRefusedByName) {
    EXPECT_EQ(refusal(R"({"type": "string", "pattern": "^a+$"})"),
              "pattern @ / | unsupported JSON Schema keyword 'pattern' at the schema's top level");
    EXPECT_EQ(
        refusal(R"({"properties": {"n": {"type": "integer", "minimum": 3}}})"),
        "minimum @ /properties/n | unsupported JSON Schema keyword 'minimum' at /properties/n");
    EXPECT_EQ(refusal(R"({"oneOf": [{"type": "string"}]})").substr(0, 8), "oneOf @ ");
    EXPECT_EQ(refusal(R"({"type": "array", "prefixItems": []})").substr(0, 14), "prefixItems @ ");
    EXPECT_EQ(refusal(R"({"type": "string", "format": "ipv4"})").substr(0, 9), "format @ ");
    EXPECT_EQ(refusal(R"({"$ref": "#/$defs/missing"})"),
              "$ref @ / | JSON Schema keyword '$ref' at the schema's top level: '#/$defs/missing' "
              "does not name a definition of this schema");
    EXPECT_EQ(refusal(R"({"type": "tuple"})").substr(0, 7), "type @ ");
    EXPECT_EQ(refusal(R"({"type": "array", "minItems": 3, "maxItems": 2})").substr(0, 11),
              "maxItems @ ");
    // Annotations are fine.
    EXPECT_EQ(refusal(R"({"title": "t", "description": "d", "type": "null", "default": null})"),
              "");
}
