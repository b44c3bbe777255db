// "Did you mean ...?" for a mistyped command, option or model name: the nearest candidate by
// edit distance, when it is near enough to be a typo rather than another word.
#pragma once

#include <string>
#include <vector>

namespace ember::app {

// Levenshtein distance with adjacent transpositions counted as one edit ("caht" -> "chat").
size_t edit_distance(const std::string& a, const std::string& b);

// The candidate nearest to `typed`, or empty when none is within a third of its length (at
// least 1, at most 3 edits) or two are equally near.
std::string nearest_name(const std::string& typed, const std::vector<std::string>& candidates);

}  // namespace ember::app
