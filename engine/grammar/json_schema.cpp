#include "engine/grammar/json_schema.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <vector>

#include "engine/util/depth_guard.h"
#include "engine/util/utf8.h"

namespace ember::grammar {

namespace {

using json = nlohmann::ordered_json;

// Rules every compiled schema may use. Whitespace is bounded so that a model cannot spend its
// reply on blanks; strings exclude escaped surrogates (\uD800-\uDFFF), so each escape is one
// character as minLength/maxLength count them.
constexpr const char* kCommonRules = R"(ws ::= ( " " | "\n" [ \t]{0,20} )?
json-value ::= json-object | json-array | json-string | json-number | "true" | "false" | "null"
json-object ::= "{" ws ( json-string ws ":" ws json-value ws ( "," ws json-string ws ":" ws json-value ws )* )? "}"
json-array ::= "[" ws ( json-value ws ( "," ws json-value ws )* )? "]"
json-char ::= [^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" ( [0-9a-cA-CefEF] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2} ) )
json-string ::= "\"" json-char* "\""
json-int ::= "-"? ( "0" | [1-9] [0-9]{0,15} )
json-number ::= json-int ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,2} )?
json-boolean ::= "true" | "false"
json-null ::= "null"
date-part ::= [1-9] [0-9]{3} "-" ( ( "0" [13578] | "1" [02] ) "-" ( day-28 | "29" | "3" [01] ) | ( "0" [469] | "11" ) "-" ( day-28 | "29" | "30" ) | "02-" day-28 )
day-28 ::= "0" [1-9] | "1" [0-9] | "2" [0-8]
time-part ::= ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{1,6} )? ( "Z" | [+-] ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] )
hex4 ::= [0-9a-f]{4}
)";

const std::set<std::string>& annotation_keywords() {
    static const std::set<std::string> kIgnored = {
        "title", "description", "default",  "examples",  "$schema",
        "$id",   "$comment",    "readOnly", "writeOnly", "deprecated"};
    return kIgnored;
}

// A GBNF string literal for `bytes` (UTF-8 passes through; quotes, backslashes and control
// characters are escaped).
std::string literal(const std::string& bytes) {
    static const char* kHex = "0123456789ABCDEF";
    std::string out = "\"";
    for (const char c : bytes) {
        const auto b = static_cast<uint8_t>(c);
        if (c == '"' || c == '\\') {
            out += '\\';
            out += c;
        } else if (b < 0x20 || b == 0x7F) {
            out += "\\x";
            out += kHex[b >> 4];
            out += kHex[b & 15];
        } else {
            out += c;
        }
    }
    return out + "\"";
}

// A property name as a segment of an error's path: long names are cut, so that the paths of
// a deep schema under a megabyte-long name do not take a megabyte per level.
std::string path_segment(const std::string& name) {
    constexpr size_t kMax = 64;
    if (name.size() <= kMax) return name;
    return name.substr(0, utf8_cut(name, kMax)) + "...";
}

std::string json_type_of(const json& v) {
    if (v.is_object()) return "object";
    if (v.is_array()) return "array";
    if (v.is_string()) return "string";
    if (v.is_boolean()) return "boolean";
    if (v.is_null()) return "null";
    if (v.is_number_integer() || v.is_number_unsigned()) return "integer";
    if (v.is_number_float()) {
        const double d = v.get<double>();
        return std::isfinite(d) && std::floor(d) == d ? "integer" : "number";
    }
    return "number";
}

class SchemaCompiler {
public:
    SchemaCompiler(const json& root, CompileBudget& budget) : root_(root), budget_(budget) {}

    std::string compile() {
        const std::string value = rule_for(root_, "");
        // No blank before the value: a program reading the answer gets JSON that starts at its
        // first byte (a model's first token is often " {", which used to be taken).
        std::string out = "root ::= " + value + "\n";
        out += kCommonRules;
        out += rules_;
        return out;
    }

private:
    [[noreturn]] static void fail(const std::string& keyword, const std::string& path,
                                  const std::string& why) {
        const std::string where = path.empty() ? "the schema's top level" : path;
        throw SchemaError(why.empty()
                              ? "unsupported JSON Schema keyword '" + keyword + "' at " + where
                              : "JSON Schema keyword '" + keyword + "' at " + where + ": " + why,
                          keyword, path.empty() ? "/" : path);
    }

