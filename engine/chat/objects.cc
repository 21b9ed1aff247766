#include "engine/chat/objects.h"

#include "engine/chat/cat.h"
#include "engine/chat/operations.h"
#include "kernels/core/status.h"

namespace llm::chat {

std::string MacroObject::Repr() const { return Cat("<Macro '", def_->name, "'>"); }

Value MacroObject::GetAttr(std::string_view name) const {
  if (name == "name") return Value::String(def_->name);
  if (name == "arguments") {
    ValueList params;
    for (const std::string& p : def_->params) params.push_back(Value::String(p));
    return Value::Tuple(std::move(params));
  }
  if (name == "catch_kwargs") return Value::Bool(def_->uses_kwargs);
  if (name == "catch_varargs") return Value::Bool(def_->uses_varargs);
  if (name == "caller") return Value::Bool(def_->uses_caller);
  return Object::GetAttr(name);
}

absl::StatusOr<Value> MacroObject::Call(CallArgs args, Interpreter& in) const {
  const MacroDef& def = *def_;
  RETURN_IF_ERROR(in.EnterCall());
  struct Leave {
    Interpreter& in;
    ~Leave() { in.LeaveCall(); }
  } leave{in};

  Scope* scope = in.NewScope(closure_);
  const size_t n = def.params.size();
  std::vector<bool> bound(n, false);
  std::vector<Value> values(n);
  ValueList varargs;
  for (size_t i = 0; i < args.positional.size(); ++i) {
    if (i < n) {
      values[i] = std::move(args.positional[i]);
      bound[i] = true;
    } else if (def.uses_varargs) {
      varargs.push_back(std::move(args.positional[i]));
    } else {
      return TemplateError(ErrorKind::kType, Cat("macro '", def.name, "' takes not more than ", n,
                                                          " argument(s)"));
    }
  }
  ValueDict kwargs;
  Value caller = caller_;
  for (auto& [key, value] : args.keywords) {
    size_t i = 0;
    while (i < n && def.params[i] != key) ++i;
    if (i < n) {
      if (bound[i])
        return TemplateError(ErrorKind::kType, Cat("macro '", def.name, "' got multiple values for argument '",
                                                            key, "'"));
      values[i] = std::move(value);
      bound[i] = true;
    } else if (key == "caller" && def.uses_caller) {
      caller = std::move(value);
    } else if (def.uses_kwargs) {
      kwargs.Set(Value::String(key), std::move(value));
    } else {
      return TemplateError(ErrorKind::kType, Cat("macro '", def.name, "' takes no keyword argument '", key, "'"));
    }
  }
  Interpreter::ScopeGuard guard(in, scope);
  const size_t first_default = n - def.defaults.size();
  for (size_t i = 0; i < n; ++i) {
    if (!bound[i]) {
      if (i >= first_default) {
        // Defaults are evaluated at each call, seeing the parameters bound before them.
        ASSIGN_OR_RETURN(values[i], def.defaults[i - first_default]->Eval(in));
      } else {
        values[i] = Value::Undefined(Cat("parameter '", def.params[i], "' was not provided"));
      }
    }
    scope->Set(def.params[i], values[i]);
  }
  if (def.uses_varargs) scope->Set("varargs", Value::Tuple(std::move(varargs)));
  if (def.uses_kwargs) scope->Set("kwargs", Value::Dict(std::move(kwargs)));
  if (def.uses_caller) scope->Set("caller", caller.is_undefined() ? Value::Undefined("No caller defined") : caller);
  const Interpreter::LoopSignal saved = in.signal;
  absl::StatusOr<std::string> text = in.Capture(def.body);
  in.signal = saved;
  if (!text.ok()) return text.status();
  return Value::String(*std::move(text));
}

std::string LoopObject::Repr() const {
  return Cat("<LoopContext ", index0_ + 1, "/", items_->size(), ">");
}

namespace {

// loop.cycle(...) and loop.changed(...).
class LoopMethodObject : public Object {
 public:
  explicit LoopMethodObject(std::function<absl::StatusOr<Value>(CallArgs&)> fn) : fn_(std::move(fn)) {}
  std::string_view TypeName() const override { return "method"; }
  bool IsCallable() const override { return true; }
  absl::StatusOr<Value> Call(CallArgs args, Interpreter& in) const override { return fn_(args); }

 private:
  std::function<absl::StatusOr<Value>(CallArgs&)> fn_;
};

}  // namespace

Value LoopObject::GetAttr(std::string_view name) const {
  const int64_t n = static_cast<int64_t>(items_->size());
  if (name == "index") return Value::Int(index0_ + 1);
  if (name == "index0") return Value::Int(index0_);
  if (name == "revindex") return Value::Int(n - index0_);
  if (name == "revindex0") return Value::Int(n - index0_ - 1);
  if (name == "first") return Value::Bool(index0_ == 0);
  if (name == "last") return Value::Bool(index0_ == n - 1);
  if (name == "length") return Value::Int(n);
  if (name == "depth") return Value::Int(depth_);
  if (name == "depth0") return Value::Int(depth_ - 1);
  if (name == "previtem") {
    if (index0_ == 0) return Value::Undefined("there is no previous item");
    return (*items_)[index0_ - 1];
  }
  if (name == "nextitem") {
    if (index0_ + 1 >= n) return Value::Undefined("there is no next item");
    return (*items_)[index0_ + 1];
  }
  if (name == "cycle") {
    const int64_t index = index0_;
    return Value::FromObject(std::make_shared<LoopMethodObject>([index](CallArgs& args) -> absl::StatusOr<Value> {
      if (args.positional.empty()) return TemplateError(ErrorKind::kType, "no items for cycling given");
      return args.positional[index % static_cast<int64_t>(args.positional.size())];
    }));
  }
  if (name == "changed") {
    std::shared_ptr<const LoopObject> self = shared_from_this();
    return Value::FromObject(std::make_shared<LoopMethodObject>([self](CallArgs& args) -> absl::StatusOr<Value> {
      bool changed = !self->changed_called_ || self->last_changed_.size() != args.positional.size();
      for (size_t i = 0; !changed && i < args.positional.size(); ++i)
        changed = !Equals(self->last_changed_[i], args.positional[i]);
      self->changed_called_ = true;
      if (changed) self->last_changed_ = args.positional;
      return Value::Bool(changed);
    }));
  }
  return Object::GetAttr(name);
}

absl::StatusOr<Value> LoopObject::Call(CallArgs args, Interpreter& in) const {
  if (!recurse_)
    return TemplateError(ErrorKind::kType,
                         "The loop must have the 'recursive' marker to be called recursively.");
  if (args.positional.size() != 1 || !args.keywords.empty())
    return TemplateError(ErrorKind::kType, "loop() takes exactly one argument");
  return recurse_(args.positional[0], depth_ + 1);
}

std::string NamespaceObject::Repr() const { return Cat("<Namespace ", Value::Dict(attrs_).Repr(), ">"); }

Value NamespaceObject::GetAttr(std::string_view name) const {
  if (const Value* v = attrs_.Find(name)) return *v;
  return Value::Undefined(Cat("'Namespace object' has no attribute '", name, "'"));
}

absl::Status NamespaceObject::SetAttr(std::string_view name, Value value) {
  attrs_.Set(Value::String(std::string(name)), std::move(value));
  return absl::OkStatus();
}

}  // namespace llm::chat
