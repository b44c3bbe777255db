// gpt-oss (OpenAI's open-weight mixtures of experts): what differs from the other families.
//
//   x = embed(token)
//   per layer:  h = attn_norm(x);  x += Wo · attention(h) + bo
//               h = post_attention_norm(x);  x += moe(h)
//   logits = output(output_norm(x))
//
// Attention: biases on q, k, v and the output; NEOX-style RoPE (halves) with YaRN scaling;
// GQA; a learned *sink* logit per head that joins each softmax's denominator and contributes
// no value (so a head can attend to "nothing"). Layers alternate between a sliding window of
// W positions (the position itself included; even layers in the published models) and full
// attention; the sliding layers keep their K/V rows in the cache's ring (state.h), as gemma3's.
//
// YaRN (HF's "yarn" rope type): pair i of a head of d dimensions rotates with
//   inv_freq_i = interp_i * ramp_i + extrap_i * (1 - ramp_i),  extrap_i = base^(-2i/d),
//   interp_i = extrap_i / factor,  ramp_i = clamp((i - low) / (high - low), 0, 1),
// where low / high are the dimensions at which a pair makes beta_fast / beta_slow rotations
// over the original context: d * ln(orig / (2 pi beta)) / (2 ln base), clamped to [0, d-1]
// and *not* rounded (the published config sets truncate: false; GGUF has no key for it).
// cos and sin are multiplied by the attention factor 0.1 ln(factor) + 1, i.e. q and k both
// are: the scores by its square, which is where this engine applies it.
//
// MoE FFN (moe.h): a router with bias picks the expert_used_count largest logits, weights =
// softmax over those; each expert has biases on gate, up and down and the clamped SwiGLU
// (gate <= 7, -7 <= up <= 7, gate * sigmoid(1.702 gate) * (up + 1)).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/model/forward.h"

namespace ember {

class GgufFile;
class Model;
class ThreadPool;
struct InferenceState;
struct ModelConfig;

// The published models make every second layer global (layer i when (i + 1) % 2 == 0, the HF
// config's layer_types); the converter writes no pattern key.
inline constexpr int64_t kGptOssGlobalEvery = 2;
// The clamped SwiGLU's constants (HF GptOssExperts: limit and alpha; not in the GGUF).
inline constexpr float kGptOssSwigluLimit = 7.0f;
inline constexpr float kGptOssSwigluAlpha = 1.702f;

// Reads gpt-oss's keys into `c` (the common ones are read already): sliding window and layer
// pattern, YaRN, experts. Throws GgufError naming the file and key for a missing or zero
// window, a YaRN factor below 1, or an unknown expert gating function.
void read_gptoss_config(const GgufFile& f, ModelConfig& c);

// YaRN's inverse frequencies [rope_dims/2] for `c` (see above), in double.
std::vector<double> yarn_inv_freq(const ModelConfig& c);

}  // namespace ember
