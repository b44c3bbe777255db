// GGUF reader: every read is bounds-checked against the mapping; every error names the file
// and the field, key or tensor it concerns.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <set>
#include <sstream>

#include "engine/gguf/gguf.h"

namespace ember {

namespace {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" little-endian
// Limits that no real file reaches; they keep a corrupt count from allocating gigabytes.
constexpr uint64_t kMaxStringBytes = 1ull << 30;
constexpr int kMaxArrayNesting = 4;
constexpr uint32_t kMaxDims = 4;

[[noreturn]] void fail(const std::string& file, const std::string& what) {
    throw GgufError(file + ": " + what);
}

// A cursor over the file image that refuses to read past the end. The image is either a
// mapping of the whole file, or (header-only opening) bytes read from `fd` on demand into a
// growing buffer, so that only the metadata and tensor table are ever read.
class Cursor {
public:
    Cursor(const uint8_t* data, uint64_t size, const std::string& file)
        : data_(data), size_(size), file_(file) {}
    Cursor(int fd, uint64_t size, std::vector<uint8_t>& buffer, const std::string& file)
        : size_(size), file_(file), fd_(fd), buffer_(&buffer) {}

    uint64_t offset() const { return pos_; }
    const std::string& file() const { return file_; }
    uint64_t remaining() const { return size_ - pos_; }

    void need(uint64_t n, const std::string& field) {
        if (n > remaining()) {
            std::ostringstream ss;
            ss << "truncated while reading " << field << " at offset " << pos_ << " (need " << n
               << " bytes, " << remaining() << " left)";
            fail(file_, ss.str());
        }
        if (buffer_) fill(pos_ + n);
    }

    template <typename T>
    T read(const std::string& field) {
        need(sizeof(T), field);
        T value;
        std::memcpy(&value, data_ + pos_, sizeof(T));
        pos_ += sizeof(T);
        return value;
    }

    // `index` >= 0 reads element `index` of the array `field`. Names for messages are only
    // built on failure: vocabularies hold hundreds of thousands of strings.
    std::string read_string(const std::string& field, int64_t index = -1) {
        auto name = [&] { return index < 0 ? field : field + "[" + std::to_string(index) + "]"; };
        if (remaining() < sizeof(uint64_t)) need(sizeof(uint64_t), name() + " (string length)");
        const uint64_t len = read<uint64_t>(field);
        if (len > kMaxStringBytes) {
            fail(file_, name() + ": string length " + std::to_string(len) + " is implausible");
        }
        if (len > remaining()) need(len, name());
        if (buffer_) fill(pos_ + len);
        std::string s(reinterpret_cast<const char*>(data_ + pos_), len);
        pos_ += len;
        return s;
    }

private:
    // Header-only opening: makes bytes [0, end) available (end <= size_), reading ahead in
    // doubling chunks so a vocabulary of many small strings costs few reads.
    void fill(uint64_t end) {
        if (end <= buffer_->size()) return;
        const uint64_t want = std::min(size_, std::max({end, 2 * buffer_->size(), kFirstRead}));
        uint64_t have = buffer_->size();
        buffer_->resize(want);
        while (have < want) {
            const ssize_t got =
                ::pread(fd_, buffer_->data() + have, want - have, static_cast<off_t>(have));
            if (got < 0 && errno == EINTR) continue;
            if (got <= 0) {
                fail(file_, "cannot read at offset " + std::to_string(have) + ": " +
                                (got < 0 ? std::strerror(errno) : "unexpected end of file"));
            }
            have += static_cast<uint64_t>(got);
        }
        data_ = buffer_->data();
    }

