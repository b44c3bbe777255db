// WeightLayout::Panels16 (engine/tensor/panels16.h): a matrix rewritten into 16-row panels
// multiplies bit for bit as in the row layout - one token (the decode kernel), up to 8 (the
// speculative check), the chunked panels, full prefill panels, on one thread and several - and
// its rows read back byte for byte. Against the row layout's own results, which the SIMD and
// golden suites check against the scalar reference and float64 references.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/model/model.h"
#include "engine/synth/synth.h"
#include "engine/tensor/cpu_features.h"
#include "engine/tensor/matmul.h"
#include "engine/tensor/panels16.h"
#include "engine/tensor/traits.h"
#include "engine/tensor/types.h"
#include "engine/util/thread_pool.h"
#include "tests/support/fixtures.h"
#include "tests/support/random_vectors.h"
#include "tests/support/reference_logits.h"
#include "tests/support/temp_dir.h"
#include "tests/unit/test_tensor_ref.h"

namespace ember {
namespace {

// A random matrix of `rows` x `cols` in both layouts.
struct TwoLayouts {
    std::vector<uint8_t> rows_bytes;    // [rows x row_stride] the row layout
    std::vector<uint8_t> panel_bytes;   // [rows x row_stride] the same in Panels16
    MatrixView rows_view, panels_view;  // over the two
};

TwoLayouts make_matrix(TensorType t, int64_t rows, int64_t cols, uint32_t seed) {
    std::mt19937 rng(seed);
    TwoLayouts m;
    for (int64_t r = 0; r < rows; ++r) {
        const auto row = test::random_row(t, cols, rng);
        m.rows_bytes.insert(m.rows_bytes.end(), row.begin(), row.end());
    }
    const size_t stride = row_bytes(type_info(t), static_cast<uint64_t>(cols));
    m.panel_bytes.resize(m.rows_bytes.size());
    write_panels16(m.rows_bytes.data(), m.panel_bytes.data(), rows, stride,
                   type_info(t).block_bytes, 2);
    m.rows_view = MatrixView{t, m.rows_bytes.data(), rows, cols, stride};
    m.panels_view = m.rows_view;
    m.panels_view.data = m.panel_bytes.data();
    m.panels_view.layout = WeightLayout::Panels16;
    return m;
}

class Panels16 : public ::testing::TestWithParam<TensorType> {
protected:
    void SetUp() override {
        if (active_kernels()[GetParam()].gemm_panels16 == nullptr) {
            GTEST_SKIP() << "the active kernels (" << active_kernels().isa
                         << ") have no 16-row-panel kernel for this type";
        }
    }
};

TEST_P(Panels16, MultipliesBitForBitAsTheRowLayout) {
    const TensorType t = GetParam();
    // 96 rows: 6 panels, so tasks of 32 rows split them across workers; 1024 columns: 4 blocks.
    const int64_t rows = 96, cols = 1024;
    const TwoLayouts m = make_matrix(t, rows, cols, 11);
    ASSERT_NE(m.rows_bytes, m.panel_bytes);  // the layout did move the bytes
    for (int threads : {1, 2, 3}) {
        ThreadPool pool(threads);
        MatmulScratch scratch;
        // 1-8 tokens: the gemv kernels; 9, 17: the chunked panels; 64: the prefill panels.
        for (int64_t n : {1, 2, 3, 5, 8, 9, 17, 64}) {
            const auto x = test::normal_floats(n * cols, static_cast<uint32_t>(100 + n));
            std::vector<float> want(static_cast<size_t>(n * rows)), got(want.size(), -1.0f);
            matmul(pool, m.rows_view, x.data(), n, want.data(), rows, scratch);
            matmul(pool, m.panels_view, x.data(), n, got.data(), rows, scratch);
            ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
                << n << " tokens on " << threads << " threads";
            // The fused section of several outputs takes the same kernels.
            std::vector<float> got2(want.size(), -1.0f);
            const MatmulOut outs[] = {{&m.rows_view, want.data(), rows},
                                      {&m.panels_view, got2.data(), rows}};
            matmul_many(pool, outs, x.data(), n, scratch);
            ASSERT_EQ(0, std::memcmp(want.data(), got2.data(), want.size() * sizeof(float)))
                << n << " tokens, fused, on " << threads << " threads";
        }
    }
}

TEST_P(Panels16, RowsReadBackAndDequantizeAsTheRowLayout) {
    const TensorType t = GetParam();
    const int64_t rows = 48, cols = 512;
    const TwoLayouts m = make_matrix(t, rows, cols, 12);
    std::vector<uint8_t> row(m.rows_view.row_stride);
    std::vector<float> want(static_cast<size_t>(cols)), got(want.size());
    for (int64_t r = 0; r < rows; ++r) {
        read_panels16_row(m.panels_view, r, row.data());
        ASSERT_EQ(0, std::memcmp(row.data(), m.rows_bytes.data() + r * m.rows_view.row_stride,
                                 row.size()))
            << "row " << r;
        dequantize_row(m.rows_view, r, want.data());
        dequantize_row(m.panels_view, r, got.data());
        ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
            << "row " << r;
    }
}

INSTANTIATE_TEST_SUITE_P(Types, Panels16, ::testing::Values(TensorType::Q4_K, TensorType::Q6_K),
                         [](const auto& p) { return std::string(type_info(p.param).name); });

TEST(Panels16Layout, OnlyWholePanelsOfAPanelKernelsTypeQualify) {
    const KernelTable& table = active_kernels();
    std::vector<uint8_t> bytes(64 * 144);
    MatrixView w{TensorType::Q4_K, bytes.data(), 64, 256, 144};
    EXPECT_EQ(can_use_panels16(w, table), table[TensorType::Q4_K].gemm_panels16 != nullptr);
    MatrixView odd = w;
    odd.rows = 40;  // two panels and a half
    EXPECT_FALSE(can_use_panels16(odd, table));
    MatrixView padded = w;
    padded.row_stride = 160;  // rows not densely packed
    EXPECT_FALSE(can_use_panels16(padded, table));
    MatrixView q8 = w;
    q8.type = TensorType::Q8_0;  // no panel kernel for this type
    q8.row_stride = 272;
    EXPECT_FALSE(can_use_panels16(q8, table));
    MatrixView done = w;
    done.layout = WeightLayout::Panels16;  // already rewritten
    EXPECT_FALSE(can_use_panels16(done, table));
    // Never for a table without the kernel, whatever the matrix.
    EXPECT_FALSE(can_use_panels16(w, scalar_kernels()));
}

TEST(Panels16Layout, RefusesWhatItCannotMultiplyOrWrite) {
    std::vector<uint8_t> bytes(40 * 144);
    std::vector<uint8_t> out(bytes.size());
    try {
        write_panels16(bytes.data(), out.data(), 40, 144, 144, 1);
        FAIL() << "40 rows are not whole panels";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("40 rows"), std::string::npos) << e.what();
    }
    // A Panels16 matrix given to kernels that cannot read it: an error naming the kernels, not
    // a product read in the wrong layout.
    MatrixView w{TensorType::Q4_K, bytes.data(), 32, 256, 144, WeightLayout::Panels16};
    const auto x = test::normal_floats(256, 1);
    std::vector<float> y(32);
    MatmulScratch scratch;
    try {
        matmul_serial(w, x.data(), 1, y.data(), 32, scratch, scalar_kernels());
        FAIL() << "the scalar kernels have no panel kernel";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("scalar"), std::string::npos) << e.what();
    }
}

