// ember bench --json-schema FILE|JSON (or --grammar FILE): what constrained decoding costs per
// token (bench_grammar.cpp).
#pragma once

#include <cstdint>
#include <string>

#include "app/cli/output_format.h"
#include "app/models/gpu_options.h"

namespace ember::app {

struct BenchGrammarArgs {
    std::string model;
    OutputFormatFlags format;
    int64_t gen = 128;  // constrained tokens decoded per rep
    int threads = 2;
    int reps = 3;
    bool json_out = false;
    uint64_t seed = 1234;
    std::string kv_type = "f16";
    std::string activations = "auto";
    GpuOptions gpu;
};

// Decodes `gen` tokens through the grammar per rep (the default sampling chain: temperature
// 0.8, top-k 40, top-p 0.95, min-p 0.05), timing at every token the forward pass, the plain
// draw, the constrained draw on the same logits, and a whole-vocabulary mask (the worst case).
int run_bench_grammar(const BenchGrammarArgs& args);

}  // namespace ember::app
