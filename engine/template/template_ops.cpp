// Python's arithmetic and string formatting (`%` and str.format) for chat templates.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "engine/template/template_builtins.h"
#include "engine/template/template_interp.h"
#include "engine/template/template_strings.h"

namespace ember::jinja {

namespace {

const char* op_symbol(BinaryOp op) {
    switch (op) {
        case BinaryOp::Add:
            return "+";
        case BinaryOp::Sub:
            return "-";
        case BinaryOp::Mul:
            return "*";
        case BinaryOp::Div:
            return "/";
        case BinaryOp::FloorDiv:
            return "//";
        case BinaryOp::Mod:
            return "%";
        case BinaryOp::Pow:
            return "** or pow()";
        default:
            return "?";
    }
}

// Python's ints are unbounded; rather than wrap silently, refuse.
[[noreturn]] void overflow() {
    fail("integer overflow in template arithmetic");
}

Value integer_arithmetic(BinaryOp op, std::int64_t a, std::int64_t b) {
    std::int64_t r = 0;
    switch (op) {
        case BinaryOp::Add:
            if (__builtin_add_overflow(a, b, &r)) overflow();
            return Value(r);
        case BinaryOp::Sub:
            if (__builtin_sub_overflow(a, b, &r)) overflow();
            return Value(r);
        case BinaryOp::Mul:
            if (__builtin_mul_overflow(a, b, &r)) overflow();
            return Value(r);
        case BinaryOp::FloorDiv:
        case BinaryOp::Mod: {
            if (b == 0) fail("integer division or modulo by zero");
            if (a == INT64_MIN && b == -1) overflow();
            std::int64_t q = a / b;
            std::int64_t m = a % b;
            if (m != 0 && ((m < 0) != (b < 0))) {  // Python floors toward negative infinity
                --q;
                m += b;
            }
            return Value(op == BinaryOp::FloorDiv ? q : m);
        }
        case BinaryOp::Pow: {
            std::int64_t result = 1;
            for (std::int64_t i = 0; i < b; ++i) {
                if (__builtin_mul_overflow(result, a, &r)) overflow();
                result = r;
                if (result == 0 || result == 1) break;
            }
            return Value(result);
        }
        default:
            break;
    }
    return Value();
}

Value float_arithmetic(BinaryOp op, double a, double b) {
    switch (op) {
        case BinaryOp::Add:
            return Value(a + b);
        case BinaryOp::Sub:
            return Value(a - b);
        case BinaryOp::Mul:
            return Value(a * b);
        case BinaryOp::Div:
            if (b == 0) fail("division by zero");
            return Value(a / b);
        case BinaryOp::FloorDiv:
            if (b == 0) fail("float floor division by zero");
            return Value(std::floor(a / b));
        case BinaryOp::Mod: {
            if (b == 0) fail("float modulo");
            double m = std::fmod(a, b);
            if (m != 0 && ((m < 0) != (b < 0))) m += b;
            return Value(m);
        }
        case BinaryOp::Pow:
            if (a == 0 && b < 0) fail("0.0 cannot be raised to a negative power");
            return Value(std::pow(a, b));
        default:
            break;
    }
    return Value();
}

// Bytes of the strings directly in a list: what copying its items copies.
std::int64_t item_text_bytes(const Value& list) {
    std::int64_t n = 0;
    for (const auto& item : list.items()) {
        if (item.is_string()) n += static_cast<std::int64_t>(item.as_string().size());
    }
    return n;
}

Value repeat(const Value& seq, std::int64_t n) {
    const auto unit =
        static_cast<std::int64_t>(seq.is_string() ? seq.as_string().size() : seq.items().size());
    if (n > 0 && unit > 0)
        check_size(n > kMaxTemplateString / unit ? kMaxTemplateString + 1 : n * unit);
    if (n > 0 && seq.is_array()) {
        const std::int64_t text = item_text_bytes(seq);
        if (text > 0) check_room(n > kMaxTemplateString / text ? kMaxTemplateString + 1 : n * text);
        check_list_room(n * unit);  // within kMaxTemplateString items (check_size above)
    }
    if (seq.is_string()) {
        std::string out;
        for (std::int64_t i = 0; i < n; ++i) out += seq.as_string();
        return Value(std::move(out));
    }
    std::vector<Value> out;
    for (std::int64_t i = 0; i < n; ++i) {
        out.insert(out.end(), seq.items().begin(), seq.items().end());
    }
    return Value::array(std::move(out), seq.is_tuple());
}

}  // namespace

Value arithmetic(BinaryOp op, const Value& a, const Value& b) {
    if (a.is_undefined()) fail_undefined(a);
    if (b.is_undefined()) fail_undefined(b);
    if (a.is_number() && b.is_number()) {
        const bool ints = !a.is_float() && !b.is_float();
        if (ints && op != BinaryOp::Div && (op != BinaryOp::Pow || b.as_integer() >= 0)) {
            return integer_arithmetic(op, a.as_integer(), b.as_integer());
        }
        return float_arithmetic(op, a.as_double(), b.as_double());
    }
    const bool a_seq = a.is_string() || a.is_array();
    const bool b_seq = b.is_string() || b.is_array();
    if (op == BinaryOp::Add) {
        if (a.is_string() && b.is_string()) {
            check_size(static_cast<std::int64_t>(a.as_string().size() + b.as_string().size()));
            return Value(a.as_string() + b.as_string());
        }
        if (a.is_array() && b.is_array() && a.is_tuple() == b.is_tuple()) {
            // The items are copied, strings included; and the list itself must fit.
            check_room(item_text_bytes(a) + item_text_bytes(b));
            check_list_room(static_cast<std::int64_t>(a.items().size() + b.items().size()));
            std::vector<Value> items = a.items();
            items.insert(items.end(), b.items().begin(), b.items().end());
            return Value::array(std::move(items), a.is_tuple());
        }
        if (a_seq) {
            fail("can only concatenate " + a.type_name() + " (not \"" + b.type_name() + "\") to " +
                 a.type_name());
        }
    } else if (op == BinaryOp::Mul && (a_seq || b_seq)) {
        const Value& seq = a_seq ? a : b;
        const Value& count = a_seq ? b : a;
        if (count.is_int() || count.is_bool()) return repeat(seq, count.as_integer());
        if (!(a_seq && b_seq)) {
            fail("can't multiply sequence by non-int of type '" + count.type_name() + "'");
        }
    } else if (op == BinaryOp::Mod && a.is_string()) {
        return Value(percent_format(a.as_string(), b));
    }
    fail(std::string("unsupported operand type(s) for ") + op_symbol(op) + ": '" + a.type_name() +
         "' and '" + b.type_name() + "'");
}

namespace {

struct Spec {
    char fill = ' ';
    char align = '\0';  // '<', '>', '^', '='
    char sign = '-';
    bool alternate = false;
    bool zero = false;
    int width = -1;
    int precision = -1;
    char type = '\0';
};

// One more decimal digit of a width or precision (-1: none yet), refusing absurd values.
int add_digit(int value, char digit) {
    const int v = std::max(value, 0) * 10 + (digit - '0');
    if (v > 100000000) fail("format width or precision too large");
    return v;
}

std::string pad(const std::string& body, const Spec& spec, char default_align) {
    check_size(spec.width);
    const auto len = static_cast<int>(utf8_length(body));
    if (spec.width <= len) return body;
    const auto n = static_cast<std::size_t>(spec.width - len);
    const char align = spec.align ? spec.align : default_align;
    if (align == '<') return body + std::string(n, spec.fill);
    if (align == '^')
        return std::string(n / 2, spec.fill) + body + std::string(n - n / 2, spec.fill);
    if (align == '=' && !body.empty() && (body[0] == '-' || body[0] == '+' || body[0] == ' ')) {
        return body.substr(0, 1) + std::string(n, spec.fill) + body.substr(1);
    }
    return std::string(n, spec.fill) + body;
}

std::string format_number(const Value& v, const Spec& spec) {
    char buf[512];
    std::string flags;
    if (spec.sign == '+' || spec.sign == ' ') flags.push_back(spec.sign);
    if (spec.alternate) flags.push_back('#');
    char type = spec.type;
    if (type == '\0') type = v.is_float() ? 'r' : 'd';
    if (type == 'r') {
        std::string out = v.is_float() && spec.sign == '+' && v.as_double() >= 0 ? "+" : "";
        return out.append(format_float(v.as_double()));
    }
    if (type == 'd' || type == 'i' || type == 'u' || type == 'x' || type == 'X' || type == 'o') {
        if (type == 'i' || type == 'u') type = 'd';
        const auto i = v.is_float() ? static_cast<long long>(v.as_double())
                                    : static_cast<long long>(v.as_integer());
        const std::string f = "%" + flags + "ll" + std::string(1, type);
        std::snprintf(buf, sizeof buf, f.c_str(), i);
        return buf;
    }
    if (std::string_view("eEfFgG%").find(type) == std::string_view::npos) {
        fail(std::string("unsupported format character '") + type + "'");
    }
    double d = v.as_double();
    std::string suffix;
    if (type == '%') {
        d *= 100;
        type = 'f';
        suffix = "%";
    }
    const int precision = spec.precision >= 0 ? spec.precision : 6;
    const std::string f = "%" + flags + "." + std::to_string(precision) + std::string(1, type);
    std::snprintf(buf, sizeof buf, f.c_str(), d);
    return buf + suffix;
}

Value next_percent_arg(const Value& args, std::size_t& index) {
    if (args.is_tuple()) {
        if (index >= args.items().size()) fail("not enough arguments for format string");
        return args.items()[index++];
    }
    if (index++ > 0) fail("not enough arguments for format string");
    return args;
}

}  // namespace

std::string percent_format(const std::string& fmt, const Value& args) {
    std::string out;
    std::size_t arg_index = 0;
    bool used_mapping = false;
    for (std::size_t i = 0; i < fmt.size(); ++i) {
        if (fmt[i] != '%') {
            out.push_back(fmt[i]);
            continue;
        }
        if (++i >= fmt.size()) fail("incomplete format");
        Spec spec;
        Value value;
        bool have_value = false;
        if (fmt[i] == '(') {
            const std::size_t close = fmt.find(')', i);
            if (close == std::string::npos || !args.is_mapping()) fail("format requires a mapping");
            const Value* v = args.object_data().find(fmt.substr(i + 1, close - i - 1));
            if (v == nullptr) fail("'" + fmt.substr(i + 1, close - i - 1) + "'");
            value = *v;
            have_value = used_mapping = true;
            i = close + 1;
        }
        for (; i < fmt.size() && std::string_view("-+ #0").find(fmt[i]) != std::string_view::npos;
             ++i) {
            if (fmt[i] == '-') spec.align = '<';
            if (fmt[i] == '+' || (fmt[i] == ' ' && spec.sign != '+')) spec.sign = fmt[i];
            if (fmt[i] == '#') spec.alternate = true;
            if (fmt[i] == '0') spec.zero = true;
        }
        for (; i < fmt.size() && fmt[i] >= '0' && fmt[i] <= '9'; ++i) {
            spec.width = add_digit(spec.width, fmt[i]);
        }
        if (i < fmt.size() && fmt[i] == '.') {
            spec.precision = 0;
            for (++i; i < fmt.size() && fmt[i] >= '0' && fmt[i] <= '9'; ++i) {
                spec.precision = add_digit(spec.precision, fmt[i]);
            }
        }
        while (i < fmt.size() && (fmt[i] == 'l' || fmt[i] == 'h' || fmt[i] == 'L')) ++i;
        if (i >= fmt.size()) fail("incomplete format");
        const char conv = fmt[i];
        if (conv == '%') {
            out.push_back('%');
            continue;
        }
        if (!have_value) value = next_percent_arg(args, arg_index);
        std::string body;
        if (conv == 's' || conv == 'r' || conv == 'a') {
            body = conv == 's' ? to_str(value) : to_repr(value);
            if (spec.precision >= 0) {
                const std::u32string cps = utf8_decode(body);
                body = utf8_encode(std::u32string_view(cps).substr(
                    0, std::min(cps.size(), static_cast<std::size_t>(spec.precision))));
            }
        } else if (conv == 'c') {
            body = value.is_string() ? value.as_string() : std::string();
            if (!value.is_string()) utf8_append(body, static_cast<char32_t>(value.as_integer()));
        } else {
            if (!value.is_number()) {
                fail(std::string("%") + conv + " format: a real number is required, not " +
                     value.type_name());
            }
            spec.type = conv;
            body = format_number(value, spec);
        }
        if (spec.zero && spec.align != '<' && conv != 's' && conv != 'r') {
            spec.fill = '0';
            spec.align = '=';
        }
        out += pad(body, spec, '>');
    }
    const bool leftover = args.is_tuple() ? arg_index < args.items().size()
                                          : (arg_index == 0 && !used_mapping && !args.is_mapping());
    if (leftover) fail("not all arguments converted during string formatting");
    return out;
}

namespace {

Spec parse_format_spec(std::string_view s) {
    Spec spec;
    std::size_t i = 0;
    auto is_align = [](char c) { return c == '<' || c == '>' || c == '^' || c == '='; };
    if (s.size() >= 2 && is_align(s[1])) {
        spec.fill = s[0];
        spec.align = s[1];
        i = 2;
    } else if (!s.empty() && is_align(s[0])) {
        spec.align = s[0];
        i = 1;
    }
    if (i < s.size() && (s[i] == '+' || s[i] == '-' || s[i] == ' ')) spec.sign = s[i++];
    if (i < s.size() && s[i] == '#') {
        spec.alternate = true;
        ++i;
    }
    if (i < s.size() && s[i] == '0') {
        spec.zero = true;
        ++i;
    }
    for (; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i) {
        spec.width = add_digit(spec.width, s[i]);
    }
    if (i < s.size() && s[i] == '.') {
        spec.precision = 0;
        for (++i; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i) {
            spec.precision = add_digit(spec.precision, s[i]);
        }
    }
    if (i < s.size()) spec.type = s[i++];
    if (i != s.size()) fail("Invalid format specifier '" + std::string(s) + "'");
    return spec;
}

std::string apply_format_spec(const Value& v, std::string_view spec_text) {
    Spec spec = parse_format_spec(spec_text);
    if (spec.zero && !spec.align) {
        spec.fill = '0';
        spec.align = '=';
    }
    if (v.is_number() && !v.is_bool() && spec.type != 's') {
        if (spec.type == '\0' && v.is_float() && spec.precision >= 0) spec.type = 'g';
        return pad(format_number(v, spec), spec, '>');
    }
    std::string body = to_str(v);
    if (spec.precision >= 0) {
        const std::u32string cps = utf8_decode(body);
        body = utf8_encode(std::u32string_view(cps).substr(
            0, std::min(cps.size(), static_cast<std::size_t>(spec.precision))));
    }
    return pad(body, spec, '<');
}

}  // namespace

std::string str_format(const std::string& fmt, const CallArgs& args) {
    std::string out;
    std::size_t auto_index = 0;
    for (std::size_t i = 0; i < fmt.size(); ++i) {
        const char c = fmt[i];
        if (c == '}') {
            if (i + 1 < fmt.size() && fmt[i + 1] == '}') ++i;
            out.push_back('}');
            continue;
        }
        if (c != '{') {
            out.push_back(c);
            continue;
        }
        if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
            out.push_back('{');
            ++i;
            continue;
        }
        const std::size_t close = fmt.find('}', i);
        if (close == std::string::npos) fail("Single '{' encountered in format string");
        std::string field = fmt.substr(i + 1, close - i - 1);
        i = close;
        std::string spec;
        char conversion = '\0';
        if (const std::size_t colon = field.find(':'); colon != std::string::npos) {
            spec = field.substr(colon + 1);
            field.resize(colon);
        }
        if (const std::size_t bang = field.find('!'); bang != std::string::npos) {
            conversion = bang + 1 < field.size() ? field[bang + 1] : '\0';
            field.resize(bang);
        }
        Value value;
        if (field.empty() || (field[0] >= '0' && field[0] <= '9')) {
            const std::size_t index =
                field.empty() ? auto_index++ : std::strtoull(field.c_str(), nullptr, 10);
            if (index >= args.positional.size()) {
                fail("Replacement index " + std::to_string(index) +
                     " out of range for positional "
                     "args tuple");
            }
            value = args.positional[index];
        } else {
            bool found = false;
            for (const auto& [k, v] : args.keyword) {
                if (k == field) {
                    value = v;
                    found = true;
                }
            }
            if (!found) fail("'" + field + "'");
        }
        if (conversion == 'r' || conversion == 'a') value = Value(to_repr(value));
        if (conversion == 's') value = Value(to_str(value));
        out += apply_format_spec(value, spec);
    }
    return out;
}

}  // namespace ember::jinja
