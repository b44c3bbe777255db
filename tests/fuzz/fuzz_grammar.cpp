// libFuzzer target for the grammar compilers (issue 41): the input is GBNF text, or (first
// byte '{') a JSON Schema. Compiling must end in a Grammar or a GrammarError within its
// bounds, and the matcher must take a few bytes without crashing or running away.
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
    const std::string text(reinterpret_cast<const char*>(data), size);
    CompileLimits limits;
    limits.max_elements = 1 << 16;  // small bounds: the fuzzer explores faster
    limits.max_rules = 1 << 14;
    limits.max_time = std::chrono::seconds(2);
    CompileBudget budget(limits);
    try {
        std::string gbnf = text;
        if (!text.empty() && text[0] == '{') {
            const auto schema = nlohmann::ordered_json::parse(text, nullptr, false);
            if (schema.is_discarded()) return 0;
            gbnf = json_schema_to_gbnf(schema, &budget);
        }
        auto grammar = std::make_shared<const Grammar>(parse_gbnf(gbnf, "root", &budget));
        Matcher m(grammar);
        for (const char c : std::string("{\"a\": 1}abc 0")) m.accept(std::string(1, c));
    } catch (const GrammarError&) {
    }
    return 0;
}
