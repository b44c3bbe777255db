// Per-conversation mutable state: the KV cache and the scratch buffers of the forward pass.
//
// The KV cache grows in fixed chunks of positions, append-only; rolling back to an earlier
// position only moves the length (O(1)), and the rows past it are overwritten later.
//
// Sliding-window layers (gemma3) keep their rows in a ring instead: position p lives in slot
// p % ring_positions(), so such a layer holds O(W) rows however long the conversation. The
// ring has room for the window plus kRingSlack positions, which makes three things safe:
//  - a batch of up to kRingSlack tokens writes its rows before attending without overwriting
//    a row one of its own tokens still needs;
//  - rolling back up to kRingSlack positions (speculation's rejected drafts, a reply's last
//    tokens re-rendered differently by the next prompt) keeps the rows the window needs;
//  - the ring's runs of kChunkPositions never wrap inside a chunk (it is a whole number of them).
// Resuming at length n needs a sliding layer's rows of positions [n - W + 1, n): rows the
// ring has overwritten are gone, so a cut further back than that (an edited message far back,
// /regen of a long reply) cannot resume there; can_resume_at() says so, and the caller starts
// from the longest prefix it can still rebuild: a stored one (sessions/ keeps every block's
// global rows and the sliding rows the ring held when it was saved) or the start.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

// The CPU backend's own headers: ForwardScratch holds its buffers, and KvCache::run() hands
// its attention kernels a run of rows (ops.h's KvRun).
#include "engine/model/cpu/attention.h"
#include "engine/model/cpu/moe.h"
#include "engine/model/cpu/ops.h"
#include "engine/model/kv_type.h"
#include "engine/model/recurrent_state.h"
#include "engine/tensor/matmul.h"
#include "engine/util/page_region.h"

namespace ember {

struct ModelConfig;

// Which layers of a cache slide, and how far they see.
// Where a restore's rows came from (apply_kv_rows): the blob's rows in state_io.h's KvRows
// layout, every layer holding positions [first, first + count): layer l's K rows at
// rows + l * count * (k_row_bytes + v_row_bytes), its V rows after them. Null rows: a layout
// with sliding layers, whose layers hold different ranges.
struct RestoredRows {
    const uint8_t* rows = nullptr;
    int64_t first = 0;
    int64_t count = 0;
};

// A copy of a cache's rows kept in another memory (a GPU's), which may hold rows the host
// rows do not have yet. The cache asks it to bring the host rows up to date before they are
// read on the host (serializing).
class KvMirror {
public:
    // Host rows [begin, end) of every layer (clipped to the cache's length) become the state's.
    virtual void bring_host_up_to_date(int64_t begin, int64_t end) = 0;
    // Whether a restore may put its rows on the device alone (rows_restored_to_device): the
    // mirror holds every layer, none of them a ring.
    virtual bool restores_to_device() const = 0;
    // A restore's rows [begin, end) of every layer, from `source` (page-locked) to the device
    // alone: the host rows stay as they were, stale until a reader asks for them
    // (bring_host_up_to_date), so a restore onto a GPU neither maps nor fills host memory for
    // them. Waits for the copy (the blob may go on return). False, with nothing done, when
    // the source is not page-locked or restores_to_device() is false: the caller writes the
    // host rows instead and calls host_rows_restored. Restoring threads call it at once for
    // disjoint ranges that start where the state's rows end.
    virtual bool rows_restored_to_device(int64_t begin, int64_t end,
                                         const RestoredRows& source) = 0;
    // A restore (apply_kv_rows) has just written host rows [begin, end) of every layer: the
    // mirror may copy them now, while the restore reads on, instead of at the next forward pass
    // (on a GPU restoring 2 GB of rows, the copy is as long as the read). Called from the
    // restoring threads, several at once for disjoint ranges. Every host write to a mirrored
    // cache is a restore's, followed by this call (the CPU backend's store() never runs on a
    // device's state), so rows copied here stay what the host holds.
    // `source` is the blob the rows came from: a mirror may copy from there (page-locked
    // memory, a host tier's, copies several times faster than the cache's pageable rows),
    // and then waits for the copy before returning, as the blob may go once the call returns.
    virtual void host_rows_restored(int64_t begin, int64_t end, const RestoredRows& source) = 0;

protected:
    ~KvMirror() = default;
};

struct KvWindow {
    int64_t positions = 0;     // W: positions a sliding layer attends to; 0: no sliding layers
    std::vector<bool> layers;  // [n_layer] true: sliding
};

class KvCache {
public:
    static constexpr int64_t kChunkPositions = 256;
    // Positions a sliding layer's ring holds beyond its window (see above); at least the
    // longest forward batch (kMaxBatch) and the speculation rollback (kExactBatchTokens).
    static constexpr int64_t kRingSlack = 256;

