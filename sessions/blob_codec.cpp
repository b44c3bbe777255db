#include "sessions/blob_codec.h"

#include <xxhash.h>
#include <zstd.h>

#include <cstring>
#include <string>

namespace ember::sessions {

namespace {

constexpr char kMagic[4] = {'E', 'M', 'B', 'Z'};
constexpr size_t kHeaderBytes = 4 + 4 + 8 + 8;
// Refuse to allocate for an absurd size field (a corrupted header): no state block is this big.
constexpr uint64_t kMaxRawBytes = uint64_t{1} << 34;

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

}  // namespace

std::vector<uint8_t> pack_blob(std::span<const uint8_t> raw, int level) {
    std::vector<uint8_t> out;
    const size_t bound = ZSTD_compressBound(raw.size());
    out.reserve(kHeaderBytes + bound);
    out.insert(out.end(), kMagic, kMagic + 4);
    put<uint32_t>(out, kBlobEnvelopeVersion);
    put<uint64_t>(out, raw.size());
    put<uint64_t>(out, XXH3_64bits(raw.data(), raw.size()));
    out.resize(kHeaderBytes + bound);
    const size_t n = ZSTD_compress(out.data() + kHeaderBytes, bound, raw.data(), raw.size(), level);
    if (ZSTD_isError(n)) {
        throw BlobError(std::string("zstd compression failed: ") + ZSTD_getErrorName(n));
    }
    out.resize(kHeaderBytes + n);
    return out;
}

std::vector<uint8_t> unpack_blob(std::span<const uint8_t> packed) {
    if (packed.size() < kHeaderBytes || std::memcmp(packed.data(), kMagic, 4) != 0) {
        throw BlobError("state blob: missing or bad envelope header");
    }
    const auto version = get<uint32_t>(packed.data() + 4);
    if (version != kBlobEnvelopeVersion) {
        throw BlobError("state blob: envelope version " + std::to_string(version) +
                        ", this build reads " + std::to_string(kBlobEnvelopeVersion));
    }
    const auto raw_size = get<uint64_t>(packed.data() + 8);
    const auto checksum = get<uint64_t>(packed.data() + 16);
    if (raw_size > kMaxRawBytes) throw BlobError("state blob: size field out of bounds");
    const auto frame = packed.subspan(kHeaderBytes);
    const unsigned long long content = ZSTD_getFrameContentSize(frame.data(), frame.size());
    if (content == ZSTD_CONTENTSIZE_ERROR || content != raw_size) {
        throw BlobError("state blob: compressed frame is damaged");
    }
    std::vector<uint8_t> raw(raw_size);
    const size_t n = ZSTD_decompress(raw.data(), raw.size(), frame.data(), frame.size());
    if (ZSTD_isError(n) || n != raw_size) {
        throw BlobError(std::string("state blob: decompression failed: ") +
                        (ZSTD_isError(n) ? ZSTD_getErrorName(n) : "short output"));
    }
    if (XXH3_64bits(raw.data(), raw.size()) != checksum) {
        throw BlobError("state blob: checksum mismatch");
    }
    return raw;
}

}  // namespace ember::sessions
