#include "engine/model/state_io.h"

#include <cstring>

namespace ember {

namespace {

constexpr char kMagic[4] = {'E', 'M', 'S', 'T'};
constexpr size_t kHeaderBytes = 16;
constexpr size_t kSectionHeaderBytes = 16;
constexpr size_t kKvInfoBytes = 4 * 4 + 2 * 8;

size_t elem_bytes(KvType type) {
    return type == KvType::F32 ? 4 : 2;
}

// Writes into a buffer sized up front (the blob's size is known before the first byte).
class Writer {
public:
    explicit Writer(std::vector<uint8_t>& out) : out_(out) {}
    void bytes(const void* p, size_t n) {
        std::memcpy(out_.data() + at_, p, n);
        at_ += n;
    }
    void u32(uint32_t v) { bytes(&v, sizeof v); }
    void u64(uint64_t v) { bytes(&v, sizeof v); }
    void i64(int64_t v) { bytes(&v, sizeof v); }

private:
    std::vector<uint8_t>& out_;
    size_t at_ = 0;
};

class Reader {
public:
    explicit Reader(std::span<const uint8_t> in) : in_(in) {}
    const uint8_t* take(size_t n, const char* what) {
        if (in_.size() - at_ < n) {
            throw StateFormatError(std::string("state blob truncated in ") + what);
        }
        const uint8_t* p = in_.data() + at_;
        at_ += n;
        return p;
    }
    uint32_t u32(const char* what) { return load<uint32_t>(what); }
    uint64_t u64(const char* what) { return load<uint64_t>(what); }
    int64_t i64(const char* what) { return load<int64_t>(what); }
    size_t offset() const { return at_; }
    size_t remaining() const { return in_.size() - at_; }

private:
    template <typename T>
    T load(const char* what) {
        T v;
        std::memcpy(&v, take(sizeof v, what), sizeof v);
        return v;
    }
    std::span<const uint8_t> in_;
    size_t at_ = 0;
};

// Where the rows of a KvRows blob start, with its info; checks everything but the target.
struct ParsedKv {
    KvBlobInfo info;
    size_t rows_offset = 0;
};

// Writes the blob header and the header of its one section, `payload` bytes long.
void write_headers(Writer& w, StateSectionKind kind, uint64_t payload) {
    w.bytes(kMagic, 4);
    w.u32(kStateFormatVersion);
    w.u32(1);
    w.u32(0);
    w.u32(static_cast<uint32_t>(kind));
    w.u32(0);
    w.u64(payload);
}

// Checks the blob header and that its one section is of `kind` (`section_name` and
// `kind_name` word the errors) and that it fills the rest of the blob; returns a reader
// at its payload.
Reader open_section(std::span<const uint8_t> blob, StateSectionKind kind, const char* section_name,
                    const char* kind_name) {
    Reader r(blob);
    if (std::memcmp(r.take(4, "magic"), kMagic, 4) != 0) {
        throw StateFormatError("state blob: bad magic (not an ember state blob)");
    }
    const uint32_t version = r.u32("version");
    if (version != kStateFormatVersion) {
        throw StateFormatError("state blob: format version " + std::to_string(version) +
                               ", this build reads " + std::to_string(kStateFormatVersion));
    }
    const uint32_t sections = r.u32("section count");
    r.u32("reserved");
    if (sections != 1) {
        throw StateFormatError("state blob: " + std::to_string(sections) +
                               " sections, expected one " + section_name + " section");
    }
    const uint32_t found = r.u32("section kind");
    r.u32("section reserved");
    const uint64_t payload = r.u64("section size");
    if (found != static_cast<uint32_t>(kind)) {
        throw StateFormatError("state blob: section kind " + std::to_string(found) + " is not " +
                               kind_name);
    }
    if (payload != r.remaining()) {
        throw StateFormatError("state blob: section size " + std::to_string(payload) +
                               " does not match the " + std::to_string(r.remaining()) +
                               " bytes present");
    }
    return r;
}

ParsedKv parse_kv(std::span<const uint8_t> blob) {
    Reader r = open_section(blob, StateSectionKind::KvRows, "KV", "KV rows");
    ParsedKv p;
    const uint32_t type = r.u32("kv type");
    if (type > 1) throw StateFormatError("state blob: unknown kv type " + std::to_string(type));
    p.info.type = type == 0 ? KvType::F32 : KvType::F16;
    p.info.n_layer = r.u32("n_layer");
    p.info.k_width = r.u32("k_width");
    p.info.v_width = r.u32("v_width");
    p.info.begin = r.i64("begin");
    p.info.count = r.i64("count");
    if (p.info.begin < 0 || p.info.count < 0 || p.info.begin > (int64_t{1} << 40) ||
        p.info.count > (int64_t{1} << 40)) {
        throw StateFormatError("state blob: position range out of bounds");
    }
    // Bounds that keep the size product below overflow; real models are far inside them.
    if (p.info.n_layer > 4096 || p.info.k_width > (1 << 20) || p.info.v_width > (1 << 20)) {
        throw StateFormatError("state blob: layer count or row width out of bounds");
    }
    const uint64_t row_elems = static_cast<uint64_t>(p.info.k_width + p.info.v_width);
    const uint64_t expect = static_cast<uint64_t>(p.info.n_layer) *
                            static_cast<uint64_t>(p.info.count) * row_elems *
                            elem_bytes(p.info.type);
    if (expect != r.remaining()) {
        throw StateFormatError("state blob: rows hold " + std::to_string(r.remaining()) +
                               " bytes, the header describes " + std::to_string(expect));
    }
    p.rows_offset = r.offset();
    return p;
}

constexpr size_t kRecurrentInfoBytes = 4 * 4 + 2 * 8;

// The Recurrent blob's header, checked against its size; returns where the floats start.
size_t parse_recurrent(std::span<const uint8_t> blob, RecurrentBlobInfo& info) {
    Reader r = open_section(blob, StateSectionKind::Recurrent, "recurrent", "recurrent state");
    info.n_layer = r.u32("n_layer");
    info.conv_floats = r.u32("conv floats");
    info.delta_floats = r.u32("delta floats");
    r.u32("recurrent reserved");
    info.position = r.i64("position");
    const uint64_t n_floats = r.u64("float count");
    if (info.position < 0 || info.position > (int64_t{1} << 40) || n_floats > (uint64_t{1} << 40)) {
        throw StateFormatError("state blob: recurrent position or size out of bounds");
    }
    info.n_floats = static_cast<int64_t>(n_floats);
    if (n_floats * sizeof(float) != r.remaining()) {
        throw StateFormatError("state blob: recurrent state holds " +
                               std::to_string(r.remaining()) + " bytes, the header describes " +
                               std::to_string(n_floats * sizeof(float)));
    }
    return r.offset();
}

}  // namespace

std::vector<uint8_t> serialize_recurrent(const RecurrentState& state) {
    const uint64_t data_bytes = state.bytes();
    std::vector<uint8_t> out(kHeaderBytes + kSectionHeaderBytes + kRecurrentInfoBytes + data_bytes);
    Writer w(out);
    write_headers(w, StateSectionKind::Recurrent, kRecurrentInfoBytes + data_bytes);
    w.u32(static_cast<uint32_t>(state.n_layer()));
    w.u32(static_cast<uint32_t>(state.conv_floats()));
    w.u32(static_cast<uint32_t>(state.delta_floats()));
    w.u32(0);
    w.i64(state.position());
    w.u64(state.data().size());
    if (data_bytes > 0) w.bytes(state.data().data(), data_bytes);
    return out;
}

RecurrentBlobInfo inspect_recurrent(std::span<const uint8_t> blob) {
    RecurrentBlobInfo info;
    parse_recurrent(blob, info);
    return info;
}

void apply_recurrent(std::span<const uint8_t> blob, RecurrentState& state) {
    RecurrentBlobInfo b;
    const size_t offset = parse_recurrent(blob, b);
    if (b.n_layer != state.n_layer() || b.conv_floats != state.conv_floats() ||
        b.delta_floats != state.delta_floats() ||
        b.n_floats != static_cast<int64_t>(state.data().size())) {
        throw StateFormatError("state blob: recurrent state shape (" + std::to_string(b.n_layer) +
                               " layers, " + std::to_string(b.n_floats) +
                               " floats) differs from the model's (" +
                               std::to_string(state.n_layer()) + " layers, " +
                               std::to_string(state.data().size()) + " floats)");
    }
    if (b.n_floats > 0) {
        std::memcpy(state.data().data(), blob.data() + offset,
                    static_cast<size_t>(b.n_floats) * sizeof(float));
    }
    state.set_position(b.position);
}

std::vector<uint8_t> serialize_kv_rows(const KvCache& kv, int64_t begin, int64_t end) {
    if (begin < 0 || end < begin || end > kv.length()) {
        throw std::out_of_range("serialize_kv_rows: range [" + std::to_string(begin) + ", " +
                                std::to_string(end) + ") outside the cache length " +
                                std::to_string(kv.length()));
    }
    const size_t es = elem_bytes(kv.type());
    const int64_t count = end - begin;
    const uint64_t rows_bytes =
        static_cast<uint64_t>(kv.n_layer() * count * (kv.k_width() + kv.v_width())) * es;
    std::vector<uint8_t> out(kHeaderBytes + kSectionHeaderBytes + kKvInfoBytes + rows_bytes);
    Writer w(out);
    write_headers(w, StateSectionKind::KvRows, kKvInfoBytes + rows_bytes);
    w.u32(kv.type() == KvType::F32 ? 0 : 1);
    w.u32(static_cast<uint32_t>(kv.n_layer()));
    w.u32(static_cast<uint32_t>(kv.k_width()));
    w.u32(static_cast<uint32_t>(kv.v_width()));
    w.i64(begin);
    w.i64(count);
    const size_t k_bytes = static_cast<size_t>(kv.k_width()) * es;
    const size_t v_bytes = static_cast<size_t>(kv.v_width()) * es;
    for (int64_t l = 0; l < kv.n_layer(); ++l) {
        for (int64_t pos = begin; pos < end; ++pos) w.bytes(kv.k_row(l, pos), k_bytes);
        for (int64_t pos = begin; pos < end; ++pos) w.bytes(kv.v_row(l, pos), v_bytes);
    }
    return out;
}

KvBlobInfo inspect_kv_rows(std::span<const uint8_t> blob) {
    return parse_kv(blob).info;
}

void apply_kv_rows(std::span<const uint8_t> blob, KvCache& kv, int64_t from, int64_t to) {
    const ParsedKv p = parse_kv(blob);
    const KvBlobInfo& b = p.info;
    if (b.type != kv.type()) {
        throw StateFormatError("state blob: kv type differs from the cache's");
    }
    if (b.n_layer != kv.n_layer() || b.k_width != kv.k_width() || b.v_width != kv.v_width()) {
        throw StateFormatError("state blob: shape (" + std::to_string(b.n_layer) + " layers, " +
                               std::to_string(b.k_width) + "/" + std::to_string(b.v_width) +
                               " wide) differs from the cache's");
    }
    if (from < b.begin || to < from || to > b.begin + b.count) {
        throw StateFormatError("state blob: positions [" + std::to_string(from) + ", " +
                               std::to_string(to) + ") are not inside the blob's range");
    }
    if (to > kv.capacity()) {
        throw StateFormatError("state blob: position " + std::to_string(to) +
                               " exceeds the context of " + std::to_string(kv.capacity()));
    }
    kv.reserve(to);
    const size_t es = elem_bytes(b.type);
    const size_t k_bytes = static_cast<size_t>(b.k_width) * es;
    const size_t v_bytes = static_cast<size_t>(b.v_width) * es;
    const uint8_t* rows = blob.data() + p.rows_offset;
    for (int64_t l = 0; l < b.n_layer; ++l) {
        const uint8_t* k_base = rows;
        const uint8_t* v_base = rows + static_cast<size_t>(b.count) * k_bytes;
        for (int64_t pos = from; pos < to; ++pos) {
            std::memcpy(kv.k_row(l, pos), k_base + static_cast<size_t>(pos - b.begin) * k_bytes,
                        k_bytes);
            std::memcpy(kv.v_row(l, pos), v_base + static_cast<size_t>(pos - b.begin) * v_bytes,
                        v_bytes);
        }
        rows += static_cast<size_t>(b.count) * (k_bytes + v_bytes);
    }
}

}  // namespace ember
