// Joining a split GGUF model (llama.cpp's gguf-split layout: NAME-00001-of-0000N.gguf, each
// part a GGUF file holding split.no, split.count and split.tensors.count, the first part all
// the model's metadata) into one GGUF file, the form Ember's loader reads.
#pragma once

#include <string>
#include <vector>

namespace ember::app::hub {

// Writes `dest` (through a temporary file and a rename) from `parts`, in order: the first
// part's metadata without the split.* keys, then every part's tensors, bytes unchanged.
// Throws GgufError naming the part when the set is not one model's parts in order (a wrong
// split.no or split.count, a tensor count that does not add up, a tensor listed twice).
void join_split_gguf(const std::vector<std::string>& parts, const std::string& dest);

}  // namespace ember::app::hub
