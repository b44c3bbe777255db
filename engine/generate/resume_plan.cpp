#include "engine/generate/resume_plan.h"

#include <algorithm>

namespace ember {

std::string_view resume_path_name(ResumePath path) {
    switch (path) {
        case ResumePath::None:
            return "none";
        case ResumePath::Restore:
            return "restore";
        case ResumePath::Partial:
            return "partial";
        case ResumePath::Recompute:
            return "recompute";
    }
    return "none";
}

namespace {

double span_seconds(const RestoreSpan& span) {
    if (span.bytes_per_second <= 0) return 0;  // unknown: free, so it is restored
    return static_cast<double>(std::max<int64_t>(0, span.bytes)) / span.bytes_per_second;
}

}  // namespace

ResumeChoice choose_resume(int64_t have, std::span<const RestoreSpan> offer,
                           double prefill_tokens_per_second) {
    ResumeChoice best;
    best.restore_to = have;
    // Only spans that reach further count; a store offering nothing leaves the path None.
    int64_t end = have;
    size_t usable = 0;
    for (const RestoreSpan& s : offer) {
        if (s.end <= end) break;
        end = s.end;
        ++usable;
    }
    if (usable == 0) return best;
    const double speed = prefill_tokens_per_second > 0 ? prefill_tokens_per_second
                                                       : PrefillRate::kDefaultTokensPerSecond;
    const auto recompute = [&](int64_t from) { return static_cast<double>(end - from) / speed; };
    best.all_recompute_seconds = recompute(have);
    best.recompute_seconds = best.all_recompute_seconds;
    best.path = ResumePath::Recompute;
    double best_total = best.all_recompute_seconds;
    // Restoring the first k spans, for every k: the plan's cost is their reads (each place's
    // fixed cost once) plus evaluating what is left. Costs that are linear in the tokens
    // within a span make its ends the only cuts worth pricing.
    double restore = 0;
    int64_t at = have;
    for (size_t k = 0; k < usable; ++k) {
        const RestoreSpan& s = offer[k];
        if (k == 0 || offer[k - 1].source != s.source) restore += std::max(0.0, s.fixed_seconds);
        restore += span_seconds(s);
        at = s.end;
        const double total = restore + recompute(at);
        best.all_restore_seconds = restore;
        if (total <= best_total) {  // a tie restores
            best_total = total;
            best.restore_to = at;
            best.spans_used = k + 1;
            best.restore_seconds = restore;
            best.recompute_seconds = recompute(at);
            best.path = k + 1 == usable ? ResumePath::Restore : ResumePath::Partial;
        }
    }
    return best;
}

void PrefillRate::add(int64_t tokens, double seconds) {
    if (tokens < kMinTokens || seconds <= 0) return;
    // Each measurement halves the weight of those before it.
    tokens_ = tokens_ * 0.5 + static_cast<double>(tokens);
    seconds_ = seconds_ * 0.5 + seconds;
}

double PrefillRate::tokens_per_second() const {
    return seconds_ > 0 ? tokens_ / seconds_ : assumed_;
}

}  // namespace ember
