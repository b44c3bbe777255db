// What the CPU and the operating system let the tensor kernels use, detected once.
//
// An instruction set is usable only when the CPU reports it (cpuid) AND the OS saves its
// register state on context switches (XCR0, read with xgetbv): a kernel may hide AVX-512 from
// a process, and a hypervisor may report features it does not enable. AMX is deliberately not
// probed: some machines advertise it but fault on tile instructions.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace ember {

struct CpuFeatures {
    // cpuid feature bits.
    bool fma = false;
    bool f16c = false;
    bool avx2 = false;
    bool bmi2 = false;
    bool avx512f = false;
    bool avx512dq = false;
    bool avx512bw = false;
    bool avx512vl = false;
    bool avx512vnni = false;
    bool avx512bf16 = false;
    bool avx_vnni = false;
    // XCR0: the OS saves the YMM state (SSE + AVX) / the opmask and all 32 ZMM registers.
    bool os_ymm = false;
    bool os_zmm = false;
};

// Kernel sets, weakest first. Each level's translation units are compiled with the flags in
// engine/CMakeLists.txt, and a level is usable only when every one of those flags is.
enum class KernelLevel : uint8_t {
    Scalar = 0,
    Avx2 = 1,    // AVX2 + FMA + F16C + BMI2
    Avx512 = 2,  // Avx2 + AVX-512 F/DQ/BW/VL/VNNI/BF16
};

// Detected on first call (thread-safe), immutable afterwards.
const CpuFeatures& cpu_features();

// The strongest level the CPU and OS allow.
KernelLevel max_kernel_level();

// The level active_kernels() uses: max_kernel_level(), lowered (never raised) by the
// environment variable EMBER_KERNELS=scalar|avx2|avx512 as read on first call. Lets tests and
// benchmarks run the weaker kernels on a strong machine.
KernelLevel kernel_level();

const char* kernel_level_name(KernelLevel level);
std::optional<KernelLevel> parse_kernel_level(std::string_view name);

}  // namespace ember
