// ember bench --spec ngram (bench_spec.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "app/models/gpu_options.h"
#include "engine/generate/generate.h"
#include "engine/model/state.h"

namespace ember::app {

struct BenchSpecArgs {
    std::string model;
    int64_t gen = 128;
    int threads = 2;
    int reps = 3;  // off and ngram runs of each prompt, alternating; medians reported
    bool json_out = false;
    KvType kv_type = KvType::F16;
    std::string activations = "auto";  // --activations
    GpuOptions gpu;                    // --gpu
    SpeculationOptions speculation;    // enabled is set per row
};

// Median of the values (0 for none); the benchmarks report medians of their repetitions.
double median(std::vector<double> values);

// `n` valid token ids from a fixed seed (splitmix64), so every rep and run sees the same prompt
// (cmd_bench.cpp).
std::vector<int32_t> random_prompt(int64_t n, int64_t n_vocab, uint64_t seed);

// Prints the rows; returns 1 when speculation changed any greedy output.
int run_bench_spec(const BenchSpecArgs& args);

}  // namespace ember::app
