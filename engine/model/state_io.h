// State as bytes: a range of KV positions of every layer (and, later, recurrent snapshots)
// serialized with a versioned header, so a store outside the engine (sessions/) can keep
// evaluated prefixes without knowing how the cache is laid out.
//
// Layout, little-endian, no padding:
//   header   magic "EMST", u32 format version, u32 section count, u32 reserved (0)
//   section  u32 kind, u32 reserved (0), u64 payload bytes, payload
// Section kinds:
//   KvRows (1): u32 kv type (0 f32, 1 f16, 2 q8_0), u32 n_layer, u32 k_width, u32 v_width,
//               i64 begin, i64 count, then per layer: K rows [count x k_width] and
//               V rows [count x v_width], bytes exactly as the cache holds them (a q8_0 row
//               is ceil(width / 32) Q8_0 blocks, kv_row_bytes()).
//   WindowKvRows (3): the same for a cache with sliding-window layers (gemma3): the KvRows
//               fields, then u32 window, u32 reserved (0), i64 ring_begin, one byte per layer
//               (1: sliding), then per layer K rows and V rows over [begin, begin + count)
//               for a global layer and over [ring_begin, begin + count) for a sliding one:
//               the rows its ring still held when the blob was written (see state.h).
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

enum class StateSectionKind : uint32_t { KvRows = 1, Recurrent = 2, WindowKvRows = 3 };

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
    // WindowKvRows: the sliding layers' window, which layers slide ([n_layer]), and the first
    // position whose sliding-layer rows the blob holds. KvRows: 0, empty, begin.
    int64_t window = 0;
    std::vector<bool> ring_layers;
    int64_t ring_begin = 0;
};

// Serializes positions [begin, end) of every layer (of a sliding layer, those its ring still
// holds: from kv.ring_begin() on). Requires end <= kv.length().
std::vector<uint8_t> serialize_kv_rows(const KvCache& kv, int64_t begin, int64_t end);

// Parses and checks the header and sizes of a KvRows blob (throws StateFormatError).
KvBlobInfo inspect_kv_rows(std::span<const uint8_t> blob);

// Writes the blob's positions [from, to) (absolute positions inside the blob's range) into
// `kv`, allocating chunks as needed; does not change kv.length(). Every check (version,
// type, layer count, widths, window, capacity) happens before the first byte is written.
// Sliding layers get the rows the blob holds; where it lacks some of [from, to) their rings
// start over after the gap (KvCache::forget_ring_rows_before), so kv.can_resume_at(to) tells
// whether the restored state is one to continue from.
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
