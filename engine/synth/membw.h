// Memory read bandwidth, measured the way decode reads weights: every thread of the pool
// streams its own contiguous share of a buffer much larger than the caches.
//
// Decode of one token reads every weight once, so bandwidth / weight bytes per token bounds
// decode speed (the roofline). Measuring it in the same run as the model benchmark, with the
// same pool, keeps the ratio meaningful on a shared, noisy machine.
#pragma once

#include <cstdint>
#include <vector>

namespace ember {

class ThreadPool;

struct BandwidthResult {
    uint64_t bytes = 0;       // buffer size
    std::vector<double> gbs;  // per timed pass, 1e9 bytes per second
    double median_gbs = 0;
    double best_gbs = 0;
    const char* isa = "";   // the read loop's instruction set
    uint64_t checksum = 0;  // sum of everything read: keeps the reads observable
};

// Maps `bytes` (rounded up to 4 KiB; the pool's workers touch their own shares first), does
// one untimed pass, then `passes` timed passes. Throws std::bad_alloc when the memory is not
// there. The mapping is gone (returned to the system) when this returns.
BandwidthResult measure_read_bandwidth(ThreadPool& pool, uint64_t bytes, int passes);

// Recomputes median_gbs and best_gbs from gbs (after merging the passes of several probes).
void summarize(BandwidthResult& r);

// The read loops: the sum of n 64-bit words at p (64-byte aligned, n a multiple of 8).
uint64_t sum_words_generic(const uint64_t* p, uint64_t n);
uint64_t sum_words_avx512(const uint64_t* p, uint64_t n);  // needs AVX-512F

}  // namespace ember
