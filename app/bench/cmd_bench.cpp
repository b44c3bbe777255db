// bench: prefill and decode speed of a model, with the memory roofline measured in the same
// run (decode reads every weight once per token, so bandwidth / weight bytes bounds it).
#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "app/bench/bench_grammar.h"
#include "app/bench/bench_spec.h"
#include "app/bench/bench_streams.h"
#include "app/cli/cli_checks.h"
#include "app/commands/commands.h"
#include "app/models/model_locator.h"
#include "engine/model/forward.h"
#include "engine/model/model.h"
#include "engine/model/state.h"
#include "engine/sampling/kernels.h"
#include "engine/synth/membw.h"
#include "engine/tensor/traits.h"
#include "engine/util/thread_pool.h"

namespace ember::app {

namespace {

using Clock = std::chrono::steady_clock;
constexpr double kMiB = 1048576.0;
// Allowance on top of file + KV cache for code, scratch buffers, tokenizer and allocator.
constexpr double kRssSlackMiB = 64.0;

struct BenchArgs {
    std::string model;
    int64_t prompt = 512;
    int64_t gen = 128;
    // Tokens of context already in the cache before the prompt and the decode are timed (as
    // the reference's -d): attention then reads depth x KV bytes per position for every token.
    int64_t depth = 0;
    int threads = 0;  // 0: the physical cores (default_threads)
    int reps = 5;
    bool json_out = false;
    uint64_t seed = 1234;
    int64_t bw_mib = 1024;
    int bw_passes = 5;  // per probe at most; one probe after the warm-up and after every rep
    bool bw_passes_given = false;  // --bw-passes typed: every probe makes that many passes
    bool no_bandwidth = false;     // --no-bandwidth: no probe, no roofline
    // f16 by default: the reference engine's default cache, so the comparison is like for like.
    std::string kv_type = "f16";
    std::string activations = "auto";  // --activations
    GpuOptions gpu;                    // --gpu
    // Speculative-decoding check: forwards of this many tokens at once after the prompt (0: off),
    // timed against the one-token decode.
    int64_t verify = 0;
    // "ngram": compare n-gram speculation with plain decoding instead (app/bench/bench_spec.cpp).
    std::string spec;
    int draft_max = SpeculationOptions{}.draft_max;
    // Conversations stepped together (bench_streams.cpp) instead; empty: off.
    std::vector<int> streams;
    // --json-schema / --grammar: the constrained-decoding cost instead
    // (app/bench/bench_grammar.cpp).
    OutputFormatFlags output_format;
};

// Forwards of `verify` tokens per rep (each rolled back before the next).
constexpr int kVerifyIters = 16;

struct RepResult {
    double prefill_s = 0;
    double decode_after_prompt_s = 0;
    double ttft_s = 0;
    double decode_s = 0;
    double verify_s = 0;  // one forward of BenchArgs::verify tokens
};

double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Greedy choice without a sampler, so the timing is the model's; also notes whether every
// logit is finite (random weights must not overflow a forward pass). The first of the largest
// logits, through the sampler's vectorized scans (sampling/kernels.h): the one-pass loop (each
// element compared with the best so far, reloaded) took ~0.95 ms over Qwen3.5's 248k logits on
// the H200's host, more than a third of the decode step it was timing.
int32_t argmax(std::span<const float> logits, bool& finite) {
    if (logits.empty()) return 0;
    uint32_t not_finite = 0;  // an integer test of the exponent bits, which vectorizes
    for (const float v : logits) {
        not_finite |=
            static_cast<uint32_t>((std::bit_cast<uint32_t>(v) & 0x7f800000u) == 0x7f800000u);
    }
    if (not_finite == 0) {
        const float top = sampling_kernels::max_value(logits.data(), logits.size());
        return static_cast<int32_t>(
            sampling_kernels::first_index_of(logits.data(), logits.size(), top));
    }
    finite = false;  // a run already failed: the scans assume no NaN, so the plain loop
    int32_t best = 0;
    for (size_t i = 0; i < logits.size(); ++i) {
        if (logits[i] > logits[static_cast<size_t>(best)]) best = static_cast<int32_t>(i);
    }
    return best;
}

// Peak resident set (VmHWM) in bytes; includes the mapped model pages the run touched.
uint64_t peak_rss_bytes() {
    std::ifstream in("/proc/self/status");
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
    }
    return 0;
}

// Resets VmHWM to the current RSS (Linux 4.0+); false where the kernel does not allow it.
bool reset_peak_rss() {
    std::ofstream out("/proc/self/clear_refs");
    out << "5" << std::flush;
    return static_cast<bool>(out);
}

// Decodes `gen` tokens one at a time after `next`; returns the seconds taken.
double decode_tokens(const Model& model, InferenceState& state, ThreadPool& pool, int32_t next,
                     int64_t gen, bool& finite) {
    const auto t0 = Clock::now();
    for (int64_t i = 0; i < gen; ++i) {
        auto logits =
            forward(model, state, pool, std::span<const int32_t>(&next, 1), LogitsWanted::Last);
        next = argmax(logits, finite);
    }
    return seconds_since(t0);
}

// The cache holding `depth` tokens of context, as every rep starts: the context is evaluated
// once (untimed) and each rep rewinds to its end. Hybrids cannot rewind their recurrent state
// by moving the cache's length, so they go back through a snapshot taken after the context.
struct Context {
    int64_t depth = 0;
    RecurrentSnapshotPool after_context;

