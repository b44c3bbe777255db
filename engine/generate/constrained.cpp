#include "engine/generate/constrained.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "engine/generate/harmony.h"
#include "engine/generate/tool_calls.h"
#include "engine/grammar/gbnf.h"
#include "engine/grammar/json_schema.h"
#include "engine/grammar/matcher.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/util/bounded_json.h"

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

std::shared_ptr<const grammar::TokenTrie> make_harmony_token_trie(const Tokenizer& tokenizer,
                                                                  const HarmonyTokens& markers) {
    const size_t n = tokenizer.vocab_size();
    std::vector<std::string> pieces(n);
    for (size_t i = 0; i < n; ++i) {
        const auto id = static_cast<TokenId>(i);
        if (tokenizer.is_special(id)) continue;
        std::string piece = tokenizer.token_to_piece(id, false);
        if (piece.find('\x01') == std::string::npos) pieces[i] = std::move(piece);
    }
    const std::pair<TokenId, const char*> named[] = {
        {markers.start, "start"},        {markers.end, "end"},    {markers.message, "message"},
        {markers.channel, "channel"},    {markers.ret, "return"}, {markers.call, "call"},
        {markers.constrain, "constrain"}};
    std::vector<int32_t> ends;
    for (const TokenId id : tokenizer.eog_ids()) {
        const bool marker = std::any_of(std::begin(named), std::end(named),
                                        [id](const auto& m) { return m.first == id; });
        if (!marker) ends.push_back(id);
    }
    for (const auto& [id, name] : named) {
        if (id != kNoToken) pieces[static_cast<size_t>(id)] = harmony_sentinel(name);
    }
    return std::make_shared<const grammar::TokenTrie>(std::move(pieces), std::move(ends));
}

std::shared_ptr<const grammar::TokenTrie> VocabularyTries::plain() const {
    std::call_once(plain_once_, [this] { plain_ = make_token_trie(tokenizer_); });
    return plain_;
}

std::shared_ptr<const grammar::TokenTrie> VocabularyTries::harmony() const {
    std::call_once(harmony_once_, [this] {
        if (const auto markers = HarmonyTokens::find(tokenizer_)) {
            harmony_ = make_harmony_token_trie(tokenizer_, *markers);
        }
    });
    return harmony_;
}

void check_first_byte(const std::shared_ptr<const grammar::Grammar>& grammar) {
    grammar::Matcher matcher(grammar);
    grammar::StackSet next;
    for (unsigned b = 0; b < 256; ++b) {
        const size_t mark = matcher.mark();
        matcher.step(matcher.state(), static_cast<uint8_t>(b), next);
        matcher.truncate(mark);
    }
}

std::shared_ptr<const grammar::Grammar> compile_output_format(const OutputFormat& format,
                                                              grammar::CompileBudget* budget) {
    std::shared_ptr<const grammar::Grammar> out;
    switch (format.kind) {
        case OutputFormatKind::Free:
            return nullptr;
        case OutputFormatKind::Grammar:
            out = std::make_shared<const grammar::Grammar>(
                grammar::parse_gbnf(format.text, "root", budget));
            break;
        case OutputFormatKind::JsonObject:
            return std::make_shared<const grammar::Grammar>(
                grammar::parse_gbnf(grammar::json_object_gbnf()));
        case OutputFormatKind::JsonSchema: {
            // Parsed within the JSON bounds: the compiler's own walk is bounded, but dumping a
            // "const" nested 100,000 deep would recurse once a level.
            nlohmann::ordered_json parsed;
            try {
                parsed = parse_json_bounded(format.text, {}, "the JSON schema", InvalidJson::Throw);
            } catch (const JsonLimitError& e) {
                throw grammar::SchemaError(e.what(), "", "/");
            } catch (const nlohmann::json::exception& e) {
                throw grammar::SchemaError(
                    std::string("the JSON schema is not valid JSON: ") + e.what(), "", "/");
            }
            out = std::make_shared<const grammar::Grammar>(
                grammar::parse_gbnf(grammar::json_schema_to_gbnf(parsed, budget), "root", budget));
            break;
        }
    }
    check_first_byte(out);
    return out;
}

}  // namespace ember
