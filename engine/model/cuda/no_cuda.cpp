// Built without the CUDA backend (EMBER_CUDA off): every model runs on the CPU.
#include <stdexcept>

#include "engine/model/gpu.h"

namespace ember {

int gpu_count() {
    return 0;
}

bool gpu_may_run(const GpuRequest&) {
    return false;
}

bool pin_host_memory(void*, size_t) {
    return false;
}

void unpin_host_memory(void*) {}

GpuPlacement place_model(Model&, const GpuRequest& request, uint64_t) {
    if (request.mode == GpuRequest::Mode::Index) {
        throw std::runtime_error("--gpu " + std::to_string(request.index) +
                                 ": this ember was built without CUDA (rebuild with nvcc "
                                 "installed, or use --gpu off)");
    }
    return {false, "CPU", ""};
}

}  // namespace ember
