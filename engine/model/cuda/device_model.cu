// The model's weights on the GPU (cuda_backend.cuh: CudaDevice) and the device buffer type.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string_view>
#include <utility>

#include "engine/model/cuda/cuda_backend.cuh"
#include "engine/model/cuda/cuda_check.cuh"
#include "engine/model/cuda/qmma_gemm.cuh"
#include "engine/model/model.h"

namespace ember::cuda {

DeviceBuffer::DeviceBuffer(size_t bytes) {
    grow(bytes);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : ptr_(std::exchange(other.ptr_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      owned_(std::exchange(other.owned_, true)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
        if (ptr_ && owned_) cudaFree(ptr_);
        ptr_ = std::exchange(other.ptr_, nullptr);
        bytes_ = std::exchange(other.bytes_, 0);
        owned_ = std::exchange(other.owned_, true);
    }
    return *this;
}

DeviceBuffer::~DeviceBuffer() {
    if (ptr_ && owned_) cudaFree(ptr_);
}

DeviceBuffer DeviceBuffer::view(void* ptr, size_t bytes) {
    DeviceBuffer buffer;
    buffer.ptr_ = ptr;
    buffer.bytes_ = bytes;
    buffer.owned_ = false;
    return buffer;
}

void DeviceBuffer::grow(size_t bytes) {
    if (bytes <= bytes_) return;
    if (ptr_ && owned_) {
        // Work queued on the buffer may still read it: wait before freeing.
        EMBER_CUDA_CHECK(cudaDeviceSynchronize());
        cudaFree(ptr_);
    }
    ptr_ = nullptr;  // a view's block stays with its owner
    bytes_ = 0;
    owned_ = true;
    const cudaError_t err = cudaMalloc(&ptr_, bytes);
    if (err != cudaSuccess) {
        ptr_ = nullptr;
        throw std::runtime_error("CUDA: out of GPU memory allocating " +
                                 std::to_string(bytes >> 20) + " MiB (" + cudaGetErrorString(err) +
                                 ")");
    }
    bytes_ = bytes;
}

namespace {

// EMBER_CUDA_TENSOR_DECODE=1: GpuRequest::tensor_decode for every device of the process (the
// GPU tests' second pass, benches of commands without the flag).
bool tensor_decode_requested() {
    const char* env = std::getenv("EMBER_CUDA_TENSOR_DECODE");
    return env != nullptr && std::string(env) == "1";
}

template <class T>
DeviceBuffer upload(const T* data, size_t count) {
    DeviceBuffer buffer(std::max<size_t>(count * sizeof(T), 1));
    if (count > 0) {
        EMBER_CUDA_CHECK(cudaMemcpy(buffer.get(), data, count * sizeof(T), cudaMemcpyHostToDevice));
    }
    return buffer;
}

// f16 tensor-core FLOPs (two per multiply-add, f32 accumulation) per SM and clock by compute
// capability: what a prefill's matrix products run on. GeForce Ampere and Ada chips run at half
// their data-center siblings' rate; the lower figure is taken.
double f16_flops_per_sm_clock(int major, int minor) {
    if (major >= 9) return 4096;                     // Hopper and later
    if (major == 8) return minor == 0 ? 2048 : 512;  // A100; consumer Ampere, Ada
    if (major == 7) return 1024;                     // Volta, Turing
    return 256;                                      // no tensor cores
}

// Most tokens whose Q4_K/Q6_K products read the weights in place (qmma_gemm.cuh) rather than
// dequantizing them for cuBLAS. Measured on an H200, Llama-3.1-8B shape Q4_K_M, `ember bench -p
// N -n 1 --tensor-decode` time to first token in place / through cuBLAS (EMBER_CUDA_QMMA_TOKENS=0),
// medians of three, one call: 64 tokens 12.0 / 16.9 ms, 96 15.9 / 18.3, 97 18.8 / 18.2, 128
// 17.8 / 19.0, 129 27.6 / 18.5, 160 24.2 / 20.7, 192 22.4 / 20.1. Past 128 tokens the batch
// takes three tiles of 64, each reading and dequantizing the weights again, and cuBLAS wins.
// EMBER_CUDA_QMMA_TOKENS sets another bound (0: never, MoE experts included), to measure the
// trade.
int64_t qmma_tokens_from_env() {
    const char* env = std::getenv("EMBER_CUDA_QMMA_TOKENS");
    return env ? std::max<int64_t>(0, std::atoll(env)) : 128;
}

// Prompt evaluation speed before any is timed: a tenth of the chip's f16 peak (Ember's
// prefill reached 11-13% of the H200's on 1.7B-8B files, quantized weights dequantized for
// cuBLAS), low rather than high so that a restore is not declined on a guess.
double assumed_prefill(const Model& model, int device, const cudaDeviceProp& prop) {
    int clock_khz = 0;
    if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, device) != cudaSuccess) {
        cudaGetLastError();
        clock_khz = 1'000'000;
    }
    const double peak = f16_flops_per_sm_clock(prop.major, prop.minor) *
                        static_cast<double>(prop.multiProcessorCount) * clock_khz * 1e3;
    // A multiply-add per weight a token reads (Model::weight_elements_per_token: every
    // matrix, a MoE layer's routed experts' share).
    const double per_token =
        2 * std::max(1.0, static_cast<double>(model.weight_elements_per_token()));
    return 0.10 * peak / per_token;
}

}  // namespace

CudaDevice::CudaDevice(const Model& model, int device, int64_t layers, bool tensor_decode)
    : model_(model), device_(device), tensor_decode_(tensor_decode || tensor_decode_requested()) {
    EMBER_CUDA_CHECK(cudaSetDevice(device));
    size_t total = 0;
    EMBER_CUDA_CHECK(cudaMemGetInfo(&free_at_start_, &total));
    cudaDeviceProp prop{};
    EMBER_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    sm_count_ = prop.multiProcessorCount;
    // Not qmma_max_tokens(): inside a member that name is the accessor, which read the
    // still-zero field and turned the in-place products off.
    qmma_max_tokens_ = qmma_tokens_from_env();
    const auto n_layer = static_cast<int64_t>(model.layers().size());
    layers_ = std::clamp<int64_t>(layers, 1, n_layer);
    description_ = "GPU " + std::to_string(device) + ": " + prop.name;
    if (tensor_decode_) notes_.push_back("Q4_K and Q6_K decode products on the tensor cores");
    assumed_prefill_ = assumed_prefill(model, device, prop);
    if (layers_ < n_layer) {
        description_ += ", " + std::to_string(layers_) + " of " + std::to_string(n_layer) +
                        " layers (the rest on the CPU)";
    }
    // The layers this device runs; the CPU's are never uploaded. Every weight in one
    // allocation: cudaMalloc rounds each block up (to 2 MiB pages for large ones), which
    // for a model's hundreds of tensors is hundreds of MiB of the card (measured: 353 MiB above
    // the weights and KV rows of a Llama-3.1-8B shape with a block per tensor).
    const std::span<const LayerWeights> own(model.layers().data(), static_cast<size_t>(layers_));
    sizing_ = true;
    upload_weights(own);
    arena_ = DeviceBuffer(std::max<size_t>(arena_bytes_, 1));
    sizing_ = false;
    upload_weights(own);
    for (const LayerWeights& L : own) {
        if (!L.moe()) continue;
        if (const std::string why = moe_layer_unsupported(moe_layer(*this, L)); !why.empty()) {
            throw std::runtime_error("CUDA backend: " + why);
        }
    }
    inv_freq_ = upload(model.rope_inv_freq().data(), model.rope_inv_freq().size());
    inv_freq_local_ =
        upload(model.rope_inv_freq_local().data(), model.rope_inv_freq_local().size());
    if (const char* trace = std::getenv("EMBER_CUDA_MEMORY_TRACE");
        trace != nullptr && std::string_view(trace) == "1") {  // CudaState's trace, its start
        std::fprintf(stderr, "[gpu-memory] weights: %.1f MiB in use (%.1f MiB of weights)\n",
                     static_cast<double>(memory_in_use()) / (1 << 20),
                     static_cast<double>(weight_bytes_) / (1 << 20));
    }
}

// The weights of `own` layers, the embedding, and the output with every layer: sized first
// (sizing_), then uploaded into the arena.
void CudaDevice::upload_weights(std::span<const LayerWeights> own) {
    upload_matrix(model_.token_embd(), "token_embd");
    if (layers_ == static_cast<int64_t>(model_.layers().size())) {
        upload_matrix(model_.output(), "output");
        upload_vector(model_.output_norm());
    }
    for (const LayerWeights& L : own) {
        for (const MatrixView* m : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) {
            upload_matrix(*m, "layer");
        }
        for (const std::vector<float>* v :
             {&L.attn_norm, &L.bq, &L.bk, &L.bv, &L.bo, &L.attn_sinks, &L.q_norm, &L.k_norm,
              &L.ffn_norm, &L.post_attn_norm, &L.post_ffn_norm}) {
            upload_vector(*v);
        }
        // The hybrids' mixers (absent ones have no rows / no elements).
        for (const MatrixView* m : {&L.conv_in, &L.conv_out, &L.ssm_qkv, &L.ssm_z, &L.ssm_alpha,
                                    &L.ssm_beta, &L.ssm_out}) {
            upload_matrix(*m, "mixer");
        }
        for (const std::vector<float>* v : {&L.conv_taps, &L.ssm_a, &L.ssm_dt_bias, &L.ssm_norm}) {
            upload_vector(*v);
        }
        // Mixture of experts: the router and the stacked experts, with gpt-oss's biases.
        for (const MatrixView* m : {&L.ffn_gate_inp, &L.gate_exps, &L.up_exps, &L.down_exps}) {
            upload_matrix(*m, "expert");
        }
        for (const std::vector<float>* v :
             {&L.ffn_gate_inp_b, &L.gate_exps_b, &L.up_exps_b, &L.down_exps_b}) {
            upload_vector(*v);
        }
    }
}

// Arena bytes of a block: 256-byte aligned, as cudaMalloc aligns (the kernels' 16-byte loads).
size_t CudaDevice::take_arena(size_t bytes) {
    const size_t aligned = (bytes + 255) / 256 * 256;
    if (sizing_) {
        arena_bytes_ += aligned;
        return 0;
    }
    if (arena_used_ + aligned > arena_.bytes()) {
        throw std::logic_error("CUDA backend: the weights outgrew the arena sized for them");
    }
    const size_t at = arena_used_;
    arena_used_ += aligned;
    weight_bytes_ += aligned;
    return at;
}

void CudaDevice::upload_matrix(const MatrixView& view, const char* name) {
    if (view.rows == 0) return;                  // absent
    const bool f32 = !gemv_supports(view.type);  // read by no kernel here: exact f32
    const size_t bytes = f32 ? static_cast<size_t>(view.rows * view.cols) * sizeof(float)
                             : static_cast<size_t>(view.rows) * view.row_stride;
    if (sizing_) {
        if (sized_.insert(view.data).second) take_arena(bytes);  // tied ones once
        return;
    }
    if (matrices_.count(view.data)) return;  // tied and uploaded
    if (view.layout != WeightLayout::Rows) {
        throw std::logic_error(std::string("CUDA backend: matrix ") + name +
                               " is in the CPU's panel layout; load the model for the GPU");
    }
    DeviceMatrix m{view.type, nullptr, view.rows, view.cols, view.row_stride};
    uint8_t* block = arena_.as<uint8_t>() + take_arena(bytes);
    if (!f32) {
        EMBER_CUDA_CHECK(cudaMemcpy(block, view.data, bytes, cudaMemcpyHostToDevice));
    } else {
        // A note says so.
        std::vector<float> rows(static_cast<size_t>(view.rows * view.cols));  // [rows x cols]
        for (int64_t r = 0; r < view.rows; ++r)
            dequantize_row(view, r, rows.data() + r * view.cols);
        EMBER_CUDA_CHECK(cudaMemcpy(block, rows.data(), bytes, cudaMemcpyHostToDevice));
        m.type = TensorType::F32;
        m.row_stride = static_cast<size_t>(view.cols) * sizeof(float);
        const std::string note = std::string(type_info(view.type).name) +
                                 " matrices converted to f32 on the GPU (no kernel reads " +
                                 std::string(type_info(view.type).name) + " there)";
        if (std::find(notes_.begin(), notes_.end(), note) == notes_.end()) notes_.push_back(note);
    }
    m.data = block;
    // f16 holds up to 65504; the margin covers the rounding of the largest weights.
    constexpr float kHalfSafe = 60000.0f;
    m.half_products = !is_float_type(m.type) && max_abs_weight(m, nullptr) < kHalfSafe;
    m.tensor_products = tensor_decode_;
    if (m.half_products && qmma_supports(m)) {
        // Reserved once here, not worked out again for every product of every prefill.
        qmma_scratch_floats_ =
            std::max(qmma_scratch_floats_,
                     qmma_scratch_floats_upto(m, std::min(qmma_max_tokens_, kMaxBatch), sm_count_));
    }
    matrices_.emplace(view.data, m);
}

void CudaDevice::upload_vector(const std::vector<float>& host) {
    if (host.empty()) return;
    const size_t bytes = host.size() * sizeof(float);
    if (sizing_) {
        if (sized_.insert(host.data()).second) take_arena(bytes);
        return;
    }
    if (vectors_.count(host.data())) return;
    auto* block = reinterpret_cast<float*>(arena_.as<uint8_t>() + take_arena(bytes));
    EMBER_CUDA_CHECK(cudaMemcpy(block, host.data(), bytes, cudaMemcpyHostToDevice));
    vectors_.emplace(host.data(), block);
}

uint64_t CudaDevice::memory_in_use() const {
    EMBER_CUDA_CHECK(cudaSetDevice(device_));
    size_t free_now = 0, total = 0;
    EMBER_CUDA_CHECK(cudaMemGetInfo(&free_now, &total));
    return free_at_start_ > free_now ? free_at_start_ - free_now : 0;
}

std::vector<double> CudaDevice::measure_bandwidth_gbs(uint64_t bytes, int passes) {
    EMBER_CUDA_CHECK(cudaSetDevice(device_));
    DeviceBuffer from(bytes), to(bytes);
    EMBER_CUDA_CHECK(cudaMemset(from.get(), 0x5a, bytes));  // never time zeros
    cudaEvent_t start = nullptr, stop = nullptr;
    EMBER_CUDA_CHECK(cudaEventCreate(&start));
    EMBER_CUDA_CHECK(cudaEventCreate(&stop));
    std::vector<double> gbs;
    for (int pass = -1; pass < passes; ++pass) {  // pass -1: untimed warm-up
        EMBER_CUDA_CHECK(cudaEventRecord(start));
        EMBER_CUDA_CHECK(cudaMemcpyAsync(to.get(), from.get(), bytes, cudaMemcpyDeviceToDevice));
        EMBER_CUDA_CHECK(cudaEventRecord(stop));
        EMBER_CUDA_CHECK(cudaEventSynchronize(stop));
        float ms = 0;
        EMBER_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
        if (pass >= 0) gbs.push_back(2.0 * static_cast<double>(bytes) / (ms * 1e6));
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    return gbs;
}

MoeLayer moe_layer(const CudaDevice& device, const LayerWeights& L) {
    const ModelConfig& c = device.model().config();
    MoeLayer l;
    l.router = device.matrix(L.ffn_gate_inp);
    l.gate = device.matrix(L.gate_exps);
    l.up = device.matrix(L.up_exps);
    l.down = device.matrix(L.down_exps);
    l.router_bias = device.vector(L.ffn_gate_inp_b);
    l.gate_bias = device.vector(L.gate_exps_b);
    l.up_bias = device.vector(L.up_exps_b);
    l.down_bias = device.vector(L.down_exps_b);
    l.n_expert = c.n_expert;
    l.n_used = c.n_expert_used;
    l.n_embd = c.n_embd;
    l.n_ff = c.n_ff_exp;
    l.renormalize = c.expert_weights_norm;
    l.clamped_swiglu = c.clamped_swiglu;
    l.swiglu_limit = c.swiglu_limit;
    l.swiglu_alpha = c.swiglu_alpha;
    return l;
}

const DeviceMatrix& CudaDevice::matrix(const MatrixView& view) const {
    const auto it = matrices_.find(view.data);
    if (it == matrices_.end()) {
        throw std::logic_error("CUDA backend: a matrix the layers read was not uploaded");
    }
    return it->second;
}

const float* CudaDevice::vector(const std::vector<float>& host) const {
    return host.empty() ? nullptr : vector_at(host.data());
}

const float* CudaDevice::vector_at(const float* host_data) const {
    const auto it = vectors_.find(host_data);
    if (it == vectors_.end()) {
        throw std::logic_error("CUDA backend: a weight vector the layers read was not uploaded");
    }
    return it->second;
}

}  // namespace ember::cuda
