// AVX-512 versions of the forward pass's vector ops (attention dots, softmax, SwiGLU).
// Compiled with AVX-512 flags (see engine/CMakeLists.txt); called only after a CPU check.
#include "engine/model/cpu/ops_avx512.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace ember::avx512 {

namespace {
// AVX-512 versions of the hot vector ops (attention dot products, softmax, SwiGLU). The
// engine is built for baseline x86-64; these run only where the CPU and the OS enable
// AVX-512 (libgcc's check reads XCR0 too).
float hsum512(__m512 v) {
    v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(1, 0, 3, 2)));
    v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(2, 3, 0, 1)));
    v = _mm512_add_ps(v, _mm512_permute_ps(v, _MM_SHUFFLE(1, 0, 3, 2)));
    v = _mm512_add_ps(v, _mm512_permute_ps(v, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm512_cvtss_f32(v);
}

float hmax512(__m512 v) {
    v = _mm512_max_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(1, 0, 3, 2)));
    v = _mm512_max_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(2, 3, 0, 1)));
    v = _mm512_max_ps(v, _mm512_permute_ps(v, _MM_SHUFFLE(1, 0, 3, 2)));
    v = _mm512_max_ps(v, _mm512_permute_ps(v, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm512_cvtss_f32(v);
}

// exp(x) for x <= 0 region and beyond: 2^(x log2 e) split into 2^n (vscalefps) and a degree-6
// polynomial of 2^f on f in [-0.5, 0.5]; relative error ~2e-7, and exp(-inf) = 0.
__m512 exp512(__m512 x) {
    const __m512 log2e = _mm512_set1_ps(1.44269504088896341f);
    x = _mm512_max_ps(x, _mm512_set1_ps(-104.0f));
    x = _mm512_min_ps(x, _mm512_set1_ps(88.7f));
    const __m512 t = _mm512_mul_ps(x, log2e);
    const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    // f = x*log2e - n, computed as (x - n*ln2) * log2e in two steps for accuracy.
    const __m512 ln2_hi = _mm512_set1_ps(0.693145751953125f);
    const __m512 ln2_lo = _mm512_set1_ps(1.428606765330187e-06f);
    __m512 r = _mm512_fnmadd_ps(n, ln2_hi, x);
    r = _mm512_fnmadd_ps(n, ln2_lo, r);  // r in [-ln2/2, ln2/2]; exp(r) by Taylor to r^7
    __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

}  // namespace

float dot(const float* a, const float* b, int64_t n) {
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
        acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), acc1);
    }
    for (; i + 16 <= n; i += 16) {
        acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
    }
    if (i < n) {
        const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
        acc1 =
            _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), acc1);
    }
    return hsum512(_mm512_add_ps(acc0, acc1));
}

void axpy(float a, const float* x, float* y, int64_t n) {
    const __m512 va = _mm512_set1_ps(a);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        _mm512_storeu_ps(y + i,
                         _mm512_fmadd_ps(va, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
    }
    if (i < n) {
        const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(
            y + i, m,
            _mm512_fmadd_ps(va, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i)));
    }
}

void softmax(float* x, int64_t n) {
    __m512 vmax = _mm512_set1_ps(-INFINITY);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) vmax = _mm512_max_ps(vmax, _mm512_loadu_ps(x + i));
    float max = hmax512(vmax);
    for (int64_t j = i; j < n; ++j) max = std::max(max, x[j]);
    const __m512 bmax = _mm512_set1_ps(max);
    __m512 vsum = _mm512_setzero_ps();
    for (i = 0; i + 16 <= n; i += 16) {
        const __m512 e = exp512(_mm512_sub_ps(_mm512_loadu_ps(x + i), bmax));
        _mm512_storeu_ps(x + i, e);
        vsum = _mm512_add_ps(vsum, e);
    }
    if (i < n) {
        const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
        const __m512 e = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), bmax));
        _mm512_mask_storeu_ps(x + i, m, e);
        vsum = _mm512_add_ps(vsum, _mm512_maskz_mov_ps(m, e));
    }
    const __m512 inv = _mm512_set1_ps(1.0f / hsum512(vsum));
    for (i = 0; i + 16 <= n; i += 16)
        _mm512_storeu_ps(x + i, _mm512_mul_ps(_mm512_loadu_ps(x + i), inv));
    if (i < n) {
        const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), inv));
    }
}

