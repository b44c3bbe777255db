#include "engine/model/cpu/ops.h"

#include <algorithm>
#include <cmath>

#include "engine/model/cpu/ops_avx2.h"
#include "engine/model/cpu/ops_avx512.h"
#include "engine/tensor/blocks.h"
#include "engine/tensor/cpu_features.h"
#include "engine/tensor/traits.h"
#include "engine/tensor/types.h"

namespace ember {
void rms_norm(const float* x, const float* weight, float* out, int64_t n, float eps) {
    // Accumulate in double: the sum of squares of thousands of activations loses digits in
    // float, and the references are float64.
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
    const float inv = static_cast<float>(1.0 / std::sqrt(sum / static_cast<double>(n) + eps));
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] * inv * weight[i];
}

void rope(float* head, const float* cos, const float* sin, int64_t dims, bool halves) {
    const int64_t half = dims / 2;
    for (int64_t i = 0; i < half; ++i) {
        const int64_t a = halves ? i : 2 * i;
        const int64_t b = halves ? i + half : 2 * i + 1;
        const float x0 = head[a];
        const float x1 = head[b];
        head[a] = x0 * cos[i] - x1 * sin[i];
        head[b] = x0 * sin[i] + x1 * cos[i];
    }
}

void rope_table(const std::vector<double>& inv_freq, double freq_scale, int64_t pos0, int64_t n,
                float* cos, float* sin) {
    const int64_t half = static_cast<int64_t>(inv_freq.size());
    for (int64_t t = 0; t < n; ++t) {
        const double pos = static_cast<double>(pos0 + t) * freq_scale;
        for (int64_t i = 0; i < half; ++i) {
            const double angle = pos * inv_freq[static_cast<size_t>(i)];
            cos[t * half + i] = static_cast<float>(std::cos(angle));
            sin[t * half + i] = static_cast<float>(std::sin(angle));
        }
    }
}

void quantize_q8_0(const float* x, void* blocks, int64_t n) {
    // The weights' reference quantizer (engine/tensor), so the cache's blocks are exactly the
    // Q8_0 a GGUF file would hold; a row is quantized once, when it is written, and one code
    // path keeps batch and single-token writes identical.
    const QuantizeRowFn quantize = scalar_kernels()[TensorType::Q8_0].quantize_row;
    const int64_t whole = n / kQK * kQK;
    quantize(x, blocks, whole);
    if (whole < n) {
        float tail[kQK] = {};  // the last block, zero-padded
        std::copy(x + whole, x + n, tail);
        quantize(tail, static_cast<BlockQ8_0*>(blocks) + whole / kQK, kQK);
    }
}

void add_inplace(float* y, const float* x, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

namespace {

void scalar_softmax(float* x, int64_t n) {
    float max = x[0];
    for (int64_t i = 1; i < n; ++i) max = std::max(max, x[i]);
    float sum = 0.0f;
    for (int64_t i = 0; i < n; ++i) {
        x[i] = std::exp(x[i] - max);
        sum += x[i];
    }
    const float inv = 1.0f / sum;
    for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

float scalar_dot(const float* a, const float* b, int64_t n) {
    // Eight independent partial sums so the compiler can vectorize without -ffast-math.
    float acc[8] = {};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
    }
    float sum = 0.0f;
    for (; i < n; ++i) sum += a[i] * b[i];
    for (float v : acc) sum += v;
    return sum;
}

void scalar_axpy(float a, const float* x, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

float scalar_dot_f16(const uint16_t* a, const float* b, int64_t n) {
    float sum = 0.0f;
    for (int64_t i = 0; i < n; ++i) sum += fp16_to_fp32(a[i]) * b[i];
    return sum;
}

void scalar_axpy_f16(float a, const uint16_t* x, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] += a * fp16_to_fp32(x[i]);
}

void scalar_to_f16(const float* x, uint16_t* out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) out[i] = fp32_to_fp16(x[i]);
}

// Element i of a q8_0 row as a float: scale times quant (exact in f32: an 11-bit fp16
// mantissa times a 7-bit integer).
float q8_0_at(const BlockQ8_0* blocks, int64_t i) {
    const BlockQ8_0& b = blocks[i / kQK];
    return fp16_to_fp32(b.d) * static_cast<float>(b.qs[i % kQK]);
}

float scalar_dot_q8_0(const void* blocks, int64_t first, const float* b, int64_t n) {
    const auto* q = static_cast<const BlockQ8_0*>(blocks);
    float sum = 0.0f;
    for (int64_t i = 0; i < n; ++i) sum += q8_0_at(q, first + i) * b[i];
    return sum;
}

void scalar_axpy_q8_0(float a, const void* blocks, int64_t first, float* y, int64_t n) {
    const auto* q = static_cast<const BlockQ8_0*>(blocks);
    for (int64_t i = 0; i < n; ++i) y[i] += a * q8_0_at(q, first + i);
}

void scalar_swiglu(float* gate, const float* up, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        const float g = gate[i];
        gate[i] = g / (1.0f + std::exp(-g)) * up[i];
    }
}

