// KV-cache writes and attention of the CUDA backend (layer_kernels.cuh).
//
// Attention is split like the CPU's (cpu/attention.h): a query's visible positions are cut into
// chunks of positions (AttendShape::chunk) that start at multiples of it, one block per (chunk,
// head, token) computes a partial softmax record, and the head's records are merged in chunk
// order (with the head's sink logit): by the last block to write one (short batches, a counter
// per head: AttendShape::merge_counters) or by a kernel of its own. The cut depends only on the
// query's position, so a token gives the same bits in any batch, and nothing is summed by
// atomics (the counter only says which block merges).
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

#include "engine/model/cuda/cuda_check.cuh"
#include "engine/model/cuda/flash_attention.cuh"
#include "engine/model/cuda/kv_rows.cuh"
#include "engine/model/cuda/launch.cuh"
#include "engine/model/cuda/layer_kernels.cuh"
#include "engine/model/cuda/reduce.cuh"
#include "engine/model/forward.h"

namespace ember::cuda {

namespace {

// Warps of a partial block, each taking every 16th position of a 64-position record: four
// positions a warp, all of their loads in flight at once (with 8 warps a decode step at a
// short context had a warp or two per SM, each folding 8 positions one after another).
constexpr int kWarps = 16;
constexpr int kUnroll = 4;      // positions a warp has in flight
constexpr int kMaxPerLane = 8;  // head or value elements a lane holds: dims up to 256
constexpr int kMaxValueDim = 32 * kMaxPerLane;

// Elements base + P*lane .. + P-1 of a cached row (those at or past `width` read as 0; all of
// them 0 when !inside): one 4- to 16-byte load for f16 and f32 rows where the slice is whole
// and aligned, element by element otherwise (and for q8_0's 34-byte blocks).
template <KvType T, int P>
__device__ inline void load_slice(const uint8_t* row, int64_t base, int64_t width, unsigned lane,
                                  bool inside, float (&out)[P]) {
    const int64_t d0 = static_cast<int64_t>(P) * lane;
    constexpr int kElementBytes = T == KvType::F32 ? 4 : 2;
    const uint8_t* p = row + (base + d0) * kElementBytes;
    const bool vector =
        T != KvType::Q8_0 && (P == 2 || P == 4 || P == 8) && d0 + P <= width &&
        reinterpret_cast<uintptr_t>(p) % (P * kElementBytes > 16 ? 16 : P * kElementBytes) == 0;
    if (inside && vector) {
        if constexpr (T == KvType::F16 && P >= 2) {
            __half2 h[P / 2];
            if constexpr (P == 2) {
                *reinterpret_cast<uint32_t*>(h) = __ldg(reinterpret_cast<const unsigned*>(p));
            } else if constexpr (P == 4) {
                *reinterpret_cast<uint2*>(h) = __ldg(reinterpret_cast<const uint2*>(p));
            } else {
                *reinterpret_cast<uint4*>(h) = __ldg(reinterpret_cast<const uint4*>(p));
            }
#pragma unroll
            for (int j = 0; j < P / 2; ++j) {
                const float2 f = __half22float2(h[j]);
                out[2 * j] = f.x;
                out[2 * j + 1] = f.y;
            }
            return;
        } else if constexpr (T == KvType::F32 && P >= 2) {
            const auto* f = reinterpret_cast<const float*>(p);
            if constexpr (P == 2) {
                const float2 v = __ldg(reinterpret_cast<const float2*>(f));
                out[0] = v.x;
                out[1] = v.y;
            } else {
#pragma unroll
                for (int j = 0; j < P / 4; ++j) {
                    const float4 v = __ldg(reinterpret_cast<const float4*>(f) + j);
                    out[4 * j] = v.x;
                    out[4 * j + 1] = v.y;
                    out[4 * j + 2] = v.z;
                    out[4 * j + 3] = v.w;
                }
            }
            return;
        }
    }
#pragma unroll
    for (int j = 0; j < P; ++j) {
        out[j] = inside && d0 + j < width ? row_element<T>(row, base + d0 + j) : 0.0f;
    }
}

// Block (token, K or V): converts one row (store_row_elements). Where the heads' launch does not
// write the rows itself (norm_rope_heads with a cache).
__global__ void store_kv_kernel(KvLayerView layer, int64_t k_row_bytes, int64_t v_row_bytes,
                                const float* k, const float* v, const int64_t* pos0_at,
                                TokenRows tokens) {
    await_previous_grid();
    const int64_t t = blockIdx.x;
    const bool is_v = blockIdx.y == 1;
    const int64_t width = is_v ? layer.v_width : layer.k_width;
    const int64_t row_bytes = is_v ? v_row_bytes : k_row_bytes;
    const float* src = (is_v ? v : k) + t * width;  // [width]
    uint8_t* dst = rows_of(layer, tokens, t, is_v) +
                   slot_of(layer, position_of(pos0_at, tokens, t)) * row_bytes;
    store_row_elements(layer.type, dst, 0, src, width, width);
}

struct Visible {
    int64_t first = 0;  // first visible position
    int64_t last = 0;   // the query's own position
};

__device__ inline Visible visible_of(int64_t position, int64_t window) {
    const int64_t first = window > 0 && position - window + 1 > 0 ? position - window + 1 : 0;
    return {first, position};
}

// Record layout: [m, s, acc[value_dim]] per (token, head, chunk).
template <class Floats>  // float* or const float*
__device__ inline Floats record_of(Floats partials, const AttendShape& shape, int64_t chunks,
                                   int64_t t, int64_t head, int64_t chunk) {
    return partials + ((t * shape.n_head + head) * chunks + chunk) * (2 + shape.value_dim);
}

// One position's step of the online softmax (m: running max, s: running sum, acc: running
// sum of weighted values): the dot product of the lane's query and key elements, summed over the
// warp, scaled and soft-capped, then folded in. Every kernel takes its positions through this.
template <int P, class Keys, class Values>
__device__ inline void fold_position(const AttendShape& shape, const float (&q_lane)[P], Keys key,
                                     Values value, float& m, float& s, float* acc) {
    float dot = 0.0f;
#pragma unroll
    for (int j = 0; j < P; ++j) dot += q_lane[j] * key(j);
    float score = warp_sum(dot) * shape.scale;
    if (shape.softcap > 0.0f) score = shape.softcap * tanhf(score / shape.softcap);
    const float m_new = fmaxf(m, score);
    const float correction = expf(m - m_new);
    const float p = expf(score - m_new);
    s = s * correction + p;
#pragma unroll
    for (int j = 0; j < P; ++j) acc[j] = acc[j] * correction + p * value(j);
    m = m_new;
}

// P: elements of a head each lane holds (head and value sizes up to 32 * P); U: positions a
// warp loads before it uses them (the loads of U rows in flight at once, where one at a time
// left the warp waiting on memory for each). A warp takes positions begin + warp, then every
// kWarps-th: the order of its sums depends only on the positions.
// The warps' records of a block (the partial records', then the folded merge's), in shared
// memory.
struct WarpRecords {
    float m[kWarps];
    float s[kWarps];
    float acc[kWarps][kMaxValueDim];
};

// Whether the block wrote a record (the chunk holds visible positions: the same for every
// thread).
template <KvType T, int P, int U>
__device__ inline bool partial_record(const AttendShape& shape, const KvLayerView& layer,
                                      int64_t k_row_bytes, int64_t v_row_bytes, const float* q,
                                      const int64_t* pos0_at, const TokenRows& tokens,
                                      int64_t chunks, float* partials, int64_t chunk,
                                      WarpRecords& warps) {
    const int64_t head = blockIdx.y;
    const int64_t t = blockIdx.z;
    const Visible vis = visible_of(position_of(pos0_at, tokens, t), shape.window);
    const int64_t begin = max(vis.first, chunk * shape.chunk);
    const int64_t end = min(vis.last + 1, (chunk + 1) * shape.chunk);
    if (begin >= end) return false;  // not this query's chunk: the merge never reads it
    const int64_t kv_head = head / (shape.n_head / shape.n_head_kv);
    const unsigned lane = threadIdx.x % 32;
    const unsigned warp = threadIdx.x / 32;
    const float* qh = q + (t * shape.n_head + head) * shape.head_dim;  // [head_dim]
    // Lane l holds elements P*l .. P*l + P-1 of the query, keys and values: one vector load
    // per row and lane.
    float q_lane[P];
#pragma unroll
    for (int j = 0; j < P; ++j) {
        const int64_t d = P * lane + j;
        q_lane[j] = d < shape.head_dim ? qh[d] : 0.0f;
    }
    float m = -INFINITY;
    float s = 0.0f;
    float acc[P] = {};
    const int64_t k_base = kv_head * shape.head_dim;
    const int64_t v_base = kv_head * shape.value_dim;
    const uint8_t* k_rows = rows_of(layer, tokens, t, false);
    const uint8_t* v_rows = rows_of(layer, tokens, t, true);
    for (int64_t first = begin + warp; first < end; first += kWarps * U) {
        float k_el[U][P];
        float v_el[U][P];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int64_t pos = first + u * kWarps;
            const bool inside = pos < end;
            const int64_t slot = slot_of(layer, inside ? pos : begin);
            load_slice<T, P>(k_rows + slot * k_row_bytes, k_base, shape.head_dim, lane, inside,
                             k_el[u]);
            load_slice<T, P>(v_rows + slot * v_row_bytes, v_base, shape.value_dim, lane, inside,
                             v_el[u]);
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            if (first + u * kWarps >= end) break;
            fold_position<P>(
                shape, q_lane, [&](int j) { return k_el[u][j]; }, [&](int j) { return v_el[u][j]; },
                m, s, acc);
        }
    }
    // The warps' records merged in warp order.
    if (lane == 0) {
        warps.m[warp] = m;
        warps.s[warp] = s;
    }
#pragma unroll
    for (int j = 0; j < P; ++j) {
        const int64_t d = P * lane + j;
        if (d < shape.value_dim) warps.acc[warp][d] = acc[j];
    }
    __syncthreads();
    float top = -INFINITY;
    for (int w = 0; w < kWarps; ++w) top = fmaxf(top, warps.m[w]);
    float* record = record_of(partials, shape, chunks, t, head, chunk);
    for (int64_t d = threadIdx.x; d < shape.value_dim; d += blockDim.x) {
        float sum = 0.0f;
        for (int w = 0; w < kWarps; ++w) {
            if (warps.m[w] > -INFINITY) sum += warps.acc[w][d] * expf(warps.m[w] - top);
        }
        record[2 + d] = sum;
    }
    if (threadIdx.x == 0) {
        float total = 0.0f;
        for (int w = 0; w < kWarps; ++w) {
            if (warps.m[w] > -INFINITY) total += warps.s[w] * expf(warps.m[w] - top);
        }
        record[0] = top;
        record[1] = total;
    }
    return true;
}

// The merge of query t's records of head `head` (the chunks of its visible positions, in
// chunk order) with the head's sink in the denominator, into out, by the block's kMergers
// warps (of its blockDim.x threads). Warp w sums the visible chunks first + w, first + w +
// kMergers, ... in order, then the warps' sums are added in warp order: the order depends only
// on the query's position, and a warp's loads of successive records are independent, so they
// overlap (one thread walking 64 records of a 4k context one after another took longer than the
// partial records). kOtherBlocks: the records were written by other blocks of the running
// launch, so they are read from L2 (past this SM's L1). kPerLane: value elements a lane holds
// (value_dim <= 32 * kPerLane).
template <int kMergers, bool kOtherBlocks, int kPerLane>
__device__ inline void merge_records(const AttendShape& shape, const float* partials,
                                     int64_t chunks, int64_t t, int64_t head, const Visible& vis,
                                     float* out, float* warp_top, float* warp_den,
                                     float (*warp_acc)[kMaxValueDim]) {
    const auto load = [](const float* p) { return kOtherBlocks ? __ldcg(p) : *p; };
    const unsigned lane = threadIdx.x % 32;
    const unsigned warp = threadIdx.x / 32;
    const int64_t first = vis.first / shape.chunk;
    const int64_t last = vis.last / shape.chunk;

    // Each warp's records in one pass, rescaled as the running max rises (a first pass for the
    // max of all was one more round trip to L2 before any sum, ~0.7 us of the merge).
    float top = -INFINITY;
    float den = 0.0f;
    float acc[kPerLane] = {};
#pragma unroll 4
    for (int64_t c = first + warp; c <= last; c += kMergers) {
        const float* r = record_of(partials, shape, chunks, t, head, c);
        const float m = load(r);
        if (m == -INFINITY) continue;  // no weight (the same for every lane)
        const float top_new = fmaxf(top, m);
        const float correction = expf(top - top_new);
        const float weight = expf(m - top_new);
        den = den * correction + load(r + 1) * weight;
#pragma unroll
        for (int j = 0; j < kPerLane; ++j) {
            const int64_t d = lane + 32 * j;
            if (d < shape.value_dim) acc[j] = acc[j] * correction + load(r + 2 + d) * weight;
        }
        top = top_new;
    }
    if (lane == 0) {
        warp_top[warp] = top;
        warp_den[warp] = den;
    }
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
        const int64_t d = lane + 32 * j;
        if (d < shape.value_dim) warp_acc[warp][d] = acc[j];
    }
    __syncthreads();
    // The warps' sums in warp order, each scaled to the largest logit of all (a max, exact in
    // any order), with the sink in the denominator.
    float all_top = shape.sinks ? shape.sinks[head] : -INFINITY;
    for (int w = 0; w < kMergers; ++w) all_top = fmaxf(all_top, warp_top[w]);
    float denominator = shape.sinks ? expf(shape.sinks[head] - all_top) : 0.0f;
    for (int w = 0; w < kMergers; ++w) {
        if (warp_top[w] > -INFINITY) denominator += warp_den[w] * expf(warp_top[w] - all_top);
    }
    float* dst = out + (t * shape.n_head + head) * shape.value_dim;  // [value_dim]
    for (int64_t d = threadIdx.x; d < shape.value_dim; d += blockDim.x) {
        float sum = 0.0f;
        for (int w = 0; w < kMergers; ++w) {
            if (warp_top[w] > -INFINITY) sum += warp_acc[w][d] * expf(warp_top[w] - all_top);
        }
        dst[d] = sum / denominator;
    }
}

