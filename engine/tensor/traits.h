// Per-type kernel table: dequantize, quantize, activation format and dot product.
//
// matmul() never switches on the weight type in its inner loop: it looks the type up once per
// call in active_kernels() and calls through function pointers. The table starts as the scalar
// reference (scalar_kernels()) and SIMD variants overwrite individual entries once, at first
// use, after checking the CPU (see make_active_kernels() in traits.cpp). Because the table is
// per type, an ISA can speed up just the types that matter and inherit the rest.
//
// Besides the per-row dot, a type may offer a `gemm` entry: a block of rows times every token at
// once, so prefill reuses each loaded weight across tokens and each activation across rows.
// matmul() prefers it when present. Its result for a (row, token) pair must not depend on how
// rows and tokens are grouped (batch and single-token results are bitwise equal).
//
// Accuracy contract (the model tests depend on it):
//  * F32/F16/BF16 weights are dotted with f32 activations, exactly as given (no rounding).
//  * Quantized weights are dotted with activations quantized once per token row to the
//    format the type declares: Q8_32 (8-bit, blocks of 32, f32 scale; see BlockQ8_32) for
//    most, Q16_32 (16-bit as two byte planes; see BlockQ16_32) for MXFP4, whose weights are
//    accurate enough that 8-bit activations would dominate its error. Accumulation is int32
//    inside a 32-element block and float across blocks.
//  * A matrix marked Activations::Wide takes its type's `wide` entry: Q16_32 activations (16-bit
//    as two byte planes, blocks of 32) for every quantized type, exact integer sums per group
//    (simd_unpack.h's A16 order). ~1e-2 logits on trained models where 8-bit blocks lose ~1-2,
//    at about twice the integer work of Q8_32 (vpdpbusd once per byte plane).
//  * A matrix marked Activations::Exact (see matmul.h) takes its type's `exact` entry instead:
//    the rows are dequantized (exactly, as dequantize_row) and multiplied with f32 activations
//    as given, as float weights are. Trained models with large activation outliers (Gemma) lose
//    up to ~1.5 logits to 8-bit activations, and ~6e-3 to 16-bit ones; this loses nothing.
// A SIMD replacement must keep the activation format it declares and compute the same sums
// (order of float additions may differ).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "engine/tensor/cpu_features.h"
#include "engine/tensor/types.h"