void scalar_gelu_tanh_gate(float* gate, const float* up, int64_t n) {
    const float k = 0.7978845608028654f;  // sqrt(2/pi)
    for (int64_t i = 0; i < n; ++i) {
        const float x = gate[i];
        gate[i] = 0.5f * x * (1.0f + std::tanh(k * (x + 0.044715f * x * x * x))) * up[i];
    }
}

OpsTable make_scalar_ops() {
    OpsTable t;
    t.dot = scalar_dot;
    t.axpy = scalar_axpy;
    t.softmax = scalar_softmax;
    t.swiglu = scalar_swiglu;
    t.gelu_tanh_gate = scalar_gelu_tanh_gate;
    t.dot_f16 = scalar_dot_f16;
    t.axpy_f16 = scalar_axpy_f16;
    t.to_f16 = scalar_to_f16;
    t.dot_q8_0 = scalar_dot_q8_0;
    t.axpy_q8_0 = scalar_axpy_q8_0;
    return t;
}

}  // namespace

OpsTable make_ops_table(KernelLevel level) {
    OpsTable t = make_scalar_ops();
#if defined(__x86_64__)
    // ops_avx2.cpp / ops_avx512.cpp are compiled with their level's flags, so each runs from
    // that level on; the stronger level replaces every entry it has.
    if (level >= KernelLevel::Avx2) avx2::install_ops(t);
    if (level >= KernelLevel::Avx512) avx512::install_ops(t);
#else
    (void)level;
#endif
    return t;
}

const OpsTable& active_ops() {
    static const OpsTable table = make_ops_table(kernel_level());
    return table;
}

float dot_f32(const float* a, const float* b, int64_t n) {
    return active_ops().dot(a, b, n);
}
void axpy_f32(float a, const float* x, float* y, int64_t n) {
    active_ops().axpy(a, x, y, n);
}
void softmax_inplace(float* x, int64_t n) {
    active_ops().softmax(x, n);
}
void swiglu_inplace(float* gate, const float* up, int64_t n) {
    active_ops().swiglu(gate, up, n);
}
void gelu_tanh_gate_inplace(float* gate, const float* up, int64_t n) {
    active_ops().gelu_tanh_gate(gate, up, n);
}
float dot_f16_f32(const uint16_t* a, const float* b, int64_t n) {
    return active_ops().dot_f16(a, b, n);
}
void axpy_f16(float a, const uint16_t* x, float* y, int64_t n) {
    active_ops().axpy_f16(a, x, y, n);
}
void to_f16(const float* x, uint16_t* out, int64_t n) {
    active_ops().to_f16(x, out, n);
}
float dot_q8_0_f32(const void* blocks, int64_t first, const float* b, int64_t n) {
    return active_ops().dot_q8_0(blocks, first, b, n);
}
void axpy_q8_0(float a, const void* blocks, int64_t first, float* y, int64_t n) {
    active_ops().axpy_q8_0(a, blocks, first, y, n);
}

