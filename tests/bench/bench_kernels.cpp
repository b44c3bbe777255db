// Kernel micro-benchmarks: per type x kernel level (scalar, avx2, avx512 where the CPU runs it)
//   dot/<type>/<level>        one row of 4096 elements against one activation row
//   matvec/<type>/<level>     1536 x 576 weights x 1 token (decode shape; cache resident)
//   matmul64/<type>/<level>   1536 x 576 weights x 64 tokens (prefill shape)
// (768 columns for the K-quants, whose rows are multiples of 256)
// on one thread, plus matvec/matmul64 of the active level on two threads; the types with a
// 16-row-panel kernel also as matvec_panels16 / matvec_dram_panels16 (WeightLayout::Panels16).
// Bytes/s counts weight bytes, items/s multiply-adds, so a regression in one kernel shows without a
// whole model. Filter with --benchmark_filter, e.g. 'matmul64/q4_K'.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/synth/membw.h"
#include "engine/tensor/cpu_features.h"
#include "engine/tensor/matmul.h"
#include "engine/tensor/panels16.h"
#include "engine/tensor/traits.h"
#include "engine/tensor/types.h"
#include "engine/util/thread_pool.h"
#include "tests/support/random_vectors.h"

namespace ember {
namespace {

const std::vector<TensorType>& bench_types() {
    static const std::vector<TensorType> types = {
        TensorType::F32,    TensorType::F16,  TensorType::BF16,   TensorType::Q8_0,
        TensorType::Q4_0,   TensorType::Q4_1, TensorType::Q5_0,   TensorType::Q5_1,
        TensorType::IQ4_NL, TensorType::Q2_K, TensorType::Q3_K,   TensorType::Q4_K,
        TensorType::Q5_K,   TensorType::Q6_K, TensorType::IQ4_XS, TensorType::IQ3_S,
        TensorType::MXFP4};
    return types;
}

// Random but valid weights: normal noise through the reference quantizer. Only the first 64
// rows are quantized and then repeated (the values do not change the speed; the reference
// quantizers are too slow for a few hundred MB).
std::vector<uint8_t> make_weights(TensorType t, int64_t rows, int64_t cols, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 0.05f);
    const size_t rb = row_bytes(type_info(t), cols);
    std::vector<uint8_t> w(rb * rows);
    std::vector<float> row(static_cast<size_t>(cols));
    const int64_t distinct = rows < 64 ? rows : 64;
    for (int64_t r = 0; r < distinct; ++r) {
        for (auto& v : row) v = nd(rng);
        scalar_kernels()[t].quantize_row(row.data(), w.data() + r * rb, cols);
    }
    for (int64_t r = distinct; r < rows; ++r) {
        std::memcpy(w.data() + r * rb, w.data() + (r % distinct) * rb, rb);
    }
    return w;
}

std::string lower_name(TensorType t) {
    return std::string(type_info(t).name);
}

void bench_dot(benchmark::State& state, const KernelTable* table, TensorType t) {
    const int64_t n = 4096;
    const auto w = make_weights(t, 1, n, 1);
    const auto x = test::normal_floats(n, 2);
    const TypeKernels& k = (*table)[t];
    std::vector<uint8_t> act(act_row_bytes(k.act_format, n));
    const void* a = x.data();
    if (k.act_format != ActFormat::F32) {
        table->quantize_act[static_cast<size_t>(k.act_format)](x.data(), act.data(), n);
        a = act.data();
    }
    for (auto _ : state) {
        benchmark::DoNotOptimize(k.dot(n, w.data(), a));
    }
    state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(w.size()));
    state.SetItemsProcessed(state.iterations() * n);
}

// The matrix in `layout`: Panels16 rewrites the row-layout bytes of w.
MatrixView layout_view(TensorType t, std::vector<uint8_t>& w, int64_t rows, int64_t cols,
                       WeightLayout layout) {
    MatrixView view{t, w.data(), rows, cols, row_bytes(type_info(t), static_cast<uint64_t>(cols))};
    if (layout == WeightLayout::Panels16) {
        const std::vector<uint8_t> rows_layout = w;
        write_panels16(rows_layout.data(), w.data(), rows, view.row_stride,
                       type_info(t).block_bytes, 1);
        view.layout = layout;
    }
    return view;
}

void bench_matmul(benchmark::State& state, const KernelTable* table, TensorType t, int64_t n_tokens,
                  int threads, WeightLayout layout = WeightLayout::Rows) {
    // 576 columns as in SmolLM2's projections; the K-quants need a multiple of 256.
    const int64_t rows = 1536, cols = type_info(t).block_elems == 256 ? 768 : 576;
    auto w = make_weights(t, rows, cols, 3);
    const auto x = test::normal_floats(n_tokens * cols, 4);
    std::vector<float> y(static_cast<size_t>(n_tokens * rows));
    const MatrixView view = layout_view(t, w, rows, cols, layout);
    ThreadPool pool(threads);
    MatmulScratch scratch;
    for (auto _ : state) {
        matmul(pool, view, x.data(), n_tokens, y.data(), rows, scratch, *table);
        benchmark::ClobberMemory();
    }
    state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(w.size()));
    state.SetItemsProcessed(state.iterations() * rows * cols * n_tokens);
}

