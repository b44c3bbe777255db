// The fidelity each KV cache type is held to against the fixtures' float64 references (max
// |delta| of any reference top-5 logit or logsumexp): f32 as before, f16 and q8_0 as issue 15
// asks. The fidelity tests print one "[kv] <model>/<sequence> <type>: ..." line per case;
// README's "KV precision" table is those lines.
#pragma once

#include <array>

#include "engine/model/kv_type.h"

namespace ember::test {

inline constexpr std::array<KvType, 3> kAllKvTypes = {KvType::F32, KvType::F16, KvType::Q8_0};

inline double kv_tolerance(KvType type) {
    switch (type) {
        case KvType::F32:
            return 2e-3;
        case KvType::F16:
            return 5e-3;
        case KvType::Q8_0:
            return 3e-2;
    }
    return 0;
}

}  // namespace ember::test
