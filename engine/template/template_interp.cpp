#include "engine/template/template_interp.h"

#include <algorithm>

#include "engine/template/render_budget.h"
#include "engine/template/template.h"
#include "engine/template/template_builtins.h"
#include "engine/util/depth_guard.h"

namespace ember::jinja {

namespace {

// Deep enough for recursive schema formatters (Gemma's format_parameters), shallow enough to
// stop a runaway template before the C++ stack runs out.
constexpr int kMaxCallDepth = 200;
// Statements nested inside one another, across macro calls: bounds the interpreter's stack.
constexpr int kMaxExecDepth = 2000;

// A {% macro %}: holds its defining scope weakly, so a macro stored in the scope it was
// defined in does not keep that scope alive forever.
class MacroCallable : public Callable {
public:
    MacroCallable(const MacroStmt* node, const ScopePtr& closure)
        : node_(node), closure_(closure) {}
    Value call(Interpreter& interp, CallArgs& args) const override {
        return interp.call_macro(*node_, closure_.lock(), args);
    }
    std::string name() const override { return node_->name; }

private:
    const MacroStmt* node_;
    std::weak_ptr<Scope> closure_;
};

// `caller` inside a macro invoked by {% call %}: renders the call block's body.
class CallerCallable : public Callable {
public:
    CallerCallable(const CallBlockStmt* node, const ScopePtr& closure)
        : node_(node), closure_(closure) {}
    Value call(Interpreter& interp, CallArgs& args) const override {
        return interp.call_caller(*node_, closure_.lock(), args);
    }
    std::string name() const override { return "caller"; }

private:
    const CallBlockStmt* node_;
    std::weak_ptr<Scope> closure_;
};

// `loop.cycle(a, b, ...)`: the argument at the iteration's position.
class CycleCallable : public Callable {
public:
    explicit CycleCallable(std::size_t index0) : index0_(index0) {}
    Value call(Interpreter& /*interp*/, CallArgs& args) const override {
        if (args.positional.empty()) fail("no items for cycling given");
        return args.positional[index0_ % args.positional.size()];
    }
    std::string name() const override { return "cycle"; }

private:
    std::size_t index0_;
};

// `loop.changed(*values)`: true when the values differ from the previous call's. One per
// loop run, shared by its iterations.
class ChangedCallable : public Callable {
public:
    Value call(Interpreter& /*interp*/, CallArgs& args) const override {
        if (seen_ && args.positional.size() == last_.size() &&
            std::equal(last_.begin(), last_.end(), args.positional.begin(), values_equal)) {
            return Value(false);
        }
        seen_ = true;
        last_ = args.positional;
        return Value(true);
    }
    std::string name() const override { return "changed"; }

private:
    mutable bool seen_ = false;
    mutable std::vector<Value> last_;
};

Value make_loop_object(const LoopSource& source) {
    const std::vector<Value>& items = *source.items;
    const std::size_t i = source.index;
    const auto n = static_cast<std::int64_t>(items.size());
    const auto idx = static_cast<std::int64_t>(i);
    Value loop = Value::object();
    auto& d = loop.mutable_object_data();
    d.entries.reserve(14);
    d.entries.emplace_back("index", Value(idx + 1));
    d.entries.emplace_back("index0", Value(idx));
    d.entries.emplace_back("revindex", Value(n - idx));
    d.entries.emplace_back("revindex0", Value(n - idx - 1));
    d.entries.emplace_back("first", Value(i == 0));
    d.entries.emplace_back("last", Value(idx == n - 1));
    d.entries.emplace_back("length", Value(n));
    d.entries.emplace_back("depth", Value(1));
    d.entries.emplace_back("depth0", Value(0));
    if (i > 0) d.entries.emplace_back("previtem", items[i - 1]);
    if (idx + 1 < n) d.entries.emplace_back("nextitem", items[i + 1]);
    d.entries.emplace_back("cycle", Value(std::make_shared<CycleCallable>(i)));
    d.entries.emplace_back("changed", Value(source.changed));
    return loop;
}

// Bytes of text in a value (what kRenderTextPerInputByte scales). Containers nest at most
// kMaxTemplateValueDepth deep here: the variables came through from_json.
std::int64_t text_bytes(const Value& v, int depth) {
    if (depth > kMaxTemplateValueDepth) return 0;
    if (v.is_string()) return static_cast<std::int64_t>(v.as_string().size());
    std::int64_t n = 0;
    if (v.is_array()) {
        for (const auto& item : v.items()) n += text_bytes(item, depth + 1);
    } else if (v.is_object()) {
        for (const auto& [k, item] : v.object_data().entries) {
            n += static_cast<std::int64_t>(k.size()) + text_bytes(item, depth + 1);
        }
    }
    return n;
}

}  // namespace

const Value* Scope::find(std::string_view name) const {
    for (const auto& [k, v] : vars) {
        if (k == name) return &v;
    }
    if (loop && name == "loop") {
        if (!built_loop_) built_loop_ = make_loop_object(*loop);
        return &*built_loop_;
    }
    return nullptr;
}

void Scope::set(const std::string& name, Value value) {
    for (auto& [k, v] : vars) {
        if (k == name) {
            v = std::move(value);
            return;
        }
    }
    vars.emplace_back(name, std::move(value));
}

Interpreter::Interpreter(const Program& program, const CivilTime& now)
    : program_(program), now_(now) {}

std::string Interpreter::render(const Value& context) {
    auto root = std::make_shared<Scope>(nullptr);
    root_ = root;
    ObjectData globals;
    install_globals(globals);
    for (auto& [k, v] : globals.entries) root->set(k, v);
    if (context.is_object()) {
        for (const auto& [k, v] : context.object_data().entries) root->set(k, v);
    }
    budget_ = RenderBudget(text_bytes(context, 0));
    const BudgetScope current(&budget_);
    // Declared after the budget's scope, so the containers it frees give their charge back
    // to this render's budget.
    struct CycleBreaker {
        Interpreter& interp;
        ~CycleBreaker() { interp.break_namespace_cycles(); }
    } const cycle_breaker{*this};
    std::string out;
    exec_list(program_.body, root, out);
    return out;
}

Value Interpreter::lookup(const std::string& name, const ScopePtr& scope) const {
    for (const Scope* s = scope.get(); s != nullptr; s = s->parent.get()) {
        if (const Value* v = s->find(name)) return *v;
    }
    return Value::undefined("'" + name + "' is undefined");
}

Interpreter::Flow Interpreter::exec_list(const StmtList& body, const ScopePtr& scope,
                                         std::string& out) {
    for (const auto& stmt : body) {
        const Flow flow = exec(*stmt, scope, out);
        if (flow != Flow::Normal) return flow;
    }
    return Flow::Normal;
}

Interpreter::Flow Interpreter::exec(const Stmt& stmt, const ScopePtr& scope, std::string& out) {
    try {
        const DepthGuard guard(exec_depth_, kMaxExecDepth,
                               [] { fail("template nesting too deep"); });
        budget_.step();
        switch (stmt.kind) {
            case StmtKind::Output: {
                const std::string& text = static_cast<const OutputStmt&>(stmt).text;
                budget_.charge_text(static_cast<std::int64_t>(text.size()));
                out += text;
                break;
            }
            case StmtKind::Print: {
                const std::string text =
                    to_str(eval(*static_cast<const PrintStmt&>(stmt).expr, scope));
                budget_.charge_text(static_cast<std::int64_t>(text.size()));
                out += text;
                break;
            }
            case StmtKind::If:
                return exec_if(static_cast<const IfStmt&>(stmt), scope, out);
            case StmtKind::For:
                return exec_for(static_cast<const ForStmt&>(stmt), scope, out);
            case StmtKind::Set:
                exec_set(static_cast<const SetStmt&>(stmt), scope);
                break;
            case StmtKind::SetBlock:
                exec_set_block(static_cast<const SetBlockStmt&>(stmt), scope);
                break;
            case StmtKind::Macro: {
                const auto& m = static_cast<const MacroStmt&>(stmt);
                scope->set(m.name, Value(std::make_shared<MacroCallable>(&m, scope)));
                break;
            }
            case StmtKind::CallBlock:
                exec_call_block(static_cast<const CallBlockStmt&>(stmt), scope, out);
                break;
            case StmtKind::FilterBlock:
                exec_filter_block(static_cast<const FilterBlockStmt&>(stmt), scope, out);
                break;
            case StmtKind::With:
                return exec_with(static_cast<const WithStmt&>(stmt), scope, out);
            case StmtKind::Break:
                return Flow::Break;
            case StmtKind::Continue:
                return Flow::Continue;
        }
    } catch (const TemplateError& e) {
        // Attach the innermost statement's line to errors raised without one.
        if (e.line() != 0 || e.kind() == TemplateError::Kind::Syntax) throw;
        throw TemplateError(e.kind(), e.message(), stmt.line);
    }
    return Flow::Normal;
}

Interpreter::Flow Interpreter::exec_if(const IfStmt& node, const ScopePtr& scope,
                                       std::string& out) {
    for (const auto& [cond, body] : node.branches) {
        if (eval(*cond, scope).truthy()) return exec_list(body, scope, out);
    }
    return exec_list(node.else_body, scope, out);
}

Interpreter::Flow Interpreter::exec_for(const ForStmt& node, const ScopePtr& scope,
                                        std::string& out) {
    std::vector<Value> iterated = iterate(eval(*node.iterable, scope));
    if (node.filter) {
        // `for x in xs if cond` filters first; loop.index and loop.length count what is kept.
        std::vector<Value> kept;
        for (auto& item : iterated) {
            budget_.step();
            auto frame = std::make_shared<Scope>(scope);
            assign(node.target, item, frame);
            if (eval(*node.filter, frame).truthy()) kept.push_back(std::move(item));
        }
        iterated = std::move(kept);
    }
    if (iterated.empty()) {
        // A break or continue in the else block belongs to an enclosing loop.
        return exec_list(node.else_body, std::make_shared<Scope>(scope), out);
    }
    const auto items = std::make_shared<const std::vector<Value>>(std::move(iterated));
    const auto changed = std::make_shared<ChangedCallable>();
    for (std::size_t i = 0; i < items->size(); ++i) {
        // An iteration is a step even with an empty body, so empty nested loops end too.
        budget_.step();
        // A fresh frame per iteration: jinja2 does not carry {% set %} across iterations.
        auto frame = std::make_shared<Scope>(scope);
        assign(node.target, (*items)[i], frame);
        frame->loop = LoopSource{items, i, changed};
        if (exec_list(node.body, frame, out) == Flow::Break) break;
    }
    return Flow::Normal;
}

void Interpreter::assign(const AssignTarget& target, const Value& value, const ScopePtr& scope) {
    if (!target.unpack) {
        scope->set(target.names.front(), value);
        return;
    }
    if (value.is_undefined()) fail_undefined(value);
    if (!value.is_array() && !value.is_string() && !value.is_object()) {
        fail("cannot unpack non-iterable " + value.type_name() + " object");
    }
    const std::vector<Value> parts = iterate(value);
    const std::size_t want = target.names.size();
    if (parts.size() < want) {
        fail("not enough values to unpack (expected " + std::to_string(want) + ", got " +
             std::to_string(parts.size()) + ")");
    }
    if (parts.size() > want) {
        fail("too many values to unpack (expected " + std::to_string(want) + ")");
    }
    for (std::size_t i = 0; i < want; ++i) scope->set(target.names[i], parts[i]);
}

void Interpreter::exec_set(const SetStmt& node, const ScopePtr& scope) {
    Value value = eval(*node.value, scope);
    if (!node.target.ns_attr.empty()) {
        set_namespace_attr(node.target.names.front(), node.target.ns_attr, std::move(value), scope);
        return;
    }
    assign(node.target, value, scope);
}

void Interpreter::exec_set_block(const SetBlockStmt& node, const ScopePtr& scope) {
    std::string text;
    exec_list(node.body, std::make_shared<Scope>(scope), text);
    Value value(std::move(text));
    if (node.filter) value = apply_filter_chain(node.filter.get(), std::move(value), scope);
    if (!node.target.ns_attr.empty()) {
        set_namespace_attr(node.target.names.front(), node.target.ns_attr, std::move(value), scope);
        return;
    }
    assign(node.target, value, scope);
}

void Interpreter::set_namespace_attr(const std::string& name, const std::string& attr, Value value,
                                     const ScopePtr& scope) {
    const Value ns = lookup(name, scope);
    if (!ns.is_namespace()) fail("cannot assign attribute on non-namespace object");
    ObjectData& data = ns.mutable_object_data();
    std::weak_ptr<ObjectData>& known = assigned_namespaces_[&data];
    if (known.expired()) {
        known = ns.object_handle();
        if (assigned_namespaces_.size() >= 2 * namespaces_compacted_at_ + 64) {
            std::erase_if(assigned_namespaces_, [](const auto& kv) { return kv.second.expired(); });
            namespaces_compacted_at_ = assigned_namespaces_.size();
        }
    }
    data.set(attr, std::move(value));
}

void Interpreter::break_namespace_cycles() {
    for (const auto& [address, weak] : assigned_namespaces_) {
        if (const auto ns = weak.lock()) {
            // Moved out first: destroying an entry may reach this namespace again.
            const auto entries = std::move(ns->entries);
            ns->entries.clear();
        }
    }
    assigned_namespaces_.clear();
}

void Interpreter::exec_call_block(const CallBlockStmt& node, const ScopePtr& scope,
                                  std::string& out) {
    const auto& call = static_cast<const CallExpr&>(*node.call);
    const Value callee = eval(*call.callee, scope);
    if (callee.is_undefined()) fail_undefined(callee);
    CallArgs args = eval_args(call.args, scope);
    args.keyword.emplace_back("caller", Value(std::make_shared<CallerCallable>(&node, scope)));
    out += to_str(call_value(*this, callee, args));
}

void Interpreter::exec_filter_block(const FilterBlockStmt& node, const ScopePtr& scope,
                                    std::string& out) {
    std::string text;
    exec_list(node.body, std::make_shared<Scope>(scope), text);
    out += to_str(apply_filter_chain(node.filter.get(), Value(std::move(text)), scope));
}

Interpreter::Flow Interpreter::exec_with(const WithStmt& node, const ScopePtr& scope,
                                         std::string& out) {
    auto frame = std::make_shared<Scope>(scope);
    for (const auto& [target, expr] : node.assignments) assign(target, eval(*expr, frame), frame);
    return exec_list(node.body, frame, out);
}

Value Interpreter::apply_filter_chain(const Expr* filter, Value input, const ScopePtr& scope) {
    const Value* saved = block_input_;
    block_input_ = &input;
    Value result = eval(*filter, scope);
    block_input_ = saved;
    return result;
}

void Interpreter::bind_params(const std::string& name, const std::vector<MacroParam>& params,
                              CallArgs& args, const ScopePtr& frame) {
    // Extra arguments land in `varargs` / `kwargs`; jinja2 only accepts them when the macro
    // body mentions those names, a check this interpreter leaves out.
    std::vector<Value> varargs;
    Value kwargs = Value::object();
    for (std::size_t i = 0; i < params.size(); ++i) {
        const MacroParam& p = params[i];
        Value value;
        bool bound = false;
        if (i < args.positional.size()) {
            value = args.positional[i];
            bound = true;
        }
        for (auto& [k, v] : args.keyword) {
            if (k == p.name) {
                if (bound)
                    fail("macro '" + name + "' got multiple values for argument '" + k + "'");
                value = v;
                bound = true;
            }
        }
        if (!bound) {
            value = p.default_value
                        ? eval(*p.default_value, frame)
                        : Value::undefined("parameter '" + p.name + "' was not provided");
        }
        frame->set(p.name, std::move(value));
    }
    for (std::size_t i = params.size(); i < args.positional.size(); ++i) {
        varargs.push_back(args.positional[i]);
    }
    for (auto& [k, v] : args.keyword) {
        bool is_param = k == "caller";
        for (const auto& p : params) is_param = is_param || p.name == k;
        if (!is_param) kwargs.mutable_object_data().set(k, v);
        if (k == "caller") frame->set("caller", v);
    }
    frame->set("varargs", Value::array(std::move(varargs), true));
    frame->set("kwargs", std::move(kwargs));
}

Value Interpreter::call_macro(const MacroStmt& macro, const ScopePtr& closure, CallArgs& args) {
    const DepthGuard guard(call_depth_, kMaxCallDepth,
                           [] { fail("maximum recursion depth exceeded in macro calls"); });
    // A macro that outlived the frame it was defined in (stored in a namespace inside a loop)
    // still sees the template's top-level variables.
    auto frame = std::make_shared<Scope>(closure ? closure : root_);
    bind_params(macro.name, macro.params, args, frame);
    std::string out;
    exec_list(macro.body, frame, out);
    return Value(std::move(out));
}

Value Interpreter::call_caller(const CallBlockStmt& block, const ScopePtr& closure,
                               CallArgs& args) {
    auto frame = std::make_shared<Scope>(closure ? closure : root_);
    bind_params("caller", block.caller_params, args, frame);
    std::string out;
    exec_list(block.body, frame, out);
    return Value(std::move(out));
}

CallArgs Interpreter::eval_args(const ArgExprs& args, const ScopePtr& scope) {
    CallArgs out;
    out.positional.reserve(args.positional.size());
    for (const auto& a : args.positional) out.positional.push_back(eval(*a, scope));
    for (const auto& [k, e] : args.keyword) out.keyword.emplace_back(k, eval(*e, scope));
    return out;
}

Value Interpreter::eval(const Expr& expr, const ScopePtr& scope) {
    budget_.step();
    Value v = eval_uncharged(expr, scope);
    // Every string an expression yields is new text or a copy of one: either way, memory.
    if (v.is_string()) budget_.charge_text(static_cast<std::int64_t>(v.as_string().size()));
    return v;
}

Value Interpreter::eval_uncharged(const Expr& expr, const ScopePtr& scope) {
    switch (expr.kind) {
        case ExprKind::Literal:
            return static_cast<const LiteralExpr&>(expr).value;
        case ExprKind::Name:
            return lookup(static_cast<const NameExpr&>(expr).name, scope);
        case ExprKind::List: {
            const auto& node = static_cast<const ListExpr&>(expr);
            std::vector<Value> items;
            items.reserve(node.items.size());
            for (const auto& e : node.items) items.push_back(eval(*e, scope));
            return Value::array(std::move(items), node.tuple);
        }
        case ExprKind::Dict: {
            Value dict = Value::object();
            for (const auto& [k, v] : static_cast<const DictExpr&>(expr).items) {
                const Value key = eval(*k, scope);
                if (!key.is_string()) fail("only strings can be dict keys in this template engine");
                dict.mutable_object_data().set(key.as_string(), eval(*v, scope));
            }
            return dict;
        }
        case ExprKind::GetAttr: {
            const auto& node = static_cast<const GetAttrExpr&>(expr);
            const Value object = eval(*node.object, scope);
            if (object.is_undefined()) fail_undefined(object);
            return get_attribute(object, node.name);
        }
        case ExprKind::GetItem: {
            const auto& node = static_cast<const GetItemExpr&>(expr);
            const Value object = eval(*node.object, scope);
            if (object.is_undefined()) fail_undefined(object);
            return get_item(object, eval(*node.index, scope));
        }
        case ExprKind::Slice: {
            const auto& node = static_cast<const SliceExpr&>(expr);
            const Value object = eval(*node.object, scope);
            if (object.is_undefined()) fail_undefined(object);
            auto part = [&](const ExprPtr& e) { return e ? eval(*e, scope) : Value::none(); };
            return slice_value(object, part(node.start), part(node.stop), part(node.step));
        }
        case ExprKind::Call: {
            const auto& node = static_cast<const CallExpr&>(expr);
            const Value callee = eval(*node.callee, scope);
            if (callee.is_undefined()) fail_undefined(callee);
            CallArgs args = eval_args(node.args, scope);
            return call_value(*this, callee, args);
        }
        case ExprKind::Filter:
            return eval_filter(static_cast<const FilterExpr&>(expr), scope);
        case ExprKind::Test: {
            const auto& node = static_cast<const TestExpr&>(expr);
            const Value operand = eval(*node.operand, scope);
            CallArgs args = eval_args(node.args, scope);
            return Value(apply_test(*this, node.name, operand, args) != node.negated);
        }
        case ExprKind::Unary:
            return eval_unary(static_cast<const UnaryExpr&>(expr), scope);
        case ExprKind::Binary:
            return eval_binary(static_cast<const BinaryExpr&>(expr), scope);
        case ExprKind::Compare:
            return eval_compare(static_cast<const CompareExpr&>(expr), scope);
        case ExprKind::Cond: {
            const auto& node = static_cast<const CondExpr&>(expr);
            if (eval(*node.test, scope).truthy()) return eval(*node.then_expr, scope);
            if (node.else_expr) return eval(*node.else_expr, scope);
            return Value::undefined("the inline if-expression on line " +
                                    std::to_string(node.line) +
                                    " evaluated to false and no else section was defined.");
        }
    }
    return Value();
}

Value Interpreter::eval_filter(const FilterExpr& node, const ScopePtr& scope) {
    Value operand;
    if (node.operand) {
        operand = eval(*node.operand, scope);
    } else if (block_input_ != nullptr) {
        operand = *block_input_;
    }
    CallArgs args = eval_args(node.args, scope);
    return apply_filter(*this, node.name, operand, args);
}

Value Interpreter::eval_unary(const UnaryExpr& node, const ScopePtr& scope) {
    const Value v = eval(*node.operand, scope);
    if (node.op == UnaryOp::Not) return Value(!v.truthy());
    if (v.is_undefined()) fail_undefined(v);
    if (!v.is_number()) {
        fail(std::string("bad operand type for unary ") + (node.op == UnaryOp::Neg ? "-" : "+") +
             ": '" + v.type_name() + "'");
    }
    if (node.op == UnaryOp::Pos) return v.is_bool() ? Value(v.as_integer()) : v;
    if (v.is_float()) return Value(-v.as_double());
    return Value(-v.as_integer());
}

Value Interpreter::eval_binary(const BinaryExpr& node, const ScopePtr& scope) {
    if (node.op == BinaryOp::And || node.op == BinaryOp::Or) {
        // Python's and/or return an operand, not a bool.
        Value left = eval(*node.left, scope);
        const bool take_left = node.op == BinaryOp::And ? !left.truthy() : left.truthy();
        return take_left ? left : eval(*node.right, scope);
    }
    const Value left = eval(*node.left, scope);
    const Value right = eval(*node.right, scope);
    if (node.op == BinaryOp::Concat) {
        std::string a = to_str(left);
        const std::string b = to_str(right);
        // Checked before building: `s ~ s` doubles, and the doubled string is the allocation
        // that must not happen once the budget is spent.
        check_size(static_cast<std::int64_t>(a.size() + b.size()));
        return Value(std::move(a) + b);
    }
    return arithmetic(node.op, left, right);
}

Value Interpreter::eval_compare(const CompareExpr& node, const ScopePtr& scope) {
    Value left = eval(*node.first, scope);
    for (const auto& [op, expr] : node.rest) {
        Value right = eval(*expr, scope);
        bool ok = false;
        switch (op) {
            case CompareOp::Eq:
                ok = values_equal(left, right);
                break;
            case CompareOp::Ne:
                ok = !values_equal(left, right);
                break;
            case CompareOp::Lt:
                ok = compare_values(left, right, "<") < 0;
                break;
            case CompareOp::Le:
                ok = compare_values(left, right, "<=") <= 0;
                break;
            case CompareOp::Gt:
                ok = compare_values(left, right, ">") > 0;
                break;
            case CompareOp::Ge:
                ok = compare_values(left, right, ">=") >= 0;
                break;
            case CompareOp::In:
                ok = contains(right, left);
                break;
            case CompareOp::NotIn:
                ok = !contains(right, left);
                break;
        }
        if (!ok) return Value(false);
        left = std::move(right);
    }
    return Value(true);
}

}  // namespace ember::jinja