// Block x takes chunks x, x + gridDim.x, ...: a captured decode step's launch covers the whole
// context with a bounded grid, its blocks skipping the chunks past the query's position.
constexpr int64_t kMaxChunkBlocks = 64;

// With shape.merge_counters, the block that writes the last of a head's records merges them
// (merge_records with the block's warps): every writing block fences its records and counts
// itself in; the one that completes the count (the blocks with a visible chunk: min(grid
// width, visible chunks)) reads them all and sets the counter back to zero for the next launch.
template <KvType T, int P, int U>
__global__ void __launch_bounds__(32 * kWarps, 2)
    attend_partial_kernel(AttendShape shape, KvLayerView layer, int64_t k_row_bytes,
                          int64_t v_row_bytes, const float* q, const int64_t* pos0_at,
                          TokenRows tokens, int64_t chunks, float* partials, float* out) {
    await_previous_grid();
    __shared__ WarpRecords warps;
    bool wrote = false;
    for (int64_t chunk = blockIdx.x; chunk < chunks; chunk += gridDim.x) {
        wrote |= partial_record<T, P, U>(shape, layer, k_row_bytes, v_row_bytes, q, pos0_at, tokens,
                                         chunks, partials, chunk, warps);
        __syncthreads();  // the next chunk reuses the shared records
    }
    if (shape.merge_counters == nullptr || !wrote) return;
    const int64_t head = blockIdx.y;
    const int64_t t = blockIdx.z;
    const Visible vis = visible_of(position_of(pos0_at, tokens, t), shape.window);
    __shared__ bool merges;
    __threadfence();  // this block's records, before it counts itself in
    __syncthreads();
    if (threadIdx.x == 0) {
        const int64_t visible_chunks = vis.last / shape.chunk - vis.first / shape.chunk + 1;
        const auto writers =
            static_cast<unsigned>(min(static_cast<int64_t>(gridDim.x), visible_chunks));
        unsigned* counter = shape.merge_counters + t * shape.n_head + head;
        merges = atomicAdd(counter, 1u) + 1u == writers;
        if (merges) *counter = 0u;  // every writer has counted: ready for the next launch
    }
    __syncthreads();
    if (!merges) return;
    __threadfence();  // the other blocks' records, after their count
    merge_records<kWarps, true, P>(shape, partials, chunks, t, head, vis, out, warps.m, warps.s,
                                   warps.acc);
}

