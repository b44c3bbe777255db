// ember bench --spec ngram: decode speed with n-gram speculation against plain decoding, in
// one run, on two kinds of workload: high-overlap (the reply repeats text of the prompt) and
// no-overlap (fresh text). Greedy, so the ids of the two rows of one prompt must be equal.
#include "app/bench/bench_spec.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "app/commands/commands.h"
#include "engine/generate/generate.h"
#include "engine/generate/ngram.h"
#include "engine/generate/reply_router.h"
#include "engine/model/model.h"
#include "engine/model/state.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/util/thread_pool.h"

namespace ember::app {

namespace {

using json = nlohmann::ordered_json;

struct Workload {
    const char* kind;  // high-overlap (the reply copies the prompt) or no-overlap (fresh text)
    const char* task;  // what the prompt asks for
    std::string prompt;
    // A presence penalty over the last 64 tokens: random-weight models fall into short loops
    // whatever the prompt, which makes every reply high-hit; penalized, they write fresh
    // text, and the row shows what speculation costs when its drafts are rejected. Greedy
    // still, and applied per position as plain decoding does, so the ids stay comparable.
    float presence_penalty = 0.0f;
};

constexpr float kFreshTextPenalty = 4.0f;

std::vector<Workload> workloads() {
    const std::string paragraph =
        "The committee met on Tuesday to review the budget for the coming year. After a long "
        "discussion of the costs of maintenance, staffing and new equipment, the members agreed "
        "to postpone the vote until the treasurer could present revised figures.";
    const std::string code =
        "def mean(values):\n    total = 0\n    for v in values:\n        total += v\n"
        "    return total / len(values)\n";
    const std::string list =
        "1. Preheat the oven to 200 degrees.\n2. Cut the potatoes into wedges.\n3. Toss them "
        "with olive oil and salt.\n4. Spread them on a baking tray.\n5. Roast for 35 minutes, "
        "turning once.\n";
    const std::string question =
        "Why does the moon show phases, and why do we always see the same side of it?";
    // Prompts a base model continues as well as a chat model answers: each ends where the
    // copy should begin.
    return {
        {"high-overlap", "repeat a paragraph",
         "Repeat this paragraph exactly.\n\n" + paragraph + "\n\n" + paragraph + "\n\n"},
        {"high-overlap", "reindent code",
         "Reformat this code with four-space indents.\n\n" + code + "\n" + code},
        {"high-overlap", "edit a code block",
         "Rename the function mean to average in this code.\n\nBefore:\n" + code + "\nAfter:\n"},
        {"high-overlap", "renumber a list",
         "Renumber this list so that it starts at 10.\n\n" + list + "\nRenumbered:\n10."},
        {"high-overlap", "quote the question",
         "Answer the question, quoting it first.\n\nQuestion: " + question +
             "\n\nAnswer: You asked: \""},
        {"no-overlap", "write a story",
         "Write a short story about a lighthouse keeper who finds a message in a "
         "bottle on a stormy night."},
        {"no-overlap", "explain", "Explain how a refrigerator keeps food cold, in plain words."},
        {"no-overlap", "write a story (penalized)",
         "Write a short story about a lighthouse keeper who finds a message in a "
         "bottle on a stormy night.",
         kFreshTextPenalty},
        {"no-overlap", "explain (penalized)",
         "Explain how a refrigerator keeps food cold, in plain words.", kFreshTextPenalty},
    };
}

struct Row {
    double decode_tps = 0;
    SpeculationStats spec;
    std::vector<int32_t> ids;
};

// speculation.enabled: decode with n-gram speculation, or plainly.
Row run_row(const Model& model, ThreadPool& pool, const std::vector<int32_t>& prompt, int64_t n_gen,
            const SpeculationOptions& speculation, KvType kv_type, float presence_penalty) {
    auto state =
        make_state(model.config(), static_cast<int64_t>(prompt.size()) + n_gen + 8, kv_type);
    SamplingParams greedy;
    greedy.temperature = 0.0f;
    greedy.presence_penalty = presence_penalty;
    Sampler sampler(greedy);
    NgramTable table;
    table.add(prompt);
    GenerateOptions o;
    o.max_tokens = n_gen;
    o.ignore_eos = true;  // equal lengths, so the speeds compare like for like
    o.speculation = speculation;
    o.ngram = &table;
    GenerateResult g = generate(model, *state, pool, sampler, prompt, o, nullptr);
    Row r;
    r.spec = g.stats.speculation;
    // Tokens after the first (the first comes from the prefill), over the time after it.
    r.decode_tps = g.stats.decode_seconds > 0
                       ? static_cast<double>(g.ids.size() - 1) / g.stats.decode_seconds
                       : 0.0;
    r.ids = std::move(g.ids);
    return r;
}

}  // namespace

double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const size_t m = v.size() / 2;
    return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

int run_bench_spec(const BenchSpecArgs& a) {
    auto model = load_model(a.model, a.activations, a.gpu);
    ThreadPool pool(a.threads);
    json rows = json::array();
    bool all_equal = true;
    SpeculationOptions plain = a.speculation, ngram = a.speculation;
    plain.enabled = false;
    ngram.enabled = true;
    for (const Workload& w : workloads()) {
        EncodeOptions enc;
        enc.add_bos = model->tokenizer().add_bos();
        const auto prompt = model->tokenizer().encode(w.prompt, enc);
        // Warm-up once (page cache, pool), then off and ngram runs alternating, so a noisy
        // neighbour hits both alike; each row reports its median speed.
        run_row(*model, pool, prompt, 8, plain, a.kv_type, w.presence_penalty);
        Row off, on;
        std::vector<double> off_tps, on_tps;
        for (int rep = 0; rep < std::max(1, a.reps); ++rep) {
            off = run_row(*model, pool, prompt, a.gen, plain, a.kv_type, w.presence_penalty);
            on = run_row(*model, pool, prompt, a.gen, ngram, a.kv_type, w.presence_penalty);
            all_equal = all_equal && off.ids == on.ids;
            off_tps.push_back(off.decode_tps);
            on_tps.push_back(on.decode_tps);
        }
        off.decode_tps = median(off_tps);
        on.decode_tps = median(on_tps);
        for (const auto* row : {&off, &on}) {
            rows.push_back(
                {{"workload", w.kind},
                 {"task", w.task},
                 {"prompt", w.prompt},
                 {"presence_penalty", w.presence_penalty},
                 {"spec", row == &off ? "off" : "ngram"},
                 {"decode_tps", row->decode_tps},
                 {"acceptance_rate", row->spec.acceptance_rate()},
                 {"drafted", row->spec.drafted},
                 {"accepted", row->spec.accepted},
                 // Random-weight models fall into loops whatever the prompt; such a
                 // row is high-hit even when its prompt is fresh text.
                 {"reply_loops", tokens_loop(off.ids)},
                 {"speedup",
                  row == &off || off.decode_tps <= 0 ? 1.0 : on.decode_tps / off.decode_tps},
                 {"ids", row->ids}});
        }
    }
    if (a.json_out) {
        std::printf("%s\n", json{{"model", a.model},
                                 {"threads", a.threads},
                                 {"reps", a.reps},
                                 {"gen_tokens", a.gen},
                                 {"ids_equal", all_equal},
                                 {"rows", rows}}
                                .dump()
                                .c_str());
    } else {
        std::printf("%-13s %-26s %-7s %-6s %10s %10s %8s  %s\n", "workload", "task", "penalty",
                    "spec", "decode t/s", "accept", "speedup", "reply loops");
        for (const auto& r : rows) {
            std::printf("%-13s %-26s %-7.1f %-6s %10.1f %10.2f %8.2f  %s\n",
                        r["workload"].get<std::string>().c_str(),
                        r["task"].get<std::string>().c_str(), r["presence_penalty"].get<double>(),
                        r["spec"].get<std::string>().c_str(), r["decode_tps"].get<double>(),
                        r["acceptance_rate"].get<double>(), r["speedup"].get<double>(),
                        r["reply_loops"].get<bool>() ? "yes (high-hit)" : "no");
        }
        std::printf("ids of off and ngram rows equal: %s\n", all_equal ? "yes" : "NO");
    }
    return all_equal ? 0 : 1;
}

}  // namespace ember::app
