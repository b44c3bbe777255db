// Anonymous memory in whole, aligned 2 MiB runs that the kernel is asked to back with huge
// pages (MADV_HUGEPAGE; with transparent huge pages off or none free it falls back to 4 KiB
// pages and nothing else changes). For memory read in scattered short pieces, as attention
// reads one head's slice of every cached row: with 4 KiB pages nearly every row is a TLB miss,
// and filling the memory takes a page fault per 4 KiB.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ember {

class PageRegion {
public:
    static constexpr size_t kHugePage = size_t{2} << 20;

    PageRegion() = default;
    // At least `bytes` bytes (rounded up to whole huge pages), uninitialized until written
    // (then zero-filled by the kernel, page by page); `huge`: ask for huge pages (a huge page
    // is resident as a whole from its first write). Throws std::bad_alloc when the address
    // space or the memory limit says no.
    PageRegion(size_t bytes, bool huge);
    ~PageRegion();
    PageRegion(PageRegion&& other) noexcept;
    PageRegion& operator=(PageRegion&& other) noexcept;
    PageRegion(const PageRegion&) = delete;
    PageRegion& operator=(const PageRegion&) = delete;

    uint8_t* data() const { return data_; }
    size_t size() const { return size_; }
    // Maps every page now, writable, contents unchanged (MADV_POPULATE_WRITE): one call
    // instead of a page fault per page when the region is about to be written whole. A
    // kernel without it (before 5.14) leaves the pages to fault in as they are written.
    void populate();

private:
    void release();
    uint8_t* data_ = nullptr;
    size_t size_ = 0;
};

}  // namespace ember
