#include "engine/template/template_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "engine/template/render_budget.h"
#include "engine/template/template.h"
#include "engine/template/template_builtins.h"
#include "engine/template/template_strings.h"

namespace ember::jinja {

namespace {

// Destroying a value destroys what it holds, one C++ call level per level of nesting: a list
// nested a million deep (built by a template in a loop) would overflow the stack. Below
// kDestroyDepth levels values are destroyed in place; deeper ones are moved to a queue that
// the outermost destructor empties, so the stack never holds more than kDestroyDepth levels.
constexpr int kDestroyDepth = 256;
thread_local int t_destroy_depth = 0;
thread_local std::vector<Value> t_destroy_later;

template <class Release>
void destroy_bounded(Release&& release) {
    if (t_destroy_depth >= kDestroyDepth) {
        release([](Value& v) { t_destroy_later.push_back(std::move(v)); });
        return;
    }
    ++t_destroy_depth;
    release([](Value& v) { v = Value(); });
    --t_destroy_depth;
    if (t_destroy_depth > 0) return;
    while (!t_destroy_later.empty()) {
        Value v = std::move(t_destroy_later.back());
        t_destroy_later.pop_back();
        ++t_destroy_depth;
        v = Value();
        --t_destroy_depth;
    }
}

}  // namespace

void LiveCharge::add(std::int64_t more) {
    RenderBudget* b = current_budget();
    if (b == nullptr || more == 0) return;
    if (render != b->serial()) {  // first charged by this render (or built outside one)
        render = b->serial();
        bytes = 0;
    }
    bytes += more;
    b->charge_live(more);
}

LiveCharge::~LiveCharge() {
    if (bytes == 0) return;
    if (RenderBudget* b = current_budget(); b != nullptr && b->serial() == render) {
        b->charge_live(-bytes);
    }
}

ArrayData::~ArrayData() {
    destroy_bounded([this](auto&& drop) {
        for (auto& v : items) drop(v);
    });
}

ObjectData::~ObjectData() {
    destroy_bounded([this](auto&& drop) {
        for (auto& e : entries) drop(e.second);
    });
}

Value Value::array(std::vector<Value> items, bool tuple) {
    auto data = std::make_shared<ArrayData>();
    data->charge.add(static_cast<std::int64_t>(items.size()) * kListItemBytes);
    data->items = std::move(items);
    data->is_tuple = tuple;
    return Value(std::move(data));
}

Value Value::object(bool is_namespace) {
    auto data = std::make_shared<ObjectData>();
    data->is_namespace = is_namespace;
    return Value(std::move(data));
}

bool Value::is_tuple() const noexcept {
    return is_array() && std::get<std::shared_ptr<ArrayData>>(v_)->is_tuple;
}

bool Value::is_namespace() const noexcept {
    return is_object() && std::get<std::shared_ptr<ObjectData>>(v_)->is_namespace;
}

double Value::as_double() const {
    if (is_float()) return std::get<double>(v_);
    return static_cast<double>(as_integer());
}

const std::vector<Value>& Value::items() const {
    return std::get<std::shared_ptr<ArrayData>>(v_)->items;
}

const ObjectData& Value::object_data() const {
    return *std::get<std::shared_ptr<ObjectData>>(v_);
}

ObjectData& Value::mutable_object_data() const {
    return *std::get<std::shared_ptr<ObjectData>>(v_);
}

bool Value::truthy() const {
    switch (kind()) {
        case Kind::Undefined:
        case Kind::None:
            return false;
        case Kind::Bool:
            return as_bool();
        case Kind::Int:
            return as_int() != 0;
        case Kind::Float:
            return as_double() != 0.0;
        case Kind::String:
            return !as_string().empty();
        case Kind::Array:
            return !items().empty();
        case Kind::Object:
            return is_namespace() || !object_data().entries.empty();
        case Kind::Callable:
            return true;
    }
    return false;
}

std::string Value::type_name() const {
    switch (kind()) {
        case Kind::Undefined:
            return "Undefined";
        case Kind::None:
            return "NoneType";
        case Kind::Bool:
            return "bool";
        case Kind::Int:
            return "int";
        case Kind::Float:
            return "float";
        case Kind::String:
            return "str";
        case Kind::Array:
            return is_tuple() ? "tuple" : "list";
        case Kind::Object:
            return is_namespace() ? "Namespace" : "dict";
        case Kind::Callable:
            return "function";
    }
    return "object";
}

const Value* ObjectData::find(std::string_view key) const {
    for (const auto& [k, v] : entries) {
        if (k == key) return &v;
    }
    return nullptr;
}

void ObjectData::set(const std::string& key, Value value) {
    RenderBudget* budget = current_budget();
    // The keys are searched one by one: a step per key compared, so that filling a dict of a
    // million entries (each set searching the ones before) ends at the step budget.
    if (budget != nullptr) budget->step(static_cast<std::int64_t>(entries.size()) + 1);
    for (auto& [k, v] : entries) {
        if (k == key) {
            v = std::move(value);
            return;
        }
    }
    charge.add(static_cast<std::int64_t>(key.size()) + kDictEntryBytes);
    entries.emplace_back(key, std::move(value));
}

void fail(std::string message) {
    throw TemplateError(TemplateError::Kind::Render, std::move(message));
}

void fail_undefined(const Value& v) {
    const std::string& hint = v.undefined_hint();
    fail(hint.empty() ? "value is undefined" : hint);
}

namespace {

[[noreturn]] void too_deep() {
    fail("value nested deeper than " + std::to_string(kMaxTemplateValueDepth) + " levels");
}

// A template can build lists nested as deep as its step budget allows ({% set ns.x = [ns.x] %}
// in a loop); comparing, printing and destroying them must not recurse that deep.
bool equal_at(const Value& a, const Value& b, int depth);

}  // namespace

bool values_equal(const Value& a, const Value& b) {
    return equal_at(a, b, 0);
}

namespace {

bool equal_at(const Value& a, const Value& b, int depth) {
    using K = Value::Kind;
    if (depth > kMaxTemplateValueDepth) too_deep();
    if (a.is_number() && b.is_number()) {
        if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
        return a.as_integer() == b.as_integer();
    }
    if (a.kind() != b.kind()) return false;
    switch (a.kind()) {
        case K::Undefined:
        case K::None:
            return true;
        case K::String:
            return a.as_string() == b.as_string();
        case K::Array: {
            if (a.is_tuple() != b.is_tuple() || a.items().size() != b.items().size()) return false;
            for (std::size_t i = 0; i < a.items().size(); ++i) {
                if (!equal_at(a.items()[i], b.items()[i], depth + 1)) return false;
            }
            return true;
        }
        case K::Object: {
            if (a.is_namespace() || b.is_namespace()) {
                return &a.object_data() == &b.object_data();
            }
            const auto& ea = a.object_data().entries;
            if (ea.size() != b.object_data().entries.size()) return false;
            for (const auto& [k, v] : ea) {
                const Value* other = b.object_data().find(k);
                if (other == nullptr || !equal_at(v, *other, depth + 1)) return false;
            }
            return true;
        }
        case K::Callable:
            return &a.callable() == &b.callable();
        default:
            return false;
    }
}

int compare_at(const Value& a, const Value& b, std::string_view op, int depth) {
    if (depth > kMaxTemplateValueDepth) too_deep();
    if (a.is_undefined()) fail_undefined(a);
    if (b.is_undefined()) fail_undefined(b);
    if (a.is_number() && b.is_number()) {
        if (a.is_float() || b.is_float()) {
            const double x = a.as_double();
            const double y = b.as_double();
            return x < y ? -1 : (x > y ? 1 : 0);
        }
        const std::int64_t x = a.as_integer();
        const std::int64_t y = b.as_integer();
        return x < y ? -1 : (x > y ? 1 : 0);
    }
    if (a.is_string() && b.is_string()) {
        // Byte order of UTF-8 is code point order, which is what Python compares.
        const int c = a.as_string().compare(b.as_string());
        return c < 0 ? -1 : (c > 0 ? 1 : 0);
    }
    if (a.is_array() && b.is_array() && a.is_tuple() == b.is_tuple()) {
        const auto& x = a.items();
        const auto& y = b.items();
        for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) {
            if (!equal_at(x[i], y[i], depth + 1)) return compare_at(x[i], y[i], op, depth + 1);
        }
        return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
    }
    fail("'" + std::string(op) + "' not supported between instances of '" + a.type_name() +
         "' and '" + b.type_name() + "'");
}

}  // namespace

