// Placing a model on a GPU (gpu.h) with the CUDA backend built.
#include <algorithm>
#include <unordered_set>

#include "engine/model/cuda/cuda_backend.cuh"
#include "engine/model/cuda/cuda_check.cuh"
#include "engine/model/forward.h"
#include "engine/model/gpu.h"
#include "engine/model/model.h"
#include "engine/model/state.h"
#include "engine/util/thread_pool.h"

namespace ember {

namespace {

// Headroom for the batch buffers, attention records and cuBLAS's workspace.
constexpr uint64_t kScratchBytes = uint64_t{384} << 20;

// Device bytes of the weights: every matrix once (tied ones once), f32 where the kernels do
// not read the type, and the vectors.
uint64_t planned_weight_bytes(const Model& model) {
    std::unordered_set<const void*> seen;
    uint64_t bytes = 0;
    const auto matrix = [&](const MatrixView& m) {
        if (m.rows == 0 || !seen.insert(m.data).second) return;
        bytes += cuda::gemv_supports(m.type)
                     ? static_cast<uint64_t>(m.rows) * m.row_stride
                     : static_cast<uint64_t>(m.rows * m.cols) * sizeof(float);
    };
    matrix(model.token_embd());
    matrix(model.output());
    for (const LayerWeights& L : model.layers()) {
        for (const MatrixView* m :
             {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down, &L.conv_in, &L.conv_out,
              &L.ssm_qkv, &L.ssm_z, &L.ssm_alpha, &L.ssm_beta, &L.ssm_out, &L.ffn_gate_inp,
              &L.gate_exps, &L.up_exps, &L.down_exps}) {
            matrix(*m);
        }
        bytes += (L.ffn_gate_inp_b.size() + L.gate_exps_b.size() + L.up_exps_b.size() +
                  L.down_exps_b.size()) *
                 sizeof(float);
        bytes += (L.attn_norm.size() + L.ffn_norm.size() + L.q_norm.size() + L.k_norm.size() +
                  L.bq.size() + L.bk.size() + L.bv.size() + L.post_attn_norm.size() +
                  L.post_ffn_norm.size() + L.conv_taps.size() + L.ssm_a.size() +
                  L.ssm_dt_bias.size() + L.ssm_norm.size()) *
                 sizeof(float);
    }
    return bytes;
}

// Runs the model once on a scratch state, a prompt and a decode step, so that what CUDA and
// cuBLAS do on first use (loading each kernel's module at its first launch, cuBLAS choosing and
// loading its kernels) happens at load rather than on the way to the first reply, where it
// took ~100 ms with Llama-3.1-8B on the H200.
void warm_up(const Model& model) {
    constexpr int64_t kPromptTokens = 64;  // a batch for the prefill's products
    const std::unique_ptr<InferenceState> state =
        make_state(model.config(), kPromptTokens + 1, KvType::F16);
    ThreadPool pool(1);
    const std::vector<int32_t> prompt(kPromptTokens, 0);
    forward(model, *state, pool, prompt, LogitsWanted::Last);
    forward(model, *state, pool, std::span(prompt).first(1), LogitsWanted::Last);
}

std::string mib(uint64_t bytes) {
    return std::to_string((bytes + (1 << 20) - 1) >> 20) + " MiB";
}

}  // namespace

int gpu_count() {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        cudaGetLastError();  // no driver or no card: not an error to carry on with
        return 0;
    }
    return count;
}

bool gpu_may_run(const GpuRequest& request) {
    return request.mode == GpuRequest::Mode::Index ||
           (request.mode == GpuRequest::Mode::Auto && gpu_count() > 0);
}

bool pin_host_memory(void* data, size_t bytes) {
    if (data == nullptr || bytes == 0 || gpu_count() == 0) return false;
    if (cudaHostRegister(data, bytes, cudaHostRegisterDefault) != cudaSuccess) {
        cudaGetLastError();  // too much locked memory, say: the copy reads pageable memory
        return false;
    }
    return true;
}

void unpin_host_memory(void* data) {
    if (data != nullptr && cudaHostUnregister(data) != cudaSuccess) cudaGetLastError();
}

GpuPlacement place_model(Model& model, const GpuRequest& request, uint64_t kv_bytes) {
    if (request.mode == GpuRequest::Mode::Off) return {false, "CPU", ""};
    const bool strict = request.mode == GpuRequest::Mode::Index;
    const int count = gpu_count();
    const int index = strict ? request.index : 0;
    const auto refuse = [&](const std::string& why) -> GpuPlacement {
        if (strict) throw std::runtime_error("--gpu " + std::to_string(index) + ": " + why);
        return {false, "CPU", "running on the CPU: " + why};
    };
    if (count == 0) {
        if (strict) return refuse("no CUDA GPU found");
        return {false, "CPU", ""};  // nothing to explain on a machine without a GPU
    }
    if (index >= count) {
        return refuse(
            "there " +
            std::string(count == 1 ? "is 1 GPU" : "are " + std::to_string(count) + " GPUs") +
            " (numbered from 0)");
    }
    EMBER_CUDA_CHECK(cudaSetDevice(index));
    size_t free_bytes = 0, total_bytes = 0;
    EMBER_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    const uint64_t need = planned_weight_bytes(model) + kv_bytes + kScratchBytes;
    if (need > free_bytes) {
        return refuse("the model needs " + mib(need) + " of GPU memory, " + mib(free_bytes) +
                      " are free on GPU " + std::to_string(index));
    }
    std::shared_ptr<cuda::CudaDevice> device;
    try {
        device = std::make_shared<cuda::CudaDevice>(model, index);
    } catch (const std::exception& e) {  // cuBLAS missing, memory taken meanwhile
        return refuse(e.what());
    }
    GpuPlacement placement{true, device->description(), ""};
    for (const std::string& note : device->notes()) {
        placement.note += (placement.note.empty() ? "" : "; ") + note;
    }
    model.attach_device(std::move(device));
    warm_up(model);
    return placement;
}

}  // namespace ember
