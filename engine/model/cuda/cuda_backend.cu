// The layer blocks of backend.h on the GPU (cuda_backend.cuh).
#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "engine/model/cuda/cuda_backend.cuh"
#include "engine/model/cuda/cuda_check.cuh"
#include "engine/model/cuda/half_inputs.cuh"
#include "engine/model/cuda/qmma_gemm.cuh"
#include "engine/model/model.h"
#include "engine/tensor/types.h"

namespace ember::cuda {

namespace {

// Most f32 elements of a weight dequantized at once for cuBLAS (64 MiB): a matrix larger than
// that goes through in slices of rows, so the scratch stays a few percent of the weights.
constexpr int64_t kDequantizedCap = int64_t{16} << 20;

// EMBER_CUDA_GRAPHS=0 runs every decode step launch by launch (to compare, or to rule graphs
// out when looking for a fault).
bool graphs_enabled() {
    const char* env = std::getenv("EMBER_CUDA_GRAPHS");
    return env == nullptr || std::string_view(env) != "0";
}

// f16 elements of a weight dequantized at once for the tensor-core product: 16 MiB, so that
// the slice the product reads next is still in L2 (50 MiB on an H200) where the dequantization
// left it. EMBER_CUDA_SLICE_MIB sets another size (to measure the trade: larger slices make
// fewer, larger products).
int64_t half_slice_elements() {
    const char* env = std::getenv("EMBER_CUDA_SLICE_MIB");
    const int64_t mib = env ? std::clamp<int64_t>(std::atoll(env), 1, 1024) : 16;
    return (mib << 20) / static_cast<int64_t>(sizeof(__half));
}

// One conversation of a batched decode step: its host state and its share of the device.
struct Together {
    InferenceState* state = nullptr;
    CudaState* gpu = nullptr;
};

class CudaBackend final : public Backend {
public:
    CudaBackend(const CudaDevice& device, InferenceState& state, CudaState& gpu)
        : dev_(device), c_(device.model().config()), st_(state), gpu_(gpu) {}
    // A decode step of several conversations, token t of each batch in together[t]: the first
    // lends its batch buffers, stream and cuBLAS handle; each token's K/V rows and position are
    // its own conversation's (TokenRows).
    CudaBackend(const CudaDevice& device, std::vector<Together> together)
        : dev_(device),
          c_(device.model().config()),
          st_(*together.front().state),
          gpu_(*together.front().gpu),
          together_(std::move(together)) {}

    ~CudaBackend() override {
        if (mode_ == Mode::Capture) {  // a block threw mid-capture: drop what was captured
            cudaGraph_t graph = nullptr;
            cudaStreamEndCapture(stream(), &graph);
            if (graph) cudaGraphDestroy(graph);
            cudaGetLastError();
        }
    }

    BatchBuffers& begin_batch(int64_t pos0, int64_t n, int64_t logit_rows) override {
        if (!together_.empty()) return begin_together(n);
        pos0_ = pos0;
        n_ = n;
        st_.kv.reserve(pos0 + n);
        gpu_.prepare_forward();
        gpu_.rows_written(pos0, pos0 + n);
        // The pinned inputs may still be read by the last batch's copies.
        EMBER_CUDA_CHECK(cudaStreamSynchronize(stream()));
        gpu_.step_host()->pos0 = pos0;
        mode_ = Mode::Direct;
        if (n == 1 && logit_rows == 1 && graphs_enabled()) {
            mode_ = gpu_.decode_graph ? Mode::Replay : Mode::Capture;
            if (mode_ == Mode::Capture) {
                EMBER_CUDA_CHECK(
                    cudaStreamBeginCapture(stream(), cudaStreamCaptureModeThreadLocal));
            }
        }
        if (mode_ != Mode::Replay) {
            EMBER_CUDA_CHECK(cudaMemcpyAsync(gpu_.step_pos0_mut(), &gpu_.step_host()->pos0,
                                             sizeof(int64_t), cudaMemcpyHostToDevice, stream()));
        }
        return batch_buffers();
    }

    void embed(std::span<const int32_t> tokens, float* x) override {
        const auto n = static_cast<int64_t>(tokens.size());
        std::copy(tokens.begin(), tokens.end(), gpu_.step_host()->ids);
        if (batch_recorded()) return;  // the graph reads the ids from pinned memory
        int32_t* ids = gpu_.step_ids();
        EMBER_CUDA_CHECK(cudaMemcpyAsync(ids, gpu_.step_host()->ids, tokens.size_bytes(),
                                         cudaMemcpyHostToDevice, stream()));
        embed_rows(dev_.matrix(dev_.model().token_embd()), ids, n,
                   static_cast<float>(c_.embedding_scale), x, stream());
        check_launch("embed_rows");
    }

