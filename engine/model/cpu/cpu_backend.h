// The CPU backend: the engine's own kernels behind the seam (backend.h). The buffers are the
// state's ForwardScratch; matmuls are engine/tensor's, the vector operations ops.h's (both
// dispatched at run time from what the CPU allows), attention is attention.h's scheduler.
#pragma once

#include "engine/model/backend.h"

namespace ember {

class Model;
class ThreadPool;
struct InferenceState;
struct ModelConfig;

class CpuBackend final : public Backend {
public:
    CpuBackend(const Model& model, InferenceState& state, ThreadPool& pool);

    BatchBuffers& begin_batch(int64_t pos0, int64_t n, int64_t logit_rows) override;
    void embed(std::span<const int32_t> tokens, float* x) override;
    void rms_norm_rows(const float* x, const std::vector<float>& weight, float* out,
                       int64_t rows) override;
    void add(float* y, const float* x, int64_t n) override;
    void add_bias_rows(float* y, const std::vector<float>& bias, int64_t rows) override;
    void matmul(const MatrixView& w, const float* x, int64_t n, float* out) override;
    void matmul_many(std::span<const MatmulOut> outs, const float* x, int64_t n) override;
    void gated_activation(GatedActivation act, float* gate, const float* up, int64_t n) override;
    void sigmoid_gate(float* x, const float* gate, int64_t n) override;
    void split_query_gate(const float* q_proj, float* q, float* gate, int64_t n) override;
    void prepare_and_store_heads(const HeadPrep& prep, float* q, float* k, float* v,
                                 int64_t n) override;
    void attend(const AttentionSettings& settings, const float* q, int64_t n, float* out) override;
    void moe_ffn(const LayerWeights& layer, float* x, float* xn, int64_t n) override;
    void short_conv_mixer(const LayerWeights& layer, int64_t index, int64_t n) override;
    void delta_net_mixer(const LayerWeights& layer, int64_t index, int64_t n) override;
    void soft_cap(float* x, int64_t n, float cap) override;

private:
    const Model& model_;
    const ModelConfig& c_;
    InferenceState& st_;
    ThreadPool& pool_;
    BatchBuffers buffers_;
    int64_t pos0_ = 0;  // of the current batch
};

}  // namespace ember
