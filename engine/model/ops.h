// Small vector operations of the forward pass. Plain loops the compiler vectorizes; the
// heavy lifting (matmul) lives in engine/tensor.
#pragma once

#include <cstdint>

namespace ember {

// out[i] = x[i] / rms(x) * weight[i]; out may alias x.
void rms_norm(const float* x, const float* weight, float* out, int64_t n, float eps);
// Rotates pairs of a head in place: (i, i + dims/2) when `halves`, else (2i, 2i+1).
// cos/sin: [dims/2]. Dimensions past `dims` are left as they are (partial rotary).
void rope(float* head, const float* cos, const float* sin, int64_t dims, bool halves);
// Numerically stable softmax over x[0..n).
void softmax_inplace(float* x, int64_t n);
float dot_f32(const float* a, const float* b, int64_t n);
// y += a * x
void axpy_f32(float a, const float* x, float* y, int64_t n);
// Half-precision KV cache rows: a is [n] fp16 bits.
float dot_f16_f32(const uint16_t* a, const float* b, int64_t n);
void axpy_f16(float a, const uint16_t* x, float* y, int64_t n);
void to_f16(const float* x, uint16_t* out, int64_t n);
// y += x
void add_inplace(float* y, const float* x, int64_t n);
// gate[i] = silu(gate[i]) * up[i]
void swiglu_inplace(float* gate, const float* up, int64_t n);

}  // namespace ember
