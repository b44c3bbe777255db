// jinja2's built-in filters and tests, with HF transformers' `tojson` (json.dumps).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "engine/template/template_builtins.h"
#include "engine/template/template_interp.h"
#include "engine/template/template_strings.h"

namespace ember::jinja {

namespace {

using FilterFn = Value (*)(Interpreter&, const Value&, CallArgs&);
using TestFn = bool (*)(Interpreter&, const Value&, CallArgs&);

// jinja2's soft_str: Undefined prints as "".
std::string text_of(const Value& v) {
    return to_str(v);
}

std::int64_t length_of(const Value& v) {
    switch (v.kind()) {
        case Value::Kind::Undefined:
            return 0;
        case Value::Kind::String:
            return static_cast<std::int64_t>(utf8_length(v.as_string()));
        case Value::Kind::Array:
            return static_cast<std::int64_t>(v.items().size());
        case Value::Kind::Object:
            if (v.is_namespace()) break;
            return static_cast<std::int64_t>(v.object_data().entries.size());
        default:
            break;
    }
    fail("object of type '" + v.type_name() + "' has no len()");
}

// jinja2's make_attrgetter: "a.b.0" walks items (then attributes) part by part.
Value get_path(const Value& item, const std::string& path) {
    Value cur = item;
    std::size_t start = 0;
    while (true) {
        const std::size_t dot = path.find('.', start);
        const std::string part = path.substr(start, dot == std::string::npos ? dot : dot - start);
        if (cur.is_undefined()) fail_undefined(cur);
        const bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) {
            return c >= '0' && c <= '9';
        });
        cur = get_item(
            cur, numeric ? Value(static_cast<std::int64_t>(std::strtoll(part.c_str(), nullptr, 10)))
                         : Value(part));
        if (dot == std::string::npos) return cur;
        start = dot + 1;
    }
}

Value fold_case(const Value& v, bool case_sensitive) {
    return (!case_sensitive && v.is_string()) ? Value(py_lower(v.as_string())) : v;
}

// The items a filter like sort or unique works on, each with its comparison key.
std::vector<std::pair<Value, Value>> keyed_items(const Value& seq, const Value* attribute,
                                                 bool case_sensitive) {
    std::vector<std::pair<Value, Value>> out;
    for (Value& item : iterate(seq)) {
        Value key = attribute ? get_path(item, text_of(*attribute)) : item;
        out.emplace_back(std::move(item), fold_case(key, case_sensitive));
    }
    return out;
}

CallArgs rest_args(const CallArgs& args, std::size_t skip) {
    CallArgs rest;
    for (std::size_t i = skip; i < args.positional.size(); ++i) {
        rest.positional.push_back(args.positional[i]);
    }
    rest.keyword = args.keyword;
    return rest;
}

// Python's " " * n.
std::string spaces(std::int64_t n) {
    check_size(n);
    return std::string(static_cast<std::size_t>(std::max<std::int64_t>(0, n)), ' ');
}

Value values_list(std::vector<Value> items) {
    return Value::array(std::move(items));
}

// ---- filters ------------------------------------------------------------------------------

Value f_abs(Interpreter&, const Value& v, CallArgs&) {
    if (v.is_float()) return Value(std::fabs(v.as_double()));
    if (v.is_int() || v.is_bool())
        return Value(static_cast<std::int64_t>(std::llabs(v.as_integer())));
    if (v.is_undefined()) fail_undefined(v);
    fail("bad operand type for abs(): '" + v.type_name() + "'");
}

Value f_attr(Interpreter&, const Value& v, CallArgs& args) {
    ArgBinder a("attr", args, {"name"});
    const std::string name = text_of(a.get_or(0, Value("")));
    if (v.is_undefined()) fail_undefined(v);
    // getattr, not getitem: dict keys are not attributes.
    if (v.is_mapping()) {
        const Value m = get_attribute(v, name);
        return m.is_callable() ? m
                               : Value::undefined("'dict object' has no attribute '" + name + "'");
    }
    return get_attribute(v, name);
}

