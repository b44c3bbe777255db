// The decode fast paths against their references: the one-token AVX-512 matrix-vector kernel
// (gemv_avx512.h) must give bitwise the numbers of its several-token variant (a batch of two
// identical tokens) and both those of the panel path (a batch of 20), matmul_many() bitwise one
// matmul() per matrix, and the split attention (ops.h's attend_run / attend_merge) the plain
// softmax-weighted sum of V.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/model/cpu/ops.h"
#include "engine/tensor/blocks.h"
#include "engine/tensor/cpu_features.h"
#include "engine/tensor/matmul.h"
#include "engine/tensor/traits.h"
#include "engine/tensor/types.h"
#include "engine/util/thread_pool.h"

namespace ember {
namespace {

// Random valid weights through the reference quantizer; rows `stride` bytes apart.
std::vector<uint8_t> random_weights(TensorType t, int64_t rows, int64_t cols, size_t stride,
                                    std::mt19937& rng) {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<uint8_t> w(stride * static_cast<size_t>(rows) + 64, 0xcd);
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
        for (auto& v : row) v = nd(rng);
        scalar_kernels()[t].quantize_row(row.data(), w.data() + r * stride, cols);
    }
    return w;
}

std::vector<float> random_floats(int64_t n, std::mt19937& rng) {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(n));
    for (auto& v : x) v = nd(rng);
    return x;
}

// This binary routes batches of up to 8 tokens through the gemv kernels whatever
// EMBER_GEMV_TOKENS the environment sets (the default does too; see quants_avx512.cpp), so that
// their multi-token variants are checked against the panels. Set before main(), ahead of the
// kernels' first use.
const bool kGemvForSmallBatches = [] {
    setenv("EMBER_GEMV_TOKENS", "8", 1);
    return true;
}();

bool bitwise_equal(const float* a, const float* b, int64_t n) {
    return std::memcmp(a, b, static_cast<size_t>(n) * sizeof(float)) == 0;
}

TEST(SpeedKernels, OneTokenMatchesTheSeveralTokenKernelBitwise) {
    if (max_kernel_level() < KernelLevel::Avx512) GTEST_SKIP() << "no AVX-512 here";
    const KernelTable table = make_kernel_table(KernelLevel::Avx512);
    ThreadPool pool(2);
    std::mt19937 rng(7);
    for (TensorType t : {TensorType::Q8_0, TensorType::Q4_0, TensorType::Q5_0, TensorType::Q4_1,
                         TensorType::IQ4_NL, TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K,
                         TensorType::IQ4_XS, TensorType::IQ3_S, TensorType::MXFP4}) {
        const int64_t cols = type_info(t).block_elems == 256 ? 512 : 96;
        for (int64_t rows : {1, 5, 16, 17, 40, 100}) {
            SCOPED_TRACE(std::string(type_info(t).name) + " rows=" + std::to_string(rows));
            const size_t stride = row_bytes(type_info(t), cols) + (rows == 17 ? 6 : 0);
            const auto w = random_weights(t, rows, cols, stride, rng);
            const MatrixView view{t, w.data(), rows, cols, stride};
            const auto x1 = random_floats(cols, rng);
            std::vector<float> x2(x1);
            x2.insert(x2.end(), x1.begin(), x1.end());  // the same token twice
            std::vector<float> one(static_cast<size_t>(rows) + 1, NAN);
            std::vector<float> two(static_cast<size_t>(2 * rows), NAN);
            MatmulScratch scratch;
            matmul(pool, view, x1.data(), 1, one.data(), rows, scratch, table);
            matmul(pool, view, x2.data(), 2, two.data(), rows, scratch, table);
            EXPECT_TRUE(bitwise_equal(one.data(), two.data(), rows));
            EXPECT_TRUE(bitwise_equal(one.data(), two.data() + rows, rows));
            EXPECT_TRUE(std::isnan(one[static_cast<size_t>(rows)])) << "wrote past the end";
        }
    }
}

