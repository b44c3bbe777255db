// lfm2's recurrent mixer on the CPU, the gated short convolution (per channel c, token t):
//   [B | C | x] = in_proj · norm(h)                    three [n_embd] gates
//   y[t] = C[t] * sum_k taps[c][k] * (B*x)[t - (K-1) + k]   causal, K = l_cache taps
//   h += out_proj · y
// Its state is the last K-1 values of B*x, carried across calls.
#include <algorithm>

#include "engine/model/cpu/mixers.h"
#include "engine/model/cpu/ops.h"
#include "engine/model/model.h"
#include "engine/model/state.h"
#include "engine/util/thread_pool.h"

namespace ember::cpu {

void causal_conv(const float* in, float* history, const float* taps, int64_t kernel,
                 int64_t channels, int64_t n, float* ext, float* out) {
    const int64_t keep = kernel - 1;
    std::copy(history, history + keep * channels, ext);
    std::copy(in, in + n * channels, ext + keep * channels);
    for (int64_t t = 0; t < n; ++t) {
        const float* window = ext + t * channels;  // rows t..t+K-1 of ext
        float* o = out + t * channels;
        for (int64_t ch = 0; ch < channels; ++ch) {
            const float* w = taps + ch * kernel;
            float sum = 0.0f;
            for (int64_t k = 0; k < kernel; ++k) sum += w[k] * window[k * channels + ch];
            o[ch] = sum;
        }
    }
    // The newest K-1 inputs become the history of the next call.
    std::copy(ext + n * channels, ext + (n + keep) * channels, history);
}

// Reads s.xn (normed input) and leaves the conv block's output there (its residual add waits).
void short_conv_mixer(const MixerPass& p, const LayerWeights& L, int64_t layer) {
    const ModelConfig& c = p.c;
    ForwardScratch& s = p.st.scratch;
    const int64_t E = c.n_embd;
    grow(s.conv_in, p.n * E);
    grow(s.conv_out, p.n * E);
    grow(s.conv_ext, (c.conv_kernel - 1 + p.n) * E);
    matmul(p.pool, L.conv_in, s.xn.data(), p.n, s.proj.data(), 3 * E, s.mm);  // [n x 3E]
    for (int64_t t = 0; t < p.n; ++t) {
        const float* bcx = s.proj.data() + t * 3 * E;
        float* bx = s.conv_in.data() + t * E;  // [n x E] conv input B*x
        for (int64_t i = 0; i < E; ++i) bx[i] = bcx[i] * bcx[2 * E + i];
    }
    causal_conv(s.conv_in.data(), p.st.recurrent.conv(layer), L.conv_taps.data(), c.conv_kernel, E,
                p.n, s.conv_ext.data(), s.conv_out.data());
    for (int64_t t = 0; t < p.n; ++t) {
        const float* gate_c = s.proj.data() + t * 3 * E + E;
        float* y = s.conv_out.data() + t * E;
        for (int64_t i = 0; i < E; ++i) y[i] *= gate_c[i];
    }
    matmul(p.pool, L.conv_out, s.conv_out.data(), p.n, s.xn.data(), E, s.mm);
}

}  // namespace ember::cpu