    void rms_norm_rows(const float* x, const std::vector<float>& weight, float* out,
                       int64_t rows) override {
        cuda::rms_norm_rows(x, dev_.vector(weight), out, rows, static_cast<int64_t>(weight.size()),
                            static_cast<float>(c_.rms_eps), stream());
    }

    void add(float* y, const float* x, int64_t n) override { cuda::add(y, x, n, stream()); }

    void add_rms_norm_rows(float* x, const float* delta, const std::vector<float>& weight,
                           float* out, int64_t rows) override {
        cuda::add_rms_norm_rows(x, delta, dev_.vector(weight), out, rows,
                                static_cast<int64_t>(weight.size()), static_cast<float>(c_.rms_eps),
                                stream());
    }

    void add_bias_rows(float* y, const std::vector<float>& bias, int64_t rows) override {
        cuda::add_bias_rows(y, dev_.vector(bias), rows, static_cast<int64_t>(bias.size()),
                            stream());
    }

    void matmul(const MatrixView& w, const float* x, int64_t n, float* out) override {
        const DeviceMatrix& m = dev_.matrix(w);
        if (n <= kGemvMaxTokens) {
            gemv(m, x, m.cols, n, out, m.rows, stream());
            check_launch("gemv");
        } else {
            gemm(m, x, n, out);
        }
    }

    void matmul_many(std::span<const MatmulOut> outs, const float* x, int64_t n) override {
        if (n > kGemvMaxTokens) {
            // The activations go to f16 once for every matrix that takes them so.
            bool all_half = true;
            for (const MatmulOut& o : outs) {
                const DeviceMatrix& m = dev_.matrix(*o.w);
                all_half = all_half && m.half_products && o.ldy == m.rows && half_fits(m, n);
            }
            if (all_half && !outs.empty()) {
                const int64_t cols = dev_.matrix(*outs[0].w).cols;
                prepare_half_inputs(x, n, cols);
                for (const MatmulOut& o : outs) gemm_half(dev_.matrix(*o.w), n, o.y);
                return;
            }
        }
        if (n > kGemvMaxTokens || outs.size() > static_cast<size_t>(kMaxGemvOuts)) {
            for (const MatmulOut& o : outs) matmul(*o.w, x, n, o.y);
            return;
        }
        GemvOut list[kMaxGemvOuts];
        for (size_t i = 0; i < outs.size(); ++i) {
            list[i] = GemvOut{dev_.matrix(*outs[i].w), outs[i].y, outs[i].ldy};
        }
        gemv_many(list, static_cast<int>(outs.size()), x, list[0].w.cols, n, stream());
        check_launch("gemv_many");
    }

    void gated_activation(GatedActivation act, float* gate, const float* up, int64_t n) override {
        switch (act) {
            case GatedActivation::Silu:
                return swiglu(gate, up, n, stream());
            case GatedActivation::GeluTanh:
                return gelu_tanh_gate(gate, up, n, stream());
        }
    }

    void gated_ffn_input(GatedActivation act, const MatrixView& w_gate, const MatrixView& w_up,
                         const float* x, int64_t n, float* gate, float* up) override {
        const DeviceMatrix& g = dev_.matrix(w_gate);
        const DeviceMatrix& u = dev_.matrix(w_up);
        if (n > kGemvGatedMaxTokens || !gemv_gated_supports(g, u)) {
            return Backend::gated_ffn_input(act, w_gate, w_up, x, n, gate, up);
        }
        gemv_gated(g, u, act, x, g.cols, n, gate, g.rows, stream());
        check_launch("gemv_gated");
    }

    void sigmoid_gate(float* x, const float* gate, int64_t n) override {
        cuda::sigmoid_gate(x, gate, n, stream());
    }

    void split_query_gate(const float* q_proj, float* q, float* gate, int64_t n) override {
        cuda::split_query_gate(q_proj, q, gate, n, c_.n_head, c_.head_dim, stream());
    }

    void prepare_and_store_heads(const HeadPrep& prep, float* q, float* k, float* v,
                                 int64_t n) override {
        const int64_t q_dim = c_.n_head * c_.head_dim;
        const int64_t k_dim = c_.n_head_kv * c_.head_dim;
        const int64_t v_dim = c_.n_head_kv * c_.value_dim;
        HeadBiases biases;  // added in norm_rope_heads' launch
        if (prep.q_bias) biases.q = device_of(prep.q_bias, q_dim);
        if (prep.k_bias) biases.k = device_of(prep.k_bias, k_dim);
        if (prep.v_bias) biases.v = device_of(prep.v_bias, v_dim);
        biases.v_rows = v;
        biases.value_dim = c_.value_dim;
        HeadShape shape;
        shape.n_head = c_.n_head;
        shape.n_head_kv = c_.n_head_kv;
        shape.head_dim = c_.head_dim;
        shape.rope_dims = c_.rope_dims;
        shape.rope_halves = c_.rope_layout == RopeLayout::Halves;
        shape.eps = static_cast<float>(c_.rms_eps);
        const bool local = prep.local_rope;
        // The K/V rows go to the cache in the same launch where the row layout allows it.
        const KvLayerView cache = gpu_.layer(prep.cache_layer);
        const bool fused = heads_store_kv(cache, c_.head_dim, c_.value_dim);
        const TokenRows rows = token_rows(prep.cache_layer);
        norm_rope_heads(shape, q, k, prep.q_norm ? device_of(prep.q_norm, c_.head_dim) : nullptr,
                        prep.k_norm ? device_of(prep.k_norm, c_.head_dim) : nullptr,
                        local ? dev_.rope_inv_freq_local() : dev_.rope_inv_freq(),
                        local ? 1.0 : c_.rope_freq_scale, gpu_.step_pos0(), n, stream(), rows,
                        biases, fused ? &cache : nullptr);
        if (!fused) cuda::store_kv(cache, k, v, gpu_.step_pos0(), n, stream(), rows);
    }

