// qwen35's recurrent mixer on the CPU: GatedDeltaNet linear attention.
//
// A GatedDeltaNet layer, per token t:
//   [q | k | v] = silu(causal_conv(W_qkv · h))        depthwise conv, K taps, own history
//   q, k        L2-normalized per head, q scaled by 1/sqrt(k_dim)
//   g = a * softplus(alpha + dt_bias)   (a = -exp(A_log) < 0: log decay per v head)
//   beta = sigmoid(W_beta · h)
//   per v head (reading q/k head h % n_k_heads), with state S [k_dim x v_dim]:
//     S = exp(g) S;  S += k (beta (v - k^T S))^T;  o = q^T S          (the delta rule)
//   o = rms_norm(o) * w * silu(z),  z = W_z · h;   h += W_out · o
// Decode runs that recurrence token by token. Prefill runs it in chunks of kDeltaChunk
// tokens: within a chunk the updates form a unit lower-triangular system solved by forward
// substitution, and outputs and the state at the chunk's end are matrix products, so the
// state is read and written once per chunk instead of once per token.
#include <algorithm>
#include <cmath>

#include "engine/model/cpu/mixers.h"
#include "engine/model/cpu/ops.h"
#include "engine/model/forward.h"
#include "engine/model/model.h"
#include "engine/model/state.h"
#include "engine/util/thread_pool.h"

namespace ember::cpu {

namespace {

// Below this many tokens the token-serial recurrence is cheaper than chunking. Chunking
// rounds differently, so it must also stay above every batch that is promised to evaluate
// bit for bit as one token at a time (speculative verification and its re-advance).
constexpr int64_t kChunkFromTokens = kExactBatchTokens + 1;
static_assert(kChunkFromTokens >= 16, "shorter chunked batches are slower than serial ones");

float sigmoid(float x) {
    return 1.0f / (1.0f + std::exp(-x));
}

float silu(float x) {
    return x * sigmoid(x);
}

// log(1 + e^x), linear past 20 as torch's softplus.
float softplus(float x) {
    return x > 20.0f ? x : std::log1p(std::exp(x));
}

void scale_row(float* x, float a, int64_t n) {
    for (int64_t i = 0; i < n; ++i) x[i] *= a;
}

// x / sqrt(sum x^2 + 1e-6) * scale, in place.
void l2_normalize(float* x, int64_t n, float scale) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
    scale_row(x, static_cast<float>(scale / std::sqrt(sum + 1e-6)), n);
}

}  // namespace

int64_t delta_work_floats(int64_t k_dim, int64_t v_dim) {
    (void)k_dim;
    const int64_t C = kDeltaChunk;
    // chunked: log decay [C], K·K^T and Q·K^T [C x C] each, updates [C x v_dim];
    // serial uses the first 2*v_dim floats.
    return (C + 2 * C * C + C * v_dim + 15) / 16 * 16;
}

void delta_rule_serial(const DeltaHead& h, int64_t n, float* work) {
    const int64_t dk = h.k_dim, dv = h.v_dim;
    float* kv_mem = work;       // [dv] k^T S
    float* update = work + dv;  // [dv] beta (v - k^T S)
    for (int64_t t = 0; t < n; ++t) {
        const float* q = h.q + t * h.stride;
        const float* k = h.k + t * h.stride;
        const float* v = h.v + t * h.stride;
        const float decay = std::exp(h.decay[t * h.gb_stride]);
        const float beta = h.beta[t * h.gb_stride];
        std::fill(kv_mem, kv_mem + dv, 0.0f);
        for (int64_t i = 0; i < dk; ++i) {
            float* row = h.state + i * dv;
            scale_row(row, decay, dv);
            axpy_f32(k[i], row, kv_mem, dv);
        }
        for (int64_t j = 0; j < dv; ++j) update[j] = beta * (v[j] - kv_mem[j]);
        float* out = h.out + t * h.out_stride;
        std::fill(out, out + dv, 0.0f);
        for (int64_t i = 0; i < dk; ++i) {
            float* row = h.state + i * dv;
            axpy_f32(k[i], update, row, dv);
            axpy_f32(q[i], row, out, dv);
        }
    }
}

