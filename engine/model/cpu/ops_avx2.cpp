// AVX2 versions of the forward pass's vector ops (attention, softmax, SwiGLU, GELU, KV rows).
// Compiled with AVX2 + FMA + F16C flags (engine/CMakeLists.txt); installed only after the CPU
// check (make_ops_table). The AVX-512 file holds the same ops for 16-float vectors; these work
// on 8, with tails through masked loads so an element's value never depends on where it falls.
#include "engine/model/cpu/ops_avx2.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace ember::avx2 {

namespace {

float hsum256(__m256 v) {
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
}

float hmax256(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    return _mm_cvtss_f32(_mm_max_ss(m, _mm_shuffle_ps(m, m, 1)));
}

// Lanes [0, n) set (n in [0, 8]): the mask of maskload / maskstore.
__m256i first_lanes(int64_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(std::min<int64_t>(n, 8))),
                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// exp(x): 2^(x log2 e) as 2^n (built in the exponent bits) times a degree-7 polynomial of
// exp(r), r = x - n ln2 in [-ln2/2, ln2/2] (exp512's polynomial); relative error ~2e-7. x is
// clamped to [-87.3, 88.3] so that 2^n stays a normal float: below, the result is ~1e-38
// instead of a denormal or zero, which no caller (softmax of x - max, sigmoid) can tell apart.
__m256 exp256(__m256 x) {
    const __m256 log2e = _mm256_set1_ps(1.44269504088896341f);
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.3f));
    x = _mm256_min_ps(x, _mm256_set1_ps(88.3f));
    const __m256 n =
        _mm256_round_ps(_mm256_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256 ln2_hi = _mm256_set1_ps(0.693145751953125f);
    const __m256 ln2_lo = _mm256_set1_ps(1.428606765330187e-06f);
    __m256 r = _mm256_fnmadd_ps(n, ln2_hi, x);
    r = _mm256_fnmadd_ps(n, ln2_lo, r);
    __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    const __m256i e =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

float dot(const float* a, const float* b, int64_t n) {
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
    }
    for (; i + 8 <= n; i += 8) {
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    }
    if (i < n) {
        const __m256i m = first_lanes(n - i);
        acc1 = _mm256_fmadd_ps(_mm256_maskload_ps(a + i, m), _mm256_maskload_ps(b + i, m), acc1);
    }
    return hsum256(_mm256_add_ps(acc0, acc1));
}

void axpy(float a, const float* x, float* y, int64_t n) {
    const __m256 va = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        _mm256_storeu_ps(y + i,
                         _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    }
    if (i < n) {
        const __m256i m = first_lanes(n - i);
        _mm256_maskstore_ps(
            y + i, m,
            _mm256_fmadd_ps(va, _mm256_maskload_ps(x + i, m), _mm256_maskload_ps(y + i, m)));
    }
}

float max_of(const float* x, int64_t n) {
    __m256 vmax = _mm256_set1_ps(-INFINITY);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(x + i));
    float max = hmax256(vmax);
    for (; i < n; ++i) max = std::max(max, x[i]);
    return max;
}

// x[i] = exp(x[i] - max); returns their sum.
float exp_sum(float* x, int64_t n, float max) {
    const __m256 bmax = _mm256_set1_ps(max);
    __m256 vsum = _mm256_setzero_ps();
    for (int64_t i = 0; i < n; i += 8) {
        const __m256i m = first_lanes(n - i);
        const __m256 e = _mm256_and_ps(exp256(_mm256_sub_ps(_mm256_maskload_ps(x + i, m), bmax)),
                                       _mm256_castsi256_ps(m));
        _mm256_maskstore_ps(x + i, m, e);
        vsum = _mm256_add_ps(vsum, e);
    }
    return hsum256(vsum);
}

void softmax(float* x, int64_t n) {
    const float sum = exp_sum(x, n, max_of(x, n));
    const __m256 inv = _mm256_set1_ps(1.0f / sum);
    for (int64_t i = 0; i < n; i += 8) {
        const __m256i m = first_lanes(n - i);
        _mm256_maskstore_ps(x + i, m, _mm256_mul_ps(_mm256_maskload_ps(x + i, m), inv));
    }
}

