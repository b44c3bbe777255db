#include "engine/template/template_parser.h"

#include <algorithm>

#include "engine/template/template.h"
#include "engine/template/template_builtins.h"
#include "engine/template/template_lexer.h"

namespace ember::jinja {

namespace {

// Deep enough for any real template (they nest blocks and parentheses a dozen levels), shallow
// enough that hostile nesting such as "((((..." or a thousand nested {% if %} cannot exhaust
// the stack of the recursive descent, or of the walks over the tree it builds (name checks,
// rendering, destruction), in any build: 1,000 overflowed 8 MiB under AddressSanitizer.
// Templates come from model files.
constexpr int kMaxNesting = 256;

class Parser {
public:
    explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

    std::unique_ptr<Program> parse() {
        auto program = std::make_unique<Program>();
        program->body = subparse({});
        check_names(program->body, false);
        return program;
    }

private:
    // ---- token stream -------------------------------------------------------------------

    const Token& cur() const { return toks_[pos_]; }
    const Token& peek() const { return toks_[std::min(pos_ + 1, toks_.size() - 1)]; }
    const Token& next() {
        const Token& t = toks_[pos_];
        if (pos_ + 1 < toks_.size()) ++pos_;
        return t;
    }
    bool at_op(std::string_view op) const {
        return cur().type == TokenType::Operator && cur().text == op;
    }
    bool at_name(std::string_view name) const {
        return cur().type == TokenType::Name && cur().text == name;
    }
    bool skip_op(std::string_view op) {
        if (!at_op(op)) return false;
        next();
        return true;
    }
    bool skip_name(std::string_view name) {
        if (!at_name(name)) return false;
        next();
        return true;
    }

    [[noreturn]] void fail_at(const Token& t, const std::string& message) const {
        throw TemplateError(TemplateError::Kind::Syntax, message, t.line);
    }
    [[noreturn]] void fail_expected(const std::string& what) const {
        if (cur().type == TokenType::Eof) {
            fail_at(cur(), "unexpected end of template, expected '" + what + "'.");
        }
        fail_at(cur(), "expected token '" + what + "', got '" + describe_token(cur()) + "'");
    }
    void expect_op(std::string_view op) {
        if (!skip_op(op)) fail_expected(std::string(op));
    }
    void expect_block_end() {
        if (cur().type != TokenType::BlockEnd) fail_expected("end of statement block");
        next();
    }
    std::string expect_name() {
        if (cur().type != TokenType::Name) fail_expected("name");
        return next().text;
    }

    [[noreturn]] void fail_too_deep() const {
        fail_at(cur(), "template nests deeper than " + std::to_string(kMaxNesting) + " levels");
    }

    // Counts one level of recursion for as long as it lives.
    class Nest {
    public:
        explicit Nest(Parser& p) : p_(p) {
            if (++p_.depth_ > kMaxNesting) p_.fail_too_deep();
        }
        ~Nest() { --p_.depth_; }
        Nest(const Nest&) = delete;
        Nest& operator=(const Nest&) = delete;

    private:
        Parser& p_;
    };

    // A chain parsed in a loop (a + b + c, x.a.b, x | f | g) builds a tree one level deeper
    // per link without recursing here, but everything that walks the tree recurses: each link
    // counts as a level of nesting until the chain is parsed (1+1+...+1 of 50,000 terms
    // overflowed the stack in check_expr).
    class Chain {
    public:
        explicit Chain(Parser& p) : p_(p) {}
        void link() {
            if (++p_.depth_ > kMaxNesting) p_.fail_too_deep();
            ++links_;
        }
        ~Chain() { p_.depth_ -= links_; }
        Chain(const Chain&) = delete;
        Chain& operator=(const Chain&) = delete;

    private:
        Parser& p_;
        int links_ = 0;
    };

    // ---- statements ---------------------------------------------------------------------

    struct OpenBlock {
        std::string tag;
        std::vector<std::string> end_tags;
    };

