// AVX-512 variants of ops.h, compiled with the Avx512 kernel level's flags: make_ops_table
// installs them for that level only.
#pragma once

#include <cstdint>

#include "engine/model/cpu/ops.h"

namespace ember::avx512 {

// Puts the functions below into `table`.
void install_ops(OpsTable& table);

float dot(const float* a, const float* b, int64_t n);
void axpy(float a, const float* x, float* y, int64_t n);
void softmax(float* x, int64_t n);
void swiglu(float* gate, const float* up, int64_t n);
void gelu_tanh_gate(float* gate, const float* up, int64_t n);
// f16 KV cache rows (F16C conversions, round to nearest even like fp32_to_fp16).
float dot_f16(const uint16_t* a, const float* b, int64_t n);
void axpy_f16(float a, const uint16_t* x, float* y, int64_t n);
void to_f16(const float* x, uint16_t* out, int64_t n);
// q8_0 KV cache rows (ops.h's dot_q8_0_f32 / axpy_q8_0).
float dot_q8_0(const void* blocks, int64_t first, const float* b, int64_t n);
void axpy_q8_0(float a, const void* blocks, int64_t first, float* y, int64_t n);
// ops.h's attend_run for head_dim and value_dim multiples of 16; `scores` holds
// attn_run_scratch_floats() floats.
void attend_run(const AttnShape& shape, const float* q, const KvRun& kv, float* scores,
                float* records, int64_t record_stride);

}  // namespace ember::avx512
