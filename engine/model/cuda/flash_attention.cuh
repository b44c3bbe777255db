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

// Attention of q [n x n_head x head_dim] at positions *pos0 + t over `layer` (rows stored
// already), either
//  - whole: out [n x n_head x head_dim] (partials null), or
//  - in records (out null): one block per shape.chunk positions, `chunks` of them covering
//    every position of the batch, each (token, head, chunk)'s unnormalized softmax record in
//    `partials` (attention_partials_floats() floats) for attend()'s merge, which adds the sink.
//    At depth a whole pass leaves most of the GPU idle (a 256-token batch of Qwen3-1.7B is 64
//    blocks, each walking 4k positions one tile after another); chunks spread them.
// Throws std::invalid_argument for an unsupported shape.
void flash_attend(const AttendShape& shape, const KvLayerView& layer, const float* q,
                  const int64_t* pos0, int64_t n, int64_t chunks, float* partials, float* out,
                  cudaStream_t stream);

// Positions per record of the chunked pass.
inline constexpr int64_t kFlashChunk = 1024;

}  // namespace ember::cuda