void swiglu(float* gate, const float* up, int64_t n) {
    const __m512 one = _mm512_set1_ps(1.0f);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 g = _mm512_loadu_ps(gate + i);
        const __m512 sig =
            _mm512_div_ps(one, _mm512_add_ps(one, exp512(_mm512_sub_ps(_mm512_setzero_ps(), g))));
        _mm512_storeu_ps(gate + i, _mm512_mul_ps(_mm512_mul_ps(g, sig), _mm512_loadu_ps(up + i)));
    }
    if (i < n) {
        // The tail through the same vector formula, so an element's value never depends on
        // where it falls (a batch's tokens share one call; bitwise the single-token result).
        const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
        const __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
        const __m512 sig =
            _mm512_div_ps(one, _mm512_add_ps(one, exp512(_mm512_sub_ps(_mm512_setzero_ps(), g))));
        _mm512_mask_storeu_ps(
            gate + i, m, _mm512_mul_ps(_mm512_mul_ps(g, sig), _mm512_maskz_loadu_ps(m, up + i)));
    }
}
// gelu_tanh(g) * up: 0.5 g (1 + tanh(u)) equals g * sigmoid(2u), u = sqrt(2/pi) (g + 0.044715 g^3),
// so one exp512 and a division per element instead of libm's tanhf (a fifth of gemma3's prefill).
void gelu_tanh_gate(float* gate, const float* up, int64_t n) {
    const __m512 one = _mm512_set1_ps(1.0f);
    const __m512 minus_2k = _mm512_set1_ps(-2.0f * 0.7978845608028654f);
    const __m512 cubic = _mm512_set1_ps(0.044715f);
    const auto gelu = [&](__m512 g) {
        const __m512 inner = _mm512_fmadd_ps(_mm512_mul_ps(cubic, g), _mm512_mul_ps(g, g), g);
        const __m512 e = exp512(_mm512_mul_ps(minus_2k, inner));  // exp(-2u)
        return _mm512_div_ps(g, _mm512_add_ps(one, e));
    };
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 g = _mm512_loadu_ps(gate + i);
        _mm512_storeu_ps(gate + i, _mm512_mul_ps(gelu(g), _mm512_loadu_ps(up + i)));
    }
    if (i < n) {  // the tail through the same formula, as swiglu's
        const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
        const __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
        _mm512_mask_storeu_ps(gate + i, m,
                              _mm512_mul_ps(gelu(g), _mm512_maskz_loadu_ps(m, up + i)));
    }
}

float dot_f16(const uint16_t* a, const float* b, int64_t n) {
    __m512 acc = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 va =
            _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + i)));
        acc = _mm512_fmadd_ps(va, _mm512_loadu_ps(b + i), acc);
    }
    float sum = hsum512(acc);
    for (; i < n; ++i) sum += _cvtsh_ss(a[i]) * b[i];
    return sum;
}

void axpy_f16(float a, const uint16_t* x, float* y, int64_t n) {
    const __m512 va = _mm512_set1_ps(a);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 vx =
            _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i)));
        _mm512_storeu_ps(y + i, _mm512_fmadd_ps(va, vx, _mm512_loadu_ps(y + i)));
    }
    for (; i < n; ++i) y[i] += a * _cvtsh_ss(x[i]);
}

void to_f16(const float* x, uint16_t* out, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                            _mm512_cvtps_ph(_mm512_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    }
    for (; i < n; ++i) out[i] = _cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT);
}