// Block (head, token) of kMergeWarps warps: merge_records.
constexpr int kMergeWarps = 8;

__global__ void __launch_bounds__(32 * kMergeWarps)
    attend_merge_kernel(AttendShape shape, const float* partials, const int64_t* pos0_at,
                        TokenRows tokens, int64_t chunks, float* out) {
    await_previous_grid();
    const int64_t head = blockIdx.x;
    const int64_t t = blockIdx.y;
    const Visible vis = visible_of(position_of(pos0_at, tokens, t), shape.window);
    __shared__ float warp_top[kMergeWarps];
    __shared__ float warp_den[kMergeWarps];
    __shared__ float warp_acc[kMergeWarps][kMaxValueDim];
    merge_records<kMergeWarps, false, kMaxPerLane>(shape, partials, chunks, t, head, vis, out,
                                                   warp_top, warp_den, warp_acc);
}

void launch_merge(const AttendShape& shape, const float* partials, const int64_t* pos0, int64_t n,
                  int64_t chunks, float* out, cudaStream_t stream, const TokenRows& tokens = {}) {
    const dim3 grid(static_cast<unsigned>(shape.n_head), static_cast<unsigned>(n));
    launch_kernel(attend_merge_kernel, grid, 32 * kMergeWarps, 0, stream, shape, partials, pos0,
                  tokens, chunks, out);
    check_launch("attend_merge");
}

