// Robustness: every fixture GGUF, truncated and with bytes flipped (seeded), must either parse
// (and then load, or be refused with an exception) or throw an exception derived from
// std::exception. A crash, hang or sanitizer report fails the test.
//
// Flips are biased toward the header, metadata and tensor table: flips in tensor data only
// change weights. The test prints the counts; EMBER_ROBUSTNESS_SCALE=<n> multiplies the number
// of variants, EMBER_ROBUSTNESS_VERBOSE=1 prints each variant before it is tried.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "engine/gguf/gguf.h"
#include "engine/model/model.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/support/fixtures.h"
#include "tests/support/sanitizers.h"

// Present when a sanitizer runtime is linked in (EMBER_SANITIZE builds), null otherwise.
extern "C" void __sanitizer_set_death_callback(void (*callback)()) __attribute__((weak));

namespace ember::test {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;

// ---------------------------------------------------------------------------------------------
// Crash reporting: the variant being tried, written out if the process dies on a signal.

char g_current[512];
struct sigaction g_previous[NSIG];

void print_current() {
    const char head[] = "\n*** while trying variant: ";
    [[maybe_unused]] ssize_t n = ::write(2, head, sizeof head - 1);
    n = ::write(2, g_current, std::strlen(g_current));
    n = ::write(2, "\n", 1);
}

// Prints the variant, then hands the signal to whoever handled it before (a sanitizer's
// handler, or the default action): faults re-occur on return, abort is raised again.
extern "C" void on_fatal_signal(int sig) {
    print_current();
    sigaction(sig, &g_previous[sig], nullptr);
    if (sig == SIGABRT) std::raise(sig);
}

void install_crash_reporting() {
    struct sigaction sa {};
    sa.sa_handler = on_fatal_signal;
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) {
        sigaction(sig, &sa, &g_previous[sig]);
    }
}

void set_current(const std::string& what) {
    std::snprintf(g_current, sizeof g_current, "%s", what.c_str());
    static const bool verbose = std::getenv("EMBER_ROBUSTNESS_VERBOSE") != nullptr;
    if (verbose) std::fprintf(stderr, "variant: %s\n", g_current);
}

// ---------------------------------------------------------------------------------------------
// Layout of a valid file, walked here independently of the reader: where the fields start.

struct Layout {
    std::vector<uint64_t> boundaries;  // starts of header fields (big arrays: a sample)
    std::vector<uint64_t> hot;         // starts of counts, lengths, types, dims, offsets
    uint64_t kv_end = 0;               // end of metadata = start of the tensor table
    uint64_t table_end = 0;            // end of the tensor table
};

class Walker {
public:
    explicit Walker(const Bytes& b) : b_(b) {}

