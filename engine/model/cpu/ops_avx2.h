// AVX2 (+FMA, F16C) variants of ops.h, compiled with the Avx2 kernel level's flags:
// make_ops_table installs them from that level on (the AVX-512 ones replace them above it).
// Without them an AVX2-only CPU ran attention over the f16 KV cache one element at a time: on
// SmolLM2-135M that was most of a 512-token prefill.
#pragma once

#include "engine/model/cpu/ops.h"

namespace ember::avx2 {

// Puts this level's functions into `table`.
void install_ops(OpsTable& table);

}  // namespace ember::avx2
