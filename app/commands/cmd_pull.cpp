// ember pull OWNER/REPO[:QUANT|FILE]: a GGUF model from a Hugging Face-style hub
// (app/models/hub_pull.h).
#include <curl/curl.h>

#include <cstdio>
#include <memory>

#include "app/commands/commands.h"
#include "app/models/hub_http.h"
#include "app/models/hub_pull.h"
#include "ui/io/terminal_text.h"

namespace ember::app {

namespace {

struct PullArgs {
    std::string spec;
    int retries = 3;
    bool no_progress = false;
};

}  // namespace

void register_pull_command(CLI::App& app, std::vector<Command>& out) {
    auto* cmd = app.add_subcommand(
        "pull",
        "Download a GGUF model from a Hugging Face-style hub ($HF_ENDPOINT, $HF_TOKEN) "
        "into Ember's models directory");
    auto args = std::make_shared<PullArgs>();
    cmd->add_option("model", args->spec,
                    "OWNER/REPO, OWNER/REPO:QUANT (Q4_K_M, Q8_0, ...) or OWNER/REPO:FILE.gguf")
        ->required();
    cmd->add_option("--retries", args->retries,
                    "Resumes after a cut connection before giving up (0-20)")
        ->check(CLI::Range(0, 20));
    cmd->add_flag("--no-progress", args->no_progress, "No progress bar on a terminal");
    out.push_back({cmd, [args] {
                       hub::ModelSpec spec;
                       try {
                           spec = hub::parse_spec(args->spec);
                       } catch (const hub::HubError& e) {
                           throw CLI::ValidationError(e.what());  // a usage error: exit 2
                       }
                       curl_global_init(CURL_GLOBAL_DEFAULT);
                       hub::PullOptions options;
                       options.retries = args->retries;
                       options.show_progress = !args->no_progress;
                       const std::string path = hub::pull(spec, options);
                       curl_global_cleanup();
                       // The installed path, for scripts: `ember chat -m "$(ember pull ...)"`.
                       ui::TextWriter(stdout).text(path).raw("\n");
                       return 0;
                   }});
}

}  // namespace ember::app
