// AVX2 kernels (AVX2 + FMA + F16C): 8-row panels; u8 x s8 products through vpmaddubsw, with the
// sign trick for the types whose unsigned form exceeds 128. Compiled with AVX2 flags
// (engine/CMakeLists.txt); installed only when cpu_features.h reports AVX2 usable.
#define EMBER_SIMD_NS tensor_avx2
#include "engine/tensor/simd_gemm.h"

namespace ember {
namespace tensor_avx2 {
namespace {

// The instruction-set policy simd_gemm.h is written against.
struct Avx2 {
    static constexpr int kW = 8;  // rows per panel = int32 lanes per vector
    static constexpr bool kVnni = false;
    template <Family F>
    static constexpr int kTokens = 2;  // 16 registers: 2 panels x 2 tokens
    static constexpr int kFloatRows = 2;
    static constexpr int kFloatTokens = 3;

    using VI = __m256i;
    using VF = __m256;
    struct V16 {
        __m256 lo, hi;  // lanes 0-7, 8-15
    };

    static VI ones16() { return _mm256_set1_epi16(1); }
    static VI zero_i() { return _mm256_setzero_si256(); }
    static VF zero_f() { return _mm256_setzero_ps(); }
    static VI set1_i(int32_t v) { return _mm256_set1_epi32(v); }
    static VF set1_f(float v) { return _mm256_set1_ps(v); }
    static VI load_i(const void* p) { return _mm256_load_si256(static_cast<const __m256i*>(p)); }
    static VF load_f(const void* p) { return _mm256_load_ps(static_cast<const float*>(p)); }
    static void store_f(float* p, VF v) { _mm256_store_ps(p, v); }
    static VI bcast_i32(const void* p) {
        return _mm256_set1_epi32(static_cast<int32_t>(load_u32(p)));
    }
    // u <= 128 keeps vpmaddubsw's int16 pair sums (<= 2 * 128 * 127) from saturating.
    static VI dot4(VI acc, VI w, VI a) {
        return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(w, a), ones16()));
    }
    static VI abs8(VI v) { return _mm256_abs_epi8(v); }
    static VI dot4_signed(VI acc, VI wabs, VI w, VI a) {
        return _mm256_add_epi32(
            acc, _mm256_madd_epi16(_mm256_maddubs_epi16(wabs, _mm256_sign_epi8(a, w)), ones16()));
    }
    static VI madd16(VI a, VI b) { return _mm256_madd_epi16(a, b); }
    static VI mullo(VI a, VI b) { return _mm256_mullo_epi32(a, b); }
    static VI shl8(VI v) { return _mm256_slli_epi32(v, 8); }
    static VI add_i(VI a, VI b) { return _mm256_add_epi32(a, b); }
    static VF cvt(VI v) { return _mm256_cvtepi32_ps(v); }
    static VF mul(VF a, VF b) { return _mm256_mul_ps(a, b); }
    static VF fma(VF a, VF b, VF c) { return _mm256_fmadd_ps(a, b, c); }
    static void store_lanes(float* y, VF v, int n) {
        if (n == kW) {
            _mm256_storeu_ps(y, v);
        } else {
            const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
            _mm256_maskstore_ps(y, _mm256_cmpgt_epi32(_mm256_set1_epi32(n), idx), v);
        }
    }

    // u[8]: 32 bytes of row r each -> dst: 8 vectors, vector k = bytes 4k..4k+3 of rows 0..7.
    static void transpose_store(const __m256i* u, uint8_t* dst) {
        __m256i t[8];
        for (int i = 0; i < 4; ++i) {
            t[2 * i] = _mm256_unpacklo_epi32(u[2 * i], u[2 * i + 1]);
            t[2 * i + 1] = _mm256_unpackhi_epi32(u[2 * i], u[2 * i + 1]);
        }
        __m256i v[8];
        for (int h = 0; h < 2; ++h) {
            v[4 * h + 0] = _mm256_unpacklo_epi64(t[4 * h + 0], t[4 * h + 2]);
            v[4 * h + 1] = _mm256_unpackhi_epi64(t[4 * h + 0], t[4 * h + 2]);
            v[4 * h + 2] = _mm256_unpacklo_epi64(t[4 * h + 1], t[4 * h + 3]);
            v[4 * h + 3] = _mm256_unpackhi_epi64(t[4 * h + 1], t[4 * h + 3]);
        }
        auto* out = reinterpret_cast<__m256i*>(dst);
        for (int c = 0; c < 4; ++c) {
            _mm256_store_si256(out + c, _mm256_permute2x128_si256(v[c], v[4 + c], 0x20));
            _mm256_store_si256(out + c + 4, _mm256_permute2x128_si256(v[c], v[4 + c], 0x31));
        }
    }

    // Single-row dot: 8 int32 lanes of sum(u * a), or of sum(q * a) for the signed types.
    template <bool kSigned>
    static __m256i dot32(__m256i u, __m256i a) {
        if constexpr (kSigned) {
            const __m256i q = _mm256_xor_si256(u, _mm256_set1_epi8(static_cast<int8_t>(0x80)));
            return dot4_signed(zero_i(), abs8(q), q, a);
        } else {
            return dot4(zero_i(), u, a);
        }
    }

    static V16 zero16() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
    static V16 load16_f32(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
    static V16 load16_f16(const uint16_t* p) {
        const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
        return {_mm256_cvtph_ps(_mm256_castsi256_si128(h)),
                _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1))};
    }
    static V16 load16_bf16(const uint16_t* p) {
        const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
        const __m256i lo = _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_castsi256_si128(h)), 16);
        const __m256i hi =
            _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_extracti128_si256(h, 1)), 16);
        return {_mm256_castsi256_ps(lo), _mm256_castsi256_ps(hi)};
    }
    static V16 fma16(V16 a, V16 b, V16 c) {
        return {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)};
    }
    static V16 set16(float v) { return {_mm256_set1_ps(v), _mm256_set1_ps(v)}; }
    static V16 mul16(V16 a, V16 b) {
        return {_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)};
    }
    static V16 add16(V16 a, V16 b) {
        return {_mm256_add_ps(a.lo, b.lo), _mm256_add_ps(a.hi, b.hi)};
    }
    static V16 sub16(V16 a, V16 b) {
        return {_mm256_sub_ps(a.lo, b.lo), _mm256_sub_ps(a.hi, b.hi)};
    }
    // 16 unsigned bytes -> 16 floats of (u - off), exact.
    static V16 bytes16_to_float(__m128i u8, int off) {
        const __m256i o = _mm256_set1_epi32(off);
        return {
            _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_cvtepu8_epi32(u8), o)),
            _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_cvtepu8_epi32(_mm_srli_si128(u8, 8)), o))};
    }
    static void store16_f32(float* p, V16 v) {
        _mm256_storeu_ps(p, v.lo);
        _mm256_storeu_ps(p + 8, v.hi);
    }
    // The same tree as the AVX-512 kernels, so both levels agree bit for bit.
    static float reduce16(V16 v) {
        const __m256 s8 = _mm256_add_ps(v.lo, v.hi);
        const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
        const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
        return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
    }
};

}  // namespace
}  // namespace tensor_avx2

void install_avx2_kernels(KernelTable& table) {
    tensor_avx2::install_all<tensor_avx2::Avx2>(table, "avx2");
}

}  // namespace ember
