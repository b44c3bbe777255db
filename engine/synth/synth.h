// Synthetic models: random weights in the exact layout of a real model, for benchmarking.
//
// Speed depends on shapes and tensor types, never on the values, so a file with the tensor
// names, shapes, types and metadata of a real conversion, filled with noise of a realistic
// scale (matrices ~ normal(0, 0.02), norm weights ~ 1), benchmarks like the real model
// without downloading it. The metadata follows the GGUF conventions so the files load in
// other GGUF engines too, which is what makes cross-engine comparisons fair.
//
// Values are a pure function of (seed, tensor name, row): independent of the thread count and
// of how rows are split into tasks, and any row can be regenerated (tests compare a file's
// rows with a fresh quantization of the regenerated values).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tensor/types.h"

namespace ember {

class ThreadPool;

// Hyper-parameters of a real model, as its GGUF conversion states them.
struct SynthShape {
    std::string_view name;          // command-line name, e.g. "smollm2-135m"
    std::string_view arch;          // general.architecture
    std::string_view display_name;  // general.name
    std::string_view size_label;    // general.size_label
    std::string_view vocab_hint;    // a file whose tokenizer fits (for error messages)
    int64_t n_vocab = 0;
    int64_t n_embd = 0;
    int64_t n_layer = 0;
    int64_t n_head = 0;
    int64_t n_head_kv = 0;
    int64_t head_dim = 0;
    int64_t n_ff = 0;
    int64_t n_ctx_train = 0;
    double rope_base = 10000.0;
    double rms_eps = 1e-5;
    bool qk_norm = false;      // per-head RMS norm of q and k (qwen3)
    bool tied_output = false;  // no output.weight: the token embedding doubles as the output
    // A vocabulary source smaller than n_vocab is padded with unused placeholder tokens (for
    // shapes whose tokenizer is not at hand; the matrices keep the real size), a larger one is
    // cut to n_vocab (the tail it drops is never produced by the cut vocabulary).
    bool pad_vocab = false;
    // ---- qwen35 hybrids (GatedDeltaNet + gated attention); zero elsewhere ----
    int64_t full_attention_interval = 0;  // every n-th layer is attention, the rest DeltaNet
    int64_t rope_dims = 0;                // rotated dimensions per head (0: head_dim)
    int64_t ssm_conv_kernel = 0;
    int64_t ssm_n_k_heads = 0;
    int64_t ssm_n_v_heads = 0;
    int64_t ssm_k_dim = 0;
    int64_t ssm_v_dim = 0;
    // ---- qwen3moe: every layer's FFN is a mixture of experts; zero elsewhere ----
    int64_t n_expert = 0;       // experts per layer
    int64_t n_expert_used = 0;  // experts per token
    int64_t n_ff_exp = 0;       // hidden size of one expert
    // ---- gemma3: post-norms, GELU MLP, sliding-window layers; zero elsewhere ----
    int64_t sliding_window = 0;    // attention.sliding_window; every 6th layer is global
    double rope_scale_linear = 0;  // linear RoPE scaling of the global layers (0: none)
    // ---- gpt-oss (arch "gpt-oss"): attention biases and sinks, expert biases, YaRN; every
    // second layer global. Its MXFP4 recipe keeps the non-expert matrices Q8_0. ----
    double rope_yarn_factor = 0;  // rope.scaling.factor of YaRN (0: none)
    int64_t rope_yarn_orig_ctx = 0;
    bool is_attention_layer(int64_t layer) const {
        return full_attention_interval == 0 || (layer + 1) % full_attention_interval == 0;
    }
};

std::span<const SynthShape> synth_shapes();
const SynthShape* find_synth_shape(std::string_view name);  // nullptr when unknown

// Weight-type recipes, named like the reference converter's file types.
enum class SynthRecipe { F16, BF16, Q8_0, Q4_0, Q4_K_M, IQ4_XS, IQ3_S, IQ3_M, MXFP4 };

struct SynthRecipeInfo {
    SynthRecipe recipe;
    std::string_view name;  // "q4_k_m"
    TensorType base;        // type of most matrices
    uint32_t file_type;     // general.file_type (llama_ftype numbering)
};

std::span<const SynthRecipeInfo> synth_recipes();
const SynthRecipeInfo* find_synth_recipe(std::string_view name);  // nullptr when unknown
const SynthRecipeInfo& synth_recipe_info(SynthRecipe recipe);

// The type the reference quantizer gives one weight matrix. `layer` is the block index (-1
// outside the blocks), `row_len` the matrix's ne[0]. Mirrors the mostly-<type> rules:
//  * the output matrix (token_embd when the output is tied) gets Q6_K in quantized recipes
//    other than Q8_0;
//  * Q4_K_M gives attn_v and ffn_down (ffn_down_exps too) Q6_K in the first and last eighth of
//    the layers and in every third layer between;
//  * MoE routers (ffn_gate_inp) stay F32, as the reference quantizer leaves them;
//  * IQ4_XS gives ffn_down Q5_K in the first eighth of the layers, attn_v Q5_K where n_gqa >= 4;
//    IQ3_S gives attn_v Q4_K where n_gqa >= 4; IQ3_M (IQ3_S otherwise) gives attn_v, attn_output,
//    attn_qkv and the first eighth's ffn_down Q4_K;
//  * MXFP4 (named after the reference's MXFP4_MOE) stores every matrix MXFP4 but the embedding
//    and output (Q8_0), as that recipe stores experts and as the qfix-MXFP4 fixture is made;
//  * a type whose block does not divide the row falls back as the reference does (Q4_K to
//    Q5_0, Q6_K to Q8_0, IQ4_XS / IQ3_S to IQ4_NL): SmolLM2's 576-wide rows cannot hold
//    256-element super-blocks.
// n_gqa: query heads per KV head.
TensorType synth_matrix_type(SynthRecipe recipe, std::string_view name, int64_t layer,
                             int64_t n_layer, int64_t row_len, bool tied_output, int64_t n_gqa = 1);

struct SynthTensor {
    std::string name;
    std::vector<int64_t> dims;  // ne[0] (the row) first
    TensorType type = TensorType::F32;
    float mean = 0.0f;  // values ~ normal(mean, stddev)
    float stddev = 0.0f;
    int64_t row_len() const { return dims[0]; }
    int64_t rows() const;
};

// Every tensor of the shape, in file order, typed by the recipe (1-D norm weights are F32).
std::vector<SynthTensor> plan_synth_tensors(const SynthShape& shape, SynthRecipe recipe);

// Fills out[0..row_len) with row `row` of the tensor: deterministic in (seed, name, row).
void synth_row(uint64_t seed, const SynthTensor& tensor, int64_t row, float* out);

struct SynthOptions {
    const SynthShape* shape = nullptr;
    SynthRecipe recipe = SynthRecipe::Q8_0;
    std::string vocab_from;  // GGUF whose tokenizer.* metadata is copied
    std::string output;
    uint64_t seed = 1;
};

struct SynthSummary {
    size_t n_tensors = 0;
    uint64_t n_params = 0;
    uint64_t tensor_bytes = 0;  // tensor data, without alignment padding
    double seconds = 0;         // generating, quantizing and writing
};

// Generates and writes the file (atomically: a failure leaves no half file), one tensor at a
// time while writing, so memory holds the largest tensor, not the file (an 18 GB MoE). Throws
// std::runtime_error when the tokenizer source does not fit the shape or a type has no
// quantizer, GgufError on I/O problems.
SynthSummary write_synth_model(const SynthOptions& options, ThreadPool& pool);

}  // namespace ember
