// Reading the fixtures' HF float64 references (ref.json: per sequence `ids`, `top5_ids`,
// `top5_logits`, `logsumexp`) and measuring one position's logits against them; shared by the
// golden tests of every family.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "engine/model/forward.h"
#include "engine/model/model.h"
#include "engine/model/state.h"
#include "engine/util/thread_pool.h"
#include "tests/support/kv_precision.h"

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

// The KV types' fidelity (kv_precision.h): each named sequence of `seqs` in one call (batches
// of `max_batch`) within kv_tolerance(type, model), and `exact_seq` in batches of at most 17
// bit for bit the one-by-one logits whatever the cache holds. Prints one "[kv]" line per type.
inline void check_each_kv_type(const Model& m, ThreadPool& pool, const nlohmann::json& seqs,
                               std::initializer_list<const char*> names, const char* exact_seq,
                               const std::string& model, int64_t max_batch) {
    for (const KvType type : kAllKvTypes) {
        double worst = 0;
        for (const char* name : names) {
            const nlohmann::json& seq = seqs[name];
            const std::vector<int32_t> ids = ids_of(seq);
            const std::vector<float> all = logits_in_batches(m, pool, ids, {max_batch}, type);
            const double dev = sequence_deviation(all, m.config().n_vocab, seq);
            EXPECT_LE(dev, kv_tolerance(type, model))
                << model << "/" << name << " " << kv_type_name(type);
            worst = std::max(worst, dev);
            if (std::string(name) == exact_seq) {
                const auto small = logits_in_batches(m, pool, ids, {5, 3, 17, 2}, type);
                const auto single = logits_in_batches(m, pool, ids, {1}, type);
                EXPECT_EQ(0, std::memcmp(small.data(), single.data(), small.size() * sizeof(float)))
                    << model << "/" << name << " " << kv_type_name(type)
                    << ": batches of <= 17 differ from one by one";
            }
        }
        std::printf("[kv] %s %s: max |dlogit| %.2e (tolerance %.2g)\n", model.c_str(),
                    kv_type_name(type), worst, kv_tolerance(type, model));
    }
}

}  // namespace ember::test
