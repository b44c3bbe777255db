// The library a chat template can use: filters, tests, methods of str/list/dict, attribute and
// item access, and the globals (range, dict, namespace, raise_exception, strftime_now).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/template/render_budget.h"
#include "engine/template/template_value.h"

namespace ember::jinja {

bool has_filter(std::string_view name);
bool has_test(std::string_view name);
Value apply_filter(Interpreter& interp, std::string_view name, const Value& operand,
                   CallArgs& args);
bool apply_test(Interpreter& interp, std::string_view name, const Value& operand, CallArgs& args);

// `x.name`: a method of str/list/dict wins over an item, as with Python's getattr.
Value get_attribute(const Value& object, std::string_view name);
// `x[key]`: an item wins over an attribute.
Value get_item(const Value& object, const Value& key);
// `x[start:stop:step]` on a str, list or tuple.
Value slice_value(const Value& object, const Value& start, const Value& stop, const Value& step);
// What `for x in value` iterates: list items, dict keys, str code points; Undefined is empty.
std::vector<Value> iterate(const Value& value);
// Python's `needle in haystack`.
bool contains(const Value& haystack, const Value& needle);
// Calls a callable value; fails for anything else.
Value call_value(Interpreter& interp, const Value& callee, CallArgs& args);

// Largest string a template may build through padding or repetition: a huge width or count
// becomes an error instead of an allocation failure. Range sizes are capped separately.
constexpr std::int64_t kMaxTemplateString = std::int64_t{1} << 26;
// Fails when a string of `bytes` would exceed kMaxTemplateString, or would not fit in what is
// left of the render's text budget (RenderBudget below).
void check_size(std::int64_t bytes);

// Lists and dicts count in the same budget as text, by what their items take in memory: a
// list item is a Value, a dict entry its key and a Value. Doubling a list (or a dict) in a
// loop then stops where doubling a string does, instead of growing to gigabytes.
constexpr std::int64_t kListItemBytes = static_cast<std::int64_t>(sizeof(Value));
constexpr std::int64_t kDictEntryBytes =
    static_cast<std::int64_t>(sizeof(std::pair<std::string, Value>));

// Fails when building a list of `items` items would not fit in what is left of the budget;
// charges nothing (Value::array charges the list once it is built).
inline void check_list_room(std::int64_t items) {
    if (RenderBudget* b = current_budget()) {
        b->check_room(items > INT64_MAX / kListItemBytes ? INT64_MAX : items * kListItemBytes);
    }
}
// Fails when a string grown to `bytes` would exceed the render's text budget (for builders
// such as join, which grow a string in a loop; pure helpers call it with the final size).
inline void check_room(std::int64_t bytes) {
    if (RenderBudget* b = current_budget()) b->check_room(bytes);
}

// Fails (as check_size) when str.replace(old, new, count) on `s` would build too much.
void check_replace_size(std::string_view s, std::string_view old_text, std::string_view new_text,
                        std::int64_t count);

// Python's `fmt % args` (args: a tuple, a dict for %(name)s, or a single value).
std::string percent_format(const std::string& fmt, const Value& args);
// Python's str.format(*args, **kwargs).
std::string str_format(const std::string& fmt, const CallArgs& args);
// Python's str.center(width, fill).
std::string py_center(const std::string& s, std::int64_t width, const std::string& fill);

// Adds range, dict, namespace, raise_exception and strftime_now to `globals`.
void install_globals(ObjectData& globals);

// Binds call arguments to a Python-style signature, for builtins with keyword parameters.
class ArgBinder {
public:
    ArgBinder(std::string_view function, const CallArgs& args,
              std::initializer_list<std::string_view> params);
    // The argument bound to parameter `i`, or nullptr when it was not given.
    const Value* get(std::size_t i) const { return bound_[i]; }
    Value get_or(std::size_t i, Value fallback) const { return bound_[i] ? *bound_[i] : fallback; }
    std::int64_t get_int(std::size_t i, std::int64_t fallback) const;
    bool get_bool(std::size_t i, bool fallback) const;
    std::optional<std::string> get_string(std::size_t i) const;

private:
    std::string function_;
    std::vector<const Value*> bound_;
};

}  // namespace ember::jinja
