#include "sessions/blob_codec.h"

#include <xxhash.h>
#include <zstd.h>

#include <cstring>
#include <string>

namespace ember::sessions {

namespace {

constexpr char kMagic[4] = {'E', 'M', 'B', 'Z'};
constexpr size_t kHeaderBytesV1 = 4 + 4 + 8 + 8;
constexpr size_t kHeaderBytes = kHeaderBytesV1 + 4 + 4;
// Refuse to allocate for an absurd size field (a corrupted header): no state block is this big.
constexpr uint64_t kMaxRawBytes = uint64_t{1} << 34;
constexpr uint32_t kMaxPlanes = 16;

template <typename T>
void put(std::vector<uint8_t>& out, T value) {
    uint8_t bytes[sizeof(T)];
    std::memcpy(bytes, &value, sizeof(T));
    out.insert(out.end(), bytes, bytes + sizeof(T));
}

template <typename T>
T get(const uint8_t* p) {
    T value;
    std::memcpy(&value, p, sizeof(T));
    return value;
}

// Byte planes of width p: the plane layout puts byte b of group i at b * groups + i, the
// packed one at i * p + b, for the n / p whole groups; the tail is copied as it is. kSplit:
// packed -> planes, else back. kP: the width as a constant (the common ones), 0: `p`.
template <bool kSplit, uint32_t kP>
void convert_planes(const uint8_t* from, uint8_t* to, size_t n, uint32_t p) {
    if constexpr (kP != 0) p = kP;
    const size_t groups = n / p;
    for (size_t i = 0; i < groups; ++i) {
        for (uint32_t b = 0; b < p; ++b) {
            const size_t packed = i * p + b;
            const size_t planar = b * groups + i;
            if constexpr (kSplit) {
                to[planar] = from[packed];
            } else {
                to[packed] = from[planar];
            }
        }
    }
    // The tail shorter than a group stays as it is (memcpy may not be given a null pointer,
    // which an empty buffer's data() can be, even for 0 bytes).
    if (n > groups * p) std::memcpy(to + groups * p, from + groups * p, n - groups * p);
}

template <bool kSplit>
void convert_planes(const uint8_t* from, uint8_t* to, size_t n, uint32_t planes) {
    switch (planes) {
        case 2:
            return convert_planes<kSplit, 2>(from, to, n, planes);
        case 4:
            return convert_planes<kSplit, 4>(from, to, n, planes);
        default:
            return convert_planes<kSplit, 0>(from, to, n, planes);
    }
}

void decompress_into(std::span<const uint8_t> frame, uint8_t* out, size_t raw_size) {
    const unsigned long long content = ZSTD_getFrameContentSize(frame.data(), frame.size());
    if (content == ZSTD_CONTENTSIZE_ERROR || content != raw_size) {
        throw BlobError("state blob: compressed frame is damaged");
    }
    const size_t n = ZSTD_decompress(out, raw_size, frame.data(), frame.size());
    if (ZSTD_isError(n) || n != raw_size) {
        throw BlobError(std::string("state blob: decompression failed: ") +
                        (ZSTD_isError(n) ? ZSTD_getErrorName(n) : "short output"));
    }
}

}  // namespace

std::vector<uint8_t> pack_blob(std::span<const uint8_t> raw, int level, int planes) {
    if (planes < 1 || planes > static_cast<int>(kMaxPlanes)) {
        throw std::invalid_argument("pack_blob: planes must be from 1 to 16");
    }
    std::vector<uint8_t> split;
    std::span<const uint8_t> source = raw;
    if (planes > 1) {
        split.resize(raw.size());
        convert_planes<true>(raw.data(), split.data(), raw.size(), static_cast<uint32_t>(planes));
        source = split;
    }
    std::vector<uint8_t> out;
    const size_t bound = ZSTD_compressBound(source.size());
    out.reserve(kHeaderBytes + bound);
    out.insert(out.end(), kMagic, kMagic + 4);
    put<uint32_t>(out, kBlobEnvelopeVersion);
    put<uint64_t>(out, raw.size());
    put<uint64_t>(out, XXH3_64bits(raw.data(), raw.size()));
    put<uint32_t>(out, static_cast<uint32_t>(planes));
    put<uint32_t>(out, 0);
    out.resize(kHeaderBytes + bound);
    const size_t n =
        ZSTD_compress(out.data() + kHeaderBytes, bound, source.data(), source.size(), level);
    if (ZSTD_isError(n)) {
        throw BlobError(std::string("zstd compression failed: ") + ZSTD_getErrorName(n));
    }
    out.resize(kHeaderBytes + n);
    return out;
}

std::vector<uint8_t> unpack_blob(std::span<const uint8_t> packed) {
    std::vector<uint8_t> raw;
    std::vector<uint8_t> split;
    unpack_blob(packed, raw, split);
    return raw;
}

uint64_t unpacked_size(std::span<const uint8_t> packed) {
    if (packed.size() < kHeaderBytesV1 || std::memcmp(packed.data(), kMagic, 4) != 0) return 0;
    const auto raw_size = get<uint64_t>(packed.data() + 8);
    return raw_size > kMaxRawBytes ? 0 : raw_size;
}

void unpack_blob(std::span<const uint8_t> packed, std::vector<uint8_t>& raw,
                 std::vector<uint8_t>& split) {
    if (packed.size() < kHeaderBytesV1 || std::memcmp(packed.data(), kMagic, 4) != 0) {
        throw BlobError("state blob: missing or bad envelope header");
    }
    const auto version = get<uint32_t>(packed.data() + 4);
    if (version != 1 && version != kBlobEnvelopeVersion) {
        throw BlobError("state blob: envelope version " + std::to_string(version) +
                        ", this build reads 1 and " + std::to_string(kBlobEnvelopeVersion));
    }
    const auto raw_size = get<uint64_t>(packed.data() + 8);
    const auto checksum = get<uint64_t>(packed.data() + 16);
    if (raw_size > kMaxRawBytes) throw BlobError("state blob: size field out of bounds");
    uint32_t planes = 1;
    size_t header = kHeaderBytesV1;
    if (version >= 2) {
        if (packed.size() < kHeaderBytes) throw BlobError("state blob: envelope header cut short");
        planes = get<uint32_t>(packed.data() + 24);
        if (planes < 1 || planes > kMaxPlanes) {
            throw BlobError("state blob: byte planes field out of bounds");
        }
        header = kHeaderBytes;
    }
    const auto frame = packed.subspan(header);
    raw.resize(raw_size);
    if (planes == 1) {
        decompress_into(frame, raw.data(), raw_size);
    } else {
        split.resize(raw_size);
        decompress_into(frame, split.data(), raw_size);
        convert_planes<false>(split.data(), raw.data(), raw_size, planes);
    }
    if (XXH3_64bits(raw.data(), raw.size()) != checksum) {
        throw BlobError("state blob: checksum mismatch");
    }
}

}  // namespace ember::sessions