namespace {

// Cache element loaders: element i counted from a run's base pointer (KvRun), and 16
// consecutive elements from i on as floats (i a multiple of 16).
// span_bytes(n): bytes that n consecutive elements starting on a multiple of 16 may span.
struct KvF32 {
    static constexpr int64_t span_bytes(int64_t n) { return n * 4; }
    static const char* at(const void* base, int64_t i) {
        return static_cast<const char*>(base) + i * 4;
    }
    static __m512 load(const void* base, int64_t i) {
        return _mm512_loadu_ps(static_cast<const float*>(base) + i);
    }
};
struct KvF16 {
    static constexpr int64_t span_bytes(int64_t n) { return n * 2; }
    static const char* at(const void* base, int64_t i) {
        return static_cast<const char*>(base) + i * 2;
    }
    static __m512 load(const void* base, int64_t i) {
        return _mm512_cvtph_ps(_mm256_loadu_si256(
            reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(base) + i)));
    }
};
struct KvQ8 {
    // From the element's block on: a start at element 16 of a block reaches one block more.
    static constexpr int64_t span_bytes(int64_t n) { return (n / kQ8Elems + 1) * kQ8Bytes; }
    // The block holding element i.
    static const char* at(const void* base, int64_t i) {
        return static_cast<const char*>(base) + (i / kQ8Elems) * kQ8Bytes;
    }
    // Scale times quants: exact in f32 (fp16 mantissa times a 7-bit integer), so a value
    // never depends on which kernel widened it.
    static __m512 load(const void* base, int64_t i) {
        const char* block = at(base, i);
        uint16_t d;
        std::memcpy(&d, block, sizeof d);
        const __m128i q =
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 2 + i % kQ8Elems));
        return _mm512_mul_ps(_mm512_set1_ps(_cvtsh_ss(d)),
                             _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)));
    }
    // Element i alone (the ends of a head that does not start on 16 elements).
    static float scalar(const void* base, int64_t i) {
        const char* block = at(base, i);
        uint16_t d;
        std::memcpy(&d, block, sizeof d);
        return _cvtsh_ss(d) * static_cast<float>(static_cast<int8_t>(block[2 + i % kQ8Elems]));
    }
    static constexpr int64_t kQ8Elems = 32;
    static constexpr int64_t kQ8Bytes = 34;
};

}  // namespace

float dot_q8_0(const void* blocks, int64_t first, const float* b, int64_t n) {
    float head = 0.0f;  // elements before the first 16-aligned one
    int64_t i = 0;
    for (; i < n && (first + i) % 16 != 0; ++i) head += KvQ8::scalar(blocks, first + i) * b[i];
    __m512 acc = _mm512_setzero_ps();
    for (; i + 16 <= n; i += 16) {
        acc = _mm512_fmadd_ps(KvQ8::load(blocks, first + i), _mm512_loadu_ps(b + i), acc);
    }
    float sum = head + hsum512(acc);
    for (; i < n; ++i) sum += KvQ8::scalar(blocks, first + i) * b[i];
    return sum;
}

void axpy_q8_0(float a, const void* blocks, int64_t first, float* y, int64_t n) {
    int64_t i = 0;
    for (; i < n && (first + i) % 16 != 0; ++i) y[i] += a * KvQ8::scalar(blocks, first + i);
    const __m512 va = _mm512_set1_ps(a);
    for (; i + 16 <= n; i += 16) {
        _mm512_storeu_ps(
            y + i, _mm512_fmadd_ps(va, KvQ8::load(blocks, first + i), _mm512_loadu_ps(y + i)));
    }
    for (; i < n; ++i) y[i] += a * KvQ8::scalar(blocks, first + i);
}

// ---- attention over a run of cached positions ------------------------------------------------

