#include "engine/synth/synth.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <memory>
#include <stdexcept>

#include "engine/gguf/gguf.h"
#include "engine/tensor/traits.h"
#include "engine/util/thread_pool.h"

namespace ember {

namespace {

// Values per generation task: large enough that handing out a task costs nothing next to
// the work, small enough that each worker's float scratch (512 KiB) stays in L2.
constexpr int64_t kTaskElems = int64_t{1} << 17;

constexpr std::array<SynthShape, 10> kShapes = {{
    {.name = "smollm2-135m",
     .arch = "llama",
     .display_name = "SmolLM2 135M (synthetic random weights)",
     .size_label = "135M",
     .vocab_hint = "a GGUF with the SmolLM2 tokenizer, e.g. fixtures/arch/llama/llama.gguf",
     .n_vocab = 49152,
     .n_embd = 576,
     .n_layer = 30,
     .n_head = 9,
     .n_head_kv = 3,
     .head_dim = 64,
     .n_ff = 1536,
     .n_ctx_train = 8192,
     .rope_base = 100000.0,
     .rms_eps = 1e-5,
     .qk_norm = false,
     .tied_output = true},
    {.name = "qwen3-0.6b",
     .arch = "qwen3",
     .display_name = "Qwen3 0.6B (synthetic random weights)",
     .size_label = "0.6B",
     .vocab_hint = "a GGUF with the Qwen3 tokenizer, e.g. fixtures/arch/qwen3/qwen3.gguf",
     .n_vocab = 151936,
     .n_embd = 1024,
     .n_layer = 28,
     .n_head = 16,
     .n_head_kv = 8,
     .head_dim = 128,
     .n_ff = 3072,
     .n_ctx_train = 40960,
     .rope_base = 1000000.0,
     .rms_eps = 1e-6,
     .qk_norm = true,
     .tied_output = true},
    {.name = "qwen3-1.7b",
     .arch = "qwen3",
     .display_name = "Qwen3 1.7B (synthetic random weights)",
     .size_label = "1.7B",
     .vocab_hint = "a GGUF with the Qwen3 tokenizer, e.g. fixtures/arch/qwen3/qwen3.gguf",
     .n_vocab = 151936,
     .n_embd = 2048,
     .n_layer = 28,
     .n_head = 16,
     .n_head_kv = 8,
     .head_dim = 128,
     .n_ff = 6144,
     .n_ctx_train = 40960,
     .rope_base = 1000000.0,
     .rms_eps = 1e-6,
     .qk_norm = true,
     .tied_output = true},
    {.name = "qwen3-4b",
     .arch = "qwen3",
     .display_name = "Qwen3 4B (synthetic random weights)",
     .size_label = "4B",
     .vocab_hint = "a GGUF with the Qwen3 tokenizer, e.g. fixtures/arch/qwen3/qwen3.gguf",
     .n_vocab = 151936,
     .n_embd = 2560,
     .n_layer = 36,
     .n_head = 32,
     .n_head_kv = 8,
     .head_dim = 128,
     .n_ff = 9728,
     .n_ctx_train = 40960,
     .rope_base = 1000000.0,
     .rms_eps = 1e-6,
     .qk_norm = true,
     .tied_output = true},
    // Llama 3.1's llama3 rope scaling (rope_freqs.weight) changes no cost, so it is left out.
    {.name = "llama-3.1-8b",
     .arch = "llama",
     .display_name = "Llama 3.1 8B (synthetic random weights)",
     .size_label = "8B",
     .vocab_hint = "a GGUF with the Llama 3 tokenizer, e.g. fixtures/arch/lfm2/lfm2.gguf",
     .n_vocab = 128256,
     .n_embd = 4096,
     .n_layer = 32,
     .n_head = 32,
     .n_head_kv = 8,
     .head_dim = 128,
     .n_ff = 14336,
     .n_ctx_train = 131072,
     .rope_base = 500000.0,
     .rms_eps = 1e-5,
     .qk_norm = false,
     .tied_output = false},
    // The published Qwen3-30B-A3B config: 48 layers, each FFN 128 experts of 768 of which a
    // token uses 8 (about 3.3B of the 30.5B weights per token), untied output.
    {.name = "qwen3-30b-a3b",
     .arch = "qwen3moe",
     .display_name = "Qwen3 30B A3B (synthetic random weights)",
     .size_label = "30B-A3B",
     .vocab_hint = "a GGUF with the Qwen3 tokenizer, e.g. fixtures/arch/qwen3/qwen3.gguf",
     .n_vocab = 151936,
     .n_embd = 2048,
     .n_layer = 48,
     .n_head = 32,
     .n_head_kv = 4,
     .head_dim = 128,
     .n_ff = 6144,
     .n_ctx_train = 40960,
     .rope_base = 1000000.0,
     .rms_eps = 1e-6,
     .qk_norm = true,
     .tied_output = false,
     .n_expert = 128,
     .n_expert_used = 8,
     .n_ff_exp = 768},
    // The published Gemma 3 1B text config: 26 layers of which every 6th is global, the others
    // slide over 512 positions; 4 heads on 1 KV head of 256; tied output. Its 1152-wide rows
    // hold no whole K-quant super-block, so the reference's fallbacks (Q5_0, Q8_0) apply.
    {.name = "gemma3-1b",
     .arch = "gemma3",
     .display_name = "Gemma 3 1B (synthetic random weights)",
     .size_label = "1B",
     .vocab_hint = "a GGUF with the Gemma 3 vocabulary, e.g. fixtures/arch/gemma3/gemma3.gguf",
     .n_vocab = 262144,
     .n_embd = 1152,
     .n_layer = 26,
     .n_head = 4,
     .n_head_kv = 1,
     .head_dim = 256,
     .n_ff = 6912,
     .n_ctx_train = 32768,
     .rope_base = 1000000.0,
     .rms_eps = 1e-6,
     .qk_norm = true,
     .tied_output = true,
     .pad_vocab = true,
     .sliding_window = 512},
    // The published Gemma 3 4B text config: 34 layers (every 6th global), window 1024, 8 heads
    // on 4 KV heads of 256, global layers with linear RoPE scaling x8; 262208-token vocabulary
    // (the 262144 of the tokenizer plus image tokens), tied output.
    {.name = "gemma3-4b",
     .arch = "gemma3",
     .display_name = "Gemma 3 4B (synthetic random weights)",
     .size_label = "4B",
     .vocab_hint = "a GGUF with the Gemma 3 vocabulary, e.g. fixtures/arch/gemma3/gemma3.gguf",
     .n_vocab = 262208,
     .n_embd = 2560,
     .n_layer = 34,
     .n_head = 8,
     .n_head_kv = 4,
     .head_dim = 256,
     .n_ff = 10240,
     .n_ctx_train = 131072,
     .rope_base = 1000000.0,
     .rms_eps = 1e-6,
     .qk_norm = true,
     .tied_output = true,
     .pad_vocab = true,
     .sliding_window = 1024,
     .rope_scale_linear = 8.0},
    // The published Qwen3.5-0.8B text config: 24 layers, three GatedDeltaNet layers to one
    // gated attention layer; 248320-token vocabulary (padded when the source is smaller).
    {.name = "qwen3.5-0.8b",
     .arch = "qwen35",
     .display_name = "Qwen3.5 0.8B (synthetic random weights)",
     .size_label = "0.8B",
     .vocab_hint = "a GGUF with the Qwen3.5 tokenizer, or any Qwen vocabulary (padded)",
     .n_vocab = 248320,
     .n_embd = 1024,
     .n_layer = 24,
     .n_head = 8,
     .n_head_kv = 2,
     .head_dim = 256,
     .n_ff = 3584,
     .n_ctx_train = 262144,
     .rope_base = 10000000.0,
     .rms_eps = 1e-6,
     .qk_norm = true,
     .tied_output = true,
     .pad_vocab = true,
     .full_attention_interval = 4,
     .rope_dims = 64,
     .ssm_conv_kernel = 4,
     .ssm_n_k_heads = 16,
     .ssm_n_v_heads = 16,
     .ssm_k_dim = 128,
     .ssm_v_dim = 128},
    // The published gpt-oss-20b config: 24 layers alternating a 128-position window and full
    // attention, 64 query heads on 8 KV heads of 64, 32 experts of 2880 of which a token uses
    // 4, YaRN x32 over 4096 positions, untied output; the o200k harmony vocabulary of 201088
    // (padded from the fixture's 200019). MXFP4 experts make it ~12 GB, as the published file.
    {.name = "gpt-oss-20b",
     .arch = "gpt-oss",
     .display_name = "gpt-oss 20B (synthetic random weights)",
     .size_label = "20B",
     .vocab_hint = "a GGUF with the o200k harmony tokenizer, e.g. fixtures/arch/gptoss/gptoss.gguf",
     .n_vocab = 201088,
     .n_embd = 2880,
     .n_layer = 24,
     .n_head = 64,
     .n_head_kv = 8,
     .head_dim = 64,
     .n_ff = 2880,
     .n_ctx_train = 131072,
     .rope_base = 150000.0,
     .rms_eps = 1e-5,
     .qk_norm = false,
     .tied_output = false,
     .pad_vocab = true,
     .n_expert = 32,
     .n_expert_used = 4,
     .n_ff_exp = 2880,
     .sliding_window = 128,
     .rope_yarn_factor = 32.0,
     .rope_yarn_orig_ctx = 4096},
}};

// general.file_type values are the reference engine's llama_ftype numbers.
constexpr std::array<SynthRecipeInfo, 9> kRecipes = {{
    {SynthRecipe::F16, "f16", TensorType::F16, 1},
    {SynthRecipe::BF16, "bf16", TensorType::BF16, 32},
    {SynthRecipe::Q8_0, "q8_0", TensorType::Q8_0, 7},
    {SynthRecipe::Q4_0, "q4_0", TensorType::Q4_0, 2},
    {SynthRecipe::Q4_K_M, "q4_k_m", TensorType::Q4_K, 15},
    {SynthRecipe::IQ4_XS, "iq4_xs", TensorType::IQ4_XS, 30},
    {SynthRecipe::IQ3_S, "iq3_s", TensorType::IQ3_S, 26},
    {SynthRecipe::IQ3_M, "iq3_m", TensorType::IQ3_S, 27},
    {SynthRecipe::MXFP4, "mxfp4", TensorType::MXFP4, 38},
}};

bool ends_with(std::string_view s, std::string_view suffix) {
    return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// The reference converter's "use more bits" layer pattern for Q4_K_M / Q5_K_M.
bool use_more_bits(int64_t layer, int64_t n_layer) {
    return layer < n_layer / 8 || layer >= 7 * n_layer / 8 || (layer - n_layer / 8) % 3 == 2;
}

// The type the reference uses when a row cannot hold whole blocks of `t`.
TensorType fallback_type(TensorType t) {
    switch (t) {
        case TensorType::Q2_K:
        case TensorType::Q3_K:
        case TensorType::IQ3_S:
        case TensorType::IQ4_XS:
            return TensorType::IQ4_NL;
        case TensorType::Q4_K:
            return TensorType::Q5_0;
        case TensorType::Q5_K:
            return TensorType::Q5_1;
        case TensorType::Q6_K:
            return TensorType::Q8_0;
        default:
            return TensorType::F16;
    }
}

bool fits_row(TensorType t, int64_t row_len) {
    return row_len % type_info(t).block_elems == 0;
}

// splitmix64's output function: a strong 64-bit mixer, used both to derive per-row seeds and
// as the generator (splitmix64 over a counter passes BigCrush and costs a few cycles).
constexpr uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ull;

uint64_t fnv1a(std::string_view s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (char c : s) {
        h ^= static_cast<uint8_t>(c);
        h *= 0x100000001b3ull;
    }
    return h;
}

// A per-token tokenizer array (tokens, token_type, scores) resized to n entries: grown with
// placeholder names, type UNUSED (5), score 0; or cut to its first n.
GgufValue resized_vocab_array(const GgufValue& source, int64_t n) {
    GgufValue v = source;
    auto& array = std::get<GgufArray>(v.value);
    const auto size = static_cast<size_t>(n);
    if (array.elem_type == GgufValueType::STRING) {
        for (size_t i = array.strings.size(); i < size; ++i) {
            array.strings.push_back("<|synth_pad_" + std::to_string(i) + "|>");
        }
        array.strings.resize(size);
    } else if (array.elem_type == GgufValueType::F32 || array.elem_type == GgufValueType::F64) {
        array.floats.resize(size, 0.0);
    } else {
        array.ints.resize(size, 5);
    }
    return v;
}

bool is_per_token_key(const std::string& key) {
    return key == "tokenizer.ggml.tokens" || key == "tokenizer.ggml.token_type" ||
           key == "tokenizer.ggml.scores";
}

// The qwen35 keys the reference engine's loader reads.
void write_hybrid_metadata(GgufWriter& w, const SynthShape& s) {
    const std::string a = std::string(s.arch) + ".";
    w.set_u32(a + "full_attention_interval", static_cast<uint32_t>(s.full_attention_interval));
    w.set_u32(a + "ssm.conv_kernel", static_cast<uint32_t>(s.ssm_conv_kernel));
    w.set_u32(a + "ssm.state_size", static_cast<uint32_t>(s.ssm_k_dim));
    w.set_u32(a + "ssm.group_count", static_cast<uint32_t>(s.ssm_n_k_heads));
    w.set_u32(a + "ssm.time_step_rank", static_cast<uint32_t>(s.ssm_n_v_heads));
    w.set_u32(a + "ssm.inner_size", static_cast<uint32_t>(s.ssm_n_v_heads * s.ssm_v_dim));
    // Multimodal rope sections; text positions are equal in all sections (plain RoPE).
    GgufArray sections;
    sections.elem_type = GgufValueType::I32;
    sections.ints = {11, 11, 10, 0};
    w.set(a + "rope.dimension_sections", GgufValue{GgufValueType::ARRAY, sections});
}

}  // namespace

std::span<const SynthShape> synth_shapes() {
    return kShapes;
}

const SynthShape* find_synth_shape(std::string_view name) {
    for (const auto& s : kShapes) {
        if (s.name == name) return &s;
    }
    return nullptr;
}

std::span<const SynthRecipeInfo> synth_recipes() {
    return kRecipes;
}

const SynthRecipeInfo* find_synth_recipe(std::string_view name) {
    for (const auto& r : kRecipes) {
        if (r.name == name) return &r;
    }
    return nullptr;
}

const SynthRecipeInfo& synth_recipe_info(SynthRecipe recipe) {
    for (const auto& r : kRecipes) {
        if (r.recipe == recipe) return r;
    }
    throw std::invalid_argument("unknown synth recipe");
}

// The IQ recipes' upgrades of single matrices (the output is handled by the caller).
TensorType iq_matrix_type(SynthRecipe recipe, std::string_view name, int64_t layer, int64_t n_layer,
                          int64_t n_gqa, TensorType base) {
    if (layer < 0) return base;
    const bool first_eighth = layer < n_layer / 8;
    const bool attn_v = ends_with(name, "attn_v.weight");
    const bool ffn_down =
        ends_with(name, "ffn_down.weight") || ends_with(name, "ffn_down_exps.weight");
    switch (recipe) {
        case SynthRecipe::IQ4_XS:
            if ((attn_v && n_gqa >= 4) || (ffn_down && first_eighth)) return TensorType::Q5_K;
            return base;
        case SynthRecipe::IQ3_S:
            return attn_v && n_gqa >= 4 ? TensorType::Q4_K : base;
        case SynthRecipe::IQ3_M:
            if (attn_v || ends_with(name, "attn_output.weight") ||
                ends_with(name, "attn_qkv.weight") || (ffn_down && first_eighth)) {
                return TensorType::Q4_K;
            }
            return base;
        default:
            return base;
    }
}

TensorType synth_matrix_type(SynthRecipe recipe, std::string_view name, int64_t layer,
                             int64_t n_layer, int64_t row_len, bool tied_output, int64_t n_gqa) {
    const SynthRecipeInfo& info = synth_recipe_info(recipe);
    TensorType t = info.base;
    const bool is_output = name == "output.weight" || (tied_output && name == "token_embd.weight");
    if (recipe == SynthRecipe::MXFP4) {
        if (is_output || name == "token_embd.weight") t = TensorType::Q8_0;
    } else if (recipe == SynthRecipe::IQ4_XS || recipe == SynthRecipe::IQ3_S ||
               recipe == SynthRecipe::IQ3_M) {
        t = is_output ? (fits_row(info.base, row_len) ? TensorType::Q6_K : TensorType::Q8_0)
                      : iq_matrix_type(recipe, name, layer, n_layer, n_gqa, info.base);
    }
    // Float conversions and Q8_0 keep one type throughout (Q8_0 is already above Q6_K).
    const bool mixed = recipe == SynthRecipe::Q4_0 || recipe == SynthRecipe::Q4_K_M;
    if (mixed) {
        if (is_output) {
            // The reference checks divisibility by the recipe's own block first, then asks
            // for Q6_K (which may still fall back to Q8_0 below).
            t = fits_row(info.base, row_len) ? TensorType::Q6_K : TensorType::Q8_0;
        } else if (recipe == SynthRecipe::Q4_K_M && layer >= 0 &&
                   (ends_with(name, "attn_v.weight") || ends_with(name, "ffn_down.weight") ||
                    ends_with(name, "ffn_down_exps.weight")) &&
                   use_more_bits(layer, n_layer)) {
            t = TensorType::Q6_K;
        }
    }
    while (!fits_row(t, row_len) && t != TensorType::F16) t = fallback_type(t);
    return t;
}

namespace {

// One gpt-oss layer after its attn_norm: biased attention with sinks, the FFN norm (named
// post_attention_norm by the converter), the biased router and experts.
template <class Matrix, class Small, class Norm, class Experts>
void plan_gptoss_layer(const SynthShape& s, const std::string& b, int64_t i, Matrix& matrix,
                       Small& small, Norm& norm, Experts& experts) {
    const int64_t q_dim = s.n_head * s.head_dim;
    const int64_t kv_dim = s.n_head_kv * s.head_dim;
    matrix(b + "attn_q.weight", i, s.n_embd, q_dim);
    small(b + "attn_q.bias", {q_dim}, 0.0f);
    matrix(b + "attn_k.weight", i, s.n_embd, kv_dim);
    small(b + "attn_k.bias", {kv_dim}, 0.0f);
    matrix(b + "attn_v.weight", i, s.n_embd, kv_dim);
    small(b + "attn_v.bias", {kv_dim}, 0.0f);
    matrix(b + "attn_output.weight", i, q_dim, s.n_embd);
    small(b + "attn_output.bias", {s.n_embd}, 0.0f);
    small(b + "attn_sinks.weight", {s.n_head}, 0.0f);
    norm(b + "post_attention_norm.weight", s.n_embd);
    small(b + "ffn_gate_inp.weight", {s.n_embd, s.n_expert}, 0.0f);  // F32 router
    small(b + "ffn_gate_inp.bias", {s.n_expert}, 0.0f);
    experts(b + "ffn_gate_exps.weight", i, s.n_embd, s.n_ff_exp);
    small(b + "ffn_gate_exps.bias", {s.n_ff_exp, s.n_expert}, 0.0f);
    experts(b + "ffn_up_exps.weight", i, s.n_embd, s.n_ff_exp);
    small(b + "ffn_up_exps.bias", {s.n_ff_exp, s.n_expert}, 0.0f);
    experts(b + "ffn_down_exps.weight", i, s.n_ff_exp, s.n_embd);
    small(b + "ffn_down_exps.bias", {s.n_embd, s.n_expert}, 0.0f);
}

}  // namespace

int64_t SynthTensor::rows() const {
    int64_t n = 1;
    for (size_t i = 1; i < dims.size(); ++i) n *= dims[i];
    return n;
}

std::vector<SynthTensor> plan_synth_tensors(const SynthShape& s, SynthRecipe recipe) {
    // Scale of trained transformer weights (initialised at 0.02 and staying near it); norm
    // weights near 1 keep activations in range, so a forward pass never overflows.
    constexpr float kWeightStd = 0.02f;
    constexpr float kNormStd = 0.02f;
    std::vector<SynthTensor> out;
    const bool gptoss = s.arch == "gpt-oss";
    auto matrix = [&](std::string name, int64_t layer, int64_t cols, int64_t rows) {
        TensorType t = synth_matrix_type(recipe, name, layer, s.n_layer, cols, s.tied_output,
                                         s.n_head / std::max<int64_t>(1, s.n_head_kv));
        // gpt-oss's MXFP4 files hold only the experts in MXFP4.
        if (gptoss && recipe == SynthRecipe::MXFP4) t = TensorType::Q8_0;
        out.push_back({std::move(name), {cols, rows}, t, 0.0f, kWeightStd});
    };
    auto norm = [&](std::string name, int64_t n) {
        out.push_back({std::move(name), {n}, TensorType::F32, 1.0f, kNormStd});
    };
    // Small float tensors of the delta net: conv taps ~ normal(0, 0.02); the log decay rate
    // a = -exp(A_log) near -1 so the state neither explodes nor vanishes.
    auto small = [&](std::string name, std::vector<int64_t> dims, float mean) {
        out.push_back({std::move(name), std::move(dims), TensorType::F32, mean, kWeightStd});
    };
    // Experts of a MoE layer: one 3-D tensor [cols, rows, n_expert], typed like the matrix.
    auto experts = [&](std::string name, int64_t layer, int64_t cols, int64_t rows) {
        const TensorType t = synth_matrix_type(recipe, name, layer, s.n_layer, cols, s.tied_output,
                                               s.n_head / std::max<int64_t>(1, s.n_head_kv));
        out.push_back({std::move(name), {cols, rows, s.n_expert}, t, 0.0f, kWeightStd});
    };
    const bool hybrid = s.full_attention_interval > 0;
    const bool gemma = s.sliding_window > 0 && !gptoss;  // norms after attention and MLP too
    const int64_t q_dim = s.n_head * s.head_dim;
    const int64_t kv_dim = s.n_head_kv * s.head_dim;
    const int64_t ssm_inner = s.ssm_n_v_heads * s.ssm_v_dim;
    const int64_t ssm_channels = 2 * s.ssm_n_k_heads * s.ssm_k_dim + ssm_inner;
    matrix("token_embd.weight", -1, s.n_embd, s.n_vocab);
    for (int64_t i = 0; i < s.n_layer; ++i) {
        const std::string b = "blk." + std::to_string(i) + ".";
        norm(b + "attn_norm.weight", s.n_embd);
        if (hybrid) {
            norm(b + "post_attention_norm.weight", s.n_embd);
            matrix(b + "ffn_gate.weight", i, s.n_embd, s.n_ff);
            matrix(b + "ffn_up.weight", i, s.n_embd, s.n_ff);
            matrix(b + "ffn_down.weight", i, s.n_ff, s.n_embd);
        }
        if (hybrid && !s.is_attention_layer(i)) {
            matrix(b + "attn_qkv.weight", i, s.n_embd, ssm_channels);
            matrix(b + "attn_gate.weight", i, s.n_embd, ssm_inner);
            matrix(b + "ssm_alpha.weight", i, s.n_embd, s.ssm_n_v_heads);
            matrix(b + "ssm_beta.weight", i, s.n_embd, s.ssm_n_v_heads);
            small(b + "ssm_a", {s.ssm_n_v_heads}, -1.0f);
            small(b + "ssm_dt.bias", {s.ssm_n_v_heads}, 0.0f);
            small(b + "ssm_conv1d.weight", {s.ssm_conv_kernel, ssm_channels}, 0.0f);
            norm(b + "ssm_norm.weight", s.ssm_v_dim);
            matrix(b + "ssm_out.weight", i, ssm_inner, s.n_embd);
            continue;
        }
        if (hybrid) {  // gated attention: a query and a gate per head
            matrix(b + "attn_q.weight", i, s.n_embd, 2 * q_dim);
            matrix(b + "attn_k.weight", i, s.n_embd, kv_dim);
            matrix(b + "attn_v.weight", i, s.n_embd, kv_dim);
            matrix(b + "attn_output.weight", i, q_dim, s.n_embd);
            norm(b + "attn_q_norm.weight", s.head_dim);
            norm(b + "attn_k_norm.weight", s.head_dim);
            continue;
        }
        if (gptoss) {
            plan_gptoss_layer(s, b, i, matrix, small, norm, experts);
            continue;
        }
        matrix(b + "attn_q.weight", i, s.n_embd, q_dim);
        matrix(b + "attn_k.weight", i, s.n_embd, kv_dim);
        matrix(b + "attn_v.weight", i, s.n_embd, kv_dim);
        matrix(b + "attn_output.weight", i, q_dim, s.n_embd);
        if (s.qk_norm) {
            norm(b + "attn_q_norm.weight", s.head_dim);
            norm(b + "attn_k_norm.weight", s.head_dim);
        }
        if (gemma) norm(b + "post_attention_norm.weight", s.n_embd);
        norm(b + "ffn_norm.weight", s.n_embd);
        if (gemma) norm(b + "post_ffw_norm.weight", s.n_embd);
        if (s.n_expert > 0) {
            small(b + "ffn_gate_inp.weight", {s.n_embd, s.n_expert}, 0.0f);  // F32 router
            experts(b + "ffn_gate_exps.weight", i, s.n_embd, s.n_ff_exp);
            experts(b + "ffn_up_exps.weight", i, s.n_embd, s.n_ff_exp);
            experts(b + "ffn_down_exps.weight", i, s.n_ff_exp, s.n_embd);
            continue;
        }
        matrix(b + "ffn_gate.weight", i, s.n_embd, s.n_ff);
        matrix(b + "ffn_up.weight", i, s.n_embd, s.n_ff);
        matrix(b + "ffn_down.weight", i, s.n_ff, s.n_embd);
    }
    norm("output_norm.weight", s.n_embd);
    if (!s.tied_output) matrix("output.weight", -1, s.n_embd, s.n_vocab);
    return out;
}

void synth_row(uint64_t seed, const SynthTensor& tensor, int64_t row, float* out) {
    uint64_t state = mix64(mix64(seed ^ fnv1a(tensor.name)) + static_cast<uint64_t>(row) * kGolden);
    // Approximately normal: the sum of four 16-bit uniforms (Irwin-Hall, n = 4) from one
    // 64-bit draw. Its tails stop at 3.46 sigma, which noise for benchmarks does not miss, and
    // it is several times cheaper than Box-Muller.
    constexpr double kSumMean = 4 * 32767.5;
    constexpr double kSumStd = 37837.22621;  // sqrt(4 * (65536^2 - 1) / 12)
    const float a = static_cast<float>(tensor.stddev / kSumStd);
    const float b = static_cast<float>(tensor.mean - kSumMean * tensor.stddev / kSumStd);
    const int64_t n = tensor.row_len();
    for (int64_t i = 0; i < n; ++i) {
        state += kGolden;
        const uint64_t r = mix64(state);
        const uint32_t sum = static_cast<uint32_t>((r & 0xffff) + ((r >> 16) & 0xffff) +
                                                   ((r >> 32) & 0xffff) + (r >> 48));
        out[i] = b + a * static_cast<float>(sum);
    }
}

SynthSummary write_synth_model(const SynthOptions& o, ThreadPool& pool) {
    if (o.shape == nullptr) throw std::invalid_argument("write_synth_model: no shape");
    const auto t_start = std::chrono::steady_clock::now();
    const SynthShape& shape = *o.shape;
    const SynthRecipeInfo& recipe = synth_recipe_info(o.recipe);

    // The tokenizer comes first: a mismatch should fail before minutes of quantizing.
    auto vocab = GgufFile::open(o.vocab_from);
    const GgufArray* tokens = vocab->get_array("tokenizer.ggml.tokens");
    if (tokens == nullptr) {
        throw std::runtime_error(o.vocab_from +
                                 ": no tokenizer.ggml.tokens to copy the vocabulary from");
    }
    const bool resize = shape.pad_vocab && static_cast<int64_t>(tokens->size()) != shape.n_vocab;
    if (static_cast<int64_t>(tokens->size()) != shape.n_vocab && !resize) {
        throw std::runtime_error(
            o.vocab_from + " has a vocabulary of " + std::to_string(tokens->size()) +
            " tokens but " + std::string(shape.name) + " needs " + std::to_string(shape.n_vocab) +
            ": use " + std::string(shape.vocab_hint));
    }

    const std::vector<SynthTensor> plan = plan_synth_tensors(shape, o.recipe);
    SynthSummary summary;
    for (const SynthTensor& t : plan) {
        if (type_kernels(t.type).quantize_row == nullptr) {
            throw std::runtime_error("tensor type " + std::string(type_info(t.type).name) +
                                     " (for " + t.name + ") has no quantizer in this build");
        }
        summary.tensor_bytes += static_cast<uint64_t>(t.rows()) *
                                row_bytes(type_info(t.type), static_cast<uint64_t>(t.row_len()));
        summary.n_params += static_cast<uint64_t>(t.rows() * t.row_len());
    }
    // One float buffer per worker, allocated up front: a tensor's tasks only write disjoint
    // byte ranges of its buffer, so they need no locking.
    std::vector<std::vector<float>> scratch(static_cast<size_t>(pool.size()));
    for (auto& s : scratch) s.resize(static_cast<size_t>(kTaskElems));
    // Fills tensor t's bytes at dst when the writer reaches it: rows in tasks of ~kTaskElems.
    auto fill = [&](const SynthTensor& t, uint8_t* dst) {
        const QuantizeRowFn quantize = type_kernels(t.type).quantize_row;
        const int64_t rows = t.rows();
        const int64_t rows_per_task = std::max<int64_t>(1, kTaskElems / t.row_len());
        const uint64_t row_size = row_bytes(type_info(t.type), static_cast<uint64_t>(t.row_len()));
        if (rows_per_task * t.row_len() > static_cast<int64_t>(scratch[0].size())) {  // long rows
            for (auto& s : scratch) s.resize(static_cast<size_t>(rows_per_task * t.row_len()));
        }
        pool.parallel_for(
            (rows + rows_per_task - 1) / rows_per_task, [&](int64_t task, int worker) {
                float* x = scratch[static_cast<size_t>(worker)].data();
                const int64_t r0 = task * rows_per_task;
                const int64_t n_rows = std::min(rows, r0 + rows_per_task) - r0;
                for (int64_t r = 0; r < n_rows; ++r)
                    synth_row(o.seed, t, r0 + r, x + r * t.row_len());
                quantize(x, dst + static_cast<uint64_t>(r0) * row_size, n_rows * t.row_len());
            });
    };

    GgufWriter w;
    const std::string a = std::string(shape.arch) + ".";
    w.set_string("general.architecture", std::string(shape.arch));
    w.set_string("general.type", "model");
    w.set_string("general.name", std::string(shape.display_name));
    w.set_string("general.size_label", std::string(shape.size_label));
    w.set_string("general.description",
                 "random weights of a real shape, written by ember synth (seed " +
                     std::to_string(o.seed) + ")");
    w.set_u32("general.file_type", recipe.file_type);
    if (recipe.base != TensorType::F16 && recipe.base != TensorType::BF16) {
        w.set_u32("general.quantization_version", 2);
    }
    w.set_u32(a + "vocab_size", static_cast<uint32_t>(shape.n_vocab));
    w.set_u32(a + "context_length", static_cast<uint32_t>(shape.n_ctx_train));
    w.set_u32(a + "embedding_length", static_cast<uint32_t>(shape.n_embd));
    w.set_u32(a + "block_count", static_cast<uint32_t>(shape.n_layer));
    w.set_u32(a + "feed_forward_length", static_cast<uint32_t>(shape.n_ff));
    w.set_u32(a + "attention.head_count", static_cast<uint32_t>(shape.n_head));
    w.set_u32(a + "attention.head_count_kv", static_cast<uint32_t>(shape.n_head_kv));
    w.set_u32(a + "attention.key_length", static_cast<uint32_t>(shape.head_dim));
    w.set_u32(a + "attention.value_length", static_cast<uint32_t>(shape.head_dim));
    w.set_f32(a + "attention.layer_norm_rms_epsilon", static_cast<float>(shape.rms_eps));
    w.set_u32(a + "rope.dimension_count",
              static_cast<uint32_t>(shape.rope_dims > 0 ? shape.rope_dims : shape.head_dim));
    w.set_f32(a + "rope.freq_base", static_cast<float>(shape.rope_base));
    if (shape.full_attention_interval > 0) write_hybrid_metadata(w, shape);
    if (shape.sliding_window > 0) {
        w.set_u32(a + "attention.sliding_window", static_cast<uint32_t>(shape.sliding_window));
    }
    if (shape.rope_scale_linear > 0) {
        w.set_string(a + "rope.scaling.type", "linear");
        w.set_f32(a + "rope.scaling.factor", static_cast<float>(shape.rope_scale_linear));
    }
    if (shape.rope_yarn_factor > 0) {
        w.set_string(a + "rope.scaling.type", "yarn");
        w.set_f32(a + "rope.scaling.factor", static_cast<float>(shape.rope_yarn_factor));
        w.set_u32(a + "rope.scaling.original_context_length",
                  static_cast<uint32_t>(shape.rope_yarn_orig_ctx));
    }
    if (shape.n_expert > 0) {
        w.set_u32(a + "expert_count", static_cast<uint32_t>(shape.n_expert));
        w.set_u32(a + "expert_used_count", static_cast<uint32_t>(shape.n_expert_used));
        w.set_u32(a + "expert_feed_forward_length", static_cast<uint32_t>(shape.n_ff_exp));
    }
    for (const std::string& key : vocab->metadata_order()) {
        if (!key.starts_with("tokenizer.")) continue;
        const GgufValue* value = vocab->find(key);
        if (resize && is_per_token_key(key) && value->type == GgufValueType::ARRAY) {
            w.set(key, resized_vocab_array(*value, shape.n_vocab));
        } else {
            w.copy_from(*vocab, key);
        }
    }
    for (const SynthTensor& t : plan) {
        w.add_tensor(t.name, t.dims, t.type, [&fill, &t](uint8_t* dst) { fill(t, dst); });
    }
    w.write(o.output);
    summary.n_tensors = plan.size();
    summary.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
    return summary;
}

}  // namespace ember
