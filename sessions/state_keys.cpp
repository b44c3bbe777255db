#include "sessions/state_keys.h"

#include <xxhash.h>

#include <cstring>
#include <vector>

#include "engine/model/state_io.h"

namespace ember::sessions {

namespace {

StateKey to_key(XXH128_hash_t h) {
    StateKey key;
    std::memcpy(key.data(), &h.low64, 8);
    std::memcpy(key.data() + 8, &h.high64, 8);
    return key;
}

}  // namespace

StateKey state_seed(std::string_view model_fingerprint, KvType kv_type, int64_t block_tokens) {
    std::string text = "ember-prefix-state\n";
    text += model_fingerprint;
    text += "\nkv=";
    text += kv_type_name(kv_type);
    text += "\nformat=" + std::to_string(kStateFormatVersion);
    text += "\nblock=" + std::to_string(block_tokens);
    return to_key(XXH3_128bits(text.data(), text.size()));
}

StateKey chain_key(const StateKey& previous, std::span<const int32_t> tokens) {
    std::vector<uint8_t> bytes(previous.size() + tokens.size_bytes());
    std::memcpy(bytes.data(), previous.data(), previous.size());
    if (!tokens.empty()) {
        std::memcpy(bytes.data() + previous.size(), tokens.data(), tokens.size_bytes());
    }
    return to_key(XXH3_128bits(bytes.data(), bytes.size()));
}

std::string key_hex(const StateKey& key) {
    static constexpr char kDigits[] = "0123456789abcdef";
    std::string out;
    for (uint8_t b : key) {
        out += kDigits[b >> 4];
        out += kDigits[b & 15];
    }
    return out;
}

}  // namespace ember::sessions
