// Runs a libFuzzer target (its LLVMFuzzerTestOneInput) without libFuzzer: the seed inputs,
// then deterministic mutations of them, for a bounded number of inputs or seconds. It is what
// ctest runs (label fuzz) in every build, gcc's and the sanitizer build's included, so each
// parser of untrusted input meets a few hundred thousand hostile inputs on every CI run, not
// only when someone runs the clang fuzzers.
//
// A finding is a crash or sanitizer report (the process dies), an exception the target does
// not catch (each target catches exactly its parser's documented error type, so anything else
// reaching here is a finding), or one input taking longer than --input-seconds (a hang). The
// input at fault is written to FILE (--crash-file) before the run fails (from a signal
// handler or the sanitizer's death callback when the process dies), to replay with
// `driver --replay FILE` or with the libFuzzer target.
//
// Usage: fuzz_X_driver SEED... [--dict FILE] [--iterations N] [--seconds S]
//                      [--input-seconds S] [--random-seed R] [--crash-file FILE]
//        (a SEED is a file, or a folder whose files are seeds)
//        fuzz_X_driver --replay FILE
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
// Present when a sanitizer runtime is linked: called as a report ends the process.
extern "C" void __sanitizer_set_death_callback(void (*callback)()) __attribute__((weak));

namespace {

using Clock = std::chrono::steady_clock;
using Bytes = std::string;

// The input being run, for the handlers that save it when the process dies on it.
const char* g_current_data = nullptr;
size_t g_current_size = 0;
const char* g_crash_file = nullptr;

// Async-signal-safe: open, write and close only.
void save_current_input() {
    if (g_current_data == nullptr || g_crash_file == nullptr) return;
    const int fd = ::open(g_crash_file, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return;
    for (size_t done = 0; done < g_current_size;) {
        const ssize_t n = ::write(fd, g_current_data + done, g_current_size - done);
        if (n <= 0) break;
        done += static_cast<size_t>(n);
    }
    ::close(fd);
    static const char kSaved[] = "\nfuzz driver: the input that ended the run is saved in ";
    (void)!::write(2, kSaved, sizeof kSaved - 1);
    (void)!::write(2, g_crash_file, std::strlen(g_crash_file));
    (void)!::write(2, "\n", 1);
    g_current_data = nullptr;  // once
}

extern "C" void on_fatal_signal(int signal_number) {
    save_current_input();
    std::signal(signal_number, SIG_DFL);
    std::raise(signal_number);
}

void save_input_when_dying(const std::string& crash_file) {
    g_crash_file = crash_file.c_str();
    for (const int s : {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL}) std::signal(s, on_fatal_signal);
    if (__sanitizer_set_death_callback != nullptr)
        __sanitizer_set_death_callback(save_current_input);
}

// Inputs stay below this, so duplication mutations cannot grow them without bound.
constexpr size_t kMaxInputBytes = 64 << 10;

struct Settings {
    std::vector<std::string> seed_paths;
    std::string dict_file;
    std::string replay_file;
    std::string crash_file = "fuzz-crash.bin";
    uint64_t iterations = 100000;
    double seconds = 15;
    double input_seconds = 10;
    uint64_t random_seed = 42;
};

Bytes read_whole(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// libFuzzer's dictionary format: one `"token"` (optionally `name="token"`) a line, with \\,
// \" and \xNN escapes; '#' starts a comment.
std::vector<Bytes> read_dictionary(const std::string& path) {
    std::vector<Bytes> tokens;
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
        const size_t open = line.find('"');
        const size_t close = line.rfind('"');
        if (line.empty() || line[0] == '#' || open == std::string::npos || close <= open) continue;
        Bytes token;
        for (size_t i = open + 1; i < close; ++i) {
            if (line[i] != '\\' || i + 1 >= close) {
                token += line[i];
            } else if (line[i + 1] == 'x' && i + 3 < close) {
                token += static_cast<char>(std::stoi(line.substr(i + 2, 2), nullptr, 16));
                i += 3;
            } else {
                token += line[++i];
            }
        }
        if (!token.empty()) tokens.push_back(token);
    }
    return tokens;
}

// One random edit of `input`, the kinds libFuzzer's mutator also makes: bits, bytes,
// boundary integers, erased / inserted / duplicated ranges, dictionary tokens, and splices
// with another seed.
class Mutator {
public:
    Mutator(uint64_t seed, std::vector<Bytes> seeds, std::vector<Bytes> dictionary)
        : rng_(seed), seeds_(std::move(seeds)), dictionary_(std::move(dictionary)) {}

    Bytes next() {
        Bytes input = seeds_[below(seeds_.size())];
        const int edits = 1 + static_cast<int>(below(4));
        for (int i = 0; i < edits; ++i) mutate(input);
        if (input.size() > kMaxInputBytes) input.resize(kMaxInputBytes);
        return input;
    }

private:
    uint64_t below(uint64_t n) { return n == 0 ? 0 : rng_() % n; }

    void mutate(Bytes& s) {
        static const unsigned char kInteresting[] = {0,   1,   0x7f, 0x80, 0xff, '{', '}',  '[',
                                                     ']', '"', '\\', '<',  '>',  '%', '\n', ' '};
        const size_t at = below(s.size() + 1);
        switch (below(9)) {
            case 0:  // flip a bit
                if (!s.empty()) s[below(s.size())] ^= static_cast<char>(1u << below(8));
                break;
            case 1:  // an interesting byte
                if (!s.empty()) {
                    s[below(s.size())] =
                        static_cast<char>(kInteresting[below(sizeof kInteresting)]);
                }
                break;
            case 2: {  // a boundary integer (lengths and counts of binary formats)
                static const uint64_t kValues[] = {0,
                                                   1,
                                                   0x7f,
                                                   0xff,
                                                   0xffff,
                                                   0x7fffffff,
                                                   0xffffffff,
                                                   0x7fffffffffffffff,
                                                   0xffffffffffffffff,
                                                   1u << 20};
                const uint64_t v = kValues[below(std::size(kValues))];
                const size_t width = size_t{1} << below(4);  // 1, 2, 4 or 8 bytes, little-endian
                if (s.size() >= width) {
                    const size_t pos = below(s.size() - width + 1);
                    for (size_t b = 0; b < width; ++b) s[pos + b] = static_cast<char>(v >> (8 * b));
                }
                break;
            }
            case 3:  // erase a range
                if (!s.empty()) s.erase(below(s.size()), 1 + below(std::min<size_t>(s.size(), 16)));
                break;
            case 4:  // insert random bytes
                for (uint64_t n = 1 + below(8); n > 0; --n) {
                    s.insert(s.begin() + static_cast<std::ptrdiff_t>(at),
                             static_cast<char>(below(256)));
                }
                break;
            case 5: {  // duplicate a range (nesting, repetition)
                if (s.empty()) break;
                const size_t from = below(s.size());
                const Bytes piece =
                    s.substr(from, 1 + below(std::min<size_t>(s.size() - from, 64)));
                for (uint64_t n = 1 + below(4); n > 0; --n) s.insert(at, piece);
                break;
            }
            case 6:
            case 7:  // a dictionary token
                if (!dictionary_.empty()) s.insert(at, dictionary_[below(dictionary_.size())]);
                break;
            default: {  // splice: this input's head and another seed's tail
                const Bytes& other = seeds_[below(seeds_.size())];
                s = s.substr(0, at) + other.substr(below(other.size() + 1));
                break;
            }
        }
    }

    std::mt19937_64 rng_;
    std::vector<Bytes> seeds_;
    std::vector<Bytes> dictionary_;
};

void save(const std::string& path, const Bytes& input) {
    std::ofstream(path, std::ios::binary)
        .write(input.data(), static_cast<std::streamsize>(input.size()));
}

// Feeds one input; false (after saying why and saving it) for an escaped exception or a hang.
bool run_one(const Bytes& input, const Settings& settings) {
    const auto start = Clock::now();
    try {
        // The target gets a buffer of exactly the input's size, as libFuzzer gives it, so
        // AddressSanitizer sees a read one byte past the end.
        std::vector<uint8_t> exact(input.begin(), input.end());
        g_current_data = input.data();
        g_current_size = input.size();
        LLVMFuzzerTestOneInput(exact.data(), exact.size());
        g_current_data = nullptr;
    } catch (const std::exception& e) {
        save(settings.crash_file, input);
        std::cerr << "FINDING: an exception the parser does not document escaped: " << e.what()
                  << "\n  input (" << input.size() << " bytes) saved to " << settings.crash_file
                  << "\n";
        return false;
    } catch (...) {
        save(settings.crash_file, input);
        std::cerr << "FINDING: a non-std exception escaped\n  input saved to "
                  << settings.crash_file << "\n";
        return false;
    }
    const double took = std::chrono::duration<double>(Clock::now() - start).count();
    if (took > settings.input_seconds) {
        save(settings.crash_file, input);
        std::cerr << "FINDING: one input took " << took << " s (limit " << settings.input_seconds
                  << " s)\n  input (" << input.size() << " bytes) saved to " << settings.crash_file
                  << "\n";
        return false;
    }
    return true;
}

bool parse_args(int argc, char** argv, Settings& s) {
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        const bool has_value = i + 1 < argc;
        if (arg == "--dict" && has_value) {
            s.dict_file = argv[++i];
        } else if (arg == "--iterations" && has_value) {
            s.iterations = std::stoull(argv[++i]);
        } else if (arg == "--seconds" && has_value) {
            s.seconds = std::stod(argv[++i]);
        } else if (arg == "--input-seconds" && has_value) {
            s.input_seconds = std::stod(argv[++i]);
        } else if (arg == "--random-seed" && has_value) {
            s.random_seed = std::stoull(argv[++i]);
        } else if (arg == "--crash-file" && has_value) {
            s.crash_file = argv[++i];
        } else if (arg == "--replay" && has_value) {
            s.replay_file = argv[++i];
        } else if (!arg.empty() && arg[0] != '-') {
            s.seed_paths.push_back(arg);
        } else {
            return false;
        }
    }
    return !s.seed_paths.empty() || !s.replay_file.empty();
}

}  // namespace

