// The weight kernels of the CUDA backend: products of a weight matrix in its GGUF type with f32
// activations, read quantized straight from device memory, and the dequantizations that feed
// cuBLAS and the embedding lookup.
//
// Every kernel here is deterministic (no atomics, a fixed order of every sum), so the same input
// gives bit-identical output run to run.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "engine/model/forward.h"
#include "engine/model/gated_activation.h"
#include "engine/tensor/types.h"

namespace ember::cuda {

// A weight matrix in device memory: `rows` rows of `cols` elements in the file's layout (row r
// at data + r * row_stride bytes, its blocks in column order).
struct DeviceMatrix {
    TensorType type = TensorType::F32;
    const void* data = nullptr;
    int64_t rows = 0;
    int64_t cols = 0;
    size_t row_stride = 0;
    // Quantized, with every element inside f16's range: prefill multiplies it on the tensor
    // cores in f16 (dequantize_rows_half) rather than in TF32. Set at upload.
    bool half_products = false;
    // Q4_K/Q6_K: products of 1..kGemvMaxTokens tokens on the tensor cores (mma_gemv.cuh) rather
    // than the CUDA cores, for every token count. Set at upload (GpuRequest::tensor_decode).
    bool tensor_products = false;
};

// F32, F16, BF16: elements stored as floats, no block scales (their products stay exact f32).
inline bool is_float_type(TensorType type) {
    return type == TensorType::F32 || type == TensorType::F16 || type == TensorType::BF16;
}

// Most tokens gemv() takes: the longest batch whose outputs must equal those of the tokens one
// at a time, bit for bit (speculative verification).
inline constexpr int64_t kGemvMaxTokens = kExactBatchTokens;

// Whether w's products take the tensor-core gemv (its flag and a type that kernel reads).
bool on_tensor_cores(const DeviceMatrix& w);

// Types the kernels read directly: F32, F16, BF16, Q4_0, Q8_0, Q4_K, Q5_K, Q6_K, MXFP4. The device
// model converts matrices of other types at load.
bool gemv_supports(TensorType type);

// y[t * ldy + r] = sum_k W[r][k] * x[t * ldx + k] for t < n_tokens (1..kGemvMaxTokens), r < rows.
// Weights dequantized to f32 in registers, f32 products and sums. An output's value does not
// depend on n_tokens: evaluating tokens together or one by one gives the same bits.
void gemv(const DeviceMatrix& w, const float* x, int64_t ldx, int64_t n_tokens, float* y,
          int64_t ldy, cudaStream_t stream);

// gemv() over any number of tokens, the same bits as gemv() on each kGemvMaxTokens of them in
// turn: the whole chunks in one launch (a grid row per chunk), the rest in another. (A MoE
// prefill's router took a launch per 17 tokens: 1,500 of them for 512 tokens of Qwen3-30B-A3B,
// 15 ms of gpt-oss-20b's 80 ms prefill on an H200.) Not for matrices on the tensor cores.
void gemv_chunks(const DeviceMatrix& w, const float* x, int64_t ldx, int64_t n_tokens, float* y,
                 int64_t ldy, cudaStream_t stream);

// Several matrices of the same width times the same x in one launch per type (Q/K/V, gate/up;
// at one token, a Q4_K or Q5_K group and a Q6_K one together). A row's bits depend on its type
// and on the rows that share its launch (gemv_split), never on n_tokens: those of gemv() on the
// matrix alone where the split is the same.
struct GemvOut {
    DeviceMatrix w;
    float* y = nullptr;
    int64_t ldy = 0;
};
inline constexpr int kMaxGemvOuts = 4;
void gemv_many(const GemvOut* outs, int count, const float* x, int64_t ldx, int64_t n_tokens,
               cudaStream_t stream);

// y[t * ldy + r] = act(gate row r · x_t) * (up row r · x_t): the gate and up products of a
// dense FFN with its activation in one launch, each product's bits those of gemv() and the
// activation's those of the element-wise kernel (activations.cuh), so fused and unfused steps
// agree bit for bit. For decode: up to kGemvGatedMaxTokens tokens (each count is a set of kernel
// instances), where the two matrices share type and shape (gemv_gated_supports).
inline constexpr int64_t kGemvGatedMaxTokens = 2;
bool gemv_gated_supports(const DeviceMatrix& gate, const DeviceMatrix& up);
void gemv_gated(const DeviceMatrix& gate, const DeviceMatrix& up, GatedActivation act,
                const float* x, int64_t ldx, int64_t n_tokens, float* y, int64_t ldy,
                cudaStream_t stream);

// out[(r - row0) * cols + k] = W[r][k] for r in [row0, row0 + rows): exact f32 (the input of a
// cuBLAS product for batches longer than kGemvMaxTokens).
void dequantize_rows(const DeviceMatrix& w, int64_t row0, int64_t rows, float* out,
                     cudaStream_t stream);

// The same rows rounded to f16 (round to nearest even): the input of the tensor-core product
// for prefill batches. An f16 keeps TF32's 10 mantissa bits, so the product rounds its weights
// as the TF32 one did; the range is narrower, which max_abs_weight() checks once at load.
void dequantize_rows_half(const DeviceMatrix& w, int64_t row0, int64_t rows, __half* out,
                          cudaStream_t stream);

// The largest |W[r][k]| of the matrix (infinity when any element is NaN or infinite);
// synchronizes the stream.
float max_abs_weight(const DeviceMatrix& w, cudaStream_t stream);

// out[t * cols + k] = W[ids[t]][k] * scale for t < n: the embedding lookup (ids in device memory).
void embed_rows(const DeviceMatrix& w, const int32_t* ids, int64_t n, float scale, float* out,
                cudaStream_t stream);

}  // namespace ember::cuda
