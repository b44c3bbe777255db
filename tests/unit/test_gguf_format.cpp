// GGUF reader and writer: writer -> reader round trips of every value type and tensor type,
// byte-level checks of the encoding, and hand-built malformed files, each of which must raise
// GgufError with a message that names the problem.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "engine/gguf/gguf.h"
#include "tests/support/temp_dir.h"

namespace ember::test {
namespace {

namespace fs = std::filesystem;

using Bytes = std::vector<uint8_t>;

// ---------------------------------------------------------------------------------------------
// Helpers

// A fresh directory per test, removed afterwards.
using TempDir = ::ember::test::TempDir;

Bytes read_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const Bytes& b) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

// Little-endian byte builder for hand-made files. mark() names the field that starts at the
// current offset, so truncation tests know which field a cut falls into.
class Builder {
public:
    struct Field {
        uint64_t begin;
        std::string name;
    };

    Builder& mark(std::string name) {
        fields_.push_back({bytes_.size(), std::move(name)});
        return *this;
    }
    Builder& u8(uint8_t v) { return put(&v, 1); }
    Builder& u16(uint16_t v) { return put_le(v, 2); }
    Builder& u32(uint32_t v) { return put_le(v, 4); }
    Builder& u64(uint64_t v) { return put_le(v, 8); }
    Builder& f32(float v) {
        uint32_t u;
        std::memcpy(&u, &v, 4);
        return u32(u);
    }
    Builder& f64(double v) {
        uint64_t u;
        std::memcpy(&u, &v, 8);
        return u64(u);
    }
    Builder& raw(const std::string& s) { return put(s.data(), s.size()); }
    Builder& str(const std::string& s) { return u64(s.size()).raw(s); }
    Builder& zeros(size_t n) {
        bytes_.insert(bytes_.end(), n, 0);
        return *this;
    }
    Builder& pad_to(uint64_t align) {
        while (bytes_.size() % align != 0) bytes_.push_back(0);
        return *this;
    }

    // GGUF header: magic, version, tensor_count, metadata_kv_count.
    Builder& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
        return raw("GGUF").u32(version).u64(n_tensors).u64(n_kv);
    }
    Builder& kv_u32(const std::string& key, uint32_t v) { return str(key).u32(4).u32(v); }
    Builder& kv_str(const std::string& key, const std::string& v) { return str(key).u32(8).str(v); }
    Builder& tensor(const std::string& name, std::initializer_list<uint64_t> dims, uint32_t type,
                    uint64_t offset) {
        str(name).u32(static_cast<uint32_t>(dims.size()));
        for (uint64_t d : dims) u64(d);
        return u32(type).u64(offset);
    }

    uint64_t size() const { return bytes_.size(); }
    const Bytes& bytes() const { return bytes_; }
    const std::vector<Field>& fields() const { return fields_; }

private:
    Builder& put(const void* p, size_t n) {
        const auto* c = static_cast<const uint8_t*>(p);
        bytes_.insert(bytes_.end(), c, c + n);
        return *this;
    }
    Builder& put_le(uint64_t v, int n) {
        for (int i = 0; i < n; ++i) bytes_.push_back(static_cast<uint8_t>(v >> (8 * i)));
        return *this;
    }

    Bytes bytes_;
    std::vector<Field> fields_;
};

constexpr uint32_t kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ8_1 = 9, kQ4_K = 12;

std::unique_ptr<GgufFile> parse(const Bytes& b, const std::string& name = "hand.gguf") {
    return GgufFile::parse(b.data(), b.size(), name);
}

// Parses `b`, expecting GgufError whose message starts with the file name and contains every
// one of `parts`. Returns the message.
std::string expect_error(const Bytes& b, std::initializer_list<std::string> parts) {
    try {
        parse(b, "bad.gguf");
    } catch (const GgufError& e) {
        const std::string msg = e.what();
        EXPECT_EQ(msg.rfind("bad.gguf: ", 0), 0u) << "message does not name the file: " << msg;
        for (const std::string& p : parts) {
            EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
        }
        return msg;
    } catch (const std::exception& e) {
        ADD_FAILURE() << "wrong exception type: " << e.what();
        return {};
    }
    ADD_FAILURE() << "no error; expected one containing '" << *parts.begin() << "'";
    return {};
}

// A valid file with one F32 tensor 't' [8] at offset 0 (32 bytes of data), plus `extra_kv`
// key/value pairs appended by the caller through `kv`.
template <typename KvFn>
Bytes one_tensor_file(uint64_t n_kv, KvFn kv, uint64_t align = 32) {
    Builder b;
    b.header(1, n_kv);
    kv(b);
    b.tensor("t", {8}, kF32, 0);
    b.pad_to(align);
    for (int i = 0; i < 8; ++i) b.f32(static_cast<float>(i));
    return b.bytes();
}

// The mapping in /proc/self/maps that contains `p`: its pathname, or "" if none.
std::string mapping_of(const void* p) {
    std::ifstream maps("/proc/self/maps");
    std::string line;
    const auto addr = reinterpret_cast<uintptr_t>(p);
    while (std::getline(maps, line)) {
        std::istringstream ss(line);
        std::string range, perms, off, dev, inode, path;
        ss >> range >> perms >> off >> dev >> inode;
        std::getline(ss >> std::ws, path);
        const size_t dash = range.find('-');
        const uintptr_t lo = std::stoull(range.substr(0, dash), nullptr, 16);
        const uintptr_t hi = std::stoull(range.substr(dash + 1), nullptr, 16);
        if (addr >= lo && addr < hi) return path.empty() ? "[anonymous]" : path;
    }
    return "";
}

GgufValue int_value(GgufValueType t, int64_t v) {
    return GgufValue{t, v};
}

GgufArray int_array(GgufValueType t, std::vector<int64_t> v) {
    GgufArray a;
    a.elem_type = t;
    a.ints = std::move(v);
    return a;
}

// ---------------------------------------------------------------------------------------------
// Writer -> reader round trips

