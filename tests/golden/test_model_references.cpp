// Fidelity against independent references, through the real binary: `ember eval` logits at
// every position and greedy `ember run` tokens, compared with HF transformers (float64) for
// the architecture fixtures and an exact float64 forward pass for the quantized fixtures.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "tests/support/fixtures.h"
#include "tests/support/kv_precision.h"
#include "tests/support/process.h"

namespace ember::test {
namespace {

using json = nlohmann::json;

std::string join_ids(const json& ids) {
    std::string s;
    for (const auto& id : ids) {
        if (!s.empty()) s += ',';
        s += std::to_string(id.get<int>());
    }
    return s;
}

struct Deviation {
    double max_abs = 0;  // over every reference top-5 logit and the logsumexp
    int worst_pos = -1;
};

// Runs `ember eval` over the sequence and compares each reference top-5 logit with ours. We
// ask for the top 40 so a reference top-5 token that ranks a little lower here is still
// compared by value; one that is missing altogether fails the test. (`top_k` widens that net
// where logits may move further.)
Deviation eval_deviation(const std::string& gguf, const json& seq,
                         const std::string& kv_type = "f32", int top_k = 40) {
    Deviation dev;
    const auto run = run_command({ember_binary(), "eval", "-m", gguf, "--ids", join_ids(seq["ids"]),
                                  "--top-k", std::to_string(top_k), "--kv-type", kv_type});
    EXPECT_EQ(run.status, 0) << run.err;
    std::vector<json> lines;
    for (const auto& line : split_lines(run.out)) lines.push_back(json::parse(line));
    EXPECT_EQ(lines.size(), seq["ids"].size());
    for (size_t p = 0; p < lines.size() && p < seq["ids"].size(); ++p) {
        EXPECT_EQ(lines[p]["pos"].get<size_t>(), p);
        std::map<int, double> ours;
        for (const auto& pair : lines[p]["top"]) ours[pair[0].get<int>()] = pair[1].get<double>();
        const auto& ref_ids = seq["top5_ids"][p];
        const auto& ref_logits = seq["top5_logits"][p];
        for (size_t i = 0; i < ref_ids.size(); ++i) {
            const int id = ref_ids[i].get<int>();
            auto it = ours.find(id);
            if (it == ours.end()) {
                ADD_FAILURE() << gguf << " pos " << p << ": reference top-5 token " << id
                              << " is not in our top " << top_k;
                dev.max_abs = INFINITY;
                continue;
            }
            const double d = std::fabs(it->second - ref_logits[i].get<double>());
            if (d > dev.max_abs) {
                dev.max_abs = d;
                dev.worst_pos = static_cast<int>(p);
            }
        }
        const double dl =
            std::fabs(lines[p]["logsumexp"].get<double>() - seq["logsumexp"][p].get<double>());
        if (dl > dev.max_abs) {
            dev.max_abs = dl;
            dev.worst_pos = static_cast<int>(p);
        }
    }
    return dev;
}

// Greedy generation must reproduce the reference wherever the reference's top-1 margin is
// wide enough to be unambiguous (> min_margin). Past a position where an ambiguous choice went
// the other way the continuations are no longer comparable, so the check stops there.
void check_greedy(const std::string& gguf, const json& seq, double min_margin,
                  const std::string& kv_type = "f32") {
    const auto& ref = seq["greedy_ids"];
    const auto& margins = seq["greedy_margins"];
    const auto run = run_command({ember_binary(), "run", "-m", gguf, "--ids", join_ids(seq["ids"]),
                                  "-n", std::to_string(ref.size()), "--temp", "0", "--ignore-eos",
                                  "--json", "-t", "2", "--kv-type", kv_type});
    ASSERT_EQ(run.status, 0) << run.err;
    const json out = json::parse(run.out);
    const auto& ids = out["ids"];
    ASSERT_EQ(ids.size(), ref.size());
    for (size_t i = 0; i < ref.size(); ++i) {
        if (ids[i] == ref[i]) continue;
        if (margins[i].get<double>() > min_margin) {
            ADD_FAILURE() << gguf << ": greedy token " << i << " is " << ids[i] << ", reference "
                          << ref[i] << " (margin " << margins[i] << ")";
        }
        break;
    }
}

class ArchReference : public ::testing::TestWithParam<std::string> {};

TEST_P(ArchReference, LogitsWithin2e3AndGreedyMatches) {
    const std::string arch = GetParam();
    const std::string gguf_rel = "arch/" + arch + "/" + arch + ".gguf";
    EMBER_REQUIRE_FIXTURE(gguf_rel);
    const json ref = json::parse(read_file(fixture_path("arch/" + arch + "/ref.json")));
    int checked = 0;
    for (const char* name : {"text", "chat", "long"}) {
        if (!ref["seqs"].contains(name)) continue;
        const json& seq = ref["seqs"][name];
        const Deviation dev = eval_deviation(fixture_path(gguf_rel), seq);
        EXPECT_LE(dev.max_abs, 2e-3) << arch << "/" << name << " worst at pos " << dev.worst_pos;
        std::printf("[ref] %s/%s: max |dlogit| %.2e over %zu positions\n", arch.c_str(), name,
                    dev.max_abs, seq["ids"].size());
        if (seq.contains("greedy_ids")) check_greedy(fixture_path(gguf_rel), seq, 1e-2);
        ++checked;
    }
    EXPECT_GE(checked, 2);
}

INSTANTIATE_TEST_SUITE_P(Families, ArchReference,
                         ::testing::Values("llama", "qwen2", "qwen3", "qwen3moe"));

// Each KV cache type through the real binary (`--kv-type`), held to its tolerance
// (kv_precision.h); greedy tokens must match where the reference's margin exceeds twice it.
class KvReference : public ::testing::TestWithParam<std::tuple<std::string, KvType>> {};

TEST_P(KvReference, LogitsWithinTheTypesTolerance) {
    const auto& [arch, type] = GetParam();
    const std::string gguf_rel = "arch/" + arch + "/" + arch + ".gguf";
    EMBER_REQUIRE_FIXTURE(gguf_rel);
    const json ref = json::parse(read_file(fixture_path("arch/" + arch + "/ref.json")));
    const double tolerance = kv_tolerance(type, arch);
    double worst = 0;
    for (const char* name : {"text", "chat", "long"}) {
        if (!ref["seqs"].contains(name)) continue;
        const json& seq = ref["seqs"][name];
        // Top 400: qwen3moe's q8_0 logits move by up to 0.33 (kv_precision.h), past rank 40 of
        // its closely packed logits.
        const Deviation dev = eval_deviation(fixture_path(gguf_rel), seq, kv_type_name(type), 400);
        EXPECT_LE(dev.max_abs, tolerance) << arch << "/" << name << " " << kv_type_name(type)
                                          << " worst at pos " << dev.worst_pos;
        worst = std::max(worst, dev.max_abs);
        if (seq.contains("greedy_ids")) {
            check_greedy(fixture_path(gguf_rel), seq, 2 * tolerance, kv_type_name(type));
        }
    }
    std::printf("[kv] %s %s: max |dlogit| %.2e (tolerance %.2g)\n", arch.c_str(),
                kv_type_name(type), worst, tolerance);
}

INSTANTIATE_TEST_SUITE_P(Families, KvReference,
                         ::testing::Combine(::testing::Values("llama", "qwen2", "qwen3",
                                                              "qwen3moe"),
                                            ::testing::ValuesIn(kAllKvTypes)),
                         [](const auto& param_info) {
                             return std::get<0>(param_info.param) + "_" +
                                    kv_type_name(std::get<1>(param_info.param));
                         });

struct QuantCase {
    std::string type;
    double tolerance;
};

class QuantReference : public ::testing::TestWithParam<QuantCase> {};

TEST_P(QuantReference, LogitsWithinTolerance) {
    const QuantCase c = GetParam();
    const std::string gguf_rel = "quant/qfix-" + c.type + ".gguf";
    EMBER_REQUIRE_FIXTURE(gguf_rel);
    const json ref = json::parse(read_file(fixture_path(gguf_rel + ".ref.json")));
    double worst = 0;
    for (const char* name : {"short", "long"}) {
        ASSERT_TRUE(ref["seqs"].contains(name)) << gguf_rel << ".ref.json lacks " << name;
        const Deviation dev = eval_deviation(fixture_path(gguf_rel), ref["seqs"][name]);
        worst = std::max(worst, dev.max_abs);
        EXPECT_LE(dev.max_abs, c.tolerance)
            << c.type << "/" << name << " worst at pos " << dev.worst_pos;
    }
    std::printf("[ref] %s: max |dlogit| %.4f (tolerance %.3f)\n", c.type.c_str(), worst,
                c.tolerance);
    if (ref["seqs"]["short"].contains("greedy_ids")) {
        // Each of the two top logits may move by the tolerance, so only margins wider than
        // twice the tolerance are unambiguous for quantized weights.
        check_greedy(fixture_path(gguf_rel), ref["seqs"]["short"], 2 * c.tolerance);
    }
}

INSTANTIATE_TEST_SUITE_P(
    Types, QuantReference,
    ::testing::Values(QuantCase{"F32", 2e-3}, QuantCase{"F16", 2e-3}, QuantCase{"BF16", 2e-3},
                      QuantCase{"Q8_0", 0.10}, QuantCase{"Q4_0", 0.10}, QuantCase{"Q4_1", 0.10},
                      QuantCase{"Q5_0", 0.10}, QuantCase{"Q5_1", 0.10}, QuantCase{"Q6_K", 0.10},
                      QuantCase{"Q3_K_M", 0.10}, QuantCase{"IQ4_NL", 0.10},
                      QuantCase{"Q4_K_M", 0.16}, QuantCase{"Q5_K_M", 0.16}, QuantCase{"Q2_K", 0.16},
                      // The widely used engine's own error on these files (quant README).
                      QuantCase{"IQ4_XS", 0.130}, QuantCase{"IQ3_S", 0.122},
                      QuantCase{"IQ3_M", 0.113},
                      // That engine reaches 0.070 here. With 8-bit activations this one measured
                      // 0.078 (they dominated the error); MXFP4 takes 16-bit ones (Q16_32, see
                      // blocks.h) and measures 0.023, close to exact f32 activations (0.023).
                      QuantCase{"MXFP4", 0.070}),
    [](const auto& test_info) { return test_info.param.type; });

TEST(StoriesReference, GreedyTextMatchesExactly) {
    EMBER_REQUIRE_FIXTURE("models/stories260K.gguf");
    const json ref = json::parse(read_file(fixture_path("models/stories260K.greedy.json")));
    ASSERT_TRUE(ref["add_bos"].get<bool>());
    const auto run =
        run_command({ember_binary(), "run", "-m", fixture_path("models/stories260K.gguf"), "-p",
                     ref["prompt"].get<std::string>(), "-n",
                     std::to_string(ref["n_predict"].get<int>()), "--temp", "0", "--json"});
    ASSERT_EQ(run.status, 0) << run.err;
    const json out = json::parse(run.out);
    EXPECT_EQ(ref["prompt"].get<std::string>() + out["text"].get<std::string>(),
              ref["expected_text_with_prompt"].get<std::string>());
    // The prompt was encoded with BOS, as the reference says.
    EXPECT_EQ(out["prompt_ids"][0].get<int>(), 1);
}

}  // namespace
}  // namespace ember::test
