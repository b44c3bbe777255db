#include "app/bench/bench_streams.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "app/bench/bench_spec.h"
#include "app/models/load_model.h"
#include "engine/model/forward.h"
#include "engine/model/model.h"
#include "engine/model/state.h"
#include "engine/util/thread_pool.h"

namespace ember::app {

namespace {

using Clock = std::chrono::steady_clock;

// N conversations, each after its own prompt, stepped together `gen` times (each takes its
// greedy token); the seconds of the steps. The greedy picks (a scan of n x n_vocab logits on one
// core: a few milliseconds at 16 streams of a 128k vocabulary, which a server spreads over its
// requests' threads) are the harness's work, not the engine's, and stay outside the timing.
double time_steps(const Model& model, ThreadPool& pool, const BenchStreamsArgs& a, int n, int rep) {
    const ModelConfig& c = model.config();
    std::vector<std::unique_ptr<InferenceState>> states;
    std::vector<InferenceState*> batch;
    std::vector<int32_t> tokens;
    for (int s = 0; s < n; ++s) {
        states.push_back(make_state(c, a.prompt + a.gen + 1, a.kv_type));
        const auto prompt =
            random_prompt(a.prompt, c.n_vocab, a.seed + static_cast<uint64_t>(s * 7919 + rep));
        const auto logits = forward(model, *states.back(), pool, prompt, LogitsWanted::Last);
        tokens.push_back(
            static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
        batch.push_back(states.back().get());
    }
    const auto n_vocab = static_cast<size_t>(c.n_vocab);
    std::vector<float> rows(static_cast<size_t>(n) * n_vocab);
    double seconds = 0.0;
    for (int64_t step = 0; step < a.gen; ++step) {
        const auto t0 = Clock::now();
        const auto errors = decode_batch(model, batch, pool, tokens, rows.data());
        seconds += std::chrono::duration<double>(Clock::now() - t0).count();
        for (size_t s = 0; s < batch.size(); ++s) {
            if (errors[s]) std::rethrow_exception(errors[s]);
            const float* row = rows.data() + s * n_vocab;
            tokens[s] = static_cast<int32_t>(std::max_element(row, row + n_vocab) - row);
        }
    }
    return seconds;
}

}  // namespace

int run_bench_streams(const BenchStreamsArgs& a) {
    if (a.streams.empty()) throw std::invalid_argument("--streams: no stream counts");
    for (int n : a.streams) {
        if (n < 1 || n > kMaxDecodeBatch) {
            throw std::invalid_argument("--streams: " + std::to_string(n) + " is outside 1.." +
                                        std::to_string(kMaxDecodeBatch));
        }
    }
    const auto model = load_model(a.model, a.activations, a.gpu);
    ThreadPool pool(a.threads);
    // One untimed step of each level first: a GPU captures and loads its kernels there.
    for (int n : a.streams) {
        BenchStreamsArgs warm = a;
        warm.gen = 2;
        warm.prompt = std::min<int64_t>(a.prompt, 16);
        time_steps(*model, pool, warm, n, -1);
    }
    std::vector<std::vector<double>> tps(a.streams.size());
    for (int rep = 0; rep < a.reps; ++rep) {
        for (size_t i = 0; i < a.streams.size(); ++i) {
            const int n = a.streams[i];
            const double s = time_steps(*model, pool, a, n, rep);
            tps[i].push_back(static_cast<double>(n * a.gen) / s);
        }
    }
    nlohmann::json levels = nlohmann::json::array();
    const double first = median(tps[0]);
    for (size_t i = 0; i < a.streams.size(); ++i) {
        const double med = median(tps[i]);
        levels.push_back({{"streams", a.streams[i]},
                          {"tokens_per_second", med},
                          {"step_ms", 1e3 * a.streams[i] / med},
                          {"vs_first_level", first > 0 ? med / first : 0.0},
                          {"tokens_per_second_reps", tps[i]}});
    }
    const nlohmann::json j = {{"bench", "streams"},
                              {"model", a.model},
                              {"placement", model_placement(*model)},
                              {"kv_type", kv_type_name(a.kv_type)},
                              {"prompt", a.prompt},
                              {"gen", a.gen},
                              {"reps", a.reps},
                              {"levels", levels}};
    if (a.json_out) {
        std::cout << j.dump() << "\n";
        return 0;
    }
    std::printf("model  %s (%s)\n", a.model.c_str(), model_placement(*model).c_str());
    for (const auto& l : levels) {
        std::printf("%2d streams  %9.1f tok/s  %7.2f ms a step  %5.2fx the first level\n",
                    l["streams"].get<int>(), l["tokens_per_second"].get<double>(),
                    l["step_ms"].get<double>(), l["vs_first_level"].get<double>());
    }
    return 0;
}

}  // namespace ember::app