    Layout walk() {
        Layout l;
        l_ = &l;
        field(false);
        pos_ += 4;  // magic
        field(false);
        pos_ += 4;  // version
        field(true);
        const uint64_t n_tensors = u64();
        field(true);
        const uint64_t n_kv = u64();
        for (uint64_t i = 0; i < n_kv; ++i) {
            string(true);  // key
            field(true);
            const uint32_t type = u32();
            value(type, true);
        }
        l.kv_end = pos_;
        for (uint64_t i = 0; i < n_tensors; ++i) {
            string(true);
            field(true);
            const uint32_t n_dims = u32();
            for (uint32_t d = 0; d < n_dims; ++d) {
                field(true);
                pos_ += 8;
            }
            field(true);
            pos_ += 4;  // type
            field(true);
            pos_ += 8;  // offset
        }
        l.table_end = pos_;
        return l;
    }

private:
    void field(bool hot) {
        if (!record_) return;
        l_->boundaries.push_back(pos_);
        if (hot) l_->hot.push_back(pos_);
    }
    uint32_t u32() {
        uint32_t v;
        std::memcpy(&v, b_.data() + pos_, 4);
        pos_ += 4;
        return v;
    }
    uint64_t u64() {
        uint64_t v;
        std::memcpy(&v, b_.data() + pos_, 8);
        pos_ += 8;
        return v;
    }
    void string(bool hot) {
        field(hot);
        const uint64_t n = u64();
        field(false);
        pos_ += n;
    }
    void value(uint32_t type, bool top) {
        static constexpr uint64_t kSize[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
        if (type == 8) {
            string(top);
        } else if (type == 9) {
            field(true);
            const uint32_t elem = u32();
            field(true);
            const uint64_t count = u64();
            const bool saved = record_;
            for (uint64_t i = 0; i < count; ++i) {
                // Record the first and last few elements of big arrays, skip the middle.
                record_ = saved && (i < 4 || i + 3 >= count);
                if (elem == 8 || elem == 9) {
                    value(elem, false);
                } else {
                    field(false);
                    pos_ += kSize[elem];
                }
            }
            record_ = saved;
        } else {
            field(false);
            pos_ += kSize[type];
        }
    }

    const Bytes& b_;
    Layout* l_ = nullptr;
    uint64_t pos_ = 0;
    bool record_ = true;
};

// ---------------------------------------------------------------------------------------------

struct Counts {
    uint64_t variants = 0;
    uint64_t parse_errors = 0;
    uint64_t parsed = 0;
    uint64_t loads_tried = 0;
    uint64_t load_errors = 0;
    uint64_t clean_loads = 0;
    uint64_t tokenizers_tried = 0;
    uint64_t tokenizer_errors = 0;
    Counts& operator+=(const Counts& o) {
        variants += o.variants;
        parse_errors += o.parse_errors;
        parsed += o.parsed;
        loads_tried += o.loads_tried;
        load_errors += o.load_errors;
        clean_loads += o.clean_loads;
        tokenizers_tried += o.tokenizers_tried;
        tokenizer_errors += o.tokenizer_errors;
        return *this;
    }
};

int scale() {
    const char* s = std::getenv("EMBER_ROBUSTNESS_SCALE");
    const int v = s ? std::atoi(s) : 1;
    return v > 0 ? v : 1;
}

std::vector<std::string> fixture_ggufs() {
    std::vector<std::string> out;
    for (const char* dir : {"arch", "quant", "models", "tokenizers"}) {
        const fs::path root = fixture_path(dir);
        if (!fs::exists(root)) continue;
        for (const auto& e : fs::recursive_directory_iterator(root)) {
            if (e.is_regular_file() && e.path().extension() == ".gguf") {
                out.push_back(fs::relative(e.path(), fixtures_dir()).string());
            }
        }
    }
    std::sort(out.begin(), out.end());
    return out;
}

class Fuzzer {
public:
    // At most `deep_budget` variants that parse also go through Tokenizer / Model::load.
    Fuzzer(std::string rel, Bytes bytes, const std::string& tmp_path, size_t deep_budget)
        : rel_(std::move(rel)),
          bytes_(std::move(bytes)),
          tmp_path_(tmp_path),
          deep_budget_(deep_budget) {}

    // Everything a variant that parses is put through. `deep` adds the tokenizer and, for
    // files with tensors, Model::load from a temporary copy.
    void check(uint64_t size, const std::string& what, Counts& c) {
        set_current(rel_ + " " + what);
        ++c.variants;
        std::unique_ptr<GgufFile> f;
        try {
            f = GgufFile::parse(bytes_.data(), size, rel_);
        } catch (const std::exception& e) {
            ++c.parse_errors;
            EXPECT_NE(std::strlen(e.what()), 0u);
            return;
        }
        ++c.parsed;
        touch(*f, size);
        if (deep_budget_ == 0) return;
        --deep_budget_;
        if (f->tensors().empty()) {
            ++c.tokenizers_tried;
            try {
                Tokenizer t(*f);
                exercise(t);
            } catch (const std::exception&) {
                ++c.tokenizer_errors;
            }
            return;
        }
        ++c.loads_tried;
        {
            std::ofstream out(tmp_path_, std::ios::binary | std::ios::trunc);
            out.write(reinterpret_cast<const char*>(bytes_.data()),
                      static_cast<std::streamsize>(size));
        }
        try {
            const auto m = Model::load(tmp_path_);
            ++c.clean_loads;
            (void)m->fingerprint();
            (void)m->weight_bytes_per_token();
            exercise(m->tokenizer());
        } catch (const std::exception&) {
            ++c.load_errors;
        }
    }

    // Reads every metadata value and the first and last byte of every tensor, so that a
    // pointer or length that escaped validation shows up under the sanitizers.
    static void touch(const GgufFile& f, uint64_t size) {
        uint64_t sink = 0;
        for (const std::string& key : f.metadata_order()) {
            const GgufValue* v = f.find(key);
            ASSERT_NE(v, nullptr) << key;
            if (const auto* a = std::get_if<GgufArray>(&v->value)) {
                sink += a->size();
                for (const auto& s : a->strings) sink += s.size();
            } else if (const auto* s = std::get_if<std::string>(&v->value)) {
                sink += s->size();
            }
        }
        for (const GgufTensorInfo& t : f.tensors()) {
            ASSERT_GT(t.n_bytes, 0u);
            ASSERT_GE(t.data, f.file_data());
            ASSERT_LE(t.data + t.n_bytes, f.file_data() + size) << t.name;
            sink += t.data[0] + t.data[t.n_bytes - 1];
            EXPECT_EQ(f.find_tensor(t.name), &t);
        }
        volatile uint64_t keep = sink;
        (void)keep;
    }

