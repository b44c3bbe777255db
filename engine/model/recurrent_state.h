// The recurrent part of a hybrid model's per-conversation state: the causal-conv history of
// the conv / GatedDeltaNet layers and the delta-rule state matrices of the GatedDeltaNet
// layers. Unlike the KV cache it is a fold over every token so far, so it cannot be rolled
// back by moving a length: going back means restoring a snapshot taken at or before the
// target position and recomputing the gap.
//
// All layers' state lives in one flat float buffer, so a snapshot is one memcpy.
//
// On a GPU the state lives in device memory too (RecurrentMirror): the forward pass there
// updates the device copy only, so every host accessor first brings the host copy up to date,
// and every mutable one tells the mirror that its copy is stale. The host copy is then read
// only when the state is saved, snapshotted or restored, never per token.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ember {

struct ModelConfig;

// A copy of a recurrent state in another memory (a GPU's), which may be newer than the host's.
class RecurrentMirror {
public:
    // Copies the mirror's newer state into the host buffer (no-op when the host's is current).
    virtual void recurrent_to_host() = 0;
    // The host buffer was (or is about to be) written: the mirror's copy is stale.
    virtual void recurrent_host_written() = 0;
    // The host buffer was zeroed (a new conversation): the mirror may zero its own copy rather
    // than copy the zeros over.
    virtual void recurrent_zeroed() { recurrent_host_written(); }

protected:
    ~RecurrentMirror() = default;
};

class RecurrentState {
public:
    RecurrentState() = default;
    // A copy takes the current numbers (the mirror's, when newer) and no mirror.
    RecurrentState(const RecurrentState& other);
    RecurrentState& operator=(const RecurrentState& other);
    // Sizes the buffer for `config` (empty for non-hybrid families) and zeroes it.
    void init(const ModelConfig& config);
    // Back to the state before any token: zeros, position 0.
    void reset();

    bool empty() const { return data_.empty(); }
    // Tokens folded into the state so far; the forward pass keeps it equal to the KV length.
    int64_t position() const { return position_; }
    void set_position(int64_t position) { position_ = position; }

    // Conv history of `layer`: the inputs of the last conv_kernel-1 tokens, oldest first,
    // [conv_kernel-1 x conv_channels]. nullptr for layers without a conv.
    float* conv(int64_t layer);
    // Delta-rule state of `layer`: per v head a [k_dim x v_dim] matrix, heads consecutive,
    // [n_v_heads x k_dim x v_dim]. nullptr for layers without one.
    float* delta(int64_t layer);
    // Where those lie in the flat buffer (floats from its start), -1 where none: a mirror
    // keeps the same layout.
    int64_t conv_offset(int64_t layer) const { return conv_offset_[static_cast<size_t>(layer)]; }
    int64_t delta_offset(int64_t layer) const { return delta_offset_[static_cast<size_t>(layer)]; }

    // Floats per layer of each kind (0 where a layer has none), for serialization checks.
    int64_t conv_floats() const { return conv_floats_; }
    int64_t delta_floats() const { return delta_floats_; }
    int64_t n_layer() const { return static_cast<int64_t>(conv_offset_.size()); }

    // The whole state as one buffer (serialization, snapshots); current on the host.
    const std::vector<float>& data() const;
    std::vector<float>& data();
    // The buffer, to be overwritten whole (a restore): not fetched from the mirror first.
    float* overwrite();
    int64_t floats() const { return static_cast<int64_t>(data_.size()); }
    uint64_t bytes() const { return data_.size() * sizeof(float); }

    // Non-owning; the mirror clears it when it goes.
    void set_mirror(RecurrentMirror* mirror) { mirror_ = mirror; }

private:
    std::vector<float> data_;
    RecurrentMirror* mirror_ = nullptr;
    std::vector<int64_t> conv_offset_;   // [n_layer], -1 where none
    std::vector<int64_t> delta_offset_;  // [n_layer], -1 where none
    int64_t conv_floats_ = 0;
    int64_t delta_floats_ = 0;
    int64_t position_ = 0;
};

// Preallocated snapshots of a RecurrentState (speculative decoding saves before a draft and
// restores on rejection; the session layer snapshots at turn boundaries). Saving and
// restoring copy into buffers sized once, so they never allocate.
class RecurrentSnapshotPool {
public:
    RecurrentSnapshotPool() = default;
    // `slots` snapshots of a state shaped like `like`.
    void init(const RecurrentState& like, int slots);
    int slots() const { return static_cast<int>(slots_.size()); }

    void save(int slot, const RecurrentState& state);
    // Throws std::logic_error when the slot was never saved or the shapes differ.
    void restore(int slot, RecurrentState& state) const;
    // Position saved in `slot`, or -1 when empty.
    int64_t position(int slot) const;
    // Empties `slot` (its state no longer lies on the conversation's path).
    void forget(int slot);

private:
    struct Slot {
        std::vector<float> data;
        int64_t position = -1;
    };
    std::vector<Slot> slots_;
};

}  // namespace ember
