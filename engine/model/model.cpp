// Model loading: read hyper-parameters from metadata, find every tensor the family needs,
// check its shape and type, and point MatrixViews into the mmap.
#include "engine/model/model.h"

#include <xxhash.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numbers>
#include <optional>
#include <sstream>

#include "engine/model/binder.h"
#include "engine/model/family.h"
#include "engine/tensor/panels16.h"
#include "engine/tensor/traits.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/util/fan_out.h"

namespace ember {

namespace {

// attention.head_count_kv is a number, or (lfm2) one number per layer with 0 for the layers
// without attention; every attention layer must then have the same count.
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

ModelConfig read_config(const GgufFile& f) {
    ModelConfig c;
    auto arch = f.get_string("general.architecture");
    if (!arch) throw ModelError(f.path() + ": missing metadata 'general.architecture'");
    c.arch = *arch;
    const FamilySpec* spec = find_family(c.arch);
    if (spec == nullptr) {
        throw ModelError(f.path() + ": architecture '" + c.arch +
                         "' is not supported (supported: " + supported_architectures() + ")");
    }
    c.family = spec->family;
    c.rope_layout = spec->rope_layout;
    c.qkv_bias = spec->qkv_bias;
    c.qk_norm = spec->qk_norm;
    c.attn_output_gate = spec->attn_output_gate;
    c.post_norms = spec->post_norms;
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
    if (spec->read_config != nullptr) spec->read_config(f, c);
    return c;
}

// What a layer's tensors say it is: Attention or the family's recurrent kind when exactly
// one of the two kinds' projection tensors is present, nullopt when both or neither are.
std::optional<LayerKind> kind_from_tensors(const GgufFile& f, const FamilySpec& spec, int64_t i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    const bool attn = f.find_tensor(b + "attn_q.weight") != nullptr;
    const bool rec = f.find_tensor(b + std::string(spec.recurrent_tensor)) != nullptr;
    if (attn == rec) return std::nullopt;
    return attn ? LayerKind::Attention : spec.recurrent_kind;
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
    const FamilySpec& spec = family_spec(c.family);
    c.layer_kinds.assign(static_cast<size_t>(c.n_layer), LayerKind::Attention);
    c.kv_slot.assign(static_cast<size_t>(c.n_layer), -1);
    c.n_kv_layers = 0;
    std::string meta_key;  // the key that states the kinds, empty if none does
    std::vector<bool> meta_attn(static_cast<size_t>(c.n_layer), true);
    if (spec.metadata_attention != nullptr) spec.metadata_attention(f, c, meta_key, meta_attn);
    const bool hybrid = spec.recurrent_kind != LayerKind::Attention;
    std::vector<bool> attn(static_cast<size_t>(c.n_layer), false);  // the kinds chosen
    bool disagree = false;
    for (int64_t i = 0; i < c.n_layer; ++i) {
        const size_t li = static_cast<size_t>(i);
        LayerKind kind = LayerKind::Attention;
        if (hybrid) {
            const std::optional<LayerKind> seen = kind_from_tensors(f, spec, i);
            const std::string b = "blk." + std::to_string(i) + ".";
            if (!seen && f.find_tensor(b + "attn_q.weight")) {
                throw ModelError(f.path() + ": layer " + std::to_string(i) +
                                 " has both attention and recurrent tensors, so its kind is "
                                 "ambiguous");
            }
            const LayerKind meta_kind = meta_attn[li] ? LayerKind::Attention : spec.recurrent_kind;
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
    // A family's own hyper-parameters (only for the families that have any, so the others
    // keep their fingerprints).
    if (const FamilySpec& spec = family_spec(c.family); spec.fingerprint != nullptr) {
        std::vector<uint8_t> bytes;
        spec.fingerprint(c, bytes);
        add(bytes.data(), bytes.size());
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

// The tensors of layer i: norms, the FFN (dense or experts), attention for attention layers,
// then the family's own.
void bind_layer(const TensorBinder& bind, const FamilySpec& spec, const ModelConfig& c, int64_t i,
                LayerWeights& L) {
    const std::string b = "blk." + std::to_string(i) + ".";
    L.kind = c.layer_kinds[static_cast<size_t>(i)];
    L.attn_norm = bind.vector(b + "attn_norm.weight", c.n_embd);
    L.ffn_norm = bind.vector(b + std::string(spec.ffn_norm), c.n_embd);
    if (c.post_norms) {  // gemma3: the norm after attention keeps the qwen35 name
        L.post_attn_norm = bind.vector(b + "post_attention_norm.weight", c.n_embd);
        L.post_ffn_norm = bind.vector(b + "post_ffw_norm.weight", c.n_embd);
    }
    // qwen3moe: a layer with a router is sparse, one without (mlp_only_layers) dense; every
    // gpt-oss layer is sparse (binding names a missing router or expert tensor).
    if (c.n_expert > 0 && (spec.every_layer_moe || bind.find(b + "ffn_gate_inp.weight") ||
                           bind.find(b + "ffn_gate_exps.weight"))) {
        bind_moe(bind.file(), bind, b, c, L);
    } else {
        L.w_gate = bind.matrix(b + "ffn_gate.weight", c.n_ff, c.n_embd);
        L.w_up = bind.matrix(b + "ffn_up.weight", c.n_ff, c.n_embd);
        L.w_down = bind.matrix(b + "ffn_down.weight", c.n_embd, c.n_ff);
    }
    if (L.kind == LayerKind::Attention) {
        // The gated attention of qwen35 projects a query and a gate per head.
        const int64_t q_dim = c.n_head * c.head_dim * (c.attn_output_gate ? 2 : 1);
        const int64_t k_dim = c.n_head_kv * c.head_dim;
        const int64_t v_dim = c.n_head_kv * c.value_dim;
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
    }
    if (spec.bind_layer != nullptr) spec.bind_layer(bind, b, c, L);
}

// YaRN (HF's "yarn" rope type; see families/gptoss.cpp): pair i of d rotated dimensions
// rotates with interp_i * ramp_i + extrap_i * (1 - ramp_i), extrap_i = base^(-2i/d),
// interp_i = extrap_i / factor, ramp_i = clamp((i - low) / (high - low), 0, 1).
std::vector<double> yarn_inv_freq(const ModelConfig& c) {
    const int64_t half = c.rope_dims / 2;
    const double dims = static_cast<double>(c.rope_dims);
    std::vector<double> inv_freq(static_cast<size_t>(half));
    // The dimension at which a pair makes `rotations` turns over the original context.
    auto correction_dim = [&](double rotations) {
        return dims *
               std::log(static_cast<double>(c.rope_yarn_orig_ctx) /
                        (rotations * 2.0 * std::numbers::pi)) /
               (2.0 * std::log(c.rope_base));
    };
    const double low = std::max(0.0, correction_dim(c.rope_yarn_beta_fast));
    double high = std::min(dims - 1.0, correction_dim(c.rope_yarn_beta_slow));
    if (high == low) high += 0.001;  // as HF: no division by zero
    for (int64_t i = 0; i < half; ++i) {
        const double extrap = std::pow(c.rope_base, -2.0 * static_cast<double>(i) / dims);
        const double interp = extrap / c.rope_yarn_factor;
        const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
        inv_freq[static_cast<size_t>(i)] = interp * ramp + extrap * (1.0 - ramp);
    }
    return inv_freq;
}

// RoPE's angular frequency of each rotated pair [rope_dims/2]: base^(-2i/rope_dims), divided
// by llama 3's per-dimension long-context factors when the file has them; YaRN's when the
// file says so.
std::vector<double> rope_frequencies(const ModelConfig& c, const std::vector<float>& factors) {
    if (c.rope_yarn_factor > 0) return yarn_inv_freq(c);
    std::vector<double> inv_freq;
    for (int64_t i = 0; i < c.rope_dims / 2; ++i) {
        double freq =
            std::pow(c.rope_base, -2.0 * static_cast<double>(i) / static_cast<double>(c.rope_dims));
        if (!factors.empty()) freq /= factors[static_cast<size_t>(i)];
        inv_freq.push_back(freq);
    }
    return inv_freq;
}

// gemma3's sliding layers: the local base, without scaling factors.
std::vector<double> local_rope_frequencies(const ModelConfig& c) {
    std::vector<double> inv_freq;
    for (int64_t i = 0; i < c.rope_dims / 2; ++i) {
        inv_freq.push_back(std::pow(
            c.rope_base_local, -2.0 * static_cast<double>(i) / static_cast<double>(c.rope_dims)));
    }
    return inv_freq;
}

}  // namespace

int64_t ModelConfig::conv_channels() const {
    if (ssm_n_v_heads > 0) return 2 * ssm_n_k_heads * ssm_k_dim + ssm_n_v_heads * ssm_v_dim;
    if (conv_kernel > 0) return n_embd;  // lfm2's conv runs over the embedding
    return 0;
}

Model::~Model() = default;

std::optional<ActivationChoice> parse_activation_choice(std::string_view text) {
    if (text == "auto") return ActivationChoice::Auto;
    if (text == "quantized" || text == "int8") return ActivationChoice::Quantized;
    if (text == "exact" || text == "f32") return ActivationChoice::Exact;
    if (text == "wide" || text == "16-bit" || text == "int16") return ActivationChoice::Wide;
    return std::nullopt;
}

const char* activations_name(Activations activations) {
    switch (activations) {
        case Activations::Exact:
            return "exact (f32)";
        case Activations::Wide:
            return "wide (16-bit)";
        case Activations::Quantized:
            break;
    }
    return "quantized (8-bit)";
}

Activations default_activations(const GgufFile& file) {
    // Faithful by default, for every family. Trained models' residual streams carry activation
    // outliers (Gemma's thousands of times its typical values, SmolLM2's hundreds): an 8-bit
    // block of 32 next to one loses the rest of its values. Against HF float64 on real weights
    // 8-bit blocks measured up to 1.3-1.9 logits (median ~0.09, the first answer token flipped
    // on SmolLM2-135M-Instruct), as the reference engine does; 16-bit blocks ~1e-2 (median
    // ~1e-4); exact f32 5e-5. With VNNI the 16-bit blocks cost two vpdpbusd per four products
    // (about half the 8-bit speed, twice exact f32's); without it (AVX2 only) the byte planes
    // would go through vpmaddubsw's saturating pairs, so exact f32 (two fma ports, the same
    // products per instruction as widened int16) is the faster faithful path there.
    // docs/engine.md ("Real weights") has the measurements; --activations quantized remains.
    (void)file;
    return active_kernels().wide_simd ? Activations::Wide : Activations::Exact;
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

    m->activations_ = options.activations == ActivationChoice::Auto    ? default_activations(f)
                      : options.activations == ActivationChoice::Exact ? Activations::Exact
                      : options.activations == ActivationChoice::Wide  ? Activations::Wide
                                                                       : Activations::Quantized;
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
    const FamilySpec& spec = family_spec(c.family);
    m->output_norm_ = bind.vector(std::string(spec.output_norm), c.n_embd);
    assign_layer_kinds(f, c, m->load_warnings_);
    c.tied_output = bind.find("output.weight") == nullptr;
    m->output_ = c.tied_output ? m->token_embd_ : bind.matrix("output.weight", c.n_vocab, c.n_embd);
    const std::vector<float> factors = bind.optional_vector("rope_freqs.weight", c.rope_dims / 2);
    m->rope_inv_freq_ = rope_frequencies(c, factors);
    if (c.local_rope) m->rope_inv_freq_local_ = local_rope_frequencies(c);
    m->layers_.resize(static_cast<size_t>(c.n_layer));
    for (int64_t i = 0; i < c.n_layer; ++i) {
        bind_layer(bind, spec, c, i, m->layers_[static_cast<size_t>(i)]);
    }
    m->fingerprint_ = compute_fingerprint(f, c);  // from the file's bytes, before any rewrite
    if (options.stop && options.stop()) throw LoadStopped(path);
    if (options.weight_panels) m->write_weight_panels(options.stop);
    // The tokenizer holds its own copy of the vocabulary; the parsed metadata's would only
    // count against the memory bound (peak RSS <= file + state + 64 MiB).
    for (const char* key : {"tokenizer.ggml.tokens", "tokenizer.ggml.merges",
                            "tokenizer.ggml.scores", "tokenizer.ggml.token_type"}) {
        m->file_->drop_metadata(key);
    }
    return m;
}

void Model::write_weight_panels(const std::function<bool()>& stop) {
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
    const int threads = fan_out_threads();
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
            if (stop && stop()) throw LoadStopped(file_->path());
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
