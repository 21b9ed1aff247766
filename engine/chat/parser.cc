#include "engine/chat/parser.h"

#include <initializer_list>
#include <string_view>

#include "engine/chat/cat.h"
#include "engine/chat/builtins.h"
#include "engine/chat/template_error.h"
#include "kernels/core/status.h"

namespace llm::chat {
namespace {

class Parser {
 public:
  Parser(const std::vector<Token>& tokens, int max_depth) : t_(tokens), max_depth_(max_depth) {}

  absl::StatusOr<StmtList> ParseTemplate() {
    ASSIGN_OR_RETURN(StmtList body, Subparse({}));
    if (Cur().type != TokenType::kEnd) return Fail(Cat("unexpected '", Describe(Cur()), "'"));
    return body;
  }

 private:
  // Limits recursion: one per nested statement body or expression level.
  class DepthGuard {
   public:
    explicit DepthGuard(Parser* p) : p_(p) { ++p_->depth_; }
    ~DepthGuard() { --p_->depth_; }
    absl::Status Check() const {
      if (p_->depth_ > p_->max_depth_) return p_->Fail("template nested too deeply");
      return absl::OkStatus();
    }

   private:
    Parser* p_;
  };

  // Saves and sets a counter for the extent of a statement body.
  class Saved {
   public:
    Saved(int* slot, int value) : slot_(slot), old_(*slot) { *slot = value; }
    ~Saved() { *slot_ = old_; }

   private:
    int* slot_;
    int old_;
  };

  // Left-deep chains (a + b + c, a|f|g, a.b.c) are built by loops, not recursion; each link
  // still deepens the tree that evaluation walks recursively, so it counts against the limit.
  absl::Status Link(int* links) const {
    if (depth_ + ++*links > max_depth_) return Fail("template nested too deeply");
    return absl::OkStatus();
  }

