// AVX-512 kernels (F/BW/VL/DQ/VNNI): 16-row panels, vpdpbusd for every quantized type.
// Compiled with AVX-512 flags (engine/CMakeLists.txt); installed only when cpu_features.h
// reports that the CPU and OS run them.
#define EMBER_SIMD_NS tensor_avx512
#include <cstdlib>

#include "engine/tensor/gemv_avx512.h"
#include "engine/tensor/panels16_avx512.h"
#include "engine/tensor/repack_avx512.h"
#include "engine/tensor/simd_gemm.h"

namespace ember {
namespace tensor_avx512 {
namespace {

// The instruction-set policy simd_gemm.h is written against.
struct Avx512 {
    static constexpr int kW = 16;  // rows per panel = int32 lanes per vector
    static constexpr bool kVnni = true;
    // Tokens per micro-tile: accumulators of 2 panels x kTokens tokens (x2 for the families
    // with half sums) plus the float totals must fit the 32 vector registers.
    template <Family F>
    static constexpr int kTokens = (F == Family::C || F == Family::D) ? 4 : 6;
    static constexpr int kFloatRows = 4;  // float micro-tile: 4 rows x 6 tokens
    static constexpr int kFloatTokens = 6;

    using VI = __m512i;
    using VF = __m512;
    using V16 = __m512;

    static VI zero_i() { return _mm512_setzero_si512(); }
    static VF zero_f() { return _mm512_setzero_ps(); }
    static VI set1_i(int32_t v) { return _mm512_set1_epi32(v); }
    static VF set1_f(float v) { return _mm512_set1_ps(v); }
    static VI load_i(const void* p) { return _mm512_load_si512(p); }
    static VF load_f(const void* p) { return _mm512_load_ps(p); }
    static void store_f(float* p, VF v) { _mm512_store_ps(p, v); }
    static VI bcast_i32(const void* p) {
        return _mm512_set1_epi32(static_cast<int32_t>(load_u32(p)));
    }
    static VI dot4(VI acc, VI w, VI a) { return _mm512_dpbusd_epi32(acc, w, a); }
    static VI madd16(VI a, VI b) { return _mm512_madd_epi16(a, b); }
    static VI mullo(VI a, VI b) { return _mm512_mullo_epi32(a, b); }
    static VI shl8(VI v) { return _mm512_slli_epi32(v, 8); }
    // The low / high signed int16 of each int32 lane.
    static VI lo16(VI v) { return _mm512_srai_epi32(_mm512_slli_epi32(v, 16), 16); }
    static VI hi16(VI v) { return _mm512_srai_epi32(v, 16); }
    static VI add_i(VI a, VI b) { return _mm512_add_epi32(a, b); }
    static VF cvt(VI v) { return _mm512_cvtepi32_ps(v); }
    static VF mul(VF a, VF b) { return _mm512_mul_ps(a, b); }
    static VF fma(VF a, VF b, VF c) { return _mm512_fmadd_ps(a, b, c); }
    static void store_lanes(float* y, VF v, int n) {
        if (n == kW) {
            _mm512_storeu_ps(y, v);
        } else {
            _mm512_mask_storeu_ps(y, static_cast<__mmask16>((1u << n) - 1u), v);
        }
    }