    std::string looking_for() const {
        if (open_.empty()) return "";
        std::string tags;
        for (const auto& t : open_.back().end_tags) {
            tags += (tags.empty() ? "'" : " or '") + t + "'";
        }
        return " Jinja was looking for the following tags: " + tags +
               ". The innermost block that needs to be closed is '" + open_.back().tag + "'.";
    }

    // Parses nodes up to a {% tag %} named in `end_tags`, leaving the stream on that name.
    StmtList subparse(const std::vector<std::string>& end_tags) {
        const Nest nest(*this);
        StmtList body;
        while (true) {
            const Token& t = cur();
            switch (t.type) {
                case TokenType::Data:
                    body.push_back(std::make_unique<OutputStmt>(t.text, t.line));
                    next();
                    break;
                case TokenType::VariableBegin: {
                    next();
                    auto expr = parse_tuple(true, {}, false);
                    if (cur().type != TokenType::VariableEnd)
                        fail_expected("end of print statement");
                    next();
                    body.push_back(std::make_unique<PrintStmt>(std::move(expr), t.line));
                    break;
                }
                case TokenType::BlockBegin:
                    next();
                    if (cur().type == TokenType::Name &&
                        std::find(end_tags.begin(), end_tags.end(), cur().text) != end_tags.end()) {
                        return body;
                    }
                    parse_statement(body);
                    break;
                case TokenType::Eof:
                    if (!end_tags.empty())
                        fail_at(t, "Unexpected end of template." + looking_for());
                    return body;
                default:
                    fail_at(t, "unexpected '" + describe_token(t) + "'");
            }
        }
    }

    // Parses a body that ends with one of `end_tags`; returns the tag that ended it.
    std::string parse_body(StmtList& into, const std::vector<std::string>& end_tags) {
        into = subparse(end_tags);
        return next().text;
    }

    void parse_statement(StmtList& out) {
        const Token& t = cur();
        if (t.type != TokenType::Name) fail_at(t, "tag name expected");
        const std::string& tag = t.text;
        const int line = t.line;
        if (tag == "if") {
            out.push_back(parse_if());
        } else if (tag == "for") {
            out.push_back(parse_for());
        } else if (tag == "set") {
            out.push_back(parse_set());
        } else if (tag == "macro") {
            out.push_back(parse_macro());
        } else if (tag == "call") {
            out.push_back(parse_call_block());
        } else if (tag == "filter") {
            out.push_back(parse_filter_block());
        } else if (tag == "with") {
            out.push_back(parse_with());
        } else if (tag == "break" || tag == "continue") {
            next();
            if (loop_depth_ == 0) fail_at(t, "'" + tag + "' outside loop");
            expect_block_end();
            out.push_back(std::make_unique<Stmt>(
                tag == "break" ? StmtKind::Break : StmtKind::Continue, line));
        } else if (tag == "generation") {
            // HF transformers' {% generation %} marks assistant text for training masks; for
            // rendering it is transparent.
            next();
            expect_block_end();
            open_.push_back({"generation", {"endgeneration"}});
            StmtList body;
            parse_body(body, {"endgeneration"});
            expect_block_end();
            open_.pop_back();
            for (auto& s : body) out.push_back(std::move(s));
        } else {
            fail_at(t, "Encountered unknown tag '" + tag + "'." + looking_for());
        }
    }

    StmtPtr parse_if() {
        auto node = std::make_unique<IfStmt>(next().line);
        open_.push_back({"if", {"elif", "else", "endif"}});
        auto cond = parse_tuple(false, {}, false);
        while (true) {
            expect_block_end();
            StmtList body;
            const std::string end = parse_body(body, {"elif", "else", "endif"});
            node->branches.emplace_back(std::move(cond), std::move(body));
            if (end == "elif") {
                cond = parse_tuple(false, {}, false);
                continue;
            }
            if (end == "else") {
                expect_block_end();
                open_.back().end_tags = {"endif"};
                parse_body(node->else_body, {"endif"});
            }
            break;
        }
        expect_block_end();
        open_.pop_back();
        return node;
    }