TEST(GgufRoundTrip, EveryScalarType) {
    TempDir tmp;
    GgufWriter w;
    w.set("s.u8", int_value(GgufValueType::U8, 200));
    w.set("s.i8", int_value(GgufValueType::I8, -100));
    w.set("s.u16", int_value(GgufValueType::U16, 60000));
    w.set("s.i16", int_value(GgufValueType::I16, -30000));
    w.set_u32("s.u32", 4000000000u);
    w.set_i32("s.i32", -2000000000);
    w.set("s.u64", GgufValue{GgufValueType::U64, std::numeric_limits<uint64_t>::max()});
    w.set("s.i64", int_value(GgufValueType::I64, std::numeric_limits<int64_t>::min() + 7));
    w.set_f32("s.f32", -1.25f);
    w.set("s.f32_rounded", GgufValue{GgufValueType::F32, 0.1});
    w.set("s.f64", GgufValue{GgufValueType::F64, 0.1});
    w.set_bool("s.true", true);
    w.set_bool("s.false", false);
    w.set_string("s.empty", "");
    w.set_string("s.utf8", "h\xc3\xa9llo \xe2\x9c\x93");
    w.set_string("s.nul", std::string("a\0b", 3));
    w.set_string("s.long", std::string(100000, 'x'));
    const std::string path = tmp.file("scalars.gguf");
    w.write(path);

    const auto f = GgufFile::open(path);
    EXPECT_EQ(f->version(), 3u);
    EXPECT_EQ(f->alignment(), 32u);
    EXPECT_TRUE(f->tensors().empty());
    const std::vector<std::string> order = {
        "s.u8",    "s.i8",    "s.u16",  "s.i16",         "s.u32", "s.i32",
        "s.u64",   "s.i64",   "s.f32",  "s.f32_rounded", "s.f64", "s.true",
        "s.false", "s.empty", "s.utf8", "s.nul",         "s.long"};
    EXPECT_EQ(f->metadata_order(), order);
    EXPECT_EQ(f->metadata().size(), order.size());

    auto type_of = [&](const char* k) { return f->find(k)->type; };
    EXPECT_EQ(type_of("s.u8"), GgufValueType::U8);
    EXPECT_EQ(type_of("s.i8"), GgufValueType::I8);
    EXPECT_EQ(type_of("s.u16"), GgufValueType::U16);
    EXPECT_EQ(type_of("s.i16"), GgufValueType::I16);
    EXPECT_EQ(type_of("s.u32"), GgufValueType::U32);
    EXPECT_EQ(type_of("s.i32"), GgufValueType::I32);
    EXPECT_EQ(type_of("s.u64"), GgufValueType::U64);
    EXPECT_EQ(type_of("s.i64"), GgufValueType::I64);
    EXPECT_EQ(type_of("s.f32"), GgufValueType::F32);
    EXPECT_EQ(type_of("s.f64"), GgufValueType::F64);
    EXPECT_EQ(type_of("s.true"), GgufValueType::BOOL);
    EXPECT_EQ(type_of("s.utf8"), GgufValueType::STRING);

    EXPECT_EQ(f->get_int("s.u8"), 200);
    EXPECT_EQ(f->get_int("s.i8"), -100);
    EXPECT_EQ(f->get_int("s.u16"), 60000);
    EXPECT_EQ(f->get_int("s.i16"), -30000);
    EXPECT_EQ(f->get_int("s.u32"), 4000000000LL);
    EXPECT_EQ(f->get_int("s.i32"), -2000000000LL);
    EXPECT_EQ(std::get<uint64_t>(f->find("s.u64")->value), 18446744073709551615ull);
    EXPECT_EQ(f->get_int("s.i64"), std::numeric_limits<int64_t>::min() + 7);
    EXPECT_EQ(f->get_float("s.f32"), -1.25);
    EXPECT_EQ(f->get_float("s.f32_rounded"), static_cast<double>(0.1f));
    EXPECT_NE(f->get_float("s.f32_rounded"), 0.1);  // stored as f32: rounded
    EXPECT_EQ(f->get_float("s.f64"), 0.1);          // stored as f64: exact
    EXPECT_EQ(f->get_bool("s.true"), true);
    EXPECT_EQ(f->get_bool("s.false"), false);
    EXPECT_EQ(f->get_string("s.empty"), "");
    EXPECT_EQ(f->get_string("s.utf8"), "h\xc3\xa9llo \xe2\x9c\x93");
    EXPECT_EQ(f->get_string("s.nul"), std::string("a\0b", 3));
    EXPECT_EQ(f->get_string("s.long"), std::string(100000, 'x'));
    // Numbers convert to float; absent keys are nullopt.
    EXPECT_EQ(f->get_float("s.i16"), -30000.0);
    EXPECT_EQ(f->get_int("absent"), std::nullopt);
    EXPECT_EQ(f->get_string("absent"), std::nullopt);
    EXPECT_EQ(f->get_array("absent"), nullptr);
}

TEST(GgufRoundTrip, GettersRejectTheWrongTypeNamingKeyAndType) {
    TempDir tmp;
    GgufWriter w;
    w.set_u32("k.u32", 5);
    w.set_string("k.str", "x");
    w.set("k.u64big", GgufValue{GgufValueType::U64, uint64_t{1} << 63});
    const std::string path = tmp.file("types.gguf");
    w.write(path);
    const auto f = GgufFile::open(path);
    auto expect_throw = [](auto fn, const std::string& key, const std::string& type) {
        try {
            fn();
            ADD_FAILURE() << "no error for " << key;
        } catch (const GgufError& e) {
            const std::string msg = e.what();
            EXPECT_NE(msg.find(key), std::string::npos) << msg;
            EXPECT_NE(msg.find(type), std::string::npos) << msg;
        }
    };
    expect_throw([&] { (void)f->get_string("k.u32"); }, "k.u32", "u32");
    expect_throw([&] { (void)f->get_int("k.str"); }, "k.str", "string");
    expect_throw([&] { (void)f->get_bool("k.u32"); }, "k.u32", "u32");
    expect_throw([&] { (void)f->get_array("k.str"); }, "k.str", "string");
    expect_throw([&] { (void)f->get_float("k.str"); }, "k.str", "string");
    // A u64 beyond int64 cannot be returned as int64.
    expect_throw([&] { (void)f->get_int("k.u64big"); }, "k.u64big", "u64");
    EXPECT_EQ(f->get_float("k.u64big"), 9223372036854775808.0);
}

