// qwen35 (Qwen3.5 text): GatedDeltaNet linear-attention layers with, every
// full_attention_interval-th layer, gated softmax attention (per-head sigmoid output gate,
// q/k RMS norm, RoPE on the first rope_dims of each head); each followed by a SwiGLU FFN.
//
// A GatedDeltaNet layer, per token t (cpu/delta_net.cpp runs it):
//   [q | k | v] = silu(causal_conv(W_qkv · h))        depthwise conv, K taps, own history
//   q, k        L2-normalized per head, q scaled by 1/sqrt(k_dim)
//   g = a * softplus(alpha + dt_bias)   (a = -exp(A_log) < 0: log decay per v head)
//   beta = sigmoid(W_beta · h)
//   per v head (reading q/k head h % n_k_heads), with state S [k_dim x v_dim]:
//     S = exp(g) S;  S += k (beta (v - k^T S))^T;  o = q^T S          (the delta rule)
//   o = rms_norm(o) * w * silu(z),  z = W_z · h;   h += W_out · o
#include <string>

#include "engine/gguf/gguf.h"
#include "engine/model/binder.h"
#include "engine/model/families/shared.h"
#include "engine/model/family.h"

namespace ember {

namespace {

void read_config(const GgufFile& f, ModelConfig& c) {
    const std::string p = c.arch + ".";
    constexpr int64_t kMaxDim = 1 << 20;
    c.conv_kernel = positive(f, p + "ssm.conv_kernel", require_int(f, p + "ssm.conv_kernel"), 64);
    c.ssm_k_dim = positive(f, p + "ssm.state_size", require_int(f, p + "ssm.state_size"), 4096);
    c.ssm_n_k_heads =
        positive(f, p + "ssm.group_count", require_int(f, p + "ssm.group_count"), 4096);
    c.ssm_n_v_heads =
        positive(f, p + "ssm.time_step_rank", require_int(f, p + "ssm.time_step_rank"), 4096);
    const int64_t inner =
        positive(f, p + "ssm.inner_size", require_int(f, p + "ssm.inner_size"), kMaxDim);
    if (inner % c.ssm_n_v_heads != 0 || c.ssm_n_v_heads % c.ssm_n_k_heads != 0) {
        throw ModelError(f.path() + ": ssm.inner_size " + std::to_string(inner) +
                         " / time_step_rank " + std::to_string(c.ssm_n_v_heads) +
                         " / group_count " + std::to_string(c.ssm_n_k_heads) +
                         " do not divide evenly");
    }
    c.ssm_v_dim = inner / c.ssm_n_v_heads;
}

// Every full_attention_interval-th layer is attention. Converters write it as one interval
// whatever the HF model's pattern; where the tensors say otherwise they win (model.cpp).
void metadata_attention(const GgufFile& f, const ModelConfig& c, std::string& key,
                        std::vector<bool>& attention) {
    const int64_t interval = f.get_int(c.arch + ".full_attention_interval").value_or(0);
    if (interval <= 0) return;
    key = c.arch + ".full_attention_interval = " + std::to_string(interval);
    for (size_t i = 0; i < attention.size(); ++i) {
        attention[i] = (static_cast<int64_t>(i) + 1) % interval == 0;
    }
}

void bind_layer(const TensorBinder& bind, const std::string& b, const ModelConfig& c,
                LayerWeights& L) {
    if (L.kind != LayerKind::DeltaNet) return;
    const int64_t inner = c.ssm_n_v_heads * c.ssm_v_dim;
    L.ssm_qkv = bind.matrix(b + "attn_qkv.weight", c.conv_channels(), c.n_embd);
    L.ssm_z = bind.matrix(b + "attn_gate.weight", inner, c.n_embd);
    L.ssm_alpha = bind.matrix(b + "ssm_alpha.weight", c.ssm_n_v_heads, c.n_embd);
    L.ssm_beta = bind.matrix(b + "ssm_beta.weight", c.ssm_n_v_heads, c.n_embd);
    L.ssm_a = bind.vector(b + "ssm_a", c.ssm_n_v_heads);
    L.ssm_dt_bias = bind.vector(b + "ssm_dt.bias", c.ssm_n_v_heads);
    // Taps are stored [channels][K] (ne0 = K): kept as f32, a few KB per layer.
    L.conv_taps = bind.vector_2d(b + "ssm_conv1d.weight", c.conv_kernel, c.conv_channels());
    L.ssm_norm = bind.vector(b + "ssm_norm.weight", c.ssm_v_dim);
    L.ssm_out = bind.matrix(b + "ssm_out.weight", c.n_embd, inner);
}

}  // namespace

extern const FamilySpec kQwen35Family{
    .arch = "qwen35",
    .family = Family::Qwen35,
    .qk_norm = true,
    .attn_output_gate = true,
    // The norm before the FFN is named after its place, behind the mixer.
    .ffn_norm = "post_attention_norm.weight",
    .recurrent_kind = LayerKind::DeltaNet,
    .recurrent_tensor = "attn_qkv.weight",
    .metadata_attention = metadata_attention,
    .read_config = read_config,
    .bind_layer = bind_layer,
    .fingerprint = hybrid_fingerprint,
};

}  // namespace ember