Value f_batch(Interpreter&, const Value& v, CallArgs& args) {
    ArgBinder a("batch", args, {"linecount", "fill_with"});
    const std::int64_t n = a.get_int(0, 1);
    if (n <= 0) fail("batch(): linecount must be positive");
    std::vector<Value> out;
    std::vector<Value> cur;
    for (Value& item : iterate(v)) {
        cur.push_back(std::move(item));
        if (static_cast<std::int64_t>(cur.size()) == n) {
            out.push_back(values_list(std::move(cur)));
            cur.clear();
        }
    }
    if (!cur.empty()) {
        if (a.get(1)) {
            while (static_cast<std::int64_t>(cur.size()) < n) cur.push_back(*a.get(1));
        }
        out.push_back(values_list(std::move(cur)));
    }
    return values_list(std::move(out));
}

Value f_capitalize(Interpreter&, const Value& v, CallArgs&) {
    return Value(py_capitalize(text_of(v)));
}

Value f_center(Interpreter&, const Value& v, CallArgs& args) {
    ArgBinder a("center", args, {"width"});
    return Value(py_center(text_of(v), a.get_int(0, 80), " "));
}

Value f_default(Interpreter&, const Value& v, CallArgs& args) {
    ArgBinder a("default", args, {"default_value", "boolean"});
    const bool use_default = v.is_undefined() || (a.get_bool(1, false) && !v.truthy());
    return use_default ? a.get_or(0, Value("")) : v;
}

Value f_dictsort(Interpreter&, const Value& v, CallArgs& args) {
    ArgBinder a("dictsort", args, {"case_sensitive", "by", "reverse"});
    if (!v.is_mapping()) fail("dictsort(): expected a mapping, got '" + v.type_name() + "'");
    const bool case_sensitive = a.get_bool(0, false);
    const std::string by = a.get_string(1).value_or("key");
    if (by != "key" && by != "value") fail("You can only sort by either 'key' or 'value'");
    const bool reverse = a.get_bool(2, false);
    std::vector<Value> pairs;
    for (const auto& [k, item] : v.object_data().entries) {
        pairs.push_back(Value::array({Value(k), item}, true));
    }
    const std::size_t pos = by == "key" ? 0 : 1;
    std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& x, const Value& y) {
        const int c = compare_values(fold_case(x.items()[pos], case_sensitive),
                                     fold_case(y.items()[pos], case_sensitive), "<");
        return reverse ? c > 0 : c < 0;
    });
    return values_list(std::move(pairs));
}

Value f_escape(Interpreter&, const Value& v, CallArgs&) {
    std::string out;
    for (char c : text_of(v)) {
        switch (c) {
            case '&':
                out += "&amp;";
                break;
            case '<':
                out += "&lt;";
                break;
            case '>':
                out += "&gt;";
                break;
            case '"':
                out += "&#34;";
                break;
            case '\'':
                out += "&#39;";
                break;
            default:
                out.push_back(c);
        }
    }
    return Value(std::move(out));
}

Value f_first(Interpreter&, const Value& v, CallArgs&) {
    if (v.is_array()) {
        if (v.items().empty()) return Value::undefined("No first item, sequence was empty.");
        return v.items().front();
    }
    const std::vector<Value> items = iterate(v);
    if (items.empty()) return Value::undefined("No first item, sequence was empty.");
    return items.front();
}

Value f_last(Interpreter&, const Value& v, CallArgs&) {
    const std::vector<Value> items = iterate(v);
    if (items.empty()) return Value::undefined("No last item, sequence was empty.");
    return items.back();
}

