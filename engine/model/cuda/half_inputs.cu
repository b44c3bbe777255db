// Scaled f16 activations (half_inputs.cuh).
#include <stdexcept>
#include <string>

#include "engine/model/cuda/cuda_check.cuh"
#include "engine/model/cuda/half_inputs.cuh"
#include "engine/model/cuda/launch.cuh"
#include "engine/model/cuda/reduce.cuh"

namespace ember::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kPerThread = 8;  // elements a thread converts: two 16-byte loads, one store

// Block r: row_max[r] = max |x[r][k]| (NaN counts as infinite).
__global__ void __launch_bounds__(kThreads)
    row_max_kernel(const float* x, int64_t cols, int64_t ldx, float* row_max) {
    await_previous_grid();
    const float* row = x + static_cast<int64_t>(blockIdx.x) * ldx;  // [cols]
    float top = 0.0f;
    for (int64_t k = threadIdx.x * 4; k < cols; k += kThreads * 4) {
        const float4 v = __ldg(reinterpret_cast<const float4*>(row + k));
        for (const float e : {v.x, v.y, v.z, v.w}) top = fmaxf(top, isnan(e) ? INFINITY : fabsf(e));
    }
    top = warp_max(top);
    __shared__ float warps[kThreads / 32];
    if (threadIdx.x % 32 == 0) warps[threadIdx.x / 32] = top;
    __syncthreads();
    if (threadIdx.x == 0) {
        float all = 0.0f;
        for (int w = 0; w < kThreads / 32; ++w) all = fmaxf(all, warps[w]);
        row_max[blockIdx.x] = all;
    }
}

// The exponent e of the batch's scale: every block reads all row maxima (a few hundred floats,
// in L2) and reaches the same value.
__device__ int batch_exponent(const float* row_max, int64_t n) {
    float top = 0.0f;
    for (int64_t r = threadIdx.x; r < n; r += kThreads) top = fmaxf(top, row_max[r]);
    top = warp_max(top);
    __shared__ float warps[kThreads / 32];
    __shared__ int exponent;
    if (threadIdx.x % 32 == 0) warps[threadIdx.x / 32] = top;
    __syncthreads();
    if (threadIdx.x == 0) {
        float all = 0.0f;
        for (int w = 0; w < kThreads / 32; ++w) all = fmaxf(all, warps[w]);
        int e = 0;
        if (all > 0.0f && all < INFINITY) {
            int top_exponent = 0;
            frexpf(all, &top_exponent);  // 2^(top_exponent - 1) <= all < 2^top_exponent
            e = min(60, max(-60, 15 - top_exponent));
        }
        exponent = e;
    }
    __syncthreads();
    return exponent;
}

// Block (r, j): row r's elements [j * kThreads * kPerThread, ...).
__global__ void __launch_bounds__(kThreads)
    scale_rows_kernel(const float* x, int64_t n, int64_t cols, int64_t ldx, const float* row_max,
                      __half* out, float* unscale) {
    await_previous_grid();
    const int e = batch_exponent(row_max, n);
    const float scale = ldexpf(1.0f, e);
    if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) *unscale = ldexpf(1.0f, -e);
    const int64_t r = blockIdx.x;
    const int64_t k = (static_cast<int64_t>(blockIdx.y) * kThreads + threadIdx.x) * kPerThread;
    if (k >= cols) return;
    const float* src = x + r * ldx + k;
    const float4 lo = __ldg(reinterpret_cast<const float4*>(src));
    const float4 hi = __ldg(reinterpret_cast<const float4*>(src + 4));
    __half2 h[4] = {__floats2half2_rn(lo.x * scale, lo.y * scale),
                    __floats2half2_rn(lo.z * scale, lo.w * scale),
                    __floats2half2_rn(hi.x * scale, hi.y * scale),
                    __floats2half2_rn(hi.z * scale, hi.w * scale)};
    *reinterpret_cast<uint4*>(out + r * cols + k) = *reinterpret_cast<const uint4*>(h);
}

}  // namespace

void to_scaled_half(const float* x, int64_t n, int64_t cols, int64_t ldx, __half* out,
                    float* row_max, float* unscale, cudaStream_t stream) {
    if (n <= 0) return;
    if (cols % kPerThread != 0 || ldx % 4 != 0 || ldx < cols ||
        reinterpret_cast<uintptr_t>(x) % 16 != 0 || reinterpret_cast<uintptr_t>(out) % 16 != 0) {
        throw std::invalid_argument("to_scaled_half: rows of " + std::to_string(cols) + " (ldx " +
                                    std::to_string(ldx) + ") not in whole aligned vectors");
    }
    launch_kernel(row_max_kernel, static_cast<unsigned>(n), kThreads, 0, stream, x, cols, ldx,
                  row_max);
    check_launch("row_max_kernel");
    const auto pieces =
        static_cast<unsigned>((cols + kThreads * kPerThread - 1) / (kThreads * kPerThread));
    launch_kernel(scale_rows_kernel, dim3(static_cast<unsigned>(n), pieces), kThreads, 0, stream, x,
                  n, cols, ldx, row_max, out, unscale);
    check_launch("scale_rows_kernel");
}

}  // namespace ember::cuda
