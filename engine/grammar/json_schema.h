// JSON Schema compiled to GBNF, so that constrained output always parses and validates.
//
// Supported: type (one or a list of object, array, string, number, integer, boolean, null);
// properties with required (properties appear in their declared order, optional ones may be
// left out); additionalProperties (accepted with any value: no undeclared property is ever
// generated, which every value of it allows); items, minItems, maxItems; enum and const (any
// JSON values); minLength, maxLength; format date, time, date-time, uuid, email; $ref to
// "#", "#/$defs/NAME" or "#/definitions/NAME" (recursion allowed); anyOf; allOf of one
// schema; the empty schema and `true` (any JSON value). Annotations (title, description,
// default, examples, $schema, $id, $comment, readOnly, writeOnly, deprecated) are ignored.
// Anything else (pattern, minimum, oneOf, not, if, prefixItems, ...) is refused with an error
// naming the keyword and where it is: never silently ignored.
//
// Output is compact JSON with optional whitespace (up to one newline and 20 blanks) between
// tokens; numbers have at most 16 integer and 16 fraction digits and a two-digit exponent.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "engine/grammar/grammar.h"

namespace ember::grammar {

// An unsupported or malformed schema. keyword() is the JSON Schema keyword at fault (empty
// when the fault is not one keyword's), path() the JSON pointer of the schema holding it.
class SchemaError : public GrammarError {
public:
    SchemaError(const std::string& message, std::string keyword, std::string path)
        : GrammarError(message), keyword_(std::move(keyword)), path_(std::move(path)) {}
    const std::string& keyword() const { return keyword_; }
    const std::string& path() const { return path_; }

private:
    std::string keyword_;
    std::string path_;
};

// GBNF text whose `root` rule matches the JSON texts valid against `schema` (optional leading
// whitespace included). Parse the schema as ordered_json: properties keep their order.
// Throws SchemaError; past a limit of `budget` (null: the defaults of CompileLimits), an error
// naming it: subschemas nested deeper than max_nesting ($ref hops count, so a chain of
// thousands of $refs is refused, not followed down the C++ stack), or the time limit. The
// GBNF is linear in the schema's size (a $ref target is compiled once).
std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema,
                                CompileBudget* budget = nullptr);

// GBNF for any JSON object (OpenAI's response_format {"type": "json_object"}).
std::string json_object_gbnf();

}  // namespace ember::grammar