namespace {

// Lane i of the result = the sum of the 16 lanes of v[i]: a transpose-and-add tree (45 ops for
// 16 sums instead of 16 separate horizontal sums).
__m512 hsum16x16(const __m512 v[16]) {
    __m512 t[8];
    for (int i = 0; i < 8; ++i) {  // per 128-bit lane: [a, b, a, b] partials
        t[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]),
                             _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
    }
    __m512 u[4];
    for (int i = 0; i < 4; ++i) {  // per 128-bit lane q: positions 4i..4i+3, lane q's part
        const __m512d x = _mm512_castps_pd(t[2 * i]), y = _mm512_castps_pd(t[2 * i + 1]);
        u[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)),
                             _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
    }
    // Sum the four 128-bit lanes of each u[i] into 128-bit lane i of the result.
    const __m512 s01 = _mm512_add_ps(_mm512_shuffle_f32x4(u[0], u[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                     _mm512_shuffle_f32x4(u[0], u[1], _MM_SHUFFLE(3, 1, 3, 1)));
    const __m512 s23 = _mm512_add_ps(_mm512_shuffle_f32x4(u[2], u[3], _MM_SHUFFLE(2, 0, 2, 0)),
                                     _mm512_shuffle_f32x4(u[2], u[3], _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm512_add_ps(_mm512_shuffle_f32x4(s01, s23, _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(s01, s23, _MM_SHUFFLE(3, 1, 3, 1)));
}

__mmask16 first_lanes(int64_t n) {
    return static_cast<__mmask16>(n >= 16 ? 0xffffu : (1u << n) - 1u);
}

// Scores of HT heads (q_h at q + h * q_stride) against the PT = 16 / HT widened keys of kbuf
// rows [i0, i0 + PT), into out[h * out_stride + i] for the first `valid` of them. The HT x PT
// dots accumulate side by side (each a chain of head_dim / 16 multiply-adds; sixteen chains
// hide the latency, and each key or query vector loaded serves HT or PT of them), and
// hsum16x16 reduces all sixteen at once. Every score is summed lane by lane in head order and
// then by hsum16x16's one tree, whatever HT is: a head's scores do not depend on how many
// heads share its tiles, which the exact-batch contract needs.
template <int64_t HT, int64_t HD>
void score_tile(const float* q, int64_t q_stride, const float* kbuf, int64_t hd, int64_t i0,
                int64_t valid, __m512 scale, float* out, int64_t out_stride) {
    constexpr int64_t PT = 16 / HT;
    if constexpr (HD > 0) hd = HD;
    __m512 acc[16];
    for (int64_t a = 0; a < 16; ++a) acc[a] = _mm512_setzero_ps();
    for (int64_t j = 0; j < hd; j += 16) {
        __m512 keys[PT];
        for (int64_t p = 0; p < PT; ++p) keys[p] = _mm512_loadu_ps(kbuf + (i0 + p) * hd + j);
        for (int64_t h = 0; h < HT; ++h) {
            const __m512 qv = _mm512_loadu_ps(q + h * q_stride + j);
            for (int64_t p = 0; p < PT; ++p)
                acc[h * PT + p] = _mm512_fmadd_ps(keys[p], qv, acc[h * PT + p]);
        }
    }
    const __m512 sums = _mm512_mul_ps(hsum16x16(acc), scale);  // lane h * PT + p
    const __mmask16 keep = first_lanes(std::min(PT, valid));
    for (int64_t h = 0; h < HT; ++h) {
        const auto lanes = static_cast<__mmask16>(((1u << PT) - 1u) << (h * PT));
        _mm512_mask_storeu_ps(out + h * out_stride + i0, keep,
                              _mm512_maskz_compress_ps(lanes, sums));
    }
}

// scores[g][p] = scale * q_g . k_p for the run, 16 positions at a time: their keys are widened
// once for all heads of the group (kbuf), then scored in tiles of four heads by four positions
// (two by eight, one by sixteen for the heads left over). HD > 0: the head size as a constant
// (the common sizes), so the loops over the head unroll.
template <class L, int64_t HD>
void run_scores(const AttnShape& sh, const float* q, const KvRun& kv, float* scores, float* kbuf) {
    const int64_t hd = HD > 0 ? HD : sh.head_dim;
    const __m512 scale = _mm512_set1_ps(sh.scale);
    // Locals, not kv's fields: the vector stores below may alias anything, which would make
    // the compiler reload the fields after every one of them.
    const void* const k = kv.k;
    const int64_t k_stride = kv.k_stride;
    const int64_t k_first = kv.k_first;
    const int64_t n = kv.n;
    const int64_t n_q = sh.n_q;
    const int64_t q_stride = sh.q_stride;
    // A head's key and value are short pieces of each cached row (rows are all heads wide),
    // too far apart for the hardware prefetcher: fetch them by hand, the keys two tiles of 16
    // positions ahead (one tile's work is shorter than a trip to memory) and the values of the
    // same positions into L2 for the pass over the values that follows.
    const int64_t key_bytes = L::at(k, k_first + hd - 1) - L::at(k, k_first);
    const int64_t value_bytes =
        L::at(kv.v, kv.v_first + sh.value_dim - 1) - L::at(kv.v, kv.v_first);
    const auto fetch = [&](int64_t from, int64_t to) {
        for (int64_t p = from; p < std::min(to, n); ++p) {
            const char* key = L::at(k, p * k_stride + k_first);
            for (int64_t b = 0; b <= key_bytes; b += 64) _mm_prefetch(key + b, _MM_HINT_T0);
            const char* value = L::at(kv.v, p * kv.v_stride + kv.v_first);
            for (int64_t b = 0; b <= value_bytes; b += 64) _mm_prefetch(value + b, _MM_HINT_T1);
        }
    };
    fetch(0, 32);
    for (int64_t p0 = 0; p0 < n; p0 += 16) {
        const int64_t c = std::min<int64_t>(16, n - p0);
        fetch(p0 + 32, p0 + 48);
        // The 16 positions' keys of this head, widened once for all heads of the group:
        // kbuf [16 x head_dim], a tile that stays in L1. Rows past the run are zeros (their
        // scores are computed and not stored).
        for (int64_t i = 0; i < c; ++i) {
            const int64_t src = (p0 + i) * k_stride + k_first;
            for (int64_t j = 0; j < hd; j += 16)
                _mm512_storeu_ps(kbuf + i * hd + j, L::load(k, src + j));
        }
        std::fill(kbuf + c * hd, kbuf + 16 * hd, 0.0f);
        float* out = scores + p0;
        int64_t g = 0;
        for (; g + 4 <= n_q; g += 4) {
            for (int64_t i0 = 0; i0 < c; i0 += 4)
                score_tile<4, HD>(q + g * q_stride, q_stride, kbuf, hd, i0, c - i0, scale,
                                  out + g * n, n);
        }
        for (; g + 2 <= n_q; g += 2) {
            for (int64_t i0 = 0; i0 < c; i0 += 8)
                score_tile<2, HD>(q + g * q_stride, q_stride, kbuf, hd, i0, c - i0, scale,
                                  out + g * n, n);
        }
        for (; g < n_q; ++g)
            score_tile<1, HD>(q + g * q_stride, q_stride, kbuf, hd, 0, c, scale, out + g * n, n);
    }
}

// x[i] = exp(x[i] - max) for the run's scores of one head; returns their sum.
float exp_sum(float* x, int64_t n, float max) {
    const __m512 bmax = _mm512_set1_ps(max);
    __m512 vsum = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = first_lanes(n - i);
        const __m512 e = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), bmax));
        _mm512_mask_storeu_ps(x + i, m, e);
        vsum = _mm512_add_ps(vsum, _mm512_maskz_mov_ps(m, e));
    }
    return hsum512(vsum);
}

