// One-off parallel work outside the thread pool (the pool serves the forward pass; these are
// jobs that run once in a while: rewriting a model's weights at load, restoring stored state,
// a benchmark's clients): threads started for the job and joined before it returns.
#pragma once

#include <cstdint>
#include <exception>
#include <limits>
#include <thread>
#include <vector>

namespace ember {

// How many threads such a job uses: one per hardware thread the machine reports (at least
// one), and no more than `useful`, what the job can keep busy (its pieces, or a cap of its
// own: a thread with nothing to do costs its start and nothing else).
int fan_out_threads(int64_t useful = std::numeric_limits<int64_t>::max());

// Runs job(0) .. job(n - 1) side by side, job(0) on the calling thread, and returns when all
// have ended. An exception from a job is rethrown here once all have ended (the lowest
// index's), instead of ending the process from a thread.
template <class Job>
void fan_out(int n, Job&& job) {
    if (n <= 0) return;
    std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
    const auto run = [&job, &errors](int i) {
        try {
            job(i);
        } catch (...) {
            errors[static_cast<size_t>(i)] = std::current_exception();
        }
    };
    std::vector<std::thread> helpers;
    helpers.reserve(static_cast<size_t>(n - 1));
    try {
        for (int i = 1; i < n; ++i) helpers.emplace_back(run, i);
    } catch (...) {  // no thread to be had: the ones started finish first
        for (std::thread& h : helpers) h.join();
        throw;
    }
    run(0);
    for (std::thread& h : helpers) h.join();
    for (const std::exception_ptr& e : errors) {
        if (e) std::rethrow_exception(e);
    }
}

}  // namespace ember