    KvCache() = default;
    // k_width = n_head_kv * head_dim, v_width = n_head_kv * value_dim.
    void init(int64_t n_layer, int64_t k_width, int64_t v_width, int64_t max_positions, KvType type,
              KvWindow window = {});

    int64_t length() const { return length_; }
    int64_t capacity() const { return max_positions_; }
    KvType type() const { return type_; }
    int64_t k_width() const { return k_width_; }
    int64_t v_width() const { return v_width_; }
    int64_t n_layer() const { return n_layer_; }

    // How reserve() backs the chunks it allocates. HugeWhereFilled: huge pages for a chunk
    // the call fills at least half of (a prompt's rows, whose attention reads a head's slice
    // of every row: fewer TLB misses). SmallPages: 4 KiB pages, for rows a restore copies in
    // at memory speed, where first-touch cost decides: on a VM whose balloon hands free
    // memory back to the host, a fresh huge page comes back at ~0.5 GB/s and a small page at
    // ~2.5 GB/s (225 MB of f16 rows: ~450 vs ~90 ms), and the restore is on the path to the
    // first token while a prompt's faults hide behind its compute.
    enum class Pages { HugeWhereFilled, SmallPages };
    // Makes room for positions [0, n); allocates chunks as needed.
    void reserve(int64_t n, Pages pages = Pages::HugeWhereFilled);
    // Maps the pages of the allocated chunks ahead of a restore writing them (PageRegion::
    // populate: ~15% less than faulting them in one by one), chunk `part`, `part + parts`,
    // ... so that restoring threads share the work. Contents are unchanged. Nothing where the
    // restore's rows go to a device alone (restores_to_device).
    void populate(size_t part, size_t parts);
    // Sets the number of valid positions (rollback, or commit after a forward pass or a
    // restore that wrote the rows [length(), n) of every layer).
    void set_length(int64_t n);

    // ---- sliding-window layers ----
    int64_t window() const { return window_; }  // 0: none
    bool is_ring(int64_t layer) const {
        return ring_positions_ > 0 && ring_layer_[static_cast<size_t>(layer)];
    }
    const std::vector<bool>& ring_layers() const { return ring_layer_; }
    int64_t ring_positions() const { return ring_positions_; }
    // First position whose sliding-layer rows the rings still hold (rows [ring_begin,
    // length) are intact); 0 without sliding layers.
    int64_t ring_begin() const { return ring_begin_; }
    // Whether the state can continue at length n: the sliding layers hold the rows of
    // [n - W + 1, n) (always true without sliding layers, and for n = 0).
    bool can_resume_at(int64_t n) const;
    // A restore wrote no sliding-layer rows below `pos`: the rings start over there.
    void forget_ring_rows_before(int64_t pos);

    // Writes the K and V rows of `layer` at `pos` from f32 (k: [k_width], v: [v_width]),
    // converted to the cache's type: f16 rounds to nearest even, q8_0 quantizes each row
    // on its own (kv_type.h). The one write path for batches and single tokens alike, so a
    // row's bytes never depend on how it was evaluated.
    void store(int64_t layer, int64_t pos, const float* k, const float* v);
    // The attention run over positions [p0, p0 + n) of `layer` for the head whose key starts
    // at element k_offset of a row and whose value at v_offset. The run must not cross a
    // chunk (kChunkPositions), whose rows are contiguous.
    KvRun run(int64_t layer, int64_t p0, int64_t n, int64_t k_offset, int64_t v_offset) const;

