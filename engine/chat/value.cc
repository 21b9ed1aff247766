#include "engine/chat/value.h"

#include "engine/chat/cat.h"
#include "engine/chat/python_text.h"

namespace llm::chat {

const Value* ValueDict::Find(const Value& key) const {
  if (key.is_string()) return Find(std::string_view(key.str()));
  for (const auto& [k, v] : items_)
    if (Equals(k, key)) return &v;
  return nullptr;
}

const Value* ValueDict::Find(std::string_view key) const {
  for (const auto& [k, v] : items_)
    if (k.is_string() && k.str() == key) return &v;
  return nullptr;
}

void ValueDict::Set(Value key, Value value) {
  for (auto& [k, v] : items_) {
    if (Equals(k, key)) {
      v = std::move(value);
      return;
    }
  }
  items_.emplace_back(std::move(key), std::move(value));
}

Value Value::Undefined(std::string message, ErrorKind kind) {
  Value v;
  v.heap_ = std::make_shared<UndefinedInfo>(UndefinedInfo{std::move(message), kind});
  return v;
}

Value Value::None() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value Value::Bool(bool value) {
  Value v;
  v.kind_ = Kind::kBool;
  v.scalar_.b = value;
  return v;
}

Value Value::Int(int64_t value) {
  Value v;
  v.kind_ = Kind::kInt;
  v.scalar_.i = value;
  return v;
}

Value Value::Float(double value) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.scalar_.f = value;
  return v;
}

Value Value::String(std::string value) {
  Value v;
  v.kind_ = Kind::kString;
  v.heap_ = std::make_shared<std::string>(std::move(value));
  return v;
}

Value Value::List(ValueList items) {
  Value v;
  v.kind_ = Kind::kList;
  v.heap_ = std::make_shared<ValueList>(std::move(items));
  return v;
}

Value Value::Tuple(ValueList items) {
  Value v = List(std::move(items));
  v.kind_ = Kind::kTuple;
  return v;
}

Value Value::Dict(ValueDict items) {
  Value v;
  v.kind_ = Kind::kDict;
  v.heap_ = std::make_shared<ValueDict>(std::move(items));
  return v;
}

Value Value::FromObject(std::shared_ptr<Object> object) {
  Value v;
  v.kind_ = Kind::kObject;
  v.heap_ = std::move(object);
  return v;
}

const UndefinedInfo& Value::undefined_info() const {
  static const UndefinedInfo kPlain{"value is undefined", ErrorKind::kUndefined};
  return heap_ != nullptr ? *static_cast<const UndefinedInfo*>(heap_.get()) : kPlain;
}

absl::Status Value::UndefinedError() const {
  const UndefinedInfo& info = undefined_info();
  return TemplateError(info.kind, info.message);
}

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return scalar_.b;
    case Kind::kInt:
      return scalar_.i != 0;
    case Kind::kFloat:
      return scalar_.f != 0.0;
    case Kind::kString:
      return !str().empty();
    case Kind::kList:
    case Kind::kTuple:
      return !list().empty();
    case Kind::kDict:
      return !dict().empty();
    case Kind::kObject:
      return true;
  }
  return false;
}

std::string Value::Str() const {
  if (kind_ == Kind::kString) return str();
  std::string out;
  AppendStr(&out);
  return out;
}

std::string Value::Repr() const {
  std::string out;
  AppendRepr(&out);
  return out;
}

void Value::AppendStr(std::string* out) const {
  switch (kind_) {
    case Kind::kUndefined:
      return;
    case Kind::kString:
      out->append(str());
      return;
    default:
      AppendRepr(out);
  }
}

