// libFuzzer target for the GGUF reader: any input must either parse into a file whose every
// value and tensor byte can be read, or raise GgufError. Anything else (a crash, a sanitizer
// report, another exception type, a tensor outside the input) is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <variant>

#include "engine/gguf/gguf.h"

namespace {

volatile uint64_t g_sink;

void check(bool ok) {
    if (!ok) std::abort();
}

void touch_array(const ember::GgufArray& a) {
    uint64_t s = a.size();
    for (const auto& str : a.strings) s += str.size() + (str.empty() ? 0 : str.back());
    for (int64_t v : a.ints) s += static_cast<uint64_t>(v);
    for (uint64_t v : a.uints) s += v;
    for (double v : a.floats) s += v == v ? 1 : 0;
    for (const auto& inner : a.arrays) touch_array(inner);
    g_sink = g_sink + s;
}

void touch(const ember::GgufFile& f, const uint8_t* data, size_t size) {
    check(f.metadata().size() == f.metadata_order().size());
    check(f.alignment() > 0 && (f.alignment() & (f.alignment() - 1)) == 0);
    for (const std::string& key : f.metadata_order()) {
        const ember::GgufValue* v = f.find(key);
        check(v != nullptr);
        // The typed getters either return the value or throw GgufError for the wrong type.
        try {
            (void)f.get_int(key);
        } catch (const ember::GgufError&) {
        }
        try {
            (void)f.get_float(key);
        } catch (const ember::GgufError&) {
        }
        try {
            (void)f.get_string(key);
        } catch (const ember::GgufError&) {
        }
        try {
            (void)f.get_bool(key);
        } catch (const ember::GgufError&) {
        }
        try {
            if (const ember::GgufArray* a = f.get_array(key)) touch_array(*a);
        } catch (const ember::GgufError&) {
        }
    }
    uint64_t sum = 0;
    for (const ember::GgufTensorInfo& t : f.tensors()) {
        check(f.find_tensor(t.name) == &t);
        check(!t.dims.empty() && t.dims.size() <= 4 && t.n_elements() > 0 && t.n_bytes > 0);
        check(t.offset % f.alignment() == 0);
        // Inside the input, which libFuzzer allocates exactly: ASan also catches a slip.
        check(t.data >= data && t.n_bytes <= size &&
              t.data - data <= static_cast<ptrdiff_t>(size - t.n_bytes));
        for (uint64_t i = 0; i < t.n_bytes; ++i) sum += t.data[i];
    }
    g_sink = g_sink + sum;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::unique_ptr<ember::GgufFile> f;
    try {
        f = ember::GgufFile::parse(data, size, "fuzz.gguf");
    } catch (const ember::GgufError&) {
        return 0;
    }
    touch(*f, data, size);
    return 0;
}