TEST(GgufRoundTrip, ScalarEncodingIsByteExact) {
    // Each scalar type on its own, compared against bytes laid out by hand.
    struct Case {
        GgufValue value;
        uint32_t type;
        Bytes payload;
    };
    const Case cases[] = {
        {int_value(GgufValueType::U8, 0xab), 0, {0xab}},
        {int_value(GgufValueType::I8, -2), 1, {0xfe}},
        {int_value(GgufValueType::U16, 0x1234), 2, {0x34, 0x12}},
        {int_value(GgufValueType::I16, -2), 3, {0xfe, 0xff}},
        {int_value(GgufValueType::U32, 0x01020304), 4, {4, 3, 2, 1}},
        {int_value(GgufValueType::I32, -2), 5, {0xfe, 0xff, 0xff, 0xff}},
        {GgufValue{GgufValueType::F32, 1.0}, 6, {0x00, 0x00, 0x80, 0x3f}},
        {GgufValue{GgufValueType::BOOL, true}, 7, {1}},
        {GgufValue{GgufValueType::STRING, std::string("hi")},
         8,
         {2, 0, 0, 0, 0, 0, 0, 0, 'h', 'i'}},
        {GgufValue{GgufValueType::U64, uint64_t{0x0102030405060708}}, 10, {8, 7, 6, 5, 4, 3, 2, 1}},
        {int_value(GgufValueType::I64, -2), 11, {0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}},
        {GgufValue{GgufValueType::F64, -2.0}, 12, {0, 0, 0, 0, 0, 0, 0, 0xc0}},
    };
    TempDir tmp;
    for (const Case& c : cases) {
        SCOPED_TRACE(c.type);
        GgufWriter w;
        w.set("key", c.value);
        const std::string path = tmp.file("one.gguf");
        w.write(path);
        Builder b;
        b.header(0, 1).str("key").u32(c.type);
        for (uint8_t x : c.payload) b.u8(x);
        b.pad_to(32);
        EXPECT_EQ(read_bytes(path), b.bytes());
    }
}

TEST(GgufRoundTrip, ArraysOfEveryType) {
    TempDir tmp;
    GgufWriter w;
    w.set("a.u8", GgufValue{GgufValueType::ARRAY, int_array(GgufValueType::U8, {0, 1, 255})});
    w.set("a.i8", GgufValue{GgufValueType::ARRAY, int_array(GgufValueType::I8, {-128, 0, 127})});
    w.set("a.u16", GgufValue{GgufValueType::ARRAY, int_array(GgufValueType::U16, {0, 65535})});
    w.set("a.i16", GgufValue{GgufValueType::ARRAY, int_array(GgufValueType::I16, {-32768, 32767})});
    w.set("a.u32",
          GgufValue{GgufValueType::ARRAY, int_array(GgufValueType::U32, {0, 4294967295LL})});
    w.set("a.i32", GgufValue{GgufValueType::ARRAY,
                             int_array(GgufValueType::I32, {-2147483648LL, 2147483647LL})});
    w.set("a.i64", GgufValue{GgufValueType::ARRAY,
                             int_array(GgufValueType::I64, {std::numeric_limits<int64_t>::min(), -1,
                                                            std::numeric_limits<int64_t>::max()})});
    w.set("a.bool", GgufValue{GgufValueType::ARRAY, int_array(GgufValueType::BOOL, {1, 0, 1, 1})});
    GgufArray u64s;
    u64s.elem_type = GgufValueType::U64;
    u64s.uints = {0, 1, std::numeric_limits<uint64_t>::max()};
    w.set("a.u64", GgufValue{GgufValueType::ARRAY, u64s});
    GgufArray f32s;
    f32s.elem_type = GgufValueType::F32;
    f32s.floats = {0.5, -3.0, 0.1};
    w.set("a.f32", GgufValue{GgufValueType::ARRAY, f32s});
    GgufArray f64s;
    f64s.elem_type = GgufValueType::F64;
    f64s.floats = {0.1, -1e300, 5e-324};
    w.set("a.f64", GgufValue{GgufValueType::ARRAY, f64s});
    GgufArray strs;
    strs.elem_type = GgufValueType::STRING;
    strs.strings = {"", "a", std::string("\0b", 2), "\xe2\x96\x81the"};
    w.set("a.str", GgufValue{GgufValueType::ARRAY, strs});
    GgufArray empty;
    empty.elem_type = GgufValueType::I32;
    w.set("a.empty", GgufValue{GgufValueType::ARRAY, empty});
    // Nested: [[1, -2], ["x", "yz"], [[7]], []]
    GgufArray nested;
    nested.elem_type = GgufValueType::ARRAY;
    nested.arrays.push_back(int_array(GgufValueType::I32, {1, -2}));
    GgufArray inner_str;
    inner_str.elem_type = GgufValueType::STRING;
    inner_str.strings = {"x", "yz"};
    nested.arrays.push_back(inner_str);
    GgufArray inner_nested;
    inner_nested.elem_type = GgufValueType::ARRAY;
    inner_nested.arrays.push_back(int_array(GgufValueType::U8, {7}));
    nested.arrays.push_back(inner_nested);
    nested.arrays.push_back(int_array(GgufValueType::U16, {}));
    w.set("a.nested", GgufValue{GgufValueType::ARRAY, nested});
    const std::string path = tmp.file("arrays.gguf");
    w.write(path);

    const auto f = GgufFile::open(path);
    auto arr = [&](const char* k) -> const GgufArray& {
        const GgufArray* a = f->get_array(k);
        EXPECT_NE(a, nullptr) << k;
        EXPECT_EQ(f->find(k)->type, GgufValueType::ARRAY);
        static const GgufArray none;
        return a ? *a : none;
    };
    EXPECT_EQ(arr("a.u8").elem_type, GgufValueType::U8);
    EXPECT_EQ(arr("a.u8").ints, (std::vector<int64_t>{0, 1, 255}));
    EXPECT_EQ(arr("a.i8").elem_type, GgufValueType::I8);
    EXPECT_EQ(arr("a.i8").ints, (std::vector<int64_t>{-128, 0, 127}));
    EXPECT_EQ(arr("a.u16").elem_type, GgufValueType::U16);
    EXPECT_EQ(arr("a.u16").ints, (std::vector<int64_t>{0, 65535}));
    EXPECT_EQ(arr("a.i16").elem_type, GgufValueType::I16);
    EXPECT_EQ(arr("a.i16").ints, (std::vector<int64_t>{-32768, 32767}));
    EXPECT_EQ(arr("a.u32").elem_type, GgufValueType::U32);
    EXPECT_EQ(arr("a.u32").ints, (std::vector<int64_t>{0, 4294967295LL}));
    EXPECT_EQ(arr("a.i32").elem_type, GgufValueType::I32);
    EXPECT_EQ(arr("a.i32").ints, (std::vector<int64_t>{-2147483648LL, 2147483647LL}));
    EXPECT_EQ(arr("a.i64").elem_type, GgufValueType::I64);
    EXPECT_EQ(arr("a.i64").ints, (std::vector<int64_t>{std::numeric_limits<int64_t>::min(), -1,
                                                       std::numeric_limits<int64_t>::max()}));
    EXPECT_EQ(arr("a.bool").elem_type, GgufValueType::BOOL);
    EXPECT_EQ(arr("a.bool").ints, (std::vector<int64_t>{1, 0, 1, 1}));
    EXPECT_EQ(arr("a.u64").elem_type, GgufValueType::U64);
    EXPECT_EQ(arr("a.u64").uints,
              (std::vector<uint64_t>{0, 1, std::numeric_limits<uint64_t>::max()}));
    EXPECT_EQ(arr("a.f32").elem_type, GgufValueType::F32);
    EXPECT_EQ(arr("a.f32").floats, (std::vector<double>{0.5, -3.0, static_cast<double>(0.1f)}));
    EXPECT_EQ(arr("a.f64").elem_type, GgufValueType::F64);
    EXPECT_EQ(arr("a.f64").floats, (std::vector<double>{0.1, -1e300, 5e-324}));
    EXPECT_EQ(arr("a.str").elem_type, GgufValueType::STRING);
    EXPECT_EQ(arr("a.str").strings, strs.strings);
    EXPECT_EQ(arr("a.str").size(), 4u);
    EXPECT_EQ(arr("a.empty").elem_type, GgufValueType::I32);
    EXPECT_EQ(arr("a.empty").size(), 0u);

    const GgufArray& n = arr("a.nested");
    EXPECT_EQ(n.elem_type, GgufValueType::ARRAY);
    ASSERT_EQ(n.arrays.size(), 4u);
    EXPECT_EQ(n.size(), 4u);
    EXPECT_EQ(n.arrays[0].elem_type, GgufValueType::I32);
    EXPECT_EQ(n.arrays[0].ints, (std::vector<int64_t>{1, -2}));
    EXPECT_EQ(n.arrays[1].elem_type, GgufValueType::STRING);
    EXPECT_EQ(n.arrays[1].strings, (std::vector<std::string>{"x", "yz"}));
    EXPECT_EQ(n.arrays[2].elem_type, GgufValueType::ARRAY);
    ASSERT_EQ(n.arrays[2].arrays.size(), 1u);
    EXPECT_EQ(n.arrays[2].arrays[0].elem_type, GgufValueType::U8);
    EXPECT_EQ(n.arrays[2].arrays[0].ints, (std::vector<int64_t>{7}));
    EXPECT_EQ(n.arrays[3].elem_type, GgufValueType::U16);
    EXPECT_EQ(n.arrays[3].size(), 0u);
}

