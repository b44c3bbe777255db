// Loading helpers (binder.h).
#include "engine/model/binder.h"

#include "engine/tensor/traits.h"

namespace ember {

std::string shape_string(const std::vector<int64_t>& dims) {
    std::string s = "[";
    for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
    return s + "]";
}

int64_t require_int(const GgufFile& f, const std::string& key) {
    auto v = f.get_int(key);
    if (!v) throw ModelError(f.path() + ": missing metadata '" + key + "'");
    return *v;
}

int64_t positive(const GgufFile& f, const std::string& key, int64_t v, int64_t max) {
    if (v <= 0 || v > max) {
        throw ModelError(f.path() + ": metadata '" + key + "' = " + std::to_string(v) +
                         " is out of range (1.." + std::to_string(max) + ")");
    }
    return v;
}

const GgufArray* optional_array(const GgufFile& f, const std::string& key) {
    const GgufValue* v = f.find(key);
    return v && v->type == GgufValueType::ARRAY ? f.get_array(key) : nullptr;
}

const GgufTensorInfo& TensorBinder::require(const std::string& name,
                                            const std::vector<int64_t>& dims) const {
    const GgufTensorInfo* t = file_.find_tensor(name);
    if (!t) throw ModelError(file_.path() + ": missing tensor '" + name + "'");
    check_shape(*t, dims);
    return *t;
}

void TensorBinder::check_shape(const GgufTensorInfo& t, const std::vector<int64_t>& dims) const {
    std::vector<int64_t> have = t.dims;
    while (have.size() > dims.size() && have.back() == 1) have.pop_back();
    if (have != dims) {
        throw ModelError(file_.path() + ": tensor '" + t.name + "' has shape " +
                         shape_string(t.dims) + ", expected " + shape_string(dims));
    }
}

MatrixView TensorBinder::matrix(const std::string& name, int64_t rows, int64_t cols) const {
    const GgufTensorInfo& t = require(name, {cols, rows});
    MatrixView m;
    m.type = t.type;
    m.data = t.data;
    m.rows = rows;
    m.cols = cols;
    m.row_stride = row_bytes(type_info(t.type), static_cast<uint64_t>(cols));
    m.activations = activations_;
    return m;
}

std::vector<float> TensorBinder::vector(const std::string& name, int64_t n) const {
    return to_f32(require(name, {n}), n);
}

std::vector<float> TensorBinder::vector_2d(const std::string& name, int64_t row_len,
                                           int64_t rows) const {
    return to_f32(require(name, {row_len, rows}), row_len * rows);
}

std::vector<float> TensorBinder::optional_vector(const std::string& name, int64_t n) const {
    const GgufTensorInfo* t = find(name);
    if (!t) return {};
    check_shape(*t, {n});
    return to_f32(*t, n);
}

std::vector<float> TensorBinder::to_f32(const GgufTensorInfo& t, int64_t n) const {
    MatrixView m;
    m.type = t.type;
    m.data = t.data;
    m.rows = 1;
    m.cols = n;
    m.row_stride = t.n_bytes;
    std::vector<float> out(static_cast<size_t>(n));
    dequantize_row(m, 0, out.data());
    return out;
}

}  // namespace ember
