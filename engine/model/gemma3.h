// gemma3 (Gemma 3 text models): what differs from the llama-like families.
//
//   x = embed(token) * sqrt(n_embd)
//   per layer:  h = attn_norm(x);  h = attention(h);  x += post_attention_norm(h)
//               h = ffn_norm(x);   h = W_down (gelu_tanh(W_gate h) * W_up h);  x +=
//               post_ffw_norm(h)
//   logits = output(output_norm(x)), soft-capped (cap * tanh(logits / cap)) where the file says
// Attention has per-head q/k RMS norms, NEOX-style RoPE (halves) and the query scale
// 1/sqrt(query_pre_attn_scalar). Most layers are *sliding*: they attend only to the last W
// positions (W = attention.sliding_window, the position itself included) and rotate with the
// local RoPE base (rope.freq_base_swa, 10,000 when absent) without RoPE scaling; the others
// are global, with rope.freq_base and the file's RoPE scaling. The converter stores the RMS
// norm weights with Gemma's +1 already added, so the plain rms_norm applies.
//
// The KV cache keeps a sliding layer's rows in a ring of O(W) positions (state.h).
#pragma once

#include <cstdint>
#include <span>

#include "engine/model/forward.h"

namespace ember {

class GgufFile;
class Model;
class ThreadPool;
struct InferenceState;
struct ModelConfig;

// The published models make every 6th layer global (layer i is global when (i + 1) % 6 == 0);
// the converter does not write the pattern, so that rule applies unless the file has
// `gemma3.attention.sliding_window_pattern`: a period in that sense, or one entry per layer
// (true / non-zero: sliding).
inline constexpr int64_t kGemma3GlobalEvery = 6;

// Reads `<arch>.attention.sliding_window` and which layers slide: the file's
// `<arch>.attention.sliding_window_pattern` (a period: every period-th layer global, or one
// entry per layer, non-zero: sliding), else every `global_every`-th layer global (layer i when
// (i + 1) % global_every == 0). False, and `c` unchanged, without the window key; throws
// GgufError naming the file and key for a window of 0 or past the context, or a bad pattern.
bool read_sliding_window(const GgufFile& f, ModelConfig& c, int64_t global_every);

// Reads gemma3's keys into `c` (the common ones are read already). Throws GgufError naming the
// file and key for a sliding window of 0 or past the context, or a pattern of the wrong size.
void read_gemma3_config(const GgufFile& f, ModelConfig& c);

}  // namespace ember
