// A loaded model: hyper-parameters, weight views into the mmap, tokenizer. Immutable after
// load; everything that changes while generating lives in InferenceState (state.h), so one
// Model can serve several conversations.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/gguf/gguf.h"
#include "engine/model/backend.h"
#include "engine/model/compute_device.h"
#include "engine/tensor/matmul.h"
#include "engine/util/page_region.h"

namespace ember {

class Tokenizer;

enum class Family { Llama, Qwen2, Qwen3, Lfm2, Qwen35, Gemma3, Qwen3Moe, GptOss };
std::string_view family_name(Family family);
// Families whose layers are not all attention: part of their state is recurrent (conv and
// delta-rule state), which cannot be rolled back by truncating the KV cache.
bool is_hybrid(Family family);

// What mixes tokens in one layer of a hybrid (every layer of the other families is Attention).
enum class LayerKind {
    Attention,  // softmax attention over the KV cache
    ShortConv,  // lfm2: gated short causal convolution
    DeltaNet,   // qwen35: GatedDeltaNet linear attention
};

// How RoPE pairs the dimensions of a head: adjacent pairs (2i, 2i+1), as GGUF llama files
// store Q/K after the converter's permutation, or the two halves (i, i + d/2), as qwen does.
enum class RopeLayout { Adjacent, Halves };

struct ModelConfig {
    std::string arch;  // general.architecture as written in the file
    Family family = Family::Llama;
    int64_t n_vocab = 0;
    int64_t n_embd = 0;
    int64_t n_layer = 0;
    int64_t n_head = 0;
    int64_t n_head_kv = 0;
    int64_t head_dim = 0;   // key/query length per head
    int64_t value_dim = 0;  // value length per head
    int64_t n_ff = 0;
    int64_t n_ctx_train = 0;
    double rms_eps = 1e-5;
    double rope_base = 10000.0;
    double rope_freq_scale = 1.0;  // positions are multiplied by this (linear scaling)
    int64_t rope_dims = 0;         // rotated dimensions per head (<= head_dim)
    RopeLayout rope_layout = RopeLayout::Adjacent;
    bool tied_output = false;
    bool qkv_bias = false;
    bool qk_norm = false;
    double embedding_scale = 1.0;  // embeddings are multiplied by it (gemma3: sqrt(n_embd))
    GatedActivation ffn_activation = GatedActivation::Silu;  // of the dense FFN layers

