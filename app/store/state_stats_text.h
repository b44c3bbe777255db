// How `ember sessions stats` and the chat's /stats word the state store's sizes and counters
// (sessions::read_state_stats), a line each.
#pragma once

#include <cstdint>
#include <string>

#include "sessions/state_store.h"
#include "sessions/state_tier.h"

namespace ember {

// The store's blocks, sizes against `cap_bytes` (--state-cap), restores, saves and
// evictions; each line ends in a newline.
std::string state_stats_text(const sessions::StateStats& stats, uint64_t cap_bytes);

// The host-memory tier in front of the store (this process's): what it holds against its
// bound (--state-memory), its restores and their speed, and what it dropped; one line.
std::string state_tier_text(const sessions::StateTierStats& stats);

}  // namespace ember