TEST(GgufRoundTrip, ArrayEncodingIsByteExact) {
    TempDir tmp;
    GgufWriter w;
    GgufArray a;
    a.elem_type = GgufValueType::ARRAY;
    a.arrays.push_back(int_array(GgufValueType::I16, {-1, 2}));
    GgufArray s;
    s.elem_type = GgufValueType::STRING;
    s.strings = {"ab"};
    a.arrays.push_back(s);
    w.set("n", GgufValue{GgufValueType::ARRAY, a});
    const std::string path = tmp.file("arr.gguf");
    w.write(path);
    Builder b;
    b.header(0, 1).str("n").u32(9);  // ARRAY
    b.u32(9).u64(2);                 // of 2 arrays
    b.u32(3).u64(2).u16(0xffff).u16(2);
    b.u32(8).u64(1).str("ab");
    b.pad_to(32);
    EXPECT_EQ(read_bytes(path), b.bytes());
}

struct TensorCase {
    std::string name;
    std::vector<int64_t> dims;
    TensorType type;
    uint64_t n_bytes;  // worked out by hand from the block sizes of the GGUF format
};

const std::vector<TensorCase>& tensor_cases() {
    static const std::vector<TensorCase> cases = {
        {"f32", {5, 3}, TensorType::F32, 5 * 3 * 4},
        {"f16", {7, 2}, TensorType::F16, 7 * 2 * 2},
        {"bf16", {3}, TensorType::BF16, 3 * 2},
        {"q4_0", {64, 2}, TensorType::Q4_0, 2 * 2 * 18},
        {"q8_0", {32, 3}, TensorType::Q8_0, 3 * 34},
        {"q4_k", {256, 2}, TensorType::Q4_K, 2 * 144},
        {"q6_k", {512}, TensorType::Q6_K, 2 * 210},
        {"iq4_nl", {32, 1, 2}, TensorType::IQ4_NL, 2 * 18},
        {"q5_1.4d", {32, 2, 1, 2}, TensorType::Q5_1, 4 * 24},
    };
    return cases;
}

Bytes random_bytes(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    Bytes b(n);
    for (auto& x : b) x = static_cast<uint8_t>(rng());
    return b;
}

