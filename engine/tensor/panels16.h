// WeightLayout::Panels16 (matmul.h): the rows of a matrix in panels of 16, each block column's
// 16 blocks interleaved by dwords, written once at load so that a one-token kernel loads "dword
// j of 16 rows" as one 64-byte vector instead of gathering and transposing it per group.
//
// For a type of B bytes per block and a matrix of row_bytes per row, panel p starts at
// 16 * p * row_bytes and block column b of the panel at 16 * b * B within it:
//   [64 * j, 64 * j + 64)              dword j (bytes 4j..4j+3) of rows 0..15, j < B / 4
//   64 * (B / 4) + r * (B % 4) ...     the last B % 4 bytes of row r's block (Q6_K: its d)
// The same bytes as the row layout, permuted: sizes, strides and bandwidth counts are unchanged.
#pragma once

#include <cstddef>
#include <cstdint>

#include "engine/tensor/matmul.h"

namespace ember {

constexpr int kPanelRows = 16;

// Whether `w` can be rewritten in Panels16 and multiplied by `table` afterwards: a 2-D matrix in
// the row layout, densely packed, rows a multiple of 16, of a type whose kernels in `table`
// read panels (gemm_panels16).
bool can_use_panels16(const MatrixView& w, const KernelTable& table);

// Writes the rows-layout matrix at `src` (rows x row_bytes, rows % 16 == 0, blocks of
// block_bytes) to `dst` (as many bytes, not overlapping src) in Panels16, on up to `threads`
// threads.
void write_panels16(const uint8_t* src, uint8_t* dst, int64_t rows, size_t row_bytes,
                    size_t block_bytes, int threads);

// Row `row` of a Panels16 matrix back in the row layout: dst[0 .. w.row_stride).
void read_panels16_row(const MatrixView& w, int64_t row, uint8_t* dst);
// Block `block` of that row: dst[0 .. the type's block bytes).
void read_panels16_block(const MatrixView& w, int64_t row, int64_t block, uint8_t* dst);

}  // namespace ember
