// How `ember sessions stats` and the chat's /stats word the state store's sizes and counters
// (sessions::read_state_stats), a line each.
#pragma once

#include <cstdint>
#include <string>

#include "sessions/state_store.h"

namespace ember {

// The store's blocks, sizes against `cap_bytes` (--state-cap), restores, saves and
// evictions; each line ends in a newline.
std::string state_stats_text(const sessions::StateStats& stats, uint64_t cap_bytes);

}  // namespace ember
