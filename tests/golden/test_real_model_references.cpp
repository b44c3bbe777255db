// Trained models against their own float64 references (tests/data/<model>/ref.json, made by
// scripts/real_model_refs.py with HF transformers on the file's dequantized weights, RoPE's
// angles in float64 too), one table row a model:
//   gemma-3-270m           Gemma 3 270M base, Q4_K_M: a short text, a three-turn chat and 1,600
//                          tokens of prose (past the 512-token sliding window three times);
//   smollm2-135m-instruct  SmolLM2 135M Instruct, Q4_1 (the default model): a one-turn chat, a
//                          three-turn chat (both in the file's own template) and 785 tokens of
//                          plain English.
// On the DEFAULT activation path with an f32 KV cache, over every position of the three
// sequences, Δ = Ember's log-softmax - the reference's over the reference's top-5: median |Δ|
// <= 0.005, max <= 0.1, and Ember's top-1 is the reference's at >= 99.5% of the positions (a
// model may add a limit of its own on the raw logits: Gemma's 2e-3). The same whether the tokens
// arrive in one call, one by one or in uneven batches, and bit for bit equal across those
// schedules (speculation's contract), checked per position through a hash of the row. With the
// default KV type (f16): no worse than 1.25x what f16 storage itself costs the float64 model
// (kv_f16.json). Greedy continuations identical where the reference margin is clear.
//
// Logits are checked as they come, a batch at a time: a long sequence's full logits would be
// 1.7 GB per schedule.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <ostream>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/model/forward.h"
#include "engine/model/model.h"
#include "engine/model/state.h"
#include "engine/tensor/traits.h"
#include "engine/util/thread_pool.h"
#include "tests/support/fixtures.h"
#include "tests/support/kv_precision.h"
#include "tests/support/reference_logits.h"

namespace ember::test {
namespace {

using json = nlohmann::json;

// The limits every model is held to on the default activation path, f32 KV (issue 38).
constexpr double kMaxLogSoftmax = 0.1;
constexpr double kMedianLogSoftmax = 0.005;
constexpr double kMinTop1 = 0.995;

struct ModelCase {
    RealModel model;
    const char* arch;
    int64_t n_layer;
    std::vector<const char*> seqs;    // the reference's sequences
    std::vector<const char*> greedy;  // those with greedy continuations
    size_t min_positions;             // all sequences together: a truncated reference fails
    // Max |top-5 logit or logsumexp - reference| (position_deviation) of the exact path (f32
    // activations) with f32 KV; 0: not held.
    double max_logit_deviation;
    // Two top logits closer than this may swap without a fault (each moves by up to half).
    double greedy_flip_margin;
    // --activations quantized must measure worse than this on the chat (why exact is the
    // default); 0: not held.
    double quantized_above;
};

// gtest prints a failing row by its name.
void PrintTo(const ModelCase& c, std::ostream* os) {
    *os << c.model.name;
}

const ModelCase kCases[] = {
    {kGemma3_270m,
     "gemma3",
     18,
     {"text", "chat", "long"},
     {"text", "chat"},
     1600,
     2e-3,
     4e-3,
     2e-3},
    {kSmolLM2_135m,
     "llama",
     30,
     {"chat1", "chat3", "long"},
     {"chat1", "chat3"},
     900,
     2e-3,
     2 * kMaxLogSoftmax,
     0},
};

// FNV-1a of a logits row's bytes: equal rows, equal hashes (bitwise comparison without keeping
// 1 MB per position).
uint64_t row_hash(std::span<const float> row) {
    uint64_t h = 1469598103934665603ull;
    const auto* bytes = reinterpret_cast<const unsigned char*>(row.data());
    for (size_t i = 0; i < row.size_bytes(); ++i) h = (h ^ bytes[i]) * 1099511628211ull;
    return h;
}

// What a pass over one or more sequences measured.
struct Stats {
    double worst_logit = 0;      // largest position_deviation
    double worst = 0;            // largest |Δ| of the log-softmax
    std::string worst_at;        // "sequence:position" of `worst`
    std::vector<double> deltas;  // every |Δ| (5 a position)
    size_t positions = 0;
    size_t same_top1 = 0;
    std::vector<uint64_t> hashes;  // [positions] row hashes

