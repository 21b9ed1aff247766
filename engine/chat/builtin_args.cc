#include "engine/chat/builtin_args.h"

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "engine/chat/cat.h"
#include "absl/strings/str_split.h"
#include "engine/chat/operations.h"
#include "engine/chat/python_text.h"
#include "kernels/core/status.h"

namespace llm::chat {

absl::StatusOr<BoundArgs> BoundArgs::Bind(std::string_view fn, CallArgs& args,
                                          std::initializer_list<std::string_view> params) {
  BoundArgs bound;
  bound.values_.resize(params.size());
  if (args.positional.size() > params.size()) {
    return TemplateError(ErrorKind::kType, Cat(fn, "() takes at most ", params.size(), " argument(s) (",
                                                        args.positional.size(), " given)"));
  }
  for (size_t i = 0; i < args.positional.size(); ++i) bound.values_[i] = std::move(args.positional[i]);
  for (auto& [key, value] : args.keywords) {
    size_t i = 0;
    for (std::string_view p : params) {
      if (p == key) break;
      ++i;
    }
    if (i == params.size())
      return TemplateError(ErrorKind::kType, Cat(fn, "() got an unexpected keyword argument '", key, "'"));
    if (bound.values_[i])
      return TemplateError(ErrorKind::kType, Cat(fn, "() got multiple values for argument '", key, "'"));
    bound.values_[i] = std::move(value);
  }
  return bound;
}

absl::StatusOr<int64_t> ToInt(const Value& v, std::string_view what) {
  if (v.is_integral()) return v.int_value();
  if (v.is_undefined()) return v.UndefinedError();
  return TemplateError(ErrorKind::kType,
                       Cat("'", v.TypeName(), "' object cannot be interpreted as an integer (", what, ")"));
}

std::string ToStr(const Value& v) { return v.Str(); }

absl::StatusOr<Value> GetPath(const Value& item, const Value& attribute) {
  if (!attribute.is_string()) return GetItem(item, attribute);
  Value current = item;
  for (absl::string_view part : absl::StrSplit(attribute.str(), '.')) {
    int64_t index = 0;
    Value key = absl::SimpleAtoi(part, &index) && !part.empty() && absl::ascii_isdigit(part[0])
                    ? Value::Int(index)
                    : Value::String(std::string(part));
    ASSIGN_OR_RETURN(current, GetItem(current, key));
  }
  return current;
}

Value IgnoreCase(const Value& v) { return v.is_string() ? Value::String(PyLower(v.str())) : v; }

}  // namespace llm::chat
