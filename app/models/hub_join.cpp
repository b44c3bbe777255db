#include "app/models/hub_join.h"

#include <cstring>
#include <memory>

#include "engine/gguf/gguf.h"

namespace ember::app::hub {

void join_split_gguf(const std::vector<std::string>& parts, const std::string& dest) {
    if (parts.empty()) throw GgufError(dest + ": no parts to join");
    std::vector<std::unique_ptr<GgufFile>> files;
    for (const auto& path : parts) files.push_back(GgufFile::open(path));
    const auto count = static_cast<int64_t>(parts.size());
    int64_t tensors = 0;
    for (size_t i = 0; i < files.size(); ++i) {
        const GgufFile& f = *files[i];
        if (f.get_int("split.no").value_or(-1) != static_cast<int64_t>(i) ||
            f.get_int("split.count").value_or(-1) != count) {
            throw GgufError(f.path() + ": not part " + std::to_string(i + 1) + " of " +
                            std::to_string(count) + " (split.no / split.count say otherwise)");
        }
        tensors += static_cast<int64_t>(f.tensors().size());
    }
    const GgufFile& first = *files.front();
    if (first.get_int("split.tensors.count").value_or(-1) != tensors) {
        throw GgufError(first.path() + ": split.tensors.count is not the " +
                        std::to_string(tensors) + " tensors the parts hold");
    }
    GgufWriter writer;
    for (const auto& key : first.metadata_order()) {
        if (!key.starts_with("split.")) writer.copy_from(first, key);
    }
    for (const auto& file : files) {
        for (const auto& t : file->tensors()) {
            // The bytes are copied from the part's mapping while the file is written.
            const uint8_t* source = t.data;
            const uint64_t n = t.n_bytes;
            writer.add_tensor(t.name, t.dims, t.type,
                              [source, n](uint8_t* dst) { std::memcpy(dst, source, n); });
        }
    }
    writer.write(dest, first.alignment());
}

}  // namespace ember::app::hub