int compare_values(const Value& a, const Value& b, std::string_view op) {
    return compare_at(a, b, op, 0);
}

std::string format_float(double d) {
    if (std::isnan(d)) return "nan";
    if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
    // Shortest round-trip digits, then laid out the way Python's float.__repr__ does:
    // positional for exponents -4..15, scientific with a two-digit exponent otherwise.
    char buf[64];
    const auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
    const std::string sci(buf, res.ptr);
    const std::size_t e_pos = sci.find('e');
    std::string mantissa = sci.substr(0, e_pos);
    const int exponent = std::stoi(sci.substr(e_pos + 1));
    std::string sign;
    if (!mantissa.empty() && mantissa[0] == '-') {
        sign = "-";
        mantissa.erase(0, 1);
    }
    std::string digits;
    for (char c : mantissa) {
        if (c != '.') digits.push_back(c);
    }
    if (exponent < -4 || exponent >= 16) {
        std::string out = sign + digits.substr(0, 1);
        if (digits.size() > 1) out += "." + digits.substr(1);
        char exp_buf[16];
        std::snprintf(exp_buf, sizeof exp_buf, "e%c%02d", exponent < 0 ? '-' : '+',
                      std::abs(exponent));
        return out + exp_buf;
    }
    if (exponent < 0) {
        return sign + "0." + std::string(static_cast<std::size_t>(-exponent - 1), '0') + digits;
    }
    const auto int_len = static_cast<std::size_t>(exponent + 1);
    if (digits.size() <= int_len) {
        return sign + digits + std::string(int_len - digits.size(), '0') + ".0";
    }
    return sign + digits.substr(0, int_len) + "." + digits.substr(int_len);
}

