// Progress of long work (a long prompt being read, a big file) as the front ends show it: the
// same words and numbers in the full-screen status line, line mode, scripted runs and JSON
// progress events.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/generate/generate.h"

namespace ember::ui {

// Tokens a second; 0 before anything is measured.
double prefill_rate(const PrefillProgress& p);
// Seconds still to go at the rate so far; negative when unknown.
double prefill_seconds_left(const PrefillProgress& p);

// A bar `width` cells wide, filled to `fraction` (clamped to 0..1) in eighths of a cell.
std::string progress_bar(double fraction, int width);

// "12,288" (thousands grouped, so long counts read at a glance).
std::string grouped(int64_t n);

// "3,072/14,212 tok 21% · 1,530 tok/s · 7s left": a prompt being read, without the bar.
std::string prefill_text(const PrefillProgress& p);

// {"event": "progress", "stage": "prefill", "done": ..., "total": ..., "seconds": ...,
//  "tokens_per_second": ...}: a --jsonl --progress line.
nlohmann::json prefill_event(const PrefillProgress& p);

// Redraws one line of progress in place on a terminal ("\r", the text, clear to the line's
// end), at most every `interval`, only once the work has gone on for `delay` (a short prompt
// shows nothing); clear() removes it. Not for files or pipes: the caller checks is_terminal().
class TerminalProgress {
public:
    explicit TerminalProgress(std::FILE* out,
                              std::chrono::milliseconds interval = std::chrono::milliseconds(100),
                              std::chrono::milliseconds delay = std::chrono::milliseconds(300))
        : out_(out), interval_(interval), delay_(delay) {}
    ~TerminalProgress() { clear(); }
    TerminalProgress(const TerminalProgress&) = delete;
    TerminalProgress& operator=(const TerminalProgress&) = delete;

    // A prompt being read; the line goes once it is all read.
    void prefill(const PrefillProgress& p);
    void clear();

private:
    std::FILE* out_;
    std::chrono::milliseconds interval_;
    std::chrono::milliseconds delay_;
    std::chrono::steady_clock::time_point last_{};
    bool shown_ = false;
};

// Work whose size is not known ahead (a VACUUM, a benchmark's stages): "what… 12s · Ctrl-C
// stops" redrawn in place on a terminal (nothing elsewhere), once it has gone on for half a
// second, a few times a second at most; clear() removes it.
class ElapsedLine {
public:
    explicit ElapsedLine(std::FILE* out);
    ~ElapsedLine() { clear(); }
    ElapsedLine(const ElapsedLine&) = delete;
    ElapsedLine& operator=(const ElapsedLine&) = delete;

    void show(const std::string& what);
    void clear();

private:
    std::FILE* out_;
    bool terminal_;
    std::chrono::steady_clock::time_point started_;
    std::chrono::steady_clock::time_point last_{};
    bool shown_ = false;
};

}  // namespace ember::ui
