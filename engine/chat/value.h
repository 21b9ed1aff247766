// Value: what template expressions compute, with Python's semantics as jinja2 has them: undefined,
// None, bool, int, float, str, list, tuple, dict (insertion-ordered) and objects (callables,
// namespaces, loop state). Lists, tuples and dicts are immutable once built (the sandbox forbids
// mutating them) and shared by reference, so copying a Value is cheap; a namespace is the one
// mutable object.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/chat/template_error.h"

namespace llm::chat {

class Value;
class Object;
class Interpreter;

using ValueList = std::vector<Value>;

// Insertion-ordered mapping with Python's key equality (1 == 1.0 == True).
class ValueDict {
 public:
  const Value* Find(const Value& key) const;
  const Value* Find(std::string_view key) const;
  // Inserts, or replaces the value of an equal key (keeping that key and its position).
  void Set(Value key, Value value);
  const std::vector<std::pair<Value, Value>>& items() const { return items_; }
  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }

 private:
  std::vector<std::pair<Value, Value>> items_;
};

// Why a value is undefined: the message its use raises, and the error class (an unsafe attribute
// raises SecurityError instead of UndefinedError).
struct UndefinedInfo {
  std::string message;
  ErrorKind kind = ErrorKind::kUndefined;
};

class Value {
 public:
  enum class Kind : uint8_t { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kTuple, kDict, kObject };

  Value() : kind_(Kind::kUndefined) {}
  static Value Undefined(std::string message, ErrorKind kind = ErrorKind::kUndefined);
  static Value None();
  static Value Bool(bool value);
  static Value Int(int64_t value);
  static Value Float(double value);
  static Value String(std::string value);
  static Value List(ValueList items);
  static Value Tuple(ValueList items);
  static Value Dict(ValueDict items);
  static Value FromObject(std::shared_ptr<Object> object);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_tuple() const { return kind_ == Kind::kTuple; }
  bool is_sequence() const { return kind_ == Kind::kList || kind_ == Kind::kTuple; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_object() const { return kind_ == Kind::kObject; }
  // bool is an int in Python: True + 1 == 2.
  bool is_integral() const { return kind_ == Kind::kInt || kind_ == Kind::kBool; }
  bool is_number() const { return is_integral() || kind_ == Kind::kFloat; }

  bool bool_value() const { return scalar_.b; }
  int64_t int_value() const { return kind_ == Kind::kBool ? scalar_.b : scalar_.i; }  // int or bool
  double float_value() const { return kind_ == Kind::kFloat ? scalar_.f : static_cast<double>(int_value()); }
  const std::string& str() const { return *static_cast<const std::string*>(heap_.get()); }
  const ValueList& list() const { return *static_cast<const ValueList*>(heap_.get()); }  // list or tuple
  const ValueDict& dict() const { return *static_cast<const ValueDict*>(heap_.get()); }
  Object* object() const { return static_cast<Object*>(heap_.get()); }
  std::shared_ptr<Object> shared_object() const { return std::static_pointer_cast<Object>(heap_); }
  // The message a use of this undefined value raises.
  const UndefinedInfo& undefined_info() const;
  // The error a use of this undefined value raises.
  absl::Status UndefinedError() const;

  bool Truthy() const;
  // Python's str() and repr() (jinja2 prints values with str(); undefined prints as '').
  std::string Str() const;
  std::string Repr() const;
  void AppendStr(std::string* out) const;
  void AppendRepr(std::string* out) const;
  // Python's type name: 'str', 'int', 'dict', 'NoneType', ...
  std::string_view TypeName() const;
  bool IsCallable() const;

 private:
  Kind kind_;
  union Scalar {
    bool b;
    int64_t i;
    double f;
  } scalar_{};
  std::shared_ptr<void> heap_;  // string, list, dict, UndefinedInfo or Object
};

// Python ==.
bool Equals(const Value& a, const Value& b);
// Python's ordering for <, <=, >, >=: negative, zero or positive; TypeError between types Python
// does not order (and UndefinedError for undefined operands).
absl::StatusOr<int> Compare(const Value& a, const Value& b);
// TypeError unless `key` can be a dict key (lists, dicts and objects cannot).
absl::Status CheckHashable(const Value& key);

struct CallArgs {
  ValueList positional;
  std::vector<std::pair<std::string, Value>> keywords;
};

// Objects: everything that is not plain data. Only a namespace accepts attribute assignment.
class Object {
 public:
  virtual ~Object() = default;
  virtual std::string_view TypeName() const = 0;
  virtual std::string Repr() const;
  virtual Value GetAttr(std::string_view name) const;
  virtual absl::Status SetAttr(std::string_view name, Value value);
  virtual bool IsCallable() const { return false; }
  virtual absl::StatusOr<Value> Call(CallArgs args, Interpreter& interpreter) const;
};

}  // namespace llm::chat