namespace {

// Python's repr() of a str: single quotes unless the text holds a single quote and no double
// quote, and escapes for what is not printable.
std::string repr_string(const std::string& s) {
    const bool has_single = s.find('\'') != std::string::npos;
    const bool has_double = s.find('"') != std::string::npos;
    const char quote = (has_single && !has_double) ? '"' : '\'';
    std::string out(1, quote);
    for (char32_t c : utf8_decode(s)) {
        char buf[16];
        if (c == static_cast<char32_t>(quote) || c == '\\') {
            out.push_back('\\');
            out.push_back(static_cast<char>(c));
        } else if (c == '\n') {
            out += "\\n";
        } else if (c == '\r') {
            out += "\\r";
        } else if (c == '\t') {
            out += "\\t";
        } else if (c < 0x20 || (c >= 0x7F && c <= 0xA0) || c == 0xAD) {
            std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(c));
            out += buf;
        } else if (c == 0x1680 || (c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F) ||
                   (c >= 0x205F && c <= 0x206F) || c == 0x3000 || c == 0xFEFF ||
                   (c >= 0xD800 && c <= 0xDFFF) || (c >= 0xE000 && c <= 0xF8FF)) {
            std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
            out += buf;
        } else {
            utf8_append(out, c);
        }
    }
    out.push_back(quote);
    return out;
}

std::string repr_container(const Value& v, int depth);

// repr() of an item `depth` containers down.
std::string repr_item(const Value& v, int depth) {
    if (v.is_array() || v.is_object()) return repr_container(v, depth);
    return to_repr(v);
}

