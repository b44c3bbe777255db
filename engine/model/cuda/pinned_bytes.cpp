// PinnedBytes (engine/model/pinned_bytes.h): in the GPU library beside pin_host_memory, which it
// calls, in builds with CUDA and without.
#include "engine/model/pinned_bytes.h"

#include <utility>

#include "engine/model/gpu.h"

namespace ember {

PinnedBytes::PinnedBytes(PinnedBytes&& other) noexcept
    : bytes_(std::move(other.bytes_)), pinned_(std::exchange(other.pinned_, false)) {}

PinnedBytes& PinnedBytes::operator=(PinnedBytes&& other) noexcept {
    if (this != &other) {
        unpin();
        bytes_ = std::move(other.bytes_);
        pinned_ = std::exchange(other.pinned_, false);
    }
    return *this;
}

bool PinnedBytes::pin() {
    if (!pinned_ && bytes_.capacity() > 0) {
        pinned_ = pin_host_memory(bytes_.data(), bytes_.capacity());
    }
    return pinned_;
}

void PinnedBytes::reserve_pinned(size_t bytes) {
    if (pinned_ && bytes <= bytes_.capacity()) return;
    unpin();
    bytes_.reserve(bytes);
    pin();
}

void PinnedBytes::unpin() {
    if (pinned_) unpin_host_memory(bytes_.data());
    pinned_ = false;
}

}  // namespace ember