// Batches longer than the exact-batch limit (prefill): one block per (chunk, KV head, block of
// tokens) reads the chunk's rows once, a tile of positions at a time into shared memory, for
// every query head of the group and every token of the block; one warp per (token, head) takes
// the tile's positions in ascending order. A partial record per (token, head, chunk), merged as
// the short batches' are. The order of the sums differs from the short batches' kernel: like
// cuBLAS against gemv, prefill rounds differently from decode, within f32's noise.
constexpr int kTiledWarpsWanted = 16;

// One online-softmax step over a tile of 32 positions (rows of them loaded) for one warp's
// (token, head): lane r takes the dot product of the query (qh, read through the cache: every
// lane reads the same element) with key row r, the warp's max and sum give the step, and each
// lane adds the tile's weighted value rows to its elements lane + 32 j. Positions outside
// [begin, end) weigh nothing.
template <int P, int kRowFloats>
__device__ inline void fold_tile(const AttendShape& shape, const float* qh,
                                 float (*k_tile)[kRowFloats], float (*v_tile)[32 * P], int64_t tile,
                                 int64_t rows, int64_t begin, int64_t end, float& m, float& s,
                                 float (&acc)[P]) {
    const unsigned lane = threadIdx.x % 32;
    const int64_t pos = tile + lane;
    float score = -INFINITY;
    if (lane < rows && pos >= begin && pos < end) {
        float dot = 0.0f;
#pragma unroll 8
        for (int64_t d = 0; d < shape.head_dim; ++d)
            dot = fmaf(__ldg(qh + d), k_tile[lane][d], dot);
        score = dot * shape.scale;
        if (shape.softcap > 0.0f) score = shape.softcap * tanhf(score / shape.softcap);
    }
    const float tile_max = warp_max(score);
    if (tile_max == -INFINITY) return;  // no visible position in this tile (warp-uniform)
    const float m_new = fmaxf(m, tile_max);
    const float correction = expf(m - m_new);
    const float p = score > -INFINITY ? expf(score - m_new) : 0.0f;
    s = s * correction + warp_sum(p);
#pragma unroll
    for (int j = 0; j < P; ++j) acc[j] *= correction;
    for (int r = 0; r < rows; ++r) {
        const float weight = __shfl_sync(0xffffffffu, p, r);
#pragma unroll
        for (int j = 0; j < P; ++j) acc[j] = fmaf(weight, v_tile[r][lane + 32 * j], acc[j]);
    }
    m = m_new;
}