    StmtPtr parse_for() {
        auto node = std::make_unique<ForStmt>(next().line);
        node->target = parse_assign_target(false, {"in"});
        if (!skip_name("in")) fail_expected("in");
        node->iterable = parse_tuple(false, {"recursive"}, false);
        if (skip_name("if")) node->filter = parse_expression(true);
        if (at_name("recursive")) fail_at(cur(), "recursive loops are not supported");
        expect_block_end();
        open_.push_back({"for", {"endfor", "else"}});
        ++loop_depth_;
        const std::string end = parse_body(node->body, {"endfor", "else"});
        --loop_depth_;
        if (end == "else") {
            expect_block_end();
            open_.back().end_tags = {"endfor"};
            parse_body(node->else_body, {"endfor"});
        }
        expect_block_end();
        open_.pop_back();
        return node;
    }

    StmtPtr parse_set() {
        const int line = next().line;
        AssignTarget target = parse_assign_target(true, {});
        if (skip_op("=")) {
            auto node = std::make_unique<SetStmt>(line);
            node->target = std::move(target);
            node->value = parse_tuple(true, {}, false);
            expect_block_end();
            return node;
        }
        auto node = std::make_unique<SetBlockStmt>(line);
        node->target = std::move(target);
        if (at_op("|")) node->filter = parse_filter_chain(false);
        expect_block_end();
        open_.push_back({"set", {"endset"}});
        parse_body(node->body, {"endset"});
        expect_block_end();
        open_.pop_back();
        return node;
    }

    StmtPtr parse_macro() {
        auto node = std::make_unique<MacroStmt>(next().line);
        node->name = expect_name();
        node->params = parse_signature();
        expect_block_end();
        open_.push_back({"macro", {"endmacro"}});
        const int saved_depth = loop_depth_;
        loop_depth_ = 0;  // a loop around a macro does not make `break` legal inside it
        parse_body(node->body, {"endmacro"});
        loop_depth_ = saved_depth;
        expect_block_end();
        open_.pop_back();
        return node;
    }

    StmtPtr parse_call_block() {
        auto node = std::make_unique<CallBlockStmt>(next().line);
        if (at_op("(")) node->caller_params = parse_signature();
        node->call = parse_expression(true);
        if (node->call->kind != ExprKind::Call) fail_at(cur(), "expected call");
        expect_block_end();
        open_.push_back({"call", {"endcall"}});
        const int saved_depth = loop_depth_;
        loop_depth_ = 0;
        parse_body(node->body, {"endcall"});
        loop_depth_ = saved_depth;
        expect_block_end();
        open_.pop_back();
        return node;
    }

    StmtPtr parse_filter_block() {
        auto node = std::make_unique<FilterBlockStmt>(next().line);
        node->filter = parse_filter_chain(true);
        expect_block_end();
        open_.push_back({"filter", {"endfilter"}});
        parse_body(node->body, {"endfilter"});
        expect_block_end();
        open_.pop_back();
        return node;
    }

    StmtPtr parse_with() {
        auto node = std::make_unique<WithStmt>(next().line);
        while (cur().type != TokenType::BlockEnd) {
            if (!node->assignments.empty()) expect_op(",");
            AssignTarget target = parse_assign_target(false, {});
            expect_op("=");
            node->assignments.emplace_back(std::move(target), parse_expression(true));
        }
        expect_block_end();
        open_.push_back({"with", {"endwith"}});
        parse_body(node->body, {"endwith"});
        expect_block_end();
        open_.pop_back();
        return node;
    }

    std::vector<MacroParam> parse_signature() {
        std::vector<MacroParam> params;
        expect_op("(");
        while (!at_op(")")) {
            if (!params.empty()) expect_op(",");
            MacroParam p;
            p.name = expect_name();
            if (skip_op("=")) {
                p.default_value = parse_expression(true);
            } else if (!params.empty() && params.back().default_value) {
                fail_at(cur(), "non-default argument follows default argument");
            }
            params.push_back(std::move(p));
        }
        expect_op(")");
        return params;
    }

