// The mixture-of-experts FFN (qwen3moe): a router picks n_expert_used of n_expert SwiGLU
// experts per token and the token's FFN output is their weighted sum.
//
//   p        = softmax(W_router · xn)              over every expert, in double
//   chosen   = the n_expert_used largest p         (ties: the lower expert index)
//   w_j      = p_j / sum(p_chosen)                 when expert_weights_norm, else p_j
//   ffn(xn)  = sum over chosen j, in ascending expert index, of w_j * down_j(silu(gate_j xn) * up_j
//   xn)
//
// gpt-oss adds a bias to the router logits and to each expert's gate, up and down outputs, and
// replaces silu(gate) * up with its clamped SwiGLU (ModelConfig::clamped_swiglu); its softmax
// over the chosen logits is the renormalized softmax above.
//
// The activations reach the router exactly as f32 (the router is an F32 matrix in the files,
// dotted with unrounded activations): rounding them first flips expert choices wherever two
// router logits nearly tie.
//
// A batch is grouped by expert: every expert that at least one token chose runs once over all
// of its tokens, so each expert matrix is streamed from memory once per batch, and a decode
// step reads only the chosen experts' rows. All experts of a step share one parallel section
// (matmul_grouped), so the threads split the chosen experts' rows between them. Each
// (token, expert) product is the same number whatever else is in the batch, and every token
// sums its experts in ascending index order, so a batch gives bit for bit what the tokens give
// one at a time (the exact-batch contract of forward.h).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/tensor/matmul.h"

namespace ember {

class Model;
class ThreadPool;
struct LayerWeights;

// Buffers of the MoE FFN, grown on demand (ForwardScratch::moe). Rows are (token, expert)
// pairs of the current chunk of experts, grouped by expert.
struct MoeScratch {
    std::vector<float> router;    // [batch x n_expert] router logits
    std::vector<int32_t> chosen;  // [batch x n_expert_used] expert ids, ascending per token
    std::vector<float> weight;    // [batch x n_expert_used] their weights
    std::vector<int32_t> count;   // [n_expert] tokens per expert in the batch
    std::vector<int32_t> start;   // [n_expert + 1] first pair of each expert in `pairs`
    std::vector<int32_t> pairs;   // [batch x n_expert_used] token*n_used + slot, grouped by expert
    std::vector<float> xg;        // [chunk rows x n_embd] gathered normed inputs
    std::vector<float> gate;      // [chunk rows x n_ff_exp]
    std::vector<float> up;        // [chunk rows x n_ff_exp]
    std::vector<float> down;      // [chunk rows x n_embd] each pair's expert output
    std::vector<float> acc;       // [batch x n_embd] weighted sums
    std::vector<MatmulGroup> groups;
};

// Rows of expert e of a stacked expert matrix (LayerWeights::gate_exps etc.).
MatrixView expert_rows(const MatrixView& stacked, int64_t n_expert, int64_t e);

// Picks the experts of one token from its router logits [n_expert]: chosen[n_used] in
// ascending expert order with their weights.
void route_token(const float* logits, int64_t n_expert, int64_t n_used, bool renormalize,
                 int32_t* chosen, float* weight);

// x [n x n_embd] += moe_ffn(xn), xn [n x n_embd] the rows normed with L.ffn_norm already.
void moe_ffn_block(const Model& model, const LayerWeights& L, float* x, float* xn, int64_t n,
                   ThreadPool& pool, MoeScratch& s, MatmulScratch& mm);

}  // namespace ember
