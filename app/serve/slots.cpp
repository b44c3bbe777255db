#include "app/serve/slots.h"

#include <algorithm>
#include <chrono>

namespace ember::serve {

void TicketLock::acquire() {
    std::unique_lock lock(mutex_);
    const uint64_t ticket = next_++;
    cv_.wait(lock, [&] { return serving_ == ticket; });
}

void TicketLock::release() {
    {
        std::lock_guard lock(mutex_);
        ++serving_;
    }
    cv_.notify_all();
}

void ReplyIds::remember(const std::string& text, const std::vector<int32_t>& ids) {
    if (text.empty() || ids.empty() || capacity_ == 0) return;
    std::lock_guard lock(mutex_);
    if (auto it = ids_.find(text); it != ids_.end()) {
        order_.erase(it->second.second);
        ids_.erase(it);
    }
    order_.push_front(text);
    ids_.emplace(text, std::make_pair(ids, order_.begin()));
    while (order_.size() > capacity_) {
        ids_.erase(order_.back());
        order_.pop_back();
    }
}

void ReplyIds::attach(std::vector<ChatMessage>& messages) {
    std::lock_guard lock(mutex_);
    for (auto& m : messages) {
        if (m.role != "assistant" || !m.ids.empty() || !m.tool_calls.empty()) continue;
        if (auto it = ids_.find(m.content); it != ids_.end()) m.ids = it->second.first;
    }
}

SlotLease::~SlotLease() {
    if (pool_ != nullptr) pool_->release(index_);
}

Conversation& SlotLease::conversation() {
    return *pool_->slots_[static_cast<size_t>(index_)].conversation;
}

SlotPool::SlotPool(int n_slots, size_t max_waiting,
                   const std::function<std::unique_ptr<Conversation>()>& make)
    : slots_(static_cast<size_t>(std::max(1, n_slots))), max_waiting_(max_waiting) {
    for (auto& s : slots_) s.conversation = make();
}

std::optional<SlotLease> SlotPool::acquire(const std::vector<int32_t>& prompt,
                                           const std::function<bool()>& abandoned) {
    std::unique_lock lock(mutex_);
    const bool any_free =
        std::any_of(slots_.begin(), slots_.end(), [](const Slot& s) { return !s.busy; });
    if (closed_ || (!any_free && waiting_.size() >= max_waiting_)) return std::nullopt;
    const uint64_t ticket = next_ticket_++;
    waiting_.push_back(ticket);
    int best = -1;
    bool gone = false;
    const auto ready = [&] {
        if (closed_) return true;
        if (waiting_.front() != ticket) return false;
        best = -1;
        size_t best_common = 0;
        for (size_t i = 0; i < slots_.size(); ++i) {
            const Slot& s = slots_[i];
            if (s.busy) continue;
            const size_t limit = std::min(s.cached.size(), prompt.size());
            size_t common = 0;
            while (common < limit && s.cached[common] == prompt[common]) ++common;
            const bool better = best < 0 || common > best_common ||
                                (common == best_common &&
                                 s.last_used < slots_[static_cast<size_t>(best)].last_used);
            if (better) {
                best = static_cast<int>(i);
                best_common = common;
            }
        }
        return best >= 0;
    };
    // A waiting client that hangs up gives its place back (its socket is looked at between
    // waits, with the lock released).
    auto next_look = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
    while (!ready()) {
        if (!abandoned) {
            cv_.wait(lock);
            continue;
        }
        cv_.wait_until(lock, next_look);
        if (std::chrono::steady_clock::now() >= next_look) {
            lock.unlock();
            gone = abandoned();
            lock.lock();
            if (gone) break;
            next_look = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
        }
    }
    if (closed_ || gone) {
        waiting_.erase(std::find(waiting_.begin(), waiting_.end(), ticket));
        lock.unlock();
        cv_.notify_all();
        return std::nullopt;
    }
    waiting_.pop_front();
    Slot& slot = slots_[static_cast<size_t>(best)];
    slot.busy = true;
    slot.last_used = ++clock_;
    lock.unlock();
    cv_.notify_all();  // the next waiter may find another free slot
    return SlotLease(*this, best);
}

void SlotPool::release(int index) {
    {
        std::lock_guard lock(mutex_);
        Slot& slot = slots_[static_cast<size_t>(index)];
        slot.cached = slot.conversation->cached_tokens();
        slot.busy = false;
    }
    cv_.notify_all();
}

void SlotPool::close() {
    {
        std::lock_guard lock(mutex_);
        closed_ = true;
    }
    cv_.notify_all();
}

bool SlotPool::closed() {
    std::lock_guard lock(mutex_);
    return closed_;
}

SlotPoolStats SlotPool::stats() {
    std::lock_guard lock(mutex_);
    SlotPoolStats s;
    s.slots = static_cast<int>(slots_.size());
    for (const auto& slot : slots_) s.busy += slot.busy ? 1 : 0;
    s.waiting = static_cast<int>(waiting_.size());
    return s;
}

}  // namespace ember::serve