    double median() const {
        if (deltas.empty()) return 0;
        std::vector<double> d = deltas;
        const auto mid = d.begin() + static_cast<std::ptrdiff_t>(d.size() / 2);
        std::nth_element(d.begin(), mid, d.end());
        return *mid;
    }
    double top1() const { return positions ? static_cast<double>(same_top1) / positions : 0; }
    void add(const Stats& o) {
        worst_logit = std::max(worst_logit, o.worst_logit);
        if (o.worst > worst || worst_at.empty()) {
            worst = std::max(worst, o.worst);
            worst_at = o.worst_at;
        }
        deltas.insert(deltas.end(), o.deltas.begin(), o.deltas.end());
        positions += o.positions;
        same_top1 += o.same_top1;
    }
    std::string summary() const {
        char line[200];
        std::snprintf(line, sizeof line,
                      "max |dlogsoftmax| %.2e (at %s), median %.2e, top-1 %.2f%% of %zu, "
                      "max |dlogit| %.2e",
                      worst, worst_at.c_str(), median(), 100 * top1(), positions, worst_logit);
        return line;
    }
};

// One position's row against the reference: the log-softmax |Δ| over the top-5, the top-1.
void measure(std::span<const float> row, const json& seq, size_t pos, const char* name, Stats& s) {
    s.worst_logit = std::max(s.worst_logit, position_deviation(row, seq, pos));
    const float max = *std::max_element(row.begin(), row.end());
    double sum = 0;
    for (float l : row) sum += std::exp(static_cast<double>(l - max));
    const double lse = max + std::log(sum);
    const double ref_lse = seq["logsumexp"][pos].get<double>();
    const json& ids = seq["top5_ids"][pos];
    const json& logits = seq["top5_logits"][pos];
    for (size_t i = 0; i < ids.size(); ++i) {
        const double ours = row[ids[i].get<size_t>()] - lse;
        const double d = std::fabs(ours - (logits[i].get<double>() - ref_lse));
        s.deltas.push_back(d);
        if (d > s.worst || s.worst_at.empty()) {
            s.worst = std::max(s.worst, d);
            s.worst_at = std::string(name) + ":" + std::to_string(pos);
        }
    }
    const auto top = static_cast<int64_t>(std::max_element(row.begin(), row.end()) - row.begin());
    s.same_top1 += top == ids[0].get<int64_t>();
    ++s.positions;
}

class RealModelReferences : public ::testing::TestWithParam<ModelCase> {
protected:
    void SetUp() override {
        const ModelCase& c = GetParam();
        EMBER_REQUIRE_REAL_MODEL_OF(c.model);
        const std::string path = real_model_path(c.model);
        Slot& slot = slot_for(c);
        if (!slot.model) {
            slot.model = Model::load(path);
            slot.ref = std::make_unique<json>(
                json::parse(read_file(real_model_reference("ref.json", c.model))));
        }
        model_ = slot.model.get();
        ref_ = slot.ref.get();
    }

