#include "engine/generate/control_text.h"

#include <algorithm>
#include <random>
#include <utility>

namespace ember {

namespace {

std::string random_nonce() {
    thread_local std::mt19937_64 rng{std::random_device{}()};
    static constexpr char kDigits[] = "0123456789abcdefghijklmnopqrstuvwxyz";
    std::string out;
    uint64_t bits = rng();
    for (int i = 0; i < 12; ++i, bits /= 36) out += kDigits[bits % 36];
    return out;
}

std::string lower(std::string_view s) {
    std::string out(s);
    for (char& c : out) {
        if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    }
    return out;
}

}  // namespace

ControlTextMask::ControlTextMask(const Tokenizer& tokenizer)
    : tokenizer_(tokenizer), prefix_("EmberCtl" + random_nonce() + "n") {}

bool ControlTextMask::mask(std::string& s) {
    const std::vector<TextRange> spans = tokenizer_.control_token_spans(s);
    if (spans.empty()) return false;
    std::string out;
    size_t at = 0;
    for (const TextRange& r : spans) {
        out.append(s, at, r.begin - at);
        const std::string_view text(s.data() + r.begin, r.end - r.begin);
        const auto known = std::find(texts_.begin(), texts_.end(), text);
        const size_t index = static_cast<size_t>(known - texts_.begin());
        if (known == texts_.end()) texts_.emplace_back(text);
        out += prefix_;
        out += std::to_string(index);
        out += 'z';
        at = r.end;
    }
    out.append(s, at, std::string::npos);
    s = std::move(out);
    return true;
}

bool ControlTextMask::mask(nlohmann::ordered_json& j) {
    // Iterative: tool definitions may nest as deep as their source allowed.
    bool changed = false;
    std::vector<nlohmann::ordered_json*> work{&j};
    while (!work.empty()) {
        nlohmann::ordered_json* v = work.back();
        work.pop_back();
        if (v->is_string()) {
            changed = mask(v->get_ref<std::string&>()) || changed;
        } else if (v->is_array()) {
            for (auto& item : *v) work.push_back(&item);
        } else if (v->is_object()) {
            bool keys = false;
            for (const auto& [key, item] : v->items()) {
                if (!tokenizer_.control_token_spans(key).empty()) keys = true;
            }
            if (keys) {  // keys cannot change in place: the object is rebuilt, in order
                nlohmann::ordered_json rebuilt = nlohmann::ordered_json::object();
                for (auto& [key, item] : v->items()) {
                    std::string k = key;
                    mask(k);
                    rebuilt[k] = std::move(item);
                }
                *v = std::move(rebuilt);
                changed = true;
            }
            for (auto& [key, item] : v->items()) work.push_back(&item);
        }
    }
    return changed;
}

std::optional<ControlTextMask::Restored> ControlTextMask::restore(std::string_view rendered) const {
    Restored out;
    size_t at = 0;
    for (;;) {
        const size_t found = rendered.find(prefix_, at);
        if (found == std::string_view::npos) break;
        out.text.append(rendered, at, found - at);
        size_t i = found + prefix_.size();
        size_t index = 0;
        const size_t digits = i;
        while (i < rendered.size() && rendered[i] >= '0' && rendered[i] <= '9' && i - digits < 9) {
            index = index * 10 + static_cast<size_t>(rendered[i] - '0');
            ++i;
        }
        if (i == digits || i >= rendered.size() || rendered[i] != 'z' || index >= texts_.size()) {
            return std::nullopt;  // a placeholder the template cut or changed
        }
        const size_t begin = out.text.size();
        out.text += texts_[index];
        out.literal.push_back({begin, out.text.size()});
        at = i + 1;
    }
    out.text.append(rendered, at, std::string_view::npos);
    // Upper-cased or otherwise rewritten placeholders would stay as letters in the prompt.
    if (lower(out.text).find(lower(prefix_)) != std::string::npos) return std::nullopt;
    return out;
}

std::vector<TextRange> merge_ranges(std::vector<TextRange> ranges) {
    std::sort(ranges.begin(), ranges.end(),
              [](const TextRange& a, const TextRange& b) { return a.begin < b.begin; });
    std::vector<TextRange> out;
    for (const TextRange& r : ranges) {
        if (r.begin >= r.end) continue;
        if (!out.empty() && r.begin <= out.back().end) {
            out.back().end = std::max(out.back().end, r.end);
        } else {
            out.push_back(r);
        }
    }
    return out;
}

}  // namespace ember