// Batches of 1..8 tokens (here the gemv kernels) give per token bitwise the numbers of a batch of
// 20 (the panel micro-kernels), and match the scalar reference closely.
TEST(SpeedKernels, SmallBatchesMatchThePanelPathBitwise) {
    if (max_kernel_level() < KernelLevel::Avx512) GTEST_SKIP() << "no AVX-512 here";
    const KernelTable table = make_kernel_table(KernelLevel::Avx512);
    ThreadPool pool(2);
    std::mt19937 rng(17);
    constexpr int64_t kBig = 20;
    for (TensorType t : {TensorType::Q8_0, TensorType::Q4_0, TensorType::Q5_0, TensorType::Q4_1,
                         TensorType::Q5_1, TensorType::IQ4_NL, TensorType::Q2_K, TensorType::Q3_K,
                         TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K, TensorType::IQ4_XS,
                         TensorType::IQ3_S, TensorType::MXFP4}) {
        const int64_t cols = type_info(t).block_elems == 256 ? 768 : 160;
        for (int64_t rows : {7, 48, 77}) {
            SCOPED_TRACE(std::string(type_info(t).name) + " rows=" + std::to_string(rows));
            const size_t stride = row_bytes(type_info(t), cols) + (rows == 77 ? 10 : 0);
            const auto w = random_weights(t, rows, cols, stride, rng);
            const MatrixView view{t, w.data(), rows, cols, stride};
            const auto x = random_floats(kBig * cols, rng);
            std::vector<float> big(static_cast<size_t>(kBig * rows), NAN);
            MatmulScratch scratch;
            matmul(pool, view, x.data(), kBig, big.data(), rows, scratch, table);
            for (int64_t n = 1; n <= 8; ++n) {
                const int64_t t0 = n + 3;  // tokens t0 .. t0 + n - 1 of the big batch
                std::vector<float> got(static_cast<size_t>(n * rows + 1), NAN);
                matmul(pool, view, x.data() + t0 * cols, n, got.data(), rows, scratch, table);
                EXPECT_TRUE(bitwise_equal(got.data(), big.data() + t0 * rows, n * rows))
                    << "n=" << n;
                EXPECT_TRUE(std::isnan(got[static_cast<size_t>(n * rows)])) << "past the end";
            }
            // The scalar reference (float sums in another order: close, not bitwise).
            const KernelTable& ref = scalar_kernels();
            std::vector<float> want(static_cast<size_t>(rows));
            matmul(pool, view, x.data(), 1, want.data(), rows, scratch, ref);
            for (int64_t r = 0; r < rows; ++r) {
                ASSERT_NEAR(big[static_cast<size_t>(r)], want[static_cast<size_t>(r)],
                            1e-4f * (1.0f + std::fabs(want[static_cast<size_t>(r)])))
                    << "row " << r;
            }
        }
    }
}

TEST(SpeedKernels, MatmulManyEqualsOneMatmulPerMatrix) {
    ThreadPool pool(2);
    std::mt19937 rng(11);
    const int64_t cols = 256;
    // Mixed types sharing the Q8_32 activations (fused), and a float one (not fused).
    for (TensorType second : {TensorType::Q6_K, TensorType::F32}) {
        const TensorType types[3] = {TensorType::Q4_K, second, TensorType::Q8_0};
        const int64_t rows[3] = {70, 33, 128};
        std::vector<std::vector<uint8_t>> w;
        MatrixView views[3];
        for (int i = 0; i < 3; ++i) {
            const size_t stride = row_bytes(type_info(types[i]), cols);
            if (types[i] == TensorType::F32) {
                const auto f = random_floats(rows[i] * cols, rng);
                w.emplace_back(reinterpret_cast<const uint8_t*>(f.data()),
                               reinterpret_cast<const uint8_t*>(f.data() + f.size()));
            } else {
                w.push_back(random_weights(types[i], rows[i], cols, stride, rng));
            }
            views[i] = MatrixView{types[i], w.back().data(), rows[i], cols, stride};
        }
        for (int64_t n_tokens : {1, 3, 40}) {
            SCOPED_TRACE("tokens=" + std::to_string(n_tokens));
            const auto x = random_floats(n_tokens * cols, rng);
            std::vector<float> want[3], got[3];
            MatmulScratch scratch;
            MatmulOut outs[3];
            for (int i = 0; i < 3; ++i) {
                want[i].assign(static_cast<size_t>(n_tokens * rows[i]), NAN);
                got[i].assign(static_cast<size_t>(n_tokens * rows[i]), NAN);
                matmul(pool, views[i], x.data(), n_tokens, want[i].data(), rows[i], scratch);
                outs[i] = MatmulOut{&views[i], got[i].data(), rows[i]};
            }
            matmul_many(pool, outs, x.data(), n_tokens, scratch);
            for (int i = 0; i < 3; ++i) {
                EXPECT_TRUE(bitwise_equal(want[i].data(), got[i].data(), n_tokens * rows[i]))
                    << "matrix " << i;
            }
        }
    }
}