    // Feeds sequence `name` in batches of `sizes` (the last repeats) and measures every position.
    Stats run(const Model& model, const char* name, const std::vector<int64_t>& sizes,
              KvType kv_type) {
        const json& seq = (*ref_)["seqs"][name];
        const std::vector<int32_t> ids = ids_of(seq);
        const int64_t n_vocab = model.config().n_vocab;
        auto state = make_state(model.config(), static_cast<int64_t>(ids.size()) + 64, kv_type);
        Stats stats;
        size_t at = 0;
        for (size_t b = 0; at < ids.size(); ++b) {
            const size_t len = std::min(static_cast<size_t>(sizes[std::min(b, sizes.size() - 1)]),
                                        ids.size() - at);
            const std::span<const float> logits =
                forward(model, *state, pool_, std::span(ids).subspan(at, len), LogitsWanted::All);
            for (size_t i = 0; i < len; ++i) {
                const std::span<const float> row(logits.data() + i * n_vocab,
                                                 static_cast<size_t>(n_vocab));
                measure(row, seq, at + i, name, stats);
                stats.hashes.push_back(row_hash(row));
            }
            at += len;
        }
        return stats;
    }

    // Every sequence in one call.
    Stats run_all(const Model& model, KvType kv_type) {
        Stats all;
        for (const char* name : GetParam().seqs) all.add(run(model, name, {kMaxBatch}, kv_type));
        return all;
    }

    // The limits on a pass over every sequence.
    static void expect_within_limits(const Stats& s, const std::string& what) {
        EXPECT_LE(s.worst, kMaxLogSoftmax) << what << ": " << s.summary();
        EXPECT_LE(s.median(), kMedianLogSoftmax) << what << ": " << s.summary();
        EXPECT_GE(s.top1(), kMinTop1) << what << ": " << s.summary();
    }

