// ToolCallParser: the text formats' calls read as the reply streams (see tool_calls.h).
//
// The parser is a small state machine over a buffer of undecided text. Each state looks at
// the buffer and either decides (consumes text, maybe changes state) or waits for more; at
// the end of the reply every state decides with what it has. Decisions depend only on the
// text, never on where it was split, so a streamed reply gives what the whole one gives.
#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>
#include <random>

#include "engine/generate/tool_calls.h"
#include "engine/util/bounded_json.h"

namespace ember {

namespace {

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kFence = "```";
constexpr size_t kMaxNameBytes = 64;

bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '.';
}

size_t skip_space(std::string_view text, size_t at) {
    while (at < text.size() && is_space(text[at])) ++at;
    return at;
}

enum class Match { Yes, Partial, No };

// Whether `text` holds `literal` at `at` (Partial: the text ends inside it).
Match match_at(std::string_view text, size_t at, std::string_view literal) {
    const size_t n = std::min(literal.size(), text.size() - std::min(at, text.size()));
    if (text.substr(at, n) != literal.substr(0, n)) return Match::No;
    return n == literal.size() ? Match::Yes : Match::Partial;
}

// Length of the longest suffix of `text` that is a proper prefix of `literal`: text that may
// still become the literal and must be held back.
size_t partial_suffix(std::string_view text, std::string_view literal) {
    for (size_t n = std::min(text.size(), literal.size() - 1); n > 0; --n) {
        if (text.substr(text.size() - n) == literal.substr(0, n)) return n;
    }
    return 0;
}

// A call's start: {"name": "NAME", "arguments": (or "parameters":) up to the value's first
// character. `at` moves past what matched.
struct HeaderScan {
    Match result = Match::Partial;
    bool named = false;  // got past "name": the text meant to be a call
    std::string name;
    std::string why;  // for Match::No
};

HeaderScan scan_header(std::string_view text, size_t& at) {
    HeaderScan scan;
    auto literal = [&](std::string_view lit) {
        at = skip_space(text, at);
        const Match m = match_at(text, at, lit);
        if (m == Match::Yes) at += lit.size();
        return m;
    };
    auto fail = [&](std::string why) {
        scan.result = Match::No;
        scan.why = std::move(why);
        return scan;
    };
    Match m = literal("{");
    if (m != Match::Yes) return m == Match::No ? fail("no JSON object") : scan;
    if ((m = literal("\"name\"")) != Match::Yes) {
        return m == Match::No ? fail("the object does not start with \"name\"") : scan;
    }
    scan.named = true;
    if ((m = literal(":")) != Match::Yes)
        return m == Match::No ? fail("no ':' after \"name\"") : scan;
    if ((m = literal("\"")) != Match::Yes)
        return m == Match::No ? fail("the name is not a string") : scan;
    size_t end = at;
    while (end < text.size() && is_name_char(text[end]) && end - at <= kMaxNameBytes) ++end;
    if (end - at > kMaxNameBytes) return fail("the function name is too long");
    if (end == text.size()) return scan;
    if (text[end] != '"' || end == at) return fail("the function name is not a plain name");
    scan.name = std::string(text.substr(at, end - at));
    at = end + 1;
    if ((m = literal(",")) != Match::Yes) {
        return m == Match::No ? fail("no arguments after the name") : scan;
    }
    at = skip_space(text, at);
    const Match args = match_at(text, at, "\"arguments\"");
    const Match params = match_at(text, at, "\"parameters\"");
    if (args == Match::No && params == Match::No) return fail("no \"arguments\" after the name");
    if (args != Match::Yes && params != Match::Yes) return scan;
    at += args == Match::Yes ? 11 : 12;
    if ((m = literal(":")) != Match::Yes)
        return m == Match::No ? fail("no ':' after the key") : scan;
    at = skip_space(text, at);
    if (at == text.size()) return scan;
    if (text[at] != '{' && text[at] != '"') return fail("the arguments are not an object");
    scan.result = Match::Yes;
    return scan;
}

}  // namespace

std::string new_tool_call_id() {
    static constexpr char kChars[] =
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    std::random_device device;
    std::mt19937 rng(device());
    std::uniform_int_distribution<size_t> pick(0, sizeof(kChars) - 2);
    std::string id = "call_";
    for (int i = 0; i < 24; ++i) id += kChars[pick(rng)];
    return id;
}

ToolCallParser::ToolCallParser(ToolCallFormat format, Options options,
                               std::function<bool(const std::string&)> on_content,
                               ToolCallCallback on_call)
    : format_(format),
      options_(std::move(options)),
      on_content_(std::move(on_content)),
      on_call_(std::move(on_call)),
      state_(format == ToolCallFormat::Hermes ? State::Content : State::Start) {}

void ToolCallParser::warn(const std::string& message) {
    warnings_.push_back("tool calls: " + message);
}