std::optional<double> parse_py_float(const std::string& raw) {
    std::string s = py_strip(raw, std::nullopt, true, true);
    s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
    if (s.empty()) return std::nullopt;
    char* end = nullptr;
    const double d = std::strtod(s.c_str(), &end);
    if (end != s.c_str() + s.size()) return std::nullopt;
    return d;
}

Value f_float(Interpreter&, const Value& v, CallArgs& args) {
    ArgBinder a("float", args, {"default"});
    if (v.is_number()) return Value(v.as_double());
    if (v.is_string()) {
        if (auto d = parse_py_float(v.as_string())) return Value(*d);
    }
    return a.get_or(0, Value(0.0));
}

Value f_int(Interpreter&, const Value& v, CallArgs& args) {
    ArgBinder a("int", args, {"default", "base"});
    const Value fallback = a.get_or(0, Value(0));
    if (v.is_int() || v.is_bool()) return Value(v.as_integer());
    if (v.is_float()) {
        const double d = v.as_double();
        if (std::isnan(d) || std::isinf(d)) return fallback;
        return Value(static_cast<std::int64_t>(d));
    }
    if (!v.is_string()) return fallback;
    std::string s = py_strip(v.as_string(), std::nullopt, true, true);
    s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
    const std::int64_t base = a.get_int(1, 10);
    char* end = nullptr;
    const long long i = std::strtoll(s.c_str(), &end, static_cast<int>(base));
    if (!s.empty() && end == s.c_str() + s.size()) return Value(static_cast<std::int64_t>(i));
    // jinja2 then tries int(float(value)), so "42.7" gives 42.
    if (auto d = parse_py_float(s); d && std::isfinite(*d)) {
        return Value(static_cast<std::int64_t>(*d));
    }
    return fallback;
}

Value f_format(Interpreter&, const Value& v, CallArgs& args) {
    if (!args.positional.empty() && !args.keyword.empty()) {
        fail("can't handle positional and keyword arguments at the same time");
    }
    if (!args.keyword.empty()) {
        Value mapping = Value::object();
        for (auto& [k, item] : args.keyword) mapping.mutable_object_data().set(k, item);
        return Value(percent_format(text_of(v), mapping));
    }
    return Value(percent_format(text_of(v), Value::array(args.positional, true)));
}

Value f_indent(Interpreter&, const Value& v, CallArgs& args) {
    ArgBinder a("indent", args, {"width", "first", "blank"});
    std::string indention(4, ' ');
    if (a.get(0) && a.get(0)->is_string()) {
        indention = a.get(0)->as_string();
    } else if (a.get(0)) {
        indention = spaces(a.get_int(0, 4));
    }
    // Same steps as jinja2: a newline is appended so that splitlines() keeps a trailing
    // empty line.
    const std::vector<std::string> lines = py_splitlines(text_of(v) + "\n");
    // Every line gains the indent: a long indent times many lines is checked before building.
    check_size(static_cast<std::int64_t>(text_of(v).size()) +
               static_cast<std::int64_t>(lines.size() + 1) *
                   static_cast<std::int64_t>(indention.size()));
    std::string rv;
    if (a.get_bool(2, false)) {
        for (std::size_t i = 0; i < lines.size(); ++i) rv += (i ? "\n" + indention : "") + lines[i];
    } else {
        for (std::size_t i = 0; i < lines.size(); ++i) {
            if (i == 0) {
                rv += lines[i];
            } else {
                rv += "\n" + (lines[i].empty() ? lines[i] : indention + lines[i]);
            }
        }
    }
    if (a.get_bool(1, false)) rv = indention + rv;
    return Value(std::move(rv));
}

Value f_items(Interpreter&, const Value& v, CallArgs&) {
    if (v.is_undefined()) return values_list({});
    if (!v.is_mapping()) fail("Can only get item pairs from a mapping.");
    std::vector<Value> out;
    for (const auto& [k, item] : v.object_data().entries) {
        out.push_back(Value::array({Value(k), item}, true));
    }
    return values_list(std::move(out));
}

