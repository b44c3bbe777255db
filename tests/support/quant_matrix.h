// Quantized test matrices and activations with outliers, shared by the activation-path tests
// (test_tensor_exact_activations, test_tensor_wide_activations).
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "engine/tensor/matmul.h"
#include "engine/tensor/traits.h"
#include "engine/tensor/types.h"
#include "tests/support/random_vectors.h"

namespace ember::test {

inline std::string type_name(TensorType t) {
    return std::string(type_info(t).name);
}

// Every quantized type whose reference quantizer can build test matrices.
inline std::vector<TensorType> quantized_test_types() {
    std::vector<TensorType> types;
    for (TensorType t : {TensorType::Q8_0, TensorType::Q4_0, TensorType::Q4_1, TensorType::Q5_0,
                         TensorType::Q5_1, TensorType::IQ4_NL, TensorType::MXFP4, TensorType::Q2_K,
                         TensorType::Q3_K, TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K,
                         TensorType::IQ4_XS, TensorType::IQ3_S}) {
        if (scalar_kernels()[t].quantize_row != nullptr) types.push_back(t);
    }
    return types;
}

// A quantized matrix and its rows as the scalar reference dequantizes them.
struct QMatrix {
    std::vector<uint8_t> bytes;  // [rows x stride]
    std::vector<float> deq;      // [rows x cols], scalar dequantize_row of each row
    MatrixView view;             // of `bytes`, with the activations asked for
};

// Rows of standard-normal weights through the scalar reference quantizer, `pad` bytes of junk
// after each row (a stride the kernels must honour rather than assume).
inline QMatrix make_quant_matrix(TensorType t, int64_t rows, int64_t cols, size_t pad,
                                 uint32_t seed, Activations activations) {
    const TypeKernels& ref = scalar_kernels()[t];
    const size_t rb = row_bytes(type_info(t), static_cast<uint64_t>(cols));
    const size_t stride = rb + pad;
    QMatrix m;
    m.bytes.assign(stride * static_cast<size_t>(rows), 0xa5);
    m.deq.resize(static_cast<size_t>(rows * cols));
    const std::vector<float> src = normal_floats(rows * cols, seed);
    for (int64_t r = 0; r < rows; ++r) {
        uint8_t* row = m.bytes.data() + static_cast<size_t>(r) * stride;
        ref.quantize_row(src.data() + r * cols, row, cols);
        ref.dequantize_row(row, m.deq.data() + r * cols, cols);
    }
    m.view = MatrixView{t, m.bytes.data(), rows, cols, stride, WeightLayout::Rows, activations};
    return m;
}

// [n_tokens x cols] standard-normal activations; odd tokens also carry three outliers of
// magnitude ~1e4 in distinct 32-element blocks. One such value sets its block's 8-bit scale to
// ~80, rounding its 31 neighbours (~1) to zero.
inline std::vector<float> activations_with_outliers(int64_t n_tokens, int64_t cols, uint32_t seed) {
    std::vector<float> x = normal_floats(n_tokens * cols, seed);
    std::mt19937 rng(seed ^ 0x9e3779b9u);
    std::uniform_int_distribution<int64_t> in_block(0, 31);
    std::uniform_real_distribution<float> size(0.8e4f, 1.2e4f);
    for (int64_t t = 1; t < n_tokens; t += 2) {
        for (int64_t block : {int64_t{1}, cols / 64, cols / 32 - 2}) {
            const float sign = (in_block(rng) & 1) != 0 ? 1.0f : -1.0f;
            x[static_cast<size_t>(t * cols + block * 32 + in_block(rng))] = sign * size(rng);
        }
    }
    return x;
}

inline bool has_outliers(int64_t token) {
    return token % 2 == 1;
}

// [n_tokens x rows]: every token of `x` multiplied alone (n_tokens = 1): the results every
// batch must reproduce bit for bit.
inline std::vector<float> single_token_results(const QMatrix& m, const std::vector<float>& x,
                                               int64_t n_tokens, const KernelTable& table) {
    const int64_t rows = m.view.rows, cols = m.view.cols;
    std::vector<float> y(static_cast<size_t>(n_tokens * rows));
    MatmulScratch scratch;
    for (int64_t t = 0; t < n_tokens; ++t) {
        matmul_serial(m.view, x.data() + t * cols, 1, y.data() + t * rows, rows, scratch, table);
    }
    return y;
}

}  // namespace ember::test
