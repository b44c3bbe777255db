#include "engine/model/state_io.h"

#include <algorithm>
#include <cstring>

namespace ember {

namespace {

constexpr char kMagic[4] = {'E', 'M', 'S', 'T'};
constexpr size_t kHeaderBytes = 16;
constexpr size_t kSectionHeaderBytes = 16;
constexpr size_t kKvInfoBytes = 4 * 4 + 2 * 8;

// The blob's kv type codes (state_io.h); never renumbered, since stored blobs keep them.
uint32_t kv_type_code(KvType type) {
    switch (type) {
        case KvType::F32:
            return 0;
        case KvType::F16:
            return 1;
        case KvType::Q8_0:
            return 2;
    }
    return 0;
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

// Checks the blob header and that its one section is of `kind` (or `also`; `section_name`
// and `kind_name` word the errors) and that it fills the rest of the blob; returns a reader
// at its payload, and the kind in *found_kind when asked.
Reader open_section(std::span<const uint8_t> blob, StateSectionKind kind, const char* section_name,
                    const char* kind_name, StateSectionKind also = StateSectionKind{0},
                    StateSectionKind* found_kind = nullptr) {
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
    if (found != static_cast<uint32_t>(kind) &&
        (also == StateSectionKind{0} || found != static_cast<uint32_t>(also))) {
        throw StateFormatError("state blob: section kind " + std::to_string(found) + " is not " +
                               kind_name);
    }
    if (found_kind != nullptr) *found_kind = static_cast<StateSectionKind>(found);
    if (payload != r.remaining()) {
        throw StateFormatError("state blob: section size " + std::to_string(payload) +
                               " does not match the " + std::to_string(r.remaining()) +
                               " bytes present");
    }
    return r;
}

ParsedKv parse_kv(std::span<const uint8_t> blob) {
    StateSectionKind kind{};
    Reader r = open_section(blob, StateSectionKind::KvRows, "KV", "KV rows",
                            StateSectionKind::WindowKvRows, &kind);
    ParsedKv p;
    const uint32_t type = r.u32("kv type");
    if (type > 2) throw StateFormatError("state blob: unknown kv type " + std::to_string(type));
    p.info.type = type == 0 ? KvType::F32 : type == 1 ? KvType::F16 : KvType::Q8_0;
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
    const int64_t end = p.info.begin + p.info.count;
    p.info.ring_begin = p.info.begin;
    int64_t ring_count = 0;  // positions held of each sliding layer
    if (kind == StateSectionKind::WindowKvRows) {
        p.info.window = r.u32("window");
        r.u32("window reserved");
        p.info.ring_begin = r.i64("ring begin");
        if (p.info.window <= 0 || p.info.ring_begin < p.info.begin || p.info.ring_begin > end) {
            throw StateFormatError("state blob: window " + std::to_string(p.info.window) +
                                   " or sliding rows from " + std::to_string(p.info.ring_begin) +
                                   " outside the blob's positions");
        }
        const uint8_t* flags = r.take(static_cast<size_t>(p.info.n_layer), "sliding layer flags");
        for (int64_t l = 0; l < p.info.n_layer; ++l) {
            if (flags[l] > 1) throw StateFormatError("state blob: bad sliding layer flag");
            p.info.ring_layers.push_back(flags[l] == 1);
            ring_count += flags[l];
        }
    }
    const uint64_t row_bytes = static_cast<uint64_t>(kv_row_bytes(p.info.type, p.info.k_width) +
                                                     kv_row_bytes(p.info.type, p.info.v_width));
    const uint64_t positions =
        static_cast<uint64_t>(p.info.n_layer - ring_count) * static_cast<uint64_t>(p.info.count) +
        static_cast<uint64_t>(ring_count) * static_cast<uint64_t>(end - p.info.ring_begin);
    const uint64_t expect = positions * row_bytes;
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
    w.u64(static_cast<uint64_t>(state.floats()));
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
        b.delta_floats != state.delta_floats() || b.n_floats != state.floats()) {
        throw StateFormatError("state blob: recurrent state shape (" + std::to_string(b.n_layer) +
                               " layers, " + std::to_string(b.n_floats) +
                               " floats) differs from the model's (" +
                               std::to_string(state.n_layer()) + " layers, " +
                               std::to_string(state.floats()) + " floats)");
    }
    if (b.n_floats > 0) {
        std::memcpy(state.overwrite(), blob.data() + offset,
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
    kv.sync_host(begin, end);  // rows a GPU computed or restored
    const bool windowed = kv.ring_positions() > 0;
    // Sliding layers: the rows their rings still hold.
    const int64_t ring_begin = windowed ? std::clamp(kv.ring_begin(), begin, end) : begin;
    int64_t positions = 0;  // rows over all layers
    for (int64_t l = 0; l < kv.n_layer(); ++l)
        positions += end - (kv.is_ring(l) ? ring_begin : begin);
    const size_t k_bytes = static_cast<size_t>(kv.k_row_bytes());
    const size_t v_bytes = static_cast<size_t>(kv.v_row_bytes());
    const uint64_t rows_bytes = static_cast<uint64_t>(positions) * (k_bytes + v_bytes);
    const size_t info_bytes =
        kKvInfoBytes + (windowed ? 16 + static_cast<size_t>(kv.n_layer()) : 0);
    std::vector<uint8_t> out(kHeaderBytes + kSectionHeaderBytes + info_bytes + rows_bytes);
    Writer w(out);
    write_headers(w, windowed ? StateSectionKind::WindowKvRows : StateSectionKind::KvRows,
                  info_bytes + rows_bytes);
    w.u32(kv_type_code(kv.type()));
    w.u32(static_cast<uint32_t>(kv.n_layer()));
    w.u32(static_cast<uint32_t>(kv.k_width()));
    w.u32(static_cast<uint32_t>(kv.v_width()));
    w.i64(begin);
    w.i64(end - begin);
    if (windowed) {
        w.u32(static_cast<uint32_t>(kv.window()));
        w.u32(0);
        w.i64(ring_begin);
        for (int64_t l = 0; l < kv.n_layer(); ++l) {
            const uint8_t flag = kv.is_ring(l) ? 1 : 0;
            w.bytes(&flag, 1);
        }
    }
    for (int64_t l = 0; l < kv.n_layer(); ++l) {
        const int64_t first = kv.is_ring(l) ? ring_begin : begin;
        for (int64_t pos = first; pos < end; ++pos) w.bytes(kv.k_data(l, pos), k_bytes);
        for (int64_t pos = first; pos < end; ++pos) w.bytes(kv.v_data(l, pos), v_bytes);
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
        throw StateFormatError(std::string("state blob: kv type ") + kv_type_name(b.type) +
                               " differs from the cache's " + kv_type_name(kv.type()));
    }
    if (b.n_layer != kv.n_layer() || b.k_width != kv.k_width() || b.v_width != kv.v_width()) {
        throw StateFormatError("state blob: shape (" + std::to_string(b.n_layer) + " layers, " +
                               std::to_string(b.k_width) + "/" + std::to_string(b.v_width) +
                               " wide) differs from the cache's");
    }
    // A KvRows blob holds every row, so it serves a windowed cache too; a WindowKvRows blob
    // only a cache whose same layers slide with the same window.
    if (!b.ring_layers.empty() && (b.window != kv.window() || b.ring_layers != kv.ring_layers())) {
        throw StateFormatError("state blob: sliding-window layers (window " +
                               std::to_string(b.window) + ") differ from the cache's (window " +
                               std::to_string(kv.window()) + ")");
    }
    if (from < b.begin || to < from || to > b.begin + b.count) {
        throw StateFormatError("state blob: positions [" + std::to_string(from) + ", " +
                               std::to_string(to) + ") are not inside the blob's range");
    }
    if (to > kv.capacity()) {
        throw StateFormatError("state blob: position " + std::to_string(to) +
                               " exceeds the context of " + std::to_string(kv.capacity()));
    }
    kv.reserve(to, KvCache::Pages::SmallPages);  // rows copied in: see Pages
    const size_t k_bytes = static_cast<size_t>(kv.k_row_bytes());
    const size_t v_bytes = static_cast<size_t>(kv.v_row_bytes());
    const int64_t end = b.begin + b.count;
    // A sliding layer gets the blob's rows from ring_begin on, and of those only the last
    // ring's worth (earlier ones would be overwritten within this call anyway).
    const int64_t ring_from =
        std::max({from, b.ring_begin, kv.ring_positions() > 0 ? to - kv.ring_positions() : from});
    const uint8_t* rows = blob.data() + p.rows_offset;
    const RestoredRows source{b.ring_layers.empty() ? rows : nullptr, b.begin, b.count};
    // Onto a GPU: the rows go to the device alone, the host's stay unmapped until read.
    if (kv.rows_restored_to_device(from, to, source)) return;
    for (int64_t l = 0; l < b.n_layer; ++l) {
        const bool ring = kv.is_ring(l);
        const int64_t held_from = !b.ring_layers.empty() && ring ? b.ring_begin : b.begin;
        const int64_t held = end - held_from;
        const uint8_t* k_base = rows;
        const uint8_t* v_base = rows + static_cast<size_t>(held) * k_bytes;
        for (int64_t pos = ring ? ring_from : from; pos < to; ++pos) {
            std::memcpy(kv.k_data(l, pos), k_base + static_cast<size_t>(pos - held_from) * k_bytes,
                        k_bytes);
            std::memcpy(kv.v_data(l, pos), v_base + static_cast<size_t>(pos - held_from) * v_bytes,
                        v_bytes);
        }
        rows += static_cast<size_t>(held) * (k_bytes + v_bytes);
    }
    // Sliding rows of [from, ring_begin) were not in the blob: the rings start after the gap.
    if (b.ring_begin > from) kv.forget_ring_rows_before(std::min(b.ring_begin, to));
    kv.rows_restored(from, to, source);
}

}  // namespace ember
