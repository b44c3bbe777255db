// Configuration pieces more than one family reads (shared.h).
#include "engine/model/families/shared.h"

#include <string>

#include "engine/gguf/gguf.h"
#include "engine/model/binder.h"
#include "engine/model/model.h"

namespace ember {

namespace {

// Which layers slide: the file's pattern key, or the family's rule (every `every`-th global).
void read_sliding_layers(const GgufFile& f, const std::string& p, int64_t every, ModelConfig& c) {
    const std::string key = p + "attention.sliding_window_pattern";
    c.sliding.assign(static_cast<size_t>(c.n_layer), false);
    const GgufValue* v = f.find(key);
    if (v != nullptr && v->type == GgufValueType::ARRAY) {
        const GgufArray* per_layer = f.get_array(key);
        if (per_layer == nullptr || per_layer->ints.size() != static_cast<size_t>(c.n_layer)) {
            throw GgufError(f.path() + ": metadata '" + key + "' has " +
                            std::to_string(per_layer ? per_layer->ints.size() : 0) +
                            " entries for " + std::to_string(c.n_layer) + " layers");
        }
        for (int64_t i = 0; i < c.n_layer; ++i) {
            c.sliding[static_cast<size_t>(i)] = per_layer->ints[static_cast<size_t>(i)] != 0;
        }
        return;
    }
    if (v != nullptr) {
        const auto period = f.get_int(key);
        if (!period || *period < 1 || *period > 4096) {
            throw GgufError(f.path() + ": metadata '" + key +
                            "' must be a layer period (1..4096) or one flag per layer");
        }
        every = *period;
    }
    for (int64_t i = 0; i < c.n_layer; ++i)
        c.sliding[static_cast<size_t>(i)] = (i + 1) % every != 0;
}

}  // namespace

bool read_sliding_window(const GgufFile& f, ModelConfig& c, int64_t global_every) {
    const std::string p = c.arch + ".";
    const std::string window_key = p + "attention.sliding_window";
    const auto w = f.get_int(window_key);
    if (!w) return false;
    if (*w <= 0 || *w > c.n_ctx_train) {
        throw GgufError(f.path() + ": metadata '" + window_key + "' = " + std::to_string(*w) +
                        " is out of range (1.." + std::to_string(c.n_ctx_train) +
                        ", the context_length)");
    }
    c.sliding_window = *w;
    read_sliding_layers(f, p, global_every, c);
    return true;
}

// Expert counts and routing of the qwen3moe family: softmax over every expert's router logit,
// the top expert_used_count, their weights rescaled to sum to 1 (Qwen3 MoE's norm_topk_prob;
// the converter does not write expert_weights_norm for it, so a file that lacks the key gets
// the family's rule).
void read_expert_config(const GgufFile& f, ModelConfig& c, bool chosen_softmax_ok) {
    const std::string p = c.arch + ".";
    c.n_expert = positive(f, p + "expert_count", require_int(f, p + "expert_count"), 4096);
    c.n_expert_used =
        positive(f, p + "expert_used_count", require_int(f, p + "expert_used_count"), c.n_expert);
    c.n_ff_exp = positive(f, p + "expert_feed_forward_length",
                          require_int(f, p + "expert_feed_forward_length"), 1 << 20);
    c.expert_weights_norm = f.get_bool(p + "expert_weights_norm").value_or(true);
    // 1 = softmax (the reference engine's numbering); sigmoid routers are other families'.
    // gpt-oss's softmax over the chosen logits (3) equals a softmax renormalized over them.
    const auto gating = f.get_int(p + "expert_gating_func");
    const bool chosen_softmax = chosen_softmax_ok && gating && *gating == 3;
    if (gating && *gating != 1 && !chosen_softmax) {
        throw ModelError(f.path() + ": metadata '" + p + "expert_gating_func' = " +
                         std::to_string(*gating) + " is not supported (only 1, softmax" +
                         (chosen_softmax_ok ? ", or 3, softmax of the chosen)" : ")"));
    }
}

void hybrid_fingerprint(const ModelConfig& c, std::vector<uint8_t>& bytes) {
    const int64_t sizes[] = {c.conv_kernel, c.ssm_n_k_heads, c.ssm_n_v_heads,
                             c.ssm_k_dim,   c.ssm_v_dim,     c.attn_output_gate};
    append_bytes(bytes, sizes);
    for (LayerKind kind : c.layer_kinds) {
        const uint32_t v[] = {static_cast<uint32_t>(kind)};
        append_bytes(bytes, v);
    }
}

}  // namespace ember