    // u[16]: 32 bytes of row r each -> dst: 8 vectors, vector k = bytes 4k..4k+3 of rows 0..15.
    // An 8x8 dword transpose applied to rows 0-7 (low halves) and 8-15 (high halves) at once.
    static void transpose_store(const __m256i* u, uint8_t* dst) {
        __m512i z[8];
        for (int i = 0; i < 8; ++i) {
            z[i] = _mm512_inserti64x4(_mm512_castsi256_si512(u[i]), u[i + 8], 1);
        }
        __m512i t[8];
        for (int i = 0; i < 4; ++i) {
            t[2 * i] = _mm512_unpacklo_epi32(z[2 * i], z[2 * i + 1]);
            t[2 * i + 1] = _mm512_unpackhi_epi32(z[2 * i], z[2 * i + 1]);
        }
        // v[c] (c = 0..3) of rows 0-3 and v[4 + c] of rows 4-7: 128-bit lanes hold columns
        // c, c+4 (rows 0-7 part) and c, c+4 (rows 8-15 part).
        __m512i v[8];
        for (int h = 0; h < 2; ++h) {
            v[4 * h + 0] = _mm512_unpacklo_epi64(t[4 * h + 0], t[4 * h + 2]);
            v[4 * h + 1] = _mm512_unpackhi_epi64(t[4 * h + 0], t[4 * h + 2]);
            v[4 * h + 2] = _mm512_unpacklo_epi64(t[4 * h + 1], t[4 * h + 3]);
            v[4 * h + 3] = _mm512_unpackhi_epi64(t[4 * h + 1], t[4 * h + 3]);
        }
        const __m512i lo = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13);
        const __m512i hi = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
        for (int c = 0; c < 4; ++c) {
            _mm512_store_si512(dst + 64 * c, _mm512_permutex2var_epi64(v[c], lo, v[4 + c]));
            _mm512_store_si512(dst + 64 * (c + 4), _mm512_permutex2var_epi64(v[c], hi, v[4 + c]));
        }
    }

    // Type-specific panel repacking (repack_avx512.h); simd_gemm.h falls back to its generic
    // repack for a type without an overload here.
#define EMBER_REPACK(T, FAMILY, FN)                                                    \
    static void repack(T, const uint8_t* w, size_t stride, int rows, int64_t n_groups, \
                       uint8_t* panel, const uint8_t* next) {                          \
        FN(repack512::PanelRows(w, stride, rows, next), n_groups, panel,               \
           static_cast<size_t>(32 * kW + 4 * kW * params_of(FAMILY)));                 \
    }
    EMBER_REPACK(TQ8_0, Family::A, repack512::repack_q8_0)
    EMBER_REPACK(TQ4_0, Family::A, (repack512::repack_q4<BlockQ4_0, false, false>))
    EMBER_REPACK(TIQ4_NL, Family::A, (repack512::repack_q4<BlockIQ4_NL, true, false>))
    EMBER_REPACK(TQ4_1, Family::B, (repack512::repack_q4<BlockQ4_1, false, true>))
    EMBER_REPACK(TQ5_0, Family::A, (repack512::repack_q5<BlockQ5_0, false>))
    EMBER_REPACK(TQ5_1, Family::B, (repack512::repack_q5<BlockQ5_1, true>))
    EMBER_REPACK(TQ4_K, Family::B, repack512::repack_q45k<false>)
    EMBER_REPACK(TQ5_K, Family::B, repack512::repack_q45k<true>)
    EMBER_REPACK(TQ6_K, Family::C, repack512::repack_q6k)
    EMBER_REPACK(TQ3_K, Family::C, repack512::repack_q3k)
    EMBER_REPACK(TQ2_K, Family::D, repack512::repack_q2k)
#undef EMBER_REPACK
    // The same panels from a matrix in WeightLayout::Panels16 (panels16_avx512.h).
    static void repack_panels16(TQ4_K, const uint8_t* w, int64_t n_groups, uint8_t* panel,
                                const uint8_t* next) {
        repack512::repack_q45k<false>(repack512::X16Rows<sizeof(BlockQ4_K)>{w, next}, n_groups,
                                      panel, kGroupBytes<Avx512, Family::B>);
    }
    static void repack_panels16(TQ6_K, const uint8_t* w, int64_t n_groups, uint8_t* panel,
                                const uint8_t* next) {
        repack512::repack_q6k(repack512::X16Rows<sizeof(BlockQ6_K)>{w, next}, n_groups, panel,
                              kGroupBytes<Avx512, Family::C>);
    }
    template <class T>
    requires gemv512::HasPanel16<T>
    static void gemv_panels16(T, const GemmArgs& g) {
        gemv512::gemv16<T>(g);
    }

