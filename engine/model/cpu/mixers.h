// The recurrent mixers of the hybrid families on the CPU (Backend::short_conv_mixer,
// Backend::delta_net_mixer): lfm2's gated short convolution (short_conv.cpp) and qwen35's
// GatedDeltaNet (delta_net.cpp). Both read the batch's normed input (scratch.xn), leave their
// output there (its residual add waits for the next norm: layers.cpp) and carry the layer's
// recurrent state forward.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/util/grow.h"

namespace ember {

class ThreadPool;
struct InferenceState;
struct LayerWeights;
struct ModelConfig;

namespace cpu {

// One batch of n tokens through a mixer.
struct MixerPass {
    const ModelConfig& c;
    InferenceState& st;
    ThreadPool& pool;
    int64_t n;
};

void short_conv_mixer(const MixerPass& p, const LayerWeights& layer, int64_t index);
void delta_net_mixer(const MixerPass& p, const LayerWeights& layer, int64_t index);

// Depthwise causal convolution over time, continuing from `history`:
//   out[t][c] = sum_k taps[c*K + k] * in_ext[t + k][c], in_ext = history rows ++ in rows.
// in: [n x channels], history: [(K-1) x channels] oldest first (updated to the last K-1
// inputs), ext: scratch [(K-1+n) x channels], out: [n x channels].
void causal_conv(const float* in, float* history, const float* taps, int64_t kernel,
                 int64_t channels, int64_t n, float* ext, float* out);

// The gated delta rule over one v head for n tokens, token by token (decode) or in chunks
// of intra-chunk matrix products (prefill); both give the same result up to rounding.
// q, k: row t at q + t*stride ([k_dim], q already L2-normalized and scaled, k normalized);
// v, out: row t at v + t*stride / out + t*out_stride ([v_dim]); decay (log, <= 0) and beta
// at decay[t*gb_stride], beta[t*gb_stride]; state: [k_dim x v_dim], updated in place.
struct DeltaHead {
    const float* q;
    const float* k;
    const float* v;
    int64_t stride;
    const float* decay;
    const float* beta;
    int64_t gb_stride;
    float* out;
    int64_t out_stride;
    float* state;
    int64_t k_dim;
    int64_t v_dim;
};
// work: at least delta_work_floats(k_dim, v_dim) floats (either path).
void delta_rule_serial(const DeltaHead& h, int64_t n, float* work);
void delta_rule_chunked(const DeltaHead& h, int64_t n, float* work);
int64_t delta_work_floats(int64_t k_dim, int64_t v_dim);
inline constexpr int64_t kDeltaChunk = 64;

}  // namespace cpu
}  // namespace ember