template <KvType T, int P>
__global__ void attend_tiled_kernel(AttendShape shape, KvLayerView layer, int64_t k_row_bytes,
                                    int64_t v_row_bytes, const float* q, const int64_t* pos0_at,
                                    int64_t n, int64_t tokens_per_block, int64_t chunks,
                                    float* partials) {
    await_previous_grid();
    constexpr int kTile = P >= 8 ? 16 : 32;  // positions a tile holds: 32 KiB of f32 rows at most
    // Heads up to 128: lane r scores position r of the tile on its own (one softmax step a tile,
    // two warp reductions instead of one per position); the key rows padded by a float so the
    // lanes' reads down a column fall in different banks. Wider heads: the warp folds the
    // tile's positions one by one (fold_position).
    constexpr bool kLanePositions = P <= 4;
    __shared__ float k_tile[kTile][32 * P + (kLanePositions ? 1 : 0)];
    __shared__ float v_tile[kTile][32 * P];
    const int64_t pos0 = *pos0_at;
    const int64_t chunk = blockIdx.x;
    const int64_t kv_head = blockIdx.y;
    const int64_t group = shape.n_head / shape.n_head_kv;
    const int64_t t0 = blockIdx.z * tokens_per_block;
    const unsigned lane = threadIdx.x % 32;
    const unsigned warp = threadIdx.x / 32;
    // This warp's (token, head); a warp past the batch still helps load the tiles.
    const int64_t t = t0 + warp / group;
    const int64_t head = kv_head * group + warp % group;
    const bool active = t < n && static_cast<int64_t>(warp) < tokens_per_block * group;
    const Visible vis = visible_of(pos0 + (active ? t : t0), shape.window);
    const int64_t my_begin = max(vis.first, chunk * shape.chunk);
    const int64_t my_end = min(vis.last + 1, (chunk + 1) * shape.chunk);
    // The block's range: from the first token's first position to the last token's last.
    const int64_t last_t = min(n, t0 + tokens_per_block) - 1;
    const int64_t block_begin = max(visible_of(pos0 + t0, shape.window).first, chunk * shape.chunk);
    const int64_t block_end = min(pos0 + last_t + 1, (chunk + 1) * shape.chunk);
    if (block_begin >= block_end) return;  // uniform across the block
    [[maybe_unused]] float q_lane[P] = {};
    const float* qh = q + (t * shape.n_head + head) * shape.head_dim;  // [head_dim] when active
    if constexpr (!kLanePositions) {
#pragma unroll
        for (int j = 0; j < P; ++j) {
            const int64_t d = lane + 32 * j;
            q_lane[j] = active && d < shape.head_dim ? qh[d] : 0.0f;
        }
    }
    float m = -INFINITY;
    float s = 0.0f;
    float acc[P] = {};
    const int64_t k_base = kv_head * shape.head_dim;
    const int64_t v_base = kv_head * shape.value_dim;
    for (int64_t tile = block_begin; tile < block_end; tile += kTile) {
        const int64_t rows = min(static_cast<int64_t>(kTile), block_end - tile);
        for (int64_t i = threadIdx.x; i < rows * 32 * P; i += blockDim.x) {
            const int64_t r = i / (32 * P);
            const int64_t d = i % (32 * P);
            const int64_t slot = slot_of(layer, tile + r);
            k_tile[r][d] = d < shape.head_dim
                               ? row_element<T>(layer.k + slot * k_row_bytes, k_base + d)
                               : 0.0f;
            v_tile[r][d] = d < shape.value_dim
                               ? row_element<T>(layer.v + slot * v_row_bytes, v_base + d)
                               : 0.0f;
        }
        __syncthreads();
        if (active) {
            if constexpr (kLanePositions) {
                fold_tile<P>(shape, qh, k_tile, v_tile, tile, rows, my_begin, my_end, m, s, acc);
            } else {
                for (int64_t r = 0; r < rows; ++r) {
                    const int64_t pos = tile + r;
                    if (pos < my_begin || pos >= my_end) continue;  // warp-uniform
                    fold_position<P>(
                        shape, q_lane, [&](int j) { return k_tile[r][lane + 32 * j]; },
                        [&](int j) { return v_tile[r][lane + 32 * j]; }, m, s, acc);
                }
            }
        }
        __syncthreads();
    }
    if (!active || my_begin >= my_end) return;
    float* record = record_of(partials, shape, chunks, t, head, chunk);
#pragma unroll
    for (int j = 0; j < P; ++j) {
        const int64_t d = lane + 32 * j;
        if (d < shape.value_dim) record[2 + d] = acc[j];
    }
    if (lane == 0) {
        record[0] = m;
        record[1] = s;
    }
}

