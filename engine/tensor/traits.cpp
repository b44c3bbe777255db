#include "engine/tensor/traits.h"

#include <cstdlib>
#include <stdexcept>
#include <string_view>

#include "engine/tensor/blocks.h"

namespace ember {

size_t act_row_bytes(ActFormat format, int64_t n) {
    switch (format) {
        case ActFormat::F32:
            return static_cast<size_t>(n) * sizeof(float);
        case ActFormat::Q8_32:
            return static_cast<size_t>(n / kQK) * sizeof(BlockQ8_32);
    }
    throw std::invalid_argument("unknown activation format");
}

namespace {

KernelTable make_scalar_kernels() {
    KernelTable table;
    install_scalar_kernels(table);
    return table;
}

KernelTable make_active_kernels() {
    KernelTable table = scalar_kernels();
    if (const char* want = std::getenv("EMBER_KERNELS");
        want && std::string_view(want) == "scalar") {
        return table;
    }
    // SIMD installers go here, weakest ISA first so stronger ones override, e.g.
    //   if (cpu.avx2) install_avx2_kernels(table);
    //   if (cpu.avx512_vnni) install_avx512_kernels(table);
    // Each must keep the act_format contract documented in traits.h.
    return table;
}

}  // namespace

const KernelTable& scalar_kernels() {
    static const KernelTable table = make_scalar_kernels();
    return table;
}

const KernelTable& active_kernels() {
    static const KernelTable table = make_active_kernels();
    return table;
}

void quantize_act_row(ActFormat format, const float* x, void* dst, int64_t n) {
    active_kernels().quantize_act[static_cast<size_t>(format)](x, dst, n);
}

}  // namespace ember