    // ---- hybrid families (lfm2, qwen35); empty / zero for the others ----
    std::vector<LayerKind> layer_kinds;  // [n_layer]
    std::vector<int64_t> kv_slot;        // [n_layer] index into the KV cache, -1 if none
    int64_t n_kv_layers = 0;             // layers with a KV cache (attention layers)
    int64_t conv_kernel = 0;             // causal conv taps (lfm2 l_cache, qwen35 conv_kernel)
    bool attn_output_gate = false;       // qwen35: q projection also yields a sigmoid gate
    // qwen35 GatedDeltaNet: q/k heads of ssm_k_dim, v heads of ssm_v_dim; v head h reads
    // q/k head h % ssm_n_k_heads (the converter stores v heads tiled over the k heads).
    int64_t ssm_n_k_heads = 0;
    int64_t ssm_n_v_heads = 0;
    int64_t ssm_k_dim = 0;
    int64_t ssm_v_dim = 0;
    // ---- gemma3: sliding-window attention; zero / empty for the other families ----
    // A sliding layer attends to the last `sliding_window` positions, itself included (HF's
    // sliding_window); the others attend to everything. [n_layer], empty without a window.
    int64_t sliding_window = 0;
    std::vector<bool> sliding;
    bool local_rope = false;           // the sliding layers rotate with rope_base_local
    double rope_base_local = 10000.0;  // RoPE base of the sliding layers (unscaled)
    double attn_scale = 0.0;           // query scale; 0: 1/sqrt(head_dim)
    double final_logit_softcap = 0.0;  // logits = cap * tanh(logits / cap) when > 0
    bool post_norms = false;           // RMS norms on the attention and FFN outputs
    bool is_sliding(int64_t layer) const {
        return !sliding.empty() && sliding[static_cast<size_t>(layer)];
    }
    // ---- mixture of experts (qwen3moe); zero for the others ----
    int64_t n_expert = 0;              // experts of a MoE layer (expert_count)
    int64_t n_expert_used = 0;         // experts each token is routed to (expert_used_count)
    int64_t n_ff_exp = 0;              // hidden size of one expert (expert_feed_forward_length)
    bool expert_weights_norm = false;  // the chosen experts' weights are rescaled to sum to 1
    // gpt-oss experts: biases on the router and on every expert projection, and the clamped
    // SwiGLU (gate clamped above at swiglu_limit, up to [-limit, limit],
    // out = gate * sigmoid(swiglu_alpha * gate) * (up + 1)) instead of silu(gate) * up.
    bool clamped_swiglu = false;
    float swiglu_limit = 0.0f;
    float swiglu_alpha = 0.0f;
    // ---- gpt-oss: YaRN RoPE and learned attention sinks; see families/gptoss.cpp ----
    double rope_yarn_factor = 0.0;  // rope.scaling.factor of a YaRN file; 0: no YaRN
    int64_t rope_yarn_orig_ctx = 0;
    double rope_yarn_beta_fast = 0.0;
    double rope_yarn_beta_slow = 0.0;
    double rope_attn_factor = 1.0;  // YaRN's cos/sin multiplier (attention temperature)
    // Channels of the qwen35 conv (q, k and v concatenated) or the lfm2 conv (n_embd).
    int64_t conv_channels() const;
};

// The attention heads of the model's attention layers.
inline AttentionHeads attention_heads(const ModelConfig& c) {
    return {c.n_head, c.n_head_kv, c.head_dim, c.value_dim};
}

struct LayerWeights {
    std::vector<float> attn_norm;       // [n_embd]
    MatrixView wq;                      // [n_head*head_dim x n_embd]
    MatrixView wk;                      // [n_head_kv*head_dim x n_embd]
    MatrixView wv;                      // [n_head_kv*value_dim x n_embd]
    MatrixView wo;                      // [n_embd x n_head*value_dim]
    std::vector<float> bq, bk, bv;      // qwen2 biases, empty otherwise
    std::vector<float> bo;              // gpt-oss output projection bias [n_embd], or empty
    std::vector<float> attn_sinks;      // gpt-oss sink logit per head [n_head], or empty
    std::vector<float> q_norm, k_norm;  // qwen3 per-head RMS norm weights [head_dim], or empty
    std::vector<float> ffn_norm;        // [n_embd]
    MatrixView w_gate;                  // [n_ff x n_embd]
    MatrixView w_up;                    // [n_ff x n_embd]
    MatrixView w_down;                  // [n_embd x n_ff]
    // gemma3: norms of the attention and FFN outputs before the residual add, or empty.
    std::vector<float> post_attn_norm, post_ffn_norm;  // [n_embd]
    // Mixture-of-experts layers (qwen3moe) instead of w_gate/w_up/w_down: a router and the
    // experts' matrices stacked, expert e's rows following expert e-1's (moe.h cuts them).
    MatrixView ffn_gate_inp;  // [n_expert x n_embd] router
    MatrixView gate_exps;     // [n_expert*n_ff_exp x n_embd]
    MatrixView up_exps;       // [n_expert*n_ff_exp x n_embd]
    MatrixView down_exps;     // [n_expert*n_embd x n_ff_exp]
    // gpt-oss biases, stacked like the matrices; empty otherwise.
    std::vector<float> ffn_gate_inp_b;  // [n_expert]
    std::vector<float> gate_exps_b;     // [n_expert*n_ff_exp]
    std::vector<float> up_exps_b;       // [n_expert*n_ff_exp]
    std::vector<float> down_exps_b;     // [n_expert*n_embd]
    bool moe() const { return ffn_gate_inp.rows > 0; }

    LayerKind kind = LayerKind::Attention;
    // lfm2 short conv: in_proj gives B, C and x gates [3*n_embd], conv taps per channel.
    MatrixView conv_in;            // [3*n_embd x n_embd]
    std::vector<float> conv_taps;  // [channels x conv_kernel], tap k of channel c at c*K + k
    MatrixView conv_out;           // [n_embd x n_embd]
    // qwen35 GatedDeltaNet (conv_taps above: [ssm conv channels x conv_kernel]).
    MatrixView ssm_qkv;              // [2*n_k*k_dim + n_v*v_dim x n_embd] conv input
    MatrixView ssm_z;                // [n_v*v_dim x n_embd] output gate
    MatrixView ssm_alpha;            // [n_v x n_embd] decay input
    MatrixView ssm_beta;             // [n_v x n_embd] write strength input
    std::vector<float> ssm_a;        // [n_v] -exp(A_log): decay rate per head
    std::vector<float> ssm_dt_bias;  // [n_v]
    std::vector<float> ssm_norm;     // [v_dim] gated RMS norm weight, shared by heads
    MatrixView ssm_out;              // [n_embd x n_v*v_dim]
};

// How Model::load prepares the weights.
enum class ActivationChoice : uint8_t { Auto, Quantized, Exact, Wide };
// "auto", "quantized" (8-bit), "exact" (f32), "wide" (16-bit); nullopt for anything else.
std::optional<ActivationChoice> parse_activation_choice(std::string_view text);
const char* activations_name(Activations activations);

// What Auto picks for a file. See the definition for the rule and the measurements behind it.
Activations default_activations(const GgufFile& file);

struct LoadOptions {
    // Copy the Q4_K / Q6_K matrices of the layers (attention, dense FFN, the recurrent layers'
    // projections; not MoE experts) and the output into 16-row panels
    // (WeightLayout::Panels16, in the model's own huge-page memory; the file's pages are
    // released) when the active kernels read that layout: decode then loads 16 rows' scales
    // and quants as whole vectors. Same numbers either way; off only to compare the two.
    bool weight_panels = true;
    // How quantized matrices take their activations (MatrixView::activations): Auto picks
    // default_activations(file).
    ActivationChoice activations = ActivationChoice::Auto;
    // Asked between the steps of a long load (each 16 MiB of the panel rewrite, which reads
    // the whole file: seconds for a large model on a cold disk); true stops the load with
    // LoadStopped and nothing of it stays. Empty: never asked.
    std::function<bool()> stop;
};

// Model::load stopped because LoadOptions::stop asked.
class LoadStopped : public std::runtime_error {
public:
    explicit LoadStopped(const std::string& path)
        : std::runtime_error("loading " + path + " stopped") {}
};

class Model {
public:
    // Maps, validates and wires up `path`. Throws GgufError / std::runtime_error naming the
    // file and the offending field or tensor.
    static std::unique_ptr<Model> load(const std::string& path, const LoadOptions& options = {});
    ~Model();

