// Continuous batching of `ember serve`'s decode steps: the slots generating at the same time put
// their next token through the model together, one decode_batch (forward.h) a step, and a
// generation joins or leaves between steps. Each reply is bit for bit the one it gets alone:
// decode_batch gives every conversation the logits forward() would.
//
// A generation holds the engine turn (slots.h) for its prompt, as before. Its one-token steps
// go through a Member (a DecodeStepper), which gives the turn up and queues the token; the
// first queued member leads the step: it waits until every generating member has queued (or
// kGatherWindow has passed), takes the engine turn, evaluates up to `max_batch` tokens in one
// pass and hands each member its row of logits. Sampling, the stop checks and writing the text
// to the client run on each member's own thread, outside the turn. On a device that does not
// batch (the CPU, a hybrid, a split model) decode_batch evaluates the tokens one by one and
// the server passes `max_batch` 1: each step is then one turn, as the round-robin was.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <span>
#include <vector>

#include "app/serve/slots.h"
#include "engine/generate/generate.h"
#include "engine/model/pinned_bytes.h"

namespace ember {
class Model;
class ThreadPool;
struct InferenceState;
}  // namespace ember

namespace ember::serve {

// Steps and tokens evaluated, for /health and bench-serve: tokens / steps is the mean batch.
struct DecodeBatchStats {
    int64_t steps = 0;
    int64_t tokens = 0;
    int64_t largest = 0;  // most tokens in one step
};

class DecodeBatcher {
public:
    // How long a leader waits for the generating members still sampling or writing their text:
    // a step of a model on a GPU takes several milliseconds, a member's turn around a few
    // hundred microseconds.
    static constexpr std::chrono::microseconds kGatherWindow{2000};

    // `model` and `pool` run the steps, under `turn` (the engine turn every slot shares).
    // `max_batch`: tokens a step takes at most (1..kMaxDecodeBatch).
    DecodeBatcher(const Model& model, ThreadPool& pool, TicketLock& turn, int max_batch);
    DecodeBatcher(const DecodeBatcher&) = delete;
    DecodeBatcher& operator=(const DecodeBatcher&) = delete;

    int max_batch() const { return max_batch_; }
    DecodeBatchStats stats();

    // One generation's steps, on the thread that holds `turn` for it (an EngineTurn of the
    // batcher's lock).
    class Member final : public DecodeStepper {
    public:
        Member(DecodeBatcher& batcher, EngineTurn& turn) : batcher_(batcher), turn_(turn) {}
        ~Member() override;
        Member(const Member&) = delete;
        Member& operator=(const Member&) = delete;
        // Gives up the engine turn, and returns once a batched step evaluated `token`.
        std::span<const float> step(InferenceState& state, int32_t token) override;
        // Takes the engine turn back (a verification batch, the end of the generation).
        void exclusive() override;
        // Whether another member is generating (between its steps).
        bool shares_steps() const override;

    private:
        DecodeBatcher& batcher_;
        EngineTurn& turn_;
        bool stepping_ = false;      // counted in the batcher's generating members
        std::vector<float> logits_;  // [n_vocab] the last step's row
    };

private:
    struct Request {
        InferenceState* state = nullptr;
        int32_t token = 0;
        int64_t row = -1;  // its row of results_ once evaluated
        std::exception_ptr error;
        bool done = false;
    };

    // Queues `request` and returns once a step evaluated it, leading steps while none leads.
    void run(Request& request, std::vector<float>& logits);
    // The leader's step: up to max_batch_ queued requests, under the engine turn (lock held on
    // entry and exit, released while the model runs).
    void lead(std::unique_lock<std::mutex>& lock);
    // Leaving or joining the members that are generating (their steps are waited for).
    void set_stepping(bool& flag, bool stepping);
    int stepping();

    const Model& model_;
    ThreadPool& pool_;
    TicketLock& turn_;
    const int max_batch_;
    const int64_t n_vocab_;
    std::mutex mutex_;
    std::condition_variable changed_;
    std::deque<Request*> queue_;  // queued, oldest first
    int stepping_ = 0;            // members between their first step and exclusive()
    bool leading_ = false;        // a member leads a step
    int64_t unread_ = 0;          // rows of results_ not yet copied by their members
    PinnedBytes results_;         // [max_batch_ x n_vocab_] floats: the last step's logits
    DecodeBatchStats stats_;
};

}  // namespace ember::serve
