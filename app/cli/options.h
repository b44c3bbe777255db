// The command-line options the generating commands share (-m, the sampling flags, -t,
// --kv-type, --chat-template, --ids), each checked as typed (app/cli/cli_checks.h), and the
// default thread count.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/model/kv_type.h"
#include "engine/sampling/sampler.h"

namespace ember::app {

// -m,--model: a GGUF path, a found model's name or OWNER/REPO:QUANT (app/models/).
void add_model_option(CLI::App* cmd, std::string& model);
// --temp, --top-k, ... --seed, each refused outside the range the server and /set also hold it
// to (engine/sampling/sampling_ranges.h), with the same words.
void add_sampling_options(CLI::App* cmd, SamplingParams& sampling);
// -t,--threads, checked to lie in 1..kMaxThreads (app/cli/cli_checks.h).
void add_threads_option(CLI::App* cmd, int& threads, const std::string& help);
// --kv-type f32|f16|q8_0, its default the value `kv_type` holds; kv_type_of() reads the value.
void add_kv_type_option(CLI::App* cmd, std::string& kv_type);
KvType kv_type_of(const std::string& kv_type);
// A chat template file's text (--chat-template); throws naming the file.
std::string read_template_file(const std::string& path);
// Parses "1,2,3" (spaces allowed) into token ids; throws CLI::ValidationError naming `what`
// (the option) and the bad item.
std::vector<int32_t> parse_id_list(const std::string& text, const std::string& what = "--ids");
// Default thread count: the physical cores among the CPUs this process may run on.
int default_threads();

}  // namespace ember::app
