// Seeded standard-normal floats: activations and weights for kernel tests and benchmarks.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace ember::test {

inline std::vector<float> normal_floats(int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd;
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = nd(rng);
    return x;
}

}  // namespace ember::test
