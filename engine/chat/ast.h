// The syntax tree of a parsed template. Built once by the parser, immutable afterwards and shared
// by every render; expressions evaluate and statements execute against an Interpreter (the state
// of one render), see interpreter.h. Every node keeps its template line for error messages.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/chat/value.h"

namespace llm::chat {

class Interpreter;

struct Expr {
  explicit Expr(int l) : line(l) {}
  virtual ~Expr() = default;
  virtual absl::StatusOr<Value> Eval(Interpreter& in) const = 0;
  int line;
};
using ExprPtr = std::unique_ptr<Expr>;

struct Stmt {
  explicit Stmt(int l) : line(l) {}
  virtual ~Stmt() = default;
  virtual absl::Status Exec(Interpreter& in) const = 0;
  int line;
};
using StmtPtr = std::unique_ptr<Stmt>;
using StmtList = std::vector<StmtPtr>;

// A filter or test implementation; `args` are the call's arguments after the input.
using FilterFn = absl::StatusOr<Value> (*)(Interpreter& in, const Value& input, CallArgs& args);
using TestFn = absl::StatusOr<bool> (*)(Interpreter& in, const Value& input, CallArgs& args);

struct CallArgExprs {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> keywords;
  ExprPtr star_args;    // *args
  ExprPtr star_kwargs;  // **kwargs
  absl::StatusOr<CallArgs> Eval(Interpreter& in) const;
};

// --- expressions ---

struct ConstExpr : Expr {
  ConstExpr(int l, Value v) : Expr(l), value(std::move(v)) {}
  absl::StatusOr<Value> Eval(Interpreter& in) const override;
  Value value;
};

struct NameExpr : Expr {
  NameExpr(int l, std::string n) : Expr(l), name(std::move(n)) {}
  absl::StatusOr<Value> Eval(Interpreter& in) const override;
  std::string name;
};

struct ListExpr : Expr {  // [a, b] or (a, b)
  using Expr::Expr;
  absl::StatusOr<Value> Eval(Interpreter& in) const override;
  std::vector<ExprPtr> items;
  bool tuple = false;
};

struct DictExpr : Expr {
  using Expr::Expr;
  absl::StatusOr<Value> Eval(Interpreter& in) const override;
  std::vector<std::pair<ExprPtr, ExprPtr>> items;
};

struct AttrExpr : Expr {  // object.name
  using Expr::Expr;
  absl::StatusOr<Value> Eval(Interpreter& in) const override;
  ExprPtr object;
  std::string name;
};

struct ItemExpr : Expr {  // object[key]
  using Expr::Expr;
  absl::StatusOr<Value> Eval(Interpreter& in) const override;
  ExprPtr object;
  ExprPtr key;
};

struct SliceExpr : Expr {  // object[start:stop:step]; absent parts are null
  using Expr::Expr;
  absl::StatusOr<Value> Eval(Interpreter& in) const override;
  ExprPtr object, start, stop, step;
};

struct CallExpr : Expr {
  using Expr::Expr;
  absl::StatusOr<Value> Eval(Interpreter& in) const override;
  ExprPtr callee;
  CallArgExprs args;
};

struct FilterExpr : Expr {  // input | name(args)
  using Expr::Expr;
  absl::StatusOr<Value> Eval(Interpreter& in) const override;
  ExprPtr input;  // a BlockValueExpr for filter blocks and block sets
  std::string name;
  FilterFn fn = nullptr;  // null: unknown filter inside a conditional, an error only when reached
  CallArgExprs args;
};

struct TestExpr : Expr {  // input is [not] name(args)
  using Expr::Expr;
  absl::StatusOr<Value> Eval(Interpreter& in) const override;
  ExprPtr input;
  std::string name;
  TestFn fn = nullptr;  // null: unknown test inside a conditional
  CallArgExprs args;
};

// The rendered body of a filter block or block set, as the innermost filter's input.
struct BlockValueExpr : Expr {
  using Expr::Expr;
  absl::StatusOr<Value> Eval(Interpreter& in) const override;
};

struct UnaryExpr : Expr {
  enum class Op { kNot, kNeg, kPos };
  UnaryExpr(int l, Op o, ExprPtr e) : Expr(l), op(o), operand(std::move(e)) {}
  absl::StatusOr<Value> Eval(Interpreter& in) const override;
  Op op;
  ExprPtr operand;
};

enum class BinaryOp { kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow, kAnd, kOr };

struct BinaryExpr : Expr {
  BinaryExpr(int l, BinaryOp o, ExprPtr a, ExprPtr b)
      : Expr(l), op(o), left(std::move(a)), right(std::move(b)) {}
  absl::StatusOr<Value> Eval(Interpreter& in) const override;
  BinaryOp op;
  ExprPtr left, right;
};

struct ConcatExpr : Expr {  // a ~ b ~ c
  using Expr::Expr;
  absl::StatusOr<Value> Eval(Interpreter& in) const override;
  std::vector<ExprPtr> parts;
};

enum class CompareOp { kEq, kNe, kLt, kLe, kGt, kGe, kIn, kNotIn };

struct CompareExpr : Expr {  // chained like Python: a < b < c
  using Expr::Expr;
  absl::StatusOr<Value> Eval(Interpreter& in) const override;
  ExprPtr first;
  std::vector<std::pair<CompareOp, ExprPtr>> rest;
};

struct CondExpr : Expr {  // then if test else otherwise (no else: undefined)
  using Expr::Expr;
  absl::StatusOr<Value> Eval(Interpreter& in) const override;
  ExprPtr test, then, otherwise;
};

// --- statements ---

// An assignment target: a name, a tuple of targets, or a namespace attribute (ns.attr).
struct Target {
  enum class Kind { kName, kTuple, kNamespaceAttr };
  Kind kind = Kind::kName;
  std::string name;
  std::string attr;
  std::vector<Target> items;
};

struct TextStmt : Stmt {
  TextStmt(int l, std::string t) : Stmt(l), text(std::move(t)) {}
  absl::Status Exec(Interpreter& in) const override;
  std::string text;
};

struct OutputStmt : Stmt {  // {{ expr }} and {% print %}
  OutputStmt(int l, ExprPtr e) : Stmt(l), expr(std::move(e)) {}
  absl::Status Exec(Interpreter& in) const override;
  ExprPtr expr;
};

struct IfStmt : Stmt {
  using Stmt::Stmt;
  absl::Status Exec(Interpreter& in) const override;
  std::vector<std::pair<ExprPtr, StmtList>> branches;  // if, elif...
  StmtList else_body;
};

struct ForStmt : Stmt {
  using Stmt::Stmt;
  absl::Status Exec(Interpreter& in) const override;
  Target target;
  ExprPtr iter;
  ExprPtr filter;  // for x in xs if filter
  bool recursive = false;
  StmtList body, else_body;
};

struct SetStmt : Stmt {
  using Stmt::Stmt;
  absl::Status Exec(Interpreter& in) const override;
  Target target;
  ExprPtr value;
};

struct SetBlockStmt : Stmt {  // {% set x | filters %}body{% endset %}
  using Stmt::Stmt;
  absl::Status Exec(Interpreter& in) const override;
  Target target;
  ExprPtr filter;  // null, or filters over a BlockValueExpr
  StmtList body;
};

struct MacroDef {
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // for the last defaults.size() params
  StmtList body;
  bool uses_caller = false;  // the body names `caller`, `varargs`, `kwargs`
  bool uses_varargs = false;
  bool uses_kwargs = false;
};

struct MacroStmt : Stmt {
  using Stmt::Stmt;
  absl::Status Exec(Interpreter& in) const override;
  std::shared_ptr<const MacroDef> def;
};

struct CallBlockStmt : Stmt {  // {% call(params) macro(args) %}body{% endcall %}
  using Stmt::Stmt;
  absl::Status Exec(Interpreter& in) const override;
  std::shared_ptr<const MacroDef> caller;  // the body, as the `caller` macro
  std::unique_ptr<CallExpr> call;
};

struct FilterBlockStmt : Stmt {  // {% filter f %}body{% endfilter %}
  using Stmt::Stmt;
  absl::Status Exec(Interpreter& in) const override;
  ExprPtr filter;
  StmtList body;
};

struct WithStmt : Stmt {
  using Stmt::Stmt;
  absl::Status Exec(Interpreter& in) const override;
  std::vector<std::pair<Target, ExprPtr>> assignments;
  StmtList body;
};

// A body in its own scope: {% block %} (rendered in place) and transformers' {% generation %}.
struct ScopedBodyStmt : Stmt {
  using Stmt::Stmt;
  absl::Status Exec(Interpreter& in) const override;
  StmtList body;
};

// A statement that fails when reached: loading tags (extends, include, import), which need a
// template loader that a chat template never has.
struct FailStmt : Stmt {
  FailStmt(int l, ErrorKind k, std::string m) : Stmt(l), kind(k), message(std::move(m)) {}
  absl::Status Exec(Interpreter& in) const override;
  ErrorKind kind;
  std::string message;
};

struct LoopControlStmt : Stmt {  // {% break %} / {% continue %}
  LoopControlStmt(int l, bool b) : Stmt(l), is_break(b) {}
  absl::Status Exec(Interpreter& in) const override;
  bool is_break;
};

}  // namespace llm::chat
