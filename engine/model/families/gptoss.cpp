// gpt-oss (OpenAI's open-weight mixtures of experts): what differs from the other families.
//
//   x = embed(token)
//   per layer:  h = attn_norm(x);  x += Wo · attention(h) + bo
//               h = post_attention_norm(x);  x += moe(h)
//   logits = output(output_norm(x))
//
// Attention: biases on q, k, v and the output; NEOX-style RoPE (halves) with YaRN scaling;
// GQA; a learned *sink* logit per head that joins each softmax's denominator and contributes
// no value (so a head can attend to "nothing"). Layers alternate between a sliding window of
// W positions (the position itself included; even layers in the published models) and full
// attention; the sliding layers keep their K/V rows in the cache's ring (state.h), as gemma3's.
//
// YaRN (HF's "yarn" rope type): pair i of a head of d dimensions rotates with
//   inv_freq_i = interp_i * ramp_i + extrap_i * (1 - ramp_i),  extrap_i = base^(-2i/d),
//   interp_i = extrap_i / factor,  ramp_i = clamp((i - low) / (high - low), 0, 1),
// where low / high are the dimensions at which a pair makes beta_fast / beta_slow rotations
// over the original context: d * ln(orig / (2 pi beta)) / (2 ln base), clamped to [0, d-1]
// and *not* rounded (the published config sets truncate: false; GGUF has no key for it).
// cos and sin are multiplied by the attention factor 0.1 ln(factor) + 1, i.e. q and k both
// are: the scores by its square, which is where this engine applies it.
//
// MoE FFN (moe.h): a router with bias picks the expert_used_count largest logits, weights =
// softmax over those; each expert has biases on gate, up and down and the clamped SwiGLU
// (gate <= 7, -7 <= up <= 7, gate * sigmoid(1.702 gate) * (up + 1)).
#include <algorithm>
#include <cmath>
#include <string>

#include "engine/gguf/gguf.h"
#include "engine/model/binder.h"
#include "engine/model/families/shared.h"
#include "engine/model/family.h"

namespace ember {

namespace {

// The published models make every second layer global (layer i when (i + 1) % 2 == 0, the HF
// config's layer_types); the converter writes no pattern key.
constexpr int64_t kGlobalEvery = 2;
// The clamped SwiGLU's constants (HF GptOssExperts: limit and alpha; not in the GGUF).
constexpr float kSwigluLimit = 7.0f;
constexpr float kSwigluAlpha = 1.702f;

// HF's defaults where the file leaves them out (rope_parameters of the published config).
constexpr double kYarnBetaFast = 32.0;
constexpr double kYarnBetaSlow = 1.0;

void read_yarn(const GgufFile& f, const std::string& p, ModelConfig& c) {
    const auto type = f.get_string(p + "rope.scaling.type");
    if (!type || *type == "none") return;
    if (*type != "yarn") {
        throw GgufError(f.path() + ": metadata '" + p + "rope.scaling.type' = '" + *type +
                        "' is not supported for gpt-oss (only yarn)");
    }
    const std::string factor_key = p + "rope.scaling.factor";
    const double factor = f.get_float(factor_key).value_or(0.0);
    if (!(factor >= 1.0) || !std::isfinite(factor)) {
        throw GgufError(f.path() + ": metadata '" + factor_key + "' = " + std::to_string(factor) +
                        " must be a number >= 1 for YaRN");
    }
    const std::string orig_key = p + "rope.scaling.original_context_length";
    const auto orig = f.get_int(orig_key);
    if (!orig || *orig <= 0 || *orig > c.n_ctx_train) {
        throw GgufError(f.path() + ": metadata '" + orig_key + "' is missing or out of range (1.." +
                        std::to_string(c.n_ctx_train) + ", the context_length)");
    }
    c.rope_yarn_factor = factor;
    c.rope_yarn_orig_ctx = *orig;
    c.rope_yarn_beta_fast = f.get_float(p + "rope.scaling.yarn_beta_fast").value_or(kYarnBetaFast);
    c.rope_yarn_beta_slow = f.get_float(p + "rope.scaling.yarn_beta_slow").value_or(kYarnBetaSlow);
    if (!(c.rope_yarn_beta_fast > 0) || !(c.rope_yarn_beta_slow > 0)) {
        throw GgufError(f.path() + ": metadata '" + p +
                        "rope.scaling.yarn_beta_fast' / 'yarn_beta_slow' must be > 0");
    }
    // HF's get_mscale(factor): the attention temperature of the YaRN paper.
    c.rope_attn_factor = factor <= 1.0 ? 1.0 : 0.1 * std::log(factor) + 1.0;
}

void read_gptoss_config(const GgufFile& f, ModelConfig& c) {
    const std::string p = c.arch + ".";
    read_expert_config(f, c, /*chosen_softmax=*/true);
    if (!read_sliding_window(f, c, kGlobalEvery)) {
        throw GgufError(f.path() + ": missing metadata '" + p + "attention.sliding_window'");
    }
    read_yarn(f, p, c);
    // q and k are each multiplied by the attention factor (HF scales cos and sin).
    c.attn_scale =
        c.rope_attn_factor * c.rope_attn_factor / std::sqrt(static_cast<double>(c.head_dim));
    c.clamped_swiglu = true;
    c.swiglu_limit = kSwigluLimit;
    c.swiglu_alpha = kSwigluAlpha;
    // Softmax over the chosen experts' logits: the same numbers as a softmax over all of them
    // renormalized over the chosen, which is how route_token computes it.
    c.expert_weights_norm = true;
}

// Biases on the attention output and on the router and every expert projection; a sink
// logit per head.
void bind_layer(const TensorBinder& bind, const std::string& b, const ModelConfig& c,
                LayerWeights& L) {
    L.bo = bind.vector(b + "attn_output.bias", c.n_embd);
    L.attn_sinks = bind.vector(b + "attn_sinks.weight", c.n_head);
    L.ffn_gate_inp_b = bind.vector(b + "ffn_gate_inp.bias", c.n_expert);
    L.gate_exps_b = bind.vector_2d(b + "ffn_gate_exps.bias", c.n_ff_exp, c.n_expert);
    L.up_exps_b = bind.vector_2d(b + "ffn_up_exps.bias", c.n_ff_exp, c.n_expert);
    L.down_exps_b = bind.vector_2d(b + "ffn_down_exps.bias", c.n_embd, c.n_expert);
}

void fingerprint(const ModelConfig& c, std::vector<uint8_t>& bytes) {
    const double g[] = {static_cast<double>(c.sliding_window),
                        c.rope_yarn_factor,
                        static_cast<double>(c.rope_yarn_orig_ctx),
                        c.rope_yarn_beta_fast,
                        c.rope_yarn_beta_slow,
                        c.attn_scale};
    append_bytes(bytes, g);
    for (bool slides : c.sliding) {
        const uint8_t v[] = {static_cast<uint8_t>(slides ? 1 : 0)};
        append_bytes(bytes, v);
    }
}

}  // namespace

extern const FamilySpec kGptOssFamily{
    .arch = "gpt-oss",
    .family = Family::GptOss,
    .qkv_bias = true,
    // The converter names the norm before the FFN after its place, behind attention.
    .ffn_norm = "post_attention_norm.weight",
    .every_layer_moe = true,
    .read_config = read_gptoss_config,
    .bind_layer = bind_layer,
    .fingerprint = fingerprint,
};

}  // namespace ember
