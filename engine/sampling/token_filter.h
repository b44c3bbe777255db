// Which tokens the sampler may pick at this step: the seam for constrained decoding.
//
// The sampler applies a filter after the penalties and before the chain (top-k, temperature,
// top-p, min-p), so the chain sees only allowed tokens, as if the rest had a logit of -inf.
// A filter offers two ways to ask, because the answer is cheap for one token and dear for a
// whole vocabulary: the sampler checks its best-ranked candidates one by one when that
// settles the choice (greedy, or top-k with enough allowed tokens among the best), and asks
// for the full mask only otherwise.
#pragma once

#include <cstdint>
#include <span>

namespace ember {

class TokenFilter {
public:
    virtual ~TokenFilter() = default;
    // Whether token `id` may come next.
    virtual bool allows(int32_t id) = 0;
    // Sets every entry of `logits` (one per vocabulary id) whose token is not allowed to
    // -inf; leaves the others as they are.
    virtual void mask(std::span<float> logits) = 0;
};

}  // namespace ember
