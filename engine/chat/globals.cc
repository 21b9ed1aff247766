// Global functions: jinja2's range (capped as its sandbox caps it), dict, namespace, joiner and
// cycler, and transformers' raise_exception and strftime_now.
#include <ctime>

#include "absl/container/flat_hash_map.h"
#include "engine/chat/cat.h"
#include "engine/chat/builtin_args.h"
#include "engine/chat/builtins.h"
#include "engine/chat/interpreter.h"
#include "engine/chat/objects.h"
#include "kernels/core/status.h"

namespace llm::chat {
namespace {

constexpr int64_t kMaxRange = 100000;  // jinja2.sandbox.MAX_RANGE

absl::StatusOr<Value> Range(CallArgs& args, Interpreter& in) {
  if (!args.keywords.empty()) return TemplateError(ErrorKind::kType, "range() takes no keyword arguments");
  const size_t n = args.positional.size();
  if (n < 1 || n > 3)
    return TemplateError(ErrorKind::kType, Cat("range expected at least 1 argument, got ", n));
  int64_t bounds[3] = {0, 0, 1};
  for (size_t i = 0; i < n; ++i) {
    const Value& v = args.positional[i];
    if (v.is_undefined()) return v.UndefinedError();
    if (!v.is_integral())
      return TemplateError(ErrorKind::kType,
                           Cat("'", v.TypeName(), "' object cannot be interpreted as an integer"));
  }
  if (n == 1) {
    bounds[1] = args.positional[0].int_value();
  } else {
    bounds[0] = args.positional[0].int_value();
    bounds[1] = args.positional[1].int_value();
    if (n == 3) bounds[2] = args.positional[2].int_value();
  }
  const int64_t start = bounds[0], stop = bounds[1], step = bounds[2];
  if (step == 0) return TemplateError(ErrorKind::kValue, "range() arg 3 must not be zero");
  const __int128 span = step > 0 ? static_cast<__int128>(stop) - start : static_cast<__int128>(start) - stop;
  const __int128 abs_step = step > 0 ? step : -static_cast<__int128>(step);
  const __int128 length = span <= 0 ? 0 : (span + abs_step - 1) / abs_step;
  if (length > kMaxRange)
    return TemplateError(ErrorKind::kOverflow, Cat("Range too big. The sandbox blocks ranges larger than "
                                                            "MAX_RANGE (", kMaxRange, ")."));
  RETURN_IF_ERROR(in.CountIterations(static_cast<int64_t>(length)));
  ValueList items;
  items.reserve(static_cast<size_t>(length));
  for (int64_t i = 0, v = start; i < static_cast<int64_t>(length); ++i, v += step) items.push_back(Value::Int(v));
  return Value::List(std::move(items));
}

absl::StatusOr<ValueDict> DictArgs(std::string_view fn, CallArgs& args, Interpreter& in) {
  ValueDict dict;
  if (args.positional.size() > 1)
    return TemplateError(ErrorKind::kType, Cat(fn, " expected at most 1 argument, got ", args.positional.size()));
  if (!args.positional.empty()) {
    const Value& init = args.positional[0];
    if (init.is_dict()) {
      dict = init.dict();
    } else if (init.is_sequence()) {
      for (const Value& pair : init.list()) {
        if (!pair.is_sequence() || pair.list().size() != 2)
          return TemplateError(ErrorKind::kValue, "dictionary update sequence element has wrong length");
        RETURN_IF_ERROR(CheckHashable(pair.list()[0]));
        dict.Set(pair.list()[0], pair.list()[1]);
      }
    } else {
      return TemplateError(ErrorKind::kType, Cat("'", init.TypeName(), "' object is not iterable"));
    }
  }
  for (auto& [k, v] : args.keywords) dict.Set(Value::String(k), v);
  return dict;
}

absl::StatusOr<Value> Dict(CallArgs& args, Interpreter& in) {
  ASSIGN_OR_RETURN(ValueDict dict, DictArgs("dict", args, in));
  return Value::Dict(std::move(dict));
}

absl::StatusOr<Value> Namespace(CallArgs& args, Interpreter& in) {
  ASSIGN_OR_RETURN(ValueDict dict, DictArgs("namespace", args, in));
  return Value::FromObject(std::make_shared<NamespaceObject>(std::move(dict)));
}

absl::StatusOr<Value> RaiseException(CallArgs& args, Interpreter&) {
  ASSIGN_OR_RETURN(BoundArgs a, BoundArgs::Bind("raise_exception", args, {"message"}));
  if (!a.Has(0)) return TemplateError(ErrorKind::kType, "raise_exception() missing 1 required positional argument");
  return TemplateError(ErrorKind::kRaised, a.Get(0)->Str());
}

absl::StatusOr<Value> StrftimeNow(CallArgs& args, Interpreter& in) {
  ASSIGN_OR_RETURN(BoundArgs a, BoundArgs::Bind("strftime_now", args, {"format"}));
  if (!a.Has(0) || !a.Get(0)->is_string())
    return TemplateError(ErrorKind::kType, "strftime_now() argument must be str");
  const std::time_t now = in.now();
  std::tm local{};
  localtime_r(&now, &local);
  char buf[512];
  const size_t n = std::strftime(buf, sizeof buf, a.Get(0)->str().c_str(), &local);
  return Value::String(std::string(buf, n));
}

// joiner(sep): '' on the first call, `sep` after.
class JoinerObject : public Object {
 public:
  explicit JoinerObject(std::string sep) : sep_(std::move(sep)) {}
  std::string_view TypeName() const override { return "Joiner"; }
  bool IsCallable() const override { return true; }
  absl::StatusOr<Value> Call(CallArgs, Interpreter&) const override {
    if (!used_) {
      used_ = true;
      return Value::String("");
    }
    return Value::String(sep_);
  }