// gate[i] = f(gate[i]) * up[i] for every element, tails through the same vector formula.
template <class F>
void gate_op(float* gate, const float* up, int64_t n, F f) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        _mm256_storeu_ps(gate + i,
                         _mm256_mul_ps(f(_mm256_loadu_ps(gate + i)), _mm256_loadu_ps(up + i)));
    }
    if (i < n) {
        const __m256i m = first_lanes(n - i);
        _mm256_maskstore_ps(
            gate + i, m,
            _mm256_mul_ps(f(_mm256_maskload_ps(gate + i, m)), _mm256_maskload_ps(up + i, m)));
    }
}

void swiglu(float* gate, const float* up, int64_t n) {
    const __m256 one = _mm256_set1_ps(1.0f);
    gate_op(gate, up, n, [&](__m256 g) {
        const __m256 sig =
            _mm256_div_ps(one, _mm256_add_ps(one, exp256(_mm256_sub_ps(_mm256_setzero_ps(), g))));
        return _mm256_mul_ps(g, sig);
    });
}

// gelu_tanh(g) = g * sigmoid(2u), u = sqrt(2/pi) (g + 0.044715 g^3), as ops_avx512.cpp.
void gelu_tanh_gate(float* gate, const float* up, int64_t n) {
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256 minus_2k = _mm256_set1_ps(-2.0f * 0.7978845608028654f);
    const __m256 cubic = _mm256_set1_ps(0.044715f);
    gate_op(gate, up, n, [&](__m256 g) {
        const __m256 inner = _mm256_fmadd_ps(_mm256_mul_ps(cubic, g), _mm256_mul_ps(g, g), g);
        return _mm256_div_ps(g, _mm256_add_ps(one, exp256(_mm256_mul_ps(minus_2k, inner))));
    });
}

__m256 load8_f16(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

float dot_f16(const uint16_t* a, const float* b, int64_t n) {
    __m256 acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(load8_f16(a + i), _mm256_loadu_ps(b + i), acc);
    float sum = hsum256(acc);
    for (; i < n; ++i) sum += _cvtsh_ss(a[i]) * b[i];
    return sum;
}

void axpy_f16(float a, const uint16_t* x, float* y, int64_t n) {
    const __m256 va = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, load8_f16(x + i), _mm256_loadu_ps(y + i)));
    }
    for (; i < n; ++i) y[i] += a * _cvtsh_ss(x[i]);
}

void to_f16(const float* x, uint16_t* out, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    }
    for (; i < n; ++i) out[i] = _cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT);
}

// Cache element loaders: element i counted from a run's base pointer (KvRun), and 8
// consecutive elements from i on as floats (i a multiple of 8).
struct KvF32 {
    static const char* at(const void* base, int64_t i) {
        return static_cast<const char*>(base) + i * 4;
    }
    static __m256 load(const void* base, int64_t i) {
        return _mm256_loadu_ps(static_cast<const float*>(base) + i);
    }
};
struct KvF16 {
    static const char* at(const void* base, int64_t i) {
        return static_cast<const char*>(base) + i * 2;
    }
    static __m256 load(const void* base, int64_t i) {
        return load8_f16(static_cast<const uint16_t*>(base) + i);
    }
};
struct KvQ8 {
    static constexpr int64_t kElems = 32;
    static constexpr int64_t kBytes = 34;
    static const char* at(const void* base, int64_t i) {
        return static_cast<const char*>(base) + (i / kElems) * kBytes;
    }
    // Scale times quants: exact in f32, so a value never depends on which kernel widened it.
    static __m256 load(const void* base, int64_t i) {
        const char* block = at(base, i);
        uint16_t d;
        std::memcpy(&d, block, sizeof d);
        const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(block + 2 + i % kElems));
        return _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(d)),
                             _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)));
    }
    static float scalar(const void* base, int64_t i) {
        const char* block = at(base, i);
        uint16_t d;
        std::memcpy(&d, block, sizeof d);
        return _cvtsh_ss(d) * static_cast<float>(static_cast<int8_t>(block[2 + i % kElems]));
    }
};