    static void exercise(const Tokenizer& t) {
        for (const char* text : {"Hello world", " a  b\n\t\xc3\xa9\xe2\x9c\x93 123!", ""}) {
            try {
                const auto ids = t.encode(text);
                (void)t.decode(ids);
            } catch (const std::exception&) {
            }
        }
    }

    void truncations(const Layout& l, size_t max_boundaries, size_t random_count,
                     std::mt19937_64& rng, Counts& c) {
        std::vector<uint64_t> cuts;
        // Every boundary, or an even sample of them: each cut costs a parse up to it.
        const size_t nb = l.boundaries.size();
        const size_t step = std::max<size_t>(1, (nb + max_boundaries - 1) / max_boundaries);
        for (size_t i = rng() % step; i < nb; i += step) {
            const uint64_t b = l.boundaries[i];
            cuts.push_back(b);
            cuts.push_back(b + 1 + rng() % 7);
        }
        for (size_t i = 0; i < random_count; ++i) {
            cuts.push_back(rng() % (l.table_end + 64));  // mostly within the header
            cuts.push_back(rng() % bytes_.size());       // anywhere
        }
        cuts.push_back(l.table_end + (bytes_.size() - l.table_end) / 2);
        cuts.push_back(bytes_.size() - 1);
        for (uint64_t cut : cuts) {
            if (cut >= bytes_.size()) continue;
            check(cut, "truncated to " + std::to_string(cut), c);
        }
    }

    void flips(const Layout& l, size_t count, std::mt19937_64& rng, Counts& c) {
        for (size_t v = 0; v < count; ++v) {
            // 1 to 8 bytes; mostly few, so that some variants get past the parser.
            const uint64_t r = rng() % 100;
            const int n = r < 50 ? 1 : r < 70 ? 2 : 3 + static_cast<int>(rng() % 6);
            std::vector<std::pair<uint64_t, uint8_t>> saved;
            std::string what = "flip";
            for (int k = 0; k < n; ++k) {
                const uint64_t pos = pick(l, rng);
                uint8_t& byte = bytes_[pos];
                saved.emplace_back(pos, byte);
                switch (rng() % 10) {
                    case 0:
                        byte = 0xff;
                        break;
                    case 1:
                        byte = 0;
                        break;
                    case 2:
                        byte ^= 0x80;
                        break;
                    default:
                        byte ^= static_cast<uint8_t>(1 + rng() % 255);
                        break;
                }
                what += ' ';
                what += std::to_string(pos);
                what += '=';
                what += std::to_string(byte);
            }
            check(bytes_.size(), what, c);
            // Undo in reverse, so a position flipped twice gets its original byte back.
            for (auto it = saved.rbegin(); it != saved.rend(); ++it) bytes_[it->first] = it->second;
        }
    }

private:
    uint64_t pick(const Layout& l, std::mt19937_64& rng) const {
        const uint64_t r = rng() % 100;
        if (r < 30 && !l.hot.empty()) {  // a count, length, type, dim or offset field
            return std::min<uint64_t>(l.hot[rng() % l.hot.size()] + rng() % 8, bytes_.size() - 1);
        }
        if (r < 45) return rng() % std::min<uint64_t>(64, bytes_.size());  // fixed header
        if (r < 75 && l.table_end > l.kv_end) {                            // tensor table
            return l.kv_end + rng() % (l.table_end - l.kv_end);
        }
        if (r < 95) return rng() % l.table_end;  // anywhere in the header
        return rng() % bytes_.size();            // anywhere
    }

