#include "app/cli/options.h"

#include <sched.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <thread>

#include "app/cli/cli_checks.h"
#include "engine/sampling/sampling_ranges.h"

namespace ember::app {

void add_model_option(CLI::App* cmd, std::string& model) {
    // Not required: without it the model is found as app/models/model_locator.h describes.
    cmd->add_option("-m,--model", model,
                    "GGUF model file, a found model's name, or OWNER/REPO:QUANT from a hub "
                    "(`ember pull`) (default: EMBER_MODEL, the config file, then `ember models`)");
}

namespace {

// A sampling flag's value in the range the server and /set also hold it to
// (engine/sampling/sampling_ranges.h), refused with the same words: "--temp: must be a
// number between 0 and 2, not '5'".
CLI::Validator sampling_value(std::string_view field) {
    const SamplingRange range = *sampling_range(field);
    return CLI::Validator(
        [range](std::string& text) -> std::string {
            char* end = nullptr;
            const double value = std::strtod(text.c_str(), &end);
            const bool whole = !text.empty() && end == text.c_str() + text.size();
            if (!whole || !in_sampling_range(range, value)) {
                return sampling_rule(range) + ", not '" + text + "'";
            }
            return {};
        },
        "", "sampling_value");
}

}  // namespace

void add_sampling_options(CLI::App* cmd, SamplingParams& sampling) {
    cmd->add_option("--temp", sampling.temperature, "Temperature (0 = greedy)")
        ->capture_default_str()
        ->check(sampling_value("temperature"));
    cmd->add_option("--top-k", sampling.top_k, "Top-k cut (0 = off)")
        ->capture_default_str()
        ->check(sampling_value("top_k"));
    cmd->add_option("--top-p", sampling.top_p, "Top-p (nucleus) cut (1 = off)")
        ->capture_default_str()
        ->check(sampling_value("top_p"));
    cmd->add_option("--min-p", sampling.min_p, "Min-p cut (0 = off)")
        ->capture_default_str()
        ->check(sampling_value("min_p"));
    cmd->add_option("--repeat-penalty", sampling.repeat_penalty, "Repetition penalty (1 = off)")
        ->capture_default_str()
        ->check(sampling_value("repeat_penalty"));
    cmd->add_option("--presence-penalty", sampling.presence_penalty, "Presence penalty")
        ->capture_default_str()
        ->check(sampling_value("presence_penalty"));
    cmd->add_option("--frequency-penalty", sampling.frequency_penalty, "Frequency penalty")
        ->capture_default_str()
        ->check(sampling_value("frequency_penalty"));
    cmd->add_option("--repeat-last-n", sampling.penalty_last_n, "Tokens the penalties look at")
        ->capture_default_str()
        ->check(whole_number(
            0, SamplingParams::kMaxPenaltyLastN,
            "from 0 to " + std::to_string(SamplingParams::kMaxPenaltyLastN) + " (0 = off)"));
    cmd->add_option("--seed", sampling.seed,
                    "Random seed (default: a fresh one each run, in chat each reply; serve: "
                    "each request without a seed)")
        ->check(seed_number());
}

void add_threads_option(CLI::App* cmd, int& threads, const std::string& help) {
    cmd->add_option("-t,--threads", threads, help)->check(thread_count());
}

void add_kv_type_option(CLI::App* cmd, std::string& kv_type) {
    cmd->add_option("--kv-type", kv_type,
                    "KV cache precision: f32, f16 (half the memory) or q8_0 (8-bit blocks, "
                    "about a quarter)")
        ->capture_default_str()
        ->check(CLI::IsMember({"f32", "f16", "q8_0"}));
}

KvType kv_type_of(const std::string& kv_type) {
    const std::optional<KvType> t = parse_kv_type(kv_type);
    if (!t) throw CLI::ValidationError("--kv-type", kv_type + " not in {f32,f16,q8_0}");
    return *t;
}

int default_threads() {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0) {
        return std::max(1u, std::thread::hardware_concurrency());
    }
    // Physical cores: decode streams weights and prefill fills the vector units, so a second
    // hardware thread of a core adds contention, not speed. CPUs that share a core list the
    // same siblings in sysfs; where sysfs says nothing, every allowed CPU counts.
    std::set<std::string> cores;
    int unknown = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
        if (!CPU_ISSET(cpu, &set)) continue;
        std::ifstream in("/sys/devices/system/cpu/cpu" + std::to_string(cpu) +
                         "/topology/thread_siblings_list");
        std::string siblings;
        if (std::getline(in, siblings) && !siblings.empty()) {
            cores.insert(siblings);
        } else {
            ++unknown;
        }
    }
    return std::max(1, static_cast<int>(cores.size()) + unknown);
}

std::vector<int32_t> parse_id_list(const std::string& text, const std::string& what) {
    std::vector<int32_t> ids;
    size_t i = 0;
    while (i < text.size()) {
        size_t end = text.find(',', i);
        if (end == std::string::npos) end = text.size();
        std::string item = text.substr(i, end - i);
        item.erase(0, item.find_first_not_of(" \t\n"));
        item.erase(item.find_last_not_of(" \t\n") + 1);
        if (item.empty()) {
            if (end == text.size() && !ids.empty()) break;
            throw CLI::ValidationError(what, "empty item at character " + std::to_string(i));
        }
        size_t used = 0;
        long long v = 0;
        try {
            v = std::stoll(item, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        if (used != item.size() || v < 0 || v > INT32_MAX) {
            throw CLI::ValidationError(what, "'" + item + "' is not a token id");
        }
        ids.push_back(static_cast<int32_t>(v));
        i = end + 1;
    }
    return ids;
}

std::string read_template_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("cannot read chat template file '" + path + "'");
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}
}  // namespace ember::app