template <KvType T>
void launch_attend_tiled(const AttendShape& shape, const KvLayerView& layer, const float* q,
                         const int64_t* pos0, int64_t n, int64_t chunks, float* partials,
                         cudaStream_t stream) {
    const int64_t group = shape.n_head / shape.n_head_kv;
    if (group > 32) {  // one warp per query head of a group, at most a block's 32 warps
        throw std::invalid_argument("CUDA attention: more than 32 query heads per KV head");
    }
    const int64_t tokens_per_block = std::max<int64_t>(1, kTiledWarpsWanted / group);
    const int64_t warps = std::min<int64_t>(32, tokens_per_block * group);
    const int64_t k_row_bytes = kv_row_bytes(layer.type, layer.k_width);
    const int64_t v_row_bytes = kv_row_bytes(layer.type, layer.v_width);
    const dim3 grid(static_cast<unsigned>(chunks), static_cast<unsigned>(shape.n_head_kv),
                    static_cast<unsigned>((n + tokens_per_block - 1) / tokens_per_block));
    const int64_t widest = std::max(shape.head_dim, shape.value_dim);
    const auto kernel = widest <= 32    ? attend_tiled_kernel<T, 1>
                        : widest <= 64  ? attend_tiled_kernel<T, 2>
                        : widest <= 128 ? attend_tiled_kernel<T, 4>
                                        : attend_tiled_kernel<T, 8>;
    launch_kernel(kernel, grid, static_cast<unsigned>(32 * warps), 0, stream, shape, layer,
                  k_row_bytes, v_row_bytes, q, pos0, n, tokens_per_block, chunks, partials);
    check_launch("attend_tiled");
}