    static constexpr uint64_t kFirstRead = 1 << 20;
    const uint8_t* data_ = nullptr;
    uint64_t size_;
    uint64_t pos_ = 0;
    const std::string& file_;
    int fd_ = -1;
    std::vector<uint8_t>* buffer_ = nullptr;  // null when the whole file is mapped
};

bool is_valid_value_type(uint32_t t) {
    return t <= static_cast<uint32_t>(GgufValueType::F64);
}

size_t scalar_size(GgufValueType t) {
    switch (t) {
        case GgufValueType::U8:
        case GgufValueType::I8:
        case GgufValueType::BOOL:
            return 1;
        case GgufValueType::U16:
        case GgufValueType::I16:
            return 2;
        case GgufValueType::U32:
        case GgufValueType::I32:
        case GgufValueType::F32:
            return 4;
        case GgufValueType::U64:
        case GgufValueType::I64:
        case GgufValueType::F64:
            return 8;
        default:
            return 0;
    }
}

// Reads one scalar of type t as the widest type of its kind.
GgufValue read_scalar(Cursor& cur, GgufValueType t, const std::string& field) {
    GgufValue v;
    v.type = t;
    switch (t) {
        case GgufValueType::U8:
            v.value = int64_t{cur.read<uint8_t>(field)};
            break;
        case GgufValueType::I8:
            v.value = int64_t{cur.read<int8_t>(field)};
            break;
        case GgufValueType::U16:
            v.value = int64_t{cur.read<uint16_t>(field)};
            break;
        case GgufValueType::I16:
            v.value = int64_t{cur.read<int16_t>(field)};
            break;
        case GgufValueType::U32:
            v.value = int64_t{cur.read<uint32_t>(field)};
            break;
        case GgufValueType::I32:
            v.value = int64_t{cur.read<int32_t>(field)};
            break;
        case GgufValueType::I64:
            v.value = cur.read<int64_t>(field);
            break;
        case GgufValueType::U64:
            v.value = cur.read<uint64_t>(field);
            break;
        case GgufValueType::F32:
            v.value = double{cur.read<float>(field)};
            break;
        case GgufValueType::F64:
            v.value = cur.read<double>(field);
            break;
        case GgufValueType::BOOL: {
            uint8_t b = cur.read<uint8_t>(field);
            if (b > 1)
                fail(cur.file(), field + ": bool value " + std::to_string(b) + " is not 0 or 1");
            v.value = b != 0;
            break;
        }
        case GgufValueType::STRING:
            v.value = cur.read_string(field);
            break;
        default:
            break;
    }
    return v;
}

GgufArray read_array(Cursor& cur, const std::string& field, const std::string& file, int depth) {
    if (depth > kMaxArrayNesting) fail(file, field + ": arrays nested too deeply");
    GgufArray arr;
    const uint32_t raw_type = cur.read<uint32_t>(field + " (array element type)");
    if (!is_valid_value_type(raw_type)) {
        fail(file, field + ": unknown array element type " + std::to_string(raw_type));
    }
    arr.elem_type = static_cast<GgufValueType>(raw_type);
    const uint64_t count = cur.read<uint64_t>(field + " (array length)");
    // Every element takes at least one byte (strings at least 8), so a count larger than the
    // bytes left is a corrupt file, caught before we reserve memory for it.
    const size_t min_elem = arr.elem_type == GgufValueType::STRING  ? 8
                            : arr.elem_type == GgufValueType::ARRAY ? 12
                                                                    : scalar_size(arr.elem_type);
    if (count > cur.remaining() / min_elem) {
        fail(file, field + ": array length " + std::to_string(count) + " exceeds the file");
    }
    switch (arr.elem_type) {
        case GgufValueType::STRING:
            arr.strings.reserve(count);
            for (uint64_t i = 0; i < count; ++i) {
                arr.strings.push_back(cur.read_string(field, static_cast<int64_t>(i)));
            }
            break;
        case GgufValueType::ARRAY:
            for (uint64_t i = 0; i < count; ++i) {
                arr.arrays.push_back(
                    read_array(cur, field + "[" + std::to_string(i) + "]", file, depth + 1));
            }
            break;
        case GgufValueType::F32:
        case GgufValueType::F64:
            arr.floats.reserve(count);
            for (uint64_t i = 0; i < count; ++i) {
                arr.floats.push_back(
                    std::get<double>(read_scalar(cur, arr.elem_type, field).value));
            }
            break;
        case GgufValueType::U64:
            arr.uints.reserve(count);
            for (uint64_t i = 0; i < count; ++i) arr.uints.push_back(cur.read<uint64_t>(field));
            break;
        case GgufValueType::BOOL:
            arr.ints.reserve(count);
            for (uint64_t i = 0; i < count; ++i) {
                arr.ints.push_back(std::get<bool>(read_scalar(cur, arr.elem_type, field).value));
            }
            break;
        default:
            arr.ints.reserve(count);
            for (uint64_t i = 0; i < count; ++i) {
                arr.ints.push_back(std::get<int64_t>(read_scalar(cur, arr.elem_type, field).value));
            }
            break;
    }
    return arr;
}

bool mul_overflows(uint64_t a, uint64_t b, uint64_t* out) {
    return __builtin_mul_overflow(a, b, out);
}

}  // namespace

size_t GgufArray::size() const {
    switch (elem_type) {
        case GgufValueType::STRING:
            return strings.size();
        case GgufValueType::ARRAY:
            return arrays.size();
        case GgufValueType::F32:
        case GgufValueType::F64:
            return floats.size();
        case GgufValueType::U64:
            return uints.size();
        default:
            return ints.size();
    }
}

std::string_view gguf_value_type_name(GgufValueType type) {
    static constexpr std::string_view kNames[] = {"u8",  "i8",  "u16",  "i16",    "u32",
                                                  "i32", "f32", "bool", "string", "array",
                                                  "u64", "i64", "f64"};
    auto i = static_cast<uint32_t>(type);
    return i < std::size(kNames) ? kNames[i] : std::string_view("unknown");
}

int64_t GgufTensorInfo::n_elements() const {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    return n;
}

namespace {

// Opens `path` for reading and returns its descriptor and size; the file must be a regular,
// non-empty file. Non-blocking, so that a FIFO is refused at once instead of waiting forever
// for a writer (it changes nothing for a regular file).
int open_regular_file(const std::string& path, uint64_t* size) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) fail(path, std::string("cannot open: ") + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        int err = errno;
        ::close(fd);
        fail(path, std::string("cannot stat: ") + std::strerror(err));
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        fail(path, "not a regular file");
    }
    *size = static_cast<uint64_t>(st.st_size);
    if (*size == 0) {
        ::close(fd);
        fail(path, "file is empty");
    }
    return fd;
}

}  // namespace

