// Keys of stored prefix state: a hash chain over token blocks, seeded with everything that
// changes what the state rows hold for given tokens. Block i's key covers every token up to
// the block's end, so equal keys mean (barring a collision) equal prefixes; stores still
// compare the stored tokens, so a collision can never restore wrong state.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "engine/model/state.h"

namespace ember::sessions {

using StateKey = std::array<uint8_t, 16>;  // XXH3-128, little-endian low then high half

// The chain's seed: the model fingerprint, the KV cache's element type (the model's own
// fingerprint does not cover it), the state format version and the block size.
StateKey state_seed(std::string_view model_fingerprint, KvType kv_type, int64_t block_tokens);

// Key of a block following `previous` (the seed for the first block) holding `tokens`.
StateKey chain_key(const StateKey& previous, std::span<const int32_t> tokens);

std::string key_hex(const StateKey& key);

}  // namespace ember::sessions
