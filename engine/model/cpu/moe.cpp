#include "engine/model/cpu/moe.h"

#include <algorithm>
#include <cmath>

#include "engine/model/cpu/ops.h"
#include "engine/model/model.h"
#include "engine/util/grow.h"
#include "engine/util/thread_pool.h"

namespace ember {

namespace {

// (token, expert) pairs per chunk of experts: bounds the gathered inputs and expert outputs
// (~10 MiB at n_embd 2048) however long the batch. An expert is never split across chunks, so
// each is still streamed once per batch; a chunk holds at least one expert.
constexpr int64_t kChunkPairs = 512;

// gpt-oss's activation (HF GptOssExperts): gate clamped above at `limit`, up to [-limit,
// limit], gate[i] = gate * sigmoid(alpha * gate) * (up + 1).
void clamped_swiglu_inplace(float* gate, const float* up, int64_t n, float limit, float alpha) {
    for (int64_t i = 0; i < n; ++i) {
        const float g = std::min(gate[i], limit);
        const float u = std::clamp(up[i], -limit, limit);
        gate[i] = g / (1.0f + std::exp(-alpha * g)) * (u + 1.0f);
    }
}

// Adds expert e's bias (a slice of `stacked` [n_expert x width]) to its m rows [m x width].
void add_expert_bias(const std::vector<float>& stacked, int64_t e, float* rows, int64_t m,
                     int64_t width) {
    if (stacked.empty()) return;
    const float* bias = stacked.data() + e * width;
    for (int64_t i = 0; i < m; ++i) add_inplace(rows + i * width, bias, width);
}

}  // namespace

MatrixView expert_rows(const MatrixView& stacked, int64_t n_expert, int64_t e) {
    MatrixView m = stacked;
    m.rows = stacked.rows / n_expert;
    m.data = static_cast<const uint8_t*>(stacked.data) +
             static_cast<size_t>(e * m.rows) * stacked.row_stride;
    return m;
}

void route_token(const float* logits, int64_t n_expert, int64_t n_used, bool renormalize,
                 int32_t* chosen, float* weight) {
    // Selection by repeated arg-max: n_used is small (2..8) and the strict comparison keeps
    // the lower index on a tie, deterministically.
    float max = logits[0];
    for (int64_t e = 1; e < n_expert; ++e) max = std::max(max, logits[e]);
    double total = 0;
    for (int64_t e = 0; e < n_expert; ++e) total += std::exp(static_cast<double>(logits[e] - max));
    for (int64_t j = 0; j < n_used; ++j) {
        int32_t best = -1;
        for (int64_t e = 0; e < n_expert; ++e) {
            if (std::find(chosen, chosen + j, static_cast<int32_t>(e)) != chosen + j) continue;
            if (best < 0 || logits[e] > logits[best]) best = static_cast<int32_t>(e);
        }
        chosen[j] = best;
    }
    std::sort(chosen, chosen + n_used);
    double chosen_sum = 0;
    for (int64_t j = 0; j < n_used; ++j) {
        chosen_sum += std::exp(static_cast<double>(logits[chosen[j]] - max));
    }
    const double denom = renormalize ? chosen_sum : total;
    for (int64_t j = 0; j < n_used; ++j) {
        weight[j] =
            static_cast<float>(std::exp(static_cast<double>(logits[chosen[j]] - max)) / denom);
    }
}

namespace {

// Counting sort of the batch's (token, slot) pairs by expert: s.start[e]..s.start[e+1] are
// expert e's pairs, tokens ascending.
void group_by_expert(int64_t n, int64_t n_expert, int64_t n_used, MoeScratch& s) {
    grow(s.count, n_expert);
    grow(s.start, n_expert + 1);
    grow(s.pairs, n * n_used);
    std::fill(s.count.begin(), s.count.begin() + n_expert, 0);
    for (int64_t i = 0; i < n * n_used; ++i) ++s.count[static_cast<size_t>(s.chosen[i])];
    s.start[0] = 0;
    for (int64_t e = 0; e < n_expert; ++e) s.start[e + 1] = s.start[e] + s.count[e];
    std::fill(s.count.begin(), s.count.begin() + n_expert, 0);  // reused as fill cursors
    for (int64_t i = 0; i < n * n_used; ++i) {
        const int32_t e = s.chosen[static_cast<size_t>(i)];
        s.pairs[static_cast<size_t>(s.start[e] + s.count[e]++)] = static_cast<int32_t>(i);
    }
}

// Experts [e0, e1) with their pairs [p0, p1): gate/up, SwiGLU, down, then each pair's output,
// weighted, added to its token's row of x.
void run_chunk(const ModelConfig& c, const LayerWeights& L, float* x, const float* xn, int64_t e0,
               int64_t e1, ThreadPool& pool, MoeScratch& s, MatmulScratch& mm) {
    const int64_t n_used = c.n_expert_used;
    const int64_t p0 = s.start[e0];
    const int64_t rows = s.start[e1] - p0;
    grow(s.xg, rows * c.n_embd);
    grow(s.gate, rows * c.n_ff_exp);
    grow(s.up, rows * c.n_ff_exp);
    grow(s.down, rows * c.n_embd);
    s.groups.clear();
    for (int64_t e = e0; e < e1; ++e) {
        const int64_t r = s.start[e] - p0;  // first row of expert e in the chunk
        const int64_t m = s.start[e + 1] - s.start[e];
        if (m == 0) continue;
        // A single token's input is its normed row itself (a decode step's experts all share
        // it, and matmul_grouped prepares it once); several tokens' rows are gathered.
        const float* in = xn + s.pairs[static_cast<size_t>(s.start[e])] / n_used * c.n_embd;
        if (m > 1) {
            for (int64_t i = 0; i < m; ++i) {
                const int64_t t = s.pairs[static_cast<size_t>(s.start[e] + i)] / n_used;
                std::copy(xn + t * c.n_embd, xn + (t + 1) * c.n_embd,
                          s.xg.data() + (r + i) * c.n_embd);
            }
            in = s.xg.data() + r * c.n_embd;
        }
        s.groups.push_back({expert_rows(L.gate_exps, c.n_expert, e), in, m,
                            s.gate.data() + r * c.n_ff_exp, c.n_ff_exp});
        s.groups.push_back({expert_rows(L.up_exps, c.n_expert, e), in, m,
                            s.up.data() + r * c.n_ff_exp, c.n_ff_exp});
    }
    matmul_grouped(pool, s.groups, mm);
    for (int64_t e = e0; e < e1; ++e) {
        const int64_t r = s.start[e] - p0;
        const int64_t m = s.start[e + 1] - s.start[e];
        add_expert_bias(L.gate_exps_b, e, s.gate.data() + r * c.n_ff_exp, m, c.n_ff_exp);
        add_expert_bias(L.up_exps_b, e, s.up.data() + r * c.n_ff_exp, m, c.n_ff_exp);
    }
    if (c.clamped_swiglu) {
        clamped_swiglu_inplace(s.gate.data(), s.up.data(), rows * c.n_ff_exp, c.swiglu_limit,
                               c.swiglu_alpha);
    } else {
        swiglu_inplace(s.gate.data(), s.up.data(), rows * c.n_ff_exp);
    }
    s.groups.clear();
    for (int64_t e = e0; e < e1; ++e) {
        const int64_t r = s.start[e] - p0;
        const int64_t m = s.start[e + 1] - s.start[e];
        if (m == 0) continue;
        s.groups.push_back({expert_rows(L.down_exps, c.n_expert, e), s.gate.data() + r * c.n_ff_exp,
                            m, s.down.data() + r * c.n_embd, c.n_embd});
    }
    matmul_grouped(pool, s.groups, mm);
    for (int64_t e = e0; e < e1; ++e) {
        const int64_t r = s.start[e] - p0;
        add_expert_bias(L.down_exps_b, e, s.down.data() + r * c.n_embd, s.start[e + 1] - s.start[e],
                        c.n_embd);
    }
    // Experts ascending, so every token adds its experts' outputs in ascending index order.
    for (int64_t i = 0; i < rows; ++i) {
        const int32_t pair = s.pairs[static_cast<size_t>(p0 + i)];
        const int64_t t = pair / n_used;
        axpy_f32(s.weight[static_cast<size_t>(pair)], s.down.data() + i * c.n_embd,
                 x + t * c.n_embd, c.n_embd);
    }
}

}  // namespace

void moe_ffn_block(const Model& model, const LayerWeights& L, float* x, float* xn, int64_t n,
                   ThreadPool& pool, MoeScratch& s, MatmulScratch& mm) {
    const ModelConfig& c = model.config();
    const int64_t n_used = c.n_expert_used;
    // Router logits [n x n_expert], f32 activations as they are.
    grow(s.router, n * c.n_expert);
    matmul(pool, L.ffn_gate_inp, xn, n, s.router.data(), c.n_expert, mm);
    if (!L.ffn_gate_inp_b.empty()) {  // gpt-oss: the router has a bias
        for (int64_t t = 0; t < n; ++t) {
            add_inplace(s.router.data() + t * c.n_expert, L.ffn_gate_inp_b.data(), c.n_expert);
        }
    }
    grow(s.chosen, n * n_used);
    grow(s.weight, n * n_used);
    for (int64_t t = 0; t < n; ++t) {
        route_token(s.router.data() + t * c.n_expert, c.n_expert, n_used, c.expert_weights_norm,
                    s.chosen.data() + t * n_used, s.weight.data() + t * n_used);
    }
    group_by_expert(n, c.n_expert, n_used, s);
    for (int64_t e0 = 0; e0 < c.n_expert;) {
        int64_t e1 = e0 + 1;
        while (e1 < c.n_expert && s.start[e1 + 1] - s.start[e0] <= kChunkPairs) ++e1;
        if (s.start[e1] > s.start[e0]) run_chunk(c, L, x, xn, e0, e1, pool, s, mm);
        e0 = e1;
    }
}

}  // namespace ember