// The softmax-weighted sum of V in double, one head over n positions.
std::vector<double> reference_attention(const float* q, const std::vector<float>& k,
                                        const std::vector<float>& v, int64_t n, int64_t hd,
                                        int64_t vd, int64_t stride, float scale) {
    std::vector<double> s(static_cast<size_t>(n));
    double m = -INFINITY;
    for (int64_t p = 0; p < n; ++p) {
        double d = 0;
        for (int64_t i = 0; i < hd; ++i) d += double(q[i]) * k[p * stride + i];
        s[p] = d * scale;
        m = std::max(m, s[p]);
    }
    double l = 0;
    for (auto& e : s) l += (e = std::exp(e - m));
    std::vector<double> out(static_cast<size_t>(vd), 0.0);
    for (int64_t p = 0; p < n; ++p) {
        for (int64_t i = 0; i < vd; ++i) out[i] += s[p] / l * v[p * stride + i];
    }
    return out;
}

// A cache of n rows of `width` elements in `type`, from random floats, and the values it holds
// as floats (`values`, [n x width]) for the reference.
struct CacheRows {
    std::vector<uint8_t> bytes;  // [n x kv_row_bytes(type, width)]
    std::vector<float> values;   // [n x width]
};

CacheRows random_rows(KvType type, int64_t n, int64_t width, std::mt19937& rng) {
    CacheRows c;
    c.values = random_floats(n * width, rng);
    const int64_t row_bytes = kv_row_bytes(type, width);
    c.bytes.resize(static_cast<size_t>(n * row_bytes));
    for (int64_t p = 0; p < n; ++p) {
        float* x = c.values.data() + p * width;
        uint8_t* out = c.bytes.data() + p * row_bytes;
        if (type == KvType::F32) {
            std::memcpy(out, x, static_cast<size_t>(width) * sizeof(float));
        } else if (type == KvType::F16) {
            to_f16(x, reinterpret_cast<uint16_t*>(out), width);
            for (int64_t i = 0; i < width; ++i) {  // what the cache holds, for the reference
                x[i] = fp16_to_fp32(reinterpret_cast<const uint16_t*>(out)[i]);
            }
        } else {
            quantize_q8_0(x, out, width);
            const auto* blocks = reinterpret_cast<const BlockQ8_0*>(out);
            for (int64_t i = 0; i < width; ++i) {
                x[i] =
                    fp16_to_fp32(blocks[i / 32].d) * static_cast<float>(blocks[i / 32].qs[i % 32]);
            }
        }
    }
    return c;
}

