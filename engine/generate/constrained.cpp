#include "engine/generate/constrained.h"

#include <nlohmann/json.hpp>

#include "engine/grammar/gbnf.h"
#include "engine/grammar/json_schema.h"
#include "engine/tokenizer/tokenizer.h"

namespace ember {

std::shared_ptr<const grammar::TokenTrie> make_token_trie(const Tokenizer& tokenizer) {
    const size_t n = tokenizer.vocab_size();
    std::vector<std::string> pieces(n);
    for (size_t i = 0; i < n; ++i) {
        const auto id = static_cast<TokenId>(i);
        if (!tokenizer.is_special(id)) pieces[i] = tokenizer.token_to_piece(id, false);
    }
    return std::make_shared<const grammar::TokenTrie>(std::move(pieces), tokenizer.eog_ids());
}

std::shared_ptr<const grammar::Grammar> compile_output_format(const OutputFormat& format) {
    switch (format.kind) {
        case OutputFormatKind::Free:
            return nullptr;
        case OutputFormatKind::Grammar:
            return std::make_shared<const grammar::Grammar>(grammar::parse_gbnf(format.text));
        case OutputFormatKind::JsonObject:
            return std::make_shared<const grammar::Grammar>(
                grammar::parse_gbnf(grammar::json_object_gbnf()));
        case OutputFormatKind::JsonSchema: {
            nlohmann::ordered_json schema;
            try {
                schema = nlohmann::ordered_json::parse(format.text);
            } catch (const nlohmann::json::exception& e) {
                throw grammar::SchemaError(std::string("the JSON schema is not valid JSON: ") + e.what(),
                                           "", "/");
            }
            return std::make_shared<const grammar::Grammar>(
                grammar::parse_gbnf(grammar::json_schema_to_gbnf(schema)));
        }
    }
    return nullptr;
}

}  // namespace ember
