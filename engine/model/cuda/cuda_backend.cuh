// The CUDA backend: the model's weights in GPU memory (CudaDevice), a conversation's KV cache
// and batch buffers there (CudaState), and the layer blocks of backend.h run by this folder's
// kernels and cuBLAS (CudaBackend).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "engine/model/backend.h"
#include "engine/model/compute_device.h"
#include "engine/model/cuda/cublas_library.cuh"
#include "engine/model/cuda/layer_kernels.cuh"
#include "engine/model/cuda/mixer_kernels.cuh"
#include "engine/model/cuda/moe_kernels.cuh"
#include "engine/model/cuda/quant_kernels.cuh"
#include "engine/model/recurrent_state.h"
#include "engine/model/state.h"
#include "engine/util/position_ranges.h"

namespace ember {
class Model;
struct LayerWeights;
struct ModelConfig;
}  // namespace ember

namespace ember::cuda {

// A cudaMalloc'd block, freed with its owner.
class DeviceBuffer {
public:
    DeviceBuffer() = default;
    explicit DeviceBuffer(size_t bytes);
    DeviceBuffer(DeviceBuffer&& other) noexcept;
    DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    ~DeviceBuffer();

    void* get() const { return ptr_; }
    template <class T>
    T* as() const {
        return static_cast<T*>(ptr_);
    }
    size_t bytes() const { return bytes_; }
    // Reallocates (contents lost) when smaller than `bytes`.
    void grow(size_t bytes);
    // `bytes` at `ptr`, a part of another buffer: never freed here; grow() past its size gives
    // it a block of its own.
    static DeviceBuffer view(void* ptr, size_t bytes);

private:
    void* ptr_ = nullptr;
    size_t bytes_ = 0;
    bool owned_ = true;
};

// What one conversation's state (CudaState) takes on the device besides its KV rows, by what
// the device holds. A whole model keeps a buffer per part for kMaxBatch tokens, 16 MiB f16
// slices of a weight for cuBLAS and cuBLAS's own handle. A split (its first `layers`:
// gpu_plan.h) runs its output on the CPU and is there because the card is small, so its scratch
// is as small as it can be: one block holding the batch buffers for kMaxSplitBatch tokens (a
// layer's attention buffers share the FFN's up buffer and its attention records the gate
// buffer: the two never overlap in a layer), and no cuBLAS (its handle alone is 64-68 MiB): its
// longer products go through gemv, kExactBatchTokens tokens at a time.
struct StateScratch {
    bool split = false;
    int64_t tokens = 0;           // batch rows (kMaxBatch; a split's kMaxSplitBatch)
    bool blas = true;             // a cuBLAS handle (a split's products go through gemv)
    int64_t half_width = 0;       // widest f16 input of a product (half_x's row; 0: none)
    int64_t attention_width = 0;  // floats per token of q, k, v, attn, q_proj, q_gate together
    size_t block_bytes = 0;       // a split's one block (0: a buffer per part)
    // Attention records of a batch that fit the split's FFN gate buffer (`partials` starts as a
    // view of it; 0 for a whole model).
    size_t records_in_block = 0;
};
StateScratch state_scratch(const ModelConfig& c, int64_t layers);

class CudaState;

// The model's weights on one GPU, found by the host address the model's views hold.
class CudaDevice final : public ComputeDevice {
public:
    // Uploads every weight the layers [0, layers) read, the embedding table, and the output
    // norm and matrix when `layers` is every layer (a split's output runs on the CPU, after its
    // last layer: gpu_plan.h); throws std::runtime_error naming what failed (out of memory, an
    // unsupported layout).
    // tensor_decode: GpuRequest::tensor_decode (or EMBER_CUDA_TENSOR_DECODE=1).
    CudaDevice(const Model& model, int device, int64_t layers, bool tensor_decode = false);

    std::string description() const override { return description_; }
    std::unique_ptr<Backend> make_backend(InferenceState& state) override;
    std::unique_ptr<Backend> make_batch_backend(std::span<InferenceState* const> states) override;
    void attach(InferenceState& state) override { state_of(state); }
    double assumed_prefill_tokens_per_second() const override { return assumed_prefill_; }
    uint64_t weight_bytes() const override { return weight_bytes_; }
    int64_t layers() const override { return layers_; }
    uint64_t memory_in_use() const override;
    std::vector<double> measure_bandwidth_gbs(uint64_t bytes, int passes) override;