TEST(SpeedKernels, SplitAttentionMatchesTheSoftmaxReference) {
    std::mt19937 rng(5);
    struct Case {
        int64_t n_q, hd, vd, n;
        int64_t first = 0;  // element of the row where the head starts
    };
    // Vector-friendly heads (AVX-512 path), odd ones (generic path), runs of 1..300 positions,
    // and heads starting inside a q8_0 block (the second 16- or 8-wide head of a row).
    for (const Case cs : {Case{3, 64, 64, 1}, Case{3, 64, 64, 300}, Case{2, 128, 128, 77},
                          Case{5, 80, 48, 33}, Case{1, 40, 24, 19}, Case{4, 16, 16, 16},
                          Case{2, 16, 16, 40, 16}, Case{2, 8, 8, 21, 8}, Case{1, 32, 32, 50, 32}}) {
        for (const KvType type : {KvType::F32, KvType::F16, KvType::Q8_0}) {
            SCOPED_TRACE("n_q=" + std::to_string(cs.n_q) + " hd=" + std::to_string(cs.hd) +
                         " n=" + std::to_string(cs.n) + " first=" + std::to_string(cs.first) + " " +
                         kv_type_name(type));
            // Elements between positions: rows wider than the head, whole q8_0 blocks.
            const int64_t stride =
                kv_padded_width(KvType::Q8_0, cs.first + std::max(cs.hd, cs.vd) + 8);
            const CacheRows k = random_rows(type, cs.n, stride, rng);
            const CacheRows v = random_rows(type, cs.n, stride, rng);
            // The reference reads the head's elements: rows from `first` on.
            const std::vector<float> kf(k.values.begin() + cs.first, k.values.end());
            const std::vector<float> vf(v.values.begin() + cs.first, v.values.end());
            const auto q = random_floats(cs.n_q * cs.hd, rng);
            const AttnShape shape{cs.n_q, cs.hd, cs.vd, cs.hd, 0.125f};
            const int64_t rec = attn_record_floats(cs.vd);
            // Runs of 32 positions (several records) and one run of all (one record).
            for (int64_t run_len : {int64_t{32}, cs.n}) {
                const int64_t runs = (cs.n + run_len - 1) / run_len;
                std::vector<float> records(static_cast<size_t>(cs.n_q * runs * rec));
                std::vector<float> scratch(
                    static_cast<size_t>(attn_run_scratch_floats(shape, run_len)));
                for (int64_t r = 0; r < runs; ++r) {
                    // As KvCache::run() builds it: q8_0 points at the head's block.
                    KvRun kv;
                    kv.type = type;
                    const int64_t block = type == KvType::Q8_0 ? 32 : 1;
                    kv.k_first = kv.v_first = cs.first % block;
                    const int64_t offset = r * run_len * kv_bytes(type, stride) +
                                           kv_bytes(type, cs.first - kv.k_first);
                    kv.k = k.bytes.data() + offset;
                    kv.v = v.bytes.data() + offset;
                    kv.k_stride = kv.v_stride = stride;
                    kv.n = std::min(run_len, cs.n - r * run_len);
                    attend_run(shape, q.data(), kv, scratch.data(), records.data() + r * rec,
                               runs * rec);
                }
                for (int64_t g = 0; g < cs.n_q; ++g) {
                    std::vector<float> out(static_cast<size_t>(cs.vd));
                    attend_merge(records.data() + g * runs * rec, runs, rec, cs.vd, out.data());
                    const auto want = reference_attention(q.data() + g * cs.hd, kf, vf, cs.n, cs.hd,
                                                          cs.vd, stride, 0.125f);
                    for (int64_t i = 0; i < cs.vd; ++i) {
                        ASSERT_NEAR(out[i], want[i], 1e-5 * (1 + std::fabs(want[i])))
                            << "head " << g << " dim " << i << " run " << run_len;
                    }
                }
            }
        }
    }
}