  const Token& Cur() const { return t_[i_]; }
  const Token& Look(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  void Next() {
    if (i_ + 1 < t_.size()) ++i_;
  }
  bool IsName(std::string_view v) const { return Cur().type == TokenType::kName && Cur().value == v; }
  bool IsNameAny(const std::vector<std::string_view>& names) const {
    for (std::string_view n : names)
      if (IsName(n)) return true;
    return false;
  }
  bool IsOp(std::string_view op) const { return Cur().type == TokenType::kOperator && Cur().value == op; }
  bool SkipName(std::string_view v) {
    if (!IsName(v)) return false;
    Next();
    return true;
  }
  bool SkipOp(std::string_view op) {
    if (!IsOp(op)) return false;
    Next();
    return true;
  }

  static std::string Describe(const Token& t) {
    switch (t.type) {
      case TokenType::kData: return "template data";
      case TokenType::kVariableBegin: return "begin of print statement";
      case TokenType::kVariableEnd: return "end of print statement";
      case TokenType::kBlockBegin: return "begin of statement block";
      case TokenType::kBlockEnd: return "end of statement block";
      case TokenType::kString: return "string";
      case TokenType::kInteger: return "integer";
      case TokenType::kFloat: return "float";
      case TokenType::kEnd: return "end of template";
      default: return t.value;
    }
  }

  absl::Status Fail(std::string_view message) const {
    return WithLine(TemplateError(ErrorKind::kSyntax, message), Cur().line);
  }
  absl::Status ExpectOp(std::string_view op) {
    if (!SkipOp(op)) return Fail(Cat("expected '", op, "', got '", Describe(Cur()), "'"));
    return absl::OkStatus();
  }
  absl::Status ExpectType(TokenType type) {
    if (Cur().type != type) {
      if (Cur().type == TokenType::kEnd) return Fail("unexpected end of template");
      Token want;
      want.type = type;
      return Fail(Cat("expected token '", Describe(want), "', got '", Describe(Cur()), "'"));
    }
    Next();
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> ExpectName() {
    if (Cur().type != TokenType::kName)
      return Fail(Cat("expected token 'name', got '", Describe(Cur()), "'"));
    std::string name = Cur().value;
    Next();
    return name;
  }

  // --- statements ---

  absl::StatusOr<StmtList> Subparse(const std::vector<std::string_view>& end_tokens) {
    DepthGuard guard(this);
    RETURN_IF_ERROR(guard.Check());
    StmtList body;
    while (Cur().type != TokenType::kEnd) {
      const Token& tok = Cur();
      if (tok.type == TokenType::kData) {
        body.push_back(std::make_unique<TextStmt>(tok.line, tok.value));
        Next();
      } else if (tok.type == TokenType::kVariableBegin) {
        Next();
        const int line = Cur().line;
        ASSIGN_OR_RETURN(ExprPtr expr, ParseTuple(false, true, {}, false));
        RETURN_IF_ERROR(ExpectType(TokenType::kVariableEnd));
        body.push_back(std::make_unique<OutputStmt>(line, std::move(expr)));
      } else if (tok.type == TokenType::kBlockBegin) {
        Next();
        if (!end_tokens.empty() && IsNameAny(end_tokens)) return body;
        ASSIGN_OR_RETURN(StmtPtr stmt, ParseStatement());
        if (stmt != nullptr) body.push_back(std::move(stmt));
        RETURN_IF_ERROR(ExpectType(TokenType::kBlockEnd));
      } else {
        return Fail(Cat("unexpected '", Describe(tok), "'"));
      }
    }
    return body;
  }

  // Body up to one of `end_tokens`; with `drop_needle` the end tag's name is consumed too.
  absl::StatusOr<StmtList> ParseStatements(const std::vector<std::string_view>& end_tokens, bool drop_needle) {
    SkipOp(":");
    RETURN_IF_ERROR(ExpectType(TokenType::kBlockEnd));
    ASSIGN_OR_RETURN(StmtList body, Subparse(end_tokens));
    if (Cur().type == TokenType::kEnd) {
      std::string expected;
      for (std::string_view e : end_tokens) CatAppend(&expected, expected.empty() ? "" : " or ", "'", e, "'");
      return Fail(Cat("Unexpected end of template. Jinja was looking for the following tags: ", expected,
                               "."));
    }
    if (drop_needle) Next();
    return body;
  }

  absl::StatusOr<StmtPtr> ParseStatement() {
    if (Cur().type != TokenType::kName) return Fail("tag name expected");
    const std::string tag = Cur().value;
    const int line = Cur().line;
    if (tag == "for") return ParseFor();
    if (tag == "if") return ParseIf();
    if (tag == "set") return ParseSet();
    if (tag == "macro") return ParseMacro();
    if (tag == "call") return ParseCallBlock();
    if (tag == "filter") return ParseFilterBlock();
    if (tag == "with") return ParseWith();
    if (tag == "print") return ParsePrint();
    if (tag == "block") return ParseBlock();
    if (tag == "generation") {  // transformers' AssistantTracker: renders its body, in its own scope
      Next();
      auto node = std::make_unique<ScopedBodyStmt>(line);
      Saved loops(&loop_depth_, 0);
      ASSIGN_OR_RETURN(node->body, ParseStatements({"endgeneration"}, true));
      return node;
    }
    if (tag == "autoescape") {  // no effect: the chat environment never escapes
      Next();
      ASSIGN_OR_RETURN(ExprPtr ignored, ParseExpression(true));
      auto node = std::make_unique<ScopedBodyStmt>(line);
      ASSIGN_OR_RETURN(node->body, ParseStatements({"endautoescape"}, true));
      return node;
    }
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) return Fail(Cat("'", tag, "' outside of a loop"));
      Next();
      return std::make_unique<LoopControlStmt>(line, tag == "break");
    }
    if (tag == "extends" || tag == "include" || tag == "import" || tag == "from") {
      // As jinja2 without a loader: a TypeError when reached.
      while (Cur().type != TokenType::kBlockEnd && Cur().type != TokenType::kEnd) Next();
      return std::make_unique<FailStmt>(line, ErrorKind::kType, "no loader for this environment specified");
    }
    return Fail(Cat("Encountered unknown tag '", tag, "'."));
  }

  absl::StatusOr<StmtPtr> ParseFor() {
    auto node = std::make_unique<ForStmt>(Cur().line);
    Next();
    ASSIGN_OR_RETURN(node->target, ParseAssignTarget(true, false, {"in"}, false));
    if (!SkipName("in")) return Fail(Cat("expected 'in', got '", Describe(Cur()), "'"));
    ASSIGN_OR_RETURN(node->iter, ParseTuple(false, false, {"recursive"}, false));
    if (SkipName("if")) {
      ASSIGN_OR_RETURN(node->filter, ParseExpression(true));
    }
    node->recursive = SkipName("recursive");
    {
      Saved soft(&soft_, 0);
      Saved loops(&loop_depth_, loop_depth_ + 1);
      ASSIGN_OR_RETURN(node->body, ParseStatements({"endfor", "else"}, false));
    }
    const bool has_else = IsName("else");
    Next();
    if (has_else) {
      Saved soft(&soft_, 0);
      ASSIGN_OR_RETURN(node->else_body, ParseStatements({"endfor"}, true));
    }
    return node;
  }

