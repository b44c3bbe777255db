// The forward pass of every family: checks, batching, the embedding, the layers (layers.h)
// and the logits, on a backend (backend.h; today the CPU's).
#include "engine/model/forward.h"

#include <algorithm>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/model/cpu/cpu_backend.h"
#include "engine/model/layers.h"
#include "engine/model/model.h"
#include "engine/model/state.h"
#include "engine/util/thread_pool.h"

namespace ember {

namespace {

// Largest batch of the hybrids. Their scratch per token is about twice the others' (conv
// channels, output gates, delta-rule work), so batches are half as long: the prefill scratch
// stays within the memory bound (peak RSS <= file + state + 64 MiB) while each weight is still
// reused by 128 tokens, two delta-rule chunks.
constexpr int64_t kMaxHybridBatch = 128;
// Largest recurrent state forward() copies at each batch's start so that a stop inside a
// layer can put it back (Qwen3.5-0.8B's is 18 MiB, a 9B's about 50).
constexpr uint64_t kMaxRecurrentCopyBytes = 64ull << 20;
static_assert(kMaxBatch <= KvCache::kRingSlack, "a batch must fit a sliding layer's ring slack");

// Where a batch's layers run: all on `first`, or a split model's layers [0, first_layers) on
// the device (`first`) and the rest, with the output, on the CPU (`rest`; gpu_plan.h).
struct Placement {
    Backend& first;
    Backend* rest = nullptr;
    int64_t first_layers = -1;  // -1: every layer on `first`
};

// logits [rows x n_vocab] = output(output_norm(x [rows x n_embd])), soft-capped where the model
// caps them; xn is scratch.
void output_logits(const Model& model, Backend& backend, const float* x, float* xn, int64_t rows,
                   float* logits) {
    const ModelConfig& c = model.config();
    backend.rms_norm_rows(x, model.output_norm(), xn, rows);
    backend.matmul(model.output(), xn, rows, logits);
    if (c.final_logit_softcap > 0) {
        backend.soft_cap(logits, rows * c.n_vocab, static_cast<float>(c.final_logit_softcap));
    }
}

// One batch (n <= the batch limit, so a sliding layer's rows never overwrite a row one of its
// tokens attends to): appends its K/V rows and recurrent state, writes logits of rows
// [first_out, n) to out.
// Returns false when `between_layers` stopped it (nothing committed: the caller rolls back).
bool forward_batch(const Model& model, InferenceState& st, const Placement& where,
                   std::span<const int32_t> tokens, int64_t first_out, float* out,
                   const std::function<bool(int64_t)>* between_layers) {
    const ModelConfig& c = model.config();
    const auto n = static_cast<int64_t>(tokens.size());
    const int64_t pos0 = st.kv.length();
    const int64_t n_out = n - first_out;
    Backend& first = where.first;
    BatchBuffers& first_buffers = first.begin_batch(pos0, n, n_out);
    first.embed(tokens, first_buffers.x);
    // A recorded batch's blocks run inside publish_logits (or hand_over): not called again.
    const bool recorded = first.batch_recorded();
    if (!recorded && !run_layers({model, first, first_buffers, pos0, n, between_layers, 0,
                                  where.first_layers})) {
        return false;
    }
    Backend* last = &first;
    BatchBuffers* b = &first_buffers;
    if (where.rest != nullptr) {
        // The residual stream crosses to the CPU once, its layers and the output run there.
        b = &where.rest->begin_batch(pos0, n, n_out);
        first.hand_over(first_buffers.x, b->x, n * c.n_embd);
        if (!run_layers({model, *where.rest, *b, pos0, n, nullptr, where.first_layers, -1})) {
            return false;
        }
        // The CPU layers' rows have no device copy: their writes are nothing the device's mirror
        // must learn of (it took the marks of any restore at the batch's start).
        st.kv.take_host_writes();
        last = where.rest;
    }
    const bool output_recorded = recorded && where.rest == nullptr;
    if (n_out > 0) {
        float* logits = last->logits_buffer(out, n_out);  // [n_out x n_vocab]
        if (!output_recorded) {
            output_logits(model, *last, b->x + first_out * c.n_embd, b->xn, n_out, logits);
        }
        last->publish_logits(logits, out, n_out * c.n_vocab);
    }
    st.kv.set_length(pos0 + n);
    if (is_hybrid(c.family)) st.recurrent.set_position(pos0 + n);
    return true;
}

// The hybrids' recurrent state must be where the KV cache is: a cache rolled back to 0 resets
// it, any other mismatch throws (restore a snapshot instead; see recurrent_state.h).
void check_recurrent_state(const ModelConfig& c, InferenceState& st) {
    const int64_t start = st.kv.length();
    if (st.recurrent.n_layer() != c.n_layer) st.recurrent.init(c);  // a state not from make_state
    if (start == 0) st.recurrent.reset();  // the state before any token is all zeros
    if (st.recurrent.position() != start) {
        throw std::logic_error("hybrid forward: recurrent state is at position " +
                               std::to_string(st.recurrent.position()) + " but the KV cache at " +
                               std::to_string(start) +
                               "; recurrent state cannot be truncated, restore a snapshot");
    }
}

// After a batch threw: the KV rows are rolled back. A failed batch may have written rows over
// ring slots it had not committed, and batches already committed may have overwritten ring
// rows the start needs: then only an empty cache is a state to continue from. A hybrid's
// recurrent state has folded in part of the batch, so its position stays behind and the next
// call refuses it unless restored.
void roll_back(InferenceState& st, int64_t start) {
    if (st.kv.ring_positions() > 0) {
        st.kv.forget_ring_rows_before(st.kv.length() + kMaxBatch - st.kv.ring_positions());
    }
    st.kv.set_length(st.kv.can_resume_at(start) ? start : 0);
}

void check_tokens(const ModelConfig& c, const InferenceState& st, std::span<const int32_t> tokens) {
    const auto n = static_cast<int64_t>(tokens.size());
    if (n == 0) throw std::invalid_argument("forward: no tokens to evaluate");
    const int64_t start = st.kv.length();
    if (start + n > st.kv.capacity()) {
        throw std::length_error("context full: " + std::to_string(start) + " + " +
                                std::to_string(n) + " tokens exceed the context of " +
                                std::to_string(st.kv.capacity()));
    }
    for (int32_t id : tokens) {
        if (id < 0 || id >= c.n_vocab) {
            throw std::out_of_range("token id " + std::to_string(id) +
                                    " is outside the vocabulary (" + std::to_string(c.n_vocab) +
                                    ")");
        }
    }
    if (!st.kv.can_resume_at(start)) {
        throw std::logic_error(
            std::string(family_name(c.family)) + " forward: the KV cache was cut back to " +
            std::to_string(start) +
            " tokens, behind what the sliding layers' rings still hold (from position " +
            std::to_string(st.kv.ring_begin()) + "); restore a stored prefix or start over");
    }
}

}  // namespace

std::span<const float> forward(const Model& model, InferenceState& st, ThreadPool& pool,
                               std::span<const int32_t> tokens, LogitsWanted wanted,
                               const EvaluationWatch* watch) {
    const ModelConfig& c = model.config();
    check_tokens(c, st, tokens);
    if (is_hybrid(c.family)) check_recurrent_state(c, st);
    const auto n = static_cast<int64_t>(tokens.size());
    const int64_t start = st.kv.length();
    // A device keeps its batch buffers in its own memory, sized for kMaxBatch (kMaxSplitBatch
    // for a split model's: gpu_plan.h).
    const int64_t device_layers = model.device() ? model.device()->layers() : c.n_layer;
    const bool split = device_layers < c.n_layer;
    const int64_t max_batch = split                                    ? kMaxSplitBatch
                              : is_hybrid(c.family) && !model.device() ? kMaxHybridBatch
                                                                       : kMaxBatch;
    const int64_t rows = wanted == LogitsWanted::All ? n : wanted == LogitsWanted::Last ? 1 : 0;
    std::unique_ptr<Backend> device_backend;
    if (model.device()) device_backend = model.device()->make_backend(st);
    // The logits' host buffer: the device backend's own (page-locked) where it offers one, else
    // the state's scratch.
    float* logits = device_backend ? device_backend->host_logits(rows * c.n_vocab) : nullptr;
    if (logits == nullptr) {
        std::vector<float>& scratch = st.scratch.logits;
        if (static_cast<int64_t>(scratch.size()) < rows * c.n_vocab) {
            scratch.resize(static_cast<size_t>(rows * c.n_vocab));
        }
        logits = scratch.data();
    }
    CpuBackend cpu_backend(model, st, pool);
    Backend& backend = device_backend ? *device_backend : cpu_backend;
    // A split model: the device's layers first, then the CPU's (gpu_plan.h).
    const Placement where =
        split ? Placement{backend, &cpu_backend, device_layers} : Placement{backend};
    // A watch is asked between the layers only where a batch can be dropped half done: on the
    // CPU (the rows it wrote lie past the cache's length), and for a hybrid only when its
    // recurrent state (which folds in the batch layer by layer) can be copied at each batch's
    // start and put back: up to kMaxRecurrentCopyBytes, a few milliseconds of memcpy against a
    // batch's hundreds. A larger state keeps stopping between batches only.
    const bool hybrid = is_hybrid(c.family);
    const bool per_layer = watch != nullptr && !device_backend &&
                           (!hybrid || st.recurrent.bytes() <= kMaxRecurrentCopyBytes);
    const bool keep_recurrent = per_layer && hybrid;
    std::vector<float> recurrent_at_batch_start;  // [st.recurrent.data().size()] when kept
    const double n_layers = static_cast<double>(std::max<size_t>(1, model.layers().size()));
    int64_t batch_start = 0, batch_len = 0;
    double tokens_done = 0;  // what the watch last heard
    const std::function<bool(int64_t)> between_layers = [&](int64_t layers_done) {
        tokens_done = static_cast<double>(batch_start) +
                      static_cast<double>(batch_len) * static_cast<double>(layers_done) / n_layers;
        return (*watch)(tokens_done);
    };
    // A layer of a large model's batch takes longer than a stop may wait (seconds on two
    // cores), so the CPU's parallel sections ask the watch too, between their tasks; a stop
    // there drops the batch in progress like a stop between layers.
    const std::function<bool()> stop_within_layer = [&] { return !(*watch)(tokens_done); };
    std::optional<ThreadPool::Interruption> interruption;
    if (per_layer) interruption.emplace(pool, stop_within_layer);
    try {
        for (int64_t b = 0; b < n; b += max_batch) {
            const int64_t len = std::min(max_batch, n - b);
            batch_start = b;
            batch_len = len;
            auto chunk = tokens.subspan(static_cast<size_t>(b), static_cast<size_t>(len));
            if (keep_recurrent) recurrent_at_batch_start = st.recurrent.data();
            bool done = false;
            try {
                if (wanted == LogitsWanted::All) {
                    done = forward_batch(model, st, where, chunk, 0, logits + b * c.n_vocab,
                                         per_layer ? &between_layers : nullptr);
                } else {
                    // Only the final batch produces a logits row (None: not even that).
                    const bool last = wanted == LogitsWanted::Last && b + len == n;
                    done = forward_batch(model, st, where, chunk, last ? len - 1 : len, logits,
                                         per_layer ? &between_layers : nullptr);
                }
            } catch (const ThreadPool::Interrupted&) {
                done = false;  // stopped inside a layer
            }
            // What a question from inside the next batch's first layer reports (the last
            // layer of a batch is not followed by a between_layers question).
            if (done) tokens_done = static_cast<double>(b + len);
            // Stopped between layers, or after a batch that is not the last: the batches
            // before stay evaluated.
            if (!done ||
                (watch != nullptr && b + len < n && !(*watch)(static_cast<double>(b + len)))) {
                if (!done) {
                    roll_back(st, st.kv.length());
                    // The hybrid's state as it was before the dropped batch (its position
                    // was not moved: forward_batch sets it only on success).
                    if (keep_recurrent) st.recurrent.data() = recurrent_at_batch_start;
                }
                throw EvaluationStopped(st.kv.length() - start);
            }
        }
    } catch (const EvaluationStopped&) {
        throw;  // what was evaluated stays
    } catch (...) {
        roll_back(st, start);
        throw;
    }
    return {logits, static_cast<size_t>(rows * c.n_vocab)};
}

void warm_up(const Model& model, InferenceState& state, ThreadPool& pool, int64_t prompt_tokens) {
    const ComputeDevice* device = model.device();
    // A split model's CPU layers have nothing to warm, and would make it slow.
    if (device == nullptr || device->layers() < model.config().n_layer || state.kv.length() != 0 ||
        prompt_tokens + 1 > state.kv.capacity()) {
        return;
    }
    const std::vector<int32_t> tokens(static_cast<size_t>(prompt_tokens), 0);
    forward(model, state, pool, tokens, LogitsWanted::Last);
    const int32_t next = 0;
    forward(model, state, pool, std::span<const int32_t>(&next, 1), LogitsWanted::Last);
    roll_back(state, 0);
    if (!state.recurrent.empty()) state.recurrent.reset();  // a hybrid's mixers start from zeros
}

std::vector<std::exception_ptr> decode_batch(const Model& model,
                                             std::span<InferenceState* const> states,
                                             ThreadPool& pool, std::span<const int32_t> tokens,
                                             float* out) {
    const ModelConfig& c = model.config();
    const auto n = static_cast<int64_t>(states.size());
    if (n > kMaxDecodeBatch || tokens.size() != states.size()) {
        throw std::invalid_argument(
            "decode_batch: " + std::to_string(tokens.size()) + " tokens for " + std::to_string(n) +
            " conversations (one each, at most " + std::to_string(kMaxDecodeBatch) + ")");
    }
    std::vector<std::exception_ptr> errors(states.size());
    // The states whose token can be evaluated, the others keep forward()'s error.
    std::vector<InferenceState*> ready;
    std::vector<int32_t> ready_tokens;
    std::vector<size_t> ready_index;
    for (size_t i = 0; i < states.size(); ++i) {
        try {
            check_tokens(c, *states[i], tokens.subspan(i, 1));
            if (is_hybrid(c.family)) check_recurrent_state(c, *states[i]);
            ready.push_back(states[i]);
            ready_tokens.push_back(tokens[i]);
            ready_index.push_back(i);
        } catch (...) {
            errors[i] = std::current_exception();
        }
    }
    const auto row = [&](size_t i) { return out + static_cast<int64_t>(i) * c.n_vocab; };
    std::unique_ptr<Backend> backend;
    if (ready.size() >= 2 && model.device()) backend = model.device()->make_batch_backend(ready);
    if (!backend) {
        for (size_t r = 0; r < ready.size(); ++r) {
            try {
                const std::span<const float> logits =
                    forward(model, *ready[r], pool, std::span<const int32_t>(&ready_tokens[r], 1),
                            LogitsWanted::Last);
                std::copy(logits.begin(), logits.end(), row(ready_index[r]));
            } catch (...) {
                errors[ready_index[r]] = std::current_exception();
            }
        }
        return errors;
    }
    // One pass: token t of the batch is conversation ready[t]'s. The output rows of the ready
    // states are gathered from a contiguous block.
    const auto m = static_cast<int64_t>(ready.size());
    std::vector<int64_t> starts;  // [m] each state's length before the step
    for (InferenceState* state : ready) starts.push_back(state->kv.length());
    std::vector<float> gathered;  // [m x n_vocab] when some states were left out
    float* block = out;
    if (ready.size() != states.size()) {
        gathered.resize(static_cast<size_t>(m * c.n_vocab));
        block = gathered.data();
    }
    try {
        BatchBuffers& b = backend->begin_batch(0, m, m);
        backend->embed(ready_tokens, b.x);
        run_layers({model, *backend, b, 0, m});
        float* logits = backend->logits_buffer(block, m);  // [m x n_vocab]
        output_logits(model, *backend, b.x, b.xn, m, logits);
        backend->publish_logits(logits, block, m * c.n_vocab);
    } catch (...) {
        const std::exception_ptr failed = std::current_exception();
        for (size_t r = 0; r < ready.size(); ++r) {
            roll_back(*ready[r], starts[r]);
            errors[ready_index[r]] = failed;
        }
        return errors;
    }
    for (size_t r = 0; r < ready.size(); ++r) {
        ready[r]->kv.set_length(starts[r] + 1);
        if (block != out) {
            std::copy(block + static_cast<int64_t>(r) * c.n_vocab,
                      block + static_cast<int64_t>(r + 1) * c.n_vocab, row(ready_index[r]));
        }
    }
    return errors;
}

}  // namespace ember
