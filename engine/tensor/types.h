// Tensor element types as GGUF numbers them, and the per-type traits table.
//
// Every type has a packed block struct (see blocks.h), a scalar reference for dequantize and
// dot product, and optional SIMD paths chosen once at start-up (see kernels.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace ember {

// Numbering follows the GGUF file format (ggml_type); gaps are types we do not support.
enum class TensorType : uint32_t {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q8_1 = 9,
    Q2_K = 10,
    Q3_K = 11,
    Q4_K = 12,
    Q5_K = 13,
    Q6_K = 14,
    Q8_K = 15,
    IQ4_NL = 20,
    IQ3_S = 21,
    IQ4_XS = 23,
    I8 = 24,
    I16 = 25,
    I32 = 26,
    F64 = 28,
    BF16 = 30,
    MXFP4 = 39,
};

// Static facts about a type: enough to size and validate tensors without touching kernels.
struct TypeInfo {
    TensorType type;
    std::string_view name;
    uint32_t block_elems;  // elements per block (1 for plain float types)
    uint32_t block_bytes;  // bytes per block
    bool supported;        // has dequantize + dot kernels in this engine
};

// Returns nullopt for a type number the file format does not define or we do not know.
std::optional<TypeInfo> type_info(uint32_t raw_type);
const TypeInfo& type_info(TensorType type);
std::optional<TensorType> type_from_name(std::string_view name);

// Bytes needed for one row of `elems` elements; elems must be a multiple of block_elems.
inline uint64_t row_bytes(const TypeInfo& info, uint64_t elems) {
    return elems / info.block_elems * info.block_bytes;
}

}  // namespace ember
