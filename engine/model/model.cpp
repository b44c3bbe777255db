// Model loading: read hyper-parameters from metadata, find every tensor the family needs,
// check its shape and type, and point MatrixViews into the mmap.
#include "engine/model/model.h"

#include <xxhash.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <sstream>
#include <thread>

#include "engine/model/gemma3.h"
#include "engine/model/gptoss.h"
#include "engine/tensor/panels16.h"
#include "engine/tensor/traits.h"
#include "engine/tokenizer/tokenizer.h"

namespace ember {

namespace {

class ModelError : public GgufError {
public:
    using GgufError::GgufError;
};

std::string shape_string(const std::vector<int64_t>& dims) {
    std::string s = "[";
    for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
    return s + "]";
}

// Looks up tensors by name and checks them against the shape the family expects.
class TensorBinder {
public:
    TensorBinder(const GgufFile& file, Activations activations)
        : file_(file), activations_(activations) {}

    Activations activations() const { return activations_; }

    const GgufTensorInfo* find(const std::string& name) const { return file_.find_tensor(name); }

    const GgufTensorInfo& require(const std::string& name, const std::vector<int64_t>& dims) const {
        const GgufTensorInfo* t = file_.find_tensor(name);
        if (!t) throw ModelError(file_.path() + ": missing tensor '" + name + "'");
        check_shape(*t, dims);
        return *t;
    }

    void check_shape(const GgufTensorInfo& t, const std::vector<int64_t>& dims) const {
        // Trailing dimensions of 1 are equivalent; compare the rest exactly.
        std::vector<int64_t> have = t.dims;
        while (have.size() > dims.size() && have.back() == 1) have.pop_back();
        if (have != dims) {
            throw ModelError(file_.path() + ": tensor '" + t.name + "' has shape " +
                             shape_string(t.dims) + ", expected " + shape_string(dims));
        }
    }

    MatrixView matrix(const std::string& name, int64_t rows, int64_t cols) const {
        const GgufTensorInfo& t = require(name, {cols, rows});
        MatrixView m;
        m.type = t.type;
        m.data = t.data;
        m.rows = rows;
        m.cols = cols;
        m.row_stride = row_bytes(type_info(t.type), static_cast<uint64_t>(cols));
        m.activations = activations_;
        return m;
    }

    // Small vectors (norm weights, biases) are dequantized to f32 once: a few KB per layer.
    std::vector<float> vector(const std::string& name, int64_t n) const {
        const GgufTensorInfo& t = require(name, {n});
        return to_f32(t, n);
    }

    // A small 2-D tensor [rows x row_len] (ne0 = row_len) as f32, rows concatenated.
    std::vector<float> vector_2d(const std::string& name, int64_t row_len, int64_t rows) const {
        const GgufTensorInfo& t = require(name, {row_len, rows});
        return to_f32(t, row_len * rows);
    }

    std::vector<float> optional_vector(const std::string& name, int64_t n) const {
        const GgufTensorInfo* t = find(name);
        if (!t) return {};
        check_shape(*t, {n});
        return to_f32(*t, n);
    }

private:
    std::vector<float> to_f32(const GgufTensorInfo& t, int64_t n) const {
        MatrixView m;
        m.type = t.type;
        m.data = t.data;
        m.rows = 1;
        m.cols = n;
        m.row_stride = t.n_bytes;
        std::vector<float> out(static_cast<size_t>(n));
        dequantize_row(m, 0, out.data());
        return out;
    }