void check_tensors_round_trip(uint32_t alignment) {
    TempDir tmp;
    GgufWriter w;
    w.set_string("general.architecture", "test");
    std::vector<Bytes> data;
    for (size_t i = 0; i < tensor_cases().size(); ++i) {
        const TensorCase& c = tensor_cases()[i];
        data.push_back(random_bytes(c.n_bytes, static_cast<uint32_t>(i + 1)));
        w.add_tensor(c.name, c.dims, c.type, data.back());
    }
    const std::string path = tmp.file("tensors.gguf");
    w.write(path, alignment);

    const auto f = GgufFile::open(path);
    EXPECT_EQ(f->alignment(), alignment);
    if (alignment != 32) {
        EXPECT_EQ(f->get_int("general.alignment"), alignment);
    } else {
        EXPECT_EQ(f->find("general.alignment"), nullptr);
    }
    ASSERT_EQ(f->tensors().size(), tensor_cases().size());
    const uint8_t* base = f->file_data();
    for (size_t i = 0; i < tensor_cases().size(); ++i) {
        const TensorCase& c = tensor_cases()[i];
        SCOPED_TRACE(c.name);
        const GgufTensorInfo* t = f->find_tensor(c.name);
        ASSERT_NE(t, nullptr);
        EXPECT_EQ(t, &f->tensors()[i]);  // file order kept
        EXPECT_EQ(t->dims, c.dims);
        EXPECT_EQ(t->type, c.type);
        EXPECT_EQ(t->n_bytes, c.n_bytes);
        int64_t n = 1;
        for (int64_t d : c.dims) n *= d;
        EXPECT_EQ(t->n_elements(), n);
        EXPECT_EQ(t->offset % alignment, 0u);
        // The data pointer lies in the file image, aligned, and the bytes are identical.
        ASSERT_GE(t->data, base);
        ASSERT_LE(t->data + t->n_bytes, base + f->file_size());
        EXPECT_EQ(static_cast<uint64_t>(t->data - base) % alignment, 0u);
        EXPECT_EQ(std::memcmp(t->data, data[i].data(), c.n_bytes), 0);
    }
    // Independently of the reader: the bytes at each tensor's position in the file on disk.
    const Bytes disk = read_bytes(path);
    ASSERT_EQ(disk.size(), f->file_size());
    for (size_t i = 0; i < tensor_cases().size(); ++i) {
        const GgufTensorInfo& t = f->tensors()[i];
        const auto pos = static_cast<size_t>(t.data - base);
        EXPECT_TRUE(std::equal(data[i].begin(), data[i].end(), disk.begin() + pos)) << t.name;
    }
    EXPECT_EQ(f->find_tensor("absent"), nullptr);
}

TEST(GgufRoundTrip, TensorsOfSeveralTypesDefaultAlignment) {
    check_tensors_round_trip(32);
}
TEST(GgufRoundTrip, TensorsWithAlignment64) {
    check_tensors_round_trip(64);
}
TEST(GgufRoundTrip, TensorsWithAlignment4096) {
    check_tensors_round_trip(4096);
}
TEST(GgufRoundTrip, TensorsWithAlignment8) {
    check_tensors_round_trip(8);
}

TEST(GgufRoundTrip, AlignmentFromMetadataIsHonouredByTheWriter) {
    // A general.alignment copied into the metadata decides the layout (readers use it).
    TempDir tmp;
    GgufWriter w;
    w.set_u32("general.alignment", 128);
    w.add_tensor("a", {3}, TensorType::F32, random_bytes(12, 1));
    w.add_tensor("b", {5}, TensorType::F32, random_bytes(20, 2));
    const std::string path = tmp.file("a128.gguf");
    w.write(path);
    const auto f = GgufFile::open(path);
    EXPECT_EQ(f->alignment(), 128u);
    for (const auto& t : f->tensors()) {
        EXPECT_EQ(t.offset % 128, 0u) << t.name;
        EXPECT_EQ(static_cast<uint64_t>(t.data - f->file_data()) % 128, 0u) << t.name;
    }
}

TEST(GgufRoundTrip, WeightsPointIntoTheFileMapping) {
    TempDir tmp;
    GgufWriter w;
    w.add_tensor("w", {1024, 16}, TensorType::F32, random_bytes(1024 * 16 * 4, 9));
    const std::string path = tmp.file("mapped.gguf");
    w.write(path);
    const auto f = GgufFile::open(path);
    const GgufTensorInfo* t = f->find_tensor("w");
    ASSERT_NE(t, nullptr);
    // The kernel's view of the address space: the tensor bytes belong to a mapping of the
    // file itself, not to a heap copy.
    const std::string canonical = fs::canonical(path).string();
    EXPECT_EQ(mapping_of(t->data), canonical);
    EXPECT_EQ(mapping_of(t->data + t->n_bytes - 1), canonical);
    EXPECT_EQ(mapping_of(f->file_data()), canonical);
    // parse() of an in-memory image points into that image.
    const Bytes image = read_bytes(path);
    const auto g = GgufFile::parse(image.data(), image.size(), "image");
    EXPECT_EQ(g->find_tensor("w")->data, image.data() + (t->data - f->file_data()));
}

TEST(GgufRoundTrip, WriterRejectsWrongByteCountAndDuplicates) {
    GgufWriter w;
    EXPECT_THROW(w.add_tensor("x", {4}, TensorType::F32, Bytes(15)), GgufError);
    EXPECT_THROW(w.add_tensor("x", {33}, TensorType::Q4_0, Bytes(18)), GgufError);
    w.add_tensor("x", {4}, TensorType::F32, Bytes(16));
    EXPECT_THROW(w.add_tensor("x", {4}, TensorType::F32, Bytes(16)), GgufError);
}

TEST(GgufRoundTrip, CopyFromKeepsTypeAndValue) {
    TempDir tmp;
    GgufWriter a;
    a.set("k.u16", int_value(GgufValueType::U16, 513));
    a.set("k.arr", GgufValue{GgufValueType::ARRAY, int_array(GgufValueType::I8, {-1, 1})});
    const std::string pa = tmp.file("a.gguf");
    a.write(pa);
    const auto fa = GgufFile::open(pa);
    GgufWriter b;
    b.copy_from(*fa, "k.arr");
    b.copy_from(*fa, "k.u16");
    EXPECT_THROW(b.copy_from(*fa, "absent"), GgufError);
    const std::string pb = tmp.file("b.gguf");
    b.write(pb);
    const auto fb = GgufFile::open(pb);
    EXPECT_EQ(fb->metadata_order(), (std::vector<std::string>{"k.arr", "k.u16"}));
    EXPECT_EQ(fb->find("k.u16")->type, GgufValueType::U16);
    EXPECT_EQ(fb->get_int("k.u16"), 513);
    EXPECT_EQ(fb->get_array("k.arr")->elem_type, GgufValueType::I8);
    EXPECT_EQ(fb->get_array("k.arr")->ints, (std::vector<int64_t>{-1, 1}));
}

// ---------------------------------------------------------------------------------------------
// Hand-built files

