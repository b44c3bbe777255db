// For the GPU kernel tests: whether a CUDA device is there, and a device buffer freed on scope
// exit (the tests call the kernels directly, without a model).
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstddef>

namespace ember::cuda {

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call

inline bool has_device() {
    int count = 0;
    return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

struct DeviceBuffer {
    void* ptr = nullptr;
    explicit DeviceBuffer(size_t bytes) {
        if (cudaMalloc(&ptr, bytes == 0 ? 1 : bytes) != cudaSuccess) ptr = nullptr;
    }
    ~DeviceBuffer() { cudaFree(ptr); }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    template <class T>
    T* as() const {
        return static_cast<T*>(ptr);
    }
};

}  // namespace ember::cuda