    const ModelConfig& config() const { return config_; }
    const GgufFile& gguf() const { return *file_; }
    const Tokenizer& tokenizer() const { return *tokenizer_; }
    const std::string& path() const { return file_->path(); }
    // How the quantized matrices take their activations (LoadOptions::activations).
    Activations activations() const { return activations_; }

    const MatrixView& token_embd() const { return token_embd_; }  // [n_vocab x n_embd]
    const MatrixView& output() const { return output_; }          // [n_vocab x n_embd]
    const std::vector<float>& output_norm() const { return output_norm_; }
    const std::vector<LayerWeights>& layers() const { return layers_; }
    // RoPE angular frequency of each rotated pair [rope_dims/2]: base^(-2i/rope_dims), divided
    // by the per-dimension factors of llama 3 long-context scaling when the file has them.
    const std::vector<double>& rope_inv_freq() const { return rope_inv_freq_; }
    // gemma3's sliding layers: the same for the local base, without scaling factors.
    const std::vector<double>& rope_inv_freq_local() const { return rope_inv_freq_local_; }

    // What loading worked around in the file (layer kinds whose metadata disagrees with the
    // tensors), one sentence each naming the file: the engine prints nothing, the caller shows
    // them.
    const std::vector<std::string>& load_warnings() const { return load_warnings_; }

    // Where forward() runs the layers: null on the CPU (compute_device.h). Attached once, after
    // load, before the first forward pass.
    ComputeDevice* device() const { return device_.get(); }
    void attach_device(std::shared_ptr<ComputeDevice> device) { device_ = std::move(device); }

    // Hex digest covering architecture, hyper-parameters, tensor table and sampled tensor
    // bytes, and tokenizer: state saved under another fingerprint is never reused.
    const std::string& fingerprint() const { return fingerprint_; }
    // Bytes of weights read per decoded token: every matrix once, plus one embedding row; of a
    // MoE layer the router and the n_expert_used chosen experts' rows only.
    uint64_t weight_bytes_per_token() const;
    // Weights (elements) of those bytes.
    uint64_t weight_elements_per_token() const;

private:
    Model() = default;
    // Calls f on every matrix a decode step reads in full (the output, each layer's).
    template <class F>
    void for_each_decode_matrix(F&& f) const;
    // Calls f(matrix, rows read per token) on every stacked expert matrix of the MoE layers.
    template <class F>
    void for_each_decode_expert_share(F&& f) const;
    // LoadOptions::weight_panels: the matrices of a decode step that can take Panels16.
    // Checks `stop` (LoadOptions::stop, may be empty) between its 16 MiB steps.
    void write_weight_panels(const std::function<bool()>& stop);

    std::unique_ptr<GgufFile> file_;
    ModelConfig config_;
    std::unique_ptr<Tokenizer> tokenizer_;
    MatrixView token_embd_;
    MatrixView output_;
    std::vector<float> output_norm_;
    std::vector<double> rope_inv_freq_;
    std::vector<double> rope_inv_freq_local_;
    std::vector<LayerWeights> layers_;
    std::string fingerprint_;
    std::vector<std::string> load_warnings_;
    Activations activations_ = Activations::Quantized;  // of every matrix (LoadOptions)
    PageRegion weight_panels_;  // the matrices rewritten in Panels16 (LoadOptions::weight_panels)
    std::shared_ptr<ComputeDevice> device_;
};

}  // namespace ember
