#include "engine/synth/membw.h"

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <new>

#include "engine/util/thread_pool.h"

namespace ember {

namespace {

// The buffer is mapped and unmapped directly (not malloc'd) so that its pages are certainly
// returned to the system afterwards: callers measure the model's peak RSS around the probe.
class Mapping {
public:
    explicit Mapping(uint64_t bytes) : bytes_(bytes) {
        void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) throw std::bad_alloc();
        p_ = static_cast<uint64_t*>(p);
    }
    ~Mapping() { munmap(p_, bytes_); }
    Mapping(const Mapping&) = delete;
    Mapping& operator=(const Mapping&) = delete;
    uint64_t* get() const { return p_; }

private:
    uint64_t* p_ = nullptr;
    uint64_t bytes_ = 0;
};

using SumFn = uint64_t (*)(const uint64_t*, uint64_t);

SumFn pick_sum(const char** isa) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (__builtin_cpu_supports("avx512f")) {
        *isa = "avx512";
        return sum_words_avx512;
    }
#endif
    *isa = "generic";
    return sum_words_generic;
}

}  // namespace

uint64_t sum_words_generic(const uint64_t* p, uint64_t n) {
    // Eight independent lanes: the compiler turns this into vector adds at the baseline ISA.
    uint64_t acc[8] = {};
    for (uint64_t i = 0; i < n; i += 8) {
        for (int j = 0; j < 8; ++j) acc[j] += p[i + static_cast<uint64_t>(j)];
    }
    uint64_t s = 0;
    for (uint64_t v : acc) s += v;
    return s;
}

BandwidthResult measure_read_bandwidth(ThreadPool& pool, uint64_t bytes, int passes) {
    constexpr uint64_t kPage = 4096;
    BandwidthResult r;
    r.bytes = (std::max<uint64_t>(bytes, kPage) + kPage - 1) / kPage * kPage;
    const SumFn sum = pick_sum(&r.isa);
    const uint64_t n_words = r.bytes / sizeof(uint64_t);
    Mapping buf(r.bytes);
    uint64_t* p = buf.get();
    // Shares aligned to pages: each worker first-touches the pages it later reads.
    constexpr int64_t kAlignWords = kPage / sizeof(uint64_t);
    std::vector<uint64_t> partial(static_cast<size_t>(pool.size()));
    pool.parallel_ranges(static_cast<int64_t>(n_words), kAlignWords,
                         [p](int64_t b, int64_t e, int) {
                             for (int64_t i = b; i < e; ++i) p[i] = static_cast<uint64_t>(i);
                         });
    auto pass = [&] {
        std::fill(partial.begin(), partial.end(), 0);
        pool.parallel_ranges(
            static_cast<int64_t>(n_words), kAlignWords, [&](int64_t b, int64_t e, int worker) {
                partial[static_cast<size_t>(worker)] += sum(p + b, static_cast<uint64_t>(e - b));
            });
        for (uint64_t v : partial) r.checksum += v;
    };
    pass();  // warm-up: TLB, pool threads awake
    for (int i = 0; i < passes; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        pass();
        const double s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        r.gbs.push_back(static_cast<double>(r.bytes) / s / 1e9);
    }
    summarize(r);
    return r;
}

void summarize(BandwidthResult& r) {
    if (r.gbs.empty()) return;
    std::vector<double> sorted = r.gbs;
    std::sort(sorted.begin(), sorted.end());
    const size_t m = sorted.size() / 2;
    r.median_gbs = sorted.size() % 2 ? sorted[m] : 0.5 * (sorted[m - 1] + sorted[m]);
    r.best_gbs = sorted.back();
}

}  // namespace ember
