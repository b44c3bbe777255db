// A small persistent thread pool for data-parallel kernels.
//
// Decode issues a few hundred parallel sections per token, so waking workers through a
// condition variable alone would cost more than the work: workers spin briefly on an epoch
// counter before they fall back to sleeping. The calling thread takes part as worker 0, so
// `-t 2` means the caller plus one pool thread and never oversubscribes the cores.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

namespace ember {

class ThreadPool {
public:
    // Runs fn(task, worker) for task in [0, n_tasks), worker in [0, size()).
    using TaskFn = std::function<void(int64_t task, int worker)>;

    explicit ThreadPool(int n_threads);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int size() const { return n_threads_; }

    // Blocks until every task has run. Tasks are handed out dynamically (an atomic counter),
    // so uneven tasks balance themselves. Not reentrant: do not call from inside a task.
    void parallel_for(int64_t n_tasks, const TaskFn& fn);

    // Splits [0, n) into contiguous ranges, one per worker, aligned to `align` elements;
    // fn(begin, end, worker). The static split keeps each worker's rows in its own cache.
    void parallel_ranges(int64_t n, int64_t align,
                         const std::function<void(int64_t, int64_t, int)>& fn);

    // Thrown by parallel_for (and parallel_ranges) once an Interruption's `stop` said yes: the
    // section's tasks not yet started were skipped, so whatever they were to write is missing
    // and the caller must drop the work in progress.
    class Interrupted : public std::runtime_error {
    public:
        Interrupted() : std::runtime_error("parallel work interrupted") {}
    };

    // While one lives, the calling thread asks `stop` between the tasks it claims (at most
    // every kInterruptionPoll, so a cheap check stays cheap and a progress report in it stays
    // rare); once `stop` returns true the remaining tasks of the section are skipped by every
    // worker and parallel_for throws Interrupted, as does every later section until the
    // Interruption ends. This lets a long computation (a prefill layer of a large model takes
    // seconds on two cores) stop within one task instead of one layer. `stop` runs on the
    // calling thread only. Not nested.
    class Interruption {
    public:
        Interruption(ThreadPool& pool, const std::function<bool()>& stop);
        ~Interruption();
        Interruption(const Interruption&) = delete;
        Interruption& operator=(const Interruption&) = delete;

    private:
        ThreadPool& pool_;
    };
    static constexpr std::chrono::milliseconds kInterruptionPoll{10};

private:
    void worker_loop(int worker);
    void run_tasks(int worker);
    // On the calling thread: asks the Interruption's stop when a poll is due.
    bool stop_asked();

    int n_threads_;
    std::vector<std::thread> threads_;
    std::mutex mutex_;
    std::condition_variable wake_;
    std::atomic<uint64_t> epoch_{0};
    std::atomic<int64_t> next_task_{0};
    std::atomic<int> busy_workers_{0};
    std::atomic<bool> stopping_{false};
    int64_t n_tasks_ = 0;
    const TaskFn* fn_ = nullptr;
    // The open Interruption's check (null: none) and when it is next asked; touched by the
    // calling thread only. `interrupted_` is read by every worker.
    const std::function<bool()>* stop_ = nullptr;
    std::chrono::steady_clock::time_point next_stop_poll_{};
    std::atomic<bool> interrupted_{false};
};

}  // namespace ember