std::string repr_container(const Value& v, int depth) {
    // Bounded so that a self-containing namespace or a deeply built list ends in an error, not
    // in a stack overflow; the text budget stops wide ones.
    if (depth > kMaxTemplateValueDepth) too_deep();
    std::string out;
    if (v.is_array()) {
        out = v.is_tuple() ? "(" : "[";
        const auto& items = v.items();
        for (std::size_t i = 0; i < items.size(); ++i) {
            if (i > 0) out += ", ";
            out += repr_item(items[i], depth + 1);
            check_room(static_cast<std::int64_t>(out.size()));
        }
        if (v.is_tuple() && items.size() == 1) out += ",";
        out += v.is_tuple() ? ")" : "]";
        return out;
    }
    out = v.is_namespace() ? "<Namespace {" : "{";
    bool first = true;
    for (const auto& [k, item] : v.object_data().entries) {
        if (!first) out += ", ";
        first = false;
        out += repr_string(k) + ": " + repr_item(item, depth + 1);
        check_room(static_cast<std::int64_t>(out.size()));
    }
    out += v.is_namespace() ? "}>" : "}";
    return out;
}

}  // namespace

std::string to_str(const Value& v) {
    using K = Value::Kind;
    switch (v.kind()) {
        case K::Undefined:
            return "";
        case K::None:
            return "None";
        case K::Bool:
            return v.as_bool() ? "True" : "False";
        case K::Int:
            return std::to_string(v.as_int());
        case K::Float:
            return format_float(v.as_double());
        case K::String:
            return v.as_string();
        case K::Array:
        case K::Object:
            return repr_container(v, 1);
        case K::Callable:
            return "<function " + v.callable().name() + ">";
    }
    return "";
}

std::string to_repr(const Value& v) {
    if (v.is_string()) return repr_string(v.as_string());
    if (v.is_undefined()) return "Undefined";
    return to_str(v);
}

namespace {

void json_string(std::string& out, const std::string& s, bool ensure_ascii) {
    out.push_back('"');
    char buf[16];
    auto escape_unit = [&](unsigned unit) {
        std::snprintf(buf, sizeof buf, "\\u%04x", unit);
        out += buf;
    };
    for (char32_t c : utf8_decode(s)) {
        switch (c) {
            case '"':
                out += "\\\"";
                continue;
            case '\\':
                out += "\\\\";
                continue;
            case '\n':
                out += "\\n";
                continue;
            case '\r':
                out += "\\r";
                continue;
            case '\t':
                out += "\\t";
                continue;
            case '\b':
                out += "\\b";
                continue;
            case '\f':
                out += "\\f";
                continue;
            default:
                break;
        }
        if (c < 0x20 || (ensure_ascii && c >= 0x7F)) {
            if (c >= 0x10000) {  // ensure_ascii writes astral characters as surrogate pairs
                const char32_t v = c - 0x10000;
                escape_unit(0xD800 + static_cast<unsigned>(v >> 10));
                escape_unit(0xDC00 + static_cast<unsigned>(v & 0x3FF));
            } else {
                escape_unit(static_cast<unsigned>(c));
            }
        } else {
            utf8_append(out, c);
        }
    }
    out.push_back('"');
}

void json_value(std::string& out, const Value& v, const JsonOptions& o, int level) {
    using K = Value::Kind;
    if ((v.is_array() || v.is_object()) && level > kMaxTemplateValueDepth) too_deep();
    auto newline = [&](int lvl) {
        // Each line repeats the indent: a long indent string times many items is the one way
        // tojson output outgrows its input.
        check_room(static_cast<std::int64_t>(out.size()));
        out.push_back('\n');
        for (int i = 0; i < lvl; ++i) out += *o.indent;
    };
    switch (v.kind()) {
        case K::None:
            out += "null";
            return;
        case K::Bool:
            out += v.as_bool() ? "true" : "false";
            return;
        case K::Int:
            out += std::to_string(v.as_int());
            return;
        case K::Float: {
            const double d = v.as_double();
            if (std::isnan(d)) {
                out += "NaN";
            } else if (std::isinf(d)) {
                out += d < 0 ? "-Infinity" : "Infinity";
            } else {
                out += format_float(d);
            }
            return;
        }
        case K::String:
            json_string(out, v.as_string(), o.ensure_ascii);
            return;
        case K::Array: {
            const auto& items = v.items();
            if (items.empty()) {
                out += "[]";
                return;
            }
            out.push_back('[');
            for (std::size_t i = 0; i < items.size(); ++i) {
                // A value shared many times over (a dict holding the dict before it, twice,
                // 64 times) prints far more than it holds: the output counts as it grows.
                check_room(static_cast<std::int64_t>(out.size()));
                if (i > 0) out += o.item_separator;
                if (o.indent) newline(level + 1);
                json_value(out, items[i], o, level + 1);
            }
            if (o.indent) newline(level);
            out.push_back(']');
            return;
        }
        case K::Object: {
            if (v.is_namespace()) break;
            std::vector<const std::pair<std::string, Value>*> entries;
            for (const auto& e : v.object_data().entries) entries.push_back(&e);
            if (entries.empty()) {
                out += "{}";
                return;
            }
            if (o.sort_keys) {
                std::stable_sort(entries.begin(), entries.end(),
                                 [](const auto* x, const auto* y) { return x->first < y->first; });
            }
            out.push_back('{');
            for (std::size_t i = 0; i < entries.size(); ++i) {
                check_room(static_cast<std::int64_t>(out.size()));
                if (i > 0) out += o.item_separator;
                if (o.indent) newline(level + 1);
                json_string(out, entries[i]->first, o.ensure_ascii);
                out += o.key_separator;
                json_value(out, entries[i]->second, o, level + 1);
            }
            if (o.indent) newline(level);
            out.push_back('}');
            return;
        }
        default:
            break;
    }
    fail("Object of type " + v.type_name() + " is not JSON serializable");
}

}  // namespace