float max_of(const float* x, int64_t n) {
    __m512 vmax = _mm512_set1_ps(-INFINITY);
    for (int64_t i = 0; i < n; i += 16) {
        vmax = _mm512_mask_max_ps(vmax, first_lanes(n - i), vmax,
                                  _mm512_maskz_loadu_ps(first_lanes(n - i), x + i));
    }
    return hmax512(vmax);
}

// o_g[j0 .. j0 + 16 NV) = sum_p e[g][p] v_p for NG heads: the V slab of a position is loaded
// once for the heads, and the sums stay in registers over the whole run.
template <class L, int NG, int NV>
void run_values_slab(const float* e, int64_t n, const KvRun& kv, int64_t j0, float* rec,
                     int64_t rec_stride) {
    __m512 acc[NG][NV];
    for (int g = 0; g < NG; ++g) {
        for (int u = 0; u < NV; ++u) acc[g][u] = _mm512_setzero_ps();
    }
    constexpr int64_t kAhead = 8;  // positions fetched ahead (strided rows, as for keys)
    for (int64_t p = 0; p < n; ++p) {
        const int64_t row = p * kv.v_stride + kv.v_first + j0;
        if (p + kAhead < n) {
            const int64_t ahead = row + kAhead * kv.v_stride;
            const char* next = L::at(kv.v, ahead);
            constexpr int64_t kSlabBytes = L::span_bytes(16 * NV);
            for (int64_t b = 0; b < kSlabBytes; b += 64) _mm_prefetch(next + b, _MM_HINT_T0);
        }
        __m512 vv[NV];
        for (int u = 0; u < NV; ++u) vv[u] = L::load(kv.v, row + 16 * u);
        for (int g = 0; g < NG; ++g) {
            const __m512 w = _mm512_set1_ps(e[g * n + p]);
            for (int u = 0; u < NV; ++u) acc[g][u] = _mm512_fmadd_ps(w, vv[u], acc[g][u]);
        }
    }
    for (int g = 0; g < NG; ++g) {
        for (int u = 0; u < NV; ++u)
            _mm512_storeu_ps(rec + g * rec_stride + 2 + j0 + 16 * u, acc[g][u]);
    }
}