    void rewind(InferenceState& state) {
        state.kv.set_length(depth);
        if (depth > 0 && !state.recurrent.empty()) after_context.restore(0, state.recurrent);
    }
};

Context make_context(const Model& model, InferenceState& state, ThreadPool& pool, int64_t depth,
                     uint64_t seed) {
    Context ctx;
    ctx.depth = depth;
    if (depth == 0) return ctx;
    const auto ids = random_prompt(depth, model.config().n_vocab, seed ^ 0x5eedull);
    // In pieces, so the scratch is no larger than a prompt's.
    constexpr int64_t kPiece = 512;
    for (int64_t i = 0; i < depth; i += kPiece) {
        const auto n = static_cast<size_t>(std::min(kPiece, depth - i));
        forward(model, state, pool,
                std::span<const int32_t>(ids).subspan(static_cast<size_t>(i), n),
                LogitsWanted::None);
    }
    if (!state.recurrent.empty()) {
        ctx.after_context.init(state.recurrent, 1);
        ctx.after_context.save(0, state.recurrent);
    }
    return ctx;
}

// One rep: prefill the prompt after the context (an empty cache at depth 0); decode `gen`
// tokens one at a time after it (what a chat turn does); then `gen` tokens right after the
// context (what the reference engine's tg test times, so decode_tps compares like with like).
RepResult run_rep(const Model& model, InferenceState& state, ThreadPool& pool, Context& ctx,
                  const std::vector<int32_t>& prompt, int64_t gen, int64_t verify, bool& finite) {
    RepResult r;
    // Rewinding keeps the cache's chunks and the scratch: a rep measures the model, not the
    // allocator (the warm-up rep pays for the first allocation).
    ctx.rewind(state);
    const auto t0 = Clock::now();
    auto logits = forward(model, state, pool, prompt, LogitsWanted::Last);
    r.prefill_s = seconds_since(t0);
    int32_t next = argmax(logits, finite);
    r.ttft_s = seconds_since(t0);
    // Hybrids go back to the end of the prompt (for the verify timing) through a snapshot of
    // their recurrent state: it cannot be rolled back by moving the cache's length.
    RecurrentSnapshotPool after_prompt;
    if (verify > 0) {
        after_prompt.init(state.recurrent, 1);
        after_prompt.save(0, state.recurrent);
    }
    r.decode_after_prompt_s = decode_tokens(model, state, pool, next, gen, finite);
    ctx.rewind(state);
    r.decode_s = decode_tokens(model, state, pool, next, gen, finite);
    if (verify > 0) {
        const int64_t base = ctx.depth + static_cast<int64_t>(prompt.size());
        std::vector<int32_t> draft(static_cast<size_t>(verify));
        for (int64_t i = 0; i < verify; ++i)
            draft[static_cast<size_t>(i)] = prompt[static_cast<size_t>(i) % prompt.size()];
        for (int it = 0; it < kVerifyIters; ++it) {
            state.kv.set_length(base);
            after_prompt.restore(0, state.recurrent);  // not timed: only the forward is
            const auto t2 = Clock::now();
            logits = forward(model, state, pool, draft, LogitsWanted::All);
            argmax(logits.subspan(0, static_cast<size_t>(model.config().n_vocab)), finite);
            r.verify_s += seconds_since(t2);
        }
        r.verify_s /= kVerifyIters;
    }
    return r;
}

// The memory-bandwidth probe behind the roofline. It runs after the warm-up and after every
// rep, so the roofline compares decode with the bandwidth of the same minutes on a machine
// whose neighbours come and go, and it is kept in proportion to the run (a short bench used to
// spend most of its time in it). Its buffer must not count as the model's peak RSS: the peak is
// read before each probe and reset after it (the buffer is unmapped by then); where the peak
// cannot be reset, the probe runs once, after the last rep.
class BandwidthProbe {
public:
    BandwidthProbe(ComputeDevice* device, ThreadPool& pool, uint64_t bytes)
        : device_(device), pool_(pool), bytes_(bytes), interleave_(reset_peak_rss()) {}

