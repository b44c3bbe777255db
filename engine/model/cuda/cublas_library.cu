// Opening cuBLAS at run time (cublas_library.cuh).
#include <dlfcn.h>

#include <stdexcept>
#include <string>

#include "engine/model/cuda/cublas_library.cuh"

namespace ember::cuda {

namespace {

// The soname of the toolkit ember was built with (CUBLAS_VER_MAJOR, from cublas_api.h).
std::string library_name() {
    return "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
}

template <class Fn>
void bind(void* handle, const char* symbol, Fn& fn) {
    fn = reinterpret_cast<Fn>(dlsym(handle, symbol));
    if (fn == nullptr) {
        throw std::runtime_error(library_name() + " has no " + symbol +
                                 " (a cuBLAS older than the toolkit ember was built with?)");
    }
}

}  // namespace

CublasLibrary::CublasLibrary() {
    const std::string name = library_name();
    handle_ = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle_ == nullptr) {
        const char* why = dlerror();
        throw std::runtime_error("cannot open " + name + " (CUDA's cuBLAS, needed on the GPU): " +
                                 (why ? why : "not found") +
                                 "; install it or add its folder to LD_LIBRARY_PATH");
    }
    bind(handle_, "cublasCreate_v2", create);
    bind(handle_, "cublasDestroy_v2", destroy);
    bind(handle_, "cublasSetStream_v2", set_stream);
    bind(handle_, "cublasSetPointerMode_v2", set_pointer_mode);
    bind(handle_, "cublasGemmEx", gemm_ex);
}

CublasLibrary::~CublasLibrary() {
    if (handle_) dlclose(handle_);
}

}  // namespace ember::cuda
