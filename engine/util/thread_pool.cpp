#include "engine/util/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <thread>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace ember {

// A parallel section is open from the moment the caller publishes it (epoch_ bumped) until the
// caller has run out of tasks and closes it. Workers *join* an open section (busy_workers_
// counts them) and only joined workers are waited for. So a worker that is asleep or
// descheduled when a section starts - common on shared, oversubscribed cores - never stalls
// the caller: the caller simply claims every task itself. A worker that wakes late finds the
// section closed (or the next one open, whose tasks it may then help with) and moves on.
//
// busy_workers_ = number of joined workers, plus kClosed once the caller closed the section.

namespace {
inline void cpu_relax() {
#if defined(__x86_64__)
    _mm_pause();
#endif
}
// How long an idle worker spins before it sleeps: long enough to bridge the gap between the
// sections of one decode step (tens of microseconds), short enough not to take a shared core
// from other processes between tokens or while the user types. Bounded by time, not by
// iterations, because a pause lasts ~10 cycles on some CPUs and ~140 on others.
constexpr auto kSpinTime = std::chrono::microseconds(500);
constexpr int kSpinsPerClockRead = 64;
// Spin iterations of the caller waiting for joined workers before it sleeps: joined workers are
// running a task, so this is short unless one was preempted - then the core is better given
// away (to that worker, possibly) than spun on.
constexpr int kWaitSpinIterations = 2000;
// Neither loop yields the core: on a machine whose cores are busy with other programs (a
// build, a browser), sched_yield hands the rest of the time slice to them, and the thread runs
// again only a slice (milliseconds) later, while a decode step opens a section every few tens
// of microseconds. Measured on 2 pinned cores with one spinning process per core (SmolLM2-135M,
// 16 cores of the device machine's Xeon): decode 8 tok/s with the yields, against the
// reference engine's 45. Sleeping instead (the condition variable, the futex wait) keeps the
// scheduler's favour for the thread that slept, so it runs as soon as it is woken.
constexpr int kClosed = 1 << 30;
}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
    busy_workers_.store(kClosed);  // no section open yet
    threads_.reserve(n_threads_ - 1);
    for (int w = 1; w < n_threads_; ++w) threads_.emplace_back([this, w] { worker_loop(w); });
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stopping_.store(true);
        epoch_.fetch_add(1);
    }
    wake_.notify_all();
    for (auto& t : threads_) t.join();
}

ThreadPool::Interruption::Interruption(ThreadPool& pool, const std::function<bool()>& stop)
    : pool_(pool) {
    pool_.stop_ = &stop;
    pool_.next_stop_poll_ = std::chrono::steady_clock::now() + kInterruptionPoll;
    pool_.interrupted_.store(false, std::memory_order_relaxed);
}

ThreadPool::Interruption::~Interruption() {
    pool_.stop_ = nullptr;
    pool_.interrupted_.store(false, std::memory_order_relaxed);
}

bool ThreadPool::stop_asked() {
    if (stop_ == nullptr) return false;
    if (interrupted_.load(std::memory_order_relaxed)) return true;
    const auto now = std::chrono::steady_clock::now();
    if (now < next_stop_poll_) return false;
    next_stop_poll_ = now + kInterruptionPoll;
    if (!(*stop_)()) return false;
    interrupted_.store(true, std::memory_order_relaxed);
    return true;
}

void ThreadPool::run_tasks(int worker) {
    for (;;) {
        int64_t task = next_task_.fetch_add(1, std::memory_order_relaxed);
        if (task >= n_tasks_) break;
        // An interrupted section's tasks are claimed and skipped, so the section closes as
        // soon as the tasks running now end.
        if (worker == 0 ? stop_asked() : interrupted_.load(std::memory_order_relaxed)) continue;
        (*fn_)(task, worker);
    }
}

