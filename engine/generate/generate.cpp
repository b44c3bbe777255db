#include "engine/generate/generate.h"

#include <chrono>

#include "engine/model/forward.h"
#include "engine/model/model.h"
#include "engine/model/state.h"
#include "engine/tokenizer/tokenizer.h"

namespace ember {

std::string_view finish_reason_name(FinishReason reason) {
    switch (reason) {
        case FinishReason::Stop:
            return "stop";
        case FinishReason::Length:
            return "length";
        case FinishReason::Context:
            return "context";
        case FinishReason::Cancelled:
            return "cancelled";
    }
    return "unknown";
}

GenerateResult generate(const Model& model, InferenceState& state, ThreadPool& pool,
                        Sampler& sampler, std::span<const int32_t> prompt,
                        const GenerateOptions& options, const TokenCallback& on_token) {
    using Clock = std::chrono::steady_clock;
    const auto seconds = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
    GenerateResult result;
    result.stats.prompt_tokens = static_cast<int64_t>(prompt.size());
    const Tokenizer& tok = model.tokenizer();
    const auto start = Clock::now();

    std::span<const float> logits = forward(model, state, pool, prompt, LogitsWanted::Last);
    int32_t next = sampler.sample(logits);
    const auto first = Clock::now();
    result.stats.ttft_seconds = seconds(first - start);
    result.stats.prefill_seconds = result.stats.ttft_seconds;

    const int64_t capacity = state.kv.capacity();
    for (;;) {
        if (!options.ignore_eos && tok.is_eog(next)) {
            result.finish = FinishReason::Stop;
            break;
        }
        result.ids.push_back(next);
        sampler.accept(next);
        if (on_token && !on_token(next)) {
            result.finish = FinishReason::Cancelled;
            break;
        }
        if (options.max_tokens >= 0 &&
            static_cast<int64_t>(result.ids.size()) >= options.max_tokens) {
            result.finish = FinishReason::Length;
            break;
        }
        if (state.kv.length() + 1 > capacity) {
            result.finish = FinishReason::Context;
            break;
        }
        const int32_t token = next;
        logits =
            forward(model, state, pool, std::span<const int32_t>(&token, 1), LogitsWanted::Last);
        next = sampler.sample(logits);
    }
    result.stats.generated_tokens = static_cast<int64_t>(result.ids.size());
    result.stats.decode_seconds = seconds(Clock::now() - first);
    return result;
}

}  // namespace ember
