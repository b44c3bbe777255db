// The table of families: one row per GGUF architecture Ember runs (family.h).
#include <array>
#include <stdexcept>

#include "engine/model/family.h"

namespace ember {

extern const FamilySpec kLlamaFamily, kQwen2Family, kQwen3Family, kQwen3MoeFamily, kLfm2Family,
    kQwen35Family, kGemma3Family, kGptOssFamily;

namespace {

// In Family's order (family_spec looks rows up by it).
constexpr std::array kFamilies = {&kLlamaFamily,  &kQwen2Family,  &kQwen3Family,    &kLfm2Family,
                                  &kQwen35Family, &kGemma3Family, &kQwen3MoeFamily, &kGptOssFamily};

}  // namespace

const FamilySpec* find_family(std::string_view arch) {
    for (const FamilySpec* spec : kFamilies) {
        if (spec->arch == arch) return spec;
    }
    return nullptr;
}

const FamilySpec& family_spec(Family family) {
    const auto i = static_cast<size_t>(family);
    if (i >= kFamilies.size() || kFamilies[i]->family != family) {
        throw std::logic_error("family table out of order");
    }
    return *kFamilies[i];
}

std::string supported_architectures() {
    std::string list;
    for (const FamilySpec* spec : kFamilies) {
        if (!list.empty()) list += ", ";
        list += spec->arch;
    }
    return list;
}

std::string_view family_name(Family family) {
    return family_spec(family).arch;
}

bool is_hybrid(Family family) {
    return family_spec(family).recurrent_kind != LayerKind::Attention;
}

}  // namespace ember
