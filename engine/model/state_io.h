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
//   Recurrent (2): the whole RecurrentState of a hybrid model at one position (a snapshot;
//               recurrent state cannot be cut to a prefix): u32 n_layer, u32 conv floats per
//               layer, u32 delta-rule floats per layer, u32 reserved (0), i64 position,
//               u64 float count, then the floats exactly as the state holds them.
//               Readers that do not know a kind reject the blob rather than restore part of
//               a state.
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

// What a Recurrent blob describes, read from its header.
struct RecurrentBlobInfo {
    int64_t n_layer = 0;
    int64_t conv_floats = 0;   // per layer with a conv
    int64_t delta_floats = 0;  // per layer with a delta-rule state
    int64_t position = 0;      // tokens folded into the state
    int64_t n_floats = 0;      // the whole buffer
};

// Serializes the whole recurrent state (a snapshot at state.position()).
std::vector<uint8_t> serialize_recurrent(const RecurrentState& state);

// Parses and checks the header and size of a Recurrent blob (throws StateFormatError).
RecurrentBlobInfo inspect_recurrent(std::span<const uint8_t> blob);

// Overwrites `state` (buffer and position) with the blob's; checks shapes before writing.
// Pair it with the KV rows [0, position) to resume a hybrid conversation at that position.
void apply_recurrent(std::span<const uint8_t> blob, RecurrentState& state);

}  // namespace ember