    const GgufFile& file_;
    Activations activations_;
};

int64_t require_int(const GgufFile& f, const std::string& key) {
    auto v = f.get_int(key);
    if (!v) throw ModelError(f.path() + ": missing metadata '" + key + "'");
    return *v;
}

int64_t positive(const GgufFile& f, const std::string& key, int64_t v, int64_t max) {
    if (v <= 0 || v > max) {
        throw ModelError(f.path() + ": metadata '" + key + "' = " + std::to_string(v) +
                         " is out of range (1.." + std::to_string(max) + ")");
    }
    return v;
}

// attention.head_count_kv is a number, or (lfm2) one number per layer with 0 for the layers
// without attention; every attention layer must then have the same count.
const GgufArray* optional_array(const GgufFile& f, const std::string& key) {
    const GgufValue* v = f.find(key);
    return v && v->type == GgufValueType::ARRAY ? f.get_array(key) : nullptr;
}

int64_t head_count_kv(const GgufFile& f, const std::string& p, const ModelConfig& c) {
    const std::string key = p + "attention.head_count_kv";
    if (const GgufArray* per_layer = optional_array(f, key)) {
        int64_t n = 0;
        for (int64_t v : per_layer->ints) {
            if (v != 0 && n != 0 && v != n) {
                throw ModelError(f.path() + ": '" + key +
                                 "' differs between attention layers, which is not supported");
            }
            if (v != 0) n = v;
        }
        if (per_layer->ints.size() != static_cast<size_t>(c.n_layer)) {
            throw ModelError(f.path() + ": '" + key + "' has " +
                             std::to_string(per_layer->ints.size()) + " entries for " +
                             std::to_string(c.n_layer) + " layers");
        }
        return n == 0 ? c.n_head : n;
    }
    return f.get_int(key).value_or(c.n_head);
}

// Expert counts and routing of the qwen3moe family: softmax over every expert's router logit,
// the top expert_used_count, their weights rescaled to sum to 1 (Qwen3 MoE's norm_topk_prob;
// the converter does not write expert_weights_norm for it, so a file that lacks the key gets
// the family's rule).
void read_moe_config(const GgufFile& f, ModelConfig& c) {
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
    const bool chosen_softmax = c.family == Family::GptOss && gating && *gating == 3;
    if (gating && *gating != 1 && !chosen_softmax) {
        throw ModelError(f.path() + ": metadata '" + p + "expert_gating_func' = " +
                         std::to_string(*gating) + " is not supported (only 1, softmax" +
                         (c.family == Family::GptOss ? ", or 3, softmax of the chosen)" : ")"));
    }
}

ModelConfig read_config(const GgufFile& f) {
    ModelConfig c;
    auto arch = f.get_string("general.architecture");
    if (!arch) throw ModelError(f.path() + ": missing metadata 'general.architecture'");
    c.arch = *arch;
    if (c.arch == "llama") {
        c.family = Family::Llama;
        c.rope_layout = RopeLayout::Adjacent;
    } else if (c.arch == "qwen2") {
        c.family = Family::Qwen2;
        c.rope_layout = RopeLayout::Halves;
        c.qkv_bias = true;
    } else if (c.arch == "qwen3") {
        c.family = Family::Qwen3;
        c.rope_layout = RopeLayout::Halves;
        c.qk_norm = true;
    } else if (c.arch == "lfm2") {
        c.family = Family::Lfm2;
        c.rope_layout = RopeLayout::Halves;
        c.qk_norm = true;
    } else if (c.arch == "qwen35") {
        c.family = Family::Qwen35;
        c.rope_layout = RopeLayout::Halves;
        c.qk_norm = true;
        c.attn_output_gate = true;
    } else if (c.arch == "gemma3") {
        c.family = Family::Gemma3;
        c.rope_layout = RopeLayout::Halves;
        c.qk_norm = true;
        c.post_norms = true;
    } else if (c.arch == "qwen3moe") {
        c.family = Family::Qwen3Moe;
        c.rope_layout = RopeLayout::Halves;
        c.qk_norm = true;
    } else if (c.arch == "gpt-oss") {
        c.family = Family::GptOss;
        c.rope_layout = RopeLayout::Halves;
        c.qkv_bias = true;
    } else {
        throw ModelError(f.path() + ": architecture '" + c.arch +
                         "' is not supported (supported: llama, qwen2, qwen3, qwen3moe, lfm2, "
                         "qwen35, gemma3, gpt-oss)");
    }
    const std::string p = c.arch + ".";
    constexpr int64_t kMaxDim = 1 << 20;
    c.n_embd = positive(f, p + "embedding_length", require_int(f, p + "embedding_length"), kMaxDim);
    c.n_layer = positive(f, p + "block_count", require_int(f, p + "block_count"), 4096);
    c.n_ff =
        positive(f, p + "feed_forward_length", require_int(f, p + "feed_forward_length"), kMaxDim);
    c.n_head =
        positive(f, p + "attention.head_count", require_int(f, p + "attention.head_count"), 4096);
    c.n_head_kv = positive(f, p + "attention.head_count_kv", head_count_kv(f, p, c), c.n_head);
    if (c.n_head % c.n_head_kv != 0) {
        throw ModelError(f.path() + ": attention.head_count " + std::to_string(c.n_head) +
                         " is not a multiple of head_count_kv " + std::to_string(c.n_head_kv));
    }
    c.head_dim =
        positive(f, p + "attention.key_length",
                 f.get_int(p + "attention.key_length").value_or(c.n_embd / c.n_head), kMaxDim);
    c.value_dim = positive(f, p + "attention.value_length",
                           f.get_int(p + "attention.value_length").value_or(c.head_dim), kMaxDim);
    c.n_ctx_train = positive(f, p + "context_length",
                             f.get_int(p + "context_length").value_or(2048), int64_t{1} << 30);
    c.rms_eps = f.get_float(p + "attention.layer_norm_rms_epsilon").value_or(1e-5);
    c.rope_base = f.get_float(p + "rope.freq_base").value_or(10000.0);
    c.rope_dims = f.get_int(p + "rope.dimension_count").value_or(c.head_dim);
    if (c.rope_dims <= 0 || c.rope_dims > c.head_dim || c.rope_dims % 2 != 0) {
        throw ModelError(f.path() + ": rope.dimension_count " + std::to_string(c.rope_dims) +
                         " must be even and at most the head size " + std::to_string(c.head_dim));
    }
    if (auto scale_type = f.get_string(p + "rope.scaling.type")) {
        if (*scale_type == "linear") {
            double factor = f.get_float(p + "rope.scaling.factor").value_or(1.0);
            if (factor > 0) c.rope_freq_scale = 1.0 / factor;
        }
    }
    if (!(c.rms_eps > 0) || !(c.rope_base > 0)) {
        throw ModelError(f.path() + ": layer_norm_rms_epsilon and rope.freq_base must be > 0");
    }
    if (c.family == Family::Lfm2) {
        c.conv_kernel =
            positive(f, p + "shortconv.l_cache", require_int(f, p + "shortconv.l_cache"), 64);
    } else if (c.family == Family::Qwen35) {
        c.conv_kernel =
            positive(f, p + "ssm.conv_kernel", require_int(f, p + "ssm.conv_kernel"), 64);
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
    } else if (c.family == Family::Gemma3) {
        read_gemma3_config(f, c);
    } else if (c.family == Family::Qwen3Moe) {
        read_moe_config(f, c);
    } else if (c.family == Family::GptOss) {
        read_moe_config(f, c);
        read_gptoss_config(f, c);
    }
    return c;
}

// What a layer's tensors say it is: Attention or the family's recurrent kind when exactly
// one of the two kinds' projection tensors is present, nullopt when both or neither are.
std::optional<LayerKind> kind_from_tensors(const GgufFile& f, const ModelConfig& c, int64_t i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    const bool attn = f.find_tensor(b + "attn_q.weight") != nullptr;
    const LayerKind recurrent =
        c.family == Family::Lfm2 ? LayerKind::ShortConv : LayerKind::DeltaNet;
    const bool rec = f.find_tensor(b + (c.family == Family::Lfm2 ? "shortconv.in_proj.weight"
                                                                 : "attn_qkv.weight")) != nullptr;
    if (attn == rec) return std::nullopt;
    return attn ? LayerKind::Attention : recurrent;
}

// "1, 3": the layers marked true, or "(none)".
std::string layer_list(const std::vector<bool>& marked) {
    std::string s;
    for (size_t i = 0; i < marked.size(); ++i) {
        if (!marked[i]) continue;
        if (!s.empty()) s += ", ";
        s += std::to_string(i);
    }
    return s.empty() ? "(none)" : s;
}

// Decides each layer's kind for the hybrids (every layer of the other families is attention)
// and fills layer_kinds and kv_slot. The metadata states the kinds (lfm2: per-layer KV head
// counts, 0 for conv layers; qwen35: every full_attention_interval-th layer is attention), but
// converters write qwen35's as one interval whatever the HF model's pattern: where each layer's
// tensors show its kind unambiguously they win, and a disagreement becomes one warning naming
// the layers. A layer with both kinds' tensors is refused; one with neither takes the
// metadata's kind (binding then names the missing tensor).
void assign_layer_kinds(const GgufFile& f, ModelConfig& c, std::vector<std::string>& warnings) {
    const std::string p = c.arch + ".";
    c.layer_kinds.assign(static_cast<size_t>(c.n_layer), LayerKind::Attention);
    c.kv_slot.assign(static_cast<size_t>(c.n_layer), -1);
    c.n_kv_layers = 0;
    std::string meta_key;  // the key that states the kinds, empty if none does
    std::vector<bool> meta_attn(static_cast<size_t>(c.n_layer), true);
    if (c.family == Family::Lfm2) {
        const GgufArray* kv_heads = optional_array(f, p + "attention.head_count_kv");
        if (kv_heads && kv_heads->ints.size() == static_cast<size_t>(c.n_layer)) {
            meta_key = p + "attention.head_count_kv";
            for (size_t i = 0; i < meta_attn.size(); ++i) meta_attn[i] = kv_heads->ints[i] > 0;
        }
    } else if (c.family == Family::Qwen35) {
        const int64_t interval = f.get_int(p + "full_attention_interval").value_or(0);
        if (interval > 0) {
            meta_key = p + "full_attention_interval = " + std::to_string(interval);
            for (size_t i = 0; i < meta_attn.size(); ++i) {
                meta_attn[i] = (static_cast<int64_t>(i) + 1) % interval == 0;
            }
        }
    }
    std::vector<bool> attn(static_cast<size_t>(c.n_layer), false);  // the kinds chosen
    bool disagree = false;
    for (int64_t i = 0; i < c.n_layer; ++i) {
        const size_t li = static_cast<size_t>(i);
        LayerKind kind = LayerKind::Attention;
        if (is_hybrid(c.family)) {
            const std::optional<LayerKind> seen = kind_from_tensors(f, c, i);
            const std::string b = "blk." + std::to_string(i) + ".";
            if (!seen && f.find_tensor(b + "attn_q.weight")) {
                throw ModelError(f.path() + ": layer " + std::to_string(i) +
                                 " has both attention and recurrent tensors, so its kind is "
                                 "ambiguous");
            }
            const LayerKind meta_kind =
                meta_attn[li]
                    ? LayerKind::Attention
                    : (c.family == Family::Lfm2 ? LayerKind::ShortConv : LayerKind::DeltaNet);
            kind = seen.value_or(meta_kind);
            if (!meta_key.empty() && kind != meta_kind) disagree = true;
        }
        attn[li] = kind == LayerKind::Attention;
        c.layer_kinds[li] = kind;
        if (kind == LayerKind::Attention) c.kv_slot[li] = c.n_kv_layers++;
    }
    if (disagree) {
        warnings.push_back(f.path() + ": metadata '" + meta_key + "' makes layers " +
                           layer_list(meta_attn) + " attention, but the tensors make layers " +
                           layer_list(attn) +
                           " attention and the others recurrent: following the tensors");
    }
}

// Conv taps are stored [channels][K] (ne0 = K): kept as f32, a few KB per layer.
std::vector<float> conv_taps(const TensorBinder& bind, const std::string& name, int64_t channels,
                             int64_t kernel) {
    return bind.vector_2d(name, kernel, channels);
}

void bind_short_conv(const TensorBinder& bind, const std::string& b, const ModelConfig& c,
                     LayerWeights& L) {
    L.conv_in = bind.matrix(b + "shortconv.in_proj.weight", 3 * c.n_embd, c.n_embd);
    L.conv_taps = conv_taps(bind, b + "shortconv.conv.weight", c.n_embd, c.conv_kernel);
    L.conv_out = bind.matrix(b + "shortconv.out_proj.weight", c.n_embd, c.n_embd);
}

void bind_delta_net(const TensorBinder& bind, const std::string& b, const ModelConfig& c,
                    LayerWeights& L) {
    const int64_t inner = c.ssm_n_v_heads * c.ssm_v_dim;
    L.ssm_qkv = bind.matrix(b + "attn_qkv.weight", c.conv_channels(), c.n_embd);
    L.ssm_z = bind.matrix(b + "attn_gate.weight", inner, c.n_embd);
    L.ssm_alpha = bind.matrix(b + "ssm_alpha.weight", c.ssm_n_v_heads, c.n_embd);
    L.ssm_beta = bind.matrix(b + "ssm_beta.weight", c.ssm_n_v_heads, c.n_embd);
    L.ssm_a = bind.vector(b + "ssm_a", c.ssm_n_v_heads);
    L.ssm_dt_bias = bind.vector(b + "ssm_dt.bias", c.ssm_n_v_heads);
    L.conv_taps = conv_taps(bind, b + "ssm_conv1d.weight", c.conv_channels(), c.conv_kernel);
    L.ssm_norm = bind.vector(b + "ssm_norm.weight", c.ssm_v_dim);
    L.ssm_out = bind.matrix(b + "ssm_out.weight", c.n_embd, inner);
}

// One stacked expert tensor, [cols, rows_per_expert, n_expert] in GGUF order, as a matrix of
// n_expert * rows_per_expert rows. A count that disagrees with the metadata names the key.
MatrixView expert_matrix(const GgufFile& f, const TensorBinder& bind, const std::string& name,
                         int64_t rows_per_expert, const char* rows_key, int64_t cols,
                         const ModelConfig& c) {
    const GgufTensorInfo* t = bind.find(name);
    if (!t) throw ModelError(f.path() + ": missing tensor '" + name + "'");
    const std::string p = c.arch + ".";
    if (t->dims.size() != 3 || t->dims[2] != c.n_expert) {
        throw ModelError(f.path() + ": tensor '" + name + "' has shape " + shape_string(t->dims) +
                         ", but metadata '" + p + "expert_count' says " +
                         std::to_string(c.n_expert) + " experts");
    }
    if (t->dims[1] != rows_per_expert || t->dims[0] != cols) {
        throw ModelError(f.path() + ": tensor '" + name + "' has shape " + shape_string(t->dims) +
                         ", expected " + shape_string({cols, rows_per_expert, c.n_expert}) +
                         " (metadata '" + p + rows_key + "')");
    }
    MatrixView m;
    m.type = t->type;
    m.data = t->data;
    m.rows = rows_per_expert * c.n_expert;
    m.cols = cols;
    m.row_stride = row_bytes(type_info(t->type), static_cast<uint64_t>(cols));
    m.activations = bind.activations();
    return m;
}

void bind_moe(const GgufFile& f, const TensorBinder& bind, const std::string& b,
              const ModelConfig& c, LayerWeights& L) {
    const std::string router = b + "ffn_gate_inp.weight";
    const GgufTensorInfo* r = bind.find(router);
    if (r && (r->dims.size() != 2 || r->dims[1] != c.n_expert)) {
        throw ModelError(f.path() + ": tensor '" + router + "' has shape " + shape_string(r->dims) +
                         ", but metadata '" + c.arch + ".expert_count' says " +
                         std::to_string(c.n_expert) + " experts");
    }
    L.ffn_gate_inp = bind.matrix(router, c.n_expert, c.n_embd);
    L.gate_exps = expert_matrix(f, bind, b + "ffn_gate_exps.weight", c.n_ff_exp,
                                "expert_feed_forward_length", c.n_embd, c);
    L.up_exps = expert_matrix(f, bind, b + "ffn_up_exps.weight", c.n_ff_exp,
                              "expert_feed_forward_length", c.n_embd, c);
    L.down_exps = expert_matrix(f, bind, b + "ffn_down_exps.weight", c.n_embd, "embedding_length",
                                c.n_ff_exp, c);
    if (c.family == Family::GptOss) {  // biases on the router and every expert projection
        L.ffn_gate_inp_b = bind.vector(b + "ffn_gate_inp.bias", c.n_expert);
        L.gate_exps_b = bind.vector_2d(b + "ffn_gate_exps.bias", c.n_ff_exp, c.n_expert);
        L.up_exps_b = bind.vector_2d(b + "ffn_up_exps.bias", c.n_ff_exp, c.n_expert);
        L.down_exps_b = bind.vector_2d(b + "ffn_down_exps.bias", c.n_embd, c.n_expert);
    }
}

std::string compute_fingerprint(const GgufFile& f, const ModelConfig& c) {
    XXH3_state_t* st = XXH3_createState();
    XXH3_128bits_reset(st);
    auto add = [&](const void* p, size_t n) { XXH3_128bits_update(st, p, n); };
    auto add_str = [&](const std::string& s) {
        uint64_t n = s.size();
        add(&n, sizeof n);
        add(s.data(), s.size());
    };
    add_str(c.arch);
    const int64_t hp[] = {c.n_vocab,  c.n_embd,    c.n_layer, c.n_head,    c.n_head_kv,
                          c.head_dim, c.value_dim, c.n_ff,    c.rope_dims, c.tied_output};
    add(hp, sizeof hp);
    const double fp[] = {c.rms_eps, c.rope_base, c.rope_freq_scale};
    add(fp, sizeof fp);
    if (c.n_expert > 0) {  // only for MoE families, so the others keep their fingerprints
        const int64_t moe[] = {c.n_expert, c.n_expert_used, c.n_ff_exp, c.expert_weights_norm};
        add(moe, sizeof moe);
    }
    if (is_hybrid(c.family)) {  // only for hybrids, so other families keep their fingerprints
        const int64_t hy[] = {c.conv_kernel, c.ssm_n_k_heads, c.ssm_n_v_heads,
                              c.ssm_k_dim,   c.ssm_v_dim,     c.attn_output_gate};
        add(hy, sizeof hy);
        for (LayerKind k : c.layer_kinds) {
            const uint32_t v = static_cast<uint32_t>(k);
            add(&v, sizeof v);
        }
    }
    if (c.family == Family::Gemma3) {  // likewise only for gemma3
        const double g[] = {static_cast<double>(c.sliding_window), c.rope_base_local, c.attn_scale,
                            c.final_logit_softcap};
        add(g, sizeof g);
        for (bool slides : c.sliding) {
            const uint8_t v = slides ? 1 : 0;
            add(&v, sizeof v);
        }
    }
    if (c.family == Family::GptOss) {  // likewise only for gpt-oss
        const double g[] = {static_cast<double>(c.sliding_window),
                            c.rope_yarn_factor,
                            static_cast<double>(c.rope_yarn_orig_ctx),
                            c.rope_yarn_beta_fast,
                            c.rope_yarn_beta_slow,
                            c.attn_scale};
        add(g, sizeof g);
        for (bool slides : c.sliding) {
            const uint8_t v = slides ? 1 : 0;
            add(&v, sizeof v);
        }
    }
    for (const auto& t : f.tensors()) {
        add_str(t.name);
        uint32_t type = static_cast<uint32_t>(t.type);
        add(&type, sizeof type);
        add(t.dims.data(), t.dims.size() * sizeof(int64_t));
        // Sample the tensor bytes: its first and last 4 KiB and 16 evenly spaced 4 KiB
        // windows. Cheap on multi-GB files, and a re-quantized or fine-tuned file differs.
        const uint64_t win = 4096;
        if (t.n_bytes <= 18 * win) {
            add(t.data, t.n_bytes);
        } else {
            for (uint64_t i = 0; i < 18; ++i) {
                uint64_t off = (t.n_bytes - win) * i / 17;
                add(t.data + off, win);
            }
        }
    }
    // Tokenizer and template metadata change what prompts map to.
    for (const char* key :
         {"tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.chat_template"}) {
        if (auto s = f.get_string(key)) add_str(*s);
    }
    if (const GgufArray* toks = f.get_array("tokenizer.ggml.tokens")) {
        for (const auto& s : toks->strings) add_str(s);
    }
    if (const GgufArray* merges = f.get_array("tokenizer.ggml.merges")) {
        for (const auto& s : merges->strings) add_str(s);
    }
    XXH128_hash_t h = XXH3_128bits_digest(st);
    XXH3_freeState(st);
    char buf[33];
    std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(h.high64),
                  static_cast<unsigned long long>(h.low64));
    return buf;
}

// The matrices of a layer that every decode step multiplies, the MoE router and experts aside
// (zero-sized where the layer's kind has none). Layer: LayerWeights or const LayerWeights.
template <class Layer>
auto dense_decode_matrices(Layer& L) {
    return std::array{&L.wq,    &L.wk,        &L.wv,       &L.wo,       &L.w_gate,
                      &L.w_up,  &L.w_down,    &L.conv_in,  &L.conv_out, &L.ssm_qkv,
                      &L.ssm_z, &L.ssm_alpha, &L.ssm_beta, &L.ssm_out};
}

}  // namespace

