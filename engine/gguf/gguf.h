// GGUF files: a validated, memory-mapped reader and a writer.
//
// The reader checks every count, length, offset, size, alignment and dimension against the
// file before anything uses it; a malformed file raises GgufError naming the file and the
// field or tensor at fault. Tensor data stays in the mmap (never copied); open_metadata reads
// only the metadata and tensor table, for what needs no weights (a tokenizer, `ember info`).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "engine/tensor/types.h"

namespace ember {

class GgufError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// Metadata value types, numbered as in the file format.
enum class GgufValueType : uint32_t {
    U8 = 0,
    I8 = 1,
    U16 = 2,
    I16 = 3,
    U32 = 4,
    I32 = 5,
    F32 = 6,
    BOOL = 7,
    STRING = 8,
    ARRAY = 9,
    U64 = 10,
    I64 = 11,
    F64 = 12,
};
std::string_view gguf_value_type_name(GgufValueType type);

// An array value: elements of one type. Strings are kept as owned strings; numeric arrays
// are widened to the largest type of their kind so callers need not switch on width.
struct GgufArray {
    GgufValueType elem_type = GgufValueType::U8;
    std::vector<std::string> strings;  // elem_type == STRING
    std::vector<int64_t> ints;         // any integer type or BOOL
    std::vector<uint64_t> uints;       // U64 only (values that may not fit int64)
    std::vector<double> floats;        // F32 / F64
    std::vector<GgufArray> arrays;     // nested arrays (rare, but legal)
    size_t size() const;
};

struct GgufValue {
    GgufValueType type = GgufValueType::U8;
    std::variant<int64_t, uint64_t, double, bool, std::string, GgufArray> value;
};

struct GgufTensorInfo {
    std::string name;
    std::vector<int64_t> dims;  // ne[0] is the contiguous (row) dimension
    TensorType type = TensorType::F32;
    uint64_t offset = 0;  // relative to the data section
    uint64_t n_bytes = 0;
    const uint8_t* data = nullptr;  // points into the mmap; null after open_metadata
    int64_t n_elements() const;
};

// A read-only mapping of a whole file.
class MappedFile {
public:
    explicit MappedFile(const std::string& path);  // throws GgufError on failure
    ~MappedFile();
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;
    const uint8_t* data() const { return data_; }
    uint64_t size() const { return size_; }
    const std::string& path() const { return path_; }

private:
    std::string path_;
    const uint8_t* data_ = nullptr;
    uint64_t size_ = 0;
};

class GgufFile {
public:
    // Maps and validates `path`. Throws GgufError with the file name and the problem.
    static std::unique_ptr<GgufFile> open(const std::string& path);
    // Reads and validates the metadata and tensor table of `path` without mapping the file or
    // reading any tensor data (a vocabulary-only file and a 20 GB model cost the same): tensor
    // `data` and file_data() are null. Throws GgufError like open.
    static std::unique_ptr<GgufFile> open_metadata(const std::string& path);
    // Validates an in-memory image (used by the fuzz test); `name` is used in messages.
    // The bytes must outlive the returned object.
    static std::unique_ptr<GgufFile> parse(const uint8_t* bytes, uint64_t size,
                                           const std::string& name);

    const std::string& path() const { return name_; }
    uint32_t version() const { return version_; }
    uint32_t alignment() const { return alignment_; }
    uint64_t file_size() const { return size_; }
    const uint8_t* file_data() const { return bytes_; }  // null after open_metadata

    const std::map<std::string, GgufValue>& metadata() const { return metadata_; }
    const std::vector<std::string>& metadata_order() const { return metadata_order_; }
    const GgufValue* find(std::string_view key) const;

    // Typed getters: nullopt when absent; GgufError when present with an unusable type.
    std::optional<std::string> get_string(std::string_view key) const;
    std::optional<int64_t> get_int(std::string_view key) const;   // any integer type
    std::optional<double> get_float(std::string_view key) const;  // float or integer
    std::optional<bool> get_bool(std::string_view key) const;
    const GgufArray* get_array(std::string_view key) const;
    // Forgets a metadata key whose value has been consumed and is held elsewhere (a model's
    // vocabulary, which its tokenizer keeps): tens of MB for 250k-token vocabularies.
    void drop_metadata(std::string_view key);

    const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
    const GgufTensorInfo* find_tensor(std::string_view name) const;

    // Tells the kernel this process is done with the tensor bytes [p, p + n) of the mapping (a
    // copy of them lives elsewhere now): the whole pages inside leave the process's resident
    // set; read again, they would come back from the page cache unchanged. False when the file
    // is not mapped (parsed from memory) or the range is not inside it.
    bool release(const void* p, size_t n) const;

private:
    GgufFile() = default;
    // Parses from the mapping (fd < 0) or by reading the header from fd.
    void parse_all(int fd);

    std::unique_ptr<MappedFile> mapping_;
    std::string name_;
    const uint8_t* bytes_ = nullptr;
    uint64_t size_ = 0;
    uint32_t version_ = 0;
    uint32_t alignment_ = 32;
    std::map<std::string, GgufValue> metadata_;
    std::vector<std::string> metadata_order_;
    std::vector<GgufTensorInfo> tensors_;
    std::map<std::string, size_t, std::less<>> tensor_index_;
};

// Writes GGUF version 3. Metadata keeps insertion order; tensors are laid out aligned.
class GgufWriter {
public:
    void set(const std::string& key, GgufValue value);
    void set_string(const std::string& key, std::string value);
    void set_u32(const std::string& key, uint32_t value);
    void set_i32(const std::string& key, int32_t value);
    void set_f32(const std::string& key, float value);
    void set_bool(const std::string& key, bool value);
    // Copies metadata value as-is (keeps its element type).
    void copy_from(const GgufFile& file, const std::string& key);

    // dims: ne[0] first. `bytes` must hold exactly the tensor's size for `type`.
    void add_tensor(const std::string& name, std::vector<int64_t> dims, TensorType type,
                    std::vector<uint8_t> bytes);

    // A tensor whose bytes are produced while the file is written: fill(dst) writes the
    // tensor's size in bytes to dst. Tensors are filled one at a time into one reused buffer,
    // so a file larger than memory (a 30B model's random weights) never has to be held whole.
    using TensorFill = std::function<void(uint8_t* dst)>;
    void add_tensor(const std::string& name, std::vector<int64_t> dims, TensorType type,
                    TensorFill fill);

    // Writes to `path` (via a temporary file and rename, so a failure leaves no half file).
    void write(const std::string& path, uint32_t alignment = 32) const;

private:
    struct PendingTensor {
        std::string name;
        std::vector<int64_t> dims;
        TensorType type;
        std::vector<uint8_t> bytes;
        uint64_t n_bytes = 0;  // bytes.size(), or what fill produces
        TensorFill fill;       // set for tensors produced at write time
    };
    uint64_t checked_size(const std::string& name, const std::vector<int64_t>& dims,
                          TensorType type) const;
    std::vector<std::pair<std::string, GgufValue>> metadata_;
    std::vector<PendingTensor> tensors_;
};

}  // namespace ember