// Every logit of `a` and `b` the same bits on one sequence, one token at a time (the decode
// kernels) and in uneven batches (the panels).
void expect_same_logits(const Model& a, const Model& b) {
    std::vector<int32_t> ids;
    for (int i = 0; i < 40; ++i) ids.push_back((i * 37 + 5) % 500 + 1);
    ThreadPool pool(2);
    for (const std::vector<int64_t>& sizes : std::vector<std::vector<int64_t>>{{1}, {17, 3, 9}}) {
        const auto la = test::logits_in_batches(a, pool, ids, sizes);
        const auto lb = test::logits_in_batches(b, pool, ids, sizes);
        ASSERT_EQ(la.size(), lb.size());
        EXPECT_EQ(0, std::memcmp(la.data(), lb.data(), la.size() * sizeof(float)))
            << "batches of " << sizes[0];
    }
}

// A whole model (the Q4_K_M quant fixture: Q4_K and Q6_K matrices of 128-768 rows, a separate
// Q6_K output) loaded with and without the panels: every logit the same bits, one token at a
// time (the decode kernels) and in uneven batches (the panels), and the views really moved.
TEST(Panels16Model, LogitsBitForBitWithAndWithoutPanels) {
    const std::string rel = "quant/qfix-Q4_K_M.gguf";
    EMBER_REQUIRE_FIXTURE(rel);
    if (active_kernels()[TensorType::Q4_K].gemm_panels16 == nullptr) {
        GTEST_SKIP() << "the active kernels (" << active_kernels().isa << ") have no panel kernel";
    }
    // The panels are the 8-bit path's layout (the default activations may be others).
    const auto with =
        Model::load(test::fixture_path(rel), LoadOptions{true, ActivationChoice::Quantized});
    const auto without =
        Model::load(test::fixture_path(rel), LoadOptions{false, ActivationChoice::Quantized});
    int panels = 0;
    for (const auto& L : with->layers()) {
        for (const MatrixView* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) {
            panels += w->layout == WeightLayout::Panels16;
        }
    }
    EXPECT_EQ(panels, 7 * static_cast<int>(with->layers().size()));
    EXPECT_EQ(with->output().layout, WeightLayout::Panels16);
    EXPECT_EQ(without->output().layout, WeightLayout::Rows);
    expect_same_logits(*with, *without);
}

