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
#include <functional>

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
    // Asked after each layer but the last with the layers done; false stops the pass there.
    // Null: every layer runs.
    const std::function<bool(int64_t layers_done)>* between_layers = nullptr;
    // The layers to run, [first_layer, end_layer) (end_layer -1: through the last): a model split
    // between a GPU and the CPU runs its two parts on two backends (forward.cpp).
    int64_t first_layer = 0;
    int64_t end_layer = -1;
};

// Runs the pass's layers: buffers.x [n x n_embd] holds the embeddings (or the residual stream
// after the layers before first_layer) on entry and the last run layer's output on return. False
// when `between_layers` stopped it part way (buffers and the KV rows of this batch's positions are
// then half written: the caller drops the batch).
bool run_layers(const LayerPass& pass);

}  // namespace ember