std::string_view family_name(Family family) {
    switch (family) {
        case Family::Llama:
            return "llama";
        case Family::Qwen2:
            return "qwen2";
        case Family::Qwen3:
            return "qwen3";
        case Family::Lfm2:
            return "lfm2";
        case Family::Qwen35:
            return "qwen35";
        case Family::Gemma3:
            return "gemma3";
        case Family::Qwen3Moe:
            return "qwen3moe";
        case Family::GptOss:
            return "gpt-oss";
    }
    return "unknown";
}

bool is_hybrid(Family family) {
    return family == Family::Lfm2 || family == Family::Qwen35;
}

int64_t ModelConfig::conv_channels() const {
    if (family == Family::Qwen35) return 2 * ssm_n_k_heads * ssm_k_dim + ssm_n_v_heads * ssm_v_dim;
    if (family == Family::Lfm2) return n_embd;
    return 0;
}

Model::~Model() = default;

std::optional<ActivationChoice> parse_activation_choice(std::string_view text) {
    if (text == "auto") return ActivationChoice::Auto;
    if (text == "quantized" || text == "int8") return ActivationChoice::Quantized;
    if (text == "exact" || text == "f32") return ActivationChoice::Exact;
    return std::nullopt;
}

const char* activations_name(Activations activations) {
    return activations == Activations::Exact ? "exact (f32)" : "quantized (8-bit)";
}