// A load asked to stop (LoadOptions::stop: Esc during /model) ends with LoadStopped naming the
// file, between the steps of the panel rewrite; a stop that never says yes changes nothing.
TEST(Panels16Model, ALoadAskedToStopEndsWithLoadStopped) {
    const std::string rel = "quant/qfix-Q4_K_M.gguf";
    EMBER_REQUIRE_FIXTURE(rel);
    if (active_kernels()[TensorType::Q4_K].gemm_panels16 == nullptr) {
        GTEST_SKIP() << "the active kernels (" << active_kernels().isa << ") have no panel kernel";
    }
    const std::string path = test::fixture_path(rel);
    for (int stop_at : {1, 2, 5}) {
        int asked = 0;
        LoadOptions stopping{true, ActivationChoice::Quantized};
        stopping.stop = [&] { return ++asked >= stop_at; };
        try {
            Model::load(path, stopping);
            FAIL() << "the load went on past a stop at question " << stop_at;
        } catch (const LoadStopped& e) {
            EXPECT_EQ(asked, stop_at);
            EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
            EXPECT_NE(std::string(e.what()).find("stopped"), std::string::npos) << e.what();
        }
    }
    int asked = 0;
    LoadOptions asking{true, ActivationChoice::Quantized};
    asking.stop = [&] {
        ++asked;
        return false;
    };
    const auto asked_model = Model::load(path, asking);
    EXPECT_GT(asked, 5);  // once before the rewrite, then every step of every matrix
    const auto plain = Model::load(path, LoadOptions{true, ActivationChoice::Quantized});
    EXPECT_EQ(asked_model->fingerprint(), plain->fingerprint());
    expect_same_logits(*asked_model, *plain);
}

// A MoE model (Q4_K_M: Q4_K attention and experts, a Q6_K down projection in the last
// layer): its attention and output go to panels, its experts keep the file's row layout (see
// Model::write_weight_panels), and the logits are the same bits. Written by `ember synth` with
// the qwen3moe fixture's vocabulary.
TEST(Panels16Model, MoeModelPanelsItsAttentionNotItsExperts) {
    const std::string vocab = "arch/qwen3moe/qwen3moe.gguf";
    EMBER_REQUIRE_FIXTURE(vocab);
    if (active_kernels()[TensorType::Q4_K].gemm_panels16 == nullptr) {
        GTEST_SKIP() << "the active kernels (" << active_kernels().isa << ") have no panel kernel";
    }
    SynthShape tiny = *find_synth_shape("qwen3-30b-a3b");
    tiny.n_embd = 256;
    tiny.n_layer = 2;
    tiny.n_head = 4;
    tiny.n_head_kv = 2;
    tiny.head_dim = 64;
    tiny.n_ff = 256;
    tiny.n_ff_exp = 256;
    tiny.n_expert = 8;
    tiny.n_expert_used = 2;
    test::TempDir dir("ember-panels-moe");
    SynthOptions o;
    o.shape = &tiny;
    o.recipe = SynthRecipe::Q4_K_M;
    o.vocab_from = test::fixture_path(vocab);
    o.output = dir.file("moe.gguf");
    {
        ThreadPool writer(2);
        write_synth_model(o, writer);
    }
    // The panels are the 8-bit path's layout (the default activations may be others).
    const auto with = Model::load(o.output, LoadOptions{true, ActivationChoice::Quantized});
    const auto without = Model::load(o.output, LoadOptions{false, ActivationChoice::Quantized});
    std::set<TensorType> expert_types;
    for (const auto& L : with->layers()) {
        for (const MatrixView* w : {&L.wq, &L.wk, &L.wv, &L.wo}) {
            EXPECT_EQ(w->layout, WeightLayout::Panels16);
        }
        for (const MatrixView* w : {&L.gate_exps, &L.up_exps, &L.down_exps}) {
            EXPECT_EQ(w->layout, WeightLayout::Rows);
            expert_types.insert(w->type);
        }
    }
    EXPECT_EQ(expert_types, (std::set<TensorType>{TensorType::Q4_K, TensorType::Q6_K}));
    EXPECT_EQ(with->output().layout, WeightLayout::Panels16);
    EXPECT_EQ(without->layers()[0].wq.layout, WeightLayout::Rows);
    EXPECT_EQ(with->fingerprint(), without->fingerprint());
    expect_same_logits(*with, *without);
}

}  // namespace
}  // namespace ember
