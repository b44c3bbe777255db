// How one model serves many requests: N slots, each a Conversation with its own inference
// state, and one engine turn that the generating slots pass around.
//
// Scheduling. A request takes the free slot whose cached tokens share the longest prefix
// with its prompt (ties: the least recently used); the slot's prefix store (the SQLite state
// store) fills in what the slot lacks. When every slot is busy, requests wait in arrival
// order. Slots that generate at the same time share the engine token by token: a slot holds
// the turn while it evaluates, gives it up after each piece of text (and while writing that
// text to its client) and queues for it again behind the others. Their one-token steps go
// through the decode batcher (decode_batcher.h), which evaluates the generating slots' next
// tokens together, one pass a step, under the turn.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/generate/conversation.h"

namespace ember::serve {

// A first-come first-served lock: acquire() waits for every earlier acquire().
class TicketLock {
public:
    void acquire();
    void release();

private:
    std::mutex mutex_;
    std::condition_variable cv_;
    uint64_t next_ = 0;     // the ticket the next acquire() draws
    uint64_t serving_ = 0;  // the ticket that holds the lock
};

// Reply texts this server generated and the tokens that produced them. A client sends a
// reply back as text in its next request; re-tokenizing it can give other tokens than were
// generated, which would break the reusable prefix there, so the generated ids are spliced
// back in (Conversation::tokenize_prompt uses a message's ids where they are set).
class ReplyIds {
public:
    explicit ReplyIds(size_t capacity) : capacity_(capacity) {}
    void remember(const std::string& text, const std::vector<int32_t>& ids);
    // Sets `ids` of the assistant messages whose text is a remembered reply.
    void attach(std::vector<ChatMessage>& messages);

private:
    std::mutex mutex_;
    size_t capacity_;
    std::list<std::string> order_;  // most recent first
    std::unordered_map<std::string,
                       std::pair<std::vector<int32_t>, std::list<std::string>::iterator>>
        ids_;
};

class SlotPool;

// A slot held by one request; gives it back when destroyed.
class SlotLease {
public:
    SlotLease(SlotPool& pool, int index) : pool_(&pool), index_(index) {}
    SlotLease(SlotLease&& other) noexcept : pool_(other.pool_), index_(other.index_) {
        other.pool_ = nullptr;
    }
    SlotLease(const SlotLease&) = delete;
    SlotLease& operator=(const SlotLease&) = delete;
    SlotLease& operator=(SlotLease&&) = delete;
    ~SlotLease();

    int index() const { return index_; }
    Conversation& conversation();

private:
    SlotPool* pool_;
    int index_;
};

struct SlotPoolStats {
    int slots = 0;
    int busy = 0;
    int waiting = 0;
};

class SlotPool {
public:
    // `make` builds each slot's conversation. At most `max_waiting` requests wait for a slot.
    SlotPool(int n_slots, size_t max_waiting,
             const std::function<std::unique_ptr<Conversation>()>& make);

    // Waits for a free slot (in arrival order) and takes the one sharing the longest prefix
    // with `prompt`; nullopt when `max_waiting` requests already wait, once closed, or when
    // `abandoned` (asked every 100 ms while waiting) says the client has gone.
    std::optional<SlotLease> acquire(const std::vector<int32_t>& prompt,
                                     const std::function<bool()>& abandoned = {});
    // No slot is handed out any more; the requests waiting get nullopt now.
    void close();
    bool closed();

    // The turn at the engine (see the file comment).
    TicketLock& engine_turn() { return engine_turn_; }
    SlotPoolStats stats();

private:
    friend class SlotLease;
    void release(int index);

    struct Slot {
        std::unique_ptr<Conversation> conversation;
        bool busy = false;
        uint64_t last_used = 0;
        // The tokens the slot's state holds, copied when the slot is released (read while
        // choosing a slot, when the conversation itself may be generating).
        std::vector<int32_t> cached;
    };
    std::mutex mutex_;
    std::condition_variable cv_;
    std::vector<Slot> slots_;
    std::deque<uint64_t> waiting_;  // tickets of requests waiting for a slot, oldest first
    uint64_t next_ticket_ = 0;
    uint64_t clock_ = 0;
    size_t max_waiting_;
    bool closed_ = false;
    TicketLock engine_turn_;
};

// Holds the engine turn for a scope; yield() lets the other generating slots go first.
class EngineTurn {
public:
    explicit EngineTurn(TicketLock& lock) : lock_(lock) { lock_.acquire(); }
    ~EngineTurn() {
        if (held_) lock_.release();
    }
    EngineTurn(const EngineTurn&) = delete;
    EngineTurn& operator=(const EngineTurn&) = delete;
    void release() {
        if (held_) lock_.release();
        held_ = false;
    }
    void acquire() {
        if (!held_) lock_.acquire();
        held_ = true;
    }
    bool held() const { return held_; }

private:
    TicketLock& lock_;
    bool held_ = true;
};

}  // namespace ember::serve