    const Model* model_ = nullptr;
    const json* ref_ = nullptr;
    ThreadPool pool_{2};

private:
    // One loaded model and reference per row, kept for the suite (a load per test would
    // double the time).
    struct Slot {
        std::unique_ptr<Model> model;
        std::unique_ptr<json> ref;
    };
    static Slot& slot_for(const ModelCase& c) {
        static Slot slots[std::size(kCases)];
        for (size_t i = 0; i < std::size(kCases); ++i) {
            if (std::string(kCases[i].model.name) == c.model.name) return slots[i];
        }
        throw std::logic_error("not a row of kCases");
    }
};

TEST_P(RealModelReferences, IsTheFileTheReferenceWasMadeFrom) {
    const ModelCase& c = GetParam();
    EXPECT_EQ(model_->config().arch, c.arch);
    EXPECT_EQ(model_->config().n_layer, c.n_layer);
    EXPECT_EQ((*ref_)["model"].get<std::string>(), c.model.file_name);
    EXPECT_EQ((*ref_)["dtype"].get<std::string>(), "float64");
    size_t positions = 0;
    for (const char* name : c.seqs) positions += (*ref_)["seqs"][name]["ids"].size();
    EXPECT_GE(positions, c.min_positions);
    // Faithful by default: 16-bit blocks where the CPU has VNNI, exact f32 elsewhere, never the
    // 8-bit blocks that lose these models' activation outliers.
    EXPECT_EQ(model_->activations(),
              active_kernels().wide_simd ? Activations::Wide : Activations::Exact);
    if (std::string(c.arch) == "gemma3") {
        EXPECT_EQ(model_->config().sliding_window, 512);
        // The long sequence reaches past the sliding window.
        EXPECT_GE((*ref_)["seqs"]["long"]["ids"].size(), 1500u);
    }
}

TEST_P(RealModelReferences, DefaultPathWithinTheLimitsHoweverTheTokensAreBatched) {
    const ModelCase& c = GetParam();
    struct Schedule {
        const char* name;
        std::vector<int64_t> sizes;
    };
    const Schedule schedules[] = {{"one call", {kMaxBatch}},
                                  {"one by one", {1}},
                                  {"5,3,17,2", {5, 3, 17, 2}},
                                  {"1,7,64,rest", {1, 7, 64, 1000}}};
    std::printf("[ref] %s: default activations are %s\n", c.model.name,
                activations_name(model_->activations()));
    std::vector<uint64_t> first;  // the one call's row hashes
    for (const Schedule& s : schedules) {
        Stats all;
        for (const char* name : c.seqs) {
            const Stats pass = run(*model_, name, s.sizes, KvType::F32);
            std::printf("[ref] %s/%s (%s): %s\n", c.model.name, name, s.name,
                        pass.summary().c_str());
            if (c.max_logit_deviation > 0 && model_->activations() == Activations::Exact) {
                EXPECT_LE(pass.worst_logit, c.max_logit_deviation) << name << " (" << s.name << ")";
            }
            all.add(pass);
            all.hashes.insert(all.hashes.end(), pass.hashes.begin(), pass.hashes.end());
        }
        std::printf("[ref] %s, all sequences (%s): %s\n", c.model.name, s.name,
                    all.summary().c_str());
        expect_within_limits(all, std::string(c.model.name) + " (" + s.name + ")");
        if (&s == schedules) {
            first = all.hashes;
            continue;
        }
        ASSERT_EQ(all.hashes.size(), first.size());
        size_t differing = 0, first_differing = first.size();
        for (size_t p = 0; p < first.size(); ++p) {
            if (all.hashes[p] != first[p]) {
                ++differing;
                first_differing = std::min(first_differing, p);
            }
        }
        EXPECT_EQ(differing, 0u) << c.model.name << ": " << s.name << " differs from one call at "
                                 << differing << " positions (the first: " << first_differing
                                 << " of the sequences end to end)";
    }
}

// An f16 cache rounds every K and V element to 11 bits; on real weights that alone moves the
// float64 model's logits (kv_f16.json: the reference script's float64 forward with K and V
// rounded to f16; Gemma 3 270M: up to 0.216). Ember's f16 cache is held to that cost with a
// quarter's room (its f32 K/V rows differ from float64 ones in their last bits, so their
// roundings differ), and never to less than what the f32 cache is held to.
TEST_P(RealModelReferences, DefaultKvTypeWithinWhatF16StorageCosts) {
    const ModelCase& c = GetParam();
    const json kv_f16 = json::parse(read_file(real_model_reference("kv_f16.json", c.model)));
    Stats all;
    double storage_max = 0, storage_median = 0, storage_top1 = 1;
    for (const char* name : c.seqs) {
        const double storage_cost = kv_f16["seqs"][name].get<double>();
        const Stats pass = run(*model_, name, {kMaxBatch}, KvType::F16);
        const double limit = std::max(kv_tolerance(KvType::F16, c.arch), 1.25 * storage_cost);
        std::printf("[kv] %s/%s f16: %s (f16 storage in float64: max |dlogit| %.2e)\n",
                    c.model.name, name, pass.summary().c_str(), storage_cost);
        // The raw-logit rule holds a reference made before the log-softmax measure (Gemma's);
        // the others are held in that measure below.
        if (!kv_f16.contains("log_softmax")) {
            EXPECT_LE(pass.worst_logit, limit) << name << ": " << pass.summary();
        }
        if (kv_f16.contains("log_softmax")) {
            const json& cost = kv_f16["log_softmax"][name];
            storage_max = std::max(storage_max, cost["max"].get<double>());
            storage_median = std::max(storage_median, cost["median"].get<double>());
            storage_top1 = std::min(storage_top1, cost["top1_agreement"].get<double>());
        }
        all.add(pass);
    }
    // The log-softmax measure: the f32 limits, or what f16 storage costs float64 in the same
    // measure (its worst sequence) with a quarter's room, whichever is looser. A reference
    // without that measure (Gemma's, made before it) holds the maximum through the raw-logit
    // rule above only.
    const bool measured = kv_f16.contains("log_softmax");
    const double max_limit = std::max(kMaxLogSoftmax, 1.25 * storage_max);
    const double median_limit = std::max(kMedianLogSoftmax, 1.25 * storage_median);
    const double top1_limit = std::min(kMinTop1, storage_top1 - 0.005);
    std::printf("[kv] %s, all sequences f16: %s (limits %s, %.3g, %.2f%%)\n", c.model.name,
                all.summary().c_str(), measured ? std::to_string(max_limit).c_str() : "-",
                median_limit, 100 * top1_limit);
    if (measured) {
        EXPECT_LE(all.worst, max_limit) << all.summary();
    }
    EXPECT_LE(all.median(), median_limit) << all.summary();
    EXPECT_GE(all.top1(), top1_limit) << all.summary();
}

TEST_P(RealModelReferences, GreedyContinuationsMatchWhereTheMarginIsClear) {
    const ModelCase& c = GetParam();
    for (const char* name : c.greedy) {
        const json& seq = (*ref_)["seqs"][name];
        const std::vector<int32_t> prompt = ids_of(seq);
        const std::vector<int32_t> expected = ids_of(seq, "greedy_ids");
        auto state =
            make_state(model_->config(), static_cast<int64_t>(prompt.size() + expected.size()) + 8);
        std::span<const float> logits = forward(*model_, *state, pool_, prompt, LogitsWanted::Last);
        size_t matched = 0;
        for (size_t i = 0; i < expected.size(); ++i) {
            const auto best = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) -
                                                   logits.begin());
            if (best != expected[i]) {
                EXPECT_LE(seq["greedy_margins"][i].get<double>(), c.greedy_flip_margin)
                    << name << ": greedy token " << i << " is " << best << ", reference "
                    << expected[i];
                break;  // past an ambiguous choice the continuations part
            }
            ++matched;
            const int32_t next[] = {best};
            logits = forward(*model_, *state, pool_, next, LogitsWanted::Last);
        }
        std::printf("[ref] %s/%s greedy: %zu of %zu tokens as the reference (%s)\n", c.model.name,
                    name, matched, expected.size(),
                    json(seq["greedy_text"].get<std::string>().substr(0, 40)).dump().c_str());
        EXPECT_GE(matched, 8u) << name << ": the first greedy tokens have clear margins";
    }
}

