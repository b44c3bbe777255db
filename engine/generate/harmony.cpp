#include "engine/generate/harmony.h"

#include <algorithm>

#include "engine/util/bounded_json.h"

namespace ember {

namespace {

// A header longer than this without <|message|> is not a header: real ones are a role, a
// channel name and perhaps a recipient and a content type.
constexpr size_t kMaxHeaderBytes = 256;

constexpr std::string_view kChannelMarker = "<|channel|>";

bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

// The word at `at` in `text`: up to whitespace or the next marker.
std::string word_at(const std::string& text, size_t at) {
    size_t end = at;
    while (end < text.size() && !is_space(text[end]) && text[end] != '<') ++end;
    return text.substr(at, end - at);
}

std::string trimmed(const std::string& text) {
    const size_t first = text.find_first_not_of(" \t\r\n");
    if (first == std::string::npos) return {};
    const size_t last = text.find_last_not_of(" \t\r\n");
    return text.substr(first, last + 1 - first);
}

// A header's text without the role that <|start|> is followed by.
std::string without_role(const std::string& header) {
    std::string text = trimmed(header);
    for (std::string_view role : {"assistant"}) {
        if (text.starts_with(role)) text.erase(0, role.size());
    }
    return trimmed(text);
}

}  // namespace

std::optional<HarmonyTokens> HarmonyTokens::find(const Tokenizer& tok) {
    auto special = [&](std::string_view text) -> TokenId {
        const auto id = tok.find_token(text);
        return id && tok.is_special(*id) ? *id : kNoToken;
    };
    HarmonyTokens t;
    t.start = special("<|start|>");
    t.end = special("<|end|>");
    t.message = special("<|message|>");
    t.channel = special("<|channel|>");
    t.ret = special("<|return|>");
    t.call = special("<|call|>");
    t.constrain = special("<|constrain|>");
    for (TokenId id : {t.start, t.end, t.message, t.channel, t.ret, t.call}) {
        if (id == kNoToken) return std::nullopt;
    }
    return t;
}

HarmonyRouter::HarmonyRouter(const Tokenizer& tokenizer, const HarmonyTokens& markers,
                             const std::vector<std::string>& stop_strings, bool starts_in_final,
                             bool stop_at_end, const TextCallback& on_text)
    : tok_(tokenizer),
      m_(markers),
      on_text_(on_text),
      stop_at_end_(stop_at_end),
      stops_(stop_strings),
      detok_(tokenizer, DecodeOptions{.skip_special = true, .strip_leading_space = false}),
      answer_(stops_, /*thinking_possible=*/false, /*starts_in_thinking=*/false, on_text) {
    if (starts_in_final) {
        part_ = Part::Body;
        body_ = Body::Answer;
        body_is_final_ = true;
    }
}

bool HarmonyRouter::is_marker(TokenId id) const {
    return id == m_.start || id == m_.end || id == m_.message || id == m_.channel || id == m_.ret ||
           id == m_.call || (id == m_.constrain && id != kNoToken);
}

std::string HarmonyRouter::marker_text(TokenId id) const {
    return tok_.token_to_piece(id, /*render_special=*/true);
}

ReplyRouter::Phase HarmonyRouter::phase() const {
    if (done()) return ReplyRouter::Phase::Answer;
    if (part_ != Part::Body) return ReplyRouter::Phase::Undecided;
    return body_ == Body::Thinking ? ReplyRouter::Phase::Thinking : ReplyRouter::Phase::Answer;
}

void HarmonyRouter::warn(const std::string& message) {
    const std::string text = "harmony: " + message;
    if (std::find(warnings_.begin(), warnings_.end(), text) == warnings_.end()) {
        warnings_.push_back(text);
    }
}

void HarmonyRouter::push(TokenId id) {
    if (done() || cancelled()) return;
    if (is_marker(id)) {
        flush_text();
        on_marker(id);
        return;
    }
    if (stop_at_end_ && tok_.is_eog(id)) {  // the vocabulary's own end of text
        flush_text();
        done_ = true;
        return;
    }
    text(detok_.push(id));
}

void HarmonyRouter::on_marker(TokenId id) {
    const bool ends_reply = id == m_.ret || id == m_.call;
    if (part_ == Part::Header) {
        if (id == m_.message) {
            open_body();
        } else if (id == m_.channel || id == m_.constrain) {
            header_ += marker_text(id);
        } else if (id == m_.start) {
            if (!without_role(header_).empty()) {
                header_as_text("a message header without <|message|>");
            }
            header_.clear();
        } else {  // end, return, call: the header never opened a message
            if (!without_role(header_).empty()) {
                header_as_text("a message header without <|message|>");
            }
            header_.clear();
            part_ = Part::Between;
            if (stop_at_end_ && (ends_reply || id == m_.end)) done_ = true;
        }
        return;
    }
    if (part_ == Part::Between) {
        if (id == m_.start) {
            part_ = Part::Header;
            header_.clear();
        } else if (id == m_.channel || id == m_.constrain) {  // the model skipped <|start|>
            part_ = Part::Header;
            header_ = marker_text(id);
        } else if (id == m_.message) {
            warn("<|message|> without a header; its text is shown as the answer");
            part_ = Part::Body;
            body_ = Body::Answer;
            body_is_final_ = false;
        } else if (stop_at_end_) {
            done_ = true;
        }
        return;
    }
    // Inside a message.
    if (id == m_.end || ends_reply) {
        if (body_ == Body::Call) close_call();
        part_ = Part::Between;
        if (stop_at_end_ && (ends_reply || body_is_final_)) done_ = true;
    } else if (id == m_.start) {
        warn("a message not closed by <|end|>");
        if (body_ == Body::Call) close_call();
        part_ = Part::Header;
        header_.clear();
    } else {  // <|channel|>, <|message|> or <|constrain|> inside a message: keep it as text
        warn(marker_text(id) + " inside a message; shown as text");
        text(marker_text(id));
    }
}

void HarmonyRouter::open_body() {
    const size_t channel_at = header_.find(kChannelMarker);
    const std::string channel = channel_at == std::string::npos
                                    ? std::string()
                                    : word_at(header_, channel_at + kChannelMarker.size());
    const size_t to_at = header_.find("to=");
    const std::string recipient =
        to_at == std::string::npos ? std::string() : word_at(header_, to_at + 3);
    part_ = Part::Body;
    body_ = Body::Answer;
    body_is_final_ = false;
    if (channel_at == std::string::npos) {
        // No channel: whatever the header holds besides the role is text the model wrote.
        warn("a message without a channel; its text is shown as the answer");
        const std::string stray = without_role(header_);
        header_.clear();
        if (!stray.empty()) answer_text(stray + " ");
        return;
    }
    header_.clear();
    if (channel == "analysis") {
        body_ = Body::Thinking;
    } else if (channel == "final") {
        body_is_final_ = true;
    } else if (channel == "commentary") {
        if (open_call(recipient)) return;
        if (!recipient.empty()) {
            warn("the model called the tool '" + recipient +
                 "'; ember runs no tools, so the call is shown as text");
        }
    } else {
        warn("unknown channel '" + channel + "'; its text is shown as the answer");
    }
    if (body_ == Body::Answer && !answer_.answer().empty()) answer_started_ = true;
}

void HarmonyRouter::enable_tool_calls(std::vector<std::string> names,
                                      const ToolCallCallback& on_call) {
    tools_enabled_ = true;
    tool_names_ = std::move(names);
    on_call_ = &on_call;
}

bool HarmonyRouter::open_call(const std::string& recipient) {
    constexpr std::string_view kFunctions = "functions.";
    if (!tools_enabled_ || !recipient.starts_with(kFunctions)) return false;
    const std::string name = recipient.substr(kFunctions.size());
    if (!tool_names_.empty() &&
        std::find(tool_names_.begin(), tool_names_.end(), name) == tool_names_.end()) {
        warn("the model called '" + name + "', which is not among the tools; shown as text");
        return false;
    }
    calls_.push_back(ToolCall{new_tool_call_id(), name, {}});
    body_ = Body::Call;
    if (*on_call_ && !(*on_call_)(ToolCallDelta{calls_.size() - 1, calls_.back().id, name, {}})) {
        cancelled_ = true;
    }
    return true;
}

void HarmonyRouter::call_text(const std::string& text) {
    calls_.back().arguments += text;
    if (*on_call_ && !(*on_call_)(ToolCallDelta{calls_.size() - 1, {}, {}, text}))
        cancelled_ = true;
}

void HarmonyRouter::close_call() {
    const ToolCall& call = calls_.back();
    const auto parsed = try_parse_json_bounded<nlohmann::json>(call.arguments);
    if (!parsed.is_object()) {
        warn("the arguments of call " + std::to_string(calls_.size() - 1) + " (" + call.name +
             ") are not a valid JSON object");
    }
    body_ = Body::Answer;
}

void HarmonyRouter::header_as_text(const std::string& why) {
    warn(why + "; shown as plain text");
    const std::string stray = without_role(header_);
    header_.clear();
    if (!stray.empty()) {
        if (!answer_.answer().empty()) answer_started_ = true;
        answer_text(stray);
    }
}

void HarmonyRouter::text(const std::string& piece) {
    if (piece.empty()) return;
    switch (part_) {
        case Part::Header:
            header_ += piece;
            if (header_.size() > kMaxHeaderBytes) {
                header_as_text("no <|message|> in " + std::to_string(kMaxHeaderBytes) +
                               " bytes of a message header");
                part_ = Part::Body;
                body_ = Body::Answer;
                body_is_final_ = false;
            }
            return;
        case Part::Between:
            if (trimmed(piece).empty()) return;  // spacing between messages
            warn("text outside a message; shown as the answer");
            part_ = Part::Body;
            body_ = Body::Answer;
            body_is_final_ = false;
            if (!answer_.answer().empty()) answer_started_ = true;
            answer_text(piece);
            return;
        case Part::Body:
            if (body_ == Body::Thinking) {
                thinking_ += piece;
                if (on_text_ && !on_text_(piece, TextKind::Thinking)) cancelled_ = true;
            } else if (body_ == Body::Call) {
                call_text(piece);
            } else {
                answer_text(piece);
            }
            return;
    }
}

void HarmonyRouter::answer_text(const std::string& text) {
    if (text.empty()) return;
    if (answer_started_) {  // a second message shown as answer: keep the two apart
        answer_started_ = false;
        answer_.push("\n\n");
    }
    answer_.push(text);
}

void HarmonyRouter::flush_text() {
    text(detok_.flush());
}

void HarmonyRouter::force_end_thinking(const std::string& transition) {
    if (phase() != ReplyRouter::Phase::Thinking) return;
    flush_text();
    thinking_ += transition;
    if (on_text_ && !on_text_(transition, TextKind::Thinking)) cancelled_ = true;
    body_ = Body::Answer;
    body_is_final_ = true;
}

void HarmonyRouter::finish() {
    if (!done()) flush_text();
    if (part_ == Part::Body && body_ == Body::Call) {
        warn("the reply ended inside the arguments of call " + std::to_string(calls_.size() - 1));
        close_call();
    }
    if (part_ == Part::Header && !without_role(header_).empty()) {
        header_as_text("the reply ended inside a message header");
    }
    answer_.finish();
}

}  // namespace ember
