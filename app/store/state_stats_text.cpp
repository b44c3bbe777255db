#include "app/store/state_stats_text.h"

#include <cstdio>

namespace ember {

namespace {

std::string human_bytes(double bytes) {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024 && u < 4) {
        bytes /= 1024;
        ++u;
    }
    char buf[32];
    std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", bytes, units[u]);
    return buf;
}

std::string percent(int64_t part, int64_t whole) {
    if (whole <= 0) return "n/a";
    char buf[16];
    std::snprintf(buf, sizeof buf, "%.1f%%", 100.0 * static_cast<double>(part) / whole);
    return buf;
}

}  // namespace

std::string state_stats_text(const sessions::StateStats& s, uint64_t cap_bytes) {
    std::string out;
    auto line = [&](const std::string& text) { out += text + "\n"; };
    line("state: " + std::to_string(s.blocks) + " blocks (" + std::to_string(s.partial_blocks) +
         " partial) covering " + std::to_string(s.tokens) + " tokens, " + std::to_string(s.models) +
         " model/KV-type key(s)");
    line("size:  " + human_bytes(static_cast<double>(s.stored_bytes)) + " stored (" +
         human_bytes(static_cast<double>(s.raw_bytes)) + " before compression), cap " +
         human_bytes(static_cast<double>(cap_bytes)));
    line("restore: " + std::to_string(s.restore_hits) + " of " + std::to_string(s.restores) +
         " lookups hit (" + percent(s.restore_hits, s.restores) + "), " +
         std::to_string(s.tokens_restored) + " of " + std::to_string(s.tokens_wanted) +
         " wanted tokens restored (" + percent(s.tokens_restored, s.tokens_wanted) + ")");
    if (s.restores_declined > 0) {
        // The engine weighs restoring against recomputing (resume_plan.h) and read less.
        line("declined: " + std::to_string(s.restores_declined) + " restores recomputed " +
             std::to_string(s.tokens_declined) +
             " stored tokens instead (estimated faster than restoring them)");
    }
    if (s.restore_seconds > 0) {
        char rate[96];
        std::snprintf(rate, sizeof rate, "%.0f MB/s (%.0f MB/s of stored bytes)",
                      static_cast<double>(s.restore_raw_bytes) / 1e6 / s.restore_seconds,
                      static_cast<double>(s.restore_stored_bytes) / 1e6 / s.restore_seconds);
        line("restore speed: " + std::string(rate) + ", " +
             human_bytes(static_cast<double>(s.restore_raw_bytes)) + " in " +
             std::to_string(s.restore_seconds).substr(0, 6) + " s");
    }
    if (s.snapshots > 0) {
        line("snapshots: " + std::to_string(s.snapshots) + " recurrent-state snapshots");
    }
    line("save:  " + std::to_string(s.blocks_written) + " blocks written (" +
         human_bytes(static_cast<double>(s.bytes_written)) + "), " +
         std::to_string(s.blocks_reused) + " already stored");
    line("eviction: " + std::to_string(s.blocks_evicted) + " blocks evicted (" +
         human_bytes(static_cast<double>(s.bytes_evicted)) + "), " +
         std::to_string(s.blobs_dropped) + " corrupted blobs dropped");
    return out;
}

std::string state_tier_text(const sessions::StateTierStats& s) {
    std::string text = "memory: " + human_bytes(static_cast<double>(s.bytes)) + " of " +
                       human_bytes(static_cast<double>(s.cap_bytes)) + " held (" +
                       std::to_string(s.blocks) + " blocks), " + std::to_string(s.restores) +
                       " restores of " + std::to_string(s.tokens_restored) + " tokens";
    if (s.restore_seconds > 0) {
        char rate[48];
        std::snprintf(rate, sizeof rate, " at %.0f MB/s",
                      static_cast<double>(s.bytes_restored) / 1e6 / s.restore_seconds);
        text += rate;
    }
    return text + ", " + std::to_string(s.blocks_evicted) + " blocks dropped for room\n";
}

}  // namespace ember
