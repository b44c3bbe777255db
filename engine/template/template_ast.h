// Syntax tree of a compiled chat template. Nodes are plain structs tagged with a kind; the
// interpreter switches on the kind. The tree is immutable once parsed, so one compiled
// template can be rendered from several threads at once.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/template/template_value.h"

namespace ember::jinja {

enum class ExprKind {
    Literal,
    Name,
    List,  // also tuples
    Dict,
    GetAttr,  // x.name
    GetItem,  // x[i]
    Slice,    // x[a:b:c]
    Call,
    Filter,
    Test,
    Unary,
    Binary,
    Compare,  // a < b <= c chains
    Cond,     // a if c else b
};

struct Expr {
    Expr(ExprKind k, int l) : kind(k), line(l) {}
    virtual ~Expr() = default;
    ExprKind kind;
    int line;
};
using ExprPtr = std::unique_ptr<Expr>;

struct ArgExprs {
    std::vector<ExprPtr> positional;
    std::vector<std::pair<std::string, ExprPtr>> keyword;
};

struct LiteralExpr : Expr {
    LiteralExpr(Value v, int l) : Expr(ExprKind::Literal, l), value(std::move(v)) {}
    Value value;
};

struct NameExpr : Expr {
    NameExpr(std::string n, int l) : Expr(ExprKind::Name, l), name(std::move(n)) {}
    std::string name;
};

struct ListExpr : Expr {
    ListExpr(bool t, int l) : Expr(ExprKind::List, l), tuple(t) {}
    std::vector<ExprPtr> items;
    bool tuple;
};

struct DictExpr : Expr {
    explicit DictExpr(int l) : Expr(ExprKind::Dict, l) {}
    std::vector<std::pair<ExprPtr, ExprPtr>> items;
};

struct GetAttrExpr : Expr {
    GetAttrExpr(ExprPtr o, std::string n, int l)
        : Expr(ExprKind::GetAttr, l), object(std::move(o)), name(std::move(n)) {}
    ExprPtr object;
    std::string name;
};

struct GetItemExpr : Expr {
    GetItemExpr(ExprPtr o, ExprPtr i, int l)
        : Expr(ExprKind::GetItem, l), object(std::move(o)), index(std::move(i)) {}
    ExprPtr object;
    ExprPtr index;
};

struct SliceExpr : Expr {
    explicit SliceExpr(int l) : Expr(ExprKind::Slice, l) {}
    ExprPtr object;
    ExprPtr start;  // null parts were left out: x[:2]
    ExprPtr stop;
    ExprPtr step;
};

struct CallExpr : Expr {
    explicit CallExpr(int l) : Expr(ExprKind::Call, l) {}
    ExprPtr callee;
    ArgExprs args;
};

// `operand | name(args)`. In {% filter %} and {% set x | f %} blocks the innermost operand is
// null and stands for the rendered block.
struct FilterExpr : Expr {
    explicit FilterExpr(int l) : Expr(ExprKind::Filter, l) {}
    ExprPtr operand;
    std::string name;
    ArgExprs args;
};

struct TestExpr : Expr {
    explicit TestExpr(int l) : Expr(ExprKind::Test, l) {}
    ExprPtr operand;
    std::string name;
    ArgExprs args;
    bool negated = false;
};

enum class UnaryOp { Not, Neg, Pos };

struct UnaryExpr : Expr {
    UnaryExpr(UnaryOp o, ExprPtr e, int l)
        : Expr(ExprKind::Unary, l), op(o), operand(std::move(e)) {}
    UnaryOp op;
    ExprPtr operand;
};

enum class BinaryOp { Add, Sub, Mul, Div, FloorDiv, Mod, Pow, Concat, And, Or };

struct BinaryExpr : Expr {
    BinaryExpr(BinaryOp o, ExprPtr a, ExprPtr b, int l)
        : Expr(ExprKind::Binary, l), op(o), left(std::move(a)), right(std::move(b)) {}
    BinaryOp op;
    ExprPtr left;
    ExprPtr right;
};

enum class CompareOp { Eq, Ne, Lt, Le, Gt, Ge, In, NotIn };

struct CompareExpr : Expr {
    explicit CompareExpr(int l) : Expr(ExprKind::Compare, l) {}
    ExprPtr first;
    std::vector<std::pair<CompareOp, ExprPtr>> rest;
};

struct CondExpr : Expr {
    explicit CondExpr(int l) : Expr(ExprKind::Cond, l) {}
    ExprPtr test;
    ExprPtr then_expr;
    ExprPtr else_expr;  // null: an Undefined when the test fails
};

enum class StmtKind {
    Output,  // template text
    Print,   // {{ expr }}
    If,
    For,
    Set,
    SetBlock,
    Macro,
    CallBlock,
    FilterBlock,
    With,
    Break,
    Continue,
};

struct Stmt {
    Stmt(StmtKind k, int l) : kind(k), line(l) {}
    virtual ~Stmt() = default;
    StmtKind kind;
    int line;
};
using StmtPtr = std::unique_ptr<Stmt>;
using StmtList = std::vector<StmtPtr>;

// Where {% set %}, {% for %} and {% with %} store values: one name, several names unpacked
// from a sequence, or an attribute of a namespace (`ns.attr`).
struct AssignTarget {
    std::vector<std::string> names;
    bool unpack = false;
    std::string ns_attr;  // set: `names[0].ns_attr = ...`
};

struct OutputStmt : Stmt {
    OutputStmt(std::string t, int l) : Stmt(StmtKind::Output, l), text(std::move(t)) {}
    std::string text;
};

struct PrintStmt : Stmt {
    PrintStmt(ExprPtr e, int l) : Stmt(StmtKind::Print, l), expr(std::move(e)) {}
    ExprPtr expr;
};

struct IfStmt : Stmt {
    explicit IfStmt(int l) : Stmt(StmtKind::If, l) {}
    std::vector<std::pair<ExprPtr, StmtList>> branches;  // if, then each elif
    StmtList else_body;
};

struct ForStmt : Stmt {
    explicit ForStmt(int l) : Stmt(StmtKind::For, l) {}
    AssignTarget target;
    ExprPtr iterable;
    ExprPtr filter;  // `for x in xs if cond`
    StmtList body;
    StmtList else_body;
};

struct SetStmt : Stmt {
    explicit SetStmt(int l) : Stmt(StmtKind::Set, l) {}
    AssignTarget target;
    ExprPtr value;
};

struct SetBlockStmt : Stmt {
    explicit SetBlockStmt(int l) : Stmt(StmtKind::SetBlock, l) {}
    AssignTarget target;
    ExprPtr filter;  // a FilterExpr chain with a null innermost operand, or null
    StmtList body;
};

struct MacroParam {
    std::string name;
    ExprPtr default_value;  // null: no default
};

struct MacroStmt : Stmt {
    explicit MacroStmt(int l) : Stmt(StmtKind::Macro, l) {}
    std::string name;
    std::vector<MacroParam> params;
    StmtList body;
};

struct CallBlockStmt : Stmt {
    explicit CallBlockStmt(int l) : Stmt(StmtKind::CallBlock, l) {}
    ExprPtr call;  // a CallExpr
    std::vector<MacroParam> caller_params;
    StmtList body;
};

struct FilterBlockStmt : Stmt {
    explicit FilterBlockStmt(int l) : Stmt(StmtKind::FilterBlock, l) {}
    ExprPtr filter;
    StmtList body;
};

struct WithStmt : Stmt {
    explicit WithStmt(int l) : Stmt(StmtKind::With, l) {}
    std::vector<std::pair<AssignTarget, ExprPtr>> assignments;
    StmtList body;
};

struct Program {
    StmtList body;
};

}  // namespace ember::jinja