    bool interleaved() const { return interleave_; }

    // After the warm-up (which took `warm_up_seconds`): the passes of the probe after each rep.
    // --bw-passes given: that many, after the warm-up too. Otherwise one pass now, and after each
    // rep as many as fit in a quarter of a rep (the warm-up standing in for one), up to
    // `max_passes`; none when even one pass does not fit.
    int plan(bool none, bool passes_given, int max_passes, double warm_up_seconds) {
        if (none) return 0;
        if (passes_given) {
            if (interleave_) measure(max_passes);
            return max_passes;
        }
        if (!interleave_) return 0;
        const double before = seconds_;
        measure(1);
        const double one_pass = seconds_ - before;
        const double share = 0.25 * warm_up_seconds;
        return one_pass <= share ? std::clamp(static_cast<int>(share / one_pass), 1, max_passes)
                                 : 0;
    }

    // One probe of `passes` timed passes; returns its median GB/s.
    double measure(int passes) {
        const auto start = Clock::now();
        peak_rss_ = std::max(peak_rss_, peak_rss_bytes());
        BandwidthResult one;
        if (device_ != nullptr) {
            // On a GPU the roofline is the card's: a copy within its memory.
            one.bytes = bytes_;
            one.gbs = device_->measure_bandwidth_gbs(bytes_, passes);
            one.isa = "gpu copy";
            std::vector<double> sorted = one.gbs;
            std::sort(sorted.begin(), sorted.end());
            one.median_gbs = sorted[sorted.size() / 2];
        } else {
            one = measure_read_bandwidth(pool_, bytes_, passes);
        }
        all_.bytes = one.bytes;
        all_.isa = one.isa;
        all_.checksum += one.checksum;
        all_.gbs.insert(all_.gbs.end(), one.gbs.begin(), one.gbs.end());
        reset_peak_rss();
        seconds_ += seconds_since(start);
        return one.median_gbs;
    }

