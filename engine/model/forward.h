// The forward pass of every family (forward.cpp; the layers in layers.h, on a backend).
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <span>
#include <stdexcept>
#include <vector>

namespace ember {

class Model;
class ThreadPool;
struct InferenceState;

// None: only advance the state (re-evaluating tokens whose logits are already known) and skip
// the output matrix.
enum class LogitsWanted { Last, All, None };

// Batches of at most this many tokens give bit for bit the logits, K/V rows and recurrent
// state that evaluating the same tokens one at a time gives; speculative verification relies
// on it. Longer batches may take faster paths that round differently (qwen35's chunked delta
// rule). Covers the longest verification batch (--draft-max 16, plus the verified token).
inline constexpr int64_t kExactBatchTokens = 17;

// Most conversations in one decode_batch step: the exact batches' kernels take them.
inline constexpr int64_t kMaxDecodeBatch = kExactBatchTokens;

// Watches a long evaluation (a pasted prompt of thousands of tokens) so a front end can show
// how far it got and stop it. Called with how many of the call's tokens are evaluated: on the
// CPU between the layers of each batch (a batch counts in proportion to its finished layers)
// and, every ThreadPool::kInterruptionPoll, between the tasks of a layer's parallel sections
// (a hybrid's recurrent state is copied at each batch's start and put back on such a stop,
// when it is at most 64 MiB; a larger one is asked after each batch only); on a GPU after
// each batch (the device's queue cannot be left in the middle of one). Returning false stops
// the evaluation there: forward() throws EvaluationStopped.
using EvaluationWatch = std::function<bool(double tokens_done)>;

// forward() stopped by its watch. The batches evaluated before the stop stay in the state (its
// length moved past them: `evaluated` tokens of the call); the batch in progress is rolled back.
class EvaluationStopped : public std::runtime_error {
public:
    explicit EvaluationStopped(int64_t evaluated_tokens)
        : std::runtime_error("evaluation stopped"), evaluated(evaluated_tokens) {}
    int64_t evaluated;
};

// Evaluates `tokens` at positions state.n_past() onwards, appends their K/V rows to the
// cache and returns the logits: [1 x n_vocab] for Last, [tokens.size() x n_vocab] for All,
// empty for None.
// The span points into state's scratch and stays valid until the next call.
// Throws std::length_error when the tokens do not fit the state's context, and
// std::out_of_range for a token id outside the vocabulary; the state is unchanged then.
// `watch` (may be null) can stop a long evaluation part way (EvaluationWatch).
std::span<const float> forward(const Model& model, InferenceState& state, ThreadPool& pool,
                               std::span<const int32_t> tokens, LogitsWanted wanted,
                               const EvaluationWatch* watch = nullptr);

// Evaluates a throwaway prompt of `prompt_tokens` tokens (by default just past the exact
// batches, so that the products take the prefill's path) and one decode step in an empty state
// on a device, then empties it again (a hybrid's recurrent state back to zeros): the device
// allocates and initializes there what the state's first prompt and first step would (its cuBLAS
// workspace, the buffers that grow on demand, the captured decode step), so that a server's
// first requests on each of its slots do not wait for that (~20 ms a slot on an H200), and a
// model's placement loads the kernels before the first reply. Does nothing on the CPU, for a
// model split between a GPU and the CPU (its CPU layers have nothing to warm), for a state that
// is not empty or one too short for the prompt and the step.
void warm_up(const Model& model, InferenceState& state, ThreadPool& pool,
             int64_t prompt_tokens = kExactBatchTokens + 1);

// One decode step of several conversations at once: tokens[i] is evaluated in *states[i] at
// that state's next position and its logits written to row i of `out` [states.size() x
// n_vocab]. Each row, and each state afterwards, is bit for bit what forward(model,
// *states[i], pool, {tokens[i]}, LogitsWanted::Last) gives: a device that batches
// conversations (ComputeDevice::make_batch_backend) evaluates them in one pass, reading each
// weight once for all of them; elsewhere they go one after another. Returns per state null, or
// the error forward() would have thrown for it (the context full, a token outside the
// vocabulary, a failed pass), the state then unchanged; the others are evaluated all the same.
// At most kMaxDecodeBatch states, each a different one.
std::vector<std::exception_ptr> decode_batch(const Model& model,
                                             std::span<InferenceState* const> states,
                                             ThreadPool& pool, std::span<const int32_t> tokens,
                                             float* out);

// Largest number of tokens evaluated in one batch; longer inputs are split internally.
inline constexpr int64_t kMaxBatch = 256;

// A model split between a device and the CPU (gpu_plan.h) takes batches half as long: the
// device's share of such a model is small by design, and its batch buffers are what it holds
// besides the weights and KV rows (peak device memory within weights + KV + 10%), while its CPU
// layers still reuse each weight for 128 tokens.
inline constexpr int64_t kMaxSplitBatch = 128;

}  // namespace ember
