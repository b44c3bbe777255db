#include "engine/tensor/cpu_features.h"

#include <cstdlib>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace ember {

namespace {

#if defined(__x86_64__) || defined(__i386__)
struct CpuidRegs {
    uint32_t eax = 0, ebx = 0, ecx = 0, edx = 0;
};

CpuidRegs cpuid(uint32_t leaf, uint32_t subleaf) {
    CpuidRegs r;
    if (!__get_cpuid_count(leaf, subleaf, &r.eax, &r.ebx, &r.ecx, &r.edx)) return {};
    return r;
}

// xgetbv is executed through inline asm so this file needs no -mxsave; only valid when
// CPUID.1:ECX.OSXSAVE says the OS enabled it.
uint64_t read_xcr0() {
    uint32_t lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return static_cast<uint64_t>(hi) << 32 | lo;
}

constexpr bool bit(uint32_t reg, int b) {
    return ((reg >> b) & 1u) != 0;
}

CpuFeatures detect() {
    CpuFeatures f;
    const uint32_t max_leaf = cpuid(0, 0).eax;
    if (max_leaf < 1) return f;
    const CpuidRegs l1 = cpuid(1, 0);
    f.fma = bit(l1.ecx, 12);
    f.f16c = bit(l1.ecx, 29);
    const bool osxsave = bit(l1.ecx, 27);
    const bool avx = bit(l1.ecx, 28);
    if (osxsave && avx) {
        const uint64_t xcr0 = read_xcr0();
        f.os_ymm = (xcr0 & 0x6) == 0x6;    // SSE and AVX state
        f.os_zmm = (xcr0 & 0xe6) == 0xe6;  // + opmask, ZMM_Hi256, Hi16_ZMM
    }
    if (max_leaf >= 7) {
        const CpuidRegs l7 = cpuid(7, 0);
        f.avx2 = bit(l7.ebx, 5);
        f.bmi2 = bit(l7.ebx, 8);
        f.avx512f = bit(l7.ebx, 16);
        f.avx512dq = bit(l7.ebx, 17);
        f.avx512bw = bit(l7.ebx, 30);
        f.avx512vl = bit(l7.ebx, 31);
        f.avx512vnni = bit(l7.ecx, 11);
        if (l7.eax >= 1) {
            const CpuidRegs l71 = cpuid(7, 1);
            f.avx_vnni = bit(l71.eax, 4);
            f.avx512bf16 = bit(l71.eax, 5);
        }
    }
    return f;
}
#else
CpuFeatures detect() {
    return {};
}
#endif

KernelLevel detect_max_level(const CpuFeatures& f) {
    const bool avx2 = f.os_ymm && f.avx2 && f.fma && f.f16c && f.bmi2;
    if (!avx2) return KernelLevel::Scalar;
    const bool avx512 = f.os_zmm && f.avx512f && f.avx512dq && f.avx512bw && f.avx512vl &&
                        f.avx512vnni && f.avx512bf16;
    return avx512 ? KernelLevel::Avx512 : KernelLevel::Avx2;
}

KernelLevel detect_level() {
    const KernelLevel max = max_kernel_level();
    const char* want = std::getenv("EMBER_KERNELS");
    if (want == nullptr) return max;
    const auto parsed = parse_kernel_level(want);
    if (!parsed || *parsed > max) return max;
    return *parsed;
}

}  // namespace

const CpuFeatures& cpu_features() {
    static const CpuFeatures features = detect();
    return features;
}

KernelLevel max_kernel_level() {
    static const KernelLevel level = detect_max_level(cpu_features());
    return level;
}

KernelLevel kernel_level() {
    static const KernelLevel level = detect_level();
    return level;
}

const char* kernel_level_name(KernelLevel level) {
    switch (level) {
        case KernelLevel::Scalar:
            return "scalar";
        case KernelLevel::Avx2:
            return "avx2";
        case KernelLevel::Avx512:
            return "avx512";
    }
    return "unknown";
}

std::optional<KernelLevel> parse_kernel_level(std::string_view name) {
    if (name == "scalar") return KernelLevel::Scalar;
    if (name == "avx2") return KernelLevel::Avx2;
    if (name == "avx512") return KernelLevel::Avx512;
    return std::nullopt;
}

}  // namespace ember