    void attend(const AttentionSettings& settings, const float* q, int64_t n, float* out) override {
        AttendShape shape;
        shape.n_head = c_.n_head;
        shape.n_head_kv = c_.n_head_kv;
        shape.head_dim = c_.head_dim;
        shape.value_dim = c_.value_dim;
        shape.window = settings.window;
        shape.scale = settings.scale;
        shape.softcap = settings.softcap;
        shape.sinks = settings.sinks ? device_of(settings.sinks, c_.n_head) : nullptr;
        shape.chunk = attention_chunk(n);
        if (n <= kExactBatchTokens) shape.merge_counters = gpu_.merge_counters.as<unsigned>();
        if (mode_ != Mode::Direct) {  // a captured step covers the whole context
            cuda::attend(shape, gpu_.layer(settings.cache_layer), q, gpu_.step_pos0(), n,
                         gpu_.decode_chunks, gpu_.decode_partials.as<float>(), out, stream());
            return;
        }
        const int64_t chunks = chunks_through(pos0_ + n - 1, shape.chunk);
        gpu_.partials.grow(static_cast<size_t>(attention_partials_floats(shape, n, chunks)) *
                           sizeof(float));
        cuda::attend(shape, gpu_.layer(settings.cache_layer), q, gpu_.step_pos0(), n, chunks,
                     gpu_.partials.as<float>(), out, stream(), token_rows(settings.cache_layer));
    }

    // x += moe(xn), xn normed already (moe_kernels.cuh): router, routing, the chosen experts'
    // products and their weighted sum, all on the device (a captured decode step replays it).
    void moe_ffn(const LayerWeights& layer, float* x, float* xn, int64_t n) override {
        const MoeLayer l = moe_layer(dev_, layer);
        MoeBuffers& b = gpu_.moe;
        // The router in gemv's batches: its logits are then the same bits for a token alone or
        // in any batch, so the expert choices are too.
        if (on_tensor_cores(l.router)) {
            for (int64_t t0 = 0; t0 < n; t0 += kGemvMaxTokens) {
                gemv(l.router, xn + t0 * c_.n_embd, c_.n_embd, std::min(kGemvMaxTokens, n - t0),
                     b.router + t0 * c_.n_expert, c_.n_expert, stream());
            }
        } else {
            gemv_chunks(l.router, xn, c_.n_embd, n, b.router, c_.n_expert, stream());
        }
        check_launch("gemv (router)");
        moe_route(l, b.router, n, b.chosen, b.weight, stream());
        if (n > kGemvMaxTokens) return moe_prefill(l, x, xn, n);
        moe_expert_ffn(l, xn, b.chosen, n, b.up, b.hidden, stream());
        moe_expert_down_combine(l, b.hidden, b.chosen, b.weight, n, x, stream());
    }

    // lfm2's gated short convolution (cpu/short_conv.cpp): [B | C | x] = in_proj · xn,
    // y = C * conv(B * x), xn = out_proj · y (its residual add waits for the next norm).
    void short_conv_mixer(const LayerWeights& L, int64_t index, int64_t n) override {
        const int64_t E = c_.n_embd;
        const MixerBuffers& m = gpu_.mixer;
        matmul(L.conv_in, buffers_.xn, n, m.proj);  // [n x 3E]
        conv_input_product(m.proj, n, E, m.conv_in, stream());
        causal_conv(layer_conv(L, index, m.conv_in, E, false), n, m.conv_out, stream());
        multiply_by_gate(m.conv_out, E, m.proj + E, 3 * E, n, stream());
        matmul(L.conv_out, m.conv_out, n, buffers_.xn);
    }

