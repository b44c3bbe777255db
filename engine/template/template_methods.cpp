// Attribute and item access, iteration, methods of str/list/dict and the template globals.
#include <algorithm>
#include <array>

#include "engine/template/template.h"
#include "engine/template/template_builtins.h"
#include "engine/template/template_interp.h"
#include "engine/template/template_strings.h"

namespace ember::jinja {

namespace {

constexpr std::array<std::string_view, 38> kStrMethods = {
    "startswith",   "endswith",     "split",    "rsplit",  "splitlines", "strip",
    "lstrip",       "rstrip",       "replace",  "upper",   "lower",      "title",
    "capitalize",   "swapcase",     "casefold", "find",    "rfind",      "index",
    "rindex",       "count",        "join",     "format",  "isdigit",    "isnumeric",
    "isdecimal",    "isalpha",      "isalnum",  "isspace", "isupper",    "islower",
    "removeprefix", "removesuffix", "zfill",    "center",  "ljust",      "rjust",
    "partition",    "rpartition"};
constexpr std::array<std::string_view, 11> kListMethods = {"index",  "count",  "copy",   "append",
                                                           "extend", "insert", "pop",    "remove",
                                                           "clear",  "sort",   "reverse"};
constexpr std::array<std::string_view, 11> kDictMethods = {
    "items", "keys",    "values",     "get",   "copy",    "update",
    "pop",   "popitem", "setdefault", "clear", "fromkeys"};

template <std::size_t N>
bool listed(const std::array<std::string_view, N>& names, std::string_view name) {
    return std::find(names.begin(), names.end(), name) != names.end();
}

// jinja2's wording for a missing attribute or element: "'dict object' has no attribute 'x'".
std::string object_description(const Value& v) {
    if (v.is_none()) return "None";
    if (v.is_namespace()) return "jinja2.utils.Namespace object";
    return v.type_name() + " object";
}

Value missing_attribute(const Value& object, std::string_view name) {
    std::string hint = "'";
    hint.append(object_description(object))
        .append("' has no attribute ")
        .append(to_repr(Value(name)));
    return Value::undefined(std::move(hint));
}

Value missing_element(const Value& object, const Value& key) {
    return Value::undefined(object_description(object) + " has no element " + to_repr(key));
}

class BoundMethod : public Callable {
public:
    BoundMethod(Value self, std::string name) : self_(std::move(self)), name_(std::move(name)) {}
    Value call(Interpreter& interp, CallArgs& args) const override;
    std::string name() const override { return self_.type_name() + "." + name_; }

private:
    Value self_;
    std::string name_;
};

Value bound(const Value& self, std::string_view name) {
    return Value(std::make_shared<BoundMethod>(self, std::string(name)));
}

std::int64_t normalize_index(std::int64_t i, std::size_t size) {
    return i < 0 ? i + static_cast<std::int64_t>(size) : i;
}

}  // namespace

Value get_attribute(const Value& object, std::string_view name) {
    switch (object.kind()) {
        case Value::Kind::String:
            if (listed(kStrMethods, name)) return bound(object, name);
            break;
        case Value::Kind::Array:
            if (listed(kListMethods, name)) return bound(object, name);
            break;
        case Value::Kind::Object:
            if (!object.is_namespace() && listed(kDictMethods, name)) return bound(object, name);
            if (const Value* v = object.object_data().find(name)) return *v;
            break;
        default:
            break;
    }
    return missing_attribute(object, name);
}

Value get_item(const Value& object, const Value& key) {
    if ((key.is_int() || key.is_bool()) && (object.is_array() || object.is_string())) {
        if (object.is_array()) {
            const auto& items = object.items();
            const std::int64_t i = normalize_index(key.as_integer(), items.size());
            if (i >= 0 && i < static_cast<std::int64_t>(items.size())) {
                return items[static_cast<std::size_t>(i)];
            }
        } else {
            const std::u32string cps = utf8_decode(object.as_string());
            const std::int64_t i = normalize_index(key.as_integer(), cps.size());
            if (i >= 0 && i < static_cast<std::int64_t>(cps.size())) {
                std::string out;
                utf8_append(out, cps[static_cast<std::size_t>(i)]);
                return Value(std::move(out));
            }
        }
        return missing_element(object, key);
    }
    if (object.is_object() && key.is_string()) {
        if (const Value* v = object.object_data().find(key.as_string())) return *v;
    }
    // Python falls back from obj[key] to getattr(obj, key) for string keys.
    if (key.is_string()) return get_attribute(object, key.as_string());
    return missing_element(object, key);
}

namespace {

std::int64_t slice_bound(const Value& v, std::int64_t fallback) {
    if (v.is_none()) return fallback;
    if (!v.is_int() && !v.is_bool()) {
        fail("slice indices must be integers or None or have an __index__ method");
    }
    return v.as_integer();
}

// Python's PySlice_AdjustIndices: the positions a[start:stop:step] visits.
std::vector<std::size_t> slice_positions(std::size_t size, const Value& start_v,
                                         const Value& stop_v, const Value& step_v) {
    const std::int64_t step = slice_bound(step_v, 1);
    if (step == 0) fail("slice step cannot be zero");
    const auto len = static_cast<std::int64_t>(size);
    auto adjust = [&](const Value& v, std::int64_t dflt) {
        if (v.is_none()) return dflt;
        std::int64_t i = slice_bound(v, 0);
        if (i < 0) {
            i += len;
            if (i < 0) i = step < 0 ? -1 : 0;
        } else if (i >= len) {
            i = step < 0 ? len - 1 : len;
        }
        return i;
    };
    const std::int64_t start = adjust(start_v, step < 0 ? len - 1 : 0);
    const std::int64_t stop = adjust(stop_v, step < 0 ? -1 : len);
    std::vector<std::size_t> out;
    for (std::int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
        out.push_back(static_cast<std::size_t>(i));
    }
    return out;
}

}  // namespace

Value slice_value(const Value& object, const Value& start, const Value& stop, const Value& step) {
    if (object.is_string()) {
        const std::u32string cps = utf8_decode(object.as_string());
        std::u32string out;
        for (std::size_t i : slice_positions(cps.size(), start, stop, step)) out.push_back(cps[i]);
        return Value(utf8_encode(out));
    }
    if (object.is_array()) {
        std::vector<Value> out;
        for (std::size_t i : slice_positions(object.items().size(), start, stop, step)) {
            out.push_back(object.items()[i]);
        }
        return Value::array(std::move(out), object.is_tuple());
    }
    fail("'" + object.type_name() + "' object is not subscriptable");
}

std::vector<Value> iterate(const Value& value) {
    std::vector<Value> out;
    switch (value.kind()) {
        case Value::Kind::Undefined:
            return out;
        case Value::Kind::Array:
            // Iterating is work done for the template: count it, so loops over big lists or
            // ranges spend the step budget even when their bodies are empty.
            if (RenderBudget* b = current_budget()) {
                b->step(static_cast<std::int64_t>(value.items().size()));
            }
            return value.items();
        case Value::Kind::String:
            for (char32_t c : utf8_decode(value.as_string())) {
                std::string s;
                utf8_append(s, c);
                out.emplace_back(std::move(s));
            }
            return out;
        case Value::Kind::Object:
            if (value.is_namespace()) break;
            for (const auto& [k, v] : value.object_data().entries) out.emplace_back(k);
            return out;
        default:
            break;
    }
    fail("'" + value.type_name() + "' object is not iterable");
}

bool contains(const Value& haystack, const Value& needle) {
    switch (haystack.kind()) {
        case Value::Kind::Undefined:
            return false;
        case Value::Kind::String:
            if (!needle.is_string()) {
                fail("'in <string>' requires string as left operand, not " + needle.type_name());
            }
            return haystack.as_string().find(needle.as_string()) != std::string::npos;
        case Value::Kind::Array:
            return std::any_of(haystack.items().begin(), haystack.items().end(),
                               [&](const Value& v) { return values_equal(v, needle); });
        case Value::Kind::Object:
            if (haystack.is_namespace()) break;
            return needle.is_string() && haystack.object_data().find(needle.as_string()) != nullptr;
        default:
            break;
    }
    fail("argument of type '" + haystack.type_name() + "' is not iterable");
}

Value call_value(Interpreter& interp, const Value& callee, CallArgs& args) {
    if (callee.is_callable()) return callee.callable().call(interp, args);
    if (callee.is_undefined()) fail_undefined(callee);
    fail(std::string("'").append(callee.type_name()).append("' object is not callable"));
}

ArgBinder::ArgBinder(std::string_view function, const CallArgs& args,
                     std::initializer_list<std::string_view> params)
    : function_(function), bound_(params.size(), nullptr) {
    if (args.positional.size() > params.size()) {
        fail(function_ + "() takes at most " + std::to_string(params.size()) + " argument(s) (" +
             std::to_string(args.positional.size()) + " given)");
    }
    for (std::size_t i = 0; i < args.positional.size(); ++i) bound_[i] = &args.positional[i];
    for (const auto& [key, value] : args.keyword) {
        const auto it = std::find(params.begin(), params.end(), key);
        if (it == params.end()) {
            fail(function_ + "() got an unexpected keyword argument '" + key + "'");
        }
        const auto i = static_cast<std::size_t>(it - params.begin());
        if (bound_[i] != nullptr) {
            fail(function_ + "() got multiple values for argument '" + key + "'");
        }
        bound_[i] = &value;
    }
}

std::int64_t ArgBinder::get_int(std::size_t i, std::int64_t fallback) const {
    if (bound_[i] == nullptr || bound_[i]->is_none()) return fallback;
    if (bound_[i]->is_float()) return static_cast<std::int64_t>(bound_[i]->as_double());
    if (!bound_[i]->is_int() && !bound_[i]->is_bool()) {
        fail(function_ + "(): expected an integer, got '" + bound_[i]->type_name() + "'");
    }
    return bound_[i]->as_integer();
}

bool ArgBinder::get_bool(std::size_t i, bool fallback) const {
    return bound_[i] == nullptr ? fallback : bound_[i]->truthy();
}

std::optional<std::string> ArgBinder::get_string(std::size_t i) const {
    if (bound_[i] == nullptr || bound_[i]->is_none()) return std::nullopt;
    if (!bound_[i]->is_string()) {
        fail(function_ + "(): expected a string, got '" + bound_[i]->type_name() + "'");
    }
    return bound_[i]->as_string();
}

void check_size(std::int64_t bytes) {
    if (bytes > kMaxTemplateString) {
        fail("result too large: " + std::to_string(bytes) + " bytes (limit " +
             std::to_string(kMaxTemplateString >> 20) + " MiB per string)");
    }
    check_room(bytes);
}

void check_replace_size(std::string_view s, std::string_view old_text, std::string_view new_text,
                        std::int64_t count) {
    if (new_text.size() <= old_text.size()) return;
    // Python inserts into an empty `old` between every code point and at both ends.
    std::int64_t hits = 0;
    if (old_text.empty()) {
        hits = static_cast<std::int64_t>(utf8_length(s)) + 1;
    } else {
        for (std::size_t p = s.find(old_text); p != std::string_view::npos;
             p = s.find(old_text, p + old_text.size())) {
            ++hits;
        }
    }
    if (count >= 0) hits = std::min(hits, count);
    const auto growth = static_cast<std::int64_t>(new_text.size() - old_text.size());
    const auto base = static_cast<std::int64_t>(s.size());
    check_size(hits > (kMaxTemplateString - base) / growth ? kMaxTemplateString + 1
                                                           : base + hits * growth);
}

std::string py_center(const std::string& s, std::int64_t width, const std::string& fill) {
    check_size(width);
    const auto len = static_cast<std::int64_t>(utf8_length(s));
    if (width <= len) return s;
    const std::int64_t pad = width - len;
    const std::int64_t left = pad / 2 + (pad & width & 1);  // CPython's split of odd padding
    std::string out;
    for (std::int64_t i = 0; i < left; ++i) out += fill;
    out += s;
    for (std::int64_t i = 0; i < pad - left; ++i) out += fill;
    return out;
}

namespace {

std::string need_string(const Value& v, std::string_view what) {
    if (!v.is_string()) {
        fail(std::string(what) + " argument must be str, not " + v.type_name());
    }
    return v.as_string();
}

bool all_chars(const std::string& s, bool (*pred)(char32_t)) {
    if (s.empty()) return false;
    for (char32_t c : utf8_decode(s)) {
        if (!pred(c)) return false;
    }
    return true;
}

bool is_digit_cp(char32_t c) {
    return c >= '0' && c <= '9';
}
bool is_alpha_cp(char32_t c) {
    if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    return !py_isspace(c) && !(c >= 0x2000 && c <= 0x206F) && !(c >= 0x3000 && c <= 0x303F);
}
bool is_alnum_cp(char32_t c) {
    return is_digit_cp(c) || is_alpha_cp(c);
}
bool is_space_cp(char32_t c) {
    return py_isspace(c);
}

// startswith/endswith with an optional tuple of candidates and start/end bounds.
Value affix_test(const std::string& s, CallArgs& args, bool suffix) {
    ArgBinder a(suffix ? "endswith" : "startswith", args, {"prefix", "start", "end"});
    if (a.get(0) == nullptr) fail("startswith() takes at least 1 argument");
    std::string subject = s;
    if (a.get(1) || a.get(2)) {
        subject = slice_value(Value(s), a.get_or(1, Value::none()), a.get_or(2, Value::none()),
                              Value::none())
                      .as_string();
    }
    std::vector<Value> candidates =
        a.get(0)->is_tuple() ? a.get(0)->items() : std::vector<Value>{*a.get(0)};
    for (const Value& c : candidates) {
        const std::string t = need_string(c, suffix ? "endswith" : "startswith");
        if (suffix ? subject.size() >= t.size() &&
                         subject.compare(subject.size() - t.size(), t.size(), t) == 0
                   : subject.compare(0, t.size(), t) == 0) {
            return Value(true);
        }
    }
    return Value(false);
}

Value string_list(std::vector<std::string> parts) {
    std::vector<Value> out;
    out.reserve(parts.size());
    for (auto& p : parts) out.emplace_back(std::move(p));
    return Value::array(std::move(out));
}

Value partition(const std::string& s, const std::string& sep, bool from_right) {
    if (sep.empty()) fail("empty separator");
    const std::size_t pos = from_right ? s.rfind(sep) : s.find(sep);
    if (pos == std::string::npos) {
        return from_right ? Value::array({Value(""), Value(""), Value(s)}, true)
                          : Value::array({Value(s), Value(""), Value("")}, true);
    }
    return Value::array({Value(s.substr(0, pos)), Value(sep), Value(s.substr(pos + sep.size()))},
                        true);
}

Value string_method(const std::string& s, const std::string& name, CallArgs& args) {
    if (name == "startswith" || name == "endswith") return affix_test(s, args, name == "endswith");
    if (name == "split" || name == "rsplit") {
        ArgBinder a(name, args, {"sep", "maxsplit"});
        const auto sep = a.get_string(0);
        if (sep && sep->empty()) fail("empty separator");
        return string_list(py_split(s, sep, a.get_int(1, -1), name == "rsplit"));
    }
    if (name == "splitlines") return string_list(py_splitlines(s));
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
        ArgBinder a(name, args, {"chars"});
        return Value(py_strip(s, a.get_string(0), name != "rstrip", name != "lstrip"));
    }
    if (name == "replace") {
        ArgBinder a(name, args, {"old", "new", "count"});
        if (!a.get(0) || !a.get(1)) fail("replace() expected at least 2 arguments");
        const std::string old_text = need_string(*a.get(0), "replace()");
        const std::string new_text = need_string(*a.get(1), "replace()");
        check_replace_size(s, old_text, new_text, a.get_int(2, -1));
        return Value(py_replace(s, old_text, new_text, a.get_int(2, -1)));
    }
    if (name == "upper") return Value(py_upper(s));
    if (name == "lower" || name == "casefold") return Value(py_lower(s));
    if (name == "title") return Value(py_title(s));
    if (name == "capitalize") return Value(py_capitalize(s));
    if (name == "swapcase") {
        std::string out;
        for (char32_t c : utf8_decode(s)) {
            std::string one;
            utf8_append(one, c);
            const std::string up = py_upper(one);
            out += up != one ? up : py_lower(one);
        }
        return Value(std::move(out));
    }
    if (name == "find" || name == "rfind" || name == "index" || name == "rindex") {
        ArgBinder a(name, args, {"sub"});
        if (!a.get(0)) fail(name + "() takes at least 1 argument");
        const std::int64_t pos = py_find(s, need_string(*a.get(0), name + "()"), name[0] == 'r');
        if (pos < 0 && name.find("index") != std::string::npos) fail("substring not found");
        return Value(pos);
    }
    if (name == "count") {
        ArgBinder a(name, args, {"sub"});
        if (!a.get(0)) fail("count() takes at least 1 argument");
        const std::string sub = need_string(*a.get(0), "count()");
        if (sub.empty()) return Value(static_cast<std::int64_t>(utf8_length(s) + 1));
        std::int64_t n = 0;
        for (std::size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) {
            ++n;
        }
        return Value(n);
    }
    if (name == "join") {
        ArgBinder a(name, args, {"iterable"});
        if (!a.get(0)) fail("join() takes exactly one argument");
        std::string out;
        const std::vector<Value> items = iterate(*a.get(0));
        for (std::size_t i = 0; i < items.size(); ++i) {
            if (!items[i].is_string()) {
                fail("sequence item " + std::to_string(i) + ": expected str instance, " +
                     items[i].type_name() + " found");
            }
            if (i > 0) out += s;
            out += items[i].as_string();
            check_room(static_cast<std::int64_t>(out.size()));
        }
        return Value(std::move(out));
    }
    if (name == "format") return Value(str_format(s, args));
    if (name == "isdigit" || name == "isnumeric" || name == "isdecimal") {
        return Value(all_chars(s, is_digit_cp));
    }
    if (name == "isalpha") return Value(all_chars(s, is_alpha_cp));
    if (name == "isalnum") return Value(all_chars(s, is_alnum_cp));
    if (name == "isspace") return Value(all_chars(s, is_space_cp));
    if (name == "isupper") return Value(py_isupper_str(s));
    if (name == "islower") return Value(py_islower_str(s));
    if (name == "removeprefix" || name == "removesuffix") {
        ArgBinder a(name, args, {"affix"});
        if (!a.get(0)) fail(name + "() takes exactly one argument");
        const std::string affix = need_string(*a.get(0), name + "()");
        if (name == "removeprefix" && s.compare(0, affix.size(), affix) == 0) {
            return Value(s.substr(affix.size()));
        }
        if (name == "removesuffix" && !affix.empty() && s.size() >= affix.size() &&
            s.compare(s.size() - affix.size(), affix.size(), affix) == 0) {
            return Value(s.substr(0, s.size() - affix.size()));
        }
        return Value(s);
    }
    if (name == "zfill") {
        ArgBinder a(name, args, {"width"});
        const std::int64_t width = a.get_int(0, 0);
        check_size(width);
        const auto len = static_cast<std::int64_t>(utf8_length(s));
        if (width <= len) return Value(s);
        const bool sign = !s.empty() && (s[0] == '-' || s[0] == '+');
        const std::string zeros(static_cast<std::size_t>(width - len), '0');
        return Value(sign ? s.substr(0, 1) + zeros + s.substr(1) : zeros + s);
    }
    if (name == "center" || name == "ljust" || name == "rjust") {
        ArgBinder a(name, args, {"width", "fillchar"});
        const std::int64_t width = a.get_int(0, 0);
        check_size(width);
        const std::string fill = a.get_string(1).value_or(" ");
        if (name == "center") return Value(py_center(s, width, fill));
        std::string padding;
        for (auto n = static_cast<std::int64_t>(utf8_length(s)); n < width; ++n) padding += fill;
        return Value(name == "ljust" ? s + padding : padding + s);
    }
    if (name == "partition" || name == "rpartition") {
        ArgBinder a(name, args, {"sep"});
        if (!a.get(0)) fail(name + "() takes exactly one argument");
        return partition(s, need_string(*a.get(0), name + "()"), name == "rpartition");
    }
    fail("'str' object has no attribute '" + name + "'");
}

Value item_pairs(const Value& dict) {
    std::vector<Value> out;
    for (const auto& [k, v] : dict.object_data().entries) {
        out.push_back(Value::array({Value(k), v}, true));
    }
    return Value::array(std::move(out));
}

Value dict_method(const Value& self, const std::string& name, CallArgs& args) {
    const auto& entries = self.object_data().entries;
    if (name == "items") return item_pairs(self);
    if (name == "keys" || name == "values") {
        std::vector<Value> out;
        for (const auto& [k, v] : entries) out.push_back(name == "keys" ? Value(k) : v);
        return Value::array(std::move(out));
    }
    if (name == "get") {
        ArgBinder a("get", args, {"key", "default"});
        if (!a.get(0)) fail("get expected at least 1 argument, got 0");
        if (a.get(0)->is_string()) {
            if (const Value* v = self.object_data().find(a.get(0)->as_string())) return *v;
        }
        return a.get_or(1, Value::none());
    }
    if (name == "copy") {
        std::int64_t bytes = 0;
        for (const auto& e : entries) {
            bytes += static_cast<std::int64_t>(e.first.size()) + kDictEntryBytes;
        }
        Value copy = Value::object();
        copy.mutable_object_data().charge.add(bytes);
        copy.mutable_object_data().entries = entries;
        return copy;
    }
    // The immutable sandbox HF renders in refuses every method that changes a dict.
    fail("access to attribute '" + name + "' of 'dict' object is unsafe.");
}

Value list_method(const Value& self, const std::string& name, CallArgs& args) {
    const auto& items = self.items();
    if (name == "index" || name == "count") {
        ArgBinder a(name, args, {"value"});
        if (!a.get(0)) fail(name + "() takes exactly one argument");
        std::int64_t count = 0;
        for (std::size_t i = 0; i < items.size(); ++i) {
            if (!values_equal(items[i], *a.get(0))) continue;
            if (name == "index") return Value(static_cast<std::int64_t>(i));
            ++count;
        }
        if (name == "index") fail(to_repr(*a.get(0)) + " is not in list");
        return Value(count);
    }
    if (name == "copy") return Value::array(items, self.is_tuple());
    fail("access to attribute '" + name + "' of '" + self.type_name() + "' object is unsafe.");
}

Value BoundMethod::call(Interpreter& /*interp*/, CallArgs& args) const {
    if (self_.is_string()) return string_method(self_.as_string(), name_, args);
    if (self_.is_object()) return dict_method(self_, name_, args);
    return list_method(self_, name_, args);
}

// ---- globals ----------------------------------------------------------------------------

using GlobalFn = Value (*)(Interpreter&, CallArgs&);

class GlobalFunction : public Callable {
public:
    GlobalFunction(std::string name, GlobalFn fn) : name_(std::move(name)), fn_(fn) {}
    Value call(Interpreter& interp, CallArgs& args) const override { return fn_(interp, args); }
    std::string name() const override { return name_; }

private:
    std::string name_;
    GlobalFn fn_;
};

Value global_range(Interpreter& /*interp*/, CallArgs& args) {
    if (!args.keyword.empty()) fail("range() takes no keyword arguments");
    const auto& p = args.positional;
    if (p.empty() || p.size() > 3)
        fail("range expected at most 3 arguments, got " + std::to_string(p.size()));
    for (const Value& v : p) {
        if (!v.is_int() && !v.is_bool()) {
            fail("'" + v.type_name() + "' object cannot be interpreted as an integer");
        }
    }
    const std::int64_t start = p.size() == 1 ? 0 : p[0].as_integer();
    const std::int64_t stop = p.size() == 1 ? p[0].as_integer() : p[1].as_integer();
    const std::int64_t step = p.size() == 3 ? p[2].as_integer() : 1;
    if (step == 0) fail("range() arg 3 must not be zero");
    std::vector<Value> out;
    for (std::int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
        // The same cap as jinja2's sandbox (MAX_RANGE).
        if (out.size() >= 100000) {
            fail("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
        }
        out.emplace_back(i);
    }
    return Value::array(std::move(out));
}

void update_from(ObjectData& target, CallArgs& args, const char* fn) {
    if (args.positional.size() > 1) fail(std::string(fn) + " expected at most 1 argument");
    if (!args.positional.empty()) {
        const Value& src = args.positional[0];
        if (src.is_object() && target.entries.empty()) {
            // A copy: its keys are distinct already, so none is searched for.
            std::int64_t bytes = 0;
            for (const auto& e : src.object_data().entries) {
                bytes += static_cast<std::int64_t>(e.first.size()) + kDictEntryBytes;
            }
            target.charge.add(bytes);
            target.entries = src.object_data().entries;
        } else if (src.is_object()) {
            for (const auto& [k, v] : src.object_data().entries) target.set(k, v);
        } else {
            for (const Value& pair : iterate(src)) {
                if (!pair.is_array() || pair.items().size() != 2 || !pair.items()[0].is_string()) {
                    fail(std::string(fn) + ": expected a sequence of (key, value) pairs");
                }
                target.set(pair.items()[0].as_string(), pair.items()[1]);
            }
        }
    }
    for (auto& [k, v] : args.keyword) target.set(k, v);
}

Value global_dict(Interpreter& /*interp*/, CallArgs& args) {
    Value out = Value::object();
    update_from(out.mutable_object_data(), args, "dict");
    return out;
}

Value global_namespace(Interpreter& /*interp*/, CallArgs& args) {
    Value out = Value::object(true);
    update_from(out.mutable_object_data(), args, "namespace");
    return out;
}

Value global_raise_exception(Interpreter& /*interp*/, CallArgs& args) {
    const std::string message = args.positional.empty() ? "" : to_str(args.positional[0]);
    throw TemplateError(TemplateError::Kind::Raised, message);
}

Value global_strftime_now(Interpreter& interp, CallArgs& args) {
    ArgBinder a("strftime_now", args, {"format"});
    const auto fmt = a.get_string(0);
    if (!fmt) fail("strftime_now() missing required argument 'format'");
    return Value(format_time(*fmt, interp.now()));
}

// jinja2's joiner(sep): "" on the first call, `sep` afterwards. Its state lives in the
// object, which belongs to one render.
class Joiner : public Callable {
public:
    explicit Joiner(std::string sep) : sep_(std::move(sep)) {}
    Value call(Interpreter& /*interp*/, CallArgs& /*args*/) const override {
        if (!used_) {
            used_ = true;
            return Value("");
        }
        return Value(sep_);
    }
    std::string name() const override { return "joiner"; }

private:
    std::string sep_;
    mutable bool used_ = false;
};

Value global_joiner(Interpreter& /*interp*/, CallArgs& args) {
    ArgBinder a("joiner", args, {"sep"});
    return Value(std::make_shared<Joiner>(a.get_string(0).value_or(", ")));
}

}  // namespace

void install_globals(ObjectData& globals) {
    const std::array<std::pair<const char*, GlobalFn>, 6> fns = {{
        {"range", global_range},
        {"dict", global_dict},
        {"namespace", global_namespace},
        {"raise_exception", global_raise_exception},
        {"strftime_now", global_strftime_now},
        {"joiner", global_joiner},
    }};
    for (const auto& [name, fn] : fns) {
        globals.set(name, Value(std::make_shared<GlobalFunction>(name, fn)));
    }
}

}  // namespace ember::jinja