Activations default_activations(const GgufFile& file) {
    // Gemma's residual stream carries activation outliers thousands of times its typical values;
    // 8-bit activation blocks lose the rest of a block next to one. On gemma-3-270m Q4_K_M that
    // cost up to 1.5 logits against the float64 reference (16-bit blocks: 6e-3), exact f32
    // activations 5e-6. The exact kernels cost compute, not bandwidth (on 2 Zen 4 cores, that
    // file: prefill 737 against 3125 tok/s, decode 76 against 127), which a small model can
    // spare and a large one cannot: Gemma files up to kExactAutoBytes of tensors take exact
    // activations by default, larger ones and the other families 8-bit (--activations decides).
    constexpr uint64_t kExactAutoBytes = uint64_t{2} << 30;
    const std::string arch = file.get_string("general.architecture").value_or("");
    const bool gemma = arch == "gemma" || arch == "gemma2" || arch == "gemma3";
    uint64_t tensor_bytes = 0;
    for (const GgufTensorInfo& t : file.tensors()) tensor_bytes += t.n_bytes;
    return gemma && tensor_bytes <= kExactAutoBytes ? Activations::Exact : Activations::Quantized;
}

std::unique_ptr<Model> Model::load(const std::string& path, const LoadOptions& options) {
    std::unique_ptr<Model> m(new Model());
    m->file_ = GgufFile::open(path);
    const GgufFile& f = *m->file_;
    if (f.tensors().empty()) {
        throw ModelError(path +
                         ": the file has no tensors: it holds a vocabulary only (enough "
                         "to tokenize, not to run)");
    }
    ModelConfig& c = m->config_;
    c = read_config(f);
    m->tokenizer_ = std::make_unique<Tokenizer>(f);

    m->activations_ = options.activations == ActivationChoice::Auto
                          ? default_activations(f)
                          : (options.activations == ActivationChoice::Exact ? Activations::Exact
                                                                            : Activations::Quantized);
    TensorBinder bind(f, m->activations_);
    const GgufTensorInfo* embd = bind.find("token_embd.weight");
    if (!embd) throw ModelError(path + ": missing tensor 'token_embd.weight'");
    if (embd->dims.size() < 2) {
        throw ModelError(path + ": tensor 'token_embd.weight' has shape " +
                         shape_string(embd->dims) + ", expected 2 dimensions");
    }
    c.n_vocab = embd->dims[1];
    if (c.n_vocab != static_cast<int64_t>(m->tokenizer_->vocab_size())) {
        throw ModelError(path + ": token_embd.weight has " + std::to_string(c.n_vocab) +
                         " rows but the tokenizer has " +
                         std::to_string(m->tokenizer_->vocab_size()) + " tokens");
    }
    m->token_embd_ = bind.matrix("token_embd.weight", c.n_vocab, c.n_embd);
    // lfm2's final norm is named after the embedding (the converter's name for it).
    m->output_norm_ = c.family == Family::Lfm2 ? bind.vector("token_embd_norm.weight", c.n_embd)
                                               : bind.vector("output_norm.weight", c.n_embd);
    assign_layer_kinds(f, c, m->load_warnings_);
    c.tied_output = bind.find("output.weight") == nullptr;
    m->output_ = c.tied_output ? m->token_embd_ : bind.matrix("output.weight", c.n_vocab, c.n_embd);
    const std::vector<float> factors = bind.optional_vector("rope_freqs.weight", c.rope_dims / 2);
    for (int64_t i = 0; i < c.rope_dims / 2; ++i) {
        double freq =
            std::pow(c.rope_base, -2.0 * static_cast<double>(i) / static_cast<double>(c.rope_dims));
        if (!factors.empty()) freq /= factors[static_cast<size_t>(i)];
        m->rope_inv_freq_.push_back(freq);
        if (c.local_rope) {
            m->rope_inv_freq_local_.push_back(
                std::pow(c.rope_base_local,
                         -2.0 * static_cast<double>(i) / static_cast<double>(c.rope_dims)));
        }
    }
    if (c.rope_yarn_factor > 0) m->rope_inv_freq_ = yarn_inv_freq(c);

    // The gated attention of qwen35 projects a query and a gate per head.
    const int64_t q_dim = c.n_head * c.head_dim * (c.attn_output_gate ? 2 : 1);
    const int64_t k_dim = c.n_head_kv * c.head_dim;
    const int64_t v_dim = c.n_head_kv * c.value_dim;
    m->layers_.resize(static_cast<size_t>(c.n_layer));
    for (int64_t i = 0; i < c.n_layer; ++i) {
        const std::string b = "blk." + std::to_string(i) + ".";
        LayerWeights& L = m->layers_[static_cast<size_t>(i)];
        L.kind =
            c.layer_kinds.empty() ? LayerKind::Attention : c.layer_kinds[static_cast<size_t>(i)];
        L.attn_norm = bind.vector(b + "attn_norm.weight", c.n_embd);
        // qwen35 names the norm before the FFN after its place, behind the mixer.
        // So does gpt-oss's converter.
        const std::string ffn_norm_name = c.family == Family::Qwen35 || c.family == Family::GptOss
                                              ? "post_attention_norm.weight"
                                              : "ffn_norm.weight";
        L.ffn_norm = bind.vector(b + ffn_norm_name, c.n_embd);
        if (c.post_norms) {  // gemma3: the norm after attention keeps the qwen35 name
            L.post_attn_norm = bind.vector(b + "post_attention_norm.weight", c.n_embd);
            L.post_ffn_norm = bind.vector(b + "post_ffw_norm.weight", c.n_embd);
        }
        // qwen3moe: a layer with a router is sparse, one without (mlp_only_layers) dense;
        // every gpt-oss layer is sparse (binding names a missing router or expert tensor).
        if (c.n_expert > 0 && (c.family == Family::GptOss || bind.find(b + "ffn_gate_inp.weight") ||
                               bind.find(b + "ffn_gate_exps.weight"))) {
            bind_moe(f, bind, b, c, L);
        } else {
            L.w_gate = bind.matrix(b + "ffn_gate.weight", c.n_ff, c.n_embd);
            L.w_up = bind.matrix(b + "ffn_up.weight", c.n_ff, c.n_embd);
            L.w_down = bind.matrix(b + "ffn_down.weight", c.n_embd, c.n_ff);
        }
        if (L.kind == LayerKind::ShortConv) {
            bind_short_conv(bind, b, c, L);
            continue;
        }
        if (L.kind == LayerKind::DeltaNet) {
            bind_delta_net(bind, b, c, L);
            continue;
        }
        L.wq = bind.matrix(b + "attn_q.weight", q_dim, c.n_embd);
        L.wk = bind.matrix(b + "attn_k.weight", k_dim, c.n_embd);
        L.wv = bind.matrix(b + "attn_v.weight", v_dim, c.n_embd);
        L.wo = bind.matrix(b + "attn_output.weight", c.n_embd, c.n_head * c.value_dim);
        if (c.qkv_bias) {
            L.bq = bind.vector(b + "attn_q.bias", q_dim);
            L.bk = bind.vector(b + "attn_k.bias", k_dim);
            L.bv = bind.vector(b + "attn_v.bias", v_dim);
        }
        if (c.qk_norm) {
            L.q_norm = bind.vector(b + "attn_q_norm.weight", c.head_dim);
            L.k_norm = bind.vector(b + "attn_k_norm.weight", c.head_dim);
        }
        if (c.family == Family::GptOss) {
            L.bo = bind.vector(b + "attn_output.bias", c.n_embd);
            L.attn_sinks = bind.vector(b + "attn_sinks.weight", c.n_head);
        }
    }
    m->fingerprint_ = compute_fingerprint(f, c);  // from the file's bytes, before any rewrite
    if (options.weight_panels) m->write_weight_panels();
    // The tokenizer holds its own copy of the vocabulary; the parsed metadata's would only
    // count against the memory bound (peak RSS <= file + state + 64 MiB).
    for (const char* key : {"tokenizer.ggml.tokens", "tokenizer.ggml.merges",
                            "tokenizer.ggml.scores", "tokenizer.ggml.token_type"}) {
        m->file_->drop_metadata(key);
    }
    return m;
}

