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
};

// "auto", "off" (also "cpu", "none"), or a GPU number; nullopt for anything else.
std::optional<GpuRequest> parse_gpu_request(std::string_view text);

// GPUs this build can use on this machine (0 without CUDA, a driver or a card).
int gpu_count();

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
    std::string note;   // why a model `auto` could have put on a GPU runs on the CPU; or empty
};

// Puts `model` where the request says, its weights uploaded (Model::attach_device). `kv_bytes`:
// the KV cache the caller will allocate, counted against the card's free memory. Auto: the GPU
// when one is present, the family runs there and it fits, else the CPU with a one-line note.
// Index: that GPU, or std::runtime_error saying why not. Off: the CPU.
GpuPlacement place_model(Model& model, const GpuRequest& request, uint64_t kv_bytes);

}  // namespace ember
