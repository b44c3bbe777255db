// Activations for the tensor-core products of prefill batches: f32 rows to f16, scaled by one
// power of two for the whole batch.
//
// Why a scale: f16 keeps the 10 mantissa bits that TF32 keeps (so the product rounds its inputs
// as the TF32 one did), but its range ends at 65504, and activations entering a down projection
// can pass that. Scaling by 2^e is exact, puts the batch's largest |x| in [2^14, 2^15), and the
// product's alpha (2^-e, left in device memory so the host never waits for it) undoes it
// exactly.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace ember::cuda {

// out [n x cols] (rows cols apart) = x [n x cols] (rows ldx apart) * 2^e, rounded to nearest
// even; *unscale = 2^-e. row_max is scratch of n floats. cols a multiple of 8, x 16-byte aligned
// with ldx a multiple of 4, out 16-byte aligned. A batch holding NaN or infinity is not scaled
// (e = 0): the non-finite values pass through to the product as they would in f32.
void to_scaled_half(const float* x, int64_t n, int64_t cols, int64_t ldx, __half* out,
                    float* row_max, float* unscale, cudaStream_t stream);

}  // namespace ember::cuda