    bool is_tuple_end(const std::vector<std::string>& extra_end) const {
        const Token& t = cur();
        if (t.type == TokenType::VariableEnd || t.type == TokenType::BlockEnd || at_op(")")) {
            return true;
        }
        return t.type == TokenType::Name &&
               std::find(extra_end.begin(), extra_end.end(), t.text) != extra_end.end();
    }

    AssignTarget parse_assign_target(bool with_namespace,
                                     const std::vector<std::string>& extra_end) {
        AssignTarget target;
        if (with_namespace && cur().type == TokenType::Name && peek().type == TokenType::Operator &&
            peek().text == ".") {
            target.names.push_back(next().text);
            next();
            target.ns_attr = expect_name();
            return target;
        }
        const bool parens = skip_op("(");
        while (true) {
            target.names.push_back(expect_name());
            if (!at_op(",")) break;
            next();
            target.unpack = true;
            if (is_tuple_end(extra_end)) break;
        }
        if (parens) {
            expect_op(")");
            target.unpack = true;
        }
        for (const auto& n : target.names) {
            if (n == "true" || n == "false" || n == "none" || n == "True" || n == "False" ||
                n == "None") {
                fail_at(cur(), "cannot assign to '" + n + "'");
            }
        }
        return target;
    }

    // ---- expressions --------------------------------------------------------------------

    ExprPtr parse_tuple(bool with_condexpr, const std::vector<std::string>& extra_end,
                        bool explicit_parens) {
        const int line = cur().line;
        std::vector<ExprPtr> items;
        bool is_tuple = false;
        while (true) {
            if (!items.empty()) expect_op(",");
            if (is_tuple_end(extra_end)) break;
            items.push_back(parse_expression(with_condexpr));
            if (!at_op(",")) break;
            is_tuple = true;
        }
        if (!is_tuple) {
            if (!items.empty()) return std::move(items.front());
            if (!explicit_parens) {
                fail_at(cur(), "Expected an expression, got '" + describe_token(cur()) + "'");
            }
        }
        auto node = std::make_unique<ListExpr>(true, line);
        node->items = std::move(items);
        return node;
    }

    ExprPtr parse_expression(bool with_condexpr) {
        const Nest nest(*this);
        return with_condexpr ? parse_condexpr() : parse_or();
    }

    ExprPtr parse_condexpr() {
        const Nest nest(*this);
        Chain chain(*this);
        ExprPtr expr = parse_or();
        while (at_name("if")) {
            chain.link();
            auto node = std::make_unique<CondExpr>(next().line);
            node->test = parse_or();
            if (skip_name("else")) node->else_expr = parse_condexpr();
            node->then_expr = std::move(expr);
            expr = std::move(node);
        }
        return expr;
    }

    ExprPtr parse_or() {
        Chain chain(*this);
        ExprPtr left = parse_and();
        while (at_name("or")) {
            chain.link();
            const int line = next().line;
            left = std::make_unique<BinaryExpr>(BinaryOp::Or, std::move(left), parse_and(), line);
        }
        return left;
    }

    ExprPtr parse_and() {
        Chain chain(*this);
        ExprPtr left = parse_not();
        while (at_name("and")) {
            chain.link();
            const int line = next().line;
            left = std::make_unique<BinaryExpr>(BinaryOp::And, std::move(left), parse_not(), line);
        }
        return left;
    }

    ExprPtr parse_not() {
        const Nest nest(*this);
        if (at_name("not")) {
            const int line = next().line;
            return std::make_unique<UnaryExpr>(UnaryOp::Not, parse_not(), line);
        }
        return parse_compare();
    }

