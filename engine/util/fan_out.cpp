#include "engine/util/fan_out.h"

#include <algorithm>

namespace ember {

int fan_out_threads(int64_t useful) {
    // hardware_concurrency() may say 0 ("unknown"): one thread then.
    const int64_t machine = std::max(1u, std::thread::hardware_concurrency());
    return static_cast<int>(std::clamp<int64_t>(useful, 1, machine));
}

}  // namespace ember