    int device() const { return device_; }
    int sm_count() const { return sm_count_; }
    // Most tokens whose Q4_K/Q6_K products read the weights in place (qmma_gemm.cuh; 0: none,
    // MoE experts included), and the scratch floats those products need at most.
    int64_t qmma_max_tokens() const { return qmma_max_tokens_; }
    int64_t qmma_scratch_floats() const { return qmma_scratch_floats_; }
    const Model& model() const { return model_; }
    const DeviceMatrix& matrix(const MatrixView& view) const;
    const float* vector(const std::vector<float>& host) const;  // null for an empty vector
    const float* vector_at(const float* host_data) const;       // by the vector's data()
    const CublasLibrary& blas() const { return blas_; }
    const double* rope_inv_freq() const { return inv_freq_.as<double>(); }
    const double* rope_inv_freq_local() const { return inv_freq_local_.as<double>(); }
    // Matrices converted to f32 at load because the kernels do not read their type.
    const std::vector<std::string>& notes() const { return notes_; }

private:
    // The state's CudaState, created on first use.
    CudaState& state_of(InferenceState& state);
    void upload_weights(std::span<const LayerWeights> own);
    size_t take_arena(size_t bytes);  // offset of `bytes` in the arena (0 while sizing)
    void upload_matrix(const MatrixView& view, const char* name);
    void upload_vector(const std::vector<float>& host);

    const Model& model_;
    CublasLibrary blas_;
    int device_ = 0;
    int sm_count_ = 1;
    int64_t qmma_max_tokens_ = 0;
    int64_t qmma_scratch_floats_ = 0;
    bool tensor_decode_ = false;  // DeviceMatrix::tensor_products of every upload
    int64_t layers_ = 0;
    size_t free_at_start_ = 0;  // the device's free memory before the first upload
    std::string description_;
    uint64_t weight_bytes_ = 0;
    DeviceBuffer arena_;  // every weight, [arena_bytes_]
    size_t arena_bytes_ = 0;
    size_t arena_used_ = 0;
    bool sizing_ = false;                    // upload_weights' first pass: counting bytes
    std::unordered_set<const void*> sized_;  // what the first pass counted (tied ones once)
    std::unordered_map<const void*, DeviceMatrix> matrices_;
    std::unordered_map<const float*, const float*> vectors_;
    DeviceBuffer inv_freq_, inv_freq_local_;
    std::vector<std::string> notes_;
    double assumed_prefill_ = 0;  // tokens per second (assumed_prefill_tokens_per_second)
};

// The device weights and shape of a MoE layer (LayerWeights::moe()) of the device's model.
MoeLayer moe_layer(const CudaDevice& device, const LayerWeights& layer);

// One conversation's share of the GPU: its KV rows (mirroring the host KvCache: the host rows
// are brought up to date only when read, KvCache::sync_host), a hybrid's recurrent state
// (mirroring RecurrentState the same way), the batch buffers, a stream and a cuBLAS handle of
// its own.
class CudaState final : public DeviceState, public KvMirror, public RecurrentMirror {
public:
    CudaState(const CudaDevice& device, InferenceState& state);
    ~CudaState() override;

    void bring_host_up_to_date(int64_t begin, int64_t end) override;
    bool restores_to_device() const override { return restores_to_device_; }
    bool rows_restored_to_device(int64_t begin, int64_t end, const RestoredRows& source) override;
    void host_rows_restored(int64_t begin, int64_t end, const RestoredRows& source) override;
    void recurrent_to_host() override;
    void recurrent_host_written() override;
    void recurrent_zeroed() override;
    // Before a forward pass: rows the host wrote (a restore) go to the device, and so does a
    // recurrent state the host wrote.
    void prepare_forward();
    // After a batch wrote rows [pos0, end) on the device (and moved its recurrent state).
    void rows_written(int64_t pos0, int64_t end);
    // The device copy of layer `layer`'s conv history / delta-rule state (recurrent_state.h's
    // layout), null where the layer has none.
    float* recurrent_conv(int64_t layer) const;
    float* recurrent_delta(int64_t layer) const;

    // forward()'s logits on the host (Backend::host_logits): page-locked, grown on demand up to
    // 64 MiB; null past that (or where no lock was had), for the state's pageable scratch.
    float* host_logits(int64_t floats);

    cudaStream_t stream() const { return stream_; }
    cublasHandle_t blas() const { return blas_; }  // null for a split (StateScratch)
    const CublasLibrary& blas_library() const { return blas_library_; }
    KvLayerView layer(int64_t cache_layer) const;
    int64_t cache_layers() const { return cache_layers_; }

    // What a batch reads from host memory, pinned so that a captured decode step's copies read
    // the values written for the step it replays.
    static constexpr int kStepTokens = 256;  // kMaxBatch
    struct StepInputs {
        int64_t pos0 = 0;
        int32_t ids[kStepTokens] = {};
    };
    StepInputs* step_host() const { return step_host_; }
    const int64_t* step_pos0() const { return &step_dev_.as<StepInputs>()->pos0; }
    int32_t* step_ids() const { return step_dev_.as<StepInputs>()->ids; }
    int64_t* step_pos0_mut() const { return &step_dev_.as<StepInputs>()->pos0; }

    // The decode step (one token, one row of logits) captured as a CUDA graph on its first run
    // and replayed after: one launch instead of hundreds. Its buffers never move.
    cudaGraphExec_t decode_graph = nullptr;
    DeviceBuffer decode_logits;    // [n_vocab]
    DeviceBuffer decode_partials;  // attention records of one token over the whole context
    int64_t decode_chunks = 0;     // chunks of the context (attention's launch width)
    // [kExactBatchTokens x n_head] uint32, zero between launches: the short batches' attention
    // merges its records in the records' launch (AttendShape::merge_counters).
    DeviceBuffer merge_counters;