  absl::StatusOr<StmtPtr> ParseIf() {
    auto node = std::make_unique<IfStmt>(Cur().line);
    Next();
    Saved soft(&soft_, soft_ + 1);
    while (true) {
      ASSIGN_OR_RETURN(ExprPtr test, ParseTuple(false, false, {}, false));
      ASSIGN_OR_RETURN(StmtList body, ParseStatements({"elif", "else", "endif"}, false));
      node->branches.emplace_back(std::move(test), std::move(body));
      const std::string which = Cur().value;
      Next();
      if (which == "elif") continue;
      if (which == "else") {
        ASSIGN_OR_RETURN(node->else_body, ParseStatements({"endif"}, true));
      }
      break;
    }
    return node;
  }

  absl::StatusOr<StmtPtr> ParseSet() {
    const int line = Cur().line;
    Next();
    ASSIGN_OR_RETURN(Target target, ParseAssignTarget(true, false, {}, true));
    if (SkipOp("=")) {
      auto node = std::make_unique<SetStmt>(line);
      node->target = std::move(target);
      ASSIGN_OR_RETURN(node->value, ParseTuple(false, true, {}, false));
      return node;
    }
    auto node = std::make_unique<SetBlockStmt>(line);
    node->target = std::move(target);
    if (IsOp("|")) {
      ASSIGN_OR_RETURN(node->filter, ParseFilter(std::make_unique<BlockValueExpr>(line), false));
    }
    Saved soft(&soft_, 0);
    ASSIGN_OR_RETURN(node->body, ParseStatements({"endset"}, true));
    return node;
  }

  // Parameters of a macro or call block: (a, b=default, ...).
  absl::Status ParseSignature(MacroDef* def) {
    RETURN_IF_ERROR(ExpectOp("("));
    while (!IsOp(")")) {
      if (!def->params.empty()) RETURN_IF_ERROR(ExpectOp(","));
      ASSIGN_OR_RETURN(std::string name, ExpectName());
      if (SkipOp("=")) {
        ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
        def->defaults.push_back(std::move(value));
      } else if (!def->defaults.empty()) {
        return Fail("non-default argument follows default argument");
      }
      def->params.push_back(std::move(name));
    }
    return ExpectOp(")");
  }

  absl::StatusOr<std::shared_ptr<MacroDef>> ParseMacroBody(std::shared_ptr<MacroDef> def,
                                                           std::string_view end_tag) {
    open_macros_.push_back(def.get());
    Saved soft(&soft_, 0);
    Saved loops(&loop_depth_, 0);
    absl::StatusOr<StmtList> body = ParseStatements({end_tag}, true);
    open_macros_.pop_back();
    if (!body.ok()) return body.status();
    def->body = *std::move(body);
    return def;
  }

  absl::StatusOr<StmtPtr> ParseMacro() {
    auto node = std::make_unique<MacroStmt>(Cur().line);
    Next();
    auto def = std::make_shared<MacroDef>();
    ASSIGN_OR_RETURN(def->name, ExpectName());
    RETURN_IF_ERROR(ParseSignature(def.get()));
    ASSIGN_OR_RETURN(node->def, ParseMacroBody(std::move(def), "endmacro"));
    return node;
  }

  absl::StatusOr<StmtPtr> ParseCallBlock() {
    auto node = std::make_unique<CallBlockStmt>(Cur().line);
    Next();
    auto def = std::make_shared<MacroDef>();
    def->name = "caller";
    if (IsOp("(")) RETURN_IF_ERROR(ParseSignature(def.get()));
    ASSIGN_OR_RETURN(ExprPtr call, ParseExpression(true));
    auto* call_expr = dynamic_cast<CallExpr*>(call.get());
    if (call_expr == nullptr) return Fail("expected call");
    call.release();
    node->call.reset(call_expr);
    ASSIGN_OR_RETURN(node->caller, ParseMacroBody(std::move(def), "endcall"));
    return node;
  }

  absl::StatusOr<StmtPtr> ParseFilterBlock() {
    const int line = Cur().line;
    Next();
    auto node = std::make_unique<FilterBlockStmt>(line);
    ASSIGN_OR_RETURN(node->filter, ParseFilter(std::make_unique<BlockValueExpr>(line), true));
    Saved soft(&soft_, 0);
    ASSIGN_OR_RETURN(node->body, ParseStatements({"endfilter"}, true));
    return node;
  }

