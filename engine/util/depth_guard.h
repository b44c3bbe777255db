// Bounding the depth of a recursive walk over untrusted input (template statements, macro
// calls, JSON Schema subschemas and $ref hops, GBNF groups): one level counted for as long as
// a guard lives, and a clear error past the limit instead of a stack overflow.
#pragma once

#include <utility>

namespace ember {

class DepthGuard {
public:
    // Adds one level to `depth`; past `limit`, calls `too_deep()`, which must throw (the
    // level is given back first, so the counter stays right however the error is caught).
    template <typename TooDeep>
    DepthGuard(int& depth, int limit, TooDeep&& too_deep) : depth_(depth) {
        if (++depth_ > limit) {
            --depth_;
            std::forward<TooDeep>(too_deep)();
        }
    }
    ~DepthGuard() { --depth_; }
    DepthGuard(const DepthGuard&) = delete;
    DepthGuard& operator=(const DepthGuard&) = delete;

private:
    int& depth_;
};

}  // namespace ember
