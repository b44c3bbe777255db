// Sampler::sample(), distribution() and accept() must not allocate once the sampler has seen
// the vocabulary size: they run once per generated token.
//
// Counting allocations needs a replaced global operator new. That is why this suite is its own
// executable (every tests/unit/test_*.cpp is): the replacement touches nothing else. The
// counter is thread_local and switched on only around the calls under test.
#include <gtest/gtest.h>

#include <cstdlib>
#include <new>
#include <vector>

#include "engine/sampling/rng.h"
#include "engine/sampling/sampler.h"

namespace {
thread_local bool t_counting = false;
thread_local size_t t_allocations = 0;
}  // namespace

void* operator new(std::size_t size) {
    if (t_counting) ++t_allocations;
    if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
    throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
    std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
    std::free(p);
}

namespace ember {
namespace {

std::vector<float> uniform_logits(Rng& rng, size_t n, double spread) {
    std::vector<float> out(n);
    for (float& x : out) x = static_cast<float>((rng.next_double() - 0.5) * spread);
    return out;
}

TEST(SamplerAllocations, CounterSeesAllocations) {
    // Guards the test below against a replacement that is silently not in use.
    t_allocations = 0;
    t_counting = true;
    auto* probe = new std::vector<int>(100);
    t_counting = false;
    delete probe;
    EXPECT_GE(t_allocations, 2u);
}

TEST(SamplerAllocations, NoneAfterWarmUp) {
    constexpr size_t kVocab = 152064;
    Rng rng(1);
    std::vector<std::vector<float>> rows;
    for (int i = 0; i < 4; ++i) rows.push_back(uniform_logits(rng, kVocab, 6.0 + 4.0 * i));
    rows[1][42] = 30.0f;  // one peaked row

    struct Case {
        const char* name;
        float temperature;
        int32_t top_k;
        float top_p;
        float min_p;
    };
    const Case cases[] = {
        {"defaults", 0.8f, 40, 0.95f, 0.05f},          {"greedy", 0.0f, 40, 0.95f, 0.05f},
        {"nth_element top-k", 1.0f, 3000, 0.9f, 0.0f}, {"whole vocabulary", 1.0f, 0, 1.0f, 0.0f},
        {"top-p only", 1.0f, 0, 0.9f, 0.0f},           {"min-p only", 1.0f, 0, 1.0f, 0.02f},
        {"top-p and min-p", 0.7f, 0, 0.8f, 0.01f},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.name);
        SamplingParams p;
        p.temperature = c.temperature;
        p.top_k = c.top_k;
        p.top_p = c.top_p;
        p.min_p = c.min_p;
        p.repeat_penalty = 1.1f;
        p.presence_penalty = 0.2f;
        p.frequency_penalty = 0.1f;
        Sampler sampler(p);
        sampler.accept(sampler.sample(rows[0]));  // warm-up
        sampler.distribution(rows[0]);

        t_allocations = 0;
        t_counting = true;
        for (int step = 0; step < 20; ++step) {
            const std::vector<float>& row = rows[static_cast<size_t>(step) % rows.size()];
            sampler.accept(sampler.sample(row));
            sampler.distribution(row);
        }
        t_counting = false;
        EXPECT_EQ(t_allocations, 0u);
    }
}

}  // namespace
}  // namespace ember
