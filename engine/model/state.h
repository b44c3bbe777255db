// Per-conversation mutable state: the KV cache and the scratch buffers of the forward pass.
//
// The KV cache grows in fixed chunks of positions, append-only; rolling back to an earlier
// position only moves the length (O(1)), and the rows past it are overwritten later.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/model/recurrent_state.h"
#include "engine/tensor/matmul.h"

namespace ember {

struct ModelConfig;

enum class KvType { F32, F16 };

class KvCache {
public:
    static constexpr int64_t kChunkPositions = 256;

    KvCache() = default;
    // k_width = n_head_kv * head_dim, v_width = n_head_kv * value_dim.
    void init(int64_t n_layer, int64_t k_width, int64_t v_width, int64_t max_positions,
              KvType type);

    int64_t length() const { return length_; }
    int64_t capacity() const { return max_positions_; }
    KvType type() const { return type_; }
    int64_t k_width() const { return k_width_; }
    int64_t v_width() const { return v_width_; }
    int64_t n_layer() const { return n_layer_; }

    // Makes room for positions [0, n); allocates chunks as needed.
    void reserve(int64_t n);
    // Sets the number of valid positions (rollback or commit after a forward pass).
    void set_length(int64_t n);

    // Row of K/V for `layer` at position `pos`, as f32 (F32 caches) ...
    float* k_row(int64_t layer, int64_t pos);
    float* v_row(int64_t layer, int64_t pos);
    // ... or as f16 bits (F16 caches).
    uint16_t* k_row_f16(int64_t layer, int64_t pos);
    uint16_t* v_row_f16(int64_t layer, int64_t pos);
    // Read-only views of the same rows (serializing a state must not need a mutable one).
    const float* k_row(int64_t layer, int64_t pos) const;
    const float* v_row(int64_t layer, int64_t pos) const;
    const uint16_t* k_row_f16(int64_t layer, int64_t pos) const;
    const uint16_t* v_row_f16(int64_t layer, int64_t pos) const;

    // Bytes one position occupies across all layers (K and V).
    uint64_t bytes_per_position() const;
    uint64_t allocated_bytes() const;

private:
    uint8_t* row(const std::vector<std::unique_ptr<uint8_t[]>>& chunks, int64_t width,
                 int64_t layer, int64_t pos) const;
    size_t elem_size() const { return type_ == KvType::F32 ? 4 : 2; }

    int64_t n_layer_ = 0;
    int64_t k_width_ = 0;
    int64_t v_width_ = 0;
    int64_t max_positions_ = 0;
    int64_t length_ = 0;
    KvType type_ = KvType::F32;
    // chunks[layer * n_chunks_max + chunk]: [kChunkPositions x width] elements each.
    std::vector<std::unique_ptr<uint8_t[]>> k_chunks_;
    std::vector<std::unique_ptr<uint8_t[]>> v_chunks_;
    int64_t n_chunks_max_ = 0;
    int64_t n_chunks_allocated_ = 0;
};

// Scratch for one forward pass over up to `batch` tokens; grown on demand, never shrunk, so
// the decode loop runs without allocating.
struct ForwardScratch {
    int64_t batch_capacity = 0;
    std::vector<float> x;       // [batch x n_embd] residual stream
    std::vector<float> xn;      // [batch x n_embd] normed input
    std::vector<float> q;       // [batch x n_head*head_dim]
    std::vector<float> k;       // [batch x n_head_kv*head_dim]
    std::vector<float> v;       // [batch x n_head_kv*value_dim]
    std::vector<float> attn;    // [batch x n_head*value_dim]
    std::vector<float> gate;    // [batch x n_ff]
    std::vector<float> up;      // [batch x n_ff]
    // Per worker: attention scores and partial records of its (token, head group) task
    // ([n_threads x per-worker floats], see forward.cpp's attention()).
    std::vector<float> scores;
    // Partial attention records of split decode tasks: [tokens x n_head x runs x record].
    std::vector<float> attn_runs;
    std::vector<float> rope_cos, rope_sin;  // [batch x rope_dims/2]
    std::vector<float> logits;              // [rows x n_vocab]
    MatmulScratch mm;
};

struct InferenceState {
    KvCache kv;  // hybrids: attention layers only (ModelConfig::kv_slot maps layer -> slot)
    // Hybrids: conv / delta-rule state beside the KV cache; empty for other families.
    RecurrentState recurrent;
    ForwardScratch scratch;
    HybridScratch hybrid_scratch;  // buffers of the hybrid forward passes
    int64_t n_past() const { return kv.length(); }
};

// Creates a state for `config` holding up to max_positions tokens.
std::unique_ptr<InferenceState> make_state(const ModelConfig& config, int64_t max_positions,
                                           KvType kv_type = KvType::F32);

}  // namespace ember
