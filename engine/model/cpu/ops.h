// Small vector operations of the forward pass; the heavy lifting (matmul) lives in
// engine/tensor. The ones below the first line that say "dispatched" go through one table per
// ISA level (OpsTable), chosen once like the tensor kernels (cpu_features.h: the strongest
// level the CPU and OS allow, lowered by EMBER_KERNELS): plain loops the compiler vectorizes,
// or their AVX-512 versions (ops_avx512.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/model/kv_type.h"
#include "engine/tensor/cpu_features.h"

namespace ember {

// out[i] = x[i] / rms(x) * weight[i]; out may alias x.
void rms_norm(const float* x, const float* weight, float* out, int64_t n, float eps);
// Rotates pairs of a head in place: (i, i + dims/2) when `halves`, else (2i, 2i+1).
// cos/sin: [dims/2]. Dimensions past `dims` are left as they are (partial rotary).
void rope(float* head, const float* cos, const float* sin, int64_t dims, bool halves);
// RoPE's cos/sin for positions pos0..pos0+n-1: cos, sin [n x inv_freq.size()], angle of pair i
// at position p = (p * freq_scale) * inv_freq[i], computed in double so long contexts keep
// their precision.
void rope_table(const std::vector<double>& inv_freq, double freq_scale, int64_t pos0, int64_t n,
                float* cos, float* sin);
// Numerically stable softmax over x[0..n).
void softmax_inplace(float* x, int64_t n);
float dot_f32(const float* a, const float* b, int64_t n);
// y += a * x
void axpy_f32(float a, const float* x, float* y, int64_t n);
// Half-precision KV cache rows (dispatched, as are dot/axpy/softmax/swiglu/gelu above and the
// q8_0 rows below): a is [n] fp16 bits.
float dot_f16_f32(const uint16_t* a, const float* b, int64_t n);
void axpy_f16(float a, const uint16_t* x, float* y, int64_t n);
void to_f16(const float* x, uint16_t* out, int64_t n);
// q8_0 KV cache rows: `blocks` is a row of Q8_0 blocks and the n elements start at element
// `first` of it (any element: a narrow head may start inside a block).
float dot_q8_0_f32(const void* blocks, int64_t first, const float* b, int64_t n);
void axpy_q8_0(float a, const void* blocks, int64_t first, float* y, int64_t n);
// x[n] -> ceil(n / 32) Q8_0 blocks, the last one zero-padded, by the weights' reference
// quantizer (scale max|x| / 127 rounded to fp16, quants rounded to nearest).
void quantize_q8_0(const float* x, void* blocks, int64_t n);
// y += x
void add_inplace(float* y, const float* x, int64_t n);
// gate[i] = silu(gate[i]) * up[i]
void swiglu_inplace(float* gate, const float* up, int64_t n);
// gate[i] = gelu(gate[i]) * up[i], GELU in its tanh approximation (gemma3's MLP):
//   gelu(x) = x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))
void gelu_tanh_gate_inplace(float* gate, const float* up, int64_t n);

// ---- attention over a run of cached positions (the flash-attention split) -------------------
//
// The query heads of one GQA group against one run of consecutive cache positions: every head
// reads the same K/V rows, so they are read once for the group. A run gives, per head, a partial
// record [m, l, o[value_dim]]: m the largest score, l = sum exp(s_p - m), o = sum exp(s_p - m)
// v_p. attend_merge() combines the records of a head's runs into the softmax-weighted sum of V,
// so a long context can be split over threads and the result does not depend on who ran what.

// Element e of position p's key is element p * k_stride + k_first + e counted from `k`, in
// the cache's layout (kv_bytes() turns element counts into bytes). f32 and f16 runs point at
// the head's key (k_first = 0); a q8_0 run points at the block holding it, and k_first says
// where inside that block the head starts (a multiple of the head size below 32). KvCache::run()
// builds them.
struct KvRun {
    const void* k = nullptr;  // [n x k_stride] elements of `type`
    const void* v = nullptr;  // [n x v_stride]
    int64_t k_stride = 0;     // elements between the keys of consecutive positions
    int64_t v_stride = 0;     // (q8_0: whole blocks)
    int64_t k_first = 0;
    int64_t v_first = 0;
    int64_t n = 0;  // positions
    KvType type = KvType::F32;
};

struct AttnShape {
    int64_t n_q = 1;  // query heads of the group
    int64_t head_dim = 0;
    int64_t value_dim = 0;
    int64_t q_stride = 0;  // floats between consecutive query heads
    float scale = 1.0f;
    float softcap = 0.0f;  // > 0: scores = softcap * tanh(scores / softcap) (Gemma 2's)
};

// Floats of one partial record: m, l, then o.
inline int64_t attn_record_floats(int64_t value_dim) {
    return value_dim + 2;
}
// q: [n_q x q_stride]; records: [n_q x record_stride] (record_stride >= value_dim + 2);
// scores: scratch of at least attn_run_scratch_floats(shape, kv.n) floats.
void attend_run(const AttnShape& shape, const float* q, const KvRun& kv, float* scores,
                float* records, int64_t record_stride);
int64_t attn_run_scratch_floats(const AttnShape& shape, int64_t n);
// out[value_dim] from the records of one head's runs: records [n_runs x stride].
void attend_merge(const float* records, int64_t n_runs, int64_t stride, int64_t value_dim,
                  float* out);

// ---- dispatch -------------------------------------------------------------------------------

struct OpsTable {
    float (*dot)(const float* a, const float* b, int64_t n) = nullptr;
    void (*axpy)(float a, const float* x, float* y, int64_t n) = nullptr;
    void (*softmax)(float* x, int64_t n) = nullptr;
    void (*swiglu)(float* gate, const float* up, int64_t n) = nullptr;
    void (*gelu_tanh_gate)(float* gate, const float* up, int64_t n) = nullptr;
    float (*dot_f16)(const uint16_t* a, const float* b, int64_t n) = nullptr;
    void (*axpy_f16)(float a, const uint16_t* x, float* y, int64_t n) = nullptr;
    void (*to_f16)(const float* x, uint16_t* out, int64_t n) = nullptr;
    float (*dot_q8_0)(const void* blocks, int64_t first, const float* b, int64_t n) = nullptr;
    void (*axpy_q8_0)(float a, const void* blocks, int64_t first, float* y, int64_t n) = nullptr;
    // attend_run for head_dim and value_dim multiples of 16, or null (the generic run then).
    void (*attend_run_16)(const AttnShape& shape, const float* q, const KvRun& kv, float* scores,
                          float* records, int64_t record_stride) = nullptr;
};

// The table of one level (tests compare levels); active_ops(): kernel_level()'s, built once.
OpsTable make_ops_table(KernelLevel level);
const OpsTable& active_ops();

}  // namespace ember
