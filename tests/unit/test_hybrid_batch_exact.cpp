// Speculative decoding on the hybrid families verifies [token, d1..dk] in one forward, then
// either keeps the state it left or restores a snapshot and re-advances over the accepted
// prefix. Both are exact only when a batch of tokens gives bit for bit what the same tokens
// fed one at a time give: every logit row, every new KV-cache row of the attention layers, and
// the whole recurrent state (conv histories and delta-rule matrices) with its position. Checked
// here for verification batch sizes 2..9 and up to kExactBatchTokens, f32 and f16 caches,
// and contexts ending inside and crossing an attention run (128 positions).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "engine/model/forward.h"
#include "engine/model/model.h"
#include "engine/model/state.h"
#include "engine/util/thread_pool.h"
#include "tests/support/fixtures.h"
#include "tests/support/sanitizers.h"
#include "tests/support/state_bytes.h"

namespace ember::test {
namespace {

// Every verification batch of the default draft_max and a few more, and the longest ones the
// forward pass promises to be exact (--draft-max 16 plus the verified token).
const int64_t kBatches[] = {2, 3, 4, 5, 6, 7, 8, 9, kExactBatchTokens - 1, kExactBatchTokens};

void check_model(const std::string& fixture) {
    EMBER_REQUIRE_FIXTURE(fixture);
    const auto model = Model::load(fixture_path(fixture));
    const ModelConfig& c = model->config();
    ThreadPool pool(2);
    // Prefill lengths: short (the prompt itself runs token-serial), past the chunked-prefill
    // threshold, and ending just before an attention run boundary so the batch crosses it.
    const int64_t prompt_lengths[] = {5, 40, 124};
    const KvType kv_types[] = {KvType::F32, KvType::F16, KvType::Q8_0};
    for (size_t length_at = 0; length_at < std::size(prompt_lengths); ++length_at) {
        const int64_t prompt_len = prompt_lengths[length_at];
        for (size_t type_at = 0; type_at < std::size(kv_types); ++type_at) {
            // Under the sanitizers (several times slower) each prompt length meets one cache
            // type, so every length, every type and every batch still run.
            if (kSanitized && type_at != length_at) continue;
            const KvType kv_type = kv_types[type_at];
            for (const int64_t batch : kBatches) {
                SCOPED_TRACE(fixture + " prompt=" + std::to_string(prompt_len) +
                             " batch=" + std::to_string(batch) + " " + kv_type_name(kv_type));
                const auto prompt = some_tokens(prompt_len, c.n_vocab, prompt_len);
                const auto draft = some_tokens(batch, c.n_vocab, 1000 + batch);
                auto one = make_state(c, 256, kv_type);
                auto all = make_state(c, 256, kv_type);
                ASSERT_FALSE(one->recurrent.empty()) << "not a hybrid model";
                forward(*model, *one, pool, prompt, LogitsWanted::Last);
                forward(*model, *all, pool, prompt, LogitsWanted::Last);

                std::vector<float> singles;
                for (int32_t id : draft) {
                    const auto l =
                        forward(*model, *one, pool, std::span(&id, 1), LogitsWanted::Last);
                    singles.insert(singles.end(), l.begin(), l.end());
                }
                const auto rows = forward(*model, *all, pool, draft, LogitsWanted::All);
                ASSERT_EQ(rows.size(), singles.size());
                for (int64_t t = 0; t < batch; ++t) {
                    ASSERT_EQ(
                        0, std::memcmp(rows.data() + t * c.n_vocab, singles.data() + t * c.n_vocab,
                                       static_cast<size_t>(c.n_vocab) * sizeof(float)))
                        << "logits of draft token " << t;
                }
                ASSERT_EQ(one->kv.length(), all->kv.length());
                ASSERT_EQ(one->recurrent.position(), all->recurrent.position());
                ASSERT_EQ(one->recurrent.data().size(), all->recurrent.data().size());
                ASSERT_EQ(0, std::memcmp(one->recurrent.data().data(), all->recurrent.data().data(),
                                         one->recurrent.bytes()))
                    << "recurrent state";
                for (int64_t l = 0; l < one->kv.n_layer(); ++l) {
                    for (int64_t p = prompt_len; p < prompt_len + batch; ++p) {
                        ASSERT_TRUE(kv_rows(*one, l, p) == kv_rows(*all, l, p))
                            << "KV rows of cache layer " << l << " position " << p;
                    }
                }
            }
        }
    }
}

TEST(HybridBatchExact, Qwen35) {
    check_model("arch/qwen35/qwen35.gguf");
}
TEST(HybridBatchExact, Lfm2) {
    check_model("arch/lfm2/lfm2.gguf");
}

}  // namespace
}  // namespace ember::test