// One chunk of L tokens with state S0 at its start. With gam[r] the cumulative log decay
// inside the chunk (inclusive), the token-serial updates u_r = beta_r (v_r - k_r^T S_{r-1}')
// satisfy
//   u_r + beta_r sum_{s<r} e^{gam_r - gam_s} (k_r.k_s) u_s = beta_r (v_r - e^{gam_r} k_r^T S0)
// (forward substitution), then
//   o_r = e^{gam_r} q_r^T S0 + sum_{s<=r} e^{gam_r - gam_s} (q_r.k_s) u_s
//   S_L = e^{gam_L} S0 + sum_s e^{gam_L - gam_s} k_s u_s^T.
// Only differences gam_r - gam_s <= 0 are exponentiated, so nothing overflows.
void delta_rule_chunk(const DeltaHead& h, int64_t t0, int64_t L, float* work) {
    const int64_t dk = h.k_dim, dv = h.v_dim, C = kDeltaChunk;
    float* gam = work;       // [C]
    float* kk = gam + C;     // [C x C] k_r . k_s, then the system's coefficients
    float* qk = kk + C * C;  // [C x C] q_r . k_s
    float* u = qk + C * C;   // [C x dv] right-hand sides, then the updates
    auto q = [&](int64_t r) { return h.q + (t0 + r) * h.stride; };
    auto k = [&](int64_t r) { return h.k + (t0 + r) * h.stride; };
    float acc = 0.0f;
    for (int64_t r = 0; r < L; ++r) {
        acc += h.decay[(t0 + r) * h.gb_stride];
        gam[r] = acc;
    }
    for (int64_t r = 0; r < L; ++r) {
        const float beta = h.beta[(t0 + r) * h.gb_stride];
        const float* v = h.v + (t0 + r) * h.stride;
        float* ur = u + r * dv;
        std::fill(ur, ur + dv, 0.0f);
        const float e = std::exp(gam[r]);
        for (int64_t i = 0; i < dk; ++i) axpy_f32(-e * k(r)[i], h.state + i * dv, ur, dv);
        for (int64_t j = 0; j < dv; ++j) ur[j] = beta * (ur[j] + v[j]);
        for (int64_t s = 0; s <= r; ++s) {
            const float decay = std::exp(gam[r] - gam[s]);
            qk[r * C + s] = decay * dot_f32(q(r), k(s), dk);
            if (s < r) kk[r * C + s] = beta * decay * dot_f32(k(r), k(s), dk);
        }
        for (int64_t s = 0; s < r; ++s) axpy_f32(-kk[r * C + s], u + s * dv, ur, dv);
    }
    for (int64_t r = 0; r < L; ++r) {
        float* out = h.out + (t0 + r) * h.out_stride;
        std::fill(out, out + dv, 0.0f);
        const float e = std::exp(gam[r]);
        for (int64_t i = 0; i < dk; ++i) axpy_f32(e * q(r)[i], h.state + i * dv, out, dv);
        for (int64_t s = 0; s <= r; ++s) axpy_f32(qk[r * C + s], u + s * dv, out, dv);
    }
    const float g_last = gam[L - 1];
    const float e_last = std::exp(g_last);
    for (int64_t s = 0; s < L; ++s) gam[s] = std::exp(g_last - gam[s]);  // now the weights
    for (int64_t i = 0; i < dk; ++i) {
        float* row = h.state + i * dv;
        scale_row(row, e_last, dv);
        for (int64_t s = 0; s < L; ++s) axpy_f32(gam[s] * k(s)[i], u + s * dv, row, dv);
    }
}

void delta_rule_chunked(const DeltaHead& h, int64_t n, float* work) {
    for (int64_t t0 = 0; t0 < n; t0 += kDeltaChunk) {
        delta_rule_chunk(h, t0, std::min(kDeltaChunk, n - t0), work);
    }
}

