// Evaluation of expression nodes (ast.h).
#include "engine/chat/cat.h"
#include "engine/chat/ast.h"
#include "engine/chat/builtins.h"
#include "engine/chat/interpreter.h"
#include "engine/chat/operations.h"
#include "kernels/core/status.h"

namespace llm::chat {

absl::StatusOr<CallArgs> CallArgExprs::Eval(Interpreter& in) const {
  CallArgs args;
  args.positional.reserve(positional.size());
  for (const ExprPtr& e : positional) {
    ASSIGN_OR_RETURN(Value v, e->Eval(in));
    args.positional.push_back(std::move(v));
  }
  if (star_args) {
    ASSIGN_OR_RETURN(Value v, star_args->Eval(in));
    ASSIGN_OR_RETURN(ValueList items, Iterate(v, in));
    for (Value& item : items) args.positional.push_back(std::move(item));
  }
  for (const auto& [name, e] : keywords) {
    ASSIGN_OR_RETURN(Value v, e->Eval(in));
    args.keywords.emplace_back(name, std::move(v));
  }
  if (star_kwargs) {
    ASSIGN_OR_RETURN(Value v, star_kwargs->Eval(in));
    if (!v.is_dict())
      return TemplateError(ErrorKind::kType, Cat("argument after ** must be a mapping, not ", v.TypeName()));
    for (const auto& [k, item] : v.dict().items()) {
      if (!k.is_string()) return TemplateError(ErrorKind::kType, "keywords must be strings");
      args.keywords.emplace_back(k.str(), item);
    }
  }
  return args;
}

absl::StatusOr<Value> ConstExpr::Eval(Interpreter& in) const { return value; }

absl::StatusOr<Value> NameExpr::Eval(Interpreter& in) const { return in.Lookup(name); }

absl::StatusOr<Value> ListExpr::Eval(Interpreter& in) const {
  ValueList values;
  values.reserve(items.size());
  for (const ExprPtr& e : items) {
    ASSIGN_OR_RETURN(Value v, e->Eval(in));
    values.push_back(std::move(v));
  }
  return tuple ? Value::Tuple(std::move(values)) : Value::List(std::move(values));
}

absl::StatusOr<Value> DictExpr::Eval(Interpreter& in) const {
  ValueDict dict;
  for (const auto& [ke, ve] : items) {
    ASSIGN_OR_RETURN(Value k, ke->Eval(in));
    RETURN_IF_ERROR(WithLine(CheckHashable(k), line));
    ASSIGN_OR_RETURN(Value v, ve->Eval(in));
    dict.Set(std::move(k), std::move(v));
  }
  return Value::Dict(std::move(dict));
}

absl::StatusOr<Value> AttrExpr::Eval(Interpreter& in) const {
  ASSIGN_OR_RETURN(Value obj, object->Eval(in));
  absl::StatusOr<Value> v = GetAttribute(obj, name);
  if (!v.ok()) return WithLine(v.status(), line);
  return v;
}

absl::StatusOr<Value> ItemExpr::Eval(Interpreter& in) const {
  ASSIGN_OR_RETURN(Value obj, object->Eval(in));
  ASSIGN_OR_RETURN(Value k, key->Eval(in));
  absl::StatusOr<Value> v = GetItem(obj, k);
  if (!v.ok()) return WithLine(v.status(), line);
  return v;
}

absl::StatusOr<Value> SliceExpr::Eval(Interpreter& in) const {
  ASSIGN_OR_RETURN(Value obj, object->Eval(in));
  Value parts[3];
  const Expr* exprs[3] = {start.get(), stop.get(), step.get()};
  for (int i = 0; i < 3; ++i) {
    if (exprs[i] != nullptr) {
      ASSIGN_OR_RETURN(parts[i], exprs[i]->Eval(in));
    }
  }
  absl::StatusOr<Value> v = SliceValue(obj, parts[0], parts[1], parts[2], in);
  if (!v.ok()) return WithLine(v.status(), line);
  return v;
}

absl::StatusOr<Value> CallExpr::Eval(Interpreter& in) const {
  if (const auto* attr = dynamic_cast<const AttrExpr*>(callee.get())) {
    // A method of str/list/dict is called directly, without building a bound method.
    ASSIGN_OR_RETURN(Value obj, attr->object->Eval(in));
    if (obj.is_string() || obj.is_sequence() || obj.is_dict()) {
      ASSIGN_OR_RETURN(CallArgs args, this->args.Eval(in));
      bool found = false;
      absl::StatusOr<Value> result = CallMethod(in, obj, attr->name, args, &found);
      if (found) {
        if (!result.ok()) return WithLine(result.status(), line);
        return result;
      }
      absl::StatusOr<Value> fn = GetAttribute(obj, attr->name);
      if (!fn.ok()) return WithLine(fn.status(), line);
      absl::StatusOr<Value> called = CallValue(*fn, std::move(args), in);
      if (!called.ok()) return WithLine(called.status(), line);
      return called;
    }
    absl::StatusOr<Value> fn = GetAttribute(obj, attr->name);
    if (!fn.ok()) return WithLine(fn.status(), line);
    ASSIGN_OR_RETURN(CallArgs args, this->args.Eval(in));
    absl::StatusOr<Value> called = CallValue(*fn, std::move(args), in);
    if (!called.ok()) return WithLine(called.status(), line);
    return called;
  }
  ASSIGN_OR_RETURN(Value fn, callee->Eval(in));
  ASSIGN_OR_RETURN(CallArgs args, this->args.Eval(in));
  absl::StatusOr<Value> called = CallValue(fn, std::move(args), in);
  if (!called.ok()) return WithLine(called.status(), line);
  return called;
}

absl::StatusOr<Value> FilterExpr::Eval(Interpreter& in) const {
  ASSIGN_OR_RETURN(Value value, input->Eval(in));
  if (fn == nullptr)
    return WithLine(TemplateError(ErrorKind::kRuntime, Cat("No filter named '", name, "' found.")), line);
  ASSIGN_OR_RETURN(CallArgs call_args, args.Eval(in));
  absl::StatusOr<Value> result = fn(in, value, call_args);
  if (!result.ok()) return WithLine(result.status(), line);
  return result;
}

absl::StatusOr<Value> TestExpr::Eval(Interpreter& in) const {
  ASSIGN_OR_RETURN(Value value, input->Eval(in));
  if (fn == nullptr)
    return WithLine(TemplateError(ErrorKind::kRuntime, Cat("No test named '", name, "' found.")), line);
  ASSIGN_OR_RETURN(CallArgs call_args, args.Eval(in));
  absl::StatusOr<bool> result = fn(in, value, call_args);
  if (!result.ok()) return WithLine(result.status(), line);
  return Value::Bool(*result);
}

absl::StatusOr<Value> BlockValueExpr::Eval(Interpreter& in) const { return in.block_value; }

absl::StatusOr<Value> UnaryExpr::Eval(Interpreter& in) const {
  ASSIGN_OR_RETURN(Value v, operand->Eval(in));
  if (op == Op::kNot) return Value::Bool(!v.Truthy());
  absl::StatusOr<Value> r = Negate(v, op == Op::kNeg);
  if (!r.ok()) return WithLine(r.status(), line);
  return r;
}

absl::StatusOr<Value> BinaryExpr::Eval(Interpreter& in) const {
  ASSIGN_OR_RETURN(Value a, left->Eval(in));
  if (op == BinaryOp::kAnd) {
    if (!a.Truthy()) return a;
    return right->Eval(in);
  }
  if (op == BinaryOp::kOr) {
    if (a.Truthy()) return a;
    return right->Eval(in);
  }
  ASSIGN_OR_RETURN(Value b, right->Eval(in));
  absl::StatusOr<Value> r = BinaryOperation(op, a, b, in);
  if (!r.ok()) return WithLine(r.status(), line);
  return r;
}

absl::StatusOr<Value> ConcatExpr::Eval(Interpreter& in) const {
  std::string out;
  for (const ExprPtr& part : parts) {
    ASSIGN_OR_RETURN(Value v, part->Eval(in));
    v.AppendStr(&out);
    RETURN_IF_ERROR(WithLine(in.CheckSize(out.size()), line));
  }
  return Value::String(std::move(out));
}

absl::StatusOr<Value> CompareExpr::Eval(Interpreter& in) const {
  ASSIGN_OR_RETURN(Value a, first->Eval(in));
  for (const auto& [op, expr] : rest) {
    ASSIGN_OR_RETURN(Value b, expr->Eval(in));
    bool result = false;
    switch (op) {
      case CompareOp::kEq: result = Equals(a, b); break;
      case CompareOp::kNe: result = !Equals(a, b); break;
      case CompareOp::kIn:
      case CompareOp::kNotIn: {
        absl::StatusOr<bool> c = Contains(b, a);
        if (!c.ok()) return WithLine(c.status(), line);
        result = op == CompareOp::kIn ? *c : !*c;
        break;
      }
      default: {
        absl::StatusOr<int> c = Compare(a, b);
        if (!c.ok()) return WithLine(c.status(), line);
        result = op == CompareOp::kLt ? *c < 0 : op == CompareOp::kLe ? *c <= 0 : op == CompareOp::kGt ? *c > 0 : *c >= 0;
        // NaN is neither smaller, equal nor larger: every ordering is false.
        if (*c == 0 && (op == CompareOp::kLe || op == CompareOp::kGe) && !Equals(a, b)) result = false;
      }
    }
    if (!result) return Value::Bool(false);
    a = std::move(b);
  }
  return Value::Bool(true);
}

absl::StatusOr<Value> CondExpr::Eval(Interpreter& in) const {
  ASSIGN_OR_RETURN(Value t, test->Eval(in));
  if (t.Truthy()) return then->Eval(in);
  if (otherwise) return otherwise->Eval(in);
  return Value::Undefined("the inline if-expression evaluated to false and no else section was defined.");
}

}  // namespace llm::chat