    // qwen35's GatedDeltaNet (cpu/delta_net.cpp): the projections, the conv with silu, the
    // normalized heads and gates, the delta rule over the layer's state, the gated norm and
    // the out-projection into xn (its residual add waits for the next norm).
    void delta_net_mixer(const LayerWeights& L, int64_t index, int64_t n) override {
        DeltaShape shape;
        shape.n_k_heads = c_.ssm_n_k_heads;
        shape.n_v_heads = c_.ssm_n_v_heads;
        shape.k_dim = c_.ssm_k_dim;
        shape.v_dim = c_.ssm_v_dim;
        const int64_t channels = shape.channels();
        const int64_t inner = shape.n_v_heads * shape.v_dim;
        const MixerBuffers& m = gpu_.mixer;
        const MatmulOut proj[] = {{&L.ssm_qkv, m.proj, channels},
                                  {&L.ssm_z, m.z, inner},
                                  {&L.ssm_alpha, m.decay, shape.n_v_heads},
                                  {&L.ssm_beta, m.beta, shape.n_v_heads}};
        matmul_many(proj, buffers_.xn, n);
        causal_conv(layer_conv(L, index, m.proj, channels, true), n, m.conv_out, stream());
        delta_prepare(shape, m.conv_out, m.decay, m.beta, dev_.vector(L.ssm_a),
                      dev_.vector(L.ssm_dt_bias), n, stream());
        delta_rule(shape, m.conv_out, m.decay, m.beta, gpu_.recurrent_delta(index), m.core, n,
                   stream());
        gated_rms_norm(m.core, m.z, dev_.vector(L.ssm_norm), n * shape.n_v_heads, shape.v_dim,
                       static_cast<float>(c_.rms_eps), stream());
        matmul(L.ssm_out, m.core, n, buffers_.xn);
    }

    void soft_cap(float* x, int64_t n, float cap) override { cuda::soft_cap(x, n, cap, stream()); }

    bool batch_recorded() const override { return mode_ == Mode::Replay; }

    float* host_logits(int64_t floats) override { return gpu_.host_logits(floats); }

    float* logits_buffer(float*, int64_t rows) override {
        if (mode_ != Mode::Direct) return gpu_.decode_logits.as<float>();
        gpu_.logits.grow(static_cast<size_t>(rows * c_.n_vocab) * sizeof(float));
        return gpu_.logits.as<float>();
    }

    void publish_logits(const float* logits, float* host_out, int64_t count) override {
        if (mode_ == Mode::Capture) {
            cudaGraph_t graph = nullptr;
            mode_ = Mode::Direct;  // the capture ends here, whatever happens next
            EMBER_CUDA_CHECK(cudaStreamEndCapture(stream(), &graph));
            const cudaError_t made = cudaGraphInstantiate(&gpu_.decode_graph, graph, 0);
            cudaGraphDestroy(graph);
            EMBER_CUDA_CHECK(made);
            mode_ = Mode::Replay;
        }
        if (mode_ == Mode::Replay) EMBER_CUDA_CHECK(cudaGraphLaunch(gpu_.decode_graph, stream()));
        EMBER_CUDA_CHECK(cudaMemcpyAsync(host_out, logits,
                                         static_cast<size_t>(count) * sizeof(float),
                                         cudaMemcpyDeviceToHost, stream()));
        EMBER_CUDA_CHECK(cudaStreamSynchronize(stream()));
    }

    // The captured decode step of a split model ends with its last GPU layer: the graph is made
    // (or replayed) here and the residual stream copied out, as the logits of a whole one.
    void hand_over(const float* x, float* host_x, int64_t count) override {
        publish_logits(x, host_x, count);
    }

private:
    // begin_batch of a decode step of several conversations (together_): each takes its next
    // position, its device rows are brought up to date, and the table of the tokens' positions
    // and K/V rows (TokenRows) goes to the device. Launch by launch: no captured graph.
    BatchBuffers& begin_together(int64_t n) {
        if (n != static_cast<int64_t>(together_.size())) {
            throw std::logic_error("a batched decode step takes one token per conversation");
        }
        const int64_t layers = gpu_.cache_layers();
        // [positions: n][K rows: layers x n][V rows: layers x n], 8 bytes each.
        std::vector<int64_t> table(static_cast<size_t>(n * (1 + 2 * layers)));
        int64_t latest = 0;
        for (int64_t t = 0; t < n; ++t) {
            const Together& one = together_[static_cast<size_t>(t)];
            const int64_t position = one.state->kv.length();
            one.state->kv.reserve(position + 1);
            one.gpu->prepare_forward();
            one.gpu->rows_written(position, position + 1);
            // Its own stream may still be copying rows the step reads.
            EMBER_CUDA_CHECK(cudaStreamSynchronize(one.gpu->stream()));
            table[static_cast<size_t>(t)] = position;
            latest = std::max(latest, position);
            for (int64_t l = 0; l < layers; ++l) {
                const KvLayerView view = one.gpu->layer(l);
                table[static_cast<size_t>(n + l * n + t)] = reinterpret_cast<int64_t>(view.k);
                table[static_cast<size_t>(n + (layers + l) * n + t)] =
                    reinterpret_cast<int64_t>(view.v);
            }
        }
        EMBER_CUDA_CHECK(cudaStreamSynchronize(stream()));  // the pinned inputs are free
        gpu_.together_rows.grow(table.size() * sizeof(int64_t));
        EMBER_CUDA_CHECK(cudaMemcpyAsync(gpu_.together_rows.get(), table.data(),
                                         table.size() * sizeof(int64_t), cudaMemcpyHostToDevice,
                                         stream()));
        pos0_ = latest;  // attend() covers the chunks through the latest position
        n_ = 1;
        mode_ = Mode::Direct;
        return batch_buffers();
    }

