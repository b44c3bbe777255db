// Per-type kernel table: dequantize, quantize, activation format and dot product.
//
// matmul() never switches on the weight type in its inner loop: it looks the type up once per
// call in active_kernels() and calls through function pointers. The table starts as the scalar
// reference (scalar_kernels()) and SIMD variants overwrite individual entries once, at first
// use, after checking the CPU (see make_active_kernels() in traits.cpp). Because the table is
// per type, an ISA can speed up just the types that matter and inherit the rest.
//
// Accuracy contract (the model tests depend on it):
//  * F32/F16/BF16 weights are dotted with f32 activations, exactly as given (no rounding).
//  * Quantized weights are dotted with activations quantized once per token row to Q8_32
//    (8-bit, blocks of 32, f32 scale; see BlockQ8_32). Accumulation is int32 inside a
//    32-element block and float across blocks.
// A SIMD replacement must keep the activation format it declares and compute the same sums
// (order of float additions may differ).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "engine/tensor/types.h"

namespace ember {

// How a weight type wants its activations prepared.
enum class ActFormat : uint8_t {
    F32 = 0,    // n floats, unchanged
    Q8_32 = 1,  // n / 32 BlockQ8_32 blocks
};
inline constexpr size_t kActFormatCount = 2;

// Bytes of one prepared activation row of n elements (n a multiple of 32 for Q8_32).
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

struct TypeKernels {
    ActFormat act_format = ActFormat::F32;
    DequantizeRowFn dequantize_row = nullptr;  // nullptr: type not supported
    QuantizeRowFn quantize_row = nullptr;      // reference quantizer; nullptr when none
    DotFn dot = nullptr;                       // nullptr: type not supported
};

// Raw GGUF type numbers go up to BF16 = 30.
inline constexpr size_t kTypeSlots = 31;

struct KernelTable {
    std::array<TypeKernels, kTypeSlots> types{};                // indexed by raw type number
    std::array<QuantizeActFn, kActFormatCount> quantize_act{};  // indexed by ActFormat
    const char* isa = "scalar";                                 // for logs and benchmarks

    const TypeKernels& operator[](TensorType t) const { return types[static_cast<uint32_t>(t)]; }
    TypeKernels& operator[](TensorType t) { return types[static_cast<uint32_t>(t)]; }
};

// The scalar reference kernels only (what tests compare SIMD variants against).
const KernelTable& scalar_kernels();

// The kernels matmul uses: the scalar table with the best SIMD entries for this CPU patched in.
// Built once on first use (thread-safe) and immutable afterwards. Setting the environment
// variable EMBER_KERNELS=scalar before the first call keeps the scalar reference (debugging).
const KernelTable& active_kernels();

// Shorthands over active_kernels().
inline const TypeKernels& type_kernels(TensorType t) {
    return active_kernels()[t];
}
void quantize_act_row(ActFormat format, const float* x, void* dst, int64_t n);

// Fills the scalar entries of every supported type (defined in quants_scalar.cpp). SIMD
// installers follow the same pattern: void install_<isa>_kernels(KernelTable&).
void install_scalar_kernels(KernelTable& table);

}  // namespace ember
