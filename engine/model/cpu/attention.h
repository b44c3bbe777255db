// Softmax attention over the KV cache, written once for every family: causal, optionally over
// a sliding window (gemma3, gpt-oss), with per-head sink logits (gpt-oss), any query scale and
// soft-capped scores. The families differ only in the AttentionSettings they pass.
//
// How the work is cut (attention.cpp): a query's visible positions are split into runs of
// kAttnRunPositions that start at multiples of it (a window's first run starts inside one), so
// the runs, and with them the rounding of the merged result, depend only on the query's
// position, never on the batch it came in: a batch of tokens gives bit for bit what the same
// tokens give one at a time (forward.h's exact-batch contract). Each run yields a partial
// softmax record per head (ops.h: attend_run); a head's records are merged in ascending run
// order (attend_merge, or with the head's sink joining the denominator).
//   - Decode and short batches (< 4 tokens) split each (token, KV head group) into one task
//     per run: too few groups to keep the threads busy otherwise.
//   - Longer batches give each task a block of up to 32 tokens of one KV head group: a run
//     every token of the block sees whole is read once for all of them (their heads go
//     through one attend_run), so a prompt reads the cache once per block, not per token.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/model/backend.h"  // AttentionHeads, AttentionSettings

namespace ember {

class KvCache;
class ThreadPool;

// Positions per attention run; a run never straddles a KV cache chunk.
inline constexpr int64_t kAttnRunPositions = 128;

// Buffers grown on demand and never shrunk (decode does not allocate).
struct AttentionScratch {
    std::vector<float> work;           // [threads x per-worker floats]
    std::vector<float> split_records;  // [tokens x n_head x runs x record] of split batches
};

// Attention of n queries at positions pos0..pos0+n-1 over `cache_layer` of the cache, whose
// rows for those positions are stored already.
// q: [n x n_head*head_dim] (rotated), out: [n x n_head*value_dim].
void attend_cached(const AttentionHeads& heads, const AttentionSettings& settings,
                   const KvCache& kv, ThreadPool& pool, const float* q, int64_t pos0, int64_t n,
                   AttentionScratch& scratch, float* out);

}  // namespace ember