    ExprPtr parse_compare() {
        const int line = cur().line;
        ExprPtr expr = parse_math1();
        auto node = std::make_unique<CompareExpr>(line);
        while (true) {
            CompareOp op{};
            if (cur().type == TokenType::Operator) {
                const std::string& t = cur().text;
                if (t == "==") {
                    op = CompareOp::Eq;
                } else if (t == "!=") {
                    op = CompareOp::Ne;
                } else if (t == "<") {
                    op = CompareOp::Lt;
                } else if (t == "<=") {
                    op = CompareOp::Le;
                } else if (t == ">") {
                    op = CompareOp::Gt;
                } else if (t == ">=") {
                    op = CompareOp::Ge;
                } else {
                    break;
                }
                next();
            } else if (at_name("in")) {
                next();
                op = CompareOp::In;
            } else if (at_name("not") && peek().type == TokenType::Name && peek().text == "in") {
                next();
                next();
                op = CompareOp::NotIn;
            } else {
                break;
            }
            node->rest.emplace_back(op, parse_math1());
        }
        if (node->rest.empty()) return expr;
        node->first = std::move(expr);
        return node;
    }

    ExprPtr parse_math1() {
        Chain chain(*this);
        ExprPtr left = parse_concat();
        while (at_op("+") || at_op("-")) {
            chain.link();
            const BinaryOp op = cur().text == "+" ? BinaryOp::Add : BinaryOp::Sub;
            const int line = next().line;
            left = std::make_unique<BinaryExpr>(op, std::move(left), parse_concat(), line);
        }
        return left;
    }

    ExprPtr parse_concat() {
        Chain chain(*this);
        ExprPtr left = parse_math2();
        while (at_op("~")) {
            chain.link();
            const int line = next().line;
            left = std::make_unique<BinaryExpr>(BinaryOp::Concat, std::move(left), parse_math2(),
                                                line);
        }
        return left;
    }

    ExprPtr parse_math2() {
        Chain chain(*this);
        ExprPtr left = parse_pow();
        while (at_op("*") || at_op("/") || at_op("//") || at_op("%")) {
            chain.link();
            const std::string& t = cur().text;
            const BinaryOp op = t == "*"    ? BinaryOp::Mul
                                : t == "/"  ? BinaryOp::Div
                                : t == "//" ? BinaryOp::FloorDiv
                                            : BinaryOp::Mod;
            const int line = next().line;
            left = std::make_unique<BinaryExpr>(op, std::move(left), parse_pow(), line);
        }
        return left;
    }

    ExprPtr parse_pow() {
        Chain chain(*this);
        ExprPtr left = parse_unary(true);
        while (at_op("**")) {
            chain.link();
            const int line = next().line;
            left = std::make_unique<BinaryExpr>(BinaryOp::Pow, std::move(left), parse_unary(true),
                                                line);
        }
        return left;
    }

    ExprPtr parse_unary(bool with_filter) {
        const Nest nest(*this);
        ExprPtr node;
        if (at_op("-") || at_op("+")) {
            const UnaryOp op = cur().text == "-" ? UnaryOp::Neg : UnaryOp::Pos;
            const int line = next().line;
            node = std::make_unique<UnaryExpr>(op, parse_unary(false), line);
        } else {
            node = parse_primary();
        }
        node = parse_postfix(std::move(node));
        if (with_filter) node = parse_filter_expr(std::move(node));
        return node;
    }

    ExprPtr parse_primary() {
        const Token& t = cur();
        const int line = t.line;
        switch (t.type) {
            case TokenType::Name: {
                next();
                if (t.text == "true" || t.text == "True")
                    return std::make_unique<LiteralExpr>(true, line);
                if (t.text == "false" || t.text == "False") {
                    return std::make_unique<LiteralExpr>(false, line);
                }
                if (t.text == "none" || t.text == "None") {
                    return std::make_unique<LiteralExpr>(Value::none(), line);
                }
                return std::make_unique<NameExpr>(t.text, line);
            }
            case TokenType::String: {
                std::string s;
                while (cur().type == TokenType::String) s += next().text;  // "a" "b" joins
                return std::make_unique<LiteralExpr>(Value(std::move(s)), line);
            }
            case TokenType::Integer:
                next();
                return std::make_unique<LiteralExpr>(Value(t.int_value), line);
            case TokenType::Float:
                next();
                return std::make_unique<LiteralExpr>(Value(t.float_value), line);
            case TokenType::Operator:
                if (t.text == "(") {
                    next();
                    ExprPtr inner = parse_tuple(true, {}, true);
                    expect_op(")");
                    return inner;
                }
                if (t.text == "[") return parse_list();
                if (t.text == "{") return parse_dict();
                break;
            default:
                break;
        }
        fail_at(t, "unexpected '" + describe_token(t) + "'");
    }