template <KvType T>
void launch_attend(const AttendShape& shape, const KvLayerView& layer, const float* q,
                   const int64_t* pos0, int64_t n, int64_t chunks, float* partials, float* out,
                   cudaStream_t stream, const TokenRows& tokens) {
    const int64_t k_row_bytes = kv_row_bytes(layer.type, layer.k_width);
    const int64_t v_row_bytes = kv_row_bytes(layer.type, layer.v_width);
    const dim3 grid(static_cast<unsigned>(std::min(chunks, kMaxChunkBlocks)),
                    static_cast<unsigned>(shape.n_head), static_cast<unsigned>(n));
    if (n > kExactBatchTokens) {
        if (shape.tensor_cores && flash_attend_supports(shape, layer)) {
            // `chunks` of shape.chunk cover the batch's last position: so do these, and the
            // records fit the partials sized for the former (kFlashChunk >= shape.chunk).
            AttendShape flash = shape;
            flash.chunk = kFlashChunk;
            const int64_t flash_chunks = (chunks * shape.chunk + kFlashChunk - 1) / kFlashChunk;
            if (flash_chunks == 1) {
                return flash_attend(flash, layer, q, pos0, n, 1, nullptr, out, stream);
            }
            flash_attend(flash, layer, q, pos0, n, flash_chunks, partials, nullptr, stream);
            return launch_merge(flash, partials, pos0, n, flash_chunks, out, stream);
        }
        launch_attend_tiled<T>(shape, layer, q, pos0, n, chunks, partials, stream);
        return launch_merge(shape, partials, pos0, n, chunks, out, stream);
    }
    const int64_t widest = std::max(shape.head_dim, shape.value_dim);
    const auto kernel = widest <= 32    ? attend_partial_kernel<T, 1, kUnroll>
                        : widest <= 64  ? attend_partial_kernel<T, 2, kUnroll>
                        : widest <= 128 ? attend_partial_kernel<T, 4, kUnroll>
                                        : attend_partial_kernel<T, 8, kUnroll>;
    launch_kernel(kernel, grid, 32 * kWarps, 0, stream, shape, layer, k_row_bytes, v_row_bytes, q,
                  pos0, tokens, chunks, partials, out);
    check_launch("attend_partial");
    if (!shape.merge_counters) launch_merge(shape, partials, pos0, n, chunks, out, stream, tokens);
}

}  // namespace

