// What loading a family's hyper-parameters and tensors is made of: metadata readers that name
// the key at fault, and TensorBinder, which finds a tensor, checks its shape against what the
// family expects and points a MatrixView into the mapping. Used by model.cpp and the family
// files (families/).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/gguf/gguf.h"
#include "engine/tensor/matmul.h"

namespace ember {

struct ModelConfig;

// A file that is not a model Ember can run: the message names the file and the field.
class ModelError : public GgufError {
public:
    using GgufError::GgufError;
};

std::string shape_string(const std::vector<int64_t>& dims);
// The integer at `key`; throws ModelError naming it when absent.
int64_t require_int(const GgufFile& f, const std::string& key);
// v when 1 <= v <= max, else ModelError naming key and range.
int64_t positive(const GgufFile& f, const std::string& key, int64_t v, int64_t max);
// The array at `key`, or null when absent or not an array.
const GgufArray* optional_array(const GgufFile& f, const std::string& key);

// Looks up tensors by name and checks them against the shape the family expects.
class TensorBinder {
public:
    TensorBinder(const GgufFile& file, Activations activations)
        : file_(file), activations_(activations) {}

    const GgufFile& file() const { return file_; }
    Activations activations() const { return activations_; }
    const GgufTensorInfo* find(const std::string& name) const { return file_.find_tensor(name); }
    const GgufTensorInfo& require(const std::string& name, const std::vector<int64_t>& dims) const;
    // Trailing dimensions of 1 are equivalent; the rest must equal dims.
    void check_shape(const GgufTensorInfo& t, const std::vector<int64_t>& dims) const;
    // A [rows x cols] matrix (GGUF dims {cols, rows}) viewed in place.
    MatrixView matrix(const std::string& name, int64_t rows, int64_t cols) const;
    // Small vectors (norm weights, biases) are dequantized to f32 once: a few KB per layer.
    std::vector<float> vector(const std::string& name, int64_t n) const;
    // A small 2-D tensor [rows x row_len] (ne0 = row_len) as f32, rows concatenated.
    std::vector<float> vector_2d(const std::string& name, int64_t row_len, int64_t rows) const;
    // vector(), or empty when the file has no such tensor.
    std::vector<float> optional_vector(const std::string& name, int64_t n) const;

private:
    std::vector<float> to_f32(const GgufTensorInfo& t, int64_t n) const;

    const GgufFile& file_;
    Activations activations_;
};

}  // namespace ember