    // The state's batch buffers, as begin_batch hands them to the layers.
    BatchBuffers& batch_buffers() {
        buffers_ = BatchBuffers{gpu_.x.as<float>(),        gpu_.xn.as<float>(),
                                gpu_.q.as<float>(),        gpu_.k.as<float>(),
                                gpu_.v.as<float>(),        gpu_.attn.as<float>(),
                                gpu_.q_proj.as<float>(),   gpu_.q_gate.as<float>(),
                                gpu_.ffn_gate.as<float>(), gpu_.ffn_up.as<float>()};
        return buffers_;
    }

    // The tokens' rows of cache layer `cache_layer` in a batch of several conversations;
    // none (one conversation) otherwise.
    TokenRows token_rows(int64_t cache_layer) const {
        if (together_.empty()) return {};
        const auto n = static_cast<int64_t>(together_.size());
        const int64_t layers = gpu_.cache_layers();
        const auto* table = gpu_.together_rows.as<int64_t>();
        TokenRows rows;
        rows.positions = table;
        rows.k = reinterpret_cast<uint8_t* const*>(table + n + cache_layer * n);
        rows.v = reinterpret_cast<uint8_t* const*>(table + n + (layers + cache_layer) * n);
        return rows;
    }

    // Direct: each block launches its kernels. Capture: they are recorded into the state's
    // decode graph (launched at publish_logits). Replay: the graph holds them, so forward()
    // calls no block (batch_recorded); begin_batch and embed leave the step's inputs in pinned
    // memory, which the graph reads.
    enum class Mode { Direct, Capture, Replay };

    cudaStream_t stream() const { return gpu_.stream(); }

    // HeadPrep and AttentionSettings carry the host vectors' data pointers.
    const float* device_of(const float* host, int64_t /*size*/) const {
        // The vectors are uploaded whole; a view of one is found by its data pointer.
        return dev_.vector_at(host);
    }

    // The experts of a batch over kGemvMaxTokens tokens (routed already: gpu_.moe.chosen): the
    // (token, slot) pairs grouped by expert (tokens ascending within one), each chosen expert's
    // gate, up and down once over its rows, and the weighted sum as the short batches'
    // moe_combine. Through the grouped quantized kernel, the grouping stays on the device
    // (moe_group_pairs); else on the host, for gemm() (cuBLAS on each dequantized expert slice).
    void moe_prefill(const MoeLayer& l, float* x, const float* xn, int64_t n) {
        MoeBuffers& b = gpu_.moe;
        const int64_t pairs = n * l.n_used;
        // Expert e's rows [start[e], start[e+1]) of each sorted buffer.
        const auto expert = [&](const DeviceMatrix& stacked, int64_t e) {
            DeviceMatrix m = stacked;
            m.rows = stacked.rows / l.n_expert;
            m.data = static_cast<const uint8_t*>(stacked.data) +
                     static_cast<size_t>(e * m.rows) * stacked.row_stride;
            return m;
        };
        if (dev_.qmma_max_tokens() > 0 && groups_on_tensor_cores(l, expert)) {
            const int slots = moe_tile_slots(l, n);
            if (slots > b.max_tiles) throw std::logic_error("MoE: more tiles than sized");
            moe_group_pairs(l, b.chosen, n, b.order, b.position, b.tiles, stream());
            // The tokens' rows once (for up and gate), each sorted pair reading its token's: the
            // scale is that of the gathered rows (the same rows, each n_used times), the bits too.
            rows_to_half(xn, n, l.n_embd);
            const SortedRows by_token{b.order, static_cast<int32_t>(l.n_used)};
            grouped_product(l.up, l.n_expert, b.up, slots, by_token);
            grouped_product(l.gate, l.n_expert, b.hidden, slots, by_token);
            moe_sorted_activation(l, b.hidden, b.up, b.order, b.chosen, pairs, stream());
            rows_to_half(b.hidden, pairs, l.n_ff);
            grouped_product(l.down, l.n_expert, b.down, slots, SortedRows{});
            moe_combine(l, b.down, b.position, b.chosen, b.weight, n, x, stream());
            return;
        }
        const std::vector<int64_t> start = group_on_host(l, pairs);
        moe_gather(xn, b.order, l.n_used, pairs, l.n_embd, b.xg, stream());
        for (int64_t e = 0; e < l.n_expert; ++e) {
            const int64_t m = start[e + 1] - start[e];
            if (m == 0) continue;
            const float* in = b.xg + start[e] * l.n_embd;
            gemm(expert(l.up, e), in, m, b.up + start[e] * l.n_ff);
            gemm(expert(l.gate, e), in, m, b.hidden + start[e] * l.n_ff);
        }
        moe_sorted_activation(l, b.hidden, b.up, b.order, b.chosen, pairs, stream());
        for (int64_t e = 0; e < l.n_expert; ++e) {
            const int64_t m = start[e + 1] - start[e];
            if (m == 0) continue;
            gemm(expert(l.down, e), b.hidden + start[e] * l.n_ff, m, b.down + start[e] * l.n_embd);
        }
        moe_combine(l, b.down, b.position, b.chosen, b.weight, n, x, stream());
    }