float dot_q8_0(const void* blocks, int64_t first, const float* b, int64_t n) {
    float head = 0.0f;  // elements before the first 8-aligned one
    int64_t i = 0;
    for (; i < n && (first + i) % 8 != 0; ++i) head += KvQ8::scalar(blocks, first + i) * b[i];
    __m256 acc = _mm256_setzero_ps();
    for (; i + 8 <= n; i += 8) {
        acc = _mm256_fmadd_ps(KvQ8::load(blocks, first + i), _mm256_loadu_ps(b + i), acc);
    }
    float sum = head + hsum256(acc);
    for (; i < n; ++i) sum += KvQ8::scalar(blocks, first + i) * b[i];
    return sum;
}

void axpy_q8_0(float a, const void* blocks, int64_t first, float* y, int64_t n) {
    int64_t i = 0;
    for (; i < n && (first + i) % 8 != 0; ++i) y[i] += a * KvQ8::scalar(blocks, first + i);
    const __m256 va = _mm256_set1_ps(a);
    for (; i + 8 <= n; i += 8) {
        _mm256_storeu_ps(
            y + i, _mm256_fmadd_ps(va, KvQ8::load(blocks, first + i), _mm256_loadu_ps(y + i)));
    }
    for (; i < n; ++i) y[i] += a * KvQ8::scalar(blocks, first + i);
}

// ---- attention over a run of cached positions ------------------------------------------------

// Lane i of the result = the sum of the 8 lanes of v[i], by one fixed tree (two rounds of
// pairwise adds within 128-bit halves, then the halves): every score is reduced the same way
// whatever tile it was computed in, which the exact-batch contract needs.
__m256 hsum8x8(const __m256 v[8]) {
    const __m256 t0 = _mm256_hadd_ps(v[0], v[1]);
    const __m256 t1 = _mm256_hadd_ps(v[2], v[3]);
    const __m256 t2 = _mm256_hadd_ps(v[4], v[5]);
    const __m256 t3 = _mm256_hadd_ps(v[6], v[7]);
    const __m256 u0 = _mm256_hadd_ps(t0, t1);  // lanes: v0..v3 low halves, then high halves
    const __m256 u1 = _mm256_hadd_ps(t2, t3);  // the same for v4..v7
    return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20),
                         _mm256_permute2f128_ps(u0, u1, 0x31));
}

// Scores of HT heads against PT = 8 / HT widened keys of kbuf rows [i0, i0 + PT), into
// out[h * out_stride + i0 + p] for the first `valid` positions. Each score accumulates lane by
// lane over the head, then hsum8x8: the same sums for every HT.
template <int64_t HT>
void score_tile(const float* q, int64_t q_stride, const float* kbuf, int64_t hd, int64_t i0,
                int64_t valid, __m256 scale, float* out, int64_t out_stride) {
    constexpr int64_t PT = 8 / HT;
    __m256 acc[8];
    for (auto& a : acc) a = _mm256_setzero_ps();
    for (int64_t j = 0; j < hd; j += 8) {
        __m256 keys[PT];
        for (int64_t p = 0; p < PT; ++p) keys[p] = _mm256_loadu_ps(kbuf + (i0 + p) * hd + j);
        for (int64_t h = 0; h < HT; ++h) {
            const __m256 qv = _mm256_loadu_ps(q + h * q_stride + j);
            for (int64_t p = 0; p < PT; ++p)
                acc[h * PT + p] = _mm256_fmadd_ps(keys[p], qv, acc[h * PT + p]);
        }
    }
    alignas(32) float sums[8];  // lane h * PT + p
    _mm256_store_ps(sums, _mm256_mul_ps(hsum8x8(acc), scale));
    const int64_t keep = std::min(PT, valid);
    for (int64_t h = 0; h < HT; ++h) {
        for (int64_t p = 0; p < keep; ++p) out[h * out_stride + i0 + p] = sums[h * PT + p];
    }
}