    ExprPtr parse_list() {
        auto node = std::make_unique<ListExpr>(false, next().line);
        while (!at_op("]")) {
            if (!node->items.empty()) expect_op(",");
            if (at_op("]")) break;
            node->items.push_back(parse_expression(true));
        }
        expect_op("]");
        return node;
    }

    ExprPtr parse_dict() {
        auto node = std::make_unique<DictExpr>(next().line);
        while (!at_op("}")) {
            if (!node->items.empty()) expect_op(",");
            if (at_op("}")) break;
            ExprPtr key = parse_expression(true);
            expect_op(":");
            node->items.emplace_back(std::move(key), parse_expression(true));
        }
        expect_op("}");
        return node;
    }

    ExprPtr parse_postfix(ExprPtr node) {
        Chain chain(*this);
        while (true) {
            if (at_op(".") || at_op("[") || at_op("(")) chain.link();
            if (at_op(".") || at_op("[")) {
                node = parse_subscript(std::move(node));
            } else if (at_op("(")) {
                node = parse_call(std::move(node));
            } else {
                return node;
            }
        }
    }

    ExprPtr parse_filter_expr(ExprPtr node) {
        Chain chain(*this);
        while (true) {
            if (at_op("|") || at_name("is") || at_op("(")) chain.link();
            if (at_op("|")) {
                node = parse_filter(std::move(node));
            } else if (at_name("is")) {
                node = parse_test(std::move(node));
            } else if (at_op("(")) {
                node = parse_call(std::move(node));
            } else {
                return node;
            }
        }
    }

    ExprPtr parse_subscript(ExprPtr node) {
        const Token& t = next();
        if (t.text == ".") {
            const Token& attr = next();
            if (attr.type == TokenType::Name) {
                return std::make_unique<GetAttrExpr>(std::move(node), attr.text, t.line);
            }
            if (attr.type == TokenType::Integer) {
                return std::make_unique<GetItemExpr>(
                    std::move(node), std::make_unique<LiteralExpr>(Value(attr.int_value), t.line),
                    t.line);
            }
            fail_at(attr, "expected name or number");
        }
        // "[": an index or a slice; jinja2's tuple subscripts (x[1, 2]) are not supported.
        ExprPtr start;
        if (!at_op(":")) {
            start = parse_expression(true);
            if (skip_op("]")) {
                return std::make_unique<GetItemExpr>(std::move(node), std::move(start), t.line);
            }
            if (!at_op(":")) fail_expected("]");
        }
        auto slice = std::make_unique<SliceExpr>(t.line);
        slice->object = std::move(node);
        slice->start = std::move(start);
        expect_op(":");
        if (!at_op("]") && !at_op(":")) slice->stop = parse_expression(true);
        if (skip_op(":") && !at_op("]")) slice->step = parse_expression(true);
        expect_op("]");
        return slice;
    }

    ArgExprs parse_call_args() {
        ArgExprs args;
        expect_op("(");
        while (!at_op(")")) {
            if (!args.positional.empty() || !args.keyword.empty()) {
                expect_op(",");
                if (at_op(")")) break;
            }
            if (at_op("*") || at_op("**")) fail_at(cur(), "*args and **kwargs are not supported");
            if (cur().type == TokenType::Name && peek().type == TokenType::Operator &&
                peek().text == "=") {
                std::string key = next().text;
                next();
                args.keyword.emplace_back(std::move(key), parse_expression(true));
            } else {
                if (!args.keyword.empty()) {
                    fail_at(cur(), "invalid syntax for function call expression");
                }
                args.positional.push_back(parse_expression(true));
            }
        }
        expect_op(")");
        return args;
    }