  absl::StatusOr<StmtPtr> ParseWith() {
    auto node = std::make_unique<WithStmt>(Cur().line);
    Next();
    while (Cur().type != TokenType::kBlockEnd) {
      if (!node->assignments.empty()) RETURN_IF_ERROR(ExpectOp(","));
      ASSIGN_OR_RETURN(Target target, ParseAssignTarget(true, false, {}, false));
      RETURN_IF_ERROR(ExpectOp("="));
      ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
      node->assignments.emplace_back(std::move(target), std::move(value));
    }
    Saved soft(&soft_, 0);
    ASSIGN_OR_RETURN(node->body, ParseStatements({"endwith"}, true));
    return node;
  }

  absl::StatusOr<StmtPtr> ParsePrint() {
    const int line = Cur().line;
    Next();
    auto list = std::make_unique<ListExpr>(line);
    list->tuple = true;
    do {
      ASSIGN_OR_RETURN(ExprPtr e, ParseExpression(true));
      list->items.push_back(std::move(e));
    } while (SkipOp(","));
    // print a, b writes each value in turn.
    auto concat = std::make_unique<ConcatExpr>(line);
    concat->parts = std::move(list->items);
    return std::make_unique<OutputStmt>(line, std::move(concat));
  }

  absl::StatusOr<StmtPtr> ParseBlock() {
    const int line = Cur().line;
    Next();
    ASSIGN_OR_RETURN(std::string name, ExpectName());
    while (IsName("scoped") || IsName("required")) Next();
    auto node = std::make_unique<ScopedBodyStmt>(line);
    Saved soft(&soft_, 0);
    Saved loops(&loop_depth_, 0);
    ASSIGN_OR_RETURN(node->body, ParseStatements({"endblock"}, true));
    if (Cur().type == TokenType::kName) Next();  // {% endblock name %}
    return node;
  }

  absl::StatusOr<Target> ParseAssignTarget(bool with_tuple, bool name_only,
                                           const std::vector<std::string_view>& extra_end, bool with_namespace) {
    Target target;
    if (with_namespace && Cur().type == TokenType::kName && Look().type == TokenType::kOperator &&
        Look().value == ".") {
      target.kind = Target::Kind::kNamespaceAttr;
      ASSIGN_OR_RETURN(target.name, ExpectName());
      Next();
      ASSIGN_OR_RETURN(target.attr, ExpectName());
      return target;
    }
    if (name_only || !with_tuple) {
      ASSIGN_OR_RETURN(target.name, ExpectName());
      return target;
    }
    // A tuple of primaries, possibly parenthesized and nested; each must be assignable.
    std::vector<Target> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) RETURN_IF_ERROR(ExpectOp(","));
      if (IsTupleEnd(extra_end)) break;
      ASSIGN_OR_RETURN(Target item, ParseTargetPrimary());
      items.push_back(std::move(item));
      if (!IsOp(",")) break;
      is_tuple = true;
    }
    if (!is_tuple) {
      if (items.empty()) return Fail(Cat("Expected an expression, got '", Describe(Cur()), "'"));
      return std::move(items[0]);
    }
    target.kind = Target::Kind::kTuple;
    target.items = std::move(items);
    return target;
  }

  absl::StatusOr<Target> ParseTargetPrimary() {
    if (Cur().type == TokenType::kName) {
      const std::string& n = Cur().value;
      if (n == "true" || n == "false" || n == "none" || n == "True" || n == "False" || n == "None")
        return Fail("can't assign to 'const'");
      Target t;
      t.name = n;
      Next();
      return t;
    }
    if (SkipOp("(")) {
      ASSIGN_OR_RETURN(Target inner, ParseAssignTarget(true, false, {}, false));
      RETURN_IF_ERROR(ExpectOp(")"));
      return inner;
    }
    return Fail(Cat("can't assign to '", Describe(Cur()), "'"));
  }

  bool IsTupleEnd(const std::vector<std::string_view>& extra_end) const {
    const TokenType type = Cur().type;
    if (type == TokenType::kVariableEnd || type == TokenType::kBlockEnd || IsOp(")")) return true;
    return !extra_end.empty() && IsNameAny(extra_end);
  }

  // --- expressions ---

