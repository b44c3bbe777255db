// The layers every family is made of, written once against the backend seam (backend.h):
//
//   per layer:  xn = attn_norm(x);  x += mixer(xn)              attention, or a hybrid's
//                                                               recurrent mixer (lfm2, qwen35)
//               x += ffn(ffn_norm(x))                           dense gated FFN, or MoE
//
// What differs between families is data, read from the file at load: biases (qwen2, gpt-oss),
// q/k norms (qwen3, gemma3, lfm2, qwen35), the RoPE layout and frequencies (gemma3's sliding
// layers rotate with their own), sliding windows and sink logits (gemma3, gpt-oss), gated
// attention (qwen35), norms after each sub-block (gemma3), the FFN's activation, experts.
#pragma once

#include <cstdint>

namespace ember {

class Backend;
class Model;
struct BatchBuffers;

// One batch of n tokens at positions pos0.. on its way through the layers.
struct LayerPass {
    const Model& model;
    Backend& backend;
    BatchBuffers& buffers;
    int64_t pos0;
    int64_t n;
};

// Runs every layer: buffers.x [n x n_embd] holds the embeddings on entry and the last layer's
// output on return.
void run_layers(const LayerPass& pass);

}  // namespace ember
