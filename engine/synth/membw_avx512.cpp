// AVX-512 read loop for the bandwidth probe (this file is compiled with AVX-512 enabled and
// only called after a run-time CPU check).
#include <immintrin.h>

#include "engine/synth/membw.h"

namespace ember {

uint64_t sum_words_avx512(const uint64_t* p, uint64_t n) {
    // Four independent accumulators: one 64-byte load per cache line and no add chain long
    // enough to hold back the loads, so the loop runs at the speed of memory.
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    uint64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm512_add_epi64(a0, _mm512_load_si512(p + i));
        a1 = _mm512_add_epi64(a1, _mm512_load_si512(p + i + 8));
        a2 = _mm512_add_epi64(a2, _mm512_load_si512(p + i + 16));
        a3 = _mm512_add_epi64(a3, _mm512_load_si512(p + i + 24));
    }
    for (; i < n; i += 8) a0 = _mm512_add_epi64(a0, _mm512_load_si512(p + i));
    a0 = _mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3));
    return static_cast<uint64_t>(_mm512_reduce_add_epi64(a0));
}

}  // namespace ember
