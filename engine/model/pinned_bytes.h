// Host bytes that can be page-locked for the GPUs' copy engines (gpu.h: pin_host_memory): a
// copy to a GPU reads locked memory at ~55 GB/s on the H200's host, pageable memory at ~8
// (through the driver's staging, one copy at a time). State restored onto a GPU is kept or
// inflated in such buffers: the host tier's blocks, a restoring thread's inflated blob.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace ember {

class PinnedBytes {
public:
    PinnedBytes() = default;
    explicit PinnedBytes(std::vector<uint8_t> bytes) : bytes_(std::move(bytes)) {}
    PinnedBytes(PinnedBytes&& other) noexcept;
    PinnedBytes& operator=(PinnedBytes&& other) noexcept;
    PinnedBytes(const PinnedBytes&) = delete;
    PinnedBytes& operator=(const PinnedBytes&) = delete;
    ~PinnedBytes() { unpin(); }

    // Locks the buffer (its whole capacity); false where it cannot (no GPU, a failure), and
    // the bytes then stay pageable.
    bool pin();
    // Room for `bytes` that stays locked: a buffer too small is unlocked, grown and locked
    // again, so that filling vector() up to `bytes` never moves memory behind the lock.
    void reserve_pinned(size_t bytes);
    void unpin();

    // Resizing within the capacity keeps the lock; past it, call reserve_pinned first.
    std::vector<uint8_t>& vector() { return bytes_; }
    std::span<const uint8_t> bytes() const { return bytes_; }
    size_t size() const { return bytes_.size(); }
    bool pinned() const { return pinned_; }

private:
    std::vector<uint8_t> bytes_;
    bool pinned_ = false;
};

}  // namespace ember
