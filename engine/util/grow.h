// Scratch buffers that grow on demand and never shrink, so a decode loop that has run once
// runs without allocating.
#pragma once

#include <cstdint>
#include <vector>

namespace ember {

// Makes v at least n elements long (contents kept; never shrinks).
template <class T>
void grow(std::vector<T>& v, int64_t n) {
    if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
}

}  // namespace ember
