#include "engine/generate/reply_router.h"

#include <algorithm>
#include <string_view>

namespace ember {

namespace {

constexpr std::string_view kOpenTag = "<think>";
constexpr std::string_view kCloseTag = "</think>";

// Length of the longest suffix of `text` that is a proper prefix of `word`.
size_t partial_suffix(std::string_view text, std::string_view word) {
    for (size_t len = std::min(word.size() - 1, text.size()); len > 0; --len) {
        if (text.substr(text.size() - len) == word.substr(0, len)) return len;
    }
    return 0;
}

// Length of the longest suffix of `text` that is a proper prefix of some stop string: that
// much must be held back, because the next token may complete the stop string.
size_t stop_holdback(std::string_view text, const std::vector<std::string>& stops) {
    size_t hold = 0;
    for (const auto& stop : stops) {
        if (!stop.empty()) hold = std::max(hold, partial_suffix(text, stop));
    }
    return hold;
}

}  // namespace

ReplyRouter::ReplyRouter(const std::vector<std::string>& stop_strings, bool thinking_possible,
                         bool starts_in_thinking, const TextCallback& on_text)
    : stops_(stop_strings),
      on_text_(on_text),
      phase_(starts_in_thinking  ? Phase::Thinking
             : thinking_possible ? Phase::Undecided
                                 : Phase::Answer) {
    skip_leading_space_ = phase_ != Phase::Answer;
}

void ReplyRouter::emit(const std::string& text, TextKind kind) {
    if (text.empty() || !on_text_) return;
    if (!on_text_(text, kind)) cancelled_ = true;
}

void ReplyRouter::push(const std::string& piece) {
    if (stopped_by_string_) return;
    pending_ += piece;
    while (!stopped_by_string_ && step()) {
    }
}

bool ReplyRouter::step() {
    if (skip_leading_space_) {
        const size_t first = pending_.find_first_not_of(" \t\r\n");
        pending_.erase(0, first == std::string::npos ? pending_.size() : first);
        if (pending_.empty()) return false;
    }
    switch (phase_) {
        case Phase::Undecided: {
            // The reply opens a thinking block only if its first text is the tag.
            if (pending_.size() < kOpenTag.size() &&
                kOpenTag.substr(0, pending_.size()) == pending_) {
                return false;
            }
            if (pending_.starts_with(kOpenTag)) {
                pending_.erase(0, kOpenTag.size());
                phase_ = Phase::Thinking;
                skip_leading_space_ = true;
            } else {
                phase_ = Phase::Answer;
                skip_leading_space_ = false;
            }
            return true;
        }
        case Phase::Thinking: {
            skip_leading_space_ = false;
            const size_t close = pending_.find(kCloseTag);
            if (close != std::string::npos) {
                const std::string text = pending_.substr(0, close);
                thinking_ += text;
                emit(text, TextKind::Thinking);
                pending_.erase(0, close + kCloseTag.size());
                phase_ = Phase::Answer;
                skip_leading_space_ = true;
                return true;
            }
            const size_t keep = partial_suffix(pending_, kCloseTag);
            const std::string text = pending_.substr(0, pending_.size() - keep);
            thinking_ += text;
            emit(text, TextKind::Thinking);
            pending_.erase(0, pending_.size() - keep);
            return false;
        }
        case Phase::Answer:
            skip_leading_space_ = false;
            append_answer(pending_);
            pending_.clear();
            return false;
    }
    return false;
}

void ReplyRouter::append_answer(const std::string& text) {
    // Everything before answer_emitted_ was checked: no stop string starts there.
    const size_t search_from = answer_emitted_;
    answer_ += text;
    for (const auto& stop : stops_) {
        if (stop.empty()) continue;
        const size_t at = answer_.find(stop, search_from);
        if (at != std::string::npos) {
            answer_.resize(at);
            emit_answer_upto(at);
            stopped_by_string_ = true;
            return;
        }
    }
    emit_answer_upto(answer_.size() - stop_holdback(answer_, stops_));
}

void ReplyRouter::emit_answer_upto(size_t end) {
    if (end <= answer_emitted_) return;
    emit(answer_.substr(answer_emitted_, end - answer_emitted_), TextKind::Answer);
    answer_emitted_ = end;
}

void ReplyRouter::force_end_thinking(const std::string& transition) {
    if (phase_ != Phase::Thinking) return;
    // Whatever was held back as a possible "</think>" start is thinking after all.
    const std::string text = pending_ + transition;
    pending_.clear();
    thinking_ += text;
    emit(text, TextKind::Thinking);
    phase_ = Phase::Answer;
    skip_leading_space_ = true;
}

void ReplyRouter::finish() {
    if (stopped_by_string_) return;
    if (phase_ == Phase::Undecided) phase_ = Phase::Answer;
    if (phase_ == Phase::Thinking) {
        // An unterminated thinking block: what was held back is thinking.
        thinking_ += pending_;
        emit(pending_, TextKind::Thinking);
    } else {
        answer_ += pending_;
    }
    pending_.clear();
    emit_answer_upto(answer_.size());
}

bool tokens_loop(const std::vector<int32_t>& tokens, size_t max_period, size_t repeats,
                 size_t min_span) {
    const size_t n = tokens.size();
    for (size_t period = 1; period <= max_period; ++period) {
        const size_t span = std::max(period * repeats, min_span);
        if (span > n) break;
        // The tail is periodic when every token equals the one `period` before it.
        bool periodic = true;
        for (size_t i = n - span + period; i < n && periodic; ++i) {
            periodic = tokens[i] == tokens[i - period];
        }
        if (periodic) return true;
    }
    return false;
}

}  // namespace ember