    // The pairs grouped by expert on the host (counting sort, pairs ascending within an
    // expert), after a wait for the routing: order and position uploaded to the MoE buffers;
    // returns each expert's first row, start[n_expert] = pairs.
    std::vector<int64_t> group_on_host(const MoeLayer& l, int64_t pairs) {
        MoeBuffers& b = gpu_.moe;
        int32_t* chosen = b.host;           // [pairs]
        int32_t* order = b.host + pairs;    // [pairs] pair of each sorted row
        int32_t* position = order + pairs;  // [pairs] sorted row of each pair
        EMBER_CUDA_CHECK(cudaMemcpyAsync(chosen, b.chosen, pairs * sizeof(int32_t),
                                         cudaMemcpyDeviceToHost, stream()));
        EMBER_CUDA_CHECK(cudaStreamSynchronize(stream()));
        std::vector<int64_t> start(l.n_expert + 1, 0);  // [n_expert + 1] first row of each
        for (int64_t p = 0; p < pairs; ++p) ++start[chosen[p] + 1];
        for (int64_t e = 0; e < l.n_expert; ++e) start[e + 1] += start[e];
        std::vector<int64_t> fill(start.begin(), start.end() - 1);
        for (int64_t p = 0; p < pairs; ++p) {
            const int64_t row = fill[chosen[p]]++;
            order[row] = static_cast<int32_t>(p);
            position[p] = static_cast<int32_t>(row);
        }
        EMBER_CUDA_CHECK(cudaMemcpyAsync(b.order, order, pairs * sizeof(int32_t),
                                         cudaMemcpyHostToDevice, stream()));
        EMBER_CUDA_CHECK(cudaMemcpyAsync(b.position, position, pairs * sizeof(int32_t),
                                         cudaMemcpyHostToDevice, stream()));
        return start;
    }

    // Whether a MoE layer's three products go through the grouped quantized kernel: every
    // expert matrix one it reads and inside f16's range.
    template <class ExpertOf>
    static bool groups_on_tensor_cores(const MoeLayer& l, const ExpertOf& expert) {
        for (const DeviceMatrix* stacked : {&l.gate, &l.up, &l.down}) {
            if (!stacked->half_products || !qmma_grouped_supports(expert(*stacked, 0)))
                return false;
        }
        return true;
    }

    // Rows `in` [rows x cols] to f16 in the MoE buffers, scaled by one power of two for all of
    // them (half_inputs.cuh).
    void rows_to_half(const float* in, int64_t rows, int64_t cols) {
        MoeBuffers& b = gpu_.moe;
        to_scaled_half(in, rows, cols, cols, b.half_rows, b.half_scale + 1, b.half_scale, stream());
    }

    // Where a grouped product's sorted row t finds its activations: row order[t] / divisor of
    // the f16 rows (order null: row t).
    struct SortedRows {
        const int32_t* order = nullptr;
        int32_t divisor = 1;
    };

    // out [rows x stacked's expert rows] = the sorted rows (rows_to_half's, as `rows` finds
    // them) through their experts (the tiles of moe_group_pairs).
    void grouped_product(const DeviceMatrix& stacked, int64_t n_expert, float* out, int n_tiles,
                         const SortedRows& rows) {
        MoeBuffers& b = gpu_.moe;
        DeviceMatrix expert0 = stacked;
        expert0.rows = stacked.rows / n_expert;
        const QmmaOperands op{.x = b.half_rows,
                              .ldx = stacked.cols,
                              .x_rows = rows.order,
                              .x_row_divisor = rows.divisor,
                              .y = out,
                              .ldy = expert0.rows,
                              .alpha = b.half_scale};
        qmma_gemm_grouped(expert0, static_cast<size_t>(expert0.rows) * stacked.row_stride, op,
                          b.tiles, n_tiles, stream());
        check_launch("qmma_gemm_grouped");
    }

