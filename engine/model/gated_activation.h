// The gated activation of a dense FFN, act(gate) * up: named by the families, run by the
// backends (backend.h; the CUDA kernels' device code in cuda/activations.cuh).
#pragma once

#include <cstdint>

namespace ember {

enum class GatedActivation : uint8_t {
    Silu,      // SwiGLU: silu(gate) * up (llama, qwen, lfm2, qwen35)
    GeluTanh,  // GeGLU with GELU's tanh approximation (gemma3)
};

}  // namespace ember