void ToolCallParser::push(std::string_view text) {
    if (done_) return;  // the calls asked for are complete; the rest is not read
    buf_ += text;
    while (!done_ && step(/*at_end=*/false)) {
    }
}

void ToolCallParser::finish() {
    while (!done_ && step(/*at_end=*/true)) {
    }
    if (!done_ && state_ == State::Arguments) {
        warn("the reply ended inside the arguments of call " + std::to_string(calls_.size()));
        end_call();
    }
    // Whitespace after the text is the reply's own, unless it only led up to a call.
    if (calls_.empty() && !held_space_.empty()) {
        content_ += held_space_;
        if (on_content_ && !on_content_(held_space_)) cancelled_ = true;
    }
    held_space_.clear();
    buf_.clear();
}

void ToolCallParser::emit_content(std::string_view text) {
    if (text.empty()) return;
    size_t keep = text.size();
    while (keep > 0 && is_space(text[keep - 1])) --keep;
    if (keep == 0) {
        held_space_ += text;
        return;
    }
    std::string out = held_space_ + std::string(text.substr(0, keep));
    held_space_ = std::string(text.substr(keep));
    content_ += out;
    if (on_content_ && !on_content_(out)) cancelled_ = true;
}

void ToolCallParser::begin_call(const std::string& name) {
    held_space_.clear();  // whitespace before a call is not content
    ToolCall call{new_tool_call_id(), name, {}};
    calls_.push_back(call);
    if (on_call_ && !on_call_(ToolCallDelta{calls_.size() - 1, call.id, call.name, {}})) {
        cancelled_ = true;
    }
}

void ToolCallParser::call_arguments(std::string_view fragment) {
    if (fragment.empty()) return;
    calls_.back().arguments += fragment;
    if (on_call_ && !on_call_(ToolCallDelta{calls_.size() - 1, {}, {}, std::string(fragment)})) {
        cancelled_ = true;
    }
}

void ToolCallParser::end_call() {
    const ToolCall& call = calls_.back();
    const auto parsed = try_parse_json_bounded<nlohmann::json>(call.arguments);
    if (!parsed.is_object()) {
        warn("the arguments of call " + std::to_string(calls_.size() - 1) + " (" + call.name +
             ") are not a valid JSON object");
    }
    if (calls_.size() >= options_.max_calls) done_ = true;
}

void ToolCallParser::header_failed(bool warn_user, const std::string& why) {
    if (warn_user) warn("a tool call that cannot be read (" + why + ") is shown as text");
    // The markup read so far goes back as text; the buffer is read again as content (the
    // call's start marker is in header_text_, so a Hermes scan finds the next one, not this).
    emit_content(header_text_);
    header_text_.clear();
    state_ = State::Content;
}

bool ToolCallParser::step(bool at_end) {
    switch (state_) {
        case State::Start:
            return step_start(at_end);
        case State::Content:
            return step_content(at_end);
        case State::Header:
            return step_header(at_end);
        case State::Arguments:
            return step_arguments(at_end);
        case State::Trailer:
            return step_trailer(at_end);
        case State::Skip: {
            const size_t close = buf_.find(kHermesClose);
            if (close == std::string::npos) {
                // Keep what may be the start of the closing tag.
                buf_.erase(0,
                           at_end ? buf_.size() : buf_.size() - partial_suffix(buf_, kHermesClose));
                return false;
            }
            buf_.erase(0, close + kHermesClose.size());
            state_ = State::Content;
            return true;
        }
        case State::Drop:
            buf_.clear();
            return false;
    }
    return false;
}

// Llama3 and Gemma3: a call is the reply (after whitespace, <|python_tag|> or a ``` fence).
bool ToolCallParser::step_start(bool at_end) {
    size_t at = 0;
    while (at < buf_.size() && (is_space(buf_[at]) || (after_call_ && buf_[at] == ';'))) ++at;
    auto undecided = [&] {
        if (!at_end) return false;
        state_ = State::Content;  // the reply ended before a call could start: it is text
        return true;
    };
    if (at == buf_.size()) return undecided();
    fenced_ = false;
    if (format_ == ToolCallFormat::Llama3) {
        const Match tag = match_at(buf_, at, kPythonTag);
        if (tag == Match::Partial) return undecided();
        if (tag == Match::Yes) at = skip_space(buf_, at + kPythonTag.size());
    } else if (format_ == ToolCallFormat::Gemma3) {
        const Match fence = match_at(buf_, at, kFence);
        if (fence == Match::Partial) return undecided();
        if (fence == Match::Yes) {
            size_t end = at + kFence.size();
            while (end < buf_.size() &&
                   (std::isalnum(static_cast<unsigned char>(buf_[end])) || buf_[end] == '_')) {
                ++end;
            }
            if (end == buf_.size()) return undecided();
            fenced_ = true;
            at = skip_space(buf_, end);
        }
    }
    if (at == buf_.size()) return undecided();
    if (buf_[at] != '{') {
        state_ = State::Content;  // text, not a call
        return true;
    }
    header_text_ = buf_.substr(0, at);
    buf_.erase(0, at);
    state_ = State::Header;
    return true;
}