// scores[g][p] = scale * q_g . k_p for the run, 8 positions at a time: their keys widened
// once for all heads of the group (kbuf [8 x head_dim]), scored two heads by four positions,
// then one by eight for a head left over.
template <class L>
void run_scores(const AttnShape& sh, const float* q, const KvRun& kv, float* scores, float* kbuf) {
    const int64_t hd = sh.head_dim;
    const __m256 scale = _mm256_set1_ps(sh.scale);
    const void* const k = kv.k;
    const int64_t k_stride = kv.k_stride, k_first = kv.k_first, n = kv.n;
    const int64_t n_q = sh.n_q, q_stride = sh.q_stride;
    for (int64_t p0 = 0; p0 < n; p0 += 8) {
        const int64_t c = std::min<int64_t>(8, n - p0);
        if (p0 + 16 < n) {
            // The keys two tiles ahead: short pieces of rows far apart, which the hardware
            // prefetcher does not follow.
            for (int64_t i = 0; i < std::min<int64_t>(8, n - p0 - 16); ++i) {
                _mm_prefetch(L::at(k, (p0 + 16 + i) * k_stride + k_first), _MM_HINT_T0);
            }
        }
        for (int64_t i = 0; i < c; ++i) {
            const int64_t src = (p0 + i) * k_stride + k_first;
            for (int64_t j = 0; j < hd; j += 8)
                _mm256_storeu_ps(kbuf + i * hd + j, L::load(k, src + j));
        }
        std::fill(kbuf + c * hd, kbuf + 8 * hd, 0.0f);
        float* out = scores + p0;
        int64_t g = 0;
        for (; g + 2 <= n_q; g += 2) {
            for (int64_t i0 = 0; i0 < c; i0 += 4)
                score_tile<2>(q + g * q_stride, q_stride, kbuf, hd, i0, c - i0, scale, out + g * n,
                              n);
        }
        for (; g < n_q; ++g)
            score_tile<1>(q + g * q_stride, q_stride, kbuf, hd, 0, c, scale, out + g * n, n);
    }
}

// o_g[j0 .. j0 + 16) = sum_p e[g][p] v_p for NG heads, the value slab loaded once for them.
template <class L, int NG>
void run_values_slab(const float* e, int64_t n, const KvRun& kv, int64_t j0, float* rec,
                     int64_t rec_stride) {
    __m256 acc[NG][2];
    for (int g = 0; g < NG; ++g) acc[g][0] = acc[g][1] = _mm256_setzero_ps();
    for (int64_t p = 0; p < n; ++p) {
        const int64_t row = p * kv.v_stride + kv.v_first + j0;
        const __m256 v0 = L::load(kv.v, row);
        const __m256 v1 = L::load(kv.v, row + 8);
        for (int g = 0; g < NG; ++g) {
            const __m256 w = _mm256_set1_ps(e[g * n + p]);
            acc[g][0] = _mm256_fmadd_ps(w, v0, acc[g][0]);
            acc[g][1] = _mm256_fmadd_ps(w, v1, acc[g][1]);
        }
    }
    for (int g = 0; g < NG; ++g) {
        _mm256_storeu_ps(rec + g * rec_stride + 2 + j0, acc[g][0]);
        _mm256_storeu_ps(rec + g * rec_stride + 2 + j0 + 8, acc[g][1]);
    }
}

template <class L, int NG>
void run_values(const float* e, int64_t n, const KvRun& kv, int64_t value_dim, float* rec,
                int64_t rec_stride) {
    for (int64_t j0 = 0; j0 < value_dim; j0 += 16)
        run_values_slab<L, NG>(e, n, kv, j0, rec, rec_stride);
}

template <class L>
void attend_run_t(const AttnShape& sh, const float* q, const KvRun& kv, float* scores,
                  float* records, int64_t record_stride) {
    float* kbuf = scores + sh.n_q * kv.n;  // [8 x head_dim] widened keys
    run_scores<L>(sh, q, kv, scores, kbuf);
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

}  // namespace

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

}  // namespace ember::avx2
