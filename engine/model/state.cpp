#include "engine/model/state.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "engine/model/model.h"

namespace ember {

void KvCache::init(int64_t n_layer, int64_t k_width, int64_t v_width, int64_t max_positions,
                   KvType type, KvWindow window) {
    n_layer_ = n_layer;
    k_width_ = k_width;
    v_width_ = v_width;
    max_positions_ = max_positions;
    type_ = type;
    length_ = 0;
    n_chunks_max_ = (max_positions + kChunkPositions - 1) / kChunkPositions;
    n_chunks_allocated_ = 0;
    window_ = window.positions;
    ring_layer_ = window.layers;
    ring_layer_.resize(static_cast<size_t>(n_layer), false);
    ring_begin_ = 0;
    ring_positions_ = 0;
    if (window_ > 0 &&
        std::find(ring_layer_.begin(), ring_layer_.end(), true) != ring_layer_.end()) {
        // Whole chunks, so a chunk's rows stay contiguous; never more than the context (a
        // ring that never wraps still tracks which rows a restore left out).
        const int64_t ring_chunks = (window_ + kRingSlack + kChunkPositions - 1) / kChunkPositions;
        ring_positions_ = std::min(ring_chunks, n_chunks_max_) * kChunkPositions;
    }
    k_chunks_.assign(static_cast<size_t>(n_layer * n_chunks_max_), nullptr);
    v_chunks_.assign(static_cast<size_t>(n_layer * n_chunks_max_), nullptr);
    regions_.clear();
}

void KvCache::reserve(int64_t n, Pages pages) {
    if (n > max_positions_) {
        throw std::length_error("KV cache: " + std::to_string(n) +
                                " positions exceed the context of " +
                                std::to_string(max_positions_));
    }
    const int64_t need = (n + kChunkPositions - 1) / kChunkPositions;
    const auto k_bytes = static_cast<size_t>(kChunkPositions * k_row_bytes());
    const auto v_bytes = static_cast<size_t>(kChunkPositions * v_row_bytes());
    for (; n_chunks_allocated_ < need; ++n_chunks_allocated_) {
        const int64_t c = n_chunks_allocated_;
        int64_t layers = 0;  // that have a chunk c (a ring layer has only its ring's)
        for (int64_t l = 0; l < n_layer_; ++l) layers += chunks_for(l, c + 1) > c ? 1 : 0;
        if (layers == 0) continue;
        // Huge pages only for a chunk this call fills at least half of (a prompt, a restore):
        // a huge page is resident whole once written, so a chunk opened by one decoded token
        // would hold all its memory at once (each 2 MiB spans two layers' 256 positions).
        const bool huge =
            pages == Pages::HugeWhereFilled &&
            std::min(n, (c + 1) * kChunkPositions) - c * kChunkPositions >= kChunkPositions / 2;
        PageRegion& region =
            regions_.emplace_back(static_cast<size_t>(layers) * (k_bytes + v_bytes), huge);
        uint8_t* next = region.data();
        for (int64_t l = 0; l < n_layer_; ++l) {
            if (chunks_for(l, c + 1) <= c) continue;
            const size_t idx = static_cast<size_t>(l * n_chunks_max_ + c);
            k_chunks_[idx] = next;
            v_chunks_[idx] = next + k_bytes;
            next += k_bytes + v_bytes;
        }
    }
}

void KvCache::populate(size_t part, size_t parts) {
    if (restores_to_device()) return;  // the host rows stay unmapped until a reader asks
    for (size_t i = part; i < regions_.size(); i += std::max<size_t>(parts, 1)) {
        regions_[i].populate();
    }
}

void KvCache::set_length(int64_t n) {
    if (n < 0 || n > n_chunks_allocated_ * kChunkPositions) {
        throw std::out_of_range("KV cache: length " + std::to_string(n) + " is outside the cache");
    }
    if (n == 0) {
        ring_begin_ = 0;
    } else if (ring_positions_ > 0 && n > length_) {
        // The rows [length_, n) were written over the ring slots of [length_ - R, n - R).
        ring_begin_ = std::max(ring_begin_, n - ring_positions_);
    }
    length_ = n;
}

bool KvCache::can_resume_at(int64_t n) const {
    if (ring_positions_ == 0 || n == 0) return true;
    return std::max<int64_t>(0, n - window_ + 1) >= ring_begin_;
}

void KvCache::forget_ring_rows_before(int64_t pos) {
    ring_begin_ = std::max(ring_begin_, pos);
}

uint8_t* KvCache::row(const std::vector<uint8_t*>& chunks, int64_t row_bytes, int64_t layer,
                      int64_t pos) const {
    if (is_ring(layer)) pos %= ring_positions_;
    const size_t idx = static_cast<size_t>(layer * n_chunks_max_ + pos / kChunkPositions);
    return chunks[idx] + (pos % kChunkPositions) * row_bytes;
}

void KvCache::store(int64_t layer, int64_t pos, const float* k, const float* v) {
    uint8_t* kd = k_data(layer, pos);
    uint8_t* vd = v_data(layer, pos);
    switch (type_) {
        case KvType::F32:
            std::memcpy(kd, k, static_cast<size_t>(k_width_) * sizeof(float));
            std::memcpy(vd, v, static_cast<size_t>(v_width_) * sizeof(float));
            return;
        case KvType::F16:
            to_f16(k, reinterpret_cast<uint16_t*>(kd), k_width_);
            to_f16(v, reinterpret_cast<uint16_t*>(vd), v_width_);
            return;
        case KvType::Q8_0:
            quantize_q8_0(k, kd, k_width_);
            quantize_q8_0(v, vd, v_width_);
            return;
    }
}

KvRun KvCache::run(int64_t layer, int64_t p0, int64_t n, int64_t k_offset, int64_t v_offset) const {
    KvRun r;
    r.type = type_;
    r.n = n;
    // Strides in elements of the (padded) rows; a q8_0 run starts at the block holding the
    // head and says where the head starts inside it.
    r.k_stride = kv_padded_width(type_, k_width_);
    r.v_stride = kv_padded_width(type_, v_width_);
    const int64_t block = type_ == KvType::Q8_0 ? kKvQ8Block : 1;
    r.k_first = k_offset % block;
    r.v_first = v_offset % block;
    r.k = k_data(layer, p0) + kv_bytes(type_, k_offset - r.k_first);
    r.v = v_data(layer, p0) + kv_bytes(type_, v_offset - r.v_first);
    return r;
}

uint8_t* KvCache::k_data(int64_t layer, int64_t pos) {
    note_host_write(pos);
    return row(k_chunks_, k_row_bytes(), layer, pos);
}
uint8_t* KvCache::v_data(int64_t layer, int64_t pos) {
    note_host_write(pos);
    return row(v_chunks_, v_row_bytes(), layer, pos);
}

void KvCache::note_host_write(int64_t pos) {
    int64_t seen = host_written_from_.load(std::memory_order_relaxed);
    while (pos < seen &&
           !host_written_from_.compare_exchange_weak(seen, pos, std::memory_order_relaxed)) {
    }
}

int64_t KvCache::take_host_writes() {
    return host_written_from_.exchange(kNoHostWrites, std::memory_order_relaxed);
}
const uint8_t* KvCache::k_data(int64_t layer, int64_t pos) const {
    return row(k_chunks_, k_row_bytes(), layer, pos);
}
const uint8_t* KvCache::v_data(int64_t layer, int64_t pos) const {
    return row(v_chunks_, v_row_bytes(), layer, pos);
}

void KvCache::require(KvType type) const {
    if (type_ != type) {
        throw std::logic_error(std::string("KV cache of type ") + kv_type_name(type_) +
                               " read as " + kv_type_name(type));
    }
}

float* KvCache::k_row(int64_t layer, int64_t pos) {
    require(KvType::F32);
    return reinterpret_cast<float*>(k_data(layer, pos));
}
float* KvCache::v_row(int64_t layer, int64_t pos) {
    require(KvType::F32);
    return reinterpret_cast<float*>(v_data(layer, pos));
}
uint16_t* KvCache::k_row_f16(int64_t layer, int64_t pos) {
    require(KvType::F16);
    return reinterpret_cast<uint16_t*>(k_data(layer, pos));
}
uint16_t* KvCache::v_row_f16(int64_t layer, int64_t pos) {
    require(KvType::F16);
    return reinterpret_cast<uint16_t*>(v_data(layer, pos));
}
const float* KvCache::k_row(int64_t layer, int64_t pos) const {
    require(KvType::F32);
    return reinterpret_cast<const float*>(k_data(layer, pos));
}
const float* KvCache::v_row(int64_t layer, int64_t pos) const {
    require(KvType::F32);
    return reinterpret_cast<const float*>(v_data(layer, pos));
}
const uint16_t* KvCache::k_row_f16(int64_t layer, int64_t pos) const {
    require(KvType::F16);
    return reinterpret_cast<const uint16_t*>(k_data(layer, pos));
}
const uint16_t* KvCache::v_row_f16(int64_t layer, int64_t pos) const {
    require(KvType::F16);
    return reinterpret_cast<const uint16_t*>(v_data(layer, pos));
}

uint64_t KvCache::bytes_per_position() const {
    return static_cast<uint64_t>(n_layer_ * (k_row_bytes() + v_row_bytes()));
}

uint64_t KvCache::allocated_bytes() const {
    uint64_t positions = 0;  // summed over layers
    for (int64_t l = 0; l < n_layer_; ++l) {
        positions += static_cast<uint64_t>(chunks_for(l, n_chunks_allocated_) * kChunkPositions);
    }
    return positions * static_cast<uint64_t>(k_row_bytes() + v_row_bytes());
}

int64_t KvCache::chunks_for(int64_t layer, int64_t chunks) const {
    return is_ring(layer) ? std::min(chunks, ring_positions_ / kChunkPositions) : chunks;
}

std::unique_ptr<InferenceState> make_state(const ModelConfig& c, int64_t max_positions,
                                           KvType kv_type) {
    auto s = std::make_unique<InferenceState>();
    // Hybrids keep K/V only for their attention layers.
    const int64_t kv_layers = is_hybrid(c.family) ? c.n_kv_layers : c.n_layer;
    s->kv.init(kv_layers, c.n_head_kv * c.head_dim, c.n_head_kv * c.value_dim, max_positions,
               kv_type, KvWindow{c.sliding_window, c.sliding});
    s->recurrent.init(c);
    return s;
}

}  // namespace ember