std::string to_json(const Value& v, const JsonOptions& options) {
    std::string out;
    json_value(out, v, options, 0);
    return out;
}

namespace {

// `depth`: how many arrays and objects enclose `j`.
Value from_json_at(const nlohmann::ordered_json& j, int depth) {
    // Checked before recursing: the conversion must not be the thing that overflows the stack.
    if (j.is_structured() && depth > kMaxTemplateValueDepth) {
        throw TemplateError(TemplateError::Kind::Render,
                            "template variables nested deeper than " +
                                std::to_string(kMaxTemplateValueDepth) + " levels");
    }
    using T = nlohmann::ordered_json::value_t;
    switch (j.type()) {
        case T::null:
            return Value::none();
        case T::boolean:
            return Value(j.get<bool>());
        case T::number_integer:
            return Value(j.get<std::int64_t>());
        case T::number_unsigned: {
            const auto u = j.get<std::uint64_t>();
            if (u <= static_cast<std::uint64_t>(INT64_MAX)) {
                return Value(static_cast<std::int64_t>(u));
            }
            return Value(static_cast<double>(u));
        }
        case T::number_float:
            return Value(j.get<double>());
        case T::string:
            return Value(j.get<std::string>());
        case T::array: {
            std::vector<Value> items;
            items.reserve(j.size());
            for (const auto& e : j) items.push_back(from_json_at(e, depth + 1));
            return Value::array(std::move(items));
        }
        case T::object: {
            Value obj = Value::object();
            auto& data = obj.mutable_object_data();
            for (const auto& [k, e] : j.items()) {
                data.entries.emplace_back(k, from_json_at(e, depth + 1));
            }
            return obj;
        }
        case T::binary:
            fail("binary JSON values cannot be used in a template");
        case T::discarded:
            return Value();
    }
    return Value();
}

}  // namespace

Value from_json(const nlohmann::ordered_json& j) {
    return from_json_at(j, 0);
}

}  // namespace ember::jinja
