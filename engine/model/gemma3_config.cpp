// gemma3's hyper-parameters beyond the common ones (see gemma3.h).
#include <cmath>
#include <string>

#include "engine/gguf/gguf.h"
#include "engine/model/gemma3.h"
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

void read_gemma3_config(const GgufFile& f, ModelConfig& c) {
    const std::string p = c.arch + ".";
    read_sliding_window(f, c, kGemma3GlobalEvery);
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

}  // namespace ember
