// Tree-walking interpreter for chat templates. One Interpreter renders one template once; it
// holds the render's state (scopes, output, clock), so concurrent renders use separate ones.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/template/template_ast.h"
#include "engine/template/template_builtins.h"
#include "engine/template/template_strings.h"
#include "engine/template/template_value.h"

namespace ember::jinja {

// Where a for loop's iteration frame gets its `loop` variable from: built only when the body
// looks it up, because building it (13 entries, two callables) is most of an iteration's cost
// and most bodies never read it. The frames share the items, so whoever holds a frame never
// holds a pointer into a vector that has gone.
struct LoopSource {
    std::shared_ptr<const std::vector<Value>> items;
    std::size_t index = 0;
    std::shared_ptr<const Callable> changed;
};

// A frame of variables. jinja2 gives each loop iteration, macro call and {% with %} a frame of
// its own; {% if %} does not. Lookups walk up the parents.
struct Scope {
    explicit Scope(std::shared_ptr<Scope> p) : parent(std::move(p)) {}
    std::shared_ptr<Scope> parent;
    std::vector<std::pair<std::string, Value>> vars;
    // Set on a loop iteration's frame: `loop`, unless vars has one, is built from it on first
    // lookup.
    std::optional<LoopSource> loop;

    const Value* find(std::string_view name) const;
    void set(const std::string& name, Value value);

private:
    // find() is const for its callers; materializing `loop` is a cache fill, not a change
    // anything can see.
    mutable std::optional<Value> built_loop_;
};
using ScopePtr = std::shared_ptr<Scope>;

class Interpreter {
public:
    Interpreter(const Program& program, const CivilTime& now);

    // Renders the program with the entries of `context` (a dict) as template variables.
    std::string render(const Value& context);

    const CivilTime& now() const { return now_; }
    Value call_macro(const MacroStmt& macro, const ScopePtr& closure, CallArgs& args);
    Value call_caller(const CallBlockStmt& block, const ScopePtr& closure, CallArgs& args);

private:
    enum class Flow { Normal, Break, Continue };

    Flow exec_list(const StmtList& body, const ScopePtr& scope, std::string& out);
    Flow exec(const Stmt& stmt, const ScopePtr& scope, std::string& out);
    Flow exec_if(const IfStmt& node, const ScopePtr& scope, std::string& out);
    Flow exec_for(const ForStmt& node, const ScopePtr& scope, std::string& out);
    void exec_set(const SetStmt& node, const ScopePtr& scope);
    void exec_set_block(const SetBlockStmt& node, const ScopePtr& scope);
    void exec_call_block(const CallBlockStmt& node, const ScopePtr& scope, std::string& out);
    void exec_filter_block(const FilterBlockStmt& node, const ScopePtr& scope, std::string& out);
    Flow exec_with(const WithStmt& node, const ScopePtr& scope, std::string& out);
    void assign(const AssignTarget& target, const Value& value, const ScopePtr& scope);
    // Binds macro or caller parameters from call arguments into `frame`.
    void bind_params(const std::string& name, const std::vector<MacroParam>& params, CallArgs& args,
                     const ScopePtr& frame);

    // Evaluates and charges the budget: one step, and the length of a string result.
    Value eval(const Expr& expr, const ScopePtr& scope);
    Value eval_uncharged(const Expr& expr, const ScopePtr& scope);
    Value eval_filter(const FilterExpr& node, const ScopePtr& scope);
    Value eval_binary(const BinaryExpr& node, const ScopePtr& scope);
    Value eval_compare(const CompareExpr& node, const ScopePtr& scope);
    Value eval_unary(const UnaryExpr& node, const ScopePtr& scope);
    CallArgs eval_args(const ArgExprs& args, const ScopePtr& scope);
    Value lookup(const std::string& name, const ScopePtr& scope) const;
    Value apply_filter_chain(const Expr* filter, Value input, const ScopePtr& scope);
    // `{% set ns.attr = value %}` and its block form: the one way a template changes a
    // container after building it, so the one way it can make a cycle (`ns.x = [ns]`).
    void set_namespace_attr(const std::string& name, const std::string& attr, Value value,
                            const ScopePtr& scope);
    // Empties the namespaces the render assigned to that are still alive, so that a cycle a
    // template made does not outlive the render (shared_ptr alone would leak it). Runs when
    // render() ends, normally or by an error.
    void break_namespace_cycles();

    const Program& program_;
    CivilTime now_;
    ScopePtr root_;  // the template's top-level frame
    // The value a null operand of a filter chain stands for ({% filter %}, {% set x | f %}).
    const Value* block_input_ = nullptr;
    int call_depth_ = 0;
    int exec_depth_ = 0;
    RenderBudget budget_{0};
    // Every namespace assigned to in this render, by address while alive (an address freed
    // and reused holds an expired handle, replaced; expired ones are dropped whenever the map
    // doubles, so a loop making a namespace per iteration keeps it small).
    std::unordered_map<const ObjectData*, std::weak_ptr<ObjectData>> assigned_namespaces_;
    std::size_t namespaces_compacted_at_ = 0;
};

// Python's binary arithmetic (+ - * / // % **) with its type rules and error messages.
Value arithmetic(BinaryOp op, const Value& a, const Value& b);

}  // namespace ember::jinja
