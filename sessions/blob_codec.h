// The envelope state blobs are stored in: zstd-compressed, versioned, checksummed.
//   version 2: magic "EMBZ", u32 envelope version (2), u64 uncompressed size, u64 XXH3-64 of
//              the uncompressed bytes, u32 byte planes P, u32 reserved (0), then one zstd frame
//              of the bytes split into P planes (below);
//   version 1: the same without the planes field and reserved word (P = 1); still read.
// Byte planes: with P > 1, the bytes are stored as plane 0 (bytes 0, P, 2P, ...), then plane 1
// (bytes 1, P + 1, ...), ... up to the last whole group of P, then the tail as it is. KV rows
// are f16 or f32 numbers whose high bytes (sign and exponent) repeat a few values and whose
// low bytes are noise: interleaved, zstd finds little (f16 rows: x1.10) and decodes the whole
// stream through its entropy coder (~0.7 GB/s here); as planes, the high bytes compress on
// their own and the noise is stored raw (x1.19, decoding ~2 GB/s), which is what restoring a
// long conversation waits on.
// A blob that fails any check (truncated, bit-flipped, another version) is reported as a
// BlobError so the caller can drop it and recompute; it is never restored.
#pragma once

#include <cstdint>
#include <span>
#include <stdexcept>
#include <vector>

namespace ember::sessions {

inline constexpr uint32_t kBlobEnvelopeVersion = 2;

class BlobError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// zstd level 3: fast enough to run after every turn; KV rows gain little from more.
// planes: the width of the numbers the bytes hold (2 for f16 rows, 4 for f32; 1: as they are).
std::vector<uint8_t> pack_blob(std::span<const uint8_t> raw, int level = 3, int planes = 1);
std::vector<uint8_t> unpack_blob(std::span<const uint8_t> packed);
// The size unpack_blob will inflate `packed` to, read from its header (bounded as unpack_blob
// bounds it); 0 for a header unpack_blob would refuse.
uint64_t unpacked_size(std::span<const uint8_t> packed);
// The same into `raw`, with `planes` for the bytes before they are joined (both resized, their
// capacity reused: restoring a chain of blocks of one size touches their pages once).
void unpack_blob(std::span<const uint8_t> packed, std::vector<uint8_t>& raw,
                 std::vector<uint8_t>& planes);

}  // namespace ember::sessions