int64_t attention_chunk(int64_t n) {
    // Short batches: few blocks per head otherwise (a decode step at a context under 256 had one
    // block per head, 16 for a whole layer); prefill: fewer records to keep and merge.
    return n <= kExactBatchTokens ? 64 : 256;
}

int64_t chunks_through(int64_t last_position, int64_t chunk) {
    return last_position / chunk + 1;
}

void store_kv(const KvLayerView& layer, const float* k, const float* v, const int64_t* pos0,
              int64_t n, cudaStream_t stream, const TokenRows& tokens) {
    if (n <= 0) return;
    const int64_t k_row_bytes = kv_row_bytes(layer.type, layer.k_width);
    const int64_t v_row_bytes = kv_row_bytes(layer.type, layer.v_width);
    launch_kernel(store_kv_kernel, dim3(static_cast<unsigned>(n), 2), 256, 0, stream, layer,
                  k_row_bytes, v_row_bytes, k, v, pos0, tokens);
    check_launch("store_kv");
}

int64_t attention_partials_floats(const AttendShape& shape, int64_t n, int64_t chunks) {
    return n * shape.n_head * chunks * (2 + shape.value_dim);
}

void attend(const AttendShape& shape, const KvLayerView& layer, const float* q, const int64_t* pos0,
            int64_t n, int64_t chunks, float* partials, float* out, cudaStream_t stream,
            const TokenRows& tokens) {
    if (n <= 0) return;
    if (tokens.several() && n > kExactBatchTokens) {
        throw std::invalid_argument(
            "CUDA attention: a batch of several conversations takes at most " +
            std::to_string(kExactBatchTokens) + " tokens");
    }
    if (shape.head_dim > kMaxValueDim || shape.value_dim > kMaxValueDim) {
        throw std::invalid_argument("CUDA attention: heads over " + std::to_string(kMaxValueDim) +
                                    " elements are not supported");
    }
    switch (layer.type) {
        case KvType::F32:
            return launch_attend<KvType::F32>(shape, layer, q, pos0, n, chunks, partials, out,
                                              stream, tokens);
        case KvType::F16:
            return launch_attend<KvType::F16>(shape, layer, q, pos0, n, chunks, partials, out,
                                              stream, tokens);
        case KvType::Q8_0:
            return launch_attend<KvType::Q8_0>(shape, layer, q, pos0, n, chunks, partials, out,
                                               stream, tokens);
    }
}

}  // namespace ember::cuda