// Each path measured on its own: exact f32 activations (held to the limits: they are the
// faithful path) and 8-bit ones (--activations quantized: printed, and held only to the bound
// they reach, so a regression in either path shows).
TEST_P(RealModelReferences, ExactAndQuantizedActivationsMeasured) {
    const ModelCase& c = GetParam();
    if (model_->activations() != Activations::Exact) {  // else the default path's test did it
        LoadOptions exact_options;
        exact_options.activations = ActivationChoice::Exact;
        const auto exact = Model::load(real_model_path(c.model), exact_options);
        ASSERT_EQ(exact->activations(), Activations::Exact);
        const Stats e = run_all(*exact, KvType::F32);
        std::printf("[ref] %s, exact activations, f32 KV: %s\n", c.model.name, e.summary().c_str());
        expect_within_limits(e, std::string(c.model.name) + " exact");
        if (c.max_logit_deviation > 0) {
            EXPECT_LE(e.worst_logit, c.max_logit_deviation) << e.summary();
        }
    }

    LoadOptions quantized_options;
    quantized_options.activations = ActivationChoice::Quantized;
    const auto quantized = Model::load(real_model_path(c.model), quantized_options);
    ASSERT_EQ(quantized->activations(), Activations::Quantized);
    const Stats q = run_all(*quantized, KvType::F32);
    std::printf("[ref] %s, 8-bit activations, f32 KV: %s\n", c.model.name, q.summary().c_str());
    EXPECT_LE(q.worst, 3.0) << q.summary();
    if (c.quantized_above > 0) {
        EXPECT_GT(q.worst_logit, c.quantized_above) << q.summary();
    }
}

INSTANTIATE_TEST_SUITE_P(Models, RealModelReferences, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<ModelCase>& param_info) {
                             std::string name = param_info.param.model.name;
                             for (char& ch : name) {
                                 if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                             }
                             return name;
                         });

}  // namespace
}  // namespace ember::test
