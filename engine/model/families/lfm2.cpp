// lfm2: a stack of short gated convolutions and attention layers (q/k RMS norms, RoPE on
// halves), each followed by a SwiGLU FFN; pre-norm residual blocks. The conv layer (per
// channel c, token t; cpu/short_conv.cpp runs it):
//   [B | C | x] = in_proj · norm(h)                    three [n_embd] gates
//   y[t] = C[t] * sum_k taps[c][k] * (B*x)[t - (K-1) + k]   causal, K = l_cache taps
//   h += out_proj · y
// Its state is the last K-1 values of B*x, carried across calls.
#include <string>

#include "engine/gguf/gguf.h"
#include "engine/model/binder.h"
#include "engine/model/families/shared.h"
#include "engine/model/family.h"

namespace ember {

namespace {

void read_config(const GgufFile& f, ModelConfig& c) {
    const std::string p = c.arch + ".";
    c.conv_kernel =
        positive(f, p + "shortconv.l_cache", require_int(f, p + "shortconv.l_cache"), 64);
}

// The metadata states the kinds as per-layer KV head counts, 0 for the conv layers.
void metadata_attention(const GgufFile& f, const ModelConfig& c, std::string& key,
                        std::vector<bool>& attention) {
    const std::string heads_key = c.arch + ".attention.head_count_kv";
    const GgufArray* kv_heads = optional_array(f, heads_key);
    if (!kv_heads || kv_heads->ints.size() != attention.size()) return;
    key = heads_key;
    for (size_t i = 0; i < attention.size(); ++i) attention[i] = kv_heads->ints[i] > 0;
}

void bind_layer(const TensorBinder& bind, const std::string& b, const ModelConfig& c,
                LayerWeights& L) {
    if (L.kind != LayerKind::ShortConv) return;
    L.conv_in = bind.matrix(b + "shortconv.in_proj.weight", 3 * c.n_embd, c.n_embd);
    // Taps are stored [channels][K] (ne0 = K): kept as f32, a few KB per layer.
    L.conv_taps = bind.vector_2d(b + "shortconv.conv.weight", c.conv_kernel, c.n_embd);
    L.conv_out = bind.matrix(b + "shortconv.out_proj.weight", c.n_embd, c.n_embd);
}

}  // namespace

extern const FamilySpec kLfm2Family{
    .arch = "lfm2",
    .family = Family::Lfm2,
    .qk_norm = true,
    // The final norm is named after the embedding (the converter's name for it).
    .output_norm = "token_embd_norm.weight",
    .recurrent_kind = LayerKind::ShortConv,
    .recurrent_tensor = "shortconv.in_proj.weight",
    .metadata_attention = metadata_attention,
    .read_config = read_config,
    .bind_layer = bind_layer,
    .fingerprint = hybrid_fingerprint,
};

}  // namespace ember