namespace ember {

// How a weight type wants its activations prepared.
enum class ActFormat : uint8_t {
    F32 = 0,     // n floats, unchanged
    Q8_32 = 1,   // n / 32 BlockQ8_32 blocks
    Q16_32 = 2,  // n / 32 BlockQ16_32 blocks
};
inline constexpr size_t kActFormatCount = 3;

// Bytes of one prepared activation row of n elements (n a multiple of 32 for Q8_32, Q16_32).
size_t act_row_bytes(ActFormat format, int64_t n);

// src: n / block_elems blocks of the type; dst: [n] floats.
using DequantizeRowFn = void (*)(const void* src, float* dst, int64_t n);
// src: [n] floats; dst: n / block_elems blocks of the type.
using QuantizeRowFn = void (*)(const float* src, void* dst, int64_t n);
// Returns sum_k w[k] * a[k] over n elements. w_row: n / block_elems blocks of the weight type;
// act_row: one prepared activation row in the type's act_format.
using DotFn = float (*)(int64_t n, const void* w_row, const void* act_row);
// x: [n] floats; dst: one activation row in the format (act_row_bytes(format, n) bytes).
using QuantizeActFn = void (*)(const float* x, void* dst, int64_t n);

// One worker's share of a matmul: rows [0, rows) of the weights times every token.
struct GemmArgs {
    int64_t cols = 0;            // elements per row (a multiple of the type's block)
    const uint8_t* w = nullptr;  // [rows x w_stride bytes], the first row of the share
    size_t w_stride = 0;         // bytes between weight rows
    int64_t rows = 0;
    const uint8_t* act = nullptr;  // [n_tokens x act_stride bytes] prepared activations
    size_t act_stride = 0;
    int64_t n_tokens = 0;
    float* y = nullptr;  // [n_tokens x ldy], already offset to the share's first row
    int64_t ldy = 0;
    uint8_t* scratch = nullptr;  // gemm_scratch(cols) bytes, 64-byte aligned, this worker's own
    // Rows of the same matrix this worker will most likely read next (its next share), so a
    // one-token kernel can prefetch their first panel while it computes its last; nullptr:
    // none known.
    const uint8_t* w_after = nullptr;
};
using GemmFn = void (*)(const GemmArgs& args);
// Scratch bytes one worker's gemm call needs for rows of `cols` elements.
using GemmScratchFn = size_t (*)(int64_t cols);

struct TypeKernels {
    ActFormat act_format = ActFormat::F32;
    DequantizeRowFn dequantize_row = nullptr;  // nullptr: type not supported
    QuantizeRowFn quantize_row = nullptr;      // reference quantizer; nullptr when none
    DotFn dot = nullptr;                       // nullptr: type not supported
    GemmFn gemm = nullptr;                     // nullptr: matmul calls dot per row and token
    GemmScratchFn gemm_scratch = nullptr;      // set together with gemm
    // The same product for a matrix in WeightLayout::Panels16 (GemmArgs::w at a panel's first
    // row, rows a multiple of 16); nullptr: this table cannot read that layout.
    GemmFn gemm_panels16 = nullptr;
};

// Raw GGUF type numbers go up to MXFP4 = 39.
inline constexpr size_t kTypeSlots = 40;

struct KernelTable {
    std::array<TypeKernels, kTypeSlots> types{};  // indexed by raw type number
    // The same products against f32 activations exactly as given (Activations::Exact): every
    // supported type with act_format F32, quantized rows dequantized before the float kernel.
    std::array<TypeKernels, kTypeSlots> exact{};
    // The same products against Q16_32 activations (Activations::Wide) for every quantized type.
    std::array<TypeKernels, kTypeSlots> wide{};
    // Whether `wide` holds SIMD kernels (AVX-512 VNNI) rather than the scalar reference: where it
    // does not, 16-bit activations are slower than exact f32 ones and Auto takes those.
    bool wide_simd = false;
    std::array<QuantizeActFn, kActFormatCount> quantize_act{};  // indexed by ActFormat
    const char* isa = "scalar";                                 // for logs and benchmarks

    const TypeKernels& operator[](TensorType t) const { return types[static_cast<uint32_t>(t)]; }
    TypeKernels& operator[](TensorType t) { return types[static_cast<uint32_t>(t)]; }
    const TypeKernels& exact_for(TensorType t) const { return exact[static_cast<uint32_t>(t)]; }
    TypeKernels& exact_for(TensorType t) { return exact[static_cast<uint32_t>(t)]; }
    const TypeKernels& wide_for(TensorType t) const { return wide[static_cast<uint32_t>(t)]; }
    TypeKernels& wide_for(TensorType t) { return wide[static_cast<uint32_t>(t)]; }
};

// The scalar reference kernels only (what tests compare SIMD variants against).
const KernelTable& scalar_kernels();

// The kernels matmul uses: the scalar table with the SIMD entries of kernel_level() patched in
// (see cpu_features.h; EMBER_KERNELS=scalar|avx2|avx512 lowers the level for debugging).
// Built once on first use (thread-safe) and immutable afterwards.
const KernelTable& active_kernels();

// The table of one level, built fresh (tests and benchmarks compare levels side by side).
// Throws std::invalid_argument when the CPU or OS cannot run that level.
KernelTable make_kernel_table(KernelLevel level);

// Shorthands over active_kernels().
inline const TypeKernels& type_kernels(TensorType t) {
    return active_kernels()[t];
}
void quantize_act_row(ActFormat format, const float* x, void* dst, int64_t n);

// Fills the scalar entries of every supported type (defined in quants_scalar.cpp).
void install_scalar_kernels(KernelTable& table);
// Overwrite entries with SIMD versions (quants_avx2.cpp, quants_avx512.cpp). Call only when
// max_kernel_level() reaches that level; each keeps the act_format contract above.
void install_avx2_kernels(KernelTable& table);
void install_avx512_kernels(KernelTable& table);

}  // namespace ember
