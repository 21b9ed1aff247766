// jinja2's built-in tests (`x is defined`, `x is divisibleby 3`, ...).
#include "absl/container/flat_hash_map.h"
#include "engine/chat/cat.h"
#include "engine/chat/builtin_args.h"
#include "engine/chat/builtins.h"
#include "engine/chat/operations.h"
#include "engine/chat/python_text.h"
#include "kernels/core/status.h"

namespace llm::chat {
namespace {

using Args = CallArgs;

absl::StatusOr<Value> OneArg(std::string_view name, Args& args) {
  ASSIGN_OR_RETURN(BoundArgs a, BoundArgs::Bind(name, args, {"other"}));
  if (!a.Has(0)) return TemplateError(ErrorKind::kType, Cat(name, "() missing 1 required positional argument"));
  return *a.Get(0);
}

absl::Status NoArgs(std::string_view name, Args& args) { return BoundArgs::Bind(name, args, {}).status(); }

#define SIMPLE_TEST(fn, name, expr)                                          \
  absl::StatusOr<bool> fn(Interpreter&, const Value& v, Args& args) {        \
    RETURN_IF_ERROR(NoArgs(name, args));                                     \
    return (expr);                                                           \
  }

SIMPLE_TEST(Defined, "defined", !v.is_undefined())
SIMPLE_TEST(IsUndefined, "undefined", v.is_undefined())
SIMPLE_TEST(IsNone, "none", v.is_none())
SIMPLE_TEST(Boolean, "boolean", v.is_bool())
SIMPLE_TEST(IsFalse, "false", v.is_bool() && !v.bool_value())
SIMPLE_TEST(IsTrue, "true", v.is_bool() && v.bool_value())
SIMPLE_TEST(Integer, "integer", v.is_int())
SIMPLE_TEST(IsFloat, "float", v.is_float())
SIMPLE_TEST(Number, "number", v.is_number())
SIMPLE_TEST(IsString, "string", v.is_string())
SIMPLE_TEST(Mapping, "mapping", v.is_dict())
SIMPLE_TEST(Iterable, "iterable", v.is_string() || v.is_sequence() || v.is_dict() || v.is_undefined())
SIMPLE_TEST(Sequence, "sequence", v.is_string() || v.is_sequence() || v.is_dict() || v.is_undefined())
SIMPLE_TEST(IsCallable, "callable", v.IsCallable())
SIMPLE_TEST(Escaped, "escaped", false)

absl::StatusOr<bool> IsLower(Interpreter&, const Value& v, Args& args) {
  RETURN_IF_ERROR(NoArgs("lower", args));
  const std::string s = v.Str();
  return PyLower(s) == s && PyUpper(s) != s;
}

absl::StatusOr<bool> IsUpper(Interpreter&, const Value& v, Args& args) {
  RETURN_IF_ERROR(NoArgs("upper", args));
  const std::string s = v.Str();
  return PyUpper(s) == s && PyLower(s) != s;
}

absl::StatusOr<bool> Parity(Interpreter& in, const Value& v, Args& args, bool even) {
  RETURN_IF_ERROR(NoArgs(even ? "even" : "odd", args));
  ASSIGN_OR_RETURN(Value r, BinaryOperation(BinaryOp::kMod, v, Value::Int(2), in));
  return Equals(r, Value::Int(even ? 0 : 1));
}
absl::StatusOr<bool> Even(Interpreter& in, const Value& v, Args& args) { return Parity(in, v, args, true); }
absl::StatusOr<bool> Odd(Interpreter& in, const Value& v, Args& args) { return Parity(in, v, args, false); }

absl::StatusOr<bool> DivisibleBy(Interpreter& in, const Value& v, Args& args) {
  ASSIGN_OR_RETURN(BoundArgs a, BoundArgs::Bind("divisibleby", args, {"num"}));
  if (!a.Has(0)) return TemplateError(ErrorKind::kType, "divisibleby() missing 1 required positional argument");
  ASSIGN_OR_RETURN(Value r, BinaryOperation(BinaryOp::kMod, v, *a.Get(0), in));
  return Equals(r, Value::Int(0));
}

absl::StatusOr<bool> Eq(Interpreter&, const Value& v, Args& args) {
  ASSIGN_OR_RETURN(Value other, OneArg("eq", args));
  return Equals(v, other);
}
absl::StatusOr<bool> Ne(Interpreter&, const Value& v, Args& args) {
  ASSIGN_OR_RETURN(Value other, OneArg("ne", args));
  return !Equals(v, other);
}

template <int kWhich>  // 0 <, 1 <=, 2 >, 3 >=
absl::StatusOr<bool> Order(Interpreter&, const Value& v, Args& args) {
  ASSIGN_OR_RETURN(Value other, OneArg("compare", args));
  ASSIGN_OR_RETURN(int c, Compare(v, other));
  switch (kWhich) {
    case 0: return c < 0;
    case 1: return c <= 0 && (c < 0 || Equals(v, other));
    case 2: return c > 0;
    default: return c >= 0 && (c > 0 || Equals(v, other));
  }
}

absl::StatusOr<bool> In(Interpreter&, const Value& v, Args& args) {
  ASSIGN_OR_RETURN(BoundArgs a, BoundArgs::Bind("in", args, {"seq"}));
  if (!a.Has(0)) return TemplateError(ErrorKind::kType, "in() missing 1 required positional argument: 'seq'");
  return Contains(*a.Get(0), v);
}

absl::StatusOr<bool> SameAs(Interpreter&, const Value& v, Args& args) {
  ASSIGN_OR_RETURN(Value other, OneArg("sameas", args));
  if (v.kind() != other.kind()) return false;
  switch (v.kind()) {
    case Value::Kind::kNone:
    case Value::Kind::kUndefined: return true;
    case Value::Kind::kBool: return v.bool_value() == other.bool_value();
    case Value::Kind::kInt: return v.int_value() == other.int_value() && v.int_value() >= -5 && v.int_value() <= 256;
    case Value::Kind::kObject: return v.object() == other.object();
    case Value::Kind::kString: return &v.str() == &other.str();
    case Value::Kind::kList:
    case Value::Kind::kTuple: return &v.list() == &other.list();
    case Value::Kind::kDict: return &v.dict() == &other.dict();
    default: return false;
  }
}

absl::StatusOr<bool> IsFilter(Interpreter&, const Value& v, Args& args) {
  RETURN_IF_ERROR(NoArgs("filter", args));
  return v.is_string() && FindFilter(v.str()) != nullptr;
}

absl::StatusOr<bool> IsTest(Interpreter&, const Value& v, Args& args) {
  RETURN_IF_ERROR(NoArgs("test", args));
  return v.is_string() && FindTest(v.str()) != nullptr;
}

const absl::flat_hash_map<std::string_view, TestFn>& Tests() {
  static const auto* tests = new absl::flat_hash_map<std::string_view, TestFn>{
      {"boolean", Boolean},   {"callable", IsCallable}, {"defined", Defined},     {"divisibleby", DivisibleBy},
      {"eq", Eq},             {"equalto", Eq},          {"==", Eq},               {"escaped", Escaped},
      {"even", Even},         {"false", IsFalse},       {"filter", IsFilter},     {"float", IsFloat},
      {"ge", Order<3>},       {">=", Order<3>},         {"gt", Order<2>},         {"greaterthan", Order<2>},
      {">", Order<2>},        {"in", In},               {"integer", Integer},     {"iterable", Iterable},
      {"le", Order<1>},       {"<=", Order<1>},         {"lower", IsLower},       {"lt", Order<0>},
      {"lessthan", Order<0>}, {"<", Order<0>},          {"mapping", Mapping},     {"ne", Ne},
      {"!=", Ne},             {"none", IsNone},         {"number", Number},       {"odd", Odd},
      {"sameas", SameAs},     {"sequence", Sequence},   {"string", IsString},     {"test", IsTest},
      {"true", IsTrue},       {"undefined", IsUndefined}, {"upper", IsUpper},
  };
  return *tests;
}

}  // namespace

TestFn FindTest(std::string_view name) {
  auto it = Tests().find(name);
  return it == Tests().end() ? nullptr : it->second;
}

}  // namespace llm::chat