 private:
  std::string sep_;
  mutable bool used_ = false;
};

absl::StatusOr<Value> Joiner(CallArgs& args, Interpreter&) {
  ASSIGN_OR_RETURN(BoundArgs a, BoundArgs::Bind("joiner", args, {"sep"}));
  return Value::FromObject(std::make_shared<JoinerObject>(a.Or(0, Value::String(", ")).Str()));
}

// cycler(*items): .next(), .current, .reset().
class CyclerObject : public Object, public std::enable_shared_from_this<CyclerObject> {
 public:
  explicit CyclerObject(ValueList items) : items_(std::move(items)) {}
  std::string_view TypeName() const override { return "Cycler"; }
  Value GetAttr(std::string_view name) const override {
    if (name == "current") return items_[pos_];
    std::shared_ptr<const CyclerObject> self = shared_from_this();
    if (name == "next") {
      return Value::FromObject(std::make_shared<FunctionObject>(
          "next", [self](CallArgs&, Interpreter&) -> absl::StatusOr<Value> {
            Value v = self->items_[self->pos_];
            self->pos_ = (self->pos_ + 1) % self->items_.size();
            return v;
          }));
    }
    if (name == "reset") {
      return Value::FromObject(std::make_shared<FunctionObject>(
          "reset", [self](CallArgs&, Interpreter&) -> absl::StatusOr<Value> {
            self->pos_ = 0;
            return Value::None();
          }));
    }
    return Object::GetAttr(name);
  }

 private:
  ValueList items_;
  mutable size_t pos_ = 0;
};

absl::StatusOr<Value> Cycler(CallArgs& args, Interpreter&) {
  if (args.positional.empty()) return TemplateError(ErrorKind::kRuntime, "at least one item has to be provided");
  return Value::FromObject(std::make_shared<CyclerObject>(args.positional));
}

const absl::flat_hash_map<std::string_view, Value>& Globals() {
  static const auto* globals = [] {
    auto* map = new absl::flat_hash_map<std::string_view, Value>;
    auto add = [&](std::string_view name, FunctionObject::Fn fn) {
      (*map)[name] = Value::FromObject(std::make_shared<FunctionObject>(std::string(name), std::move(fn)));
    };
    add("range", Range);
    add("dict", Dict);
    add("namespace", Namespace);
    add("raise_exception", RaiseException);
    add("strftime_now", StrftimeNow);
    add("joiner", Joiner);
    add("cycler", Cycler);
    return map;
  }();
  return *globals;
}

}  // namespace

Value FindGlobal(std::string_view name) {
  auto it = Globals().find(name);
  return it == Globals().end() ? Value() : it->second;
}

}  // namespace llm::chat