Value f_join(Interpreter&, const Value& v, CallArgs& args) {
    ArgBinder a("join", args, {"d", "attribute"});
    const std::string sep = text_of(a.get_or(0, Value("")));
    std::string out;
    bool first = true;
    for (const Value& item : iterate(v)) {
        if (!first) out += sep;
        first = false;
        out += text_of(a.get(1) ? get_path(item, text_of(*a.get(1))) : item);
        check_room(static_cast<std::int64_t>(out.size()));
    }
    return Value(std::move(out));
}

Value f_length(Interpreter&, const Value& v, CallArgs&) {
    return Value(length_of(v));
}
Value f_list(Interpreter&, const Value& v, CallArgs&) {
    return values_list(iterate(v));
}
Value f_lower(Interpreter&, const Value& v, CallArgs&) {
    return Value(py_lower(text_of(v)));
}
Value f_upper(Interpreter&, const Value& v, CallArgs&) {
    return Value(py_upper(text_of(v)));
}
Value f_safe(Interpreter&, const Value& v, CallArgs&) {
    return v.is_string() ? v : Value(text_of(v));
}
Value f_string(Interpreter&, const Value& v, CallArgs&) {
    return Value(text_of(v));
}
Value f_pprint(Interpreter&, const Value& v, CallArgs&) {
    return Value(to_repr(v));
}

Value f_map(Interpreter& in, const Value& v, CallArgs& args) {
    std::vector<Value> out;
    const Value* attribute = nullptr;
    const Value* fallback = nullptr;
    for (const auto& [k, item] : args.keyword) {
        if (k == "attribute") attribute = &item;
        if (k == "default") fallback = &item;
    }
    if (attribute) {
        for (const Value& item : iterate(v)) {
            Value r = get_path(item, text_of(*attribute));
            out.push_back(fallback && r.is_undefined() ? *fallback : r);
        }
        return values_list(std::move(out));
    }
    if (args.positional.empty()) fail("map requires a filter argument");
    const std::string name = text_of(args.positional[0]);
    CallArgs rest = rest_args(args, 1);
    for (const Value& item : iterate(v)) {
        CallArgs call = rest;
        out.push_back(apply_filter(in, name, item, call));
    }
    return values_list(std::move(out));
}

Value min_max(const Value& v, CallArgs& args, bool want_max) {
    ArgBinder a(want_max ? "max" : "min", args, {"case_sensitive", "attribute"});
    const auto items = keyed_items(v, a.get(1), a.get_bool(0, false));
    if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
    std::size_t best = 0;
    for (std::size_t i = 1; i < items.size(); ++i) {
        const int c = compare_values(items[i].second, items[best].second, want_max ? ">" : "<");
        if (want_max ? c > 0 : c < 0) best = i;
    }
    return items[best].first;
}

Value f_max(Interpreter&, const Value& v, CallArgs& args) {
    return min_max(v, args, true);
}
Value f_min(Interpreter&, const Value& v, CallArgs& args) {
    return min_max(v, args, false);
}

// select / reject / selectattr / rejectattr.
Value select_items(Interpreter& in, const Value& v, CallArgs& args, bool by_attr, bool keep) {
    std::size_t next = 0;
    std::string attribute;
    if (by_attr) {
        if (args.positional.empty()) fail("missing attribute argument");
        attribute = text_of(args.positional[next++]);
    }
    std::optional<std::string> test;
    if (next < args.positional.size()) test = text_of(args.positional[next++]);
    CallArgs rest = rest_args(args, next);
    std::vector<Value> out;
    for (Value& item : iterate(v)) {
        const Value subject = by_attr ? get_path(item, attribute) : item;
        bool ok = subject.truthy();
        if (test) {
            CallArgs call = rest;
            ok = apply_test(in, *test, subject, call);
        }
        if (ok == keep) out.push_back(std::move(item));
    }
    return values_list(std::move(out));
}