int main(int argc, char** argv) {
    Settings settings;
    if (!parse_args(argc, argv, settings)) {
        std::cerr << "usage: " << argv[0]
                  << " SEED... [--dict FILE] [--iterations N] [--seconds S] [--input-seconds S]"
                     " [--random-seed R] [--crash-file FILE] | --replay FILE\n";
        return 2;
    }
    save_input_when_dying(settings.crash_file);
    if (!settings.replay_file.empty()) {
        return run_one(read_whole(settings.replay_file), settings) ? 0 : 1;
    }

    std::vector<Bytes> seeds;
    for (const std::string& seed_path : settings.seed_paths) {
        std::vector<std::filesystem::path> files;
        if (std::filesystem::is_directory(seed_path)) {
            for (const auto& entry : std::filesystem::directory_iterator(seed_path)) {
                if (entry.is_regular_file()) files.push_back(entry.path());
            }
            std::sort(files.begin(), files.end());  // the same order, so the same inputs
        } else if (std::filesystem::is_regular_file(seed_path)) {
            files.push_back(seed_path);
        } else {
            std::cerr << "no seed file or folder " << seed_path << "\n";
            return 1;
        }
        for (const auto& file : files) seeds.push_back(read_whole(file));
    }
    if (seeds.empty()) {
        std::cerr << "no seed inputs\n";
        return 1;
    }
    // The seeds are valid inputs: each must go through on its own first.
    for (const Bytes& seed : seeds) {
        if (!run_one(seed, settings)) return 1;
    }

    std::vector<Bytes> dictionary;
    if (!settings.dict_file.empty()) dictionary = read_dictionary(settings.dict_file);
    Mutator mutator(settings.random_seed, seeds, dictionary);
    const auto start = Clock::now();
    uint64_t done = 0;
    for (; done < settings.iterations; ++done) {
        if (std::chrono::duration<double>(Clock::now() - start).count() > settings.seconds) break;
        if (!run_one(mutator.next(), settings)) {
            std::cerr << "  after " << done << " mutated inputs (--random-seed "
                      << settings.random_seed << ")\n";
            return 1;
        }
    }
    std::cout << seeds.size() << " seeds and " << done << " mutated inputs (random seed "
              << settings.random_seed << ", "
              << std::chrono::duration<double>(Clock::now() - start).count() << " s): no finding\n";
    return 0;
}