    ExprPtr parse_call(ExprPtr callee) {
        auto node = std::make_unique<CallExpr>(cur().line);
        node->callee = std::move(callee);
        node->args = parse_call_args();
        return node;
    }

    std::string parse_dotted_name() {
        std::string name = expect_name();
        while (at_op(".") && peek().type == TokenType::Name) {
            next();
            name += "." + next().text;
        }
        return name;
    }

    ExprPtr parse_filter(ExprPtr operand) {
        auto node = std::make_unique<FilterExpr>(next().line);  // the "|"
        node->operand = std::move(operand);
        node->name = parse_dotted_name();
        if (at_op("(")) node->args = parse_call_args();
        return node;
    }

    // `name(args) | name2 ...` of {% filter %} (no leading "|") or {% set x | f %}.
    ExprPtr parse_filter_chain(bool start_inline) {
        ExprPtr chain;
        if (start_inline) {
            auto node = std::make_unique<FilterExpr>(cur().line);
            node->name = parse_dotted_name();
            if (at_op("(")) node->args = parse_call_args();
            chain = std::move(node);
        }
        while (at_op("|")) chain = parse_filter(std::move(chain));
        return chain;
    }

    ExprPtr parse_test(ExprPtr operand) {
        auto node = std::make_unique<TestExpr>(next().line);  // the "is"
        node->operand = std::move(operand);
        node->negated = skip_name("not");
        node->name = parse_dotted_name();
        const Token& t = cur();
        if (at_op("(")) {
            node->args = parse_call_args();
        } else if ((t.type == TokenType::Name || t.type == TokenType::String ||
                    t.type == TokenType::Integer || t.type == TokenType::Float || at_op("[") ||
                    at_op("{")) &&
                   !at_name("else") && !at_name("or") && !at_name("and")) {
            // jinja2 takes one bare argument: `x is divisibleby 3`, `x is sameas none`.
            if (at_name("is")) fail_at(t, "You cannot chain multiple tests with is");
            node->args.positional.push_back(parse_postfix(parse_primary()));
        }
        return node;
    }

    // ---- unknown filters and tests --------------------------------------------------------
    // jinja2 rejects an unknown filter or test when compiling, except inside an {% if %} or a
    // conditional expression, where the error waits until it is evaluated (templates use
    // that to probe for optional features).

    void check_names(const StmtList& body, bool soft) const {
        for (const auto& s : body) check_stmt(*s, soft);
    }

    void check_args(const ArgExprs& args, bool soft) const {
        for (const auto& a : args.positional) check_expr(a.get(), soft);
        for (const auto& kv : args.keyword) check_expr(kv.second.get(), soft);
    }

    void check_expr(const Expr* e, bool soft) const {
        if (e == nullptr) return;
        switch (e->kind) {
            case ExprKind::Literal:
            case ExprKind::Name:
                return;
            case ExprKind::List:
                for (const auto& i : static_cast<const ListExpr*>(e)->items)
                    check_expr(i.get(), soft);
                return;
            case ExprKind::Dict:
                for (const auto& kv : static_cast<const DictExpr*>(e)->items) {
                    check_expr(kv.first.get(), soft);
                    check_expr(kv.second.get(), soft);
                }
                return;
            case ExprKind::GetAttr:
                check_expr(static_cast<const GetAttrExpr*>(e)->object.get(), soft);
                return;
            case ExprKind::GetItem: {
                const auto* g = static_cast<const GetItemExpr*>(e);
                check_expr(g->object.get(), soft);
                check_expr(g->index.get(), soft);
                return;
            }
            case ExprKind::Slice: {
                const auto* s = static_cast<const SliceExpr*>(e);
                for (const Expr* p :
                     {s->object.get(), s->start.get(), s->stop.get(), s->step.get()}) {
                    check_expr(p, soft);
                }
                return;
            }
            case ExprKind::Call: {
                const auto* c = static_cast<const CallExpr*>(e);
                check_expr(c->callee.get(), soft);
                check_args(c->args, soft);
                return;
            }
            case ExprKind::Filter: {
                const auto* f = static_cast<const FilterExpr*>(e);
                if (!soft && !has_filter(f->name)) {
                    throw TemplateError(TemplateError::Kind::Syntax,
                                        "No filter named '" + f->name + "'.", f->line);
                }
                check_expr(f->operand.get(), soft);
                check_args(f->args, soft);
                return;
            }
            case ExprKind::Test: {
                const auto* t = static_cast<const TestExpr*>(e);
                if (!soft && !has_test(t->name)) {
                    throw TemplateError(TemplateError::Kind::Syntax,
                                        "No test named '" + t->name + "'.", t->line);
                }
                check_expr(t->operand.get(), soft);
                check_args(t->args, soft);
                return;
            }
            case ExprKind::Unary:
                check_expr(static_cast<const UnaryExpr*>(e)->operand.get(), soft);
                return;
            case ExprKind::Binary: {
                const auto* b = static_cast<const BinaryExpr*>(e);
                check_expr(b->left.get(), soft);
                check_expr(b->right.get(), soft);
                return;
            }
            case ExprKind::Compare: {
                const auto* c = static_cast<const CompareExpr*>(e);
                check_expr(c->first.get(), soft);
                for (const auto& r : c->rest) check_expr(r.second.get(), soft);
                return;
            }
            case ExprKind::Cond: {
                const auto* c = static_cast<const CondExpr*>(e);
                check_expr(c->test.get(), true);
                check_expr(c->then_expr.get(), true);
                check_expr(c->else_expr.get(), true);
                return;
            }
        }
    }

