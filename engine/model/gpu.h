// Where a model runs: `--gpu auto|off|N`. With the CUDA backend built (EMBER_CUDA) and a GPU
// present, every family runs there; builds or machines without CUDA run on the CPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ember {

class Model;

struct GpuRequest {
    enum class Mode : uint8_t { Auto, Off, Index };
    Mode mode = Mode::Auto;
    int index = 0;  // Mode::Index
    // --gpu-layers N: the first N layers on the GPU, the rest on the CPU (0: the CPU; n_layer or
    // more: every layer); unset: as many as fit (gpu_plan.h).
    std::optional<int64_t> layers;
    // --gpu-memory: the most device memory the model's weights, KV rows and scratch may take
    // (besides the CUDA context the driver keeps); 0: the card's free memory.
    uint64_t memory_limit = 0;
    // --tensor-decode: the Q4_K/Q6_K products of decode steps and short batches on the tensor
    // cores, for every token count (exact and batch-invariant as the CUDA-core ones): several
    // conversations' steps together run up to ~1.8x faster, one alone ~20% slower. Also set by
    // EMBER_CUDA_TENSOR_DECODE=1 in the environment.
    bool tensor_decode = false;
};

// "auto", "off" (also "cpu", "none"), or a GPU number; nullopt for anything else.
std::optional<GpuRequest> parse_gpu_request(std::string_view text);

// GPUs this build can use on this machine (0 without CUDA, a driver or a card).
int gpu_count();

// --gpu-layers: a count of layers ("all" for every one); nullopt for anything else.
std::optional<int64_t> parse_gpu_layers(std::string_view text);

// Whether the request may put a model on a GPU here; the model is then loaded without the
// CPU-only weight layouts (LoadOptions::weight_panels).
bool gpu_may_run(const GpuRequest& request);

// Page-locks [data, data + bytes) of host memory for the GPUs' copy engines (a copy from it
// runs at ~55 GB/s on the H200's host, from pageable memory at ~8): for state kept in memory
// to restore onto a GPU (the host tier). False where it cannot (no CUDA, no GPU, a failure);
// the memory then stays as it was and copies from it work, slower.
bool pin_host_memory(void* data, size_t bytes);
// Undoes pin_host_memory before the memory is freed.
void unpin_host_memory(void* data);

struct GpuPlacement {
    bool on_gpu = false;
    std::string where;  // "GPU 0: NVIDIA H100 80GB HBM3", or "CPU"
    // Why a model `auto` could have put on a GPU runs on the CPU; a split's one-line account
    // ("GPU 0: 20 of 36 layers (5.1 GiB weights + 1.2 GiB KV), 16 on the CPU"); or empty.
    std::string note;
    int64_t gpu_layers = 0;  // layers on the GPU (n_layer when whole, 0 on the CPU)
    int64_t n_layer = 0;
    uint64_t weight_bytes = 0;  // planned device bytes of the weights and the KV rows
    uint64_t kv_bytes = 0;
};

// Puts `model` where the request says, its weights uploaded (Model::attach_device). `kv_bytes`:
// the KV cache the caller will allocate (all layers), counted against the card's free memory
// (or request.memory_limit, the smaller). Auto and Index: the GPU when one is present and the
// whole model fits; a model that does not fit runs its first layers there, as many as fit
// (request.layers forces the count), and the rest on the CPU (gpu_plan.h); the hybrids run
// whole or not at all (their recurrent state lives in one place). Auto: the CPU with a one-line
// note when no layer fits; Index: std::runtime_error saying why not. Off: the CPU.
GpuPlacement place_model(Model& model, const GpuRequest& request, uint64_t kv_bytes);

}  // namespace ember