    // Row of K/V for `layer` at position `pos` as the cache holds it: k_row_bytes() /
    // v_row_bytes() bytes of the cache's type (serializing, restoring, comparing states).
    uint8_t* k_data(int64_t layer, int64_t pos);
    uint8_t* v_data(int64_t layer, int64_t pos);
    const uint8_t* k_data(int64_t layer, int64_t pos) const;
    const uint8_t* v_data(int64_t layer, int64_t pos) const;
    int64_t k_row_bytes() const { return kv_row_bytes(type_, k_width_); }
    int64_t v_row_bytes() const { return kv_row_bytes(type_, v_width_); }
    // Typed views of the same rows, for an F32 cache (float) or an F16 one (fp16 bits); a
    // view of another type throws std::logic_error.
    float* k_row(int64_t layer, int64_t pos);
    float* v_row(int64_t layer, int64_t pos);
    uint16_t* k_row_f16(int64_t layer, int64_t pos);
    uint16_t* v_row_f16(int64_t layer, int64_t pos);
    const float* k_row(int64_t layer, int64_t pos) const;
    const float* v_row(int64_t layer, int64_t pos) const;
    const uint16_t* k_row_f16(int64_t layer, int64_t pos) const;
    const uint16_t* v_row_f16(int64_t layer, int64_t pos) const;

    // ---- a mirror in device memory (KvMirror) ----
    // Rows written through the mutable accessors (store, a restore) since the last call: the
    // lowest such position, or kNoHostWrites; resets the mark. The mirror learns from it which
    // of its rows the host has replaced.
    static constexpr int64_t kNoHostWrites = INT64_MAX;
    int64_t take_host_writes();
    // Non-owning; the mirror clears it when it goes.
    void set_mirror(KvMirror* mirror) { mirror_ = mirror; }
    // Before reading rows [begin, end) on the host: the mirror's newer rows are copied in
    // (no-op without).
    void sync_host(int64_t begin, int64_t end) const {
        if (mirror_) mirror_->bring_host_up_to_date(begin, end);
    }
    // Whether a device mirrors the rows (a restore then inflates into page-locked memory).
    bool mirrored() const { return mirror_ != nullptr; }
    // Whether a restore's rows may go to the device alone (KvMirror::restores_to_device): then
    // populate() maps nothing.
    bool restores_to_device() const { return mirror_ != nullptr && mirror_->restores_to_device(); }
    // A restore's rows [begin, end) to the device alone (KvMirror::rows_restored_to_device);
    // false: the caller writes the host rows.
    bool rows_restored_to_device(int64_t begin, int64_t end, const RestoredRows& source) {
        return mirror_ != nullptr && end > begin && source.rows != nullptr &&
               mirror_->rows_restored_to_device(begin, end, source);
    }
    // A restore wrote rows [begin, end) of every layer (KvMirror::host_rows_restored).
    void rows_restored(int64_t begin, int64_t end, const RestoredRows& source) {
        if (mirror_ && end > begin) mirror_->host_rows_restored(begin, end, source);
    }

    // Bytes one position occupies across all layers (K and V).
    uint64_t bytes_per_position() const;
    uint64_t allocated_bytes() const;

private:
    uint8_t* row(const std::vector<uint8_t*>& chunks, int64_t row_bytes, int64_t layer,
                 int64_t pos) const;
    int64_t chunks_for(int64_t layer, int64_t chunks) const;  // of the first `chunks`
    void require(KvType type) const;  // throws unless the cache is of `type`