void Model::write_weight_panels() {
    const KernelTable& table = active_kernels();
    // Every dense matrix of the decode step that can take the layout, the tied output once (its
    // embedding view follows it). MoE experts keep the file's layout: in panels, Qwen3-30B-A3B
    // Q4_K_M decoded no faster (16-core Xeon, 1/4/16 threads: 5.95/19.7/37.2 tok/s against
    // 6.09/19.3/40.4 in rows) and the copy made every expert resident (17.8 GB against 13.7 GB
    // for the experts a short run touches).
    std::vector<MatrixView*> views;
    if (can_use_panels16(output_, table)) views.push_back(&output_);
    for (auto& L : layers_) {
        for (MatrixView* w : dense_decode_matrices(L)) {
            if (w->data != nullptr && can_use_panels16(*w, table)) views.push_back(w);
        }
    }
    auto bytes_of = [](const MatrixView* w) {
        return (static_cast<size_t>(w->rows) * w->row_stride + 63) / 64 * 64;
    };
    size_t total = 0;
    for (const MatrixView* w : views) total += bytes_of(w);
    if (total == 0) return;
    // Anonymous memory on huge pages: filling it costs a fault per 2 MiB, where rewriting the
    // mapping in place (copy-on-write) cost one per 4 KiB: 5.6 s more to load an 8B Q4_K_M.
    weight_panels_ = PageRegion(total, /*huge=*/true);
    const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    // Rows per step: the file pages of a step leave the resident set before the next is read,
    // so the rewrite never holds more than a step's bytes twice (peak RSS stays file + KV + a
    // little, as for the row layout).
    constexpr size_t kStepBytes = size_t{16} << 20;
    uint8_t* dst = weight_panels_.data();
    for (MatrixView* w : views) {
        const auto* src = static_cast<const uint8_t*>(w->data);
        const int64_t step =
            std::max<int64_t>(1, static_cast<int64_t>(kStepBytes / (kPanelRows * w->row_stride))) *
            kPanelRows;
        for (int64_t r = 0; r < w->rows; r += step) {
            const int64_t n = std::min(step, w->rows - r);
            const size_t at = static_cast<size_t>(r) * w->row_stride;
            write_panels16(src + at, dst + at, n, w->row_stride, type_info(w->type).block_bytes,
                           threads);
            file_->release(src + at, static_cast<size_t>(n) * w->row_stride);
        }
        const bool tied_embedding = w == &output_ && config_.tied_output;
        w->data = dst;
        w->layout = WeightLayout::Panels16;
        if (tied_embedding) token_embd_ = *w;
        dst += bytes_of(w);
    }
}

