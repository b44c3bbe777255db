// The gated activations of a dense FFN, act(gate) * up, shared by the element-wise kernels
// (layer_kernels.cu) and the gate/up product that applies them on the fly (quant_kernels.cu),
// so both give the same bits.
#pragma once

#include <cuda_runtime.h>

#include "engine/model/gated_activation.h"

namespace ember::cuda {

__device__ __forceinline__ float silu_gated(float gate, float up) {
    return gate / (1.0f + expf(-gate)) * up;
}

__device__ __forceinline__ float gelu_tanh_gated(float gate, float up) {
    const float k = 0.7978845608028654f;  // sqrt(2/pi)
    const float inner =
        __fmul_rn(k, __fmaf_rn(__fmul_rn(0.044715f, gate), __fmul_rn(gate, gate), gate));
    return __fmul_rn(__fmul_rn(__fmul_rn(0.5f, gate), 1.0f + tanhf(inner)), up);
}

template <GatedActivation A>
__device__ __forceinline__ float gate_activation(float gate, float up) {
    if constexpr (A == GatedActivation::Silu) {
        return silu_gated(gate, up);
    } else {
        return gelu_tanh_gated(gate, up);
    }
}

}  // namespace ember::cuda