namespace {

// q . key of position p of the run.
float key_dot(const KvRun& kv, int64_t p, const float* q, int64_t head_dim) {
    switch (kv.type) {
        case KvType::F16:
            return dot_f16_f32(static_cast<const uint16_t*>(kv.k) + p * kv.k_stride, q, head_dim);
        case KvType::Q8_0: {
            // Whole blocks per position (k_stride is a padded width), then the head's offset.
            const auto* row =
                static_cast<const uint8_t*>(kv.k) + kv_bytes(kv.type, p * kv.k_stride);
            return dot_q8_0_f32(row, kv.k_first, q, head_dim);
        }
        case KvType::F32:
            break;
    }
    return dot_f32(q, static_cast<const float*>(kv.k) + p * kv.k_stride, head_dim);
}

// o += w * value of position p of the run.
void value_axpy(const KvRun& kv, int64_t p, float w, float* o, int64_t value_dim) {
    switch (kv.type) {
        case KvType::F16:
            return axpy_f16(w, static_cast<const uint16_t*>(kv.v) + p * kv.v_stride, o, value_dim);
        case KvType::Q8_0: {
            const auto* row =
                static_cast<const uint8_t*>(kv.v) + kv_bytes(kv.type, p * kv.v_stride);
            return axpy_q8_0(w, row, kv.v_first, o, value_dim);
        }
        case KvType::F32:
            break;
    }
    axpy_f32(w, static_cast<const float*>(kv.v) + p * kv.v_stride, o, value_dim);
}

// Any head size and CPU: one dot / axpy call per (head, position).
void attend_run_generic(const AttnShape& sh, const float* q, const KvRun& kv, float* scores,
                        float* records, int64_t record_stride) {
    for (int64_t g = 0; g < sh.n_q; ++g) {
        const float* qg = q + g * sh.q_stride;  // [head_dim]
        float* s = scores + g * kv.n;           // [n]
        for (int64_t p = 0; p < kv.n; ++p) s[p] = sh.scale * key_dot(kv, p, qg, sh.head_dim);
        if (sh.softcap > 0) {
            for (int64_t p = 0; p < kv.n; ++p) s[p] = sh.softcap * std::tanh(s[p] / sh.softcap);
        }
        const float m = *std::max_element(s, s + kv.n);
        float l = 0.0f;
        for (int64_t p = 0; p < kv.n; ++p) {
            s[p] = std::exp(s[p] - m);
            l += s[p];
        }
        float* rec = records + g * record_stride;
        rec[0] = m;
        rec[1] = l;
        float* o = rec + 2;  // [value_dim]
        std::fill(o, o + sh.value_dim, 0.0f);
        for (int64_t p = 0; p < kv.n; ++p) value_axpy(kv, p, s[p], o, sh.value_dim);
    }
}

}  // namespace

int64_t attn_run_scratch_floats(const AttnShape& sh, int64_t n) {
    // Scores of every head, then the AVX-512 path's 16 widened keys and 16 x 16 partial sums.
    return sh.n_q * n + 16 * sh.head_dim + 16 * 16;
}

void attend_run(const AttnShape& sh, const float* q, const KvRun& kv, float* scores, float* records,
                int64_t record_stride) {
    if (kv.n <= 0) return;
    // The SIMD runs work on whole 16-float vectors of a head.
    const OpsTable& ops = active_ops();
    // Soft-capped scores take the generic run (no family Ember runs caps them today).
    if (ops.attend_run_16 != nullptr && sh.softcap == 0 && sh.head_dim % 16 == 0 &&
        sh.value_dim % 16 == 0) {
        return ops.attend_run_16(sh, q, kv, scores, records, record_stride);
    }
    attend_run_generic(sh, q, kv, scores, records, record_stride);
}

void attend_merge(const float* records, int64_t n_runs, int64_t stride, int64_t value_dim,
                  float* out) {
    float m = records[0];
    for (int64_t r = 1; r < n_runs; ++r) m = std::max(m, records[r * stride]);
    float l = 0.0f;
    std::fill(out, out + value_dim, 0.0f);
    for (int64_t r = 0; r < n_runs; ++r) {
        const float* rec = records + r * stride;
        // Rescale the run's numerators from its own maximum to the common one.
        const float w = n_runs == 1 ? 1.0f : std::exp(rec[0] - m);
        l += w * rec[1];
        for (int64_t i = 0; i < value_dim; ++i) out[i] += w * rec[2 + i];
    }
    const float inv = 1.0f / l;
    for (int64_t i = 0; i < value_dim; ++i) out[i] *= inv;
}

}  // namespace ember