namespace {

// Reads s.xn (normed input), adds the layer's output to s.x.
void delta_net_layer(const MixerPass& p, const LayerWeights& L, int64_t layer) {
    const ModelConfig& c = p.c;
    ForwardScratch& s = p.st.scratch;
    const int64_t nk = c.ssm_n_k_heads, nv = c.ssm_n_v_heads, dk = c.ssm_k_dim, dv = c.ssm_v_dim;
    const int64_t channels = c.conv_channels();  // [q: nk*dk | k: nk*dk | v: nv*dv]
    const int64_t inner = nv * dv;
    grow(s.z, p.n * inner);
    grow(s.core, p.n * inner);
    grow(s.decay, p.n * nv);
    grow(s.beta, p.n * nv);
    grow(s.delta_work, p.pool.size() * delta_work_floats(dk, dv));
    grow(s.conv_out, p.n * channels);
    grow(s.conv_ext, (c.conv_kernel - 1 + p.n) * channels);
    const MatmulOut proj[] = {{&L.ssm_qkv, s.proj.data(), channels},
                              {&L.ssm_z, s.z.data(), inner},
                              {&L.ssm_alpha, s.decay.data(), nv},
                              {&L.ssm_beta, s.beta.data(), nv}};
    matmul_many(p.pool, proj, s.xn.data(), p.n, s.mm);
    causal_conv(s.proj.data(), p.st.recurrent.conv(layer), L.conv_taps.data(), c.conv_kernel,
                channels, p.n, s.conv_ext.data(), s.conv_out.data());
    const float q_scale = 1.0f / std::sqrt(static_cast<float>(dk));
    for (int64_t t = 0; t < p.n; ++t) {
        float* row = s.conv_out.data() + t * channels;
        for (int64_t i = 0; i < channels; ++i) row[i] = silu(row[i]);
        for (int64_t kh = 0; kh < nk; ++kh) {
            l2_normalize(row + kh * dk, dk, q_scale);
            l2_normalize(row + nk * dk + kh * dk, dk, 1.0f);
        }
        for (int64_t h = 0; h < nv; ++h) {
            float& g = s.decay[static_cast<size_t>(t * nv + h)];
            g = L.ssm_a[static_cast<size_t>(h)] *
                softplus(g + L.ssm_dt_bias[static_cast<size_t>(h)]);
            float& beta = s.beta[static_cast<size_t>(t * nv + h)];
            beta = sigmoid(beta);
        }
    }
    // What the head tasks share; the lambda captures one pointer to it, so std::function
    // keeps it in its small buffer and decode does not allocate.
    struct HeadsJob {
        const MixerPass* p;
        float* state;  // [nv x dk x dv]
        int64_t nk, nv, dk, dv, channels, inner, work_floats;
        bool chunked;
    };
    const HeadsJob job{&p,
                       p.st.recurrent.delta(layer),
                       nk,
                       nv,
                       dk,
                       dv,
                       channels,
                       inner,
                       delta_work_floats(dk, dv),
                       p.n >= kChunkFromTokens};
    const HeadsJob* jp = &job;
    p.pool.parallel_for(nv, [jp](int64_t h, int worker) {
        const HeadsJob& j = *jp;
        ForwardScratch& sc = j.p->st.scratch;
        const int64_t kh = h % j.nk;  // v heads are tiled over the k heads
        DeltaHead head{};
        head.q = sc.conv_out.data() + kh * j.dk;
        head.k = sc.conv_out.data() + j.nk * j.dk + kh * j.dk;
        head.v = sc.conv_out.data() + 2 * j.nk * j.dk + h * j.dv;
        head.stride = j.channels;
        head.decay = sc.decay.data() + h;
        head.beta = sc.beta.data() + h;
        head.gb_stride = j.nv;
        head.out = sc.core.data() + h * j.dv;
        head.out_stride = j.inner;
        head.state = j.state + h * j.dk * j.dv;
        head.k_dim = j.dk;
        head.v_dim = j.dv;
        float* work = sc.delta_work.data() + worker * j.work_floats;
        if (j.chunked) {
            delta_rule_chunked(head, j.p->n, work);
        } else {
            delta_rule_serial(head, j.p->n, work);
        }
    });
    const float eps = static_cast<float>(c.rms_eps);
    for (int64_t t = 0; t < p.n; ++t) {
        for (int64_t h = 0; h < nv; ++h) {
            float* o = s.core.data() + t * inner + h * dv;
            const float* z = s.z.data() + t * inner + h * dv;
            rms_norm(o, L.ssm_norm.data(), o, dv, eps);
            for (int64_t j = 0; j < dv; ++j) o[j] *= silu(z[j]);
        }
    }
    matmul(p.pool, L.ssm_out, s.core.data(), p.n, s.xn.data(), c.n_embd, s.mm);
}

}  // namespace

void delta_net_mixer(const MixerPass& p, const LayerWeights& L, int64_t layer) {
    delta_net_layer(p, L, layer);
}

}  // namespace ember::cpu