    const BandwidthResult& result() const { return all_; }  // every probe's passes
    double seconds() const { return seconds_; }             // all the probes together
    uint64_t peak_rss_before_probes() const { return peak_rss_; }

private:
    ComputeDevice* device_;
    ThreadPool& pool_;
    uint64_t bytes_;
    bool interleave_;
    uint64_t peak_rss_ = 0;
    BandwidthResult all_;
    double seconds_ = 0;
};

// What a model on a device takes there: the layers it runs, its weights, the KV rows of its
// layers (a split's CPU layers keep theirs on the host alone) and the most device memory seen
// taken (ComputeDevice::memory_in_use, sampled after the warm-up and the timed reps).
struct DeviceMemory {
    int64_t layers = 0;
    uint64_t weight_bytes = 0;
    uint64_t kv_bytes = 0;
    uint64_t peak_bytes = 0;

    void sample(const Model& model, const KvCache& kv) {
        const ComputeDevice* device = model.device();
        if (!device) return;
        layers = device->layers();
        weight_bytes = device->weight_bytes();
        const int64_t kv_layers = std::min(
            kv.n_layer(), layers * kv.n_layer() / std::max<int64_t>(1, model.config().n_layer));
        kv_bytes = static_cast<uint64_t>(kv.capacity()) *
                   static_cast<uint64_t>(kv.k_row_bytes() + kv.v_row_bytes()) *
                   static_cast<uint64_t>(kv_layers);
        peak_bytes = std::max(peak_bytes, device->memory_in_use());
    }
};

int run_bench(BenchArgs a) {
    if (a.threads == 0) a.threads = default_threads();
    if (a.prompt < 1 || a.gen < 1 || a.reps < 1 || a.threads < 1 || a.bw_passes < 1) {
        throw std::runtime_error("-p, -n, --reps, -t and --bw-passes must be at least 1");
    }
    if (a.depth < 0) throw std::runtime_error("--depth must not be negative");
    const auto t_load = Clock::now();
    auto model = load_model(a.model, a.activations, a.gpu);
    const double load_s = seconds_since(t_load);
    const ModelConfig& c = model->config();
    const uint64_t file_bytes = std::filesystem::file_size(a.model);
    ThreadPool pool(a.threads);
    auto state =
        make_state(c, a.depth + a.prompt + std::max(a.gen, a.verify), kv_type_of(a.kv_type));
    const std::vector<int32_t> prompt = random_prompt(a.prompt, c.n_vocab, a.seed);

    BandwidthProbe probe(model->device(), pool, static_cast<uint64_t>(a.bw_mib) << 20);
    const bool interleave = probe.interleaved();
    std::vector<double> bw_after_rep;  // median of the probe that followed each timed rep

    Context ctx = make_context(*model, *state, pool, a.depth, a.seed);
    bool finite = true;
    // Warm-up: pages the weights in, grows the scratch and the cache.
    const auto t_run = Clock::now();
    run_rep(*model, *state, pool, ctx, prompt, a.gen, a.verify, finite);
    const double warm_up_seconds = seconds_since(t_run);
    DeviceMemory device_memory;
    device_memory.sample(*model, state->kv);
    const int rep_passes =
        probe.plan(a.no_bandwidth, a.bw_passes_given, a.bw_passes, warm_up_seconds);
    std::vector<double> prefill_tps, decode_tps, after_prompt_tps, ttft_ms, verify_ms;
    for (int i = 0; i < a.reps; ++i) {
        const RepResult r = run_rep(*model, *state, pool, ctx, prompt, a.gen, a.verify, finite);
        prefill_tps.push_back(static_cast<double>(a.prompt) / r.prefill_s);
        decode_tps.push_back(static_cast<double>(a.gen) / r.decode_s);
        after_prompt_tps.push_back(static_cast<double>(a.gen) / r.decode_after_prompt_s);
        ttft_ms.push_back(r.ttft_s * 1e3);
        if (a.verify > 0) verify_ms.push_back(r.verify_s * 1e3);
        if (interleave && rep_passes > 0) bw_after_rep.push_back(probe.measure(rep_passes));
    }
    device_memory.sample(*model, state->kv);  // before the last probe's buffers
    if (!interleave && !a.no_bandwidth) probe.measure(a.bw_passes_given ? a.bw_passes : 1);
    const double run_seconds = seconds_since(t_run);
    const uint64_t peak_rss = std::max(probe.peak_rss_before_probes(), peak_rss_bytes());
    BandwidthResult bw = probe.result();
    summarize(bw);
    const double probe_seconds = probe.seconds();

    const double peak_rss_mb = static_cast<double>(peak_rss) / kMiB;
    const double kv_mb = static_cast<double>(state->kv.allocated_bytes()) / kMiB;
    const double file_mb = static_cast<double>(file_bytes) / kMiB;
    // A hybrid's recurrent state is its per-conversation state beside the (smaller) KV cache,
    // so the bound counts it with the cache.
    const double recurrent_mb = static_cast<double>(state->recurrent.bytes()) / kMiB;
    const double rss_bound_mb = file_mb + kv_mb + recurrent_mb + kRssSlackMiB;
    const uint64_t wbpt = model->weight_bytes_per_token();
    // A token at position p reads the K/V of positions [0, p]: on average depth + (gen + 1) / 2
    // positions over the timed decode, and `prompt` more after the prompt.
    const double kv_per_position = static_cast<double>(state->kv.bytes_per_position());
    const double kv_bpt = kv_per_position * (static_cast<double>(a.depth) + 0.5 * (a.gen + 1));
    const double kv_bpt_after_prompt = kv_bpt + kv_per_position * static_cast<double>(a.prompt);
    auto roofline_of = [&](double tps, double gbs, double kv_bytes) {
        return gbs > 0 ? tps * (static_cast<double>(wbpt) + kv_bytes) / (gbs * 1e9) : 0.0;
    };
    const double decode_med = median(decode_tps);
    const double roofline = roofline_of(decode_med, bw.median_gbs, kv_bpt);
    const double after_prompt_med = median(after_prompt_tps);
    const double roofline_after_prompt =
        roofline_of(after_prompt_med, bw.median_gbs, kv_bpt_after_prompt);
    std::vector<double> roofline_reps;
    for (size_t i = 0; i < bw_after_rep.size(); ++i) {
        roofline_reps.push_back(roofline_of(decode_tps[i], bw_after_rep[i], kv_bpt));
    }

    nlohmann::ordered_json j;
    j["model"] = a.model;
    j["arch"] = c.arch;
    j["prefill_tps"] = median(prefill_tps);
    j["decode_tps"] = decode_med;
    j["ttft_ms"] = median(ttft_ms);
    j["peak_rss_mb"] = peak_rss_mb;
    j["bandwidth_gbs"] = bw.median_gbs;
    j["roofline_fraction"] = roofline;
    j["roofline_fraction_weights_only"] = roofline_of(decode_med, bw.median_gbs, 0.0);
    j["weight_bytes_per_token"] = wbpt;
    j["kv_bytes_per_token"] = kv_bpt;
    j["depth"] = a.depth;
    j["threads"] = a.threads;
    j["reps"] = a.reps;
    j["prompt_tokens"] = a.prompt;
    j["gen_tokens"] = a.gen;
    j["prefill_tps_reps"] = prefill_tps;
    j["decode_tps_reps"] = decode_tps;
    j["roofline_fraction_reps"] = roofline_reps;
    j["bandwidth_best_gbs"] = bw.best_gbs;
    j["bandwidth_gbs_passes"] = bw.gbs;
    j["bandwidth_mib"] = static_cast<double>(bw.bytes) / kMiB;
    j["bandwidth_passes"] = bw.gbs.size();
    j["bandwidth_interleaved"] = interleave && rep_passes > 0;
    j["bandwidth_seconds"] = probe_seconds;
    j["run_seconds"] = run_seconds;  // warm-up, reps and probes
    if (a.no_bandwidth) {
        for (const char* key : {"bandwidth_gbs", "roofline_fraction",
                                "roofline_fraction_weights_only", "bandwidth_best_gbs"}) {
            j[key] = nullptr;
        }
    }
    j["bandwidth_isa"] = bw.isa;
    j["isa"] = active_kernels().isa;
    j["device"] = model_placement(*model);
    if (model->device()) {
        // A model larger than the card runs gpu_layers of n_layer there (gpu_plan.h); the
        // device memory it took at most, against its weights and KV rows there.
        j["gpu_layers"] = device_memory.layers;
        j["n_layer"] = c.n_layer;
        j["gpu_weight_mib"] = static_cast<double>(device_memory.weight_bytes) / kMiB;
        j["gpu_kv_mib"] = static_cast<double>(device_memory.kv_bytes) / kMiB;
        j["gpu_peak_mib"] = static_cast<double>(device_memory.peak_bytes) / kMiB;
    }
    j["file_mb"] = file_mb;
    j["kv_mb"] = kv_mb;
    j["recurrent_mb"] = recurrent_mb;
    j["kv_type"] = a.kv_type;
    j["activations"] = activations_name(model->activations());
    // decode_tps and roofline_fraction: decoding after `depth` tokens of context (an empty
    // cache at depth 0), as the reference's tg test; the same after the prompt. Both rooflines
    // count the weights and the K/V read per token.
    j["decode_context"] = a.depth == 0 ? "empty" : "depth";
    j["decode_after_prompt_tps"] = after_prompt_med;
    j["roofline_fraction_after_prompt"] = roofline_after_prompt;
    j["decode_after_prompt_tps_reps"] = after_prompt_tps;
    if (a.no_bandwidth) j["roofline_fraction_after_prompt"] = nullptr;
    j["rss_bound_mb"] = rss_bound_mb;
    j["within_rss_bound"] = peak_rss_mb <= rss_bound_mb;
    j["load_ms"] = load_s * 1e3;
    j["logits_finite"] = finite;
    if (a.verify > 0) {
        // ms of one forward of `verify` tokens, and that over the ms of one decoded token.
        j["verify_tokens"] = a.verify;
        j["verify_ms"] = median(verify_ms);
        j["verify_over_decode"] = median(verify_ms) * after_prompt_med / 1e3;
    }
    if (a.json_out) {
        std::cout << j.dump() << "\n";
        return 0;
    }

    auto range = [](const std::vector<double>& v) {
        const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
        char buf[64];
        std::snprintf(buf, sizeof buf, "%10.2f %10.2f", *lo, *hi);
        return std::string(buf);
    };
    std::printf("model            %s (%s, %.1f MiB, kernels %s)\n", a.model.c_str(), c.arch.c_str(),
                file_mb, active_kernels().isa);
    std::printf(
        "run              %d threads, %d reps + 1 warm-up, prompt %lld, generate %lld, KV %s\n",
        a.threads, a.reps, static_cast<long long>(a.prompt), static_cast<long long>(a.gen),
        a.kv_type.c_str());
    std::printf("                     median        min        max\n");
    std::printf("prefill tok/s    %10.2f %s\n", median(prefill_tps), range(prefill_tps).c_str());
    std::printf("decode tok/s     %10.2f %s (after %lld tokens of context)\n", decode_med,
                range(decode_tps).c_str(), static_cast<long long>(a.depth));
    std::printf("  after prompt   %10.2f %s (roofline %.3f)\n", after_prompt_med,
                range(after_prompt_tps).c_str(), roofline_after_prompt);
    std::printf("ttft ms          %10.2f %s\n", median(ttft_ms), range(ttft_ms).c_str());
    if (model->device()) {
        std::printf(
            "gpu              %lld of %lld layers, peak %.0f MiB (weights %.0f + KV %.0f)\n",
            static_cast<long long>(device_memory.layers), static_cast<long long>(c.n_layer),
            static_cast<double>(device_memory.peak_bytes) / kMiB,
            static_cast<double>(device_memory.weight_bytes) / kMiB,
            static_cast<double>(device_memory.kv_bytes) / kMiB);
    }
    if (a.no_bandwidth) {
        std::printf("read bandwidth   not measured (--no-bandwidth): no roofline\n");
    } else {
        std::printf(
            "read bandwidth   %10.2f GB/s (median of %zu passes over %.0f MiB, best %.2f, "
            "%s; probing took %.1f s of %.1f s)\n",
            bw.median_gbs, bw.gbs.size(), static_cast<double>(bw.bytes) / kMiB, bw.best_gbs, bw.isa,
            probe_seconds, run_seconds);
    }
    std::printf("weights / token  %10.2f MiB\n", static_cast<double>(wbpt) / kMiB);
    std::printf("KV / token       %10.2f MiB (read by attention, decode average)\n", kv_bpt / kMiB);
    if (!a.no_bandwidth) {
        std::printf("roofline         %10.3f (decode tok/s x (weight + KV bytes) / bandwidth)\n",
                    roofline);
    }
    std::printf(
        "peak RSS         %10.1f MiB (bound %.1f = file + KV %.1f + recurrent %.1f + %.0f: %s)\n",
        peak_rss_mb, rss_bound_mb, kv_mb, recurrent_mb, kRssSlackMiB,
        peak_rss_mb <= rss_bound_mb ? "ok" : "EXCEEDED");
    if (a.verify > 0) {
        std::printf("verify %3lld tok   %10.2f ms per forward (%.2f x one decoded token)\n",
                    static_cast<long long>(a.verify), median(verify_ms),
                    median(verify_ms) * after_prompt_med / 1e3);
    }
    if (!finite) std::printf("warning          non-finite logits seen\n");
    return 0;
}

}  // namespace

