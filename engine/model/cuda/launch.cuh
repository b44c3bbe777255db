// Kernel launches with Programmatic Dependent Launch (PDL): every kernel of the backend is
// launched through launch_kernel and calls await_previous_grid first.
//
// Why: a decode step is ~480 small kernels, each depending on the one before, in a CUDA graph.
// With a plain launch a kernel's blocks are scheduled only once the grid before it has finished;
// with PDL they are scheduled while it runs and wait on the device for it to complete, which
// hides the launch latency of each boundary (~0.2 us a kernel on an H200).
//
// The ordering stays that of plain launches as long as every kernel launched with the attribute
// waits before it touches global memory, in every block: the wait returns only once the previous
// grid has completed, and that grid completed only after its own wait returned, so each kernel
// is ordered after all the work before it in the stream (a block that returned without waiting
// would let its grid complete early and break that chain). Work launched without the attribute
// (cuBLAS's kernels, copies) is ordered as always; a kernel of ours after one of them
// starts when it has completed, and its wait returns at once.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "engine/model/cuda/cuda_check.cuh"

namespace ember::cuda {

// The first statement of every __global__ kernel of the backend, before any global memory
// access and before any return. griddepcontrol.wait returns once the grid launched before this
// one (the prerequisite of a PDL launch) has completed and its memory is visible, so everything
// the kernel reads or writes after it is ordered as with a plain launch (without a prerequisite,
// a plain launch, it returns at once). griddepcontrol.launch_dependents then lets the next
// kernel's blocks be scheduled once every block of this grid has started (or exited): they wait
// at their own call, so this grid's remaining work overlaps only their launch. Both need sm_90:
// the compute_80 PTX of the build leaves them out, and launch_kernel sets the attribute only on
// a device that runs code with them (device_runs_griddepcontrol).
__device__ __forceinline__ void await_previous_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Whether a device of compute capability major.minor runs kernels of this library compiled for
// sm_90 or later, which hold await_previous_grid's instructions. Compute capability 9.0 alone
// does not say so: a device runs the library's machine code for its own major version where
// there is some (at or below its minor), and otherwise PTX of an older architecture compiled on
// the spot: the build's compute_80 PTX on a Blackwell card, or on an H200 in a build for
// Ampere only. Those kernels do not wait, and the attribute would let each one read what the
// one before had not written yet. __CUDA_ARCH_LIST__ (set by nvcc in host code too) lists the
// architectures the device code is compiled for (SASS or PTX, the same for every file of the
// library), so the question is answered here: a listed architecture of 9.0 or later with the
// device's major version and a minor at or below its own. (Arch-specific SASS such as sm_100a,
// which no other minor runs, is not told apart from its family's: not a build of this project.)
constexpr bool device_runs_griddepcontrol(int major, int minor) {
#ifdef __CUDA_ARCH_LIST__
    constexpr int kArchs[] = {__CUDA_ARCH_LIST__};  // e.g. 800,900: compute_80 and sm_90
    for (const int arch : kArchs) {
        if (arch >= 900 && arch / 100 == major && arch / 10 % 10 <= minor) return true;
    }
#endif
    return false;
}

// Whether launches on the current device carry the PDL attribute: where its kernels wait
// (device_runs_griddepcontrol: compute capability 9.0 and up, with code built for it), unless
// EMBER_CUDA_PDL=0 (to measure the difference, or to rule PDL out of a problem). The
// environment and every device's capability are read once (the numbering of the devices does
// not change in a process), so a launch asks the runtime only which device is current. A failed
// query is cleared (it would otherwise show at the next launch's check) and means no PDL.
inline bool programmatic_launch_enabled() {
    static const bool wanted = [] {
        const char* env = std::getenv("EMBER_CUDA_PDL");
        return env == nullptr || std::strcmp(env, "0") != 0;
    }();
    if (!wanted) return false;
    static const std::vector<bool> capable = [] {
        std::vector<bool> table;
        int count = 0;
        if (cudaGetDeviceCount(&count) != cudaSuccess) {
            cudaGetLastError();
            return table;
        }
        for (int device = 0; device < count; ++device) {
            int major = 0, minor = 0;
            if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) !=
                    cudaSuccess ||
                cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) !=
                    cudaSuccess) {
                cudaGetLastError();
                major = 0;
            }
            table.push_back(device_runs_griddepcontrol(major, minor));
        }
        return table;
    }();
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    return device >= 0 && static_cast<std::size_t>(device) < capable.size() && capable[device];
}

// kernel<<<grid, block, shared_bytes, stream>>>(args...), with the PDL attribute where
// programmatic_launch_enabled() (the kernel must call await_previous_grid first). The arguments
// convert to the kernel's parameters as they do in a <<<>>> launch (cudaLaunchKernelEx's
// template passes them through parameters of the kernel's types). A failed launch throws,
// naming the call, and is cleared first, as check_launch's cudaGetLastError clears it, so that
// the next check does not report it again; the callers' check_launch after a launch still
// reports an error left by earlier work.
template <class... Params, class... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t shared_bytes,
                   cudaStream_t stream, Args&&... args) {
    static_assert(sizeof...(Params) == sizeof...(Args), "launch_kernel: one argument a parameter");
    cudaLaunchAttribute attribute{};
    attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t config{};
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = shared_bytes;
    config.stream = stream;
    if (programmatic_launch_enabled()) {
        config.attrs = &attribute;
        config.numAttrs = 1;
    }
    const cudaError_t err = cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
    if (err != cudaSuccess) {
        cudaGetLastError();
        check_cuda(err, "cudaLaunchKernelEx");
    }
}

}  // namespace ember::cuda
