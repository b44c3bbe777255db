// The sampler's random number generator: xoshiro256** seeded through splitmix64.
//
// Why not std::mt19937_64 + std::uniform_real_distribution: the distributions are
// implementation-defined (libstdc++ and libc++ turn the same engine output into different
// doubles), and the engine's state can only be saved through a text format whose content
// differs between standard libraries. Sampler state is persisted with conversations, so the
// generator must be fully specified here: 32 bytes of state, the algorithm of Blackman & Vigna
// ("Scrambled linear pseudorandom number generators", 2021) and our own [0,1) conversion.
#pragma once

#include <array>
#include <cstdint>

namespace ember {

class Rng {
public:
    using State = std::array<uint64_t, 4>;

    explicit Rng(uint64_t seed = 0) { reseed(seed); }

    // Expands a 64-bit seed into the 256-bit state with splitmix64, as the xoshiro authors
    // recommend: it never yields the all-zero state, and nearby seeds give unrelated states.
    void reseed(uint64_t seed) {
        for (uint64_t& word : s_) word = splitmix64(seed);
    }

    uint64_t next_u64() {
        const uint64_t result = rotl(s_[1] * 5, 7) * 9;
        const uint64_t t = s_[1] << 17;
        s_[2] ^= s_[0];
        s_[3] ^= s_[1];
        s_[1] ^= s_[2];
        s_[0] ^= s_[3];
        s_[2] ^= t;
        s_[3] = rotl(s_[3], 45);
        return result;
    }

    // Uniform in [0, 1): the top 53 bits scaled by 2^-53, so every value is an exact
    // multiple of 2^-53 and 1.0 is never returned.
    double next_double() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

    const State& state() const { return s_; }
    // The all-zero state is a fixed point of the generator; callers must reject it (see
    // valid_state) before restoring.
    void set_state(const State& state) { s_ = state; }
    static bool valid_state(const State& state) {
        return (state[0] | state[1] | state[2] | state[3]) != 0;
    }

    // One step of splitmix64 (Steele, Lea & Flood 2014): advances `x` and returns the mix.
    static uint64_t splitmix64(uint64_t& x) {
        uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        return z ^ (z >> 31);
    }

private:
    static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

    State s_{};
};

}  // namespace ember