    // The causal conv of mixer layer `index` over `in` [n x channels], its history in the
    // device's recurrent state.
    CausalConv layer_conv(const LayerWeights& L, int64_t index, const float* in, int64_t channels,
                          bool silu) const {
        CausalConv conv;
        conv.in = in;
        conv.in_stride = channels;
        conv.history = gpu_.recurrent_conv(index);
        conv.taps = dev_.vector(L.conv_taps);
        conv.kernel = c_.conv_kernel;
        conv.channels = channels;
        conv.silu = silu;
        return conv;
    }

    // A state without cuBLAS (a split's: StateScratch): the product kExactBatchTokens tokens at
    // a time through gemv, which reads the matrix in place.
    void gemm_by_gemv(const DeviceMatrix& w, const float* x, int64_t n, float* out) {
        if (!gemv_supports(w.type)) {
            throw std::runtime_error("CUDA: a split model's product of " + std::to_string(n) +
                                     " tokens over a " + std::string(type_info(w.type).name) +
                                     " matrix has no kernel here (gemv does not read it)");
        }
        if (on_tensor_cores(w)) {
            for (int64_t t0 = 0; t0 < n; t0 += kGemvMaxTokens) {
                gemv(w, x + t0 * w.cols, w.cols, std::min(kGemvMaxTokens, n - t0),
                     out + t0 * w.rows, w.rows, stream());
            }
        } else {
            gemv_chunks(w, x, w.cols, n, out, w.rows, stream());
        }
        check_launch("gemv (batch)");
    }

    // Whether the batch's activations fit the f16 scratch for this matrix's width.
    bool half_fits(const DeviceMatrix& w, int64_t n) const {
        return static_cast<size_t>(n * w.cols) * sizeof(__half) <= gpu_.half_x.bytes() &&
               static_cast<size_t>(n + 2) * sizeof(float) <= gpu_.half_scale.bytes();
    }

    // half_x [n x cols] = x * 2^e in f16; half_scale = {0.0f, 2^-e, row maxima [n]}
    // (half_inputs.cuh). The zero is never written after the state's memset.
    void prepare_half_inputs(const float* x, int64_t n, int64_t cols) {
        float* scale = gpu_.half_scale.as<float>();
        to_scaled_half(x, n, cols, cols, gpu_.half_x.as<__half>(), scale + 2, scale + 1, stream());
    }

    // out [n x w.rows] = half_x [n x w.cols] · w^T * 2^-e on the tensor cores: the weight
    // dequantized to f16 in slices of rows, f32 sums (cuBLAS HGEMM with f32 compute). The
    // rounding of the inputs is TF32's (10 mantissa bits); the product reads half the bytes
    // and runs at twice TF32's rate.
    void gemm_half(const DeviceMatrix& w, int64_t n, float* out) {
        const float* scale = gpu_.half_scale.as<float>();
        const float* beta = scale;       // 0.0f
        const float* alpha = scale + 1;  // 2^-e, written by prepare_half_inputs
        if (qmma_supports(w) && n <= dev_.qmma_max_tokens()) {
            // At least what the device reserved for every batch this path takes (so that a
            // server's next prompt does not reallocate it).
            const int64_t scratch =
                std::max(qmma_scratch_floats(w, n, dev_.sm_count()), dev_.qmma_scratch_floats());
            gpu_.dequantized.grow(static_cast<size_t>(scratch) * sizeof(float));
            const QmmaOperands op{.x = gpu_.half_x.as<__half>(),
                                  .ldx = w.cols,
                                  .y = out,
                                  .ldy = w.rows,
                                  .alpha = alpha};
            qmma_gemm(w, op, n, gpu_.dequantized.as<float>(), dev_.sm_count(), stream());
            check_launch("qmma_gemm");
            return;
        }
        // Whole multiples of 64 rows: each slice's output then starts 256-byte aligned, as
        // cuBLAS's fast kernels need (a slice of 1,365 rows sent it to an align-1 kernel 5x
        // slower).
        const int64_t slice =
            std::min(w.rows, std::max<int64_t>(64, half_slice_elements_ / w.cols / 64 * 64));
        gpu_.dequantized.grow(static_cast<size_t>(slice * w.cols) * sizeof(__half));
        EMBER_CUBLAS_CHECK(
            gpu_.blas_library().set_pointer_mode(gpu_.blas(), CUBLAS_POINTER_MODE_DEVICE));
        for (int64_t row0 = 0; row0 < w.rows; row0 += slice) {
            const int64_t rows = std::min(slice, w.rows - row0);
            dequantize_rows_half(w, row0, rows, gpu_.dequantized.as<__half>(), stream());
            check_launch("dequantize_rows_half");
            EMBER_CUBLAS_CHECK(gpu_.blas_library().gemm_ex(
                gpu_.blas(), CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(rows), static_cast<int>(n),
                static_cast<int>(w.cols), alpha, gpu_.dequantized.get(), CUDA_R_16F,
                static_cast<int>(w.cols), gpu_.half_x.get(), CUDA_R_16F, static_cast<int>(w.cols),
                beta, out + row0, CUDA_R_32F, static_cast<int>(w.rows), CUBLAS_COMPUTE_32F,
                CUBLAS_GEMM_DEFAULT));
        }
        EMBER_CUBLAS_CHECK(
            gpu_.blas_library().set_pointer_mode(gpu_.blas(), CUBLAS_POINTER_MODE_HOST));
    }

