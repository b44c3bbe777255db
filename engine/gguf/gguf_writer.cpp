// GGUF writer (version 3): used by `ember synth` and the quantize tool, and by tests that
// build small files on the fly.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "engine/gguf/gguf.h"
#include "engine/util/grow.h"

namespace ember {

namespace {

class ByteSink {
public:
    explicit ByteSink(std::ofstream& out) : out_(out) {}
    template <typename T>
    void put(const T& v) {
        out_.write(reinterpret_cast<const char*>(&v), sizeof(T));
        written_ += sizeof(T);
    }
    void put_bytes(const void* p, size_t n) {
        out_.write(static_cast<const char*>(p), static_cast<std::streamsize>(n));
        written_ += n;
    }
    void put_string(const std::string& s) {
        put<uint64_t>(s.size());
        put_bytes(s.data(), s.size());
    }
    void pad_to(uint64_t alignment) {
        static const char zeros[64] = {};
        while (written_ % alignment != 0) {
            const uint64_t n = std::min<uint64_t>(sizeof(zeros), alignment - written_ % alignment);
            put_bytes(zeros, n);
        }
    }
    uint64_t written() const { return written_; }

private:
    std::ofstream& out_;
    uint64_t written_ = 0;
};

void put_scalar(ByteSink& sink, GgufValueType type, const GgufValue& v) {
    auto as_int = [&]() -> int64_t {
        if (const auto* i = std::get_if<int64_t>(&v.value)) return *i;
        if (const auto* u = std::get_if<uint64_t>(&v.value)) return static_cast<int64_t>(*u);
        if (const auto* b = std::get_if<bool>(&v.value)) return *b ? 1 : 0;
        throw GgufError("GGUF writer: value is not an integer");
    };
    auto as_float = [&]() -> double {
        if (const auto* d = std::get_if<double>(&v.value)) return *d;
        return static_cast<double>(as_int());
    };
    switch (type) {
        case GgufValueType::U8:
            sink.put(static_cast<uint8_t>(as_int()));
            break;
        case GgufValueType::I8:
            sink.put(static_cast<int8_t>(as_int()));
            break;
        case GgufValueType::U16:
            sink.put(static_cast<uint16_t>(as_int()));
            break;
        case GgufValueType::I16:
            sink.put(static_cast<int16_t>(as_int()));
            break;
        case GgufValueType::U32:
            sink.put(static_cast<uint32_t>(as_int()));
            break;
        case GgufValueType::I32:
            sink.put(static_cast<int32_t>(as_int()));
            break;
        case GgufValueType::U64:
            if (const auto* u = std::get_if<uint64_t>(&v.value)) {
                sink.put(*u);
            } else {
                sink.put(static_cast<uint64_t>(as_int()));
            }
            break;
        case GgufValueType::I64:
            sink.put(as_int());
            break;
        case GgufValueType::F32:
            sink.put(static_cast<float>(as_float()));
            break;
        case GgufValueType::F64:
            sink.put(as_float());
            break;
        case GgufValueType::BOOL:
            sink.put(static_cast<uint8_t>(as_int() != 0));
            break;
        case GgufValueType::STRING:
            sink.put_string(std::get<std::string>(v.value));
            break;
        default:
            throw GgufError("GGUF writer: bad scalar type");
    }
}

void put_array(ByteSink& sink, const GgufArray& arr) {
    sink.put(static_cast<uint32_t>(arr.elem_type));
    sink.put<uint64_t>(arr.size());
    switch (arr.elem_type) {
        case GgufValueType::STRING:
            for (const auto& s : arr.strings) sink.put_string(s);
            break;
        case GgufValueType::ARRAY:
            for (const auto& a : arr.arrays) put_array(sink, a);
            break;
        case GgufValueType::F32:
            for (double d : arr.floats) sink.put(static_cast<float>(d));
            break;
        case GgufValueType::F64:
            for (double d : arr.floats) sink.put(d);
            break;
        case GgufValueType::U64:
            for (uint64_t u : arr.uints) sink.put(u);
            break;
        default:
            for (int64_t i : arr.ints) put_scalar(sink, arr.elem_type, GgufValue{arr.elem_type, i});
            break;
    }
}

}  // namespace

void GgufWriter::set(const std::string& key, GgufValue value) {
    for (auto& kv : metadata_) {
        if (kv.first == key) {
            kv.second = std::move(value);
            return;
        }
    }
    metadata_.emplace_back(key, std::move(value));
}

void GgufWriter::set_string(const std::string& key, std::string value) {
    set(key, GgufValue{GgufValueType::STRING, std::move(value)});
}
void GgufWriter::set_u32(const std::string& key, uint32_t value) {
    set(key, GgufValue{GgufValueType::U32, int64_t{value}});
}
void GgufWriter::set_i32(const std::string& key, int32_t value) {
    set(key, GgufValue{GgufValueType::I32, int64_t{value}});
}
void GgufWriter::set_f32(const std::string& key, float value) {
    set(key, GgufValue{GgufValueType::F32, double{value}});
}
void GgufWriter::set_bool(const std::string& key, bool value) {
    set(key, GgufValue{GgufValueType::BOOL, value});
}

void GgufWriter::copy_from(const GgufFile& file, const std::string& key) {
    const GgufValue* v = file.find(key);
    if (!v) throw GgufError(file.path() + ": metadata '" + key + "' not found to copy");
    set(key, *v);
}

uint64_t GgufWriter::checked_size(const std::string& name, const std::vector<int64_t>& dims,
                                  TensorType type) const {
    const TypeInfo& info = type_info(type);
    uint64_t n = 1;
    for (int64_t d : dims) n *= static_cast<uint64_t>(d);
    if (dims.empty() || dims[0] % info.block_elems != 0) {
        throw GgufError("GGUF writer: tensor '" + name + "' row length is not a multiple of " +
                        std::to_string(info.block_elems));
    }
    for (const auto& t : tensors_) {
        if (t.name == name) throw GgufError("GGUF writer: duplicate tensor '" + name + "'");
    }
    return n / info.block_elems * info.block_bytes;
}

void GgufWriter::add_tensor(const std::string& name, std::vector<int64_t> dims, TensorType type,
                            std::vector<uint8_t> bytes) {
    const uint64_t need = checked_size(name, dims, type);
    if (need != bytes.size()) {
        throw GgufError("GGUF writer: tensor '" + name + "' has " + std::to_string(bytes.size()) +
                        " bytes, its shape needs " + std::to_string(need));
    }
    tensors_.push_back({name, std::move(dims), type, std::move(bytes), need, nullptr});
}

void GgufWriter::add_tensor(const std::string& name, std::vector<int64_t> dims, TensorType type,
                            TensorFill fill) {
    const uint64_t need = checked_size(name, dims, type);
    tensors_.push_back({name, std::move(dims), type, {}, need, std::move(fill)});
}

void GgufWriter::write(const std::string& path, uint32_t alignment) const {
    // A general.alignment in the metadata is what readers lay the file out by, so it wins.
    for (const auto& [key, value] : metadata_) {
        if (key != "general.alignment") continue;
        int64_t a = 0;
        if (const auto* i = std::get_if<int64_t>(&value.value)) a = *i;
        if (const auto* u = std::get_if<uint64_t>(&value.value)) a = static_cast<int64_t>(*u);
        if (a <= 0 || a > (1 << 20)) a = 0;  // rejected below
        alignment = static_cast<uint32_t>(a);
    }
    if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > (1u << 20)) {
        throw GgufError(path + ": alignment " + std::to_string(alignment) +
                        " is not a power of two up to 1048576");
    }
    const std::string tmp = path + ".tmp";
    {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        if (!out) throw GgufError(path + ": cannot create " + tmp);
        ByteSink sink(out);
        sink.put<uint32_t>(0x46554747);
        sink.put<uint32_t>(3);
        sink.put<uint64_t>(tensors_.size());
        const bool has_alignment = std::any_of(metadata_.begin(), metadata_.end(), [](auto& kv) {
            return kv.first == "general.alignment";
        });
        sink.put<uint64_t>(metadata_.size() + (has_alignment || alignment == 32 ? 0 : 1));
        for (const auto& [key, value] : metadata_) {
            sink.put_string(key);
            sink.put(static_cast<uint32_t>(value.type));
            if (value.type == GgufValueType::ARRAY) {
                put_array(sink, std::get<GgufArray>(value.value));
            } else {
                put_scalar(sink, value.type, value);
            }
        }
        if (!has_alignment && alignment != 32) {
            sink.put_string("general.alignment");
            sink.put(static_cast<uint32_t>(GgufValueType::U32));
            sink.put<uint32_t>(alignment);
        }
        uint64_t offset = 0;
        for (const auto& t : tensors_) {
            sink.put_string(t.name);
            sink.put<uint32_t>(static_cast<uint32_t>(t.dims.size()));
            for (int64_t d : t.dims) sink.put<uint64_t>(static_cast<uint64_t>(d));
            sink.put<uint32_t>(static_cast<uint32_t>(t.type));
            sink.put<uint64_t>(offset);
            offset = (offset + t.n_bytes + alignment - 1) / alignment * alignment;
        }
        sink.pad_to(alignment);
        std::vector<uint8_t> produced;  // [largest filled tensor's bytes], reused
        for (const auto& t : tensors_) {
            if (t.fill) {
                grow(produced, t.n_bytes);
                try {
                    t.fill(produced.data());
                } catch (...) {
                    out.close();
                    std::remove(tmp.c_str());  // no half file
                    throw;
                }
                sink.put_bytes(produced.data(), t.n_bytes);
            } else {
                sink.put_bytes(t.bytes.data(), t.bytes.size());
            }
            sink.pad_to(alignment);
        }
        out.flush();
        if (!out) {
            std::remove(tmp.c_str());
            throw GgufError(path + ": write failed (disk full?)");
        }
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
        std::remove(tmp.c_str());
        throw GgufError(path + ": cannot rename " + tmp + " into place");
    }
}

}  // namespace ember
