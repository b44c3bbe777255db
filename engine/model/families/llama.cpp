// The llama-like families: pre-norm attention + SwiGLU FFN blocks, every switch of the shared
// layers (layers.h) off but these:
//   llama     RoPE on adjacent pairs (GGUF stores Q/K after the converter's permutation)
//   qwen2     biases on q, k and v
//   qwen3     per-head RMS norms of q and k
//   qwen3moe  qwen3 with a mixture-of-experts FFN in the layers that have a router (moe.h):
//             softmax over every expert's router logit, the top expert_used_count, their
//             weights rescaled to sum to 1 (Qwen3 MoE's norm_topk_prob; the converter does not
//             write expert_weights_norm for it, so a file that lacks the key gets that rule)
#include "engine/model/families/shared.h"
#include "engine/model/family.h"

namespace ember {

namespace {

void read_qwen3moe_config(const GgufFile& f, ModelConfig& c) {
    read_expert_config(f, c, /*chosen_softmax=*/false);
}

}  // namespace

extern const FamilySpec kLlamaFamily{
    .arch = "llama",
    .family = Family::Llama,
    .rope_layout = RopeLayout::Adjacent,
};

extern const FamilySpec kQwen2Family{
    .arch = "qwen2",
    .family = Family::Qwen2,
    .qkv_bias = true,
};

extern const FamilySpec kQwen3Family{
    .arch = "qwen3",
    .family = Family::Qwen3,
    .qk_norm = true,
};

extern const FamilySpec kQwen3MoeFamily{
    .arch = "qwen3moe",
    .family = Family::Qwen3Moe,
    .qk_norm = true,
    .read_config = read_qwen3moe_config,
};

}  // namespace ember