    // Up to kGemvTokens tokens straight from the weights' layout (gemv_avx512.h), for the types
    // gemv512 covers; the others go through panels.
    static constexpr int kGemvTokens = gemv512::kGemvTokens;
    template <class T>
    requires gemv512::HasGemv<T>
    static void gemv(T, const GemmArgs& g) {
        gemv512::gemv<T>(g);
    }
    // Calls of at most this many tokens take gemv; EMBER_GEMV_TOKENS (0..kGemvTokens) overrides,
    // for measuring and for the tests. From two tokens on gemv transposes each group's rows once
    // and gives every token one vpdpbusd per dword (no store and reload of a repacked panel, and
    // the next panel's prefetch spread over the whole computation): a forward of 4 / 8 tokens
    // took 1.12-1.54 / 1.55-2.28 decode times through gemv against 1.42-2.00 / 1.78-2.46 through
    // the panels (this machine, SmolLM2-135M and Qwen3-0.6B Q8_0 / Q4_K_M shapes). Both read each
    // weight once per call and give bitwise the same numbers.
    static int64_t gemv_max_tokens() {
        static const int64_t n = [] {
            const char* e = std::getenv("EMBER_GEMV_TOKENS");
            const int64_t v = e != nullptr ? std::atoll(e) : kGemvTokens;
            return v < 0 ? 0 : (v > kGemvTokens ? kGemvTokens : v);
        }();
        return n;
    }

    // Single-row dot: 8 int32 lanes of sum(u * a) over 4-byte groups.
    template <bool kSigned>
    static __m256i dot32(__m256i u, __m256i a) {
        return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, a);
    }

    // 16-lane float vectors of the float-weight kernels.
    static V16 zero16() {
        return _mm512_setzero_ps();
    }
    static V16 load16_f32(const float* p) {
        return _mm512_loadu_ps(p);
    }
    static V16 load16_f16(const uint16_t* p) {
        return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    }
    static V16 load16_bf16(const uint16_t* p) {
        const __m512i w =
            _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
        return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
    }
    static V16 fma16(V16 a, V16 b, V16 c) {
        return _mm512_fmadd_ps(a, b, c);
    }
    static V16 set16(float v) {
        return _mm512_set1_ps(v);
    }
    static V16 mul16(V16 a, V16 b) {
        return _mm512_mul_ps(a, b);
    }
    static V16 add16(V16 a, V16 b) {
        return _mm512_add_ps(a, b);
    }
    static V16 sub16(V16 a, V16 b) {
        return _mm512_sub_ps(a, b);
    }
    // 16 unsigned bytes -> 16 floats of (u - off), exact.
    static V16 bytes16_to_float(__m128i u8, int off) {
        return _mm512_cvtepi32_ps(
            _mm512_sub_epi32(_mm512_cvtepu8_epi32(u8), _mm512_set1_epi32(off)));
    }
    static void store16_f32(float* p, V16 v) {
        _mm512_storeu_ps(p, v);
    }
    // The canonical tree: halves, quarters, then (0 + 2) + (1 + 3).
    static float reduce16(V16 v) {
        const __m256 s8 =
            _mm256_add_ps(_mm512_castps512_ps256(v),
                          _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
        const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
        const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
        return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
    }
};

}  // namespace
}  // namespace tensor_avx512

void install_avx512_kernels(KernelTable& table) {
    using tensor_avx512::Avx512;
    tensor_avx512::install_all<Avx512>(table, "avx512");
    table[TensorType::Q4_K].gemm_panels16 =
        tensor_avx512::gemm_q<Avx512, tensor_avx512::TQ4_K, true>;
    table[TensorType::Q6_K].gemm_panels16 =
        tensor_avx512::gemm_q<Avx512, tensor_avx512::TQ6_K, true>;
}

}  // namespace ember