// An integer from the environment, or `fallback` when the variable is unset.
int64_t env_or(const char* name, int64_t fallback) {
    const char* v = std::getenv(name);
    return v != nullptr ? std::atoll(v) : fallback;
}

// Decode from memory: a matrix of ~96 MB (past the L3) x 1 token, so weight bytes/s can be set
// against the read bandwidth printed at start-up (decode's roofline). The environment overrides
// the shape: EMBER_BENCH_DRAM_MB (machines with a larger L3), EMBER_BENCH_DRAM_COLS (a multiple
// of 256) and EMBER_BENCH_DRAM_TOKENS (tokens per call: a speculative check verifies up to 8).
void bench_matvec_dram(benchmark::State& state, const KernelTable* table, TensorType t, int threads,
                       WeightLayout layout = WeightLayout::Rows) {
    const int64_t cols = env_or("EMBER_BENCH_DRAM_COLS", 2304);
    const int64_t mb = env_or("EMBER_BENCH_DRAM_MB", 96);
    const int64_t n_tokens = env_or("EMBER_BENCH_DRAM_TOKENS", 1);
    const int64_t rows = (mb << 20) / static_cast<int64_t>(row_bytes(type_info(t), cols)) / 64 * 64;
    auto w = make_weights(t, rows, cols, 5);
    const auto x = test::normal_floats(n_tokens * cols, 6);
    std::vector<float> y(static_cast<size_t>(rows * n_tokens));
    const MatrixView view = layout_view(t, w, rows, cols, layout);
    ThreadPool pool(threads);
    MatmulScratch scratch;
    for (auto _ : state) {
        matmul(pool, view, x.data(), n_tokens, y.data(), rows, scratch, *table);
        benchmark::ClobberMemory();
    }
    state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(w.size()));
    state.SetItemsProcessed(state.iterations() * rows * cols);
}

}  // namespace
}  // namespace ember

int main(int argc, char** argv) {
    using namespace ember;
    std::vector<std::unique_ptr<KernelTable>> tables;
    for (KernelLevel l : {KernelLevel::Scalar, KernelLevel::Avx2, KernelLevel::Avx512}) {
        if (l <= max_kernel_level())
            tables.push_back(std::make_unique<KernelTable>(make_kernel_table(l)));
    }
    for (const auto& table : tables) {
        const KernelTable* tp = table.get();
        for (TensorType t : bench_types()) {
            const std::string suffix = lower_name(t) + "/" + tp->isa;
            benchmark::RegisterBenchmark(("dot/" + suffix).c_str(), bench_dot, tp, t);
            benchmark::RegisterBenchmark(("matvec/" + suffix).c_str(), bench_matmul, tp, t, 1, 1,
                                         WeightLayout::Rows)
                ->Unit(benchmark::kMicrosecond);
            benchmark::RegisterBenchmark(("matmul64/" + suffix).c_str(), bench_matmul, tp, t, 64, 1,
                                         WeightLayout::Rows)
                ->Unit(benchmark::kMicrosecond);
        }
    }
    const KernelTable* active = &active_kernels();
    for (TensorType t : bench_types()) {
        const std::string suffix = lower_name(t) + "/" + active->isa + "/2threads";
        benchmark::RegisterBenchmark(("matvec/" + suffix).c_str(), bench_matmul, active, t, 1, 2,
                                     WeightLayout::Rows)
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime();
        benchmark::RegisterBenchmark(("matmul64/" + suffix).c_str(), bench_matmul, active, t, 64, 2,
                                     WeightLayout::Rows)
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime();
    }
    for (TensorType t : bench_types()) {
        for (int threads : {1, 2}) {
            const std::string name = "matvec_dram/" + lower_name(t) + "/" + active->isa + "/" +
                                     std::to_string(threads) + "threads";
            benchmark::RegisterBenchmark(name.c_str(), bench_matvec_dram, active, t, threads,
                                         WeightLayout::Rows)
                ->Unit(benchmark::kMillisecond)
                ->UseRealTime();
        }
    }
    for (TensorType t : bench_types()) {
        if (active->types[static_cast<uint32_t>(t)].gemm_panels16 == nullptr) continue;
        const std::string suffix = lower_name(t) + "/" + active->isa;
        benchmark::RegisterBenchmark(("matvec_panels16/" + suffix).c_str(), bench_matmul, active, t,
                                     1, 1, WeightLayout::Panels16)
            ->Unit(benchmark::kMicrosecond);
        for (int threads : {1, 2}) {
            const std::string name =
                "matvec_dram_panels16/" + suffix + "/" + std::to_string(threads) + "threads";
            benchmark::RegisterBenchmark(name.c_str(), bench_matvec_dram, active, t, threads,
                                         WeightLayout::Panels16)
                ->Unit(benchmark::kMillisecond)
                ->UseRealTime();
        }
    }
    {
        ThreadPool pool(2);
        const BandwidthResult bw = measure_read_bandwidth(pool, uint64_t{1} << 30, 5);
        benchmark::AddCustomContext("read_bandwidth_2threads_gbs", std::to_string(bw.median_gbs));
    }
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