void Value::AppendRepr(std::string* out) const {
  switch (kind_) {
    case Kind::kUndefined:
      out->append("Undefined");
      return;
    case Kind::kNone:
      out->append("None");
      return;
    case Kind::kBool:
      out->append(scalar_.b ? "True" : "False");
      return;
    case Kind::kInt:
      CatAppend(out, scalar_.i);
      return;
    case Kind::kFloat:
      out->append(FloatRepr(scalar_.f));
      return;
    case Kind::kString:
      out->append(StringRepr(str()));
      return;
    case Kind::kList:
    case Kind::kTuple: {
      const bool tuple = kind_ == Kind::kTuple;
      out->push_back(tuple ? '(' : '[');
      const ValueList& items = list();
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out->append(", ");
        items[i].AppendRepr(out);
      }
      if (tuple && items.size() == 1) out->push_back(',');
      out->push_back(tuple ? ')' : ']');
      return;
    }
    case Kind::kDict: {
      out->push_back('{');
      bool first = true;
      for (const auto& [k, v] : dict().items()) {
        if (!first) out->append(", ");
        first = false;
        k.AppendRepr(out);
        out->append(": ");
        v.AppendRepr(out);
      }
      out->push_back('}');
      return;
    }
    case Kind::kObject:
      out->append(object()->Repr());
      return;
  }
}

std::string_view Value::TypeName() const {
  switch (kind_) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kList: return "list";
    case Kind::kTuple: return "tuple";
    case Kind::kDict: return "dict";
    case Kind::kObject: return object()->TypeName();
  }
  return "object";
}

bool Value::IsCallable() const { return kind_ == Kind::kObject && object()->IsCallable(); }

bool Equals(const Value& a, const Value& b) {
  using Kind = Value::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return a.int_value() == b.int_value();
    return a.float_value() == b.float_value();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kString:
      return a.str() == b.str();
    case Kind::kList:
    case Kind::kTuple: {
      const ValueList &x = a.list(), &y = b.list();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i)
        if (!Equals(x[i], y[i])) return false;
      return true;
    }
    case Kind::kDict: {
      const ValueDict &x = a.dict(), &y = b.dict();
      if (x.size() != y.size()) return false;
      for (const auto& [k, v] : x.items()) {
        const Value* other = y.Find(k);
        if (other == nullptr || !Equals(v, *other)) return false;
      }
      return true;
    }
    case Kind::kObject:
      return a.object() == b.object();
    default:
      return false;
  }
}

absl::StatusOr<int> Compare(const Value& a, const Value& b) {
  if (a.is_undefined()) return a.UndefinedError();
  if (b.is_undefined()) return b.UndefinedError();
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral())
      return a.int_value() < b.int_value() ? -1 : a.int_value() > b.int_value() ? 1 : 0;
    const double x = a.float_value(), y = b.float_value();
    return x < y ? -1 : x > y ? 1 : 0;  // NaN compares as neither, like Python
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.str().compare(b.str());  // UTF-8 byte order is code point order
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if ((a.is_list() && b.is_list()) || (a.is_tuple() && b.is_tuple())) {
    const ValueList &x = a.list(), &y = b.list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (Equals(x[i], y[i])) continue;
      return Compare(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  return TemplateError(ErrorKind::kType, Cat("'<' not supported between instances of '",
                                                      a.TypeName(), "' and '", b.TypeName(), "'"));
}

absl::Status CheckHashable(const Value& key) {
  switch (key.kind()) {
    case Value::Kind::kList:
    case Value::Kind::kDict:
      return TemplateError(ErrorKind::kType, Cat("unhashable type: '", key.TypeName(), "'"));
    case Value::Kind::kTuple:
      for (const Value& item : key.list()) {
        if (absl::Status s = CheckHashable(item); !s.ok()) return s;
      }
      return absl::OkStatus();
    default:
      return absl::OkStatus();
  }
}

std::string Object::Repr() const { return Cat("<", TypeName(), " object>"); }

Value Object::GetAttr(std::string_view name) const {
  return Value::Undefined(Cat("'", TypeName(), " object' has no attribute '", name, "'"));
}

absl::Status Object::SetAttr(std::string_view name, Value /*value*/) {
  return TemplateError(ErrorKind::kRuntime, "cannot assign attribute on non-namespace object");
}

absl::StatusOr<Value> Object::Call(CallArgs /*args*/, Interpreter& /*interpreter*/) const {
  return TemplateError(ErrorKind::kType, Cat("'", TypeName(), "' object is not callable"));
}

}  // namespace llm::chat
