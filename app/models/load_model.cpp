#include "app/models/load_model.h"

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string_view>

#include "engine/generate/conversation.h"
#include "engine/model/gpu.h"
#include "engine/model/gpu_plan.h"
#include "engine/model/kv_type.h"
#include "engine/model/model.h"
#include "ui/io/terminal_text.h"

namespace ember::app {

namespace {

std::string gpu_layers_error(const std::string& text) {
    return parse_gpu_layers(text) ? "" : text + " is not a number of layers (or all)";
}

std::string gpu_memory_error(const std::string& text) {
    return parse_memory_size(text) ? "" : text + " is not a memory size such as 6GiB or 6000MiB";
}

// The three options as one request; a bad value is a CLI error naming its option.
GpuRequest gpu_request_of(const GpuOptions& gpu) {
    std::optional<GpuRequest> request = parse_gpu_request(gpu.where);
    if (!request)
        throw CLI::ValidationError("--gpu", gpu.where + " is not auto, off or a GPU number");
    if (!gpu.layers.empty()) {
        if (const std::string why = gpu_layers_error(gpu.layers); !why.empty())
            throw CLI::ValidationError("--gpu-layers", why);
        request->layers = parse_gpu_layers(gpu.layers);
    }
    if (!gpu.memory.empty()) {
        if (const std::string why = gpu_memory_error(gpu.memory); !why.empty())
            throw CLI::ValidationError("--gpu-memory", why);
        request->memory_limit = *parse_memory_size(gpu.memory);
    }
    request->tensor_decode = gpu.wants_tensor_decode();
    return *request;
}

}  // namespace

std::unique_ptr<Model> load_model(const std::string& path, const std::string& activations,
                                  const GpuOptions& gpu, const std::function<bool()>& stop) {
    LoadOptions options;
    options.stop = stop;
    const std::optional<ActivationChoice> choice = parse_activation_choice(activations);
    if (!choice)
        throw CLI::ValidationError("--activations", activations + " not in {auto,exact,quantized}");
    options.activations = *choice;
    const GpuRequest request = gpu_request_of(gpu);
    // EMBER_WEIGHT_PANELS=0 keeps the file's row layout (for measuring the two side by side);
    // a model that may go to a GPU keeps it too (the GPU reads rows).
    const char* panels = std::getenv("EMBER_WEIGHT_PANELS");
    options.weight_panels =
        (panels == nullptr || std::string_view(panels) != "0") && !gpu_may_run(request);
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
    const GpuPlacement placed = place_model(*model, request, kv_bytes);
    if (!placed.note.empty())
        ui::TextWriter(stderr).raw("ember: note: ").text(placed.note).raw("\n");
    if (gpu.tensor_decode && model->device() == nullptr) {
        // The flag would otherwise be taken without a word and change nothing.
        ui::TextWriter(stderr).raw(
            "ember: note: --tensor-decode changes nothing here: the model runs on the CPU\n");
    }
    return model;
}

std::string model_placement(const Model& model) {
    return model.device() ? model.device()->description() : "CPU";
}

void add_gpu_option(CLI::App* cmd, GpuOptions& gpu) {
    cmd->add_option("--gpu", gpu.where,
                    "Where the model runs: auto (a GPU when there is one; a model larger than "
                    "its memory runs as many layers there as fit, the rest on the CPU), off (the "
                    "CPU), or a GPU number")
        ->capture_default_str();
    cmd->add_option("--gpu-layers", gpu.layers,
                    "Layers on the GPU, the rest on the CPU: N (0: the CPU) or all; default as "
                    "many as fit")
        ->check(gpu_layers_error);
    cmd->add_option("--gpu-memory", gpu.memory,
                    "The most GPU memory the model may take (weights, KV cache, scratch), e.g. "
                    "6GiB or 6000MiB; default the card's free memory")
        ->check(gpu_memory_error);
    auto* on = cmd->add_flag("--tensor-decode", gpu.tensor_decode,
                             "Decode products of Q4_K/Q6_K weights on the GPU's tensor cores: "
                             "faster for many conversations' steps together, ~16% slower for "
                             "one (serve's default with --parallel above 1)");
    cmd->add_flag("--no-tensor-decode", gpu.no_tensor_decode,
                  "Decode products on the CUDA cores, also in serve with several slots")
        ->excludes(on);
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
