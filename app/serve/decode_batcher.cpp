#include "app/serve/decode_batcher.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "engine/model/forward.h"
#include "engine/model/model.h"

namespace ember::serve {

DecodeBatcher::DecodeBatcher(const Model& model, ThreadPool& pool, TicketLock& turn, int max_batch)
    : model_(model),
      pool_(pool),
      turn_(turn),
      max_batch_(max_batch),
      n_vocab_(model.config().n_vocab) {
    if (max_batch < 1 || max_batch > kMaxDecodeBatch) {
        throw std::invalid_argument("a decode batch takes 1 to " + std::to_string(kMaxDecodeBatch) +
                                    " conversations, not " + std::to_string(max_batch));
    }
    const size_t bytes = static_cast<size_t>(max_batch_ * n_vocab_) * sizeof(float);
    if (model.device() != nullptr) {
        results_.reserve_pinned(bytes);  // the device's logits copy at full speed into it
    }
    results_.vector().resize(bytes);
}

DecodeBatchStats DecodeBatcher::stats() {
    std::lock_guard lock(mutex_);
    return stats_;
}

void DecodeBatcher::set_stepping(bool& flag, bool stepping) {
    std::lock_guard lock(mutex_);
    if (flag == stepping) return;
    flag = stepping;
    stepping_ += stepping ? 1 : -1;
    changed_.notify_all();  // a leader may wait for one member fewer
}

int DecodeBatcher::stepping() {
    std::lock_guard lock(mutex_);
    return stepping_;
}

void DecodeBatcher::run(Request& request, std::vector<float>& logits) {
    std::unique_lock lock(mutex_);
    queue_.push_back(&request);
    changed_.notify_all();
    while (!request.done) {
        if (!leading_) {
            lead(lock);
        } else {
            changed_.wait(lock);
        }
    }
    if (request.row < 0) return;
    // The row is copied outside the lock; the next step waits for it (unread_).
    lock.unlock();
    const float* row =
        reinterpret_cast<const float*>(results_.vector().data()) + request.row * n_vocab_;
    logits.assign(row, row + n_vocab_);
    lock.lock();
    --unread_;
    changed_.notify_all();
}

void DecodeBatcher::lead(std::unique_lock<std::mutex>& lock) {
    leading_ = true;
    // Every generating member's token, or what has come by the end of the window.
    const auto wanted = [this] {
        return static_cast<int64_t>(queue_.size()) >=
               std::min<int64_t>(std::max(stepping_, 1), max_batch_);
    };
    changed_.wait_until(lock, std::chrono::steady_clock::now() + kGatherWindow, wanted);
    changed_.wait(lock, [this] { return unread_ == 0; });  // results_ is free again
    const size_t count = std::min(queue_.size(), static_cast<size_t>(max_batch_));
    std::vector<Request*> batch(queue_.begin(), queue_.begin() + static_cast<ptrdiff_t>(count));
    queue_.erase(queue_.begin(), queue_.begin() + static_cast<ptrdiff_t>(count));
    lock.unlock();

    std::vector<InferenceState*> states;
    std::vector<int32_t> tokens;
    for (const Request* r : batch) {
        states.push_back(r->state);
        tokens.push_back(r->token);
    }
    std::vector<std::exception_ptr> errors;
    turn_.acquire();
    try {
        errors = decode_batch(model_, states, pool_, tokens,
                              reinterpret_cast<float*>(results_.vector().data()));
    } catch (...) {
        errors.assign(batch.size(), std::current_exception());
    }
    turn_.release();

    lock.lock();
    for (size_t i = 0; i < batch.size(); ++i) {
        Request& r = *batch[i];
        r.error = errors[i];
        if (!r.error) {
            r.row = static_cast<int64_t>(i);
            ++unread_;
        }
        r.done = true;
    }
    ++stats_.steps;
    stats_.tokens += static_cast<int64_t>(batch.size());
    stats_.largest = std::max(stats_.largest, static_cast<int64_t>(batch.size()));
    leading_ = false;
    changed_.notify_all();
}

DecodeBatcher::Member::~Member() {
    batcher_.set_stepping(stepping_, false);
}

std::span<const float> DecodeBatcher::Member::step(InferenceState& state, int32_t token) {
    batcher_.set_stepping(stepping_, true);
    turn_.release();
    Request request;
    request.state = &state;
    request.token = token;
    batcher_.run(request, logits_);
    if (request.error) std::rethrow_exception(request.error);
    return logits_;
}

bool DecodeBatcher::Member::shares_steps() const {
    return batcher_.max_batch_ > 1 && batcher_.stepping() > (stepping_ ? 1 : 0);
}

void DecodeBatcher::Member::exclusive() {
    batcher_.set_stepping(stepping_, false);
    turn_.acquire();
}

}  // namespace ember::serve
