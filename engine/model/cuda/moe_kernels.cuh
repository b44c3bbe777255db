// The mixture-of-experts FFN on the GPU (qwen3moe, gpt-oss): the semantics of cpu/moe.h, with
// the routing done on the device so that a captured decode step (one CUDA graph) needs no
// trip to the host.
//
//   router   logits [n x n_expert] = W_router · xn (+ bias): gemv, in chunks of <= 17 tokens
//   route    per token: the n_used largest (ties: the lower index), ascending expert
//            order, weights in double, renormalized or not                (moe_route)
//   gate/up  per (token, slot) pair: act(gate_e · xn_t + b) * (up_e · xn_t + b)  (moe_expert_ffn)
//   down     per pair: down_e · hidden_pair, and
//   combine  per token: x_t += sum over its slots, ascending expert index, of
//            w_j * (down_pair + b)                          (moe_expert_down_combine;
//                                                            the prefill's: moe_combine)
//
// Up to kGemvMaxTokens tokens, every product is one warp's dot over a row, with lanes over the
// row's units and a fixed butterfly (as quant_kernels.cu's gemv), computed the same way
// whatever the batch: a pair's output does not depend on the other pairs, and each token sums
// its experts in one fixed order, so a batch gives bit for bit what its tokens give one at a
// time (forward.h's exact-batch contract) and a decode step reads only its chosen experts'
// rows. No atomics in any sum. Longer batches (prefill) group their pairs by expert
// (moe_group_pairs on the device for the grouped quantized products, else on the host) and run
// each chosen expert once over its rows (cuda_backend.cu), each expert's weights streamed once
// per batch.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "engine/model/cuda/qmma_gemm.cuh"
#include "engine/model/cuda/quant_kernels.cuh"

namespace ember {
struct ModelConfig;
}  // namespace ember

namespace ember::cuda {

// Most experts a token is routed to (the routing kernel keeps them in registers).
inline constexpr int64_t kMaxExpertsUsed = 16;
// Most experts of a layer (the routing kernel takes a thread per expert, one block a token).
inline constexpr int64_t kMaxExperts = 1024;

// One conversation's MoE scratch for up to kMaxBatch tokens, allocated with the state (never
// during a captured decode step). Empty for a model without MoE layers.
class MoeBuffers {
public:
    MoeBuffers() = default;
    MoeBuffers(const MoeBuffers&) = delete;
    MoeBuffers& operator=(const MoeBuffers&) = delete;
    ~MoeBuffers();

    // Sizes the buffers for `tokens` tokens of the model (nothing when it has no experts);
    // throws std::runtime_error when the GPU is out of memory or the shape is unsupported.
    void reserve(const ModelConfig& c, int64_t tokens);