TEST(GgufHandBuilt, Version2FileParses) {
    // GGUF v2 has the same layout as v3 (64-bit counts and lengths).
    Builder b;
    b.header(2, 3, /*version=*/2);
    b.kv_str("general.architecture", "llama");
    b.kv_u32("v2.count", 77);
    b.str("v2.arr").u32(9).u32(6).u64(2).f32(1.5f).f32(-2.0f);
    b.tensor("a", {4, 2}, kF32, 0);
    b.tensor("b", {3}, kF16, 32);
    b.pad_to(32);
    const uint64_t data_start = b.size();
    for (int i = 0; i < 8; ++i) b.f32(static_cast<float>(i) + 0.5f);
    b.u16(0x3c00).u16(0x4000).u16(0xc000);  // 1, 2, -2 in f16
    const auto f = parse(b.bytes());
    EXPECT_EQ(f->version(), 2u);
    EXPECT_EQ(f->get_string("general.architecture"), "llama");
    EXPECT_EQ(f->get_int("v2.count"), 77);
    EXPECT_EQ(f->get_array("v2.arr")->floats, (std::vector<double>{1.5, -2.0}));
    ASSERT_EQ(f->tensors().size(), 2u);
    const GgufTensorInfo* a = f->find_tensor("a");
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(a->dims, (std::vector<int64_t>{4, 2}));
    float first;
    std::memcpy(&first, a->data, 4);
    EXPECT_EQ(first, 0.5f);
    const GgufTensorInfo* t = f->find_tensor("b");
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->type, TensorType::F16);
    EXPECT_EQ(t->n_bytes, 6u);
    EXPECT_EQ(t->data, b.bytes().data() + data_start + 32);
    EXPECT_EQ(a->data, b.bytes().data() + data_start);
    uint16_t h;
    std::memcpy(&h, t->data + 4, 2);
    EXPECT_EQ(h, 0xc000);
}

TEST(GgufHandBuilt, MinimalValidFileParses) {
    const Bytes ok = one_tensor_file(1, [](Builder& b) { b.kv_u32("x", 1); });
    const auto f = parse(ok);
    EXPECT_EQ(f->tensors().size(), 1u);
    EXPECT_EQ(f->get_int("x"), 1);
    // And a file with nothing but a header.
    Builder empty;
    empty.header(0, 0);
    EXPECT_TRUE(parse(empty.bytes())->metadata().empty());
}

TEST(GgufMalformed, BadMagic) {
    Bytes b = one_tensor_file(0, [](Builder&) {});
    b[0] = 'G', b[1] = 'G', b[2] = 'M', b[3] = 'L';
    expect_error(b, {"bad magic"});
    b[0] = 'F', b[1] = 'U', b[2] = 'G', b[3] = 'G';  // byte-swapped
    expect_error(b, {"bad magic"});
}

TEST(GgufMalformed, UnsupportedVersions) {
    for (uint32_t v : {0u, 1u, 4u, 0x03000000u}) {
        Builder b;
        b.header(0, 0, v);
        expect_error(b.bytes(), {"version " + std::to_string(v)});
    }
}

TEST(GgufMalformed, TruncatedAtEveryHeaderField) {
    // A file with string, integer and string-array metadata and one tensor. Every cut before
    // the end must fail, naming the field it falls into.
    Builder b;
    b.mark("magic").raw("GGUF");
    b.mark("version").u32(3);
    b.mark("tensor_count").u64(1);
    b.mark("metadata_kv_count").u64(3);
    b.mark("metadata key #0 (string length)").u64(8);
    b.mark("metadata key #0").raw("a.string");
    b.mark("type of metadata 'a.string'").u32(8);
    b.mark("metadata 'a.string' (string length)").u64(5);
    b.mark("metadata 'a.string'").raw("hello");
    b.mark("metadata key #1 (string length)").u64(5);
    b.mark("metadata key #1").raw("a.u32");
    b.mark("type of metadata 'a.u32'").u32(4);
    b.mark("metadata 'a.u32'").u32(7);
    b.mark("metadata key #2 (string length)").u64(5);
    b.mark("metadata key #2").raw("a.arr");
    b.mark("type of metadata 'a.arr'").u32(9);
    b.mark("metadata 'a.arr' (array element type)").u32(8);
    b.mark("metadata 'a.arr' (array length)").u64(2);
    const uint64_t array_data = b.size();
    b.mark("metadata 'a.arr'[0] (string length)").u64(1);
    b.mark("metadata 'a.arr'[0]").raw("x");
    b.mark("metadata 'a.arr'[1] (string length)").u64(2);
    b.mark("metadata 'a.arr'[1]").raw("yz");
    b.mark("name of tensor #0 (string length)").u64(6);
    b.mark("name of tensor #0").raw("tensor");
    b.mark("tensor 'tensor' n_dims").u32(2);
    b.mark("tensor 'tensor' dim 0").u64(4);
    b.mark("tensor 'tensor' dim 1").u64(2);
    b.mark("tensor 'tensor' type").u32(kF32);
    b.mark("tensor 'tensor' offset").u64(0);
    const uint64_t table_end = b.size();
    b.pad_to(32);
    const uint64_t data_start = b.size();
    ASSERT_LT(table_end, data_start);  // there is padding to cut into
    for (int i = 0; i < 8; ++i) b.f32(1.0f);
    const Bytes full = b.bytes();
    ASSERT_NO_THROW(parse(full));

    const auto& fields = b.fields();
    for (uint64_t len = 0; len < full.size(); ++len) {
        SCOPED_TRACE("cut at " + std::to_string(len));
        const Bytes cut(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(len));
        if (len >= data_start) {
            expect_error(cut, {"tensor 'tensor'", "lies outside the file"});
            continue;
        }
        if (len >= table_end) {
            expect_error(cut, {"data section would start at " + std::to_string(data_start)});
            continue;
        }
        // After the counts are read, counts that cannot fit in what is left are refused
        // before any field runs short (each entry takes at least 8 bytes).
        if (len >= 24 && (len - 24) / 8 < 1) {
            expect_error(cut, {"tensor_count 1 exceeds the file"});
            continue;
        }
        if (len >= 24 && (len - 24) / 8 < 3) {
            expect_error(cut, {"metadata_kv_count 3 exceeds the file"});
            continue;
        }
        // Likewise two strings need at least 16 bytes after the array length.
        if (len >= array_data && len < array_data + 16) {
            expect_error(cut, {"metadata 'a.arr': array length 2 exceeds the file"});
            continue;
        }
        std::string field;
        for (const auto& fd : fields) {
            if (fd.begin <= len) field = fd.name;
        }
        expect_error(cut, {"truncated while reading " + field + " at offset"});
    }
}

