// State as bytes: a range of KV positions of every layer (and, later, recurrent snapshots)
// serialized with a versioned header, so a store outside the engine (sessions/) can keep
// evaluated prefixes without knowing how the cache is laid out.
//
// Layout, little-endian, no padding:
//   header   magic "EMST", u32 format version, u32 section count, u32 reserved (0)
//   section  u32 kind, u32 reserved (0), u64 payload bytes, payload
// Section kinds:
//   KvRows (1): u32 kv type (0 f32, 1 f16), u32 n_layer, u32 k_width, u32 v_width,
//               i64 begin, i64 count, then per layer: K rows [count x k_width] and
//               V rows [count x v_width], elements exactly as the cache holds them.
//   Recurrent (2): reserved for the hybrid families' conv/SSM snapshots; readers that do
//               not know a kind reject the blob rather than restore part of a state.
// The bytes hold exactly what the live cache held, so a restored state is bit-identical.
#pragma once

#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/model/state.h"

namespace ember {

inline constexpr uint32_t kStateFormatVersion = 1;

enum class StateSectionKind : uint32_t { KvRows = 1, Recurrent = 2 };

// A blob that is truncated, of another version, or does not fit the cache it is applied to.
class StateFormatError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// What a KvRows blob describes, read from its header.
struct KvBlobInfo {
    KvType type = KvType::F32;
    int64_t n_layer = 0;
    int64_t k_width = 0;
    int64_t v_width = 0;
    int64_t begin = 0;  // first position held
    int64_t count = 0;  // positions held
};

// Serializes positions [begin, end) of every layer. Requires end <= kv.length().
std::vector<uint8_t> serialize_kv_rows(const KvCache& kv, int64_t begin, int64_t end);

// Parses and checks the header and sizes of a KvRows blob (throws StateFormatError).
KvBlobInfo inspect_kv_rows(std::span<const uint8_t> blob);

// Writes the blob's positions [from, to) (absolute positions inside the blob's range) into
// `kv`, allocating chunks as needed; does not change kv.length(). Every check (version,
// type, layer count, widths, capacity) happens before the first byte is written.
void apply_kv_rows(std::span<const uint8_t> blob, KvCache& kv, int64_t from, int64_t to);

}  // namespace ember