MappedFile::MappedFile(const std::string& path) : path_(path) {
    int fd = open_regular_file(path, &size_);
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    int err = errno;
    ::close(fd);
    if (p == MAP_FAILED) fail(path, std::string("cannot mmap: ") + std::strerror(err));
    data_ = static_cast<const uint8_t*>(p);
}

MappedFile::~MappedFile() {
    if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

bool GgufFile::release(const void* p, size_t n) const {
    const auto* b = static_cast<const uint8_t*>(p);
    if (!mapping_ || b < bytes_ || n > size_ || static_cast<uint64_t>(b - bytes_) > size_ - n) {
        return false;
    }
    const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    const uintptr_t begin = (reinterpret_cast<uintptr_t>(b) + page - 1) / page * page;
    const uintptr_t end = (reinterpret_cast<uintptr_t>(b) + n) / page * page;
    if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
    return true;
}

std::unique_ptr<GgufFile> GgufFile::open(const std::string& path) {
    auto mapping = std::make_unique<MappedFile>(path);
    std::unique_ptr<GgufFile> f(new GgufFile());
    f->name_ = path;
    f->bytes_ = mapping->data();
    f->size_ = mapping->size();
    f->mapping_ = std::move(mapping);
    f->parse_all(-1);
    return f;
}

std::unique_ptr<GgufFile> GgufFile::open_metadata(const std::string& path) {
    std::unique_ptr<GgufFile> f(new GgufFile());
    f->name_ = path;
    const int fd = open_regular_file(path, &f->size_);
    struct CloseFd {
        int fd;
        ~CloseFd() { ::close(fd); }
    } close_fd{fd};
    f->parse_all(fd);
    return f;
}

std::unique_ptr<GgufFile> GgufFile::parse(const uint8_t* bytes, uint64_t size,
                                          const std::string& name) {
    std::unique_ptr<GgufFile> f(new GgufFile());
    f->name_ = name;
    f->bytes_ = bytes;
    f->size_ = size;
    f->parse_all(-1);
    return f;
}

void GgufFile::parse_all(int fd) {
    std::vector<uint8_t> header;  // header-only opening: the bytes read so far
    Cursor cur = fd < 0 ? Cursor(bytes_, size_, name_) : Cursor(fd, size_, header, name_);
    const uint32_t magic = cur.read<uint32_t>("magic");
    if (magic != kGgufMagic) fail(name_, "bad magic: not a GGUF file");
    version_ = cur.read<uint32_t>("version");
    if (version_ != 2 && version_ != 3) {
        fail(name_, "unsupported GGUF version " + std::to_string(version_) + " (need 2 or 3)");
    }
    const uint64_t n_tensors = cur.read<uint64_t>("tensor_count");
    const uint64_t n_kv = cur.read<uint64_t>("metadata_kv_count");
    // Each entry needs well over 8 bytes; larger counts cannot fit in the file.
    if (n_tensors > cur.remaining() / 8) {
        fail(name_, "tensor_count " + std::to_string(n_tensors) + " exceeds the file");
    }
    if (n_kv > cur.remaining() / 8) {
        fail(name_, "metadata_kv_count " + std::to_string(n_kv) + " exceeds the file");
    }

    for (uint64_t i = 0; i < n_kv; ++i) {
        const std::string key = cur.read_string("metadata key #" + std::to_string(i));
        if (metadata_.count(key)) fail(name_, "duplicate metadata key '" + key + "'");
        const uint32_t raw_type = cur.read<uint32_t>("type of metadata '" + key + "'");
        if (!is_valid_value_type(raw_type)) {
            fail(name_, "metadata '" + key + "': unknown value type " + std::to_string(raw_type));
        }
        GgufValue v;
        const auto type = static_cast<GgufValueType>(raw_type);
        const std::string field = "metadata '" + key + "'";
        if (type == GgufValueType::ARRAY) {
            v.type = type;
            v.value = read_array(cur, field, name_, 0);
        } else {
            v = read_scalar(cur, type, field);
        }
        metadata_order_.push_back(key);
        metadata_.emplace(key, std::move(v));
    }

    if (find("general.alignment")) {
        // get_int names the key and type when the value is not an integer.
        const int64_t align = *get_int("general.alignment");
        if (align <= 0 || align > (1 << 20) || (align & (align - 1)) != 0) {
            fail(name_, "general.alignment must be a power of two up to 1048576, got " +
                            std::to_string(align));
        }
        alignment_ = static_cast<uint32_t>(align);
    }

    tensors_.reserve(n_tensors);
    for (uint64_t i = 0; i < n_tensors; ++i) {
        GgufTensorInfo t;
        t.name = cur.read_string("name of tensor #" + std::to_string(i));
        const std::string field = "tensor '" + t.name + "'";
        if (tensor_index_.count(t.name)) fail(name_, "duplicate tensor name '" + t.name + "'");
        const uint32_t n_dims = cur.read<uint32_t>(field + " n_dims");
        if (n_dims == 0 || n_dims > kMaxDims) {
            fail(name_, field + ": n_dims " + std::to_string(n_dims) + " is not in 1.." +
                            std::to_string(kMaxDims));
        }
        uint64_t n_elems = 1;
        for (uint32_t d = 0; d < n_dims; ++d) {
            const uint64_t dim = cur.read<uint64_t>(field + " dim " + std::to_string(d));
            if (dim == 0 || dim > (uint64_t{1} << 40) || mul_overflows(n_elems, dim, &n_elems) ||
                n_elems > (uint64_t{1} << 48)) {
                fail(name_, field + ": dimension " + std::to_string(d) + " = " +
                                std::to_string(dim) + " is zero or overflows");
            }
            t.dims.push_back(static_cast<int64_t>(dim));
        }
        const uint32_t raw_type = cur.read<uint32_t>(field + " type");
        const auto info = type_info(raw_type);
        if (!info) fail(name_, field + ": unknown tensor type " + std::to_string(raw_type));
        if (!info->supported) {
            fail(name_, field + ": tensor type " + std::string(info->name) + " is not supported");
        }
        t.type = info->type;
        if (t.dims[0] % info->block_elems != 0) {
            fail(name_, field + ": row length " + std::to_string(t.dims[0]) +
                            " is not a multiple of the " + std::string(info->name) +
                            " block size " + std::to_string(info->block_elems));
        }
        t.offset = cur.read<uint64_t>(field + " offset");
        if (t.offset % alignment_ != 0) {
            fail(name_, field + ": data offset " + std::to_string(t.offset) +
                            " is not aligned to " + std::to_string(alignment_));
        }
        t.n_bytes = n_elems / info->block_elems * info->block_bytes;
        tensor_index_.emplace(t.name, tensors_.size());
        tensors_.push_back(std::move(t));
    }

    const uint64_t data_start = (cur.offset() + alignment_ - 1) / alignment_ * alignment_;
    if (!tensors_.empty() && data_start > size_) {
        fail(name_, "truncated: data section would start at " + std::to_string(data_start) +
                        " beyond the file size " + std::to_string(size_));
    }
    // Tensors must lie inside the file and must not overlap one another.
    std::vector<std::pair<uint64_t, size_t>> spans;
    for (size_t i = 0; i < tensors_.size(); ++i) {
        GgufTensorInfo& t = tensors_[i];
        const uint64_t avail = size_ - data_start;
        if (t.offset > avail || t.n_bytes > avail - t.offset) {
            fail(name_, "tensor '" + t.name + "': data [" + std::to_string(t.offset) + ", +" +
                            std::to_string(t.n_bytes) + ") lies outside the file (data section " +
                            std::to_string(avail) + " bytes)");
        }
        t.data = bytes_ ? bytes_ + data_start + t.offset : nullptr;
        spans.emplace_back(t.offset, i);
    }
    std::sort(spans.begin(), spans.end());
    for (size_t i = 1; i < spans.size(); ++i) {
        const GgufTensorInfo& prev = tensors_[spans[i - 1].second];
        const GgufTensorInfo& cur_t = tensors_[spans[i].second];
        if (prev.offset + prev.n_bytes > cur_t.offset) {
            fail(name_, "tensor '" + cur_t.name + "' overlaps tensor '" + prev.name + "'");
        }
    }
}

const GgufValue* GgufFile::find(std::string_view key) const {
    auto it = metadata_.find(std::string(key));
    return it == metadata_.end() ? nullptr : &it->second;
}

std::optional<std::string> GgufFile::get_string(std::string_view key) const {
    const GgufValue* v = find(key);
    if (!v) return std::nullopt;
    if (const auto* s = std::get_if<std::string>(&v->value)) return *s;
    fail(name_, "metadata '" + std::string(key) + "' should be a string, is " +
                    std::string(gguf_value_type_name(v->type)));
}

std::optional<int64_t> GgufFile::get_int(std::string_view key) const {
    const GgufValue* v = find(key);
    if (!v) return std::nullopt;
    if (const auto* i = std::get_if<int64_t>(&v->value)) return *i;
    if (const auto* u = std::get_if<uint64_t>(&v->value)) {
        if (*u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
            return static_cast<int64_t>(*u);
        }
    }
    fail(name_, "metadata '" + std::string(key) + "' should be an integer, is " +
                    std::string(gguf_value_type_name(v->type)));
}

std::optional<double> GgufFile::get_float(std::string_view key) const {
    const GgufValue* v = find(key);
    if (!v) return std::nullopt;
    if (const auto* d = std::get_if<double>(&v->value)) return *d;
    if (const auto* i = std::get_if<int64_t>(&v->value)) return static_cast<double>(*i);
    if (const auto* u = std::get_if<uint64_t>(&v->value)) return static_cast<double>(*u);
    fail(name_, "metadata '" + std::string(key) + "' should be a number, is " +
                    std::string(gguf_value_type_name(v->type)));
}

std::optional<bool> GgufFile::get_bool(std::string_view key) const {
    const GgufValue* v = find(key);
    if (!v) return std::nullopt;
    if (const auto* b = std::get_if<bool>(&v->value)) return *b;
    fail(name_, "metadata '" + std::string(key) + "' should be a bool, is " +
                    std::string(gguf_value_type_name(v->type)));
}

void GgufFile::drop_metadata(std::string_view key) {
    const auto it = metadata_.find(std::string(key));
    if (it == metadata_.end()) return;
    metadata_.erase(it);
    std::erase(metadata_order_, key);
}

const GgufArray* GgufFile::get_array(std::string_view key) const {
    const GgufValue* v = find(key);
    if (!v) return nullptr;
    if (const auto* a = std::get_if<GgufArray>(&v->value)) return a;
    fail(name_, "metadata '" + std::string(key) + "' should be an array, is " +
                    std::string(gguf_value_type_name(v->type)));
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
    auto it = tensor_index_.find(name);
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace ember