TEST(GgufMalformed, StringLengthBeyondFile) {
    Builder b;
    b.header(0, 1).str("general.name").u32(8).u64(1000).raw("short");
    expect_error(b.bytes(), {"truncated while reading metadata 'general.name'", "need 1000"});
    // A key length beyond the file.
    Builder k;
    k.header(0, 1).u64(uint64_t{1} << 20).raw("abc");
    expect_error(k.bytes(), {"metadata key #0", "need 1048576"});
    // Absurd lengths are refused as such (before anything is allocated).
    Builder h;
    h.header(0, 1).str("general.name").u32(8).u64(~uint64_t{0}).raw("x");
    expect_error(h.bytes(), {"metadata 'general.name'", "string length 18446744073709551615"});
    // A tensor name.
    Builder t;
    t.header(1, 0).u64(500).raw("abc").zeros(40);
    expect_error(t.bytes(), {"name of tensor #0", "need 500"});
}

TEST(GgufMalformed, ArrayCountBeyondFile) {
    for (uint32_t elem : {0u, 4u, 8u, 9u, 12u}) {
        SCOPED_TRACE(elem);
        Builder b;
        b.header(0, 1).str("arr").u32(9).u32(elem).u64(1000000).zeros(64);
        expect_error(b.bytes(), {"metadata 'arr'", "array length 1000000 exceeds the file"});
    }
    // Count just one more than fits: 4 u32 elements in 12 bytes.
    Builder c;
    c.header(0, 1).str("arr").u32(9).u32(4).u64(4).u32(1).u32(2).u32(3);
    expect_error(c.bytes(), {"metadata 'arr'", "array length 4 exceeds the file"});
    // A nested array's count.
    Builder n;
    n.header(0, 1).str("nest").u32(9).u32(9).u64(1).u32(4).u64(1u << 30).zeros(16);
    expect_error(n.bytes(), {"metadata 'nest'[0]", "array length 1073741824 exceeds the file"});
    // Counts in the header.
    Builder h;
    h.header(1u << 30, 0).zeros(64);
    expect_error(h.bytes(), {"tensor_count 1073741824 exceeds the file"});
    Builder m;
    m.header(0, ~uint64_t{0}).zeros(64);
    expect_error(m.bytes(), {"metadata_kv_count 18446744073709551615 exceeds the file"});
}

TEST(GgufMalformed, UnknownValueType) {
    for (uint32_t t : {13u, 99u, 0xffffffffu}) {
        Builder b;
        b.header(0, 1).str("weird").u32(t).u64(0);
        expect_error(b.bytes(), {"metadata 'weird'", "unknown value type " + std::to_string(t)});
        Builder a;
        a.header(0, 1).str("weird.arr").u32(9).u32(t).u64(0);
        expect_error(a.bytes(),
                     {"metadata 'weird.arr'", "unknown array element type " + std::to_string(t)});
    }
}

TEST(GgufMalformed, ArraysNestedTooDeeply) {
    Builder b;
    b.header(0, 1).str("deep").u32(9);
    for (int i = 0; i < 40; ++i) b.u32(9).u64(1);
    b.u32(4).u64(0);
    expect_error(b.bytes(), {"metadata 'deep'", "nested too deeply"});
}

TEST(GgufMalformed, UnknownTensorType) {
    for (uint32_t t : {4u, 5u, 99u, 0xffffffffu}) {
        Builder b;
        b.header(1, 0).tensor("w", {32}, t, 0).pad_to(32).zeros(256);
        expect_error(b.bytes(), {"tensor 'w'", "unknown tensor type " + std::to_string(t)});
    }
}

TEST(GgufMalformed, KnownButUnsupportedTensorType) {
    const std::pair<uint32_t, const char*> types[] = {
        {kQ8_1, "q8_1"}, {15, "q8_K"}, {24, "i8"}, {26, "i32"}, {28, "f64"}};
    for (const auto& [t, name] : types) {
        Builder b;
        b.header(1, 0).tensor("w", {256}, t, 0).pad_to(32).zeros(2048);
        expect_error(b.bytes(), {"tensor 'w'", std::string(name), "not supported"});
    }
}

TEST(GgufMalformed, DimensionCounts) {
    Builder z;
    z.header(1, 0).str("w").u32(0).u32(kF32).u64(0).pad_to(32).zeros(64);
    expect_error(z.bytes(), {"tensor 'w'", "n_dims 0"});
    Builder f;
    f.header(1, 0).tensor("w", {2, 2, 2, 2, 2}, kF32, 0).pad_to(32).zeros(256);
    expect_error(f.bytes(), {"tensor 'w'", "n_dims 5"});
    Builder h;
    h.header(1, 0).str("w").u32(0xffffffffu).zeros(64);
    expect_error(h.bytes(), {"tensor 'w'", "n_dims 4294967295"});
}

TEST(GgufMalformed, ZeroDimension) {
    Builder b;
    b.header(1, 0).tensor("w", {4, 0, 2}, kF32, 0).pad_to(32).zeros(64);
    expect_error(b.bytes(), {"tensor 'w'", "dimension 1 = 0"});
    Builder c;
    c.header(1, 0).tensor("w", {0}, kF32, 0).pad_to(32).zeros(64);
    expect_error(c.bytes(), {"tensor 'w'", "dimension 0 = 0"});
}

TEST(GgufMalformed, OverflowingDimensions) {
    // 2^32 * 2^32 * 2 overflows 64 bits (and the element count is absurd long before that).
    Builder b;
    b.header(1, 0).tensor("w", {1ull << 32, 1ull << 32, 2}, kF32, 0).pad_to(32).zeros(64);
    expect_error(b.bytes(), {"tensor 'w'", "dimension 1", "overflows"});
    // One dimension alone wraps the byte count when multiplied by 4 bytes per element.
    Builder c;
    c.header(1, 0).tensor("w", {1ull << 63}, kF32, 0).pad_to(32).zeros(64);
    expect_error(c.bytes(), {"tensor 'w'", "dimension 0", "overflows"});
    // Exact 64-bit wrap to zero: 2^16 four times.
    Builder d;
    d.header(1, 0).tensor("w", {65536, 65536, 65536, 65536}, kF32, 0).pad_to(32).zeros(64);
    expect_error(d.bytes(), {"tensor 'w'", "overflows"});
}

