#include "ui/io/progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>

#include "ui/io/terminal_text.h"

namespace ember::ui {

double prefill_rate(const PrefillProgress& p) {
    return p.seconds > 0 && p.done > 0 ? static_cast<double>(p.done) / p.seconds : 0.0;
}

double prefill_seconds_left(const PrefillProgress& p) {
    const double rate = prefill_rate(p);
    if (rate <= 0 || p.total <= 0) return -1.0;
    return static_cast<double>(std::max<int64_t>(0, p.total - p.done)) / rate;
}

std::string progress_bar(double fraction, int width) {
    static const char* const kEighths[] = {"", "▏", "▎", "▍", "▌", "▋", "▊", "▉"};
    if (width <= 0) return {};
    if (!(fraction > 0)) fraction = 0;  // NaN too
    fraction = std::min(fraction, 1.0);
    const int eighths = static_cast<int>(std::floor(fraction * width * 8));
    std::string bar;
    int cells = 0;
    for (; cells < eighths / 8; ++cells) bar += "█";
    if (cells < width && eighths % 8 != 0) {
        bar += kEighths[eighths % 8];
        ++cells;
    }
    bar.append(static_cast<size_t>(width - cells), ' ');
    return bar;
}

std::string grouped(int64_t n) {
    const std::string digits = std::to_string(n < 0 ? -n : n);
    std::string out = n < 0 ? "-" : "";
    for (size_t i = 0; i < digits.size(); ++i) {
        if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
        out += digits[i];
    }
    return out;
}

std::string prefill_text(const PrefillProgress& p) {
    const int percent =
        p.total > 0 ? static_cast<int>(100 * std::min(p.done, p.total) / p.total) : 0;
    std::string text =
        grouped(p.done) + "/" + grouped(p.total) + " tok " + std::to_string(percent) + "%";
    if (const double rate = prefill_rate(p); rate > 0) {
        text += " · " + grouped(static_cast<int64_t>(std::lround(rate))) + " tok/s";
    }
    if (const double left = prefill_seconds_left(p); left >= 0 && p.done < p.total) {
        text += " · " + std::to_string(static_cast<int64_t>(std::ceil(left))) + "s left";
    }
    return text;
}

nlohmann::json prefill_event(const PrefillProgress& p) {
    return {{"event", "progress"},
            {"stage", "prefill"},
            {"done", p.done},
            {"total", p.total},
            {"seconds", std::round(p.seconds * 1000.0) / 1000.0},
            {"tokens_per_second", std::round(prefill_rate(p) * 10.0) / 10.0}};
}

void TerminalProgress::prefill(const PrefillProgress& p) {
    if (p.total > 0 && p.done >= p.total) {
        clear();
        return;
    }
    const auto now = std::chrono::steady_clock::now();
    if (p.seconds * 1000.0 < static_cast<double>(delay_.count())) return;
    if (shown_ && now - last_ < interval_) return;
    last_ = now;
    const double fraction = p.total > 0 ? static_cast<double>(p.done) / p.total : 0.0;
    // One row, or "\r" would not reach its start: what does not fit goes, the numbers last.
    winsize size{};
    const int columns = ioctl(fileno(out_), TIOCGWINSZ, &size) == 0 && size.ws_col > 0
                            ? static_cast<int>(size.ws_col)
                            : 80;
    const std::string numbers = prefill_text(p);
    std::string line = "prompt ▕" + progress_bar(fraction, 20) + "▏ " + numbers + " · Ctrl-C stops";
    // The bar's cells and the arrows are one column each but several bytes.
    const auto width = [](const std::string& s) {
        return static_cast<int>(std::count_if(s.begin(), s.end(), [](char c) {
            return (static_cast<unsigned char>(c) & 0xC0) != 0x80;
        }));
    };
    if (width(line) >= columns) line = "prompt " + numbers;
    if (width(line) >= columns) line = numbers.substr(0, numbers.find(' '));
    std::fprintf(out_, "\r%s\033[K", line.c_str());
    std::fflush(out_);
    shown_ = true;
}

void TerminalProgress::clear() {
    if (!shown_) return;
    std::fputs("\r\033[K", out_);
    std::fflush(out_);
    shown_ = false;
}

ElapsedLine::ElapsedLine(std::FILE* out)
    : out_(out), terminal_(is_terminal(out)), started_(std::chrono::steady_clock::now()) {}

void ElapsedLine::show(const std::string& what) {
    using namespace std::chrono_literals;
    if (!terminal_) return;
    const auto now = std::chrono::steady_clock::now();
    if (now - started_ < 500ms || (shown_ && now - last_ < 200ms)) return;
    last_ = now;
    const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(now - started_).count();
    std::fprintf(out_, "\r%s… %llds · Ctrl-C stops\033[K", what.c_str(),
                 static_cast<long long>(seconds));
    std::fflush(out_);
    shown_ = true;
}

void ElapsedLine::clear() {
    if (!shown_) return;
    std::fputs("\r\033[K", out_);
    std::fflush(out_);
    shown_ = false;
}

}  // namespace ember::ui
