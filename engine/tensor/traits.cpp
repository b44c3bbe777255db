#include "engine/tensor/traits.h"

#include <stdexcept>
#include <string>

#include "engine/tensor/blocks.h"

namespace ember {

size_t act_row_bytes(ActFormat format, int64_t n) {
    switch (format) {
        case ActFormat::F32:
            return static_cast<size_t>(n) * sizeof(float);
        case ActFormat::Q8_32:
            return static_cast<size_t>(n / kQK) * sizeof(BlockQ8_32);
        case ActFormat::Q16_32:
            return static_cast<size_t>(n / kQK) * sizeof(BlockQ16_32);
    }
    throw std::invalid_argument("unknown activation format");
}

namespace {

KernelTable make_scalar_kernels() {
    KernelTable table;
    install_scalar_kernels(table);
    return table;
}

}  // namespace

KernelTable make_kernel_table(KernelLevel level) {
    if (level > max_kernel_level()) {
        throw std::invalid_argument(std::string("this CPU cannot run the ") +
                                    kernel_level_name(level) + " kernels");
    }
    KernelTable table;
    install_scalar_kernels(table);
    // Weakest first, so a stronger level overrides only the entries it improves.
    if (level >= KernelLevel::Avx2) install_avx2_kernels(table);
    if (level >= KernelLevel::Avx512) install_avx512_kernels(table);
    return table;
}

const KernelTable& scalar_kernels() {
    static const KernelTable table = make_scalar_kernels();
    return table;
}

const KernelTable& active_kernels() {
    static const KernelTable table = make_kernel_table(kernel_level());
    return table;
}

void quantize_act_row(ActFormat format, const float* x, void* dst, int64_t n) {
    active_kernels().quantize_act[static_cast<size_t>(format)](x, dst, n);
}

}  // namespace ember
