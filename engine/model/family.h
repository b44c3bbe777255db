// A family to the engine: its GGUF architecture name, the switches its layers take (layers.h),
// and how its own hyper-parameters and tensors are read. One row per family in
// families/families.cpp; loading, the forward pass and the state read these rows and never
// test a family's name. docs/adding-a-family.md lists what a new family touches.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/model/model.h"

namespace ember {

class GgufFile;
class TensorBinder;

struct FamilySpec {
    std::string_view arch;  // general.architecture
    Family family = Family::Llama;
    // Switches of the shared layers (ModelConfig), set before the common keys are read.
    RopeLayout rope_layout = RopeLayout::Halves;
    bool qkv_bias = false;
    bool qk_norm = false;
    bool attn_output_gate = false;
    bool post_norms = false;
    // Tensor names that differ between families.
    std::string_view output_norm = "output_norm.weight";
    std::string_view ffn_norm = "ffn_norm.weight";
    // Hybrids: the kind of their recurrent layers (Attention: every layer is attention), a
    // tensor only those layers have, and which layers the metadata makes attention: `key`
    // names what states it, left empty when the file says nothing.
    LayerKind recurrent_kind = LayerKind::Attention;
    std::string_view recurrent_tensor;
    void (*metadata_attention)(const GgufFile& f, const ModelConfig& c, std::string& key,
                               std::vector<bool>& attention) = nullptr;
    // Mixtures of experts: whether every layer has experts (a missing router is an error)
    // rather than only the layers with a router.
    bool every_layer_moe = false;
    // The family's own keys, read after the common ones (throws ModelError naming the key).
    void (*read_config)(const GgufFile& f, ModelConfig& c) = nullptr;
    // The family's own tensors of one layer, after the shared ones; prefix: "blk.N.".
    void (*bind_layer)(const TensorBinder& bind, const std::string& prefix, const ModelConfig& c,
                       LayerWeights& layer) = nullptr;
    // Bytes of the family's own hyper-parameters that join the fingerprint.
    void (*fingerprint)(const ModelConfig& c, std::vector<uint8_t>& bytes) = nullptr;
};

// The row of a GGUF architecture, or null.
const FamilySpec* find_family(std::string_view arch);
const FamilySpec& family_spec(Family family);
// "llama, qwen2, ...": the architectures Ember runs, for error messages.
std::string supported_architectures();

}  // namespace ember
