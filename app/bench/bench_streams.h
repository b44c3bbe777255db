// ember bench --streams N,...: the decode steps of N conversations at once (forward.h's
// decode_batch, what `ember serve` runs for N generating slots) against one conversation's
// one-token steps, in one run: tokens per second and the ratio (bench_streams.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "app/models/gpu_options.h"
#include "engine/model/kv_type.h"

namespace ember::app {

struct BenchStreamsArgs {
    std::string model;
    std::vector<int> streams;  // conversations per step, one level each
    int64_t prompt = 128;      // each conversation's prompt (random ids, its own seed)
    int64_t gen = 64;          // decode steps timed per level
    int reps = 3;              // levels in turn, `reps` times; medians reported
    int threads = 2;
    bool json_out = false;
    uint64_t seed = 1234;
    KvType kv_type = KvType::F16;
    std::string activations = "auto";  // --activations
    GpuOptions gpu;                    // --gpu
};

int run_bench_streams(const BenchStreamsArgs& args);

}  // namespace ember::app
