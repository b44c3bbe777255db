// gpt-oss's hyper-parameters beyond the common ones (see gptoss.h).
#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

#include "engine/gguf/gguf.h"
#include "engine/model/gemma3.h"
#include "engine/model/gptoss.h"
#include "engine/model/model.h"

namespace ember {

namespace {

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

}  // namespace

void read_gptoss_config(const GgufFile& f, ModelConfig& c) {
    const std::string p = c.arch + ".";
    if (!read_sliding_window(f, c, kGptOssGlobalEvery)) {
        throw GgufError(f.path() + ": missing metadata '" + p + "attention.sliding_window'");
    }
    read_yarn(f, p, c);
    // q and k are each multiplied by the attention factor (HF scales cos and sin).
    c.attn_scale =
        c.rope_attn_factor * c.rope_attn_factor / std::sqrt(static_cast<double>(c.head_dim));
    c.clamped_swiglu = true;
    c.swiglu_limit = kGptOssSwigluLimit;
    c.swiglu_alpha = kGptOssSwigluAlpha;
    // Softmax over the chosen experts' logits: the same numbers as a softmax over all of them
    // renormalized over the chosen, which is how route_token computes it.
    c.expert_weights_norm = true;
}

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

}  // namespace ember
