// Placing a model on a GPU (gpu.h) with the CUDA backend built.
#include <algorithm>
#include <unordered_set>

#include "engine/model/cuda/cuda_backend.cuh"
#include "engine/model/cuda/cuda_check.cuh"
#include "engine/model/forward.h"
#include "engine/model/gpu.h"
#include "engine/model/gpu_plan.h"
#include "engine/model/model.h"
#include "engine/model/state.h"
#include "engine/util/thread_pool.h"

namespace ember {

namespace {

// Headroom for a whole model's batch buffers, logits, attention records and cuBLAS's workspace.
constexpr uint64_t kScratchBytes = uint64_t{384} << 20;
// What a split takes besides its weights, KV rows and state scratch (StateScratch; no cuBLAS
// handle): the kernels loaded as first launched, the captured decode step and allocation
// rounding. With the cuBLAS handle they measured 71-74 MiB for 1, 2, 7 and 12 layers of a
// Llama-3.1-8B shape (EMBER_CUDA_MEMORY_TRACE=1), of which the handle took 64-68.
constexpr uint64_t kSplitLibraryBytes = uint64_t{16} << 20;

// The scratch of a split of `layers` GPU layers (GpuSizes::split_scratch): its state's block
// (StateScratch), the attention records of a full batch at the end of the default context
// (`context`) that do not fit its FFN buffer, a decode step's records, and the libraries.
uint64_t split_scratch(const ModelConfig& c, int64_t layers, int64_t context) {
    const cuda::StateScratch s = cuda::state_scratch(c, layers);
    cuda::AttendShape shape;
    shape.n_head = c.n_head;
    shape.value_dim = c.value_dim;
    const int64_t last = std::max<int64_t>(context, 1) - 1;
    const auto records = [&](int64_t tokens) {
        const int64_t chunks = cuda::chunks_through(last, cuda::attention_chunk(tokens));
        return static_cast<uint64_t>(cuda::attention_partials_floats(shape, tokens, chunks)) *
               sizeof(float);
    };
    const uint64_t batch_records = records(s.tokens);
    return s.block_bytes + (batch_records > s.records_in_block ? batch_records : 0) + records(1) +
           kSplitLibraryBytes;
}

// Device bytes of the model's parts (gpu_plan.h): every matrix once (tied ones once, with the
// first part that uploads them), f32 where the kernels do not read the type, and the vectors.
// `kv_bytes` (all layers) is shared evenly among the layers.
GpuSizes gpu_sizes(const Model& model, uint64_t kv_bytes) {
    std::unordered_set<const void*> seen;
    const auto matrix = [&](const MatrixView& m) -> uint64_t {
        if (m.rows == 0 || !seen.insert(m.data).second) return 0;
        return cuda::gemv_supports(m.type) ? static_cast<uint64_t>(m.rows) * m.row_stride
                                           : static_cast<uint64_t>(m.rows * m.cols) * sizeof(float);
    };
    GpuSizes sizes;
    sizes.scratch = kScratchBytes;
    sizes.always =
        matrix(model.token_embd()) +
        (model.rope_inv_freq().size() + model.rope_inv_freq_local().size()) * sizeof(double);
    const auto n_layer = static_cast<uint64_t>(std::max<size_t>(1, model.layers().size()));
    for (const LayerWeights& L : model.layers()) {
        uint64_t bytes = 0;
        for (const MatrixView* m :
             {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down, &L.conv_in, &L.conv_out,
              &L.ssm_qkv, &L.ssm_z, &L.ssm_alpha, &L.ssm_beta, &L.ssm_out, &L.ffn_gate_inp,
              &L.gate_exps, &L.up_exps, &L.down_exps}) {
            bytes += matrix(*m);
        }
        bytes += (L.ffn_gate_inp_b.size() + L.gate_exps_b.size() + L.up_exps_b.size() +
                  L.down_exps_b.size()) *
                 sizeof(float);
        bytes += (L.attn_norm.size() + L.ffn_norm.size() + L.q_norm.size() + L.k_norm.size() +
                  L.bq.size() + L.bk.size() + L.bv.size() + L.bo.size() + L.attn_sinks.size() +
                  L.post_attn_norm.size() + L.post_ffn_norm.size() + L.conv_taps.size() +
                  L.ssm_a.size() + L.ssm_dt_bias.size() + L.ssm_norm.size()) *
                 sizeof(float);
        sizes.layer_bytes.push_back(bytes);
        sizes.layer_kv.push_back(kv_bytes / n_layer);
    }
    // Tied to the embedding: already counted with it.
    sizes.output = matrix(model.output()) + model.output_norm().size() * sizeof(float);
    // The context `kv_bytes` holds (f16 rows: load_model.cpp), for the attention records.
    const ModelConfig& c = model.config();
    const auto per_token = static_cast<uint64_t>(
        std::max<int64_t>(1, c.n_layer * c.n_head_kv * (c.head_dim + c.value_dim) * 2));
    const auto context = static_cast<int64_t>(kv_bytes / per_token);
    sizes.split_scratch.assign(sizes.layer_bytes.size(), 0);
    for (size_t l = 1; l < sizes.layer_bytes.size(); ++l) {
        sizes.split_scratch[l] = split_scratch(c, static_cast<int64_t>(l), context);
    }
    return sizes;
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
    warm_up(model, *state, pool, kPromptTokens);
}

std::string mib(uint64_t bytes) {
    return std::to_string((bytes + (1 << 20) - 1) >> 20) + " MiB";
}

// "GPU 0: 20 of 36 layers (5.1 GiB weights + 1.2 GiB KV), 16 on the CPU"
std::string split_account(int index, const GpuSplit& split) {
    return "GPU " + std::to_string(index) + ": " + std::to_string(split.layers) + " of " +
           std::to_string(split.n_layer) + " layers (" + format_memory_size(split.weight_bytes) +
           " weights + " + format_memory_size(split.kv_bytes) + " KV), " +
           std::to_string(split.n_layer - split.layers) + " on the CPU";
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
    if (request.layers == int64_t{0}) return false;  // --gpu-layers 0: the CPU
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
    // --gpu off, or --gpu-layers 0
    if (request.mode == GpuRequest::Mode::Off || request.layers == int64_t{0}) {
        return {false, "CPU", ""};
    }
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
    const bool capped = request.memory_limit > 0 && request.memory_limit < free_bytes;
    const uint64_t limit = capped ? request.memory_limit : free_bytes;
    const std::string available =
        capped ? mib(limit) + " are allowed by --gpu-memory"
               : mib(free_bytes) + " are free on GPU " + std::to_string(index);
    const GpuSizes sizes = gpu_sizes(model, kv_bytes);
    const GpuSplit whole = gpu_split_of(sizes, INT64_MAX);
    GpuSplit split =
        request.layers ? gpu_split_of(sizes, *request.layers) : plan_gpu_split(sizes, limit);
    if (is_hybrid(model.config().family) && !split.whole() && split.layers > 0) {
        // Their recurrent state is mirrored as one block: the whole model or none of it.
        if (request.layers) {
            throw std::runtime_error("--gpu-layers " + std::to_string(*request.layers) + ": " +
                                     std::string(family_name(model.config().family)) +
                                     " models run all their layers on the GPU or none");
        }
        split = gpu_split_of(sizes, 0);
    }
    if (request.layers && split.need_bytes > limit) {
        throw std::runtime_error("--gpu-layers " + std::to_string(*request.layers) + ": " +
                                 std::to_string(split.layers) + " layers need " +
                                 mib(split.need_bytes) + " of GPU memory, " + available);
    }
    if (split.layers == 0) {
        return refuse("the model needs " + mib(whole.need_bytes) + " of GPU memory, " + available +
                      (is_hybrid(model.config().family) ? "" : " (not even one layer fits)"));
    }
    std::shared_ptr<cuda::CudaDevice> device;
    try {
        device =
            std::make_shared<cuda::CudaDevice>(model, index, split.layers, request.tensor_decode);
    } catch (const std::exception& e) {  // cuBLAS missing, memory taken meanwhile
        return refuse(e.what());
    }
    GpuPlacement placement{true, device->description(), ""};
    placement.gpu_layers = split.layers;
    placement.n_layer = split.n_layer;
    placement.weight_bytes = split.weight_bytes;
    placement.kv_bytes = split.kv_bytes;
    if (!split.whole()) placement.note = split_account(index, split);
    for (const std::string& note : device->notes()) {
        placement.note += (placement.note.empty() ? "" : "; ") + note;
    }
    model.attach_device(std::move(device));
    // A split's warm-up would run its CPU layers on one thread (seconds for an 8B model); its
    // first prompt's CPU layers dwarf the GPU's first-use costs anyway.
    if (split.whole()) warm_up(model);
    return placement;
}

}  // namespace ember
