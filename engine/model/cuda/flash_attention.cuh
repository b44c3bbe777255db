// Attention of prefill batches on the tensor cores: f16 K and V read from the cache, Q and the
// softmax weights rounded to f16, f32 sums and f32 online softmax; causal, windows, soft-cap and
// sinks as attend() (layer_kernels.cuh) defines them. attend() takes this path for batches over
// the exact-batch limit when flash_attend_supports() the shape; short batches keep the f32
// kernels whose bits do not depend on the batch.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "engine/model/cuda/layer_kernels.cuh"

namespace ember::cuda {

// An f16 cache, head and value sizes equal and one of 16, 32, 64, 128, whole KV-head groups.
bool flash_attend_supports(const AttendShape& shape, const KvLayerView& layer);

// out [n x n_head x head_dim] = attention of q [n x n_head x head_dim] at positions *pos0 + t
// over `layer` (rows stored already). Throws std::invalid_argument for an unsupported shape.
void flash_attend(const AttendShape& shape, const KvLayerView& layer, const float* q,
                  const int64_t* pos0, int64_t n, float* out, cudaStream_t stream);

}  // namespace ember::cuda
