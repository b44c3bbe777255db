// Every CUDA and cuBLAS call of the backend is checked: a failure throws naming the call and
// the error, so the caller's one-line message says what went wrong on the device.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace ember::cuda {

inline void check_cuda(cudaError_t err, const char* what) {
    if (err != cudaSuccess) {
        throw std::runtime_error(std::string("CUDA: ") + what + ": " + cudaGetErrorString(err));
    }
}

inline void check_cublas(cublasStatus_t status, const char* what) {
    if (status != CUBLAS_STATUS_SUCCESS) {
        throw std::runtime_error(std::string("cuBLAS: ") + what + ": status " +
                                 std::to_string(static_cast<int>(status)));
    }
}

// After a launch: a bad configuration shows here, a fault in the kernel at the next sync.
inline void check_launch(const char* kernel) {
    check_cuda(cudaGetLastError(), kernel);
}

}  // namespace ember::cuda

#define EMBER_CUDA_CHECK(call) ::ember::cuda::check_cuda((call), #call)
#define EMBER_CUBLAS_CHECK(call) ::ember::cuda::check_cublas((call), #call)
