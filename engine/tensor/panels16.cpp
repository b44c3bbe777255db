#include "engine/tensor/panels16.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/tensor/traits.h"
#include "engine/tensor/types.h"
#include "engine/util/fan_out.h"

namespace ember {

namespace {

// Where byte `o` of row r's block lands inside its panel's block column (see panels16.h).
inline size_t panel_offset(size_t block_bytes, int r, size_t o) {
    const size_t full = block_bytes / 4 * 4;  // bytes carried as whole dwords
    if (o < full) return 64 * (o / 4) + 4 * static_cast<size_t>(r) + o % 4;
    const size_t tail = block_bytes - full;
    return 16 * full + static_cast<size_t>(r) * tail + (o - full);
}

// One panel: 16 rows of row_bytes at `rows` (row layout) -> `panel` (Panels16), written in
// order (dword j of rows 0..15, then j + 1, ...) so the stores stream.
void interleave_panel(const uint8_t* rows, uint8_t* panel, size_t row_bytes, size_t block_bytes) {
    const size_t n_blocks = row_bytes / block_bytes;
    const size_t dwords = block_bytes / 4;
    const size_t tail = block_bytes % 4;
    uint8_t* out = panel;
    for (size_t b = 0; b < n_blocks; ++b) {
        const uint8_t* src = rows + b * block_bytes;  // row r's block b at src + r * row_bytes
        for (size_t j = 0; j < dwords; ++j) {
            for (int r = 0; r < kPanelRows; ++r, out += 4) {
                std::memcpy(out, src + static_cast<size_t>(r) * row_bytes + 4 * j, 4);
            }
        }
        for (int r = 0; r < kPanelRows; ++r, out += tail) {
            std::memcpy(out, src + static_cast<size_t>(r) * row_bytes + 4 * dwords, tail);
        }
    }
}

}  // namespace

bool can_use_panels16(const MatrixView& w, const KernelTable& table) {
    if (w.layout != WeightLayout::Rows || w.rows <= 0 || w.rows % kPanelRows != 0) return false;
    // Exact activations have no panel kernels; wide ones where their table has them.
    if (w.activations == Activations::Exact) return false;
    const TypeKernels& k =
        w.activations == Activations::Wide ? table.wide_for(w.type) : table[w.type];
    const TypeInfo& info = type_info(w.type);
    if (k.gemm_panels16 == nullptr || info.block_elems == 0) return false;
    if (w.cols % info.block_elems != 0) return false;
    return w.row_stride == row_bytes(info, static_cast<uint64_t>(w.cols));
}

void write_panels16(const uint8_t* src, uint8_t* dst, int64_t rows, size_t row_bytes,
                    size_t block_bytes, int threads) {
    if (rows % kPanelRows != 0 || block_bytes == 0 || row_bytes % block_bytes != 0) {
        throw std::invalid_argument("write_panels16: " + std::to_string(rows) + " rows of " +
                                    std::to_string(row_bytes) + " bytes do not make panels of " +
                                    std::to_string(kPanelRows) + " rows of " +
                                    std::to_string(block_bytes) + "-byte blocks");
    }
    const int64_t panels = rows / kPanelRows;
    const size_t panel_bytes = kPanelRows * row_bytes;
    auto run = [=](int64_t p0, int64_t p1) {
        for (int64_t p = p0; p < p1; ++p) {
            const size_t at = static_cast<size_t>(p) * panel_bytes;
            interleave_panel(src + at, dst + at, row_bytes, block_bytes);
        }
    };
    // Below ~2 MB a thread costs more than it saves.
    const int n = static_cast<int>(std::clamp<int64_t>(
        static_cast<int64_t>(panel_bytes) * panels / (2 << 20), 1, std::max(1, threads)));
    fan_out(n, [&](int i) { run(panels * i / n, panels * (i + 1) / n); });
}

void read_panels16_block(const MatrixView& w, int64_t row, int64_t block, uint8_t* dst) {
    const size_t block_bytes = type_info(w.type).block_bytes;
    const uint8_t* column = static_cast<const uint8_t*>(w.data) +
                            static_cast<size_t>(row / kPanelRows) * kPanelRows * w.row_stride +
                            static_cast<size_t>(block) * kPanelRows * block_bytes;
    const int r = static_cast<int>(row % kPanelRows);
    for (size_t o = 0; o < block_bytes; ++o) dst[o] = column[panel_offset(block_bytes, r, o)];
}

void read_panels16_row(const MatrixView& w, int64_t row, uint8_t* dst) {
    const size_t block_bytes = type_info(w.type).block_bytes;
    const auto n_blocks = static_cast<int64_t>(w.row_stride / block_bytes);
    for (int64_t b = 0; b < n_blocks; ++b) {
        read_panels16_block(w, row, b, dst + static_cast<size_t>(b) * block_bytes);
    }
}

}  // namespace ember