    void check_params(const std::vector<MacroParam>& params) const {
        for (const auto& p : params) check_expr(p.default_value.get(), false);
    }

    void check_stmt(const Stmt& s, bool soft) const {
        switch (s.kind) {
            case StmtKind::Output:
            case StmtKind::Break:
            case StmtKind::Continue:
                return;
            case StmtKind::Print:
                check_expr(static_cast<const PrintStmt&>(s).expr.get(), soft);
                return;
            case StmtKind::If: {
                const auto& n = static_cast<const IfStmt&>(s);
                for (const auto& [cond, body] : n.branches) {
                    check_expr(cond.get(), true);
                    check_names(body, true);
                }
                check_names(n.else_body, true);
                return;
            }
            case StmtKind::For: {
                // A loop body gets a frame of its own, which is never soft.
                const auto& n = static_cast<const ForStmt&>(s);
                check_expr(n.iterable.get(), soft);
                check_expr(n.filter.get(), false);
                check_names(n.body, false);
                check_names(n.else_body, false);
                return;
            }
            case StmtKind::Set:
                check_expr(static_cast<const SetStmt&>(s).value.get(), soft);
                return;
            case StmtKind::SetBlock: {
                const auto& n = static_cast<const SetBlockStmt&>(s);
                check_expr(n.filter.get(), soft);
                check_names(n.body, soft);
                return;
            }
            case StmtKind::Macro: {
                const auto& n = static_cast<const MacroStmt&>(s);
                check_params(n.params);
                check_names(n.body, false);
                return;
            }
            case StmtKind::CallBlock: {
                const auto& n = static_cast<const CallBlockStmt&>(s);
                check_expr(n.call.get(), soft);
                check_params(n.caller_params);
                check_names(n.body, false);
                return;
            }
            case StmtKind::FilterBlock: {
                const auto& n = static_cast<const FilterBlockStmt&>(s);
                check_expr(n.filter.get(), soft);
                check_names(n.body, soft);
                return;
            }
            case StmtKind::With: {
                const auto& n = static_cast<const WithStmt&>(s);
                for (const auto& a : n.assignments) check_expr(a.second.get(), soft);
                check_names(n.body, false);
                return;
            }
        }
    }

    std::vector<Token> toks_;
    std::size_t pos_ = 0;
    std::vector<OpenBlock> open_;
    int loop_depth_ = 0;
    int depth_ = 0;
};

}  // namespace

std::unique_ptr<Program> parse_template(std::string_view source) {
    Parser parser(tokenize(source));
    return parser.parse();
}

}  // namespace ember::jinja