  absl::StatusOr<ExprPtr> ParseTuple(bool simplified, bool with_condexpr,
                                     const std::vector<std::string_view>& extra_end, bool explicit_parens) {
    const int line = Cur().line;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) RETURN_IF_ERROR(ExpectOp(","));
      if (IsTupleEnd(extra_end)) break;
      absl::StatusOr<ExprPtr> item = simplified ? ParsePrimary() : ParseExpression(with_condexpr);
      if (!item.ok()) return item.status();
      items.push_back(*std::move(item));
      if (!IsOp(",")) break;
      is_tuple = true;
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens) return Fail(Cat("Expected an expression, got '", Describe(Cur()), "'"));
    }
    auto tuple = std::make_unique<ListExpr>(line);
    tuple->tuple = true;
    tuple->items = std::move(items);
    return tuple;
  }

  absl::StatusOr<ExprPtr> ParseExpression(bool with_condexpr) {
    DepthGuard guard(this);
    RETURN_IF_ERROR(guard.Check());
    return with_condexpr ? ParseCondExpr() : ParseOr();
  }

  absl::StatusOr<ExprPtr> ParseCondExpr() {
    int line = Cur().line;
    ASSIGN_OR_RETURN(ExprPtr expr, ParseOr());
    int links = 0;
    while (SkipName("if")) {
      RETURN_IF_ERROR(Link(&links));
      Saved soft(&soft_, soft_ + 1);
      auto node = std::make_unique<CondExpr>(line);
      node->then = std::move(expr);
      ASSIGN_OR_RETURN(node->test, ParseOr());
      if (SkipName("else")) {
        ASSIGN_OR_RETURN(node->otherwise, ParseCondExpr());
      }
      expr = std::move(node);
      line = Cur().line;
    }
    return expr;
  }

  absl::StatusOr<ExprPtr> ParseOr() {
    ASSIGN_OR_RETURN(ExprPtr left, ParseAnd());
    int links = 0;
    while (IsName("or")) {
      RETURN_IF_ERROR(Link(&links));
      const int line = Cur().line;
      Next();
      ASSIGN_OR_RETURN(ExprPtr right, ParseAnd());
      left = std::make_unique<BinaryExpr>(line, BinaryOp::kOr, std::move(left), std::move(right));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseAnd() {
    ASSIGN_OR_RETURN(ExprPtr left, ParseNot());
    int links = 0;
    while (IsName("and")) {
      RETURN_IF_ERROR(Link(&links));
      const int line = Cur().line;
      Next();
      ASSIGN_OR_RETURN(ExprPtr right, ParseNot());
      left = std::make_unique<BinaryExpr>(line, BinaryOp::kAnd, std::move(left), std::move(right));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseNot() {
    if (IsName("not")) {
      const int line = Cur().line;
      Next();
      DepthGuard guard(this);
      RETURN_IF_ERROR(guard.Check());
      ASSIGN_OR_RETURN(ExprPtr operand, ParseNot());
      return ExprPtr(std::make_unique<UnaryExpr>(line, UnaryExpr::Op::kNot, std::move(operand)));
    }
    return ParseCompare();
  }

  absl::StatusOr<ExprPtr> ParseCompare() {
    const int line = Cur().line;
    ASSIGN_OR_RETURN(ExprPtr first, ParseMath1());
    std::vector<std::pair<CompareOp, ExprPtr>> rest;
    while (true) {
      CompareOp op;
      if (IsOp("==")) op = CompareOp::kEq;
      else if (IsOp("!=")) op = CompareOp::kNe;
      else if (IsOp("<")) op = CompareOp::kLt;
      else if (IsOp("<=")) op = CompareOp::kLe;
      else if (IsOp(">")) op = CompareOp::kGt;
      else if (IsOp(">=")) op = CompareOp::kGe;
      else if (IsName("in")) op = CompareOp::kIn;
      else if (IsName("not") && Look().type == TokenType::kName && Look().value == "in") {
        op = CompareOp::kNotIn;
        Next();
      } else {
        break;
      }
      Next();
      ASSIGN_OR_RETURN(ExprPtr operand, ParseMath1());
      rest.emplace_back(op, std::move(operand));
    }
    if (rest.empty()) return first;
    auto node = std::make_unique<CompareExpr>(line);
    node->first = std::move(first);
    node->rest = std::move(rest);
    return node;
  }

  absl::StatusOr<ExprPtr> ParseMath1() {
    ASSIGN_OR_RETURN(ExprPtr left, ParseConcat());
    int links = 0;
    while (IsOp("+") || IsOp("-")) {
      RETURN_IF_ERROR(Link(&links));
      const BinaryOp op = IsOp("+") ? BinaryOp::kAdd : BinaryOp::kSub;
      const int line = Cur().line;
      Next();
      ASSIGN_OR_RETURN(ExprPtr right, ParseConcat());
      left = std::make_unique<BinaryExpr>(line, op, std::move(left), std::move(right));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseConcat() {
    const int line = Cur().line;
    ASSIGN_OR_RETURN(ExprPtr first, ParseMath2());
    if (!IsOp("~")) return first;
    auto node = std::make_unique<ConcatExpr>(line);
    node->parts.push_back(std::move(first));
    while (SkipOp("~")) {
      ASSIGN_OR_RETURN(ExprPtr part, ParseMath2());
      node->parts.push_back(std::move(part));
    }
    return node;
  }

  absl::StatusOr<ExprPtr> ParseMath2() {
    ASSIGN_OR_RETURN(ExprPtr left, ParsePow());
    int links = 0;
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      RETURN_IF_ERROR(Link(&links));
      const std::string op = Cur().value;
      const int line = Cur().line;
      Next();
      ASSIGN_OR_RETURN(ExprPtr right, ParsePow());
      const BinaryOp bop = op == "*" ? BinaryOp::kMul : op == "/" ? BinaryOp::kDiv
                           : op == "//" ? BinaryOp::kFloorDiv : BinaryOp::kMod;
      left = std::make_unique<BinaryExpr>(line, bop, std::move(left), std::move(right));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParsePow() {
    ASSIGN_OR_RETURN(ExprPtr left, ParseUnary(true));
    int links = 0;
    while (IsOp("**")) {  // left-associative in jinja2
      RETURN_IF_ERROR(Link(&links));
      const int line = Cur().line;
      Next();
      ASSIGN_OR_RETURN(ExprPtr right, ParseUnary(true));
      left = std::make_unique<BinaryExpr>(line, BinaryOp::kPow, std::move(left), std::move(right));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseUnary(bool with_filter) {
    DepthGuard guard(this);
    RETURN_IF_ERROR(guard.Check());
    const int line = Cur().line;
    ExprPtr node;
    if (IsOp("-") || IsOp("+")) {
      const UnaryExpr::Op op = IsOp("-") ? UnaryExpr::Op::kNeg : UnaryExpr::Op::kPos;
      Next();
      ASSIGN_OR_RETURN(ExprPtr operand, ParseUnary(false));
      node = std::make_unique<UnaryExpr>(line, op, std::move(operand));
    } else {
      ASSIGN_OR_RETURN(node, ParsePrimary());
    }
    ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
    if (with_filter) {
      ASSIGN_OR_RETURN(node, ParseFilterExpr(std::move(node)));
    }
    return node;
  }

  absl::StatusOr<ExprPtr> ParsePrimary() {
    DepthGuard guard(this);
    RETURN_IF_ERROR(guard.Check());
    const Token& tok = Cur();
    const int line = tok.line;
    switch (tok.type) {
      case TokenType::kName: {
        const std::string n = tok.value;
        Next();
        if (n == "true" || n == "True") return ExprPtr(std::make_unique<ConstExpr>(line, Value::Bool(true)));
        if (n == "false" || n == "False") return ExprPtr(std::make_unique<ConstExpr>(line, Value::Bool(false)));
        if (n == "none" || n == "None") return ExprPtr(std::make_unique<ConstExpr>(line, Value::None()));
        for (MacroDef* def : open_macros_) {
          def->uses_caller |= n == "caller";
          def->uses_varargs |= n == "varargs";
          def->uses_kwargs |= n == "kwargs";
        }
        return ExprPtr(std::make_unique<NameExpr>(line, n));
      }
      case TokenType::kString: {
        std::string text;
        while (Cur().type == TokenType::kString) {
          text += Cur().value;
          Next();
        }
        return ExprPtr(std::make_unique<ConstExpr>(line, Value::String(std::move(text))));
      }
      case TokenType::kInteger: {
        const int64_t v = tok.int_value;
        Next();
        return ExprPtr(std::make_unique<ConstExpr>(line, Value::Int(v)));
      }
      case TokenType::kFloat: {
        const double v = tok.float_value;
        Next();
        return ExprPtr(std::make_unique<ConstExpr>(line, Value::Float(v)));
      }
      case TokenType::kOperator:
        if (tok.value == "(") {
          Next();
          ASSIGN_OR_RETURN(ExprPtr inner, ParseTuple(false, true, {}, true));
          RETURN_IF_ERROR(ExpectOp(")"));
          return inner;
        }
        if (tok.value == "[") return ParseList();
        if (tok.value == "{") return ParseDict();
        break;
      default:
        break;
    }
    if (tok.type == TokenType::kEnd) return Fail("unexpected end of template");
    return Fail(Cat("unexpected '", Describe(tok), "'"));
  }

  absl::StatusOr<ExprPtr> ParseList() {
    auto node = std::make_unique<ListExpr>(Cur().line);
    RETURN_IF_ERROR(ExpectOp("["));
    while (!IsOp("]")) {
      if (!node->items.empty()) RETURN_IF_ERROR(ExpectOp(","));
      if (IsOp("]")) break;
      ASSIGN_OR_RETURN(ExprPtr item, ParseExpression(true));
      node->items.push_back(std::move(item));
    }
    RETURN_IF_ERROR(ExpectOp("]"));
    return node;
  }

  absl::StatusOr<ExprPtr> ParseDict() {
    auto node = std::make_unique<DictExpr>(Cur().line);
    RETURN_IF_ERROR(ExpectOp("{"));
    while (!IsOp("}")) {
      if (!node->items.empty()) RETURN_IF_ERROR(ExpectOp(","));
      if (IsOp("}")) break;
      ASSIGN_OR_RETURN(ExprPtr key, ParseExpression(true));
      RETURN_IF_ERROR(ExpectOp(":"));
      ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
      node->items.emplace_back(std::move(key), std::move(value));
    }
    RETURN_IF_ERROR(ExpectOp("}"));
    return node;
  }

  absl::StatusOr<ExprPtr> ParsePostfix(ExprPtr node) {
    int links = 0;
    while (true) {
      RETURN_IF_ERROR(Link(&links));
      if (IsOp(".") || IsOp("[")) {
        ASSIGN_OR_RETURN(node, ParseSubscript(std::move(node)));
      } else if (IsOp("(")) {
        ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
      } else {
        return node;
      }
    }
  }

  absl::StatusOr<ExprPtr> ParseFilterExpr(ExprPtr node) {
    int links = 0;
    while (true) {
      RETURN_IF_ERROR(Link(&links));
      if (IsOp("|")) {
        ASSIGN_OR_RETURN(node, ParseFilter(std::move(node), false));
      } else if (IsName("is")) {
        ASSIGN_OR_RETURN(node, ParseTest(std::move(node)));
      } else if (IsOp("(")) {
        ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
      } else {
        return node;
      }
    }
  }

  absl::StatusOr<ExprPtr> ParseSubscript(ExprPtr node) {
    const int line = Cur().line;
    if (SkipOp(".")) {
      const Token& attr = Cur();
      if (attr.type == TokenType::kName) {
        auto get = std::make_unique<AttrExpr>(line);
        get->object = std::move(node);
        get->name = attr.value;
        Next();
        return get;
      }
      if (attr.type != TokenType::kInteger) return Fail("expected name or number");
      auto get = std::make_unique<ItemExpr>(line);
      get->object = std::move(node);
      get->key = std::make_unique<ConstExpr>(attr.line, Value::Int(attr.int_value));
      Next();
      return get;
    }
    RETURN_IF_ERROR(ExpectOp("["));
    // One subscript: an expression or a slice [start:stop:step].
    ExprPtr parts[3];
    bool is_slice = false;
    if (!IsOp(":")) {
      ASSIGN_OR_RETURN(parts[0], ParseExpression(true));
    }
    if (SkipOp(":")) {
      is_slice = true;
      if (!IsOp(":") && !IsOp("]")) {
        ASSIGN_OR_RETURN(parts[1], ParseExpression(true));
      }
      if (SkipOp(":") && !IsOp("]")) {
        ASSIGN_OR_RETURN(parts[2], ParseExpression(true));
      }
    }
    if (IsOp(",")) return Fail("tuple subscripts are not supported");
    RETURN_IF_ERROR(ExpectOp("]"));
    if (!is_slice) {
      if (parts[0] == nullptr) return Fail("expected an expression");
      auto get = std::make_unique<ItemExpr>(line);
      get->object = std::move(node);
      get->key = std::move(parts[0]);
      return get;
    }
    auto slice = std::make_unique<SliceExpr>(line);
    slice->object = std::move(node);
    slice->start = std::move(parts[0]);
    slice->stop = std::move(parts[1]);
    slice->step = std::move(parts[2]);
    return slice;
  }

  absl::Status ParseCallArgs(CallArgExprs* args) {
    RETURN_IF_ERROR(ExpectOp("("));
    bool require_comma = false;
    auto invalid = [&] { return Fail("invalid syntax for function call expression"); };
    while (!IsOp(")")) {
      if (require_comma) {
        RETURN_IF_ERROR(ExpectOp(","));
        if (IsOp(")")) break;
      }
      if (SkipOp("*")) {
        if (args->star_args || args->star_kwargs) return invalid();
        ASSIGN_OR_RETURN(args->star_args, ParseExpression(true));
      } else if (SkipOp("**")) {
        if (args->star_kwargs) return invalid();
        ASSIGN_OR_RETURN(args->star_kwargs, ParseExpression(true));
      } else if (Cur().type == TokenType::kName && Look().type == TokenType::kOperator && Look().value == "=") {
        if (args->star_kwargs) return invalid();
        std::string key = Cur().value;
        Next();
        Next();
        ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
        args->keywords.emplace_back(std::move(key), std::move(value));
      } else {
        if (args->star_args || args->star_kwargs || !args->keywords.empty()) return invalid();
        ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
        args->positional.push_back(std::move(value));
      }
      require_comma = true;
    }
    return ExpectOp(")");
  }

  absl::StatusOr<ExprPtr> ParseCall(ExprPtr callee) {
    auto node = std::make_unique<CallExpr>(Cur().line);
    node->callee = std::move(callee);
    RETURN_IF_ERROR(ParseCallArgs(&node->args));
    return node;
  }

  absl::StatusOr<std::string> DottedName() {
    ASSIGN_OR_RETURN(std::string name, ExpectName());
    while (SkipOp(".")) {
      ASSIGN_OR_RETURN(std::string part, ExpectName());
      CatAppend(&name, ".", part);
    }
    return name;
  }

  absl::StatusOr<ExprPtr> ParseFilter(ExprPtr node, bool start_inline) {
    int links = 0;
    while (IsOp("|") || start_inline) {
      RETURN_IF_ERROR(Link(&links));
      if (!start_inline) Next();
      start_inline = false;
      auto filter = std::make_unique<FilterExpr>(Cur().line);
      ASSIGN_OR_RETURN(filter->name, DottedName());
      filter->fn = FindFilter(filter->name);
      if (filter->fn == nullptr && soft_ == 0) return Fail(Cat("No filter named '", filter->name, "'."));
      if (IsOp("(")) RETURN_IF_ERROR(ParseCallArgs(&filter->args));
      filter->input = std::move(node);
      node = std::move(filter);
    }
    return node;
  }

  absl::StatusOr<ExprPtr> ParseTest(ExprPtr node) {
    const int line = Cur().line;
    Next();  // is
    const bool negated = SkipName("not");
    auto test = std::make_unique<TestExpr>(line);
    ASSIGN_OR_RETURN(test->name, DottedName());
    test->fn = FindTest(test->name);
    if (test->fn == nullptr && soft_ == 0) return Fail(Cat("No test named '", test->name, "'."));
    const Token& cur = Cur();
    if (IsOp("(")) {
      RETURN_IF_ERROR(ParseCallArgs(&test->args));
    } else if ((cur.type == TokenType::kName || cur.type == TokenType::kString || cur.type == TokenType::kInteger ||
                cur.type == TokenType::kFloat || IsOp("(") || IsOp("[") || IsOp("{")) &&
               !IsName("else") && !IsName("or") && !IsName("and")) {
      if (IsName("is")) return Fail("You cannot chain multiple tests with is");
      ASSIGN_OR_RETURN(ExprPtr arg, ParsePrimary());
      ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
      test->args.positional.push_back(std::move(arg));
    }
    test->input = std::move(node);
    if (negated) return ExprPtr(std::make_unique<UnaryExpr>(line, UnaryExpr::Op::kNot, std::move(test)));
    return ExprPtr(std::move(test));
  }

  const std::vector<Token>& t_;
  size_t i_ = 0;
  const int max_depth_;
  int depth_ = 0;
  int soft_ = 0;        // inside an if or a conditional expression: unknown filters fail when reached
  int loop_depth_ = 0;  // enclosing for loops (break/continue need one)
  std::vector<MacroDef*> open_macros_;
};

}  // namespace

absl::StatusOr<StmtList> Parse(const std::vector<Token>& tokens, int max_depth) {
  return Parser(tokens, max_depth).ParseTemplate();
}

}  // namespace llm::chat
