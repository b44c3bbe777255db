// Whether restoring stored state pays: a prompt whose start a prefix store holds can be
// restored (read the rows back) or recomputed (evaluate the tokens again), and on a fast
// device reading and inflating rows can take longer than evaluating them. The store offers
// what it holds beyond the live state as spans, each with its bytes and the speed of the
// place it comes from (memory, a database); the conversation knows how fast it evaluates
// prompts. choose_resume() prices every way to split the offer into "restore up to here,
// recompute the rest" and keeps the cheapest: all of it, a prefix, or none.
//
// A pure function of its inputs, so the choice is testable with given speeds.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace ember {

// A run of prompt positions a prefix store can restore, following the span before it (the
// first follows the live state's `have`).
struct RestoreSpan {
    int64_t end = 0;    // restoring the span brings the state to this position
    int64_t bytes = 0;  // state bytes read into the state for it
    // The place's measured (or assumed) restore throughput, in bytes of state per second;
    // <= 0: unknown, taken as free (restoring is then always chosen, as before any estimate).
    double bytes_per_second = 0;
    // Paid once when the plan reads from this place at all (lookups, a transaction).
    double fixed_seconds = 0;
    std::string source;  // where it comes from, for the user: "memory", "database"
};

// What a resume did with what the store offered.
enum class ResumePath {
    None,       // the store held nothing beyond the live state
    Restore,    // everything offered was restored
    Partial,    // a prefix of the offer was restored, the rest recomputed
    Recompute,  // restoring would have been slower: everything was recomputed
};
std::string_view resume_path_name(ResumePath path);

struct ResumeChoice {
    int64_t restore_to = 0;  // restore [have, restore_to), recompute [restore_to, offer's end)
    ResumePath path = ResumePath::None;
    size_t spans_used = 0;             // the offer's first spans_used spans are restored
    double restore_seconds = 0;        // estimated, of the chosen plan
    double recompute_seconds = 0;      // estimated, of the chosen plan (to the offer's end)
    double all_restore_seconds = 0;    // estimated, restoring everything offered
    double all_recompute_seconds = 0;  // estimated, recomputing everything offered instead
};

// The cheapest plan for a state holding `have` positions, given the store's `offer` (spans in
// order, ends increasing past `have`) and the prompt evaluation speed. A tie restores (the
// state then holds what was stored, and the prompt is evaluated no further than before).
ResumeChoice choose_resume(int64_t have, std::span<const RestoreSpan> offer,
                           double prefill_tokens_per_second);

// Prompt evaluation speed as measured on recent prompts, for choose_resume().
class PrefillRate {
public:
    // Before any measurement: a speed most CPUs reach on models small enough to chat with, and
    // low enough that a stored prefix is restored (the store's state is then at least not
    // recomputed for nothing) until the engine has shown it evaluates faster.
    static constexpr double kDefaultTokensPerSecond = 1000;
    // Prompts shorter than this say little about a prefill's speed (they run as a thin
    // batch) and are not counted.
    static constexpr int64_t kMinTokens = 32;

    PrefillRate() = default;
    // Before any measurement: `assumed` tokens per second (a GPU's estimate from its peak,
    // ComputeDevice::assumed_prefill_tokens_per_second); <= 0: kDefaultTokensPerSecond.
    explicit PrefillRate(double assumed)
        : assumed_(assumed > 0 ? assumed : kDefaultTokensPerSecond) {}

    // A prefill of `tokens` tokens took `seconds`; newer measurements weigh more (the speed
    // moves with the context length and the machine's load).
    void add(int64_t tokens, double seconds);
    double tokens_per_second() const;
    bool measured() const { return seconds_ > 0; }

private:
    double assumed_ = kDefaultTokensPerSecond;
    double tokens_ = 0;
    double seconds_ = 0;
};

}  // namespace ember
