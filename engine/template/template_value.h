// The values a chat template computes with. They mirror the Python objects jinja2 works on
// (str, int, float, bool, None, list, tuple, dict, Namespace, callables and Undefined)
// closely enough that printing, comparison, truthiness and json.dumps come out identical.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace ember::jinja {

class Value;
class Interpreter;

struct ArrayData;
struct ObjectData;

// Positional and keyword arguments of a call, filter or test.
struct CallArgs {
    std::vector<Value> positional;
    std::vector<std::pair<std::string, Value>> keyword;
};

// Anything a template can call: macros, globals such as range(), bound methods such as
// "str.split".
class Callable {
public:
    virtual ~Callable() = default;
    virtual Value call(Interpreter& interp, CallArgs& args) const = 0;
    virtual std::string name() const = 0;
};

class Value {
public:
    enum class Kind : std::uint8_t {
        Undefined,
        None,
        Bool,
        Int,
        Float,
        String,
        Array,   // list or tuple
        Object,  // dict or namespace
        Callable,
    };

    // An Undefined value. `hint` is the complaint jinja2 raises when it is misused, such as
    // "'x' is undefined" or "'dict object' has no attribute 'x'".
    Value() = default;
    static Value undefined(std::string hint) { return Value(UndefinedT{std::move(hint)}); }
    static Value none() { return Value(NoneT{}); }
    Value(bool b) : v_(b) {}
    Value(std::int64_t i) : v_(i) {}
    Value(int i) : v_(static_cast<std::int64_t>(i)) {}
    Value(double d) : v_(d) {}
    Value(std::string s) : v_(std::move(s)) {}
    Value(std::string_view s) : v_(std::string(s)) {}
    Value(const char* s) : v_(std::string(s)) {}
    Value(std::shared_ptr<const Callable> c) : v_(std::move(c)) {}
    static Value array(std::vector<Value> items = {}, bool tuple = false);
    static Value object(bool is_namespace = false);

    Kind kind() const noexcept { return static_cast<Kind>(v_.index()); }
    bool is_undefined() const noexcept { return kind() == Kind::Undefined; }
    bool is_none() const noexcept { return kind() == Kind::None; }
    bool is_bool() const noexcept { return kind() == Kind::Bool; }
    bool is_int() const noexcept { return kind() == Kind::Int; }
    bool is_float() const noexcept { return kind() == Kind::Float; }
    // Python's numbers.Number: int, float and bool.
    bool is_number() const noexcept { return is_int() || is_float() || is_bool(); }
    bool is_string() const noexcept { return kind() == Kind::String; }
    bool is_array() const noexcept { return kind() == Kind::Array; }
    bool is_tuple() const noexcept;
    bool is_object() const noexcept { return kind() == Kind::Object; }
    bool is_namespace() const noexcept;
    // A dict (what jinja2's `mapping` test accepts); a namespace is not one.
    bool is_mapping() const noexcept { return is_object() && !is_namespace(); }
    bool is_callable() const noexcept { return kind() == Kind::Callable; }

    bool as_bool() const { return std::get<bool>(v_); }
    std::int64_t as_int() const { return std::get<std::int64_t>(v_); }
    // int, bool or float as a double.
    double as_double() const;
    // int or bool as an integer (Python's bools are ints).
    std::int64_t as_integer() const { return is_bool() ? (as_bool() ? 1 : 0) : as_int(); }
    const std::string& as_string() const { return std::get<std::string>(v_); }
    const std::vector<Value>& items() const;
    const ObjectData& object_data() const;
    // Objects are shared like Python's: a namespace changed in a macro is changed everywhere.
    ObjectData& mutable_object_data() const;
    // The dict itself, for whoever must follow it past this value (Interpreter: the namespaces
    // a render assigned to).
    std::weak_ptr<ObjectData> object_handle() const {
        return std::get<std::shared_ptr<ObjectData>>(v_);
    }
    const Callable& callable() const { return *std::get<std::shared_ptr<const Callable>>(v_); }
    const std::string& undefined_hint() const { return std::get<UndefinedT>(v_).hint; }

    // Python truthiness; Undefined is false.
    bool truthy() const;
    // The Python type name used in error messages: 'str', 'int', 'list', 'NoneType', ...
    std::string type_name() const;

private:
    struct UndefinedT {
        std::string hint;
    };
    struct NoneT {};
    explicit Value(std::shared_ptr<ArrayData> a) : v_(std::move(a)) {}
    explicit Value(std::shared_ptr<ObjectData> o) : v_(std::move(o)) {}
    explicit Value(UndefinedT u) : v_(std::move(u)) {}
    explicit Value(NoneT n) : v_(n) {}

    std::variant<UndefinedT, NoneT, bool, std::int64_t, double, std::string,
                 std::shared_ptr<ArrayData>, std::shared_ptr<ObjectData>,
                 std::shared_ptr<const Callable>>
        v_;
};

// Both destroy what they hold without recursing deeper than a fixed bound (see
// template_value.cpp): a template can nest lists far deeper than the stack allows.
// What a container charged to the render that built it (RenderBudget::charge_live), given
// back when it is destroyed: the budget counts the containers alive, not every one ever built.
struct LiveCharge {
    LiveCharge() = default;
    LiveCharge(const LiveCharge&) {}  // a copy is charged by whoever copies
    LiveCharge& operator=(const LiveCharge&) { return *this; }
    ~LiveCharge();
    void add(std::int64_t bytes);
    std::uint64_t render = 0;  // RenderBudget::serial() of the render charged
    std::int64_t bytes = 0;
};

struct ArrayData {
    ArrayData() = default;
    ArrayData(const ArrayData&) = default;
    ArrayData& operator=(const ArrayData&) = default;
    ~ArrayData();
    std::vector<Value> items;
    bool is_tuple = false;
    LiveCharge charge;
};

// A dict keeps insertion order, as Python's does (tojson and items() show it).
struct ObjectData {
    ObjectData() = default;
    ObjectData(const ObjectData&) = default;
    ObjectData& operator=(const ObjectData&) = default;
    ~ObjectData();
    std::vector<std::pair<std::string, Value>> entries;
    bool is_namespace = false;
    LiveCharge charge;

    const Value* find(std::string_view key) const;
    void set(const std::string& key, Value value);
};

// Throws TemplateError (Kind::Render) with `message`.
[[noreturn]] void fail(std::string message);
// Throws the error jinja2 raises when an Undefined is used for more than printing or testing.
[[noreturn]] void fail_undefined(const Value& v);

// Python ==.
bool values_equal(const Value& a, const Value& b);
// Python <, <=, >, >= as a three-way result; throws TypeError wording for unorderable pairs.
int compare_values(const Value& a, const Value& b, std::string_view op);

// Python str(): what {{ value }} prints. Undefined prints as "".
std::string to_str(const Value& v);
// Python repr().
std::string to_repr(const Value& v);
// Python's repr of a float ("1.0", "1e+16", "1e-05").
std::string format_float(double d);

struct JsonOptions {
    std::optional<std::string> indent;  // json.dumps indent, already a string of spaces
    std::string item_separator = ", ";
    std::string key_separator = ": ";
    bool ensure_ascii = false;
    bool sort_keys = false;
};
// json.dumps(value, ...) byte for byte.
std::string to_json(const Value& v, const JsonOptions& options);

// Converts JSON to a value. Arrays and objects inside `j` may nest kMaxTemplateValueDepth
// deep (j's own container not counted: it is the variables object); deeper ones throw
// TemplateError instead of recursing further.
Value from_json(const nlohmann::ordered_json& j);

}  // namespace ember::jinja