Value f_select(Interpreter& in, const Value& v, CallArgs& a) {
    return select_items(in, v, a, false, true);
}
Value f_reject(Interpreter& in, const Value& v, CallArgs& a) {
    return select_items(in, v, a, false, false);
}
Value f_selectattr(Interpreter& in, const Value& v, CallArgs& a) {
    return select_items(in, v, a, true, true);
}
Value f_rejectattr(Interpreter& in, const Value& v, CallArgs& a) {
    return select_items(in, v, a, true, false);
}

Value f_replace(Interpreter&, const Value& v, CallArgs& args) {
    ArgBinder a("replace", args, {"old", "new", "count"});
    const std::string text = text_of(v);
    const std::string old_text = text_of(a.get_or(0, Value("")));
    const std::string new_text = text_of(a.get_or(1, Value("")));
    check_replace_size(text, old_text, new_text, a.get_int(2, -1));
    return Value(py_replace(text, old_text, new_text, a.get_int(2, -1)));
}

Value f_reverse(Interpreter&, const Value& v, CallArgs&) {
    if (v.is_string()) return slice_value(v, Value::none(), Value::none(), Value(-1));
    std::vector<Value> items = iterate(v);
    std::reverse(items.begin(), items.end());
    return values_list(std::move(items));
}

Value f_round(Interpreter&, const Value& v, CallArgs& args) {
    ArgBinder a("round", args, {"precision", "method"});
    const std::int64_t precision = a.get_int(0, 0);
    const std::string method = a.get_string(1).value_or("common");
    if (method != "common" && method != "ceil" && method != "floor") {
        fail("method must be common, ceil or floor");
    }
    if (!v.is_number()) fail("type " + v.type_name() + " doesn't define __round__ method");
    if (method == "common") {
        if (!v.is_float()) return Value(v.as_integer());
        // printf rounds the exact binary value half-to-even, as Python's round() does.
        char buf[512];
        std::snprintf(buf, sizeof buf, "%.*f",
                      static_cast<int>(std::clamp<std::int64_t>(precision, 0, 300)), v.as_double());
        return Value(std::strtod(buf, nullptr));
    }
    const double scale = std::pow(10.0, static_cast<double>(precision));
    const double x = v.as_double() * scale;
    return Value((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
}

Value f_sort(Interpreter&, const Value& v, CallArgs& args) {
    ArgBinder a("sort", args, {"reverse", "case_sensitive", "attribute"});
    auto items = keyed_items(v, a.get(2), a.get_bool(1, false));
    const bool reverse = a.get_bool(0, false);
    std::stable_sort(items.begin(), items.end(), [&](const auto& x, const auto& y) {
        const int c = compare_values(x.second, y.second, "<");
        return reverse ? c > 0 : c < 0;
    });
    std::vector<Value> out;
    for (auto& [item, key] : items) out.push_back(std::move(item));
    return values_list(std::move(out));
}

Value f_sum(Interpreter&, const Value& v, CallArgs& args) {
    ArgBinder a("sum", args, {"attribute", "start"});
    Value total = a.get_or(1, Value(0));
    for (const Value& item : iterate(v)) {
        total =
            arithmetic(BinaryOp::Add, total, a.get(0) ? get_path(item, text_of(*a.get(0))) : item);
    }
    return total;
}

Value f_title(Interpreter&, const Value& v, CallArgs&) {
    // jinja2 starts a word after whitespace or one of - ( { [ <, unlike str.title().
    std::string out;
    bool word_start = true;
    for (char32_t c : utf8_decode(text_of(v))) {
        std::string one;
        utf8_append(one, c);
        const bool delimiter =
            py_isspace(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
        out += delimiter ? one : (word_start ? py_upper(one) : py_lower(one));
        word_start = delimiter;
    }
    return Value(std::move(out));
}

Value f_tojson(Interpreter&, const Value& v, CallArgs& args) {
    // HF's tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
    ArgBinder a("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"});
    JsonOptions o;
    o.ensure_ascii = a.get_bool(0, false);
    if (const Value* indent = a.get(1); indent && !indent->is_none()) {
        o.indent = indent->is_string() ? indent->as_string() : spaces(a.get_int(1, 0));
        o.item_separator = ",";
    }
    if (const Value* seps = a.get(2); seps && !seps->is_none()) {
        if (!seps->is_array() || seps->items().size() != 2 || !seps->items()[0].is_string() ||
            !seps->items()[1].is_string()) {
            fail("tojson(): separators must be a pair of strings");
        }
        o.item_separator = seps->items()[0].as_string();
        o.key_separator = seps->items()[1].as_string();
    }
    o.sort_keys = a.get_bool(3, false);
    return Value(to_json(v, o));
}

Value f_trim(Interpreter&, const Value& v, CallArgs& args) {
    ArgBinder a("trim", args, {"chars"});
    return Value(py_strip(text_of(v), a.get_string(0), true, true));
}

Value f_truncate(Interpreter&, const Value& v, CallArgs& args) {
    ArgBinder a("truncate", args, {"length", "killwords", "end", "leeway"});
    const std::u32string s = utf8_decode(text_of(v));
    const std::int64_t length = a.get_int(0, 255);
    const std::string end = a.get_string(2).value_or("...");
    const auto end_len = static_cast<std::int64_t>(utf8_length(end));
    const std::int64_t leeway = a.get_int(3, 5);
    if (length < end_len) fail("expected length >= " + std::to_string(end_len));
    if (static_cast<std::int64_t>(s.size()) <= length + leeway) return Value(utf8_encode(s));
    std::string head = utf8_encode(s.substr(0, static_cast<std::size_t>(length - end_len)));
    if (!a.get_bool(1, false)) {
        const std::size_t space = head.rfind(' ');
        if (space != std::string::npos) head.resize(space);
    }
    return Value(head + end);
}

Value f_unique(Interpreter&, const Value& v, CallArgs& args) {
    ArgBinder a("unique", args, {"case_sensitive", "attribute"});
    std::vector<Value> out;
    std::vector<Value> seen;
    for (auto& [item, key] : keyed_items(v, a.get(1), a.get_bool(0, false))) {
        const bool dup = std::any_of(seen.begin(), seen.end(),
                                     [&](const Value& s) { return values_equal(s, key); });
        if (dup) continue;
        seen.push_back(key);
        out.push_back(item);
    }
    return values_list(std::move(out));
}

Value f_wordcount(Interpreter&, const Value& v, CallArgs&) {
    std::int64_t words = 0;
    bool in_word = false;
    for (char32_t c : utf8_decode(text_of(v))) {
        const bool w = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                       c == '_' || (c >= 0x80 && !py_isspace(c));
        if (w && !in_word) ++words;
        in_word = w;
    }
    return Value(words);
}

constexpr std::array<std::pair<std::string_view, FilterFn>, 45> kFilters = {{
    {"abs", f_abs},
    {"attr", f_attr},
    {"batch", f_batch},
    {"capitalize", f_capitalize},
    {"center", f_center},
    {"count", f_length},
    {"d", f_default},
    {"default", f_default},
    {"dictsort", f_dictsort},
    {"e", f_escape},
    {"escape", f_escape},
    {"first", f_first},
    {"float", f_float},
    {"forceescape", f_escape},
    {"format", f_format},
    {"indent", f_indent},
    {"int", f_int},
    {"items", f_items},
    {"join", f_join},
    {"last", f_last},
    {"length", f_length},
    {"list", f_list},
    {"lower", f_lower},
    {"map", f_map},
    {"max", f_max},
    {"min", f_min},
    {"pprint", f_pprint},
    {"reject", f_reject},
    {"rejectattr", f_rejectattr},
    {"replace", f_replace},
    {"reverse", f_reverse},
    {"round", f_round},
    {"safe", f_safe},
    {"select", f_select},
    {"selectattr", f_selectattr},
    {"sort", f_sort},
    {"string", f_string},
    {"sum", f_sum},
    {"title", f_title},
    {"tojson", f_tojson},
    {"trim", f_trim},
    {"truncate", f_truncate},
    {"unique", f_unique},
    {"upper", f_upper},
    {"wordcount", f_wordcount},
}};

// ---- tests --------------------------------------------------------------------------------

const Value& test_arg(const CallArgs& args, const char* test) {
    if (args.positional.empty()) fail(std::string("test '") + test + "' needs an argument");
    return args.positional[0];
}

bool t_defined(Interpreter&, const Value& v, CallArgs&) {
    return !v.is_undefined();
}
bool t_undefined(Interpreter&, const Value& v, CallArgs&) {
    return v.is_undefined();
}
bool t_none(Interpreter&, const Value& v, CallArgs&) {
    return v.is_none();
}
bool t_boolean(Interpreter&, const Value& v, CallArgs&) {
    return v.is_bool();
}
bool t_true(Interpreter&, const Value& v, CallArgs&) {
    return v.is_bool() && v.as_bool();
}
bool t_false(Interpreter&, const Value& v, CallArgs&) {
    return v.is_bool() && !v.as_bool();
}
bool t_integer(Interpreter&, const Value& v, CallArgs&) {
    return v.is_int();
}
bool t_float(Interpreter&, const Value& v, CallArgs&) {
    return v.is_float();
}
bool t_number(Interpreter&, const Value& v, CallArgs&) {
    return v.is_number();
}
bool t_string(Interpreter&, const Value& v, CallArgs&) {
    return v.is_string();
}
bool t_mapping(Interpreter&, const Value& v, CallArgs&) {
    return v.is_mapping();
}
bool t_callable(Interpreter&, const Value& v, CallArgs&) {
    return v.is_callable();
}
bool t_escaped(Interpreter&, const Value&, CallArgs&) {
    return false;
}
// Undefined counts: jinja2 only checks that len() and __getitem__ exist.
bool t_sequence(Interpreter&, const Value& v, CallArgs&) {
    return v.is_undefined() || v.is_string() || v.is_array() || v.is_mapping();
}
bool t_iterable(Interpreter&, const Value& v, CallArgs&) {
    return v.is_undefined() || v.is_string() || v.is_array() || v.is_mapping();
}
bool t_lower(Interpreter&, const Value& v, CallArgs&) {
    return py_islower_str(text_of(v));
}
bool t_upper(Interpreter&, const Value& v, CallArgs&) {
    return py_isupper_str(text_of(v));
}

Value integer_mod(const Value& v, std::int64_t n) {
    return arithmetic(BinaryOp::Mod, v, Value(n));
}
bool t_even(Interpreter&, const Value& v, CallArgs&) {
    return !integer_mod(v, 2).truthy();
}
bool t_odd(Interpreter&, const Value& v, CallArgs&) {
    return integer_mod(v, 2).truthy();
}
bool t_divisibleby(Interpreter&, const Value& v, CallArgs& a) {
    return !arithmetic(BinaryOp::Mod, v, test_arg(a, "divisibleby")).truthy();
}
bool t_eq(Interpreter&, const Value& v, CallArgs& a) {
    return values_equal(v, test_arg(a, "eq"));
}
bool t_ne(Interpreter&, const Value& v, CallArgs& a) {
    return !values_equal(v, test_arg(a, "ne"));
}
bool t_lt(Interpreter&, const Value& v, CallArgs& a) {
    return compare_values(v, test_arg(a, "lt"), "<") < 0;
}
bool t_le(Interpreter&, const Value& v, CallArgs& a) {
    return compare_values(v, test_arg(a, "le"), "<=") <= 0;
}
bool t_gt(Interpreter&, const Value& v, CallArgs& a) {
    return compare_values(v, test_arg(a, "gt"), ">") > 0;
}
bool t_ge(Interpreter&, const Value& v, CallArgs& a) {
    return compare_values(v, test_arg(a, "ge"), ">=") >= 0;
}
bool t_in(Interpreter&, const Value& v, CallArgs& a) {
    return contains(test_arg(a, "in"), v);
}
bool t_sameas(Interpreter&, const Value& v, CallArgs& a) {
    // Python's `is`: singletons and small cached ints compare by value, containers by identity.
    const Value& o = test_arg(a, "sameas");
    if (v.kind() != o.kind()) return false;
    if (v.is_none() || v.is_undefined()) return true;
    if (v.is_bool()) return v.as_bool() == o.as_bool();
    if (v.is_int()) return v.as_int() == o.as_int() && v.as_int() >= -5 && v.as_int() <= 256;
    if (v.is_string()) return v.as_string() == o.as_string();
    if (v.is_object()) return &v.object_data() == &o.object_data();
    if (v.is_array()) return &v.items() == &o.items();
    if (v.is_callable()) return &v.callable() == &o.callable();
    return false;
}
bool t_filter(Interpreter&, const Value& v, CallArgs&) {
    return v.is_string() && has_filter(v.as_string());
}
bool t_test(Interpreter&, const Value& v, CallArgs&) {
    return v.is_string() && has_test(v.as_string());
}

constexpr std::array<std::pair<std::string_view, TestFn>, 39> kTests = {{
    {"!=", t_ne},
    {"<", t_lt},
    {"<=", t_le},
    {"==", t_eq},
    {">", t_gt},
    {">=", t_ge},
    {"boolean", t_boolean},
    {"callable", t_callable},
    {"defined", t_defined},
    {"divisibleby", t_divisibleby},
    {"eq", t_eq},
    {"equalto", t_eq},
    {"escaped", t_escaped},
    {"even", t_even},
    {"false", t_false},
    {"filter", t_filter},
    {"float", t_float},
    {"ge", t_ge},
    {"greaterthan", t_gt},
    {"gt", t_gt},
    {"in", t_in},
    {"integer", t_integer},
    {"iterable", t_iterable},
    {"le", t_le},
    {"lessthan", t_lt},
    {"lower", t_lower},
    {"lt", t_lt},
    {"mapping", t_mapping},
    {"ne", t_ne},
    {"none", t_none},
    {"number", t_number},
    {"odd", t_odd},
    {"sameas", t_sameas},
    {"sequence", t_sequence},
    {"string", t_string},
    {"test", t_test},
    {"true", t_true},
    {"undefined", t_undefined},
    {"upper", t_upper},
}};

FilterFn find_filter(std::string_view name) {
    for (const auto& [n, fn] : kFilters) {
        if (n == name) return fn;
    }
    return nullptr;
}

TestFn find_test(std::string_view name) {
    for (const auto& [n, fn] : kTests) {
        if (n == name) return fn;
    }
    return nullptr;
}

}  // namespace

bool has_filter(std::string_view name) {
    return find_filter(name) != nullptr;
}
bool has_test(std::string_view name) {
    return find_test(name) != nullptr;
}

Value apply_filter(Interpreter& interp, std::string_view name, const Value& operand,
                   CallArgs& args) {
    const FilterFn fn = find_filter(name);
    if (fn == nullptr) fail("No filter named '" + std::string(name) + "' found.");
    return fn(interp, operand, args);
}

bool apply_test(Interpreter& interp, std::string_view name, const Value& operand, CallArgs& args) {
    const TestFn fn = find_test(name);
    if (fn == nullptr) fail("No test named '" + std::string(name) + "' found.");
    return fn(interp, operand, args);
}

}  // namespace ember::jinja