// Valid token ids from a fixed seed (splitmix64), so every rep and run sees the same prompt.
std::vector<int32_t> random_prompt(int64_t n, int64_t n_vocab, uint64_t seed) {
    std::vector<int32_t> ids(static_cast<size_t>(n));
    uint64_t s = seed;
    for (auto& id : ids) {
        s += 0x9e3779b97f4a7c15ull;
        uint64_t z = s;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        id = static_cast<int32_t>(z % static_cast<uint64_t>(n_vocab));
    }
    return ids;
}

void register_bench_command(CLI::App& app, std::vector<Command>& out) {
    auto args = std::make_shared<BenchArgs>();
    auto* cmd = app.add_subcommand(
        "bench", "Prefill/decode speed, peak memory and the memory-bandwidth roofline");
    cmd->add_option("-m,--model", args->model, "GGUF model file")
        ->required()
        ->check(CLI::ExistingFile);
    cmd->add_option("-p,--prompt", args->prompt, "Prompt tokens (random ids)")
        ->capture_default_str();
    cmd->add_option("-n,--n-gen", args->gen, "Tokens decoded one at a time")->capture_default_str();
    cmd->add_option("-t,--threads", args->threads, "Threads (0: the physical cores)")
        ->capture_default_str()
        ->check(
            whole_number(0, kMaxThreads,
                         "from 0 to " + std::to_string(kMaxThreads) + " (0: the physical cores)"));
    cmd->add_option("-d,--depth", args->depth,
                    "Tokens of context in the cache before prefill and decode are timed (as the "
                    "reference's -d)")
        ->capture_default_str();
    auto* reps_opt = cmd->add_option("--reps", args->reps,
                                     "Timed repetitions (median reported; --spec: 3 by default)");
    reps_opt->capture_default_str();
    cmd->add_flag("--json", args->json_out, "Print one JSON object");
    add_kv_type_option(cmd, args->kv_type);
    add_activations_option(cmd, args->activations);
    add_gpu_option(cmd, args->gpu);
    cmd->add_option("--verify", args->verify,
                    "Also time forwards of this many tokens at once after the prompt "
                    "(speculative-decoding check; 0: off)")
        ->capture_default_str()
        ->check(CLI::Range(int64_t{0}, int64_t{256}));
    cmd->add_option("--draft-max", args->draft_max,
                    "--spec: drafted tokens per verification at most (as chat's --draft-max)")
        ->check(CLI::Range(1, 16));
    cmd->add_option("--spec", args->spec,
                    "ngram: decode with n-gram speculation against plain decoding on "
                    "high-overlap and no-overlap prompts (greedy; -n tokens each)")
        ->check(CLI::IsMember({"ngram"}));
    cmd->add_option("--streams", args->streams,
                    "Decode steps of N conversations at once (serve's batched steps), per N, "
                    "against the first N: e.g. 1,4,16 (the steps alone are timed, not the "
                    "greedy picks between them)")
        ->delimiter(',');
    cmd->add_option("--seed", args->seed, "Seed of the random prompt")->capture_default_str();
    cmd->add_option("--bw-mib", args->bw_mib, "Bandwidth probe buffer, MiB (at least 1024)")
        ->capture_default_str()
        ->check(CLI::Range(int64_t{1024}, int64_t{1} << 20));
    cmd->add_option("--bw-passes", args->bw_passes,
                    "Timed passes per bandwidth probe (one probe after every rep); by default "
                    "up to this many, as many as fit in a quarter of a rep")
        ->capture_default_str()
        ->check(CLI::Range(1, 1000));
    cmd->add_flag("--no-bandwidth", args->no_bandwidth,
                  "No bandwidth probe (and no roofline): the quickest run");
    add_output_format_options(cmd, args->output_format);
    out.push_back({cmd, [args, reps_opt, cmd] {
                       args->model = model_path_for(args->model);
                       args->bw_passes_given = cmd->count("--bw-passes") > 0;
                       if (!args->output_format.json_schema.empty() ||
                           !args->output_format.grammar_file.empty()) {
                           BenchGrammarArgs g;
                           g.model = args->model;
                           g.format = args->output_format;
                           g.gen = args->gen;
                           g.threads = args->threads > 0 ? args->threads : default_threads();
                           if (reps_opt->count() > 0) g.reps = args->reps;
                           g.json_out = args->json_out;
                           g.seed = args->seed;
                           g.kv_type = args->kv_type;
                           g.activations = args->activations;
                           g.gpu = args->gpu;
                           return run_bench_grammar(g);
                       }
                       if (!args->streams.empty()) {
                           BenchStreamsArgs s;
                           s.model = args->model;
                           s.streams = args->streams;
                           s.prompt = args->prompt;
                           s.gen = args->gen;
                           s.threads = args->threads > 0 ? args->threads : default_threads();
                           if (reps_opt->count() > 0) s.reps = args->reps;
                           s.json_out = args->json_out;
                           s.seed = args->seed;
                           s.kv_type = kv_type_of(args->kv_type);
                           s.activations = args->activations;
                           s.gpu = args->gpu;
                           return run_bench_streams(s);
                       }
                       if (args->spec == "ngram") {
                           BenchSpecArgs spec_args;
                           spec_args.model = args->model;
                           spec_args.gen = args->gen;
                           spec_args.threads =
                               args->threads > 0 ? args->threads : default_threads();
                           // Two decodes per rep and prompt: fewer reps unless asked for.
                           if (reps_opt->count() > 0) spec_args.reps = args->reps;
                           spec_args.json_out = args->json_out;
                           spec_args.kv_type = kv_type_of(args->kv_type);
                           spec_args.activations = args->activations;
                           spec_args.gpu = args->gpu;
                           spec_args.speculation.draft_max = args->draft_max;
                           return run_bench_spec(spec_args);
                       }
                       return run_bench(*args);
                   }});
}

}  // namespace ember::app