    std::string rel_;
    Bytes bytes_;
    std::string tmp_path_;
    size_t deep_budget_ = 0;
};

TEST(GgufRobustness, TruncatedAndCorruptedFixturesNeverCrash) {
    install_crash_reporting();
    // Sanitizer reports end the process without a signal; name the variant there too.
    if (__sanitizer_set_death_callback) __sanitizer_set_death_callback(print_current);

    const std::vector<std::string> files = fixture_ggufs();
    if (files.empty()) EMBER_SKIP_OR_FAIL("no fixture GGUFs under " << fixtures_dir());
    const std::string tmp =
        (fs::temp_directory_path() / ("ember_robust_" + std::to_string(::getpid()) + ".gguf"))
            .string();
    const int k = scale();
    Counts total;
    const auto t_start = std::chrono::steady_clock::now();
    for (size_t fi = 0; fi < files.size(); ++fi) {
        const std::string& rel = files[fi];
        std::ifstream in(fixture_path(rel), std::ios::binary);
        Bytes bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        ASSERT_GT(bytes.size(), 24u) << rel;
        // The fixture itself must parse.
        const auto t0 = std::chrono::steady_clock::now();
        ASSERT_NO_THROW(GgufFile::parse(bytes.data(), bytes.size(), rel)) << rel;
        const double parse_ms =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                .count();
        const Layout layout = Walker(bytes).walk();
        ASSERT_GT(layout.table_end, 24u);
        ASSERT_LE(layout.table_end, bytes.size());

        // Big vocabularies make each parse (and tokenizer) cost milliseconds; they get fewer
        // variants and only a few deep checks. Small files get Model::load on every variant
        // that parses.
        const bool small = layout.kv_end < (256u << 10);
        // Under the sanitizers (ten times slower) the small files get a fiftieth of the deep
        // checks and a fifth of the cut points, the big ones a third of their variants: the
        // run stays within minutes, and every kind of variant is still tried on every file
        // (the fuzz driver covers breadth there).
        const size_t small_boundaries = kSanitized ? 20000 : 100000;
        const size_t small_deep = kSanitized ? 2000 : 100000;
        const size_t big_share = kSanitized ? 3 : 1;
        const size_t max_boundaries =
            small ? small_boundaries : 60 * static_cast<size_t>(k) / big_share;
        const size_t random_cuts = static_cast<size_t>((small ? 100 : 10) * k) / big_share;
        const size_t n_flips = static_cast<size_t>((small ? 500 : 120) * k) / big_share;
        const size_t deep_budget = small ? small_deep : 6 * static_cast<size_t>(k) / big_share;

        Counts c;
        std::mt19937_64 rng(0x9e3779b97f4a7c15ull ^ (fi * 1000003));
        Fuzzer fz(rel, std::move(bytes), tmp, deep_budget);
        fz.truncations(layout, max_boundaries, random_cuts, rng, c);
        fz.flips(layout, n_flips, rng, c);
        std::printf(
            "  %-48s parse %6.1f ms  variants %5llu  parse errors %5llu  parsed %4llu  "
            "loads %4llu (ok %4llu, refused %4llu)  tokenizers %3llu (refused %3llu)\n",
            rel.c_str(), parse_ms, static_cast<unsigned long long>(c.variants),
            static_cast<unsigned long long>(c.parse_errors),
            static_cast<unsigned long long>(c.parsed),
            static_cast<unsigned long long>(c.loads_tried),
            static_cast<unsigned long long>(c.clean_loads),
            static_cast<unsigned long long>(c.load_errors),
            static_cast<unsigned long long>(c.tokenizers_tried),
            static_cast<unsigned long long>(c.tokenizer_errors));
        std::fflush(stdout);
        // Every variant is accounted for, and the corruption did get noticed.
        EXPECT_EQ(c.parse_errors + c.parsed, c.variants) << rel;
        EXPECT_GT(c.parse_errors, c.variants / 4) << rel;
        total += c;
    }
    std::error_code ec;
    fs::remove(tmp, ec);
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
    std::printf(
        "GGUF robustness: %zu files, %llu variants, %llu parse errors, %llu parsed; "
        "Model::load %llu tried, %llu clean, %llu refused; Tokenizer %llu tried, %llu refused; "
        "%.1f s\n",
        files.size(), static_cast<unsigned long long>(total.variants),
        static_cast<unsigned long long>(total.parse_errors),
        static_cast<unsigned long long>(total.parsed),
        static_cast<unsigned long long>(total.loads_tried),
        static_cast<unsigned long long>(total.clean_loads),
        static_cast<unsigned long long>(total.load_errors),
        static_cast<unsigned long long>(total.tokenizers_tried),
        static_cast<unsigned long long>(total.tokenizer_errors), secs);
    EXPECT_GE(total.variants, 2000u * static_cast<unsigned>(k));
}

}  // namespace
}  // namespace ember::test
