// libFuzzer target for JSON Schema compiled to a grammar (response_format, --json-schema,
// tool parameters): the input is the schema's JSON text. Compiling must end in a grammar or a
// GrammarError (SchemaError names the keyword) within CompileLimits, and the grammar must
// take a few bytes through its matcher. Text that is not JSON is not this parser's input.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/grammar/gbnf.h"
#include "engine/grammar/json_schema.h"
#include "engine/grammar/matcher.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace ember::grammar;
    const auto schema = nlohmann::ordered_json::parse(data, data + size, nullptr, false);
    if (schema.is_discarded()) return 0;
    CompileLimits limits;
    limits.max_elements = 1 << 16;  // small bounds: each input is quick
    limits.max_rules = 1 << 14;
    limits.max_time = std::chrono::seconds(2);
    CompileBudget budget(limits);
    try {
        const std::string gbnf = json_schema_to_gbnf(schema, &budget);
        auto grammar = std::make_shared<const Grammar>(parse_gbnf(gbnf, "root", &budget));
        Matcher m(grammar);
        for (const char c : std::string("{\"a\": [1, \"x\", true, null]}")) {
            if (!m.accept(std::string(1, c))) break;
        }
    } catch (const GrammarError&) {
    }
    return 0;
}
