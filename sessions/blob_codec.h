// The envelope state blobs are stored in: zstd-compressed, versioned, checksummed.
//   magic "EMBZ", u32 envelope version, u64 uncompressed size, u64 XXH3-64 of the
//   uncompressed bytes, then one zstd frame.
// A blob that fails any check (truncated, bit-flipped, another version) is reported as a
// BlobError so the caller can drop it and recompute; it is never restored.
#pragma once

#include <cstdint>
#include <span>
#include <stdexcept>
#include <vector>

namespace ember::sessions {

inline constexpr uint32_t kBlobEnvelopeVersion = 1;

class BlobError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// zstd level 3: fast enough to run after every turn; KV rows gain little from more.
std::vector<uint8_t> pack_blob(std::span<const uint8_t> raw, int level = 3);
std::vector<uint8_t> unpack_blob(std::span<const uint8_t> packed);

}  // namespace ember::sessions
