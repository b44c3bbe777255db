// How many of a model's layers go to a GPU (gpu.h's place_model), as a pure function of sizes:
// a model larger than the card (or than --gpu-memory) runs its first layers there and the rest
// on the CPU, the residual stream crossing once per batch (forward.cpp).
//
// What sits where in a split of N layers (0 < N < n_layer): the embedding lookup runs with the
// first layer, on the GPU (its table is uploaded, `always`); layers [0, N) with their KV rows on
// the GPU; layers [N, n_layer), the output norm and the output product on the CPU, where the
// last layer runs (the output matrix, often the largest, is uploaded only when every layer is).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ember {

// Device bytes of the parts of a model (what place_model would upload and allocate).
struct GpuSizes {
    uint64_t always = 0;                // the embedding table, RoPE tables: with any GPU layer
    uint64_t output = 0;                // output norm and matrix: only with every layer
    std::vector<uint64_t> layer_bytes;  // [n_layer] each layer's weights
    std::vector<uint64_t> layer_kv;     // [n_layer] each layer's KV rows (0: none)
    uint64_t scratch = 0;               // batch buffers, attention records, cuBLAS workspace
    // [n_layer] the scratch of a split of l GPU layers at index l (index 0 unused), which
    // shrinks with its share of the model (cuda_backend.cuh's StateScratch); empty, or for the
    // whole model: `scratch`.
    std::vector<uint64_t> split_scratch;
};

struct GpuSplit {
    int64_t layers = 0;  // the first `layers` run on the GPU; 0: none (the CPU)
    int64_t n_layer = 0;
    uint64_t weight_bytes = 0;   // what goes to the GPU of GpuSizes' weights
    uint64_t kv_bytes = 0;       // the GPU layers' KV rows
    uint64_t scratch_bytes = 0;  // the scratch of this split (GpuSizes)
    uint64_t need_bytes = 0;     // weights + KV + scratch
    bool whole() const { return layers == n_layer; }
};

// The split of `layers` GPU layers (clamped to [0, n_layer]) and the bytes it needs.
GpuSplit gpu_split_of(const GpuSizes& sizes, int64_t layers);

// The most layers whose split needs at most `limit` bytes: every layer (with the output) when
// the whole model fits, else the longest prefix of layers that fits with the scratch; 0 when not
// even one layer does.
GpuSplit plan_gpu_split(const GpuSizes& sizes, uint64_t limit);

// A memory size for --gpu-memory: a number with an optional unit, B, KiB, MiB, GiB, TiB (also
// K/M/G/T, KB/MB/GB/TB as the binary units; fractions allowed: "6.5GiB"); nullopt for anything
// else, zero or past 2^63.
std::optional<uint64_t> parse_memory_size(std::string_view text);

// "5.1 GiB", "420 MiB": bytes for the one-line account of a split.
std::string format_memory_size(uint64_t bytes);

}  // namespace ember