    std::string next_name() {
        std::string name = "s";  // (GCC 12 warns falsely about "literal" + std::string&&)
        name += std::to_string(counter_++);
        return name;
    }

    // "{m,n}" (n < 0: "{m,}").
    static std::string counts(int min, int max) {
        std::string out = "{";
        out += std::to_string(min);
        out += ",";
        if (max >= 0) out += std::to_string(max);
        return out + "}";
    }

    std::string new_rule(const std::string& body) {
        const std::string name = next_name();
        rules_ += name + " ::= " + body + "\n";
        return name;
    }

    static int count_of(const json& schema, const char* keyword, const std::string& path) {
        const json& v = schema.at(keyword);
        if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<long long>() >= 0)) {
            fail(keyword, path, "must be a non-negative integer");
        }
        if (v.get<unsigned long long>() > 10000)
            fail(keyword, path, "above 10000 is not supported");
        return static_cast<int>(v.get<unsigned long long>());
    }

    // A rule (or rule expression) matching the values valid against `schema`. Recursive:
    // every subschema and every $ref hop counts one level against max_nesting.
    std::string rule_for(const json& schema, const std::string& path) {
        const int limit = budget_.limits().max_nesting;
        const DepthGuard guard(depth_, limit, [&] {
            throw SchemaError("the JSON schema nests deeper than " + std::to_string(limit) +
                                  " levels at " + (path.empty() ? std::string("/") : path) +
                                  " (subschemas and $ref hops count; the limit on nesting)",
                              "", path.empty() ? "/" : path);
        });
        budget_.tick();
        if (schema.is_boolean()) {
            if (!schema.get<bool>()) fail("false", path, "no value is valid against it");
            return "json-value";
        }
        if (!schema.is_object()) fail("schema", path, "a schema must be an object or a boolean");
        check_keywords(schema, path);
        if (schema.contains("$ref")) return reference(schema.at("$ref"), path);
        if (schema.contains("const")) return new_rule(literal(schema.at("const").dump()));
        if (schema.contains("enum")) return enumeration(schema, path);
        if (schema.contains("anyOf")) return any_of(schema.at("anyOf"), path + "/anyOf");
        if (schema.contains("allOf")) {
            const json& all = schema.at("allOf");
            if (!all.is_array() || all.size() != 1) {
                fail("allOf", path, "only an allOf of exactly one schema is supported");
            }
            return rule_for(all[0], path + "/allOf/0");
        }
        if (!schema.contains("type")) return typeless(schema, path);
        const json& type = schema.at("type");
        if (type.is_string()) return typed(schema, type.get<std::string>(), path);
        if (!type.is_array() || type.empty())
            fail("type", path, "must be a string or a non-empty array");
        std::string body;
        for (const json& t : type) {
            if (!t.is_string()) fail("type", path, "must list type names");
            body += (body.empty() ? "" : " | ") + typed(schema, t.get<std::string>(), path);
        }
        return new_rule(body);
    }

    void check_keywords(const json& schema, const std::string& path) {
        static const std::set<std::string> kSupported = {
            "type",  "properties", "required",    "additionalProperties",
            "items", "minItems",   "maxItems",    "enum",
            "const", "minLength",  "maxLength",   "format",
            "$ref",  "$defs",      "definitions", "anyOf",
            "allOf"};
        for (const auto& [key, value] : schema.items()) {
            if (kSupported.contains(key) || annotation_keywords().contains(key)) continue;
            fail(key, path, "");
        }
    }

    // A schema with no type: properties imply an object, items an array, and so on; with
    // nothing to go by, any JSON value.
    std::string typeless(const json& schema, const std::string& path) {
        if (schema.contains("properties") || schema.contains("required"))
            return typed(schema, "object", path);
        if (schema.contains("items") || schema.contains("minItems") ||
            schema.contains("maxItems")) {
            return typed(schema, "array", path);
        }
        if (schema.contains("minLength") || schema.contains("maxLength") ||
            schema.contains("format")) {
            return typed(schema, "string", path);
        }
        return "json-value";
    }

    std::string typed(const json& schema, const std::string& type, const std::string& path) {
        if (type == "object") return object(schema, path);
        if (type == "array") return array(schema, path);
        if (type == "string") return string(schema, path);
        if (type == "number") return "json-number";
        if (type == "integer") return "json-int";
        if (type == "boolean") return "json-boolean";
        if (type == "null") return "json-null";
        fail("type", path, "unknown type '" + type + "'");
    }

    std::string reference(const json& ref, const std::string& path) {
        if (!ref.is_string()) fail("$ref", path, "must be a string");
        const std::string target = ref.get<std::string>();
        const auto known = refs_.find(target);
        if (known != refs_.end()) return known->second;
        const json* schema = nullptr;
        if (target == "#") {
            schema = &root_;
        } else {
            for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
                const std::string p = prefix;
                if (target.rfind(p, 0) != 0) continue;
                const std::string section = p.substr(2, p.size() - 3);
                const std::string name = target.substr(p.size());
                if (root_.is_object() && root_.contains(section) && root_.at(section).is_object() &&
                    root_.at(section).contains(name)) {
                    schema = &root_.at(section).at(name);
                }
            }
        }
        if (schema == nullptr)
            fail("$ref", path, "'" + target + "' does not name a definition of this schema");
        // Named before it is compiled, so a recursive reference finds the rule.
        const std::string name = next_name();
        refs_.emplace(target, name);
        const std::string body = rule_for(*schema, target.substr(1));
        rules_ += name + " ::= " + body + "\n";
        return name;
    }

    std::string enumeration(const json& schema, const std::string& path) {
        const json& values = schema.at("enum");
        if (!values.is_array() || values.empty()) fail("enum", path, "must be a non-empty array");
        // With a type beside it, only the values of that type are valid.
        std::set<std::string> types;
        if (schema.contains("type")) {
            const json& t = schema.at("type");
            if (t.is_string()) types.insert(t.get<std::string>());
            if (t.is_array()) {
                for (const json& x : t) {
                    if (x.is_string()) types.insert(x.get<std::string>());
                }
            }
        }
        std::string body;
        for (const json& v : values) {
            const std::string vt = json_type_of(v);
            if (!types.empty() && !types.contains(vt) &&
                !(vt == "integer" && types.contains("number")))
                continue;
            body += (body.empty() ? "" : " | ") + literal(v.dump());
        }
        if (body.empty()) fail("enum", path, "no value of the enum has the schema's type");
        return new_rule(body);
    }

    std::string any_of(const json& options, const std::string& path) {
        if (!options.is_array() || options.empty())
            fail("anyOf", path, "must be a non-empty array");
        std::string body;
        for (size_t i = 0; i < options.size(); ++i) {
            body +=
                (body.empty() ? "" : " | ") + rule_for(options[i], path + "/" + std::to_string(i));
        }
        return new_rule(body);
    }

    std::string object(const json& schema, const std::string& path) {
        struct Property {
            std::string key_and_value;  // "\"name\"" ws ":" ws value
            bool required;
        };
        std::vector<Property> props;
        std::set<std::string> required;
        if (schema.contains("required")) {
            const json& r = schema.at("required");
            if (!r.is_array()) fail("required", path, "must be an array of names");
            for (const json& name : r) {
                if (!name.is_string()) fail("required", path, "must be an array of names");
                required.insert(name.get<std::string>());
            }
        }
        std::set<std::string> declared;
        if (schema.contains("properties")) {
            const json& p = schema.at("properties");
            if (!p.is_object()) fail("properties", path, "must be an object");
            for (const auto& [name, sub] : p.items()) {
                const std::string value = rule_for(sub, path + "/properties/" + path_segment(name));
                props.push_back({literal(json(name).dump()) + " ws \":\" ws " + value + " ws",
                                 required.contains(name)});
                declared.insert(name);
            }
        }
        for (const std::string& name : required) {
            if (!declared.contains(name)) {
                // Required but not described: any value will do.
                props.push_back({literal(json(name).dump()) + " ws \":\" ws json-value ws", true});
            }
        }
        // rest[i][after]: properties i.. given whether one was written before (then a comma
        // leads). Built from the end: optional properties may be skipped, required ones not.
        std::string next_first = "", next_after = "";
        for (size_t k = props.size(); k-- > 0;) {
            const Property& p = props[k];
            const std::string tail = next_after.empty() ? "" : " " + next_after;
            const std::string with_first = p.key_and_value + tail;
            const std::string with_after = "\",\" ws " + p.key_and_value + tail;
            std::string first, after;
            if (p.required) {
                first = new_rule(with_first);
                after = new_rule(with_after);
            } else {
                first = new_rule("( " + with_first + " )" +
                                 (next_first.empty() ? " | \"\"" : " | " + next_first));
                after = new_rule("( " + with_after + " )" +
                                 (next_after.empty() ? " | \"\"" : " | " + next_after));
            }
            next_first = first;
            next_after = after;
        }
        return new_rule("\"{\" ws " + (next_first.empty() ? "" : next_first + " ") + "\"}\"");
    }

    std::string array(const json& schema, const std::string& path) {
        const std::string item = schema.contains("items")
                                     ? rule_for(schema.at("items"), path + "/items")
                                     : std::string("json-value");
        const int min = schema.contains("minItems") ? count_of(schema, "minItems", path) : 0;
        const int max = schema.contains("maxItems") ? count_of(schema, "maxItems", path) : -1;
        if (max >= 0 && max < min) fail("maxItems", path, "is below minItems");
        if (max == 0) return new_rule("\"[\" ws \"]\"");
        const std::string more = "( \",\" ws " + item + " ws )";
        const std::string reps = counts(std::max(0, min - 1), max < 0 ? -1 : max - 1);
        const std::string items = item + " ws " + more + reps;
        return new_rule("\"[\" ws " + (min == 0 ? "( " + items + " )?" : items) + " \"]\"");
    }

    std::string string(const json& schema, const std::string& path) {
        if (schema.contains("format")) {
            const json& f = schema.at("format");
            if (!f.is_string()) fail("format", path, "must be a string");
            if (schema.contains("minLength") || schema.contains("maxLength")) {
                fail("format", path, "together with minLength or maxLength is not supported");
            }
            const std::string format = f.get<std::string>();
            if (format == "date") return new_rule("\"\\\"\" date-part \"\\\"\"");
            if (format == "time") return new_rule("\"\\\"\" time-part \"\\\"\"");
            if (format == "date-time")
                return new_rule("\"\\\"\" date-part \"T\" time-part \"\\\"\"");
            if (format == "uuid") {
                return new_rule(
                    "\"\\\"\" hex4 hex4 \"-\" hex4 \"-\" hex4 \"-\" hex4 \"-\" hex4 hex4 hex4 "
                    "\"\\\"\"");
            }
            if (format == "email") {
                return new_rule(
                    "\"\\\"\" [a-zA-Z0-9._%+-]{1,64} \"@\" [a-zA-Z0-9-]{1,63} ( \".\" "
                    "[a-zA-Z0-9-]{1,63} )* \".\" [a-zA-Z]{2,24} \"\\\"\"");
            }
            fail("format", path,
                 "format '" + format +
                     "' is not supported (date, time, date-time, uuid, email are)");
        }
        const int min = schema.contains("minLength") ? count_of(schema, "minLength", path) : 0;
        const int max = schema.contains("maxLength") ? count_of(schema, "maxLength", path) : -1;
        if (max >= 0 && max < min) fail("maxLength", path, "is below minLength");
        if (min == 0 && max < 0) return "json-string";
        const std::string reps = counts(min, max);
        return new_rule("\"\\\"\" json-char" + reps + " \"\\\"\"");
    }

    const json& root_;
    CompileBudget& budget_;
    int depth_ = 0;
    std::string rules_;
    int counter_ = 0;
    std::map<std::string, std::string> refs_;  // $ref target -> rule name
};

}  // namespace

std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema, CompileBudget* budget) {
    CompileBudget own;
    return SchemaCompiler(schema, budget != nullptr ? *budget : own).compile();
}

std::string json_object_gbnf() {
    return std::string("root ::= json-object\n") + kCommonRules;
}

}  // namespace ember::grammar
