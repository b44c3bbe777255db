// Reading the fixtures' HF float64 references (ref.json: per sequence `ids`, `top5_ids`,
// `top5_logits`, `logsumexp`) and measuring one position's logits against them; shared by the
// golden tests of every family.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <vector>

namespace ember::test {

// A sequence's token ids (`field` of the reference's sequence object).
inline std::vector<int32_t> ids_of(const nlohmann::json& seq, const char* field = "ids") {
    std::vector<int32_t> ids;
    for (const auto& id : seq[field]) ids.push_back(id.get<int32_t>());
    return ids;
}

// Largest deviation of one position's logits ([n_vocab]) from the reference's top-5 and
// logsumexp at that position.
inline double position_deviation(std::span<const float> logits, const nlohmann::json& seq,
                                 size_t pos) {
    double worst = 0;
    const auto& ids = seq["top5_ids"][pos];
    const auto& ref = seq["top5_logits"][pos];
    for (size_t i = 0; i < ids.size(); ++i) {
        const double ours = logits[static_cast<size_t>(ids[i].get<int>())];
        worst = std::max(worst, std::fabs(ours - ref[i].get<double>()));
    }
    const float max = *std::max_element(logits.begin(), logits.end());
    double sum = 0;
    for (float l : logits) sum += std::exp(static_cast<double>(l - max));
    const double lse = max + std::log(sum);
    return std::max(worst, std::fabs(lse - seq["logsumexp"][pos].get<double>()));
}

}  // namespace ember::test
