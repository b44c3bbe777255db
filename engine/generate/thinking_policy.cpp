#include "engine/generate/thinking_policy.h"

#include <algorithm>

#include "engine/generate/reply_router.h"

namespace ember {

ThinkingPolicy::ThinkingPolicy(int64_t budget, bool loop_check)
    : budget_(std::max<int64_t>(0, budget)), loop_check_(loop_check) {}

bool ThinkingPolicy::must_end_now() {
    if (tokens_counted() >= budget_) {
        forced_ = ThinkingEnd::Budget;
    } else if (loop_check_ && tokens_loop(thinking_ids_)) {
        forced_ = ThinkingEnd::Loop;
    }
    return forced_ != ThinkingEnd::None;
}

}  // namespace ember
