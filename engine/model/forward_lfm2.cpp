// lfm2: a stack of short gated convolutions and attention layers, each followed by a SwiGLU
// FFN; pre-norm residual blocks. The conv layer (per channel c, token t):
//   [B | C | x] = in_proj · norm(h)                    three [n_embd] gates
//   y[t] = C[t] * sum_k taps[c][k] * (B*x)[t - (K-1) + k]   causal, K = l_cache taps
//   h += out_proj · y
// Its state is the last K-1 values of B*x, carried across calls.
#include "engine/model/forward_hybrid.h"
#include "engine/model/model.h"
#include "engine/model/ops.h"
#include "engine/model/state.h"
#include "engine/util/thread_pool.h"

namespace ember::hybrid {

namespace {

// Reads s.xn (normed input), adds the conv block's output to s.x.
void short_conv_layer(const Batch& b, const LayerWeights& L, int64_t layer) {
    const ModelConfig& c = b.model->config();
    HybridScratch& s = scratch(b);
    const int64_t E = c.n_embd;
    matmul(*b.pool, L.conv_in, s.xn.data(), b.n, s.proj.data(), 3 * E, s.mm);  // [n x 3E]
    for (int64_t t = 0; t < b.n; ++t) {
        const float* bcx = s.proj.data() + t * 3 * E;
        float* bx = s.conv_in.data() + t * E;  // [n x E] conv input B*x
        for (int64_t i = 0; i < E; ++i) bx[i] = bcx[i] * bcx[2 * E + i];
    }
    causal_conv(s.conv_in.data(), b.st->recurrent.conv(layer), L.conv_taps.data(), c.conv_kernel, E,
                b.n, s.conv_ext.data(), s.conv_out.data());
    for (int64_t t = 0; t < b.n; ++t) {
        const float* gate_c = s.proj.data() + t * 3 * E + E;
        float* y = s.conv_out.data() + t * E;
        for (int64_t i = 0; i < E; ++i) y[i] *= gate_c[i];
    }
    matmul(*b.pool, L.conv_out, s.conv_out.data(), b.n, s.xn.data(), E, s.mm);
    add_inplace(s.x.data(), s.xn.data(), b.n * E);
}

}  // namespace

void lfm2_layers(const Batch& b) {
    const Model& model = *b.model;
    HybridScratch& s = scratch(b);
    for (int64_t l = 0; l < model.config().n_layer; ++l) {
        const LayerWeights& L = model.layers()[static_cast<size_t>(l)];
        norm_rows(b, s.x.data(), L.attn_norm, s.xn.data());
        if (L.kind == LayerKind::ShortConv) {
            short_conv_layer(b, L, l);
        } else {
            attention_layer(b, L, l);
        }
        ffn_layer(b, L);
    }
}

}  // namespace ember::hybrid