    float* router = nullptr;    // [tokens x n_expert] router logits
    int32_t* chosen = nullptr;  // [tokens x n_used] expert ids, ascending per token
    float* weight = nullptr;    // [tokens x n_used] their weights
    float* up = nullptr;        // [tokens * n_used x n_ff_exp] each pair's up product
    float* hidden = nullptr;    // [tokens * n_used x n_ff_exp] each pair's act(gate) * up
    float* down = nullptr;      // [tokens * n_used x n_embd] each pair's down product
    // The prefill's pairs grouped by expert (moe_gather): row i is pair order[i]; pair p is
    // row position[p]; xg holds the rows' inputs.
    int32_t* order = nullptr;     // [tokens * n_used]
    int32_t* position = nullptr;  // [tokens * n_used]
    float* xg = nullptr;          // [tokens * n_used x n_embd]
    int32_t* host = nullptr;      // pinned [3 x tokens * n_used]: chosen, order, position
    // The quantized grouped products (qmma_gemm.cuh): the sorted rows' inputs as scaled f16,
    // their scale {unscale, row maxima}, and the tiles (moe_group_pairs).
    __half* half_rows = nullptr;  // [tokens * n_used x max(n_embd, n_ff_exp)]
    float* half_scale = nullptr;  // [1 + tokens * n_used]
    QmmaTile* tiles = nullptr;    // [max_tiles]
    int64_t max_tiles = 0;        // tokens * n_used / kQmmaTileTokens + n_expert

private:
    void* block_ = nullptr;       // one cudaMalloc holding the buffers above
    void* host_block_ = nullptr;  // the cudaMallocHost of host
};

// The device weights of one MoE layer (stacked expert matrices as the files hold them: expert
// e's rows follow expert e-1's) and the layer's shape.
struct MoeLayer {
    DeviceMatrix router;                 // [n_expert x n_embd]
    DeviceMatrix gate;                   // [n_expert*n_ff x n_embd]
    DeviceMatrix up;                     // [n_expert*n_ff x n_embd]
    DeviceMatrix down;                   // [n_expert*n_embd x n_ff]
    const float* router_bias = nullptr;  // [n_expert], or null (gpt-oss biases, below)
    const float* gate_bias = nullptr;    // [n_expert*n_ff], or null
    const float* up_bias = nullptr;      // [n_expert*n_ff], or null
    const float* down_bias = nullptr;    // [n_expert*n_embd], or null
    int64_t n_expert = 0;
    int64_t n_used = 0;
    int64_t n_embd = 0;
    int64_t n_ff = 0;             // one expert's hidden size
    bool renormalize = false;     // the chosen weights rescaled to sum to 1
    bool clamped_swiglu = false;  // gpt-oss's activation (ModelConfig::clamped_swiglu)
    float swiglu_limit = 0.0f;
    float swiglu_alpha = 0.0f;
};

// Whether the kernels read the layer (types gemv_supports, shapes within the limits above);
// empty when they do, else why not.
const char* moe_layer_unsupported(const MoeLayer& layer);

// logits [n x n_expert] (router bias not yet added) -> chosen, weight [n x n_used].
void moe_route(const MoeLayer& layer, const float* logits, int64_t n, int32_t* chosen,
               float* weight, cudaStream_t stream);

// Decode and batches of up to kGemvMaxTokens, one product per (token, slot) pair, reading only
// the chosen experts' rows:
// hidden [n * n_used x n_ff] = act(gate_e · xn_t + b) * (up_e · xn_t + b) for pair
// p = t * n_used + j, e = chosen[p]; up [n * n_used x n_ff] is scratch. xn [n x n_embd].
void moe_expert_ffn(const MoeLayer& layer, const float* xn, const int32_t* chosen, int64_t n,
                    float* up, float* hidden, cudaStream_t stream);
// x [n x n_embd] += sum over j ascending of weight[p] * (down_e · hidden[p] + down bias of e),
// p = t*n_used + j: the down products and moe_combine's sum in one launch (the same bits).
void moe_expert_down_combine(const MoeLayer& layer, const float* hidden, const int32_t* chosen,
                             const float* weight, int64_t n, float* x, cudaStream_t stream);

// x [n x n_embd] += sum over j ascending of weight[p] * (down[row] + down bias of e), p =
// t*n_used + j, row = position[p] (or p when position is null).
void moe_combine(const MoeLayer& layer, const float* down, const int32_t* position,
                 const int32_t* chosen, const float* weight, int64_t n, float* x,
                 cudaStream_t stream);

// The tile slots a batch of n tokens needs at most (the tiles of its pairs grouped by expert:
// each expert's rows in tiles of kQmmaTileTokens), within MoeBuffers::max_tiles.
int moe_tile_slots(const MoeLayer& layer, int64_t n);
// The pairs of n tokens (chosen [n x n_used]) grouped by expert on the device: order [pairs]
// the pair of each sorted row, position [pairs] the row of each pair (tokens ascending within
// an expert, as a stable counting sort), tiles [moe_tile_slots] each expert's rows in tiles of
// kQmmaTileTokens in expert order, count 0 in the slots past them.
void moe_group_pairs(const MoeLayer& layer, const int32_t* chosen, int64_t n, int32_t* order,
                     int32_t* position, QmmaTile* tiles, cudaStream_t stream);

// The prefill's steps around its per-expert products (cuda_backend.cu):
// xg [rows x n_embd] = xn [order[i] / n_used] (the inputs of the expert-sorted pairs);
void moe_gather(const float* xn, const int32_t* order, int64_t n_used, int64_t rows, int64_t n_embd,
                float* xg, cudaStream_t stream);
// gate [rows x n_ff] = act(gate + bias, up + bias), row i's expert chosen[order[i]].
void moe_sorted_activation(const MoeLayer& layer, float* gate, const float* up,
                           const int32_t* order, const int32_t* chosen, int64_t rows,
                           cudaStream_t stream);

}  // namespace ember::cuda