template <class L, int NG>
void run_values(const float* e, int64_t n, const KvRun& kv, int64_t value_dim, float* rec,
                int64_t rec_stride) {
    for (int64_t j0 = 0; j0 < value_dim; j0 += 64) {
        switch (std::min<int64_t>(4, (value_dim - j0) / 16)) {
            case 1:
                run_values_slab<L, NG, 1>(e, n, kv, j0, rec, rec_stride);
                break;
            case 2:
                run_values_slab<L, NG, 2>(e, n, kv, j0, rec, rec_stride);
                break;
            case 3:
                run_values_slab<L, NG, 3>(e, n, kv, j0, rec, rec_stride);
                break;
            default:
                run_values_slab<L, NG, 4>(e, n, kv, j0, rec, rec_stride);
                break;
        }
    }
}

template <class L>
void attend_run_t(const AttnShape& sh, const float* q, const KvRun& kv, float* scores,
                  float* records, int64_t record_stride) {
    float* kbuf = scores + sh.n_q * kv.n;  // [16 x head_dim] widened keys
    switch (sh.head_dim) {
        case 64:
            run_scores<L, 64>(sh, q, kv, scores, kbuf);
            break;
        case 128:
            run_scores<L, 128>(sh, q, kv, scores, kbuf);
            break;
        case 256:
            run_scores<L, 256>(sh, q, kv, scores, kbuf);
            break;
        default:
            run_scores<L, 0>(sh, q, kv, scores, kbuf);
            break;
    }
    for (int64_t g = 0; g < sh.n_q; ++g) {
        float* s = scores + g * kv.n;
        float* rec = records + g * record_stride;
        rec[0] = max_of(s, kv.n);
        rec[1] = exp_sum(s, kv.n, rec[0]);
    }
    // Heads in groups of up to four share each V load.
    for (int64_t g0 = 0; g0 < sh.n_q; g0 += 4) {
        const float* e = scores + g0 * kv.n;
        float* rec = records + g0 * record_stride;
        switch (std::min<int64_t>(4, sh.n_q - g0)) {
            case 1:
                run_values<L, 1>(e, kv.n, kv, sh.value_dim, rec, record_stride);
                break;
            case 2:
                run_values<L, 2>(e, kv.n, kv, sh.value_dim, rec, record_stride);
                break;
            case 3:
                run_values<L, 3>(e, kv.n, kv, sh.value_dim, rec, record_stride);
                break;
            default:
                run_values<L, 4>(e, kv.n, kv, sh.value_dim, rec, record_stride);
                break;
        }
    }
}

}  // namespace

void attend_run(const AttnShape& shape, const float* q, const KvRun& kv, float* scores,
                float* records, int64_t record_stride) {
    switch (kv.type) {
        case KvType::F16:
            return attend_run_t<KvF16>(shape, q, kv, scores, records, record_stride);
        case KvType::Q8_0:
            return attend_run_t<KvQ8>(shape, q, kv, scores, records, record_stride);
        case KvType::F32:
            break;
    }
    attend_run_t<KvF32>(shape, q, kv, scores, records, record_stride);
}

void install_ops(OpsTable& table) {
    table.dot = dot;
    table.axpy = axpy;
    table.softmax = softmax;
    table.swiglu = swiglu;
    table.gelu_tanh_gate = gelu_tanh_gate;
    table.dot_f16 = dot_f16;
    table.axpy_f16 = axpy_f16;
    table.to_f16 = to_f16;
    table.dot_q8_0 = dot_q8_0;
    table.axpy_q8_0 = axpy_q8_0;
    table.attend_run_16 = attend_run;
}

}  // namespace ember::avx512
