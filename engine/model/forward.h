// The forward pass of the transformer families (llama, qwen2, qwen3).
#pragma once

#include <cstdint>
#include <span>

namespace ember {

class Model;
class ThreadPool;
struct InferenceState;

enum class LogitsWanted { Last, All };

// Evaluates `tokens` at positions state.n_past() onwards, appends their K/V rows to the
// cache and returns the logits: [1 x n_vocab] for Last, [tokens.size() x n_vocab] for All.
// The span points into state's scratch and stays valid until the next call.
// Throws std::length_error when the tokens do not fit the state's context, and
// std::out_of_range for a token id outside the vocabulary; the state is unchanged then.
std::span<const float> forward(const Model& model, InferenceState& state, ThreadPool& pool,
                               std::span<const int32_t> tokens, LogitsWanted wanted);

// Largest number of tokens evaluated in one batch; longer inputs are split internally.
inline constexpr int64_t kMaxBatch = 256;

}  // namespace ember
