// The SIMD kernel levels this CPU runs and one kernel table per level, for tests that compare
// levels side by side.
#pragma once

#include <vector>

#include "engine/tensor/cpu_features.h"
#include "engine/tensor/traits.h"

namespace ember::test {

// The SIMD levels this machine can run (none without AVX2).
inline std::vector<KernelLevel> simd_levels() {
    std::vector<KernelLevel> levels;
    for (KernelLevel l : {KernelLevel::Avx2, KernelLevel::Avx512}) {
        if (l <= max_kernel_level()) levels.push_back(l);
    }
    return levels;
}

// One table per level, built once (make_kernel_table builds a fresh one per call).
inline const KernelTable& table_for(KernelLevel level) {
    static const KernelTable avx2 = max_kernel_level() >= KernelLevel::Avx2
                                        ? make_kernel_table(KernelLevel::Avx2)
                                        : KernelTable{};
    static const KernelTable avx512 = max_kernel_level() >= KernelLevel::Avx512
                                          ? make_kernel_table(KernelLevel::Avx512)
                                          : KernelTable{};
    return level == KernelLevel::Avx512 ? avx512
           : level == KernelLevel::Avx2 ? avx2
                                        : scalar_kernels();
}

}  // namespace ember::test
