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

#include "engine/model/forward.h"
#include "engine/model/model.h"
#include "engine/model/state.h"
#include "engine/util/thread_pool.h"

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

// Feeds `ids` to a fresh state (KV cache of `kv_type`) in batches of the given sizes (the last
// size repeats) and returns the logits of every position, [ids x n_vocab].
inline std::vector<float> logits_in_batches(const Model& model, ThreadPool& pool,
                                            const std::vector<int32_t>& ids,
                                            const std::vector<int64_t>& sizes,
                                            KvType kv_type = KvType::F32) {
    const int64_t n_vocab = model.config().n_vocab;
    auto state = make_state(model.config(), static_cast<int64_t>(ids.size()) + 64, kv_type);
    std::vector<float> all(ids.size() * static_cast<size_t>(n_vocab));
    size_t at = 0;
    for (size_t b = 0; at < ids.size(); ++b) {
        const size_t len =
            std::min(static_cast<size_t>(sizes[std::min(b, sizes.size() - 1)]), ids.size() - at);
        auto logits =
            forward(model, *state, pool, std::span(ids).subspan(at, len), LogitsWanted::All);
        std::copy(logits.begin(), logits.end(), all.begin() + static_cast<int64_t>(at) * n_vocab);
        at += len;
    }
    return all;
}

// Largest position_deviation over a sequence's logits ([ids x n_vocab]).
inline double sequence_deviation(const std::vector<float>& all, int64_t n_vocab,
                                 const nlohmann::json& seq) {
    const size_t width = static_cast<size_t>(n_vocab);
    double worst = 0;
    for (size_t p = 0; p < seq["ids"].size(); ++p) {
        worst =
            std::max(worst, position_deviation(std::span(all).subspan(p * width, width), seq, p));
    }
    return worst;
}

}  // namespace ember::test
