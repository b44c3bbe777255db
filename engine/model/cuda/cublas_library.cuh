// cuBLAS, opened when a model first goes to a GPU rather than linked: its libraries map
// hundreds of MiB whose relocations alone add ~100 MiB to every process's resident memory, and
// most runs of ember (the CPU, or a machine without a GPU) never call it.
#pragma once

#include <cublas_v2.h>

namespace ember::cuda {

// The entry points the backend calls, from libcublas.so.<major of the toolkit built with>.
class CublasLibrary {
public:
    // Throws std::runtime_error naming the library when it cannot be opened or lacks a symbol.
    CublasLibrary();
    ~CublasLibrary();
    CublasLibrary(const CublasLibrary&) = delete;
    CublasLibrary& operator=(const CublasLibrary&) = delete;

    decltype(&cublasCreate_v2) create = nullptr;
    decltype(&cublasDestroy_v2) destroy = nullptr;
    decltype(&cublasSetStream_v2) set_stream = nullptr;
    decltype(&cublasSetPointerMode_v2) set_pointer_mode = nullptr;
    // cublasGemmEx is overloaded in C++: the C entry point's type, spelled out.
    using GemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int,
                                      int, int, const void*, const void*, cudaDataType, int,
                                      const void*, cudaDataType, int, const void*, void*,
                                      cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
    GemmEx gemm_ex = nullptr;

private:
    void* handle_ = nullptr;
};

}  // namespace ember::cuda