template <class F>
void Model::for_each_decode_matrix(F&& f) const {
    f(output_);
    for (const auto& L : layers_) {
        for (const MatrixView* w : dense_decode_matrices(L)) f(*w);
        f(L.ffn_gate_inp);
    }
}

template <class F>
void Model::for_each_decode_expert_share(F&& f) const {
    if (config_.n_expert <= 0) return;
    for (const auto& L : layers_) {
        if (!L.moe()) continue;
        for (const MatrixView* w : {&L.gate_exps, &L.up_exps, &L.down_exps}) {
            // The chosen experts' rows: n_expert_used of n_expert equal slices.
            f(*w, w->rows / config_.n_expert * config_.n_expert_used);
        }
    }
}

uint64_t Model::weight_bytes_per_token() const {
    uint64_t total = token_embd_.row_stride;  // one embedding row
    auto add = [&](const MatrixView& w, int64_t rows) {
        total += static_cast<uint64_t>(rows) * w.row_stride;
    };
    for_each_decode_matrix([&](const MatrixView& w) { add(w, w.rows); });
    for_each_decode_expert_share(add);
    return total;
}

uint64_t Model::weight_elements_per_token() const {
    uint64_t total = static_cast<uint64_t>(token_embd_.cols);
    auto add = [&](const MatrixView& w, int64_t rows) {
        total += static_cast<uint64_t>(rows * w.cols);
    };
    for_each_decode_matrix([&](const MatrixView& w) { add(w, w.rows); });
    for_each_decode_expert_share(add);
    return total;
}

}  // namespace ember