// The KV cache's q8_0 rows are the weights' Q8_0 blocks: the same bytes as the reference
// quantizer writes for whole blocks, and a zero-padded last block for a partial one.
TEST(SpeedKernels, KvQ8RowsAreReferenceQ8_0Blocks) {
    std::mt19937 rng(9);
    for (const int64_t n : {int64_t{32}, int64_t{128}, int64_t{16}, int64_t{80}}) {
        std::vector<float> x = random_floats(n, rng);
        const int64_t padded = kv_padded_width(KvType::Q8_0, n);
        std::vector<float> xp(static_cast<size_t>(padded), 0.0f);
        std::copy(x.begin(), x.end(), xp.begin());
        std::vector<uint8_t> ours(static_cast<size_t>(kv_row_bytes(KvType::Q8_0, n)));
        std::vector<uint8_t> ref(ours.size());
        quantize_q8_0(x.data(), ours.data(), n);
        scalar_kernels()[TensorType::Q8_0].quantize_row(xp.data(), ref.data(), padded);
        EXPECT_EQ(ours, ref) << n;
    }
}

// The q8_0 dot and axpy kernels (AVX-512 where the CPU has it) against the values the blocks
// hold, at every start inside a block and lengths that end anywhere.
TEST(SpeedKernels, Q8DotAndAxpyReadTheBlocks) {
    std::mt19937 rng(13);
    const CacheRows row = random_rows(KvType::Q8_0, 1, 160, rng);
    const std::vector<float> b = random_floats(160, rng);
    for (const int64_t first : {0, 3, 8, 16, 31, 32, 48}) {
        for (const int64_t n : {1, 8, 15, 16, 17, 40, 64, 100}) {
            if (first + n > 160) continue;
            double want = 0;
            for (int64_t i = 0; i < n; ++i) want += double(row.values[first + i]) * b[i];
            EXPECT_NEAR(dot_q8_0_f32(row.bytes.data(), first, b.data(), n), want,
                        1e-4 * (1 + std::fabs(want)))
                << first << " " << n;
            std::vector<float> y(b.begin(), b.begin() + n);
            axpy_q8_0(0.5f, row.bytes.data(), first, y.data(), n);
            for (int64_t i = 0; i < n; ++i) {
                ASSERT_NEAR(y[i], b[i] + 0.5f * row.values[first + i], 1e-5) << first << " " << n;
            }
        }
    }
}

}  // namespace
}  // namespace ember

namespace ember::test {
namespace {

// The gated activations against their float64 formulas: GELU (tanh approximation, gemma3) and
// SiLU (swiglu), over a range that reaches both saturations, with lengths that leave vector
// tails; an element's value must not depend on where it falls in the row (a batch's tokens
// share one call).
TEST(SpeedKernels, GatedActivationsMatchTheirFormulas) {
    const auto gelu = [](double x) {
        return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
    };
    const auto silu = [](double x) { return x / (1.0 + std::exp(-x)); };
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> wide(-12.0f, 12.0f);
    for (int64_t n : {1, 15, 16, 37, 256}) {
        std::vector<float> g(static_cast<size_t>(n)), up(static_cast<size_t>(n));  // [n]
        for (auto& v : g) v = wide(rng);
        for (auto& v : up) v = wide(rng);
        g[0] = -30.0f;  // deep saturation: the result must be a (signed) zero, not a NaN
        for (const bool is_gelu : {true, false}) {
            std::vector<float> out = g;
            if (is_gelu) {
                gelu_tanh_gate_inplace(out.data(), up.data(), n);
            } else {
                swiglu_inplace(out.data(), up.data(), n);
            }
            for (int64_t i = 0; i < n; ++i) {
                const size_t k = static_cast<size_t>(i);
                const double want = (is_gelu ? gelu(g[k]) : silu(g[k])) * up[k];
                ASSERT_NEAR(out[k], want, 2e-6 * (std::fabs(want) + 1e-3))
                    << (is_gelu ? "gelu" : "silu") << " n=" << n << " i=" << i << " x=" << g[k];
                // The same element alone gives the same bits.
                float one = g[k];
                if (is_gelu) {
                    gelu_tanh_gate_inplace(&one, &up[k], 1);
                } else {
                    swiglu_inplace(&one, &up[k], 1);
                }
                ASSERT_EQ(one, out[k]) << "n=" << n << " i=" << i;
            }
        }
    }
}

}  // namespace
}  // namespace ember::test
