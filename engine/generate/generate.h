// The decode loop: prefill a prompt, then sample one token at a time until a stop condition.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "engine/sampling/sampler.h"

namespace ember {

class Model;
class ThreadPool;
struct InferenceState;

enum class FinishReason { Stop, Length, Context, Cancelled };
std::string_view finish_reason_name(FinishReason reason);

struct GenerateOptions {
    int64_t max_tokens = 128;  // generated tokens at most; < 0 means until the context is full
    bool ignore_eos = false;   // keep going past end-of-generation tokens
};

struct GenerateStats {
    int64_t prompt_tokens = 0;
    int64_t generated_tokens = 0;
    double prefill_seconds = 0;  // evaluating the prompt, up to the first sampled token
    double decode_seconds = 0;   // everything after the first token
    double ttft_seconds = 0;     // start to first token
};

struct GenerateResult {
    std::vector<int32_t> ids;  // generated tokens (an end-of-generation token is not included)
    FinishReason finish = FinishReason::Length;
    GenerateStats stats;
};

// Called with each generated token; return false to stop (FinishReason::Cancelled).
using TokenCallback = std::function<bool(int32_t id)>;

// Evaluates `prompt` on top of what `state` holds and generates. The state keeps the prompt
// and every generated token except the last sampled one, which has not been evaluated yet.
GenerateResult generate(const Model& model, InferenceState& state, ThreadPool& pool,
                        Sampler& sampler, std::span<const int32_t> prompt,
                        const GenerateOptions& options, const TokenCallback& on_token);

}  // namespace ember