void ThreadPool::worker_loop(int worker) {
    uint64_t seen = 0;
    for (;;) {
        const auto spin_start = std::chrono::steady_clock::now();
        for (int spins = 1; epoch_.load(std::memory_order_acquire) == seen; ++spins) {
            cpu_relax();
            if (spins % kSpinsPerClockRead == 0 &&
                std::chrono::steady_clock::now() - spin_start > kSpinTime) {
                break;
            }
        }
        if (epoch_.load(std::memory_order_acquire) == seen) {
            std::unique_lock<std::mutex> lock(mutex_);
            wake_.wait(lock, [&] { return epoch_.load() != seen; });
        }
        seen = epoch_.load(std::memory_order_acquire);
        if (stopping_.load()) return;
        // Join whichever section is open now (possibly a later one than `seen`: its tasks are
        // just as valid, fn_ and n_tasks_ cannot change while we are counted).
        int v = busy_workers_.load(std::memory_order_relaxed);
        bool joined = false;
        while ((v & kClosed) == 0) {
            if (busy_workers_.compare_exchange_weak(v, v + 1, std::memory_order_acquire,
                                                    std::memory_order_relaxed)) {
                joined = true;
                break;
            }
        }
        if (!joined) continue;
        run_tasks(worker);
        // The last joined worker of a closed section wakes the caller if it went to sleep.
        if (busy_workers_.fetch_sub(1, std::memory_order_acq_rel) == kClosed + 1) {
            busy_workers_.notify_one();
        }
    }
}

void ThreadPool::parallel_for(int64_t n_tasks, const TaskFn& fn) {
    if (n_tasks <= 0) return;
    if (stop_asked()) throw Interrupted();
    if (n_threads_ == 1 || n_tasks == 1) {
        for (int64_t t = 0; t < n_tasks; ++t) {
            if (stop_asked()) throw Interrupted();
            fn(t, 0);
        }
        return;
    }
    // No worker is joined here (the previous section ended with none), so these plain writes
    // race with nobody; opening the section (release) publishes them to joiners (acquire).
    fn_ = &fn;
    n_tasks_ = n_tasks;
    next_task_.store(0, std::memory_order_relaxed);
    busy_workers_.store(0, std::memory_order_release);
    {
        // Publishing under the mutex orders it against a worker about to sleep.
        std::lock_guard<std::mutex> lock(mutex_);
        epoch_.fetch_add(1, std::memory_order_acq_rel);
    }
    wake_.notify_all();
    run_tasks(0);
    // Close: from now on nobody joins; wait for those who did.
    int v = busy_workers_.fetch_add(kClosed, std::memory_order_acq_rel) + kClosed;
    for (int spins = 0; v != kClosed; ++spins) {
        if (spins < kWaitSpinIterations) {
            cpu_relax();
        } else {
            busy_workers_.wait(v, std::memory_order_acquire);
        }
        v = busy_workers_.load(std::memory_order_acquire);
    }
    fn_ = nullptr;
    if (interrupted_.load(std::memory_order_relaxed)) throw Interrupted();
}

void ThreadPool::parallel_ranges(int64_t n, int64_t align,
                                 const std::function<void(int64_t, int64_t, int)>& fn) {
    if (n <= 0) return;
    align = std::max<int64_t>(1, align);
    struct Split {
        int64_t n, align, units, parts;
        const std::function<void(int64_t, int64_t, int)>* fn;
    } split{n, align, (n + align - 1) / align, 0, &fn};
    split.parts = std::min<int64_t>(n_threads_, split.units);
    // Capturing one pointer keeps the std::function in its small buffer: no allocation on
    // the decode path.
    const Split* sp = &split;
    parallel_for(split.parts, [sp](int64_t part, int worker) {
        const int64_t begin = sp->units * part / sp->parts * sp->align;
        const int64_t end = std::min(sp->n, sp->units * (part + 1) / sp->parts * sp->align);
        if (begin < end) (*sp->fn)(begin, end, worker);
    });
}

}  // namespace ember
