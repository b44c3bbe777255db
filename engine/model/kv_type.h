// Element types of the KV cache, and what a row of each costs.
//
// Q8_0 rows use GGUF's Q8_0 blocks (engine/tensor/blocks.h: 32 int8 quants with an fp16 scale)
// laid over the whole row, every head of it; a row whose width is not a multiple of 32 has
// its last block zero-padded. Real models' head sizes (64, 128, 256) are whole blocks, so each
// head has its own scales; only narrow heads (the tiny test fixtures' 8 and 16) share a block
// with a neighbour head, which costs precision there but keeps every model usable.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "engine/tensor/blocks.h"

namespace ember {

enum class KvType { F32, F16, Q8_0 };

inline constexpr int64_t kKvQ8Block = kQK;                     // elements per q8_0 block
inline constexpr int64_t kKvQ8BlockBytes = sizeof(BlockQ8_0);  // fp16 scale + 32 int8

// Elements a row of `width` elements occupies in the cache: q8_0 rounds up to whole blocks.
inline int64_t kv_padded_width(KvType type, int64_t width) {
    return type == KvType::Q8_0 ? (width + kKvQ8Block - 1) / kKvQ8Block * kKvQ8Block : width;
}

// Bytes of the first `elems` elements of a row; for q8_0 `elems` must be a whole number of
// blocks (a padded width, or a position times one).
inline int64_t kv_bytes(KvType type, int64_t elems) {
    switch (type) {
        case KvType::F32:
            return elems * 4;
        case KvType::F16:
            return elems * 2;
        case KvType::Q8_0:
            return elems / kKvQ8Block * kKvQ8BlockBytes;
    }
    return 0;
}

// Bytes one cached row of `width` elements takes.
inline int64_t kv_row_bytes(KvType type, int64_t width) {
    return kv_bytes(type, kv_padded_width(type, width));
}

inline const char* kv_type_name(KvType type) {
    switch (type) {
        case KvType::F32:
            return "f32";
        case KvType::F16:
            return "f16";
        case KvType::Q8_0:
            return "q8_0";
    }
    return "?";
}

inline std::optional<KvType> parse_kv_type(std::string_view name) {
    if (name == "f32") return KvType::F32;
    if (name == "f16") return KvType::F16;
    if (name == "q8_0") return KvType::Q8_0;
    return std::nullopt;
}

}  // namespace ember