    // out [n x w.rows] = x [n x w.cols] · w^T through cuBLAS. Quantized weights in range go
    // through gemm_half. Otherwise the weight is dequantized to f32 in slices of rows: float
    // weights keep f32 arithmetic (the fixtures' 2e-3 of float64); quantized ones use TF32,
    // whose rounding is far below the quantization's own.
    void gemm(const DeviceMatrix& w, const float* x, int64_t n, float* out) {
        if (gpu_.blas() == nullptr) return gemm_by_gemv(w, x, n, out);
        if (w.half_products && half_fits(w, n)) {
            prepare_half_inputs(x, n, w.cols);
            return gemm_half(w, n, out);
        }
        const float alpha = 1.0f;
        const float beta = 0.0f;
        const cublasComputeType_t compute =
            is_float_type(w.type) ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32F_FAST_TF32;
        const int64_t slice = std::clamp<int64_t>(kDequantizedCap / w.cols, 1, w.rows);
        const bool direct = w.type == TensorType::F32 &&
                            w.row_stride == static_cast<size_t>(w.cols) * sizeof(float);
        if (!direct) gpu_.dequantized.grow(static_cast<size_t>(slice * w.cols) * sizeof(float));
        for (int64_t row0 = 0; row0 < w.rows; row0 += slice) {
            const int64_t rows = std::min(slice, w.rows - row0);
            const float* a = direct ? static_cast<const float*>(w.data) + row0 * w.cols
                                    : gpu_.dequantized.as<float>();
            if (!direct) {
                dequantize_rows(w, row0, rows, gpu_.dequantized.as<float>(), stream());
                check_launch("dequantize_rows");
            }
            // Column-major view: C [rows x n] = A^T [rows x cols] · B [cols x n].
            EMBER_CUBLAS_CHECK(gpu_.blas_library().gemm_ex(
                gpu_.blas(), CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(rows), static_cast<int>(n),
                static_cast<int>(w.cols), &alpha, a, CUDA_R_32F, static_cast<int>(w.cols), x,
                CUDA_R_32F, static_cast<int>(w.cols), &beta, out + row0, CUDA_R_32F,
                static_cast<int>(w.rows), compute, CUBLAS_GEMM_DEFAULT));
        }
    }

    const CudaDevice& dev_;
    const ModelConfig& c_;
    InferenceState& st_;
    CudaState& gpu_;
    BatchBuffers buffers_;
    int64_t pos0_ = 0;
    int64_t n_ = 0;
    Mode mode_ = Mode::Direct;
    int64_t half_slice_elements_ = half_slice_elements();
    std::vector<Together> together_;  // a batched decode step's conversations, or empty
};

}  // namespace

CudaState& CudaDevice::state_of(InferenceState& state) {
    EMBER_CUDA_CHECK(cudaSetDevice(device_));
    auto* gpu = dynamic_cast<CudaState*>(state.device.get());
    if (!gpu) {
        auto created = std::make_unique<CudaState>(*this, state);
        gpu = created.get();
        state.device = std::move(created);
    }
    return *gpu;
}

std::unique_ptr<Backend> CudaDevice::make_backend(InferenceState& state) {
    return std::make_unique<CudaBackend>(*this, state, state_of(state));
}

std::unique_ptr<Backend> CudaDevice::make_batch_backend(std::span<InferenceState* const> states) {
    const ModelConfig& c = model_.config();
    const auto n = static_cast<int64_t>(states.size());
    // A hybrid's recurrent state is per conversation in every mixer (not batched here); a split
    // model's CPU layers run one conversation at a time.
    if (n < 2 || n > kExactBatchTokens || is_hybrid(c.family) || layers_ < c.n_layer) {
        return nullptr;
    }
    std::vector<Together> together;
    together.reserve(states.size());
    for (InferenceState* state : states) together.push_back({state, &state_of(*state)});
    // The kernels take the layout of a layer's rows from the first conversation's view.
    const CudaState& first = *together.front().gpu;
    for (const Together& one : together) {
        for (int64_t l = 0; l < first.cache_layers(); ++l) {
            const KvLayerView a = first.layer(l);
            const KvLayerView b = one.gpu->layer(l);
            const bool same = a.type == b.type && a.ring == b.ring && a.k_width == b.k_width &&
                              a.v_width == b.v_width && (!a.ring || a.slots == b.slots);
            if (!same) return nullptr;
        }
    }
    return std::make_unique<CudaBackend>(*this, std::move(together));
}

}  // namespace ember::cuda