bool ToolCallParser::step_content(bool at_end) {
    if (format_ != ToolCallFormat::Hermes) {  // only the start of a reply can be a call
        emit_content(buf_);
        buf_.clear();
        return false;
    }
    const size_t open = buf_.find(kHermesOpen);
    if (open == std::string::npos) {
        const size_t hold = at_end ? 0 : partial_suffix(buf_, kHermesOpen);
        emit_content(std::string_view(buf_).substr(0, buf_.size() - hold));
        buf_.erase(0, buf_.size() - hold);
        return false;
    }
    emit_content(std::string_view(buf_).substr(0, open));
    header_text_ = std::string(kHermesOpen);
    buf_.erase(0, open + kHermesOpen.size());
    state_ = State::Header;
    return true;
}

bool ToolCallParser::step_header(bool at_end) {
    if (calls_.size() >= options_.max_calls) {  // no further call may start
        done_ = true;
        return false;
    }
    size_t at = 0;
    HeaderScan scan = scan_header(buf_, at);
    const bool hermes = format_ == ToolCallFormat::Hermes;
    if (scan.result == Match::Yes && !options_.names.empty() &&
        std::find(options_.names.begin(), options_.names.end(), scan.name) ==
            options_.names.end()) {
        scan.result = Match::No;
        scan.why = "no function is named '" + scan.name + "'";
    }
    if (scan.result == Match::Partial) {
        if (!at_end) return false;
        scan.why = "the reply ended inside it";
        scan.result = Match::No;
    }
    if (scan.result == Match::No) {
        header_failed(hermes || scan.named, scan.why);
        return true;
    }
    header_text_.clear();
    begin_call(scan.name);
    buf_.erase(0, at);
    string_arguments_ = buf_[0] == '"';
    depth_ = 0;
    in_string_ = escaped_ = false;
    state_ = State::Arguments;
    return true;
}

bool ToolCallParser::step_arguments(bool) {
    // Scan to the end of the value (an object, or a string holding the JSON text). An object
    // streams as it is scanned; a string is held until it closes and then decoded.
    size_t i = scanned_;
    bool closed = false;
    for (; i < buf_.size() && !closed; ++i) {
        const char c = buf_[i];
        if (in_string_) {
            if (escaped_) {
                escaped_ = false;
            } else if (c == '\\') {
                escaped_ = true;
            } else if (c == '"') {
                in_string_ = false;
                closed = string_arguments_ && depth_ == 0;
            }
        } else if (c == '"') {
            in_string_ = true;
        } else if (c == '{' || c == '[') {
            ++depth_;
        } else if (c == '}' || c == ']') {
            closed = --depth_ == 0;
        }
    }
    if (string_arguments_) {
        scanned_ = i;
        if (!closed) return false;
        const auto text = try_parse_json_bounded<nlohmann::json>(buf_.substr(0, i));
        call_arguments(text.is_string() ? text.get<std::string>() : buf_.substr(0, i));
    } else {
        call_arguments(std::string_view(buf_).substr(0, i));
    }
    buf_.erase(0, i);
    scanned_ = 0;
    if (!closed) return false;
    end_call();
    state_ = State::Trailer;
    return true;
}

bool ToolCallParser::step_trailer(bool at_end) {
    size_t at = 0;
    auto expect = [&](std::string_view literal) {
        at = skip_space(buf_, at);
        const Match m = match_at(buf_, at, literal);
        if (m == Match::Yes) at += literal.size();
        return m;
    };
    Match m = expect("}");
    if (m == Match::Yes) {
        if (format_ == ToolCallFormat::Hermes) {
            m = expect(kHermesClose);
        } else if (fenced_) {
            m = expect(kFence);
        }
    }
    if (m == Match::Partial) {
        // More text decides; at the end, a reply that stops in the closing markup keeps its call.
        if (at_end) buf_.clear();
        return false;
    }
    if (m == Match::No) {
        warn("unexpected text after the arguments of call " + std::to_string(calls_.size() - 1) +
             "; dropped");
        // Llama3/Gemma3 have no closing markup to resume after: the rest of the reply goes,
        // however it streams in (clearing only the buffer made the text that arrived later
        // content, so the result depended on the split: found by fuzz_tool_calls).
        state_ = format_ == ToolCallFormat::Hermes ? State::Skip : State::Drop;
        return true;
    }
    buf_.erase(0, at);
    after_call_ = true;
    state_ = format_ == ToolCallFormat::Hermes ? State::Content : State::Start;
    return true;
}

ParsedReply parse_tool_calls(ToolCallFormat format, std::string_view text,
                             ToolCallParser::Options options) {
    ToolCallParser parser(format, std::move(options), nullptr, nullptr);
    parser.push(text);
    parser.finish();
    return ParsedReply{parser.content(), parser.calls(), parser.warnings()};
}

}  // namespace ember
