#include "app/cli/did_you_mean.h"

#include <algorithm>

namespace ember::app {

size_t edit_distance(const std::string& a, const std::string& b) {
    // Rows of the optimal-string-alignment table; names are short, so three rows suffice.
    std::vector<size_t> before(b.size() + 1), previous(b.size() + 1), current(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) previous[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
        current[0] = i;
        for (size_t j = 1; j <= b.size(); ++j) {
            const size_t substitution = previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
            current[j] = std::min({previous[j] + 1, current[j - 1] + 1, substitution});
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
                current[j] = std::min(current[j], before[j - 2] + 1);
            }
        }
        before.swap(previous);
        previous.swap(current);
    }
    return previous[b.size()];
}

std::string nearest_name(const std::string& typed, const std::vector<std::string>& candidates) {
    const size_t limit = std::clamp<size_t>(typed.size() / 3, 1, 3);
    std::string best;
    size_t best_distance = limit + 1;
    bool tie = false;
    for (const auto& candidate : candidates) {
        if (candidate == typed) continue;
        const size_t d = edit_distance(typed, candidate);
        if (d < best_distance) {
            best = candidate;
            best_distance = d;
            tie = false;
        } else if (d == best_distance && candidate != best) {
            tie = true;
        }
    }
    return tie ? std::string() : best;
}

}  // namespace ember::app
