// Speculative decoding checks K drafted tokens in one forward; that is only sound when the batch
// gives bit for bit what K single-token decodes give. Here: after a prompt, tokens [a, b, c, d]
// (and batches of 2 and 8) as one batch against the same tokens one at a time: every logit and
// every new KV-cache row must be bitwise equal, for f32 and f16 caches, with contexts that end
// inside and cross the attention runs.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "engine/model/forward.h"
#include "engine/model/model.h"
#include "engine/model/state.h"
#include "engine/util/thread_pool.h"
#include "tests/support/fixtures.h"
#include "tests/support/state_bytes.h"

namespace ember::test {
namespace {

void check_model(const std::string& fixture) {
    EMBER_REQUIRE_FIXTURE(fixture);
    const auto model = Model::load(fixture_path(fixture));
    const ModelConfig& c = model->config();
    ThreadPool pool(2);
    struct Case {
        int64_t prompt, batch;
        KvType kv;
    };
    // Prompts ending well inside the first attention run, and crossing into the second
    // (runs of 128 positions) while the batch is checked.
    for (const Case cs : {Case{9, 4, KvType::F32}, Case{9, 2, KvType::F16},
                          Case{126, 4, KvType::F32}, Case{30, 8, KvType::F16},
                          Case{125, 8, KvType::F32}, Case{9, kExactBatchTokens, KvType::F16},
                          Case{120, kExactBatchTokens, KvType::F32}, Case{9, 4, KvType::Q8_0},
                          Case{125, 8, KvType::Q8_0}, Case{120, kExactBatchTokens, KvType::Q8_0}}) {
        SCOPED_TRACE(fixture + " prompt=" + std::to_string(cs.prompt) +
                     " batch=" + std::to_string(cs.batch) + " " + kv_type_name(cs.kv));
        const auto prompt = some_tokens(cs.prompt, c.n_vocab, cs.prompt);
        const auto draft = some_tokens(cs.batch, c.n_vocab, 1000 + cs.batch);
        auto one = make_state(c, 256, cs.kv);
        auto all = make_state(c, 256, cs.kv);
        forward(*model, *one, pool, prompt, LogitsWanted::Last);
        forward(*model, *all, pool, prompt, LogitsWanted::Last);

        std::vector<float> singles;
        for (int32_t id : draft) {
            const auto l = forward(*model, *one, pool, std::span(&id, 1), LogitsWanted::Last);
            singles.insert(singles.end(), l.begin(), l.end());
        }
        const auto batch = forward(*model, *all, pool, draft, LogitsWanted::All);
        ASSERT_EQ(batch.size(), singles.size());
        for (int64_t t = 0; t < cs.batch; ++t) {
            EXPECT_EQ(0, std::memcmp(batch.data() + t * c.n_vocab, singles.data() + t * c.n_vocab,
                                     static_cast<size_t>(c.n_vocab) * sizeof(float)))
                << "logits of draft token " << t;
        }
        ASSERT_EQ(one->n_past(), all->n_past());
        for (int64_t l = 0; l < c.n_layer; ++l) {
            for (int64_t p = cs.prompt; p < cs.prompt + cs.batch; ++p) {
                EXPECT_TRUE(kv_rows(*one, l, p) == kv_rows(*all, l, p))
                    << "KV rows of layer " << l << " position " << p;
            }
        }
    }
}

TEST(SpeedBatchExact, Llama) {
    check_model("arch/llama/llama.gguf");
}
TEST(SpeedBatchExact, Qwen3) {
    check_model("arch/qwen3/qwen3.gguf");
}
TEST(SpeedBatchExact, QuantQ8_0) {
    check_model("quant/qfix-Q8_0.gguf");
}
TEST(SpeedBatchExact, QuantQ4_0) {
    check_model("quant/qfix-Q4_0.gguf");
}
TEST(SpeedBatchExact, QuantQ4_K_M) {
    check_model("quant/qfix-Q4_K_M.gguf");
}
TEST(SpeedBatchExact, QuantQ6_K) {
    check_model("quant/qfix-Q6_K.gguf");
}
TEST(SpeedBatchExact, QuantQ5_K_M) {
    check_model("quant/qfix-Q5_K_M.gguf");
}
TEST(SpeedBatchExact, QuantIQ4_NL) {
    check_model("quant/qfix-IQ4_NL.gguf");
}
TEST(SpeedBatchExact, QuantIQ4_XS) {
    check_model("quant/qfix-IQ4_XS.gguf");
}
TEST(SpeedBatchExact, QuantIQ3_M) {
    check_model("quant/qfix-IQ3_M.gguf");  // IQ3_S and Q4_K matrices
}
TEST(SpeedBatchExact, QuantMXFP4) {
    check_model("quant/qfix-MXFP4.gguf");
}

}  // namespace
}  // namespace ember::test
