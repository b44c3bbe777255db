// AVX-512 variants of ops.h; callers must check the CPU first (ops.cpp does).
#pragma once

#include <cstdint>

namespace ember::avx512 {

float dot(const float* a, const float* b, int64_t n);
void axpy(float a, const float* x, float* y, int64_t n);
void softmax(float* x, int64_t n);
void swiglu(float* gate, const float* up, int64_t n);

}  // namespace ember::avx512
