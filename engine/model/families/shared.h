// Pieces more than one family file reads its configuration with.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

namespace ember {

class GgufFile;
struct ModelConfig;

// Reads `<arch>.attention.sliding_window` and which layers slide: the file's
// `<arch>.attention.sliding_window_pattern` (a period: every period-th layer global, or one
// entry per layer, non-zero: sliding), else every `global_every`-th layer global (layer i when
// (i + 1) % global_every == 0). False, and `c` unchanged, without the window key; throws
// GgufError naming the file and key for a window of 0 or past the context, or a bad pattern.
bool read_sliding_window(const GgufFile& f, ModelConfig& c, int64_t global_every);

// Expert counts and routing (expert_count, expert_used_count, expert_feed_forward_length,
// expert_weights_norm, expert_gating_func: 1, softmax; also 3, softmax of the chosen, when
// `chosen_softmax` is allowed).
void read_expert_config(const GgufFile& f, ModelConfig& c, bool chosen_softmax);

// The hybrids' share of the fingerprint: conv and delta-net sizes and each layer's kind.
void hybrid_fingerprint(const ModelConfig& c, std::vector<uint8_t>& bytes);

// Appends the bytes of `values` (fingerprints hash exactly these).
template <class T, size_t N>
void append_bytes(std::vector<uint8_t>& bytes, const T (&values)[N]) {
    const auto* p = reinterpret_cast<const uint8_t*>(values);
    bytes.insert(bytes.end(), p, p + sizeof values);
}

}  // namespace ember
