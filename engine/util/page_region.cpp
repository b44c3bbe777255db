#include "engine/util/page_region.h"

#include <sys/mman.h>

#include <new>
#include <utility>

namespace ember {

PageRegion::PageRegion(size_t bytes, bool huge) {
    if (bytes == 0) return;
    const size_t size = (bytes + kHugePage - 1) / kHugePage * kHugePage;
    // Map one huge page more than needed and trim both ends, so the start is aligned: a huge
    // page can back only an aligned 2 MiB.
    const size_t mapped = size + kHugePage;
    void* p = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    const auto base = reinterpret_cast<uintptr_t>(p);
    const uintptr_t aligned = (base + kHugePage - 1) / kHugePage * kHugePage;
    if (aligned > base) ::munmap(p, aligned - base);
    const uintptr_t end = base + mapped;
    if (end > aligned + size)
        ::munmap(reinterpret_cast<void*>(aligned + size), end - aligned - size);
    data_ = reinterpret_cast<uint8_t*>(aligned);
    size_ = size;
    // Advice only: without transparent huge pages the region works the same on small pages.
    if (huge) ::madvise(data_, size_, MADV_HUGEPAGE);
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older C libraries lack the name
#endif

void PageRegion::populate() {
    if (data_ != nullptr) ::madvise(data_, size_, MADV_POPULATE_WRITE);
}

PageRegion::~PageRegion() {
    release();
}

PageRegion::PageRegion(PageRegion&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

PageRegion& PageRegion::operator=(PageRegion&& other) noexcept {
    if (this != &other) {
        release();
        data_ = std::exchange(other.data_, nullptr);
        size_ = std::exchange(other.size_, 0);
    }
    return *this;
}

void PageRegion::release() {
    if (data_ != nullptr) ::munmap(data_, size_);
    data_ = nullptr;
    size_ = 0;
}

}  // namespace ember
