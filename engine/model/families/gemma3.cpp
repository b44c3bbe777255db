// gemma3 (Gemma 3 text models): what differs from the llama-like families.
//
//   x = embed(token) * sqrt(n_embd)
//   per layer:  h = attn_norm(x);  h = attention(h);  x += post_attention_norm(h)
//               h = ffn_norm(x);   h = W_down (gelu_tanh(W_gate h) * W_up h);  x +=
//               post_ffw_norm(h)
//   logits = output(output_norm(x)), soft-capped (cap * tanh(logits / cap)) where the file says
// Attention has per-head q/k RMS norms, NEOX-style RoPE (halves) and the query scale
// 1/sqrt(query_pre_attn_scalar). Most layers are *sliding*: they attend only to the last W
// positions (W = attention.sliding_window, the position itself included) and rotate with the
// local RoPE base (rope.freq_base_swa, 10,000 when absent) without RoPE scaling; the others
// are global, with rope.freq_base and the file's RoPE scaling. The converter stores the RMS
// norm weights with Gemma's +1 already added, so the plain rms_norm applies.
//
// The KV cache keeps a sliding layer's rows in a ring of O(W) positions (state.h).
#include <cmath>
#include <string>

#include "engine/gguf/gguf.h"
#include "engine/model/binder.h"
#include "engine/model/families/shared.h"
#include "engine/model/family.h"

namespace ember {

namespace {

// The published models make every 6th layer global (layer i is global when (i + 1) % 6 == 0);
// the converter does not write the pattern, so that rule applies unless the file has
// `gemma3.attention.sliding_window_pattern`.
constexpr int64_t kGlobalEvery = 6;

void read_gemma3_config(const GgufFile& f, ModelConfig& c) {
    const std::string p = c.arch + ".";
    read_sliding_window(f, c, kGlobalEvery);
    c.embedding_scale = std::sqrt(static_cast<double>(c.n_embd));
    c.ffn_activation = GatedActivation::GeluTanh;
    c.local_rope = true;
    c.rope_base_local = f.get_float(p + "rope.freq_base_swa").value_or(10000.0);
    if (!(c.rope_base_local > 0)) {
        throw GgufError(f.path() + ": metadata '" + p + "rope.freq_base_swa' must be > 0");
    }
    // The query scale is 1/sqrt(query_pre_attn_scalar), which the converter does not write:
    // it is the head size in the published models except the 27B (5376 wide), whose scalar
    // is n_embd / n_head = 168 over heads of 128.
    const double scalar = c.n_embd == 5376 && c.n_head == 32
                              ? static_cast<double>(c.n_embd / c.n_head)
                              : static_cast<double>(c.head_dim);
    c.attn_scale = f.get_float(p + "attention.scale").value_or(1.0 / std::sqrt(scalar));
    c.final_logit_softcap = f.get_float(p + "final_logit_softcapping").value_or(0.0);
    if (c.final_logit_softcap < 0 || !std::isfinite(c.final_logit_softcap)) {
        throw GgufError(f.path() + ": metadata '" + p + "final_logit_softcapping' must be >= 0");
    }
    if (f.get_float(p + "attn_logit_softcapping").value_or(0.0) != 0.0) {
        throw GgufError(f.path() + ": metadata '" + p +
                        "attn_logit_softcapping' (attention score soft-capping) is not supported");
    }
}

void fingerprint(const ModelConfig& c, std::vector<uint8_t>& bytes) {
    const double g[] = {static_cast<double>(c.sliding_window), c.rope_base_local, c.attn_scale,
                        c.final_logit_softcap};
    append_bytes(bytes, g);
    for (bool slides : c.sliding) {
        const uint8_t v[] = {static_cast<uint8_t>(slides ? 1 : 0)};
        append_bytes(bytes, v);
    }
}

}  // namespace

extern const FamilySpec kGemma3Family{
    .arch = "gemma3",
    .family = Family::Gemma3,
    .qk_norm = true,
    .post_norms = true,
    .read_config = read_gemma3_config,
    .fingerprint = fingerprint,
};

}  // namespace ember
