// Helpers for tests that compare inference states bit for bit: reproducible token ids and the
// raw bytes of a KV-cache position.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "engine/model/state.h"

namespace ember::test {

// n token ids below n_vocab from a fixed seed (a splitmix-style mix), the same on every run.
inline std::vector<int32_t> some_tokens(int64_t n, int64_t n_vocab, int64_t seed) {
    std::vector<int32_t> ids(static_cast<size_t>(n));
    uint64_t x = 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(seed + 1);
    for (auto& id : ids) {
        x ^= x >> 31;
        x *= 0xbf58476d1ce4e5b9ull;
        x ^= x >> 29;
        id = static_cast<int32_t>(x % static_cast<uint64_t>(n_vocab));
    }
    return ids;
}

// Bytes of the K and V rows of cache layer `layer` at `pos`, as the cache holds them.
inline std::vector<uint8_t> kv_rows(const InferenceState& st, int64_t layer, int64_t pos) {
    const KvCache& kv = st.kv;
    const auto k_bytes = static_cast<size_t>(kv.k_row_bytes());
    const auto v_bytes = static_cast<size_t>(kv.v_row_bytes());
    std::vector<uint8_t> out(k_bytes + v_bytes);
    std::memcpy(out.data(), kv.k_data(layer, pos), k_bytes);
    std::memcpy(out.data() + k_bytes, kv.v_data(layer, pos), v_bytes);
    return out;
}

}  // namespace ember::test
