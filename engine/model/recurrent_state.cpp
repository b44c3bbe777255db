#include "engine/model/recurrent_state.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "engine/model/model.h"

namespace ember {

RecurrentState::RecurrentState(const RecurrentState& other)
    : data_(other.data()),
      conv_offset_(other.conv_offset_),
      delta_offset_(other.delta_offset_),
      conv_floats_(other.conv_floats_),
      delta_floats_(other.delta_floats_),
      position_(other.position_) {}

RecurrentState& RecurrentState::operator=(const RecurrentState& other) {
    if (this == &other) return *this;
    const std::vector<float>& numbers = other.data();
    if (mirror_) mirror_->recurrent_host_written();
    data_ = numbers;
    conv_offset_ = other.conv_offset_;
    delta_offset_ = other.delta_offset_;
    conv_floats_ = other.conv_floats_;
    delta_floats_ = other.delta_floats_;
    position_ = other.position_;
    return *this;
}

const std::vector<float>& RecurrentState::data() const {
    if (mirror_) mirror_->recurrent_to_host();
    return data_;
}

std::vector<float>& RecurrentState::data() {
    if (mirror_) {
        mirror_->recurrent_to_host();
        mirror_->recurrent_host_written();
    }
    return data_;
}

float* RecurrentState::overwrite() {
    if (mirror_) mirror_->recurrent_host_written();
    return data_.data();
}

void RecurrentState::init(const ModelConfig& c) {
    if (mirror_) mirror_->recurrent_host_written();
    const size_t n_layer = static_cast<size_t>(c.n_layer);
    conv_offset_.assign(n_layer, -1);
    delta_offset_.assign(n_layer, -1);
    conv_floats_ = 0;
    delta_floats_ = 0;
    position_ = 0;
    if (!is_hybrid(c.family) || c.layer_kinds.size() != n_layer) {
        data_.clear();
        return;
    }
    conv_floats_ = (c.conv_kernel - 1) * c.conv_channels();
    if (c.ssm_n_v_heads > 0) delta_floats_ = c.ssm_n_v_heads * c.ssm_k_dim * c.ssm_v_dim;
    int64_t total = 0;
    for (size_t l = 0; l < n_layer; ++l) {
        const LayerKind kind = c.layer_kinds[l];
        if (kind == LayerKind::ShortConv || kind == LayerKind::DeltaNet) {
            conv_offset_[l] = total;
            total += conv_floats_;
        }
        if (kind == LayerKind::DeltaNet) {
            delta_offset_[l] = total;
            total += delta_floats_;
        }
    }
    data_.assign(static_cast<size_t>(total), 0.0f);
}

void RecurrentState::reset() {
    std::fill(data_.begin(), data_.end(), 0.0f);
    if (mirror_) mirror_->recurrent_zeroed();
    position_ = 0;
}

float* RecurrentState::conv(int64_t layer) {
    const int64_t off = conv_offset_[static_cast<size_t>(layer)];
    return off < 0 ? nullptr : data().data() + off;
}

float* RecurrentState::delta(int64_t layer) {
    const int64_t off = delta_offset_[static_cast<size_t>(layer)];
    return off < 0 ? nullptr : data().data() + off;
}

void RecurrentSnapshotPool::init(const RecurrentState& like, int slots) {
    slots_.assign(static_cast<size_t>(std::max(slots, 0)), Slot{});
    for (Slot& s : slots_) s.data.assign(static_cast<size_t>(like.floats()), 0.0f);
}

void RecurrentSnapshotPool::save(int slot, const RecurrentState& state) {
    Slot& s = slots_.at(static_cast<size_t>(slot));
    if (static_cast<int64_t>(s.data.size()) != state.floats()) {
        throw std::logic_error("recurrent snapshot: slot holds " + std::to_string(s.data.size()) +
                               " floats, the state " + std::to_string(state.floats()));
    }
    const std::vector<float>& numbers = state.data();
    std::copy(numbers.begin(), numbers.end(), s.data.begin());
    s.position = state.position();
}

void RecurrentSnapshotPool::restore(int slot, RecurrentState& state) const {
    const Slot& s = slots_.at(static_cast<size_t>(slot));
    if (s.position < 0) throw std::logic_error("recurrent snapshot: slot was never saved");
    if (static_cast<int64_t>(s.data.size()) != state.floats()) {
        throw std::logic_error("recurrent snapshot: slot shape differs from the state's");
    }
    std::copy(s.data.begin(), s.data.end(), state.overwrite());
    state.set_position(s.position);
}

int64_t RecurrentSnapshotPool::position(int slot) const {
    return slots_.at(static_cast<size_t>(slot)).position;
}

void RecurrentSnapshotPool::forget(int slot) {
    slots_.at(static_cast<size_t>(slot)).position = -1;
}

}  // namespace ember
