// What a model's CUDA device takes from its environment at load (device_model.cu): the token
// bound of the in-place quantized prefill products (qmma_gemm.cuh). Skipped without a GPU.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>

#include "engine/model/cuda/cuda_backend.cuh"
#include "tests/gpu/gpu_support.h"
#include "tests/support/fixtures.h"

namespace ember::test {
namespace {

// 128 without EMBER_CUDA_QMMA_TOKENS. A constructor that called its own accessor (still 0)
// rather than the reader of the environment turned the products off everywhere, and the
// kernel's tests (test_cuda_qmma.cpp), which call it directly, still passed.
TEST(GpuDeviceSettings, ALoadedModelTakesTheDefaultQmmaBound) {
    EMBER_REQUIRE_GPU();
    if (std::getenv("EMBER_CUDA_QMMA_TOKENS") != nullptr) {
        GTEST_SKIP() << "EMBER_CUDA_QMMA_TOKENS is set";
    }
    EMBER_REQUIRE_FIXTURE("quant/qfix-Q4_K_M.gguf");
    const auto model = load_fixture_model(fixture_path("quant/qfix-Q4_K_M.gguf"), /*on_gpu=*/true);
    const auto* device = dynamic_cast<const cuda::CudaDevice*>(model->device());
    ASSERT_NE(device, nullptr);
    EXPECT_EQ(device->qmma_max_tokens(), 128);
}

}  // namespace
}  // namespace ember::test