    // Batch buffers for up to kMaxBatch tokens, [tokens x width] each (a split's are views of
    // one block: StateScratch).
    DeviceBuffer x, xn, q, k, v, attn, q_proj, q_gate, ffn_gate, ffn_up;
    DeviceBuffer token_ids;    // [kMaxBatch] int32
    DeviceBuffer logits;       // [rows x n_vocab], grown on demand
    DeviceBuffer partials;     // attention records, grown on demand
    DeviceBuffer dequantized;  // f32 or f16 rows of a weight for cuBLAS, grown up to a cap
    DeviceBuffer half_x;       // [kMaxBatch x widest input] f16: a batch's scaled activations
    DeviceBuffer half_scale;   // [2 + kMaxBatch]: 0.0f, the batch's unscale 2^-e, row maxima
    // A batched decode step led by this state: [n] positions, then [cache layers x n] K and V
    // row pointers of the conversations (TokenRows), grown on demand.
    DeviceBuffer together_rows;
    MixerBuffers mixer;  // the hybrids' mixers (pointers into mixer_block_)
    MoeBuffers moe;      // the MoE layers' routing and expert scratch (moe_kernels.cuh)

private:
    enum class Direction { ToHost, ToDevice };
    void reconcile();
    // Rows [begin, end) of every layer between host and device on `stream`; waits for the
    // copies unless `wait` is false (a copy from pageable host memory returns once its source
    // was read, so the host rows may change after the call either way).
    void copy_rows(Direction direction, int64_t begin, int64_t end, cudaStream_t stream,
                   bool wait = true);
    // Host rows of [begin, end) that are not the state's (host_rows_) from the device, waited
    // for.
    void copy_to_host(int64_t begin, int64_t end);
    // Rows [begin, end) of every layer from a restore's page-locked blob to the device, waited
    // for; false when the blob is not page-locked (or not in one range per layer).
    bool copy_from_pinned(int64_t begin, int64_t end, const RestoredRows& source);
    // Extends device_valid_ over the ranges a restore copied as it went (host_rows_restored,
    // rows_restored_to_device) once their copies are done, and takes the latter's rows out of
    // host_rows_.
    void take_restored_rows();

    void upload_recurrent();

    // EMBER_CUDA_MEMORY_TRACE=1: the device memory taken after each step of making the state
    // and before each batch where it grew, on stderr.
    void trace(const char* what);

    KvCache& kv_;
    RecurrentState& recurrent_;
    const CublasLibrary& blas_library_;
    const CudaDevice& device_;
    StateScratch scratch_;
    DeviceBuffer block_;  // a split's batch buffers and cuBLAS workspace (StateScratch)
    bool tracing_ = false;
    uint64_t traced_bytes_ = 0;
    cudaStream_t stream_ = nullptr;
    cublasHandle_t blas_ = nullptr;
    // [slots x row bytes] per cache layer of the device's layers: [0, cache_layers_) (a split
    // model's CPU layers have their rows on the host only), views of k_rows_ / v_rows_, where
    // the layers lie one after another: without rings they are a pitch apart, so a restore's
    // block goes up in one 2-D copy for K and one for V.
    int64_t cache_layers_ = 0;
    DeviceBuffer k_rows_, v_rows_;
    std::vector<DeviceBuffer> k_layers_, v_layers_;
    bool restores_to_device_ = false;  // every layer here, none a ring (KvMirror)
    StepInputs* step_host_ = nullptr;  // cudaMallocHost
    float* host_logits_ = nullptr;     // cudaMallocHost, host_logits_bytes_ of them
    size_t host_logits_bytes_ = 0;
    size_t host_logits_failed_ = 0;  // the size a lock failed at (not tried again every step)
    DeviceBuffer step_dev_;
    // Device rows [0, device_valid_) are the state's, and so are the host rows host_rows_
    // holds; every row below the cache's length is one or the other (a restore onto the device
    // alone leaves stale host rows in the middle, so the host's are ranges).
    int64_t device_valid_ = 0;
    PositionRanges host_rows_;
    DeviceBuffer mixer_block_;
    DeviceBuffer recurrent_device_;        // [recurrent_.floats()]
    bool recurrent_device_stale_ = true;   // the host wrote since the last upload
    bool recurrent_device_newer_ = false;  // the device moved it since the host last read
    // Rows a restore copied to the device already, on their own stream: unordered, guarded by
    // restored_mutex_ (restoring threads add them).
    struct RestoredRange {
        int64_t begin = 0;
        int64_t end = 0;
        bool device_only = false;  // rows_restored_to_device: the host rows are stale
        bool operator<(const RestoredRange& o) const { return begin < o.begin; }
    };
    std::mutex restored_mutex_;
    std::vector<RestoredRange> restored_rows_;
    cudaStream_t restore_stream_ = nullptr;
};

}  // namespace ember::cuda