    int64_t n_layer_ = 0;
    int64_t k_width_ = 0;
    int64_t v_width_ = 0;
    int64_t max_positions_ = 0;
    int64_t length_ = 0;
    KvType type_ = KvType::F32;
    // chunks[layer * n_chunks_max + chunk]: [kChunkPositions x row bytes] each, null until
    // allocated. Chunk c of every layer lies in regions_[c] (K then V, layer by layer): one
    // allocation per kChunkPositions positions, in huge pages where the kernel has them.
    std::vector<uint8_t*> k_chunks_;
    std::vector<uint8_t*> v_chunks_;
    std::vector<PageRegion> regions_;
    int64_t n_chunks_max_ = 0;
    int64_t n_chunks_allocated_ = 0;  // of a full layer; a ring layer has at most its ring
    int64_t window_ = 0;
    int64_t ring_positions_ = 0;    // slots of a sliding layer's ring (whole chunks); 0: none
    std::vector<bool> ring_layer_;  // [n_layer]
    int64_t ring_begin_ = 0;
    // take_host_writes(); atomic: a restore writes rows from several threads.
    std::atomic<int64_t> host_written_from_{kNoHostWrites};
    void note_host_write(int64_t pos);
    KvMirror* mirror_ = nullptr;
};

// Scratch of the CPU backend for one forward pass over up to `batch` tokens (a family's
// batch limit); grown on demand, never shrunk, so the decode loop runs without allocating.
// Buffers a model has no use for stay empty.
struct ForwardScratch {
    std::vector<float> x;     // [batch x n_embd] residual stream
    std::vector<float> xn;    // [batch x n_embd] normed input, then a sub-block's output
    std::vector<float> q;     // [batch x n_head*head_dim]
    std::vector<float> k;     // [batch x n_head_kv*head_dim]
    std::vector<float> v;     // [batch x n_head_kv*value_dim]
    std::vector<float> attn;  // [batch x n_head*value_dim]
    // [batch x max(2*n_head*head_dim gated attention, 3*n_embd lfm2 conv gates, conv channels
    // of qwen35)]: the projections before a split
    std::vector<float> proj;
    std::vector<float> q_gate;              // [batch x n_head*head_dim] gated attention (qwen35)
    std::vector<float> ffn_gate;            // [batch x n_ff] (dense FFN layers only)
    std::vector<float> ffn_up;              // [batch x n_ff]
    MoeScratch moe;                         // the FFN of MoE layers (moe.h)
    AttentionScratch attention;             // attention.h
    std::vector<float> rope_cos, rope_sin;  // [batch x rope_dims/2]
    // gemma3's sliding layers rotate with their own base: [batch x rope_dims/2].
    std::vector<float> rope_cos_local, rope_sin_local;
    std::vector<float> logits;  // [rows x n_vocab]
    // ---- the recurrent mixers of the hybrids (cpu/mixers.h) ----
    std::vector<float> conv_in;     // [batch x n_embd] lfm2 conv input B*x
    std::vector<float> conv_out;    // [batch x conv channels]
    std::vector<float> conv_ext;    // [(conv_kernel-1 + batch) x conv channels] history + input
    std::vector<float> z;           // [batch x n_v*v_dim] delta-net output gate
    std::vector<float> decay;       // [batch x n_v] alpha projection, then the log decay g
    std::vector<float> beta;        // [batch x n_v] beta projection, then sigmoid(beta)
    std::vector<float> core;        // [batch x n_v*v_dim] delta-rule output
    std::vector<float> delta_work;  // [threads x per-worker floats] chunked delta-rule work
    MatmulScratch mm;
};

// What a compute device (compute_device.h) keeps for one conversation: its copy of the KV
// cache, its buffers. Declared after `kv` in InferenceState, so it goes first.
class DeviceState {
public:
    virtual ~DeviceState() = default;
};

struct InferenceState {
    KvCache kv;  // hybrids: attention layers only (ModelConfig::kv_slot maps layer -> slot)
    // Hybrids: conv / delta-rule state beside the KV cache; empty for other families.
    RecurrentState recurrent;
    ForwardScratch scratch;
    // The device's share of the state when the model runs on one (its KV rows are mirrored
    // into `kv` on demand: KvCache::sync_host); null on the CPU.
    std::unique_ptr<DeviceState> device;
    int64_t n_past() const { return kv.length(); }
};

// Creates a state for `config` holding up to max_positions tokens.
std::unique_ptr<InferenceState> make_state(const ModelConfig& config, int64_t max_positions,
                                           KvType kv_type = KvType::F32);

}  // namespace ember
