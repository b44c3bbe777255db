#include "engine/tensor/types.h"

#include <array>
#include <cctype>
#include <stdexcept>
#include <string>

#include "engine/tensor/blocks.h"

namespace ember {

namespace {

// Names are ggml's (lower case, capital K for the K-quants) so they match what tools print;
// type_from_name() compares case-insensitively so "Q4_K_M"-style user input is easy to map.
constexpr std::array<TypeInfo, 23> kTypes = {{
    {TensorType::F32, "f32", 1, 4, true},
    {TensorType::F16, "f16", 1, 2, true},
    {TensorType::Q4_0, "q4_0", kQK, sizeof(BlockQ4_0), true},
    {TensorType::Q4_1, "q4_1", kQK, sizeof(BlockQ4_1), true},
    {TensorType::Q5_0, "q5_0", kQK, sizeof(BlockQ5_0), true},
    {TensorType::Q5_1, "q5_1", kQK, sizeof(BlockQ5_1), true},
    {TensorType::Q8_0, "q8_0", kQK, sizeof(BlockQ8_0), true},
    {TensorType::Q8_1, "q8_1", kQK, sizeof(BlockQ8_1), false},
    {TensorType::Q2_K, "q2_K", kQK_K, sizeof(BlockQ2_K), true},
    {TensorType::Q3_K, "q3_K", kQK_K, sizeof(BlockQ3_K), true},
    {TensorType::Q4_K, "q4_K", kQK_K, sizeof(BlockQ4_K), true},
    {TensorType::Q5_K, "q5_K", kQK_K, sizeof(BlockQ5_K), true},
    {TensorType::Q6_K, "q6_K", kQK_K, sizeof(BlockQ6_K), true},
    {TensorType::Q8_K, "q8_K", kQK_K, sizeof(BlockQ8_K), false},
    {TensorType::IQ4_NL, "iq4_nl", kQK, sizeof(BlockIQ4_NL), true},
    {TensorType::IQ3_S, "iq3_s", kQK_K, sizeof(BlockIQ3_S), true},
    {TensorType::IQ4_XS, "iq4_xs", kQK_K, sizeof(BlockIQ4_XS), true},
    {TensorType::I8, "i8", 1, 1, false},
    {TensorType::I16, "i16", 1, 2, false},
    {TensorType::I32, "i32", 1, 4, false},
    {TensorType::F64, "f64", 1, 8, false},
    {TensorType::BF16, "bf16", 1, 2, true},
    {TensorType::MXFP4, "mxfp4", kQK, sizeof(BlockMXFP4), true},
}};

constexpr const TypeInfo* find_info(uint32_t raw) {
    for (const TypeInfo& info : kTypes) {
        if (static_cast<uint32_t>(info.type) == raw) return &info;
    }
    return nullptr;
}

bool iequals(std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
        if (std::tolower(static_cast<unsigned char>(a[i])) !=
            std::tolower(static_cast<unsigned char>(b[i]))) {
            return false;
        }
    }
    return true;
}

}  // namespace

std::optional<TypeInfo> type_info(uint32_t raw_type) {
    if (const TypeInfo* info = find_info(raw_type)) return *info;
    return std::nullopt;
}

const TypeInfo& type_info(TensorType type) {
    if (const TypeInfo* info = find_info(static_cast<uint32_t>(type))) return *info;
    // Only reachable through a cast of an unchecked number: a programming error.
    throw std::invalid_argument("unknown tensor type " +
                                std::to_string(static_cast<uint32_t>(type)));
}

std::optional<TensorType> type_from_name(std::string_view name) {
    for (const TypeInfo& info : kTypes) {
        if (iequals(info.name, name)) return info.type;
    }
    return std::nullopt;
}

}  // namespace ember
