#include "app/models/load_model.h"

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string_view>

#include "engine/generate/conversation.h"
#include "engine/model/gpu.h"
#include "engine/model/kv_type.h"
#include "engine/model/model.h"
#include "ui/io/terminal_text.h"

namespace ember::app {

std::unique_ptr<Model> load_model(const std::string& path, const std::string& activations,
                                  const std::string& gpu, const std::function<bool()>& stop) {
    LoadOptions options;
    options.stop = stop;
    const std::optional<ActivationChoice> choice = parse_activation_choice(activations);
    if (!choice)
        throw CLI::ValidationError("--activations", activations + " not in {auto,exact,quantized}");
    options.activations = *choice;
    const std::optional<GpuRequest> request = parse_gpu_request(gpu);
    if (!request) throw CLI::ValidationError("--gpu", gpu + " is not auto, off or a GPU number");
    // EMBER_WEIGHT_PANELS=0 keeps the file's row layout (for measuring the two side by side);
    // a model that may go to a GPU keeps it too (the GPU reads rows).
    const char* panels = std::getenv("EMBER_WEIGHT_PANELS");
    options.weight_panels =
        (panels == nullptr || std::string_view(panels) != "0") && !gpu_may_run(*request);
    auto model = Model::load(path, options);
    for (const std::string& w : model->load_warnings()) {
        // Warnings quote the file's metadata.
        ui::TextWriter(stderr).raw("ember: warning: ").text(w).raw("\n");
    }
    // The KV cache of the default context at f16 counts against the card's free memory.
    const ModelConfig& c = model->config();
    const auto kv_bytes =
        static_cast<uint64_t>(default_context_size(c, KvType::F16)) *
        static_cast<uint64_t>(c.n_layer * c.n_head_kv * (c.head_dim + c.value_dim)) * 2;
    if (stop && stop()) throw LoadStopped(path);  // before the upload to a GPU
    const GpuPlacement placed = place_model(*model, *request, kv_bytes);
    if (!placed.note.empty())
        ui::TextWriter(stderr).raw("ember: note: ").text(placed.note).raw("\n");
    return model;
}

std::string model_placement(const Model& model) {
    return model.device() ? model.device()->description() : "CPU";
}

void add_gpu_option(CLI::App* cmd, std::string& gpu) {
    cmd->add_option("--gpu", gpu,
                    "Where the model runs: auto (a GPU when there is one and the model fits "
                    "there), off (the CPU), or a GPU number")
        ->capture_default_str();
}

void add_activations_option(CLI::App* cmd, std::string& activations) {
    cmd->add_option("--activations", activations,
                    "How quantized weights meet activations: exact (f32, the float reference's "
                    "numbers), wide (16-bit blocks, within ~1e-2 logits of exact), quantized "
                    "(8-bit blocks: fastest, up to ~2 logits off on trained models) or auto "
                    "(wide where the CPU has AVX-512 VNNI, else exact)")
        ->capture_default_str()
        ->check(CLI::IsMember({"auto", "exact", "wide", "quantized"}));
}
}  // namespace ember::app