TEST(GgufMalformed, OffsetNotAligned) {
    Builder b;
    b.header(1, 0).tensor("w", {8}, kF32, 4).pad_to(32).zeros(64);
    expect_error(b.bytes(), {"tensor 'w'", "offset 4 is not aligned to 32"});
    // With a custom alignment the same rule applies to it.
    Builder c;
    c.header(1, 1).kv_u32("general.alignment", 64).tensor("w", {8}, kF32, 32).pad_to(64).zeros(128);
    expect_error(c.bytes(), {"tensor 'w'", "offset 32 is not aligned to 64"});
}

TEST(GgufMalformed, TensorDataBeyondTheEnd) {
    Builder b;
    b.header(2, 0).tensor("a", {8}, kF32, 0).tensor("b", {8}, kF32, 32).pad_to(32);
    b.zeros(32 + 31);  // b needs 32 bytes at data+32, one is missing
    expect_error(b.bytes(), {"tensor 'b'", "lies outside the file"});
    // An offset far beyond the file (and one that would wrap when added to the size).
    for (uint64_t off : {uint64_t{1} << 40, ~uint64_t{31}}) {
        Builder c;
        c.header(1, 0).tensor("w", {8}, kF32, off).pad_to(32).zeros(64);
        expect_error(c.bytes(), {"tensor 'w'", "lies outside the file"});
    }
}

TEST(GgufMalformed, OverlappingTensors) {
    Builder b;
    b.header(2, 0).tensor("a", {16}, kF32, 0).tensor("b", {8}, kF32, 32).pad_to(32).zeros(96);
    expect_error(b.bytes(), {"overlaps", "'a'", "'b'"});
    // Same offset.
    Builder c;
    c.header(2, 0).tensor("a", {8}, kF32, 32).tensor("b", {8}, kF32, 32).pad_to(32).zeros(96);
    expect_error(c.bytes(), {"overlaps"});
    // Adjacent is fine.
    Builder d;
    d.header(2, 0).tensor("a", {8}, kF32, 32).tensor("b", {8}, kF32, 0).pad_to(32).zeros(64);
    EXPECT_NO_THROW(parse(d.bytes()));
}

TEST(GgufMalformed, DuplicateTensorNames) {
    Builder b;
    b.header(2, 0).tensor("same", {8}, kF32, 0).tensor("same", {8}, kF32, 32).pad_to(32).zeros(64);
    expect_error(b.bytes(), {"duplicate tensor name 'same'"});
}

TEST(GgufMalformed, DuplicateMetadataKeys) {
    Builder b;
    b.header(0, 3).kv_u32("k", 1).kv_u32("other", 2).kv_str("k", "again");
    expect_error(b.bytes(), {"duplicate metadata key 'k'"});
}

TEST(GgufMalformed, BadAlignmentValue) {
    for (uint32_t a : {0u, 3u, 48u, 1u << 31}) {
        Builder b;
        b.header(0, 1).kv_u32("general.alignment", a);
        expect_error(b.bytes(), {"general.alignment", std::to_string(a)});
    }
    // Not an integer at all.
    Builder s;
    s.header(0, 1).kv_str("general.alignment", "32");
    expect_error(s.bytes(), {"general.alignment", "string"});
    // Good alignments, stored as u32 (as the format specifies) and other integer types.
    for (uint32_t type : {4u, 10u, 5u}) {
        Builder g;
        g.header(0, 1).str("general.alignment").u32(type);
        if (type == 10) {
            g.u64(16);
        } else {
            g.u32(16);
        }
        EXPECT_EQ(parse(g.bytes())->alignment(), 16u) << type;
    }
}

TEST(GgufMalformed, RowLengthNotAMultipleOfTheBlockSize) {
    Builder b;
    b.header(1, 0).tensor("w", {48, 2}, kQ4_0, 0).pad_to(32).zeros(256);
    expect_error(b.bytes(), {"tensor 'w'", "row length 48", "q4_0", "block size 32"});
    Builder k;
    k.header(1, 0).tensor("k", {128}, kQ4_K, 0).pad_to(32).zeros(256);
    expect_error(k.bytes(), {"tensor 'k'", "row length 128", "q4_K", "256"});
}

TEST(GgufMalformed, BoolValueTwo) {
    Builder b;
    b.header(0, 1).str("flag").u32(7).u8(2);
    expect_error(b.bytes(), {"metadata 'flag'", "bool value 2"});
    Builder a;
    a.header(0, 1).str("flags").u32(9).u32(7).u64(3).u8(1).u8(0).u8(2);
    expect_error(a.bytes(), {"metadata 'flags'", "bool value 2"});
}

TEST(GgufMalformed, OpenReportsMissingAndEmptyFiles) {
    TempDir tmp;
    try {
        GgufFile::open(tmp.file("nope.gguf"));
        ADD_FAILURE() << "no error";
    } catch (const GgufError& e) {
        EXPECT_NE(std::string(e.what()).find("nope.gguf"), std::string::npos) << e.what();
    }
    write_bytes(tmp.file("empty.gguf"), {});
    try {
        GgufFile::open(tmp.file("empty.gguf"));
        ADD_FAILURE() << "no error";
    } catch (const GgufError& e) {
        EXPECT_NE(std::string(e.what()).find("empty"), std::string::npos) << e.what();
    }
    try {
        GgufFile::open(tmp.file(""));  // the directory itself
        ADD_FAILURE() << "no error";
    } catch (const GgufError& e) {
        EXPECT_NE(std::string(e.what()).find("not a regular file"), std::string::npos) << e.what();
    }
    // A malformed file on disk names its path.
    Builder b;
    b.header(0, 0, 7);
    write_bytes(tmp.file("v7.gguf"), b.bytes());
    try {
        GgufFile::open(tmp.file("v7.gguf"));
        ADD_FAILURE() << "no error";
    } catch (const GgufError& e) {
        const std::string msg = e.what();
        EXPECT_EQ(msg.rfind(tmp.file("v7.gguf"), 0), 0u) << msg;
        EXPECT_NE(msg.find("version 7"), std::string::npos) << msg;
    }
}

}  // namespace
}  // namespace ember::test
