// decode_batch (forward.h) where no device batches conversations (the CPU): each conversation's
// token is evaluated as forward() evaluates it alone (the same logits bit for bit, the same
// state after), a conversation whose context is full or whose token is outside the vocabulary
// gets forward()'s error with its state unchanged while the others are evaluated, and a call
// that breaks the contract (more tokens than conversations, too many conversations) is refused.
#include <gtest/gtest.h>

#include <cstring>
#include <exception>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <vector>

#include "engine/model/forward.h"
#include "engine/model/model.h"
#include "engine/model/state.h"
#include "engine/util/thread_pool.h"
#include "tests/support/fixtures.h"
#include "tests/support/reference_logits.h"

namespace ember::test {
namespace {

using json = nlohmann::json;

const char* const kLlama = "arch/llama/llama.gguf";

TEST(DecodeBatch, EachConversationAsAloneAndErrorsStayWithTheirOwn) {
    EMBER_REQUIRE_FIXTURE(kLlama);
    const auto model = Model::load(fixture_path(kLlama));
    const json ref = json::parse(read_file(fixture_path("arch/llama/ref.json")));
    const std::vector<int32_t> source = ids_of(ref["seqs"]["long"]);
    ThreadPool pool(2);
    const auto n_vocab = static_cast<size_t>(model->config().n_vocab);
    constexpr int kConversations = 4;
    std::vector<std::unique_ptr<InferenceState>> alone, together;
    std::vector<int32_t> tokens;
    for (int c = 0; c < kConversations; ++c) {
        const std::vector<int32_t> ids(source.begin() + c, source.begin() + 6 + 3 * c);
        // Conversation 1's context is full after its prompt.
        const auto positions = static_cast<int64_t>(ids.size()) + (c == 1 ? 0 : 4);
        alone.push_back(make_state(model->config(), positions, KvType::F16));
        together.push_back(make_state(model->config(), positions, KvType::F16));
        forward(*model, *alone.back(), pool, ids, LogitsWanted::Last);
        forward(*model, *together.back(), pool, ids, LogitsWanted::Last);
        tokens.push_back(source[static_cast<size_t>(20 + c)]);
    }
    tokens[2] = model->config().n_vocab;  // outside the vocabulary
    std::vector<InferenceState*> states;
    for (auto& s : together) states.push_back(s.get());
    std::vector<float> rows(kConversations * n_vocab);
    const auto errors = decode_batch(*model, states, pool, tokens, rows.data());
    ASSERT_EQ(errors.size(), static_cast<size_t>(kConversations));
    EXPECT_THROW(std::rethrow_exception(errors[1]), std::length_error);
    EXPECT_THROW(std::rethrow_exception(errors[2]), std::out_of_range);
    EXPECT_EQ(together[1]->kv.length(), alone[1]->kv.length());
    EXPECT_EQ(together[2]->kv.length(), alone[2]->kv.length());
    for (size_t c : {size_t{0}, size_t{3}}) {
        ASSERT_FALSE(errors[c]);
        const auto expected = forward(*model, *alone[c], pool,
                                      std::span<const int32_t>(&tokens[c], 1), LogitsWanted::Last);
        EXPECT_EQ(0,
                  std::memcmp(expected.data(), rows.data() + c * n_vocab, n_vocab * sizeof(float)))
            << "conversation " << c;
        EXPECT_EQ(together[c]->kv.length(), alone[c]->kv.length());
    }

    std::vector<int32_t> one_token(1, tokens[0]);
    EXPECT_THROW(decode_batch(*model, states, pool, one_token, rows.data()), std::invalid_argument);
    std::vector<InferenceState*> too_many(kMaxDecodeBatch + 1, states[0]);
    std::vector<int32_t> many_tokens(too_many.size(), tokens[0]);
    std::vector<float> many_rows(too_many.size() * n_vocab);
    EXPECT_THROW(decode_batch(*model, too_many, pool, many_tokens, many_rows.data()),
                 std::invalid_argument);
}

}  // namespace
}  // namespace ember::test
